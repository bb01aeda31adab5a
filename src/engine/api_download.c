/* api_download.c - s3d_download_to_buffer and s3d_download_to_file (transfer.h), built on the
 * engine (xfer.h).
 *
 * Memory: a download to a buffer writes the caller's memory directly, and a download to a
 * regular file writes the temporary file directly: curl's write callback puts each range's
 * bytes there with pwrite as they arrive, and sums them there (no buffer per request, no
 * mapped page to fault in). Those transfers, like a checkpoint load, are bounded only by the
 * client's level (the adaptive controller, conc.h). Downloads to a pipe or device go through
 * buffers of part_size bytes ("slots"), allocated as requests need them: output in order (a pipe)
 * holds at most twice the level, the requests in flight and as many done ones waiting for an
 * earlier range. A download job gets a slot in its prepare hook and gives it back once written.
 * Uploads are in api_upload.c, copies in api_copy.c, what they share in api_transfer.c. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/compiler.h"
#include "common/crc32c.h"
#include "common/error.h"
#include "common/fdio.h"
#include "engine/api_transfer_int.h"
#include "engine/ckpt_common.h"
#include "engine/client_impl.h"
#include "engine/conc.h"
#include "engine/own_checksum.h"
#include "engine/part_size.h"
#include "engine/slots.h"
#include "engine/tmpfile.h"
#include "engine/xfer.h"
#include "s3/ops.h"
#include "s3direct/transfer.h"

/* Runs the ranges after the first GET (first of total bytes done), progress counted over the
 * whole download. */
static int get_rest(struct s3d_client *c, struct s3d_get_job *jobs, size_t n,
                    const struct s3d_get_hooks *hooks, const struct topts *o, uint64_t first,
                    uint64_t total)
{
    struct s3d_progress_acc acc = {
        .fn = o->progress, .user = o->progress_user, .base = first, .total = total};
    if (o->progress != NULL && o->progress(o->progress_user, first, total) != 0)
        return s3d_fail(S3D_ECANCELED, "download canceled by the progress callback");
    if (n == 0)
        return 0;
    return s3d_xfer_get(c, jobs, n, hooks, o->max_conc, o->progress ? s3d_progress_acc_cb : NULL,
                        &acc, o->cancel);
}

int s3d_download_to_buffer(struct s3d_client *c, const char *bucket, const char *key,
                           uint64_t offset, uint64_t length, void *dst, uint64_t dst_cap,
                           uint64_t *out_len, const struct s3d_transfer_options *opts)
{
    struct s3d_object_info info;
    struct s3d_get_job *jobs = NULL;
    /* Zeroed: s3d_topts_resolve fills it, in a file the static analyzer does not see. */
    struct topts o = {0};
    struct s3d_op_sums sums;
    struct s3d_want_crc want;
    uint64_t len, got = 0;
    size_t n;
    int rc;

    if (out_len != NULL)
        *out_len = 0;
    rc = s3d_topts_check_args(c, bucket, key);
    if (rc == 0)
        rc = s3d_topts_resolve(c, opts, &o);
    if (rc < 0)
        return rc;
    if (dst == NULL && dst_cap > 0)
        return s3d_fail(S3D_EINVAL, "s3d_download_to_buffer: dst is NULL");
    if (dst_cap == 0 || length == 0) {
        /* Nothing can be written: only the size matters. */
        rc = s3d_op_head(&c->s3, bucket, key, &info);
        if (rc < 0)
            return rc;
        if (offset > info.size)
            return s3d_fail(S3D_ERANGE,
                            "s3://%s/%s: offset %" PRIu64 " is past the end (%" PRIu64 " bytes)",
                            bucket, key, offset, info.size);
        len = S3D_MIN(length, info.size - offset);
        if (len > 0)
            return s3d_fail(S3D_ETOOBIG,
                            "s3://%s/%s: %" PRIu64 " bytes do not fit the %" PRIu64 "-byte buffer",
                            bucket, key, len, dst_cap);
        return 0;
    }
    /* The first range tells the size and pins the version (ETag) for the others. */
    rc = s3d_xfer_get_first(c, bucket, key, offset, S3D_MIN(S3D_MIN(o.part_size, length), dst_cap),
                            dst, &got, &info, &sums, o.if_match, o.cancel);
    if (rc < 0)
        return rc;
    len = S3D_MIN(length, info.size - offset);
    if (len > dst_cap)
        return s3d_fail(S3D_ETOOBIG,
                        "s3://%s/%s: %" PRIu64 " bytes do not fit the %" PRIu64 "-byte buffer",
                        bucket, key, len, dst_cap);
    if (got > len)
        got = len;
    rc = s3d_xfer_make_jobs(bucket, key, info.etag, info.size, offset + got, len - got,
                            s3d_download_range_size(o.part_size, len), &jobs, &n);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n; i++)
        jobs[i].dst = (char *)dst + (jobs[i].offset - offset);
    rc = get_rest(c, jobs, n, NULL, &o, got, len);
    free(jobs);
    if (rc == 0 && offset == 0 && len == info.size) {
        rc = s3d_own_object_checksum(c, bucket, key, &info, &sums, got == len, &want);
        if (rc == 0 && want.b64[0] != '\0')
            rc = s3d_own_verify(bucket, key, &want, s3d_crc32c(0, dst, (size_t)len));
    }
    if (rc == 0 && out_len != NULL)
        *out_len = len;
    return rc;
}

static int write_all(int fd, const char *p, size_t n, int seekable, uint64_t off, const char *what)
{
    int rc = seekable ? s3d_pwrite_full(fd, p, n, off) : s3d_write_full(fd, p, n);
    if (rc < 0)
        return s3d_fail(s3d_err_from_errno(-rc), "write %s at %" PRIu64 ": %s", what, off,
                        strerror(-rc));
    return 0;
}

struct file_dl {
    struct s3d_client *c;
    struct s3d_slots slots;
    int fd;
    int seekable; /* the temporary file: each range is written there from curl (to_fd) */
    const char *what;
    struct s3d_get_job *jobs;
    size_t n_jobs;
    size_t next_write; /* stdout: the next job to write, in order */
    uint32_t *crcs;    /* per job, when the object has a checksum to check; else NULL */
};

static int dl_prepare(void *ctx, struct s3d_get_job *j)
{
    struct file_dl *f = ctx;
    if (f->seekable)
        return S3D_FEED_OK; /* written into the file as it arrives (dl_rest set the jobs) */
    /* In order: the requests in flight (at most the level) and as many done ones waiting for
     * an earlier range. The head of the order is always in flight or written, so a full
     * window always drains. */
    if (f->slots.n - s3d_slots_free_count(&f->slots) >=
        2 * (size_t)S3D_MAX(1u, s3d_conc_level(&f->c->conc)))
        return S3D_FEED_NOT_YET;
    j->dst = s3d_slot_get(&f->slots);
    if (j->dst == NULL)
        return s3d_slots_free_count(&f->slots) > 0
                   ? s3d_fail(S3D_ENOMEM, "out of memory for a %" PRIu64 "-byte buffer",
                              f->slots.size)
                   : S3D_FEED_NOT_YET;
    return S3D_FEED_OK;
}

static int dl_done(void *ctx, struct s3d_get_job *j)
{
    struct file_dl *f = ctx;
    int rc = 0;
    /* The bytes are summed while in memory: by curl's write callback for the file (the sum of
     * exactly what is in the file, resumed attempts included), here before a pipe's write. */
    if (f->crcs != NULL)
        f->crcs[j - f->jobs] = j->to_fd ? j->crc : s3d_crc32c(0, j->dst, (size_t)j->length);
    if (j->to_fd)
        return 0; /* already in the file */
    /* A pipe: write the jobs in order; later ones keep their slot until their turn. */
    j->state = 1;
    while (rc == 0 && f->next_write < f->n_jobs && f->jobs[f->next_write].state == 1) {
        struct s3d_get_job *w = &f->jobs[f->next_write++];
        rc = write_all(f->fd, w->dst, (size_t)w->length, 0, w->offset, f->what);
        s3d_slot_put(&f->slots, w->dst);
        w->state = 2;
    }
    return rc;
}

/* Opens where a download goes, once its first range succeeded: standard output; an existing
 * device or pipe, written in place and in order; else a temporary file beside path, so that
 * the rename is atomic (tmpfile.h: name, mode, leftovers of killed processes). */
static int dl_open_output(struct file_dl *f, const char *path, int to_stdout, int special,
                          struct s3d_tmpfile *tmp)
{
    int rc;
    if (to_stdout) {
        f->fd = STDOUT_FILENO;
        f->what = "standard output";
        f->seekable = 0;
        return 0;
    }
    if (special) {
        f->fd = open(path, O_WRONLY | O_CLOEXEC);
        if (f->fd < 0)
            return s3d_fail(s3d_err_from_errno(errno), "open %s: %s", path, strerror(errno));
        f->what = path;
        f->seekable = 0;
        return 0;
    }
    rc = s3d_tmpfile_create(path, 0, tmp);
    if (rc < 0)
        return rc;
    f->fd = tmp->fd;
    f->what = tmp->path;
    f->seekable = 1;
    return 0;
}

/* The ranges after the first one (got bytes, crc their CRC32C), each written out as it
 * arrives; then the object's CRC32C checked against want (empty = none to check). */
static int dl_rest(struct s3d_client *c, const char *bucket, const char *key, struct file_dl *f,
                   const struct s3d_object_info *info, const struct topts *o, uint64_t got,
                   uint32_t crc, const struct s3d_want_crc *want)
{
    const struct s3d_get_hooks hooks = {.prepare = dl_prepare, .done = dl_done, .ctx = f};
    int rc =
        s3d_xfer_make_jobs(bucket, key, info->etag, info->size, got, info->size - got,
                           s3d_download_range_size(o->part_size, info->size), &f->jobs, &f->n_jobs);
    if (rc == 0 && want->b64[0] != '\0' && f->n_jobs > 0) {
        f->crcs = calloc(f->n_jobs, sizeof(*f->crcs));
        if (f->crcs == NULL)
            rc = s3d_fail(S3D_ENOMEM, "out of memory");
    }
    for (size_t i = 0; rc == 0 && f->seekable && i < f->n_jobs; i++) {
        f->jobs[i].to_fd = 1; /* the file's offsets are the object's */
        f->jobs[i].fd = f->fd;
        f->jobs[i].fd_off = f->jobs[i].offset;
        f->jobs[i].sum = f->crcs != NULL;
    }
    if (rc == 0)
        rc = get_rest(c, f->jobs, f->n_jobs, &hooks, o, got, info->size);
    if (rc == 0 && want->b64[0] != '\0') {
        for (size_t i = 0; i < f->n_jobs; i++)
            crc = s3d_crc32c_combine(crc, f->crcs[i], f->jobs[i].length);
        rc = s3d_own_verify(bucket, key, want, crc);
    }
    return rc;
}

/* Finishes the output of a download that ended with rc: a device or pipe is closed; the
 * temporary file is renamed over path when rc is 0, else removed. Returns rc, or the error
 * of closing or renaming. */
static int dl_close_output(struct file_dl *f, const char *path, int to_stdout, int special,
                           struct s3d_tmpfile *tmp, int rc)
{
    if (special) {
        if (close(f->fd) < 0 && rc == 0)
            rc = s3d_fail(s3d_err_from_errno(errno), "close %s: %s", path, strerror(errno));
    } else if (!to_stdout && tmp->path != NULL) {
        if (rc == 0)
            rc = s3d_tmpfile_commit(tmp, path);
        else
            s3d_tmpfile_discard(tmp);
    }
    return rc;
}

int s3d_download_to_file(struct s3d_client *c, const char *bucket, const char *key,
                         const char *path, const struct s3d_transfer_options *opts)
{
    struct s3d_object_info info;
    struct file_dl f;
    /* Zeroed: s3d_topts_resolve fills it, in a file the static analyzer does not see. */
    struct topts o = {0};
    struct s3d_tmpfile tmp = {NULL, -1};
    char *first = NULL;
    struct s3d_op_sums sums;
    struct s3d_want_crc want;
    uint64_t got = 0;
    uint32_t crc = 0;
    struct stat st;
    int to_stdout, special = 0, rc;

    memset(&f, 0, sizeof(f));
    f.fd = -1;
    rc = s3d_topts_check_args(c, bucket, key);
    if (rc == 0)
        rc = s3d_topts_resolve(c, opts, &o);
    if (rc < 0)
        return rc;
    if (path == NULL || path[0] == '\0')
        return s3d_fail(S3D_EINVAL, "s3d_download_to_file: empty path");
    to_stdout = strcmp(path, "-") == 0;
    /* An existing device or pipe (/dev/null, a FIFO) is written in place, in order: renaming
     * a temporary file over it would replace the device node. */
    if (!to_stdout && stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            return s3d_fail(S3D_EINVAL, "%s is a directory", path);
        special = !S_ISREG(st.st_mode);
    }
    /* The first range, into the first slot, tells the size and pins the version (ETag) that
     * every later range must still have (If-Match). Nothing is created before it succeeds.
     * It is short (S3D_FIRST_RANGE, as a load's first GET): every other range waits for it,
     * and a whole part on a slow connection would be most of a download's time. Slots: as
     * many as the cap, allocated only as requests take them (see the top of the file). */
    f.c = c;
    rc = s3d_slots_init(&f.slots, o.max_conc, o.part_size);
    if (rc < 0)
        goto out;
    first = s3d_slot_get(&f.slots);
    if (first == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "out of memory for a %" PRIu64 "-byte buffer", o.part_size);
        goto out;
    }
    rc = s3d_xfer_get_first(c, bucket, key, 0, S3D_MIN(o.part_size, (uint64_t)S3D_FIRST_RANGE),
                            first, &got, &info, &sums, o.if_match, o.cancel);
    if (rc == 0)
        rc = s3d_own_object_checksum(c, bucket, key, &info, &sums, got == info.size, &want);
    if (rc < 0)
        goto out;
    S3D_ASSERT(rc == 0); /* both return 0 or a negative code: want is filled */
    rc = dl_open_output(&f, path, to_stdout, special, &tmp);
    if (rc < 0)
        goto out;
    if (want.b64[0] != '\0')
        crc = s3d_crc32c(0, first, (size_t)got);
    rc = write_all(f.fd, first, (size_t)got, f.seekable, 0, f.what);
    s3d_slot_put(&f.slots, first);
    if (rc == 0)
        rc = dl_rest(c, bucket, key, &f, &info, &o, got, crc, &want);
    rc = dl_close_output(&f, path, to_stdout, special, &tmp, rc);
out:
    s3d_slots_free(&f.slots);
    free(f.crcs);
    free(f.jobs);
    return rc;
}
