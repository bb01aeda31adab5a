/* api_transfer.c - the public byte transfers of transfer.h, built on the engine (xfer.h).
 *
 * Memory: buffer transfers read and write the caller's memory directly, and so does a
 * download to a regular file: its ranges land in the temporary file's mapped pages. Those
 * transfers, like a checkpoint load or save, are bounded only by the client's level (the
 * adaptive controller, conc.h). Downloads to a pipe or device and uploads from a file or
 * standard input go through buffers of part_size bytes ("slots"), allocated as requests need
 * them: an upload's part holds one from its read until its answer, so the buffers in use
 * follow the level; output in order (a pipe) holds at most twice the level, the requests in
 * flight and as many done ones waiting for an earlier range. Upload streams hold
 * at most s3d_client_buffers() slots (the fixed concurrency, or what staging_bytes holds
 * while it adapts). A download job gets a slot in its prepare hook and gives it back once
 * written; an upload part is read into a slot in the next hook and the slot comes back in
 * release. Copies (s3d_copy_object) are in api_copy.c. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/compiler.h"
#include "common/crc32c.h"
#include "common/error.h"
#include "common/fdio.h"
#include "common/log.h"
#include "common/opts.h"
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
#include "s3/uri.h"
#include "s3direct/transfer.h"

int s3d_topts_resolve(struct s3d_client *c, const struct s3d_transfer_options *in, struct topts *o)
{
    struct s3d_transfer_options t;
    s3d_opts_copy(&t, sizeof(t), in);
    o->progress = t.progress;
    o->progress_user = t.progress_user;
    o->cancel = t.cancel;
    o->max_conc = t.max_concurrency ? t.max_concurrency : c->max_concurrency;
    o->part_size = t.part_size ? t.part_size : c->part_size;
    o->content_type = t.content_type;
    o->if_match = t.if_match;
    if (o->max_conc > S3D_MAX_CONCURRENCY)
        return s3d_fail(S3D_EINVAL, "max_concurrency %u is over %u", o->max_conc,
                        S3D_MAX_CONCURRENCY);
    o->max_conc = s3d_fd_clamp(o->max_conc);
    if (o->part_size > S3D_MAX_PART_SIZE)
        return s3d_fail(S3D_EINVAL, "part_size %" PRIu64 " is over 5 GiB", o->part_size);
    return 0;
}

int s3d_topts_check_args(struct s3d_client *c, const char *bucket, const char *key)
{
    int rc = s3d_client_check(c);
    if (rc < 0)
        return rc;
    if (bucket == NULL || key == NULL || key[0] == '\0')
        return s3d_fail(S3D_EINVAL, "bucket or key is empty");
    rc = s3d_bucket_name_check(bucket, strlen(bucket));
    /* 0 or S3D_EURI (s3/uri.h): the callers skip s3d_topts_resolve (which fills their topts) on any
     * non-zero result, then return only a negative one. */
    S3D_ASSERT(rc <= 0);
    return rc;
}

/* ---- downloads ---------------------------------------------------------------------------- */

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
    struct topts o;
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
    char *map; /* the temporary file mapped (s3d_tmpfile_map): ranges land there; else NULL */
    uint64_t map_len;
    int fd;
    int seekable;
    const char *what;
    struct s3d_get_job *jobs;
    size_t n_jobs;
    size_t next_write; /* stdout: the next job to write, in order */
    uint32_t *crcs;    /* per job, when the object has a checksum to check; else NULL */
};

static int dl_prepare(void *ctx, struct s3d_get_job *j)
{
    struct file_dl *f = ctx;
    if (f->map != NULL) {
        j->dst = f->map + j->offset;
        return S3D_FEED_OK;
    }
    /* In order: the requests in flight (at most the level) and as many done ones waiting for
     * an earlier range. The head of the order is always in flight or written, so a full
     * window always drains. */
    if (!f->seekable && f->slots.n - s3d_slots_free_count(&f->slots) >=
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
    /* The bytes are summed while in memory, before they go to the file. */
    if (f->crcs != NULL)
        f->crcs[j - f->jobs] = s3d_crc32c(0, j->dst, (size_t)j->length);
    if (f->map != NULL)
        return 0; /* already in the file */
    if (f->seekable) {
        rc = write_all(f->fd, j->dst, (size_t)j->length, 1, j->offset, f->what);
        s3d_slot_put(&f->slots, j->dst);
        return rc;
    }
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
    if (f->map != NULL) {
        munmap(f->map, (size_t)f->map_len); /* the commit's fsync writes its pages */
        f->map = NULL;
    }
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
    struct topts o;
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
    /* A regular file: the ranges land in its mapped pages, no buffer per request. */
    rc = 1; /* not mapped */
    if (f.seekable && info.size > got) {
        void *m;
        rc = s3d_tmpfile_map(&tmp, info.size, &m);
        if (rc == 0) {
            f.map = m;
            f.map_len = info.size;
            memcpy(f.map, first, (size_t)got);
        }
    }
    if (rc == 1)
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

/* ---- uploads ------------------------------------------------------------------------------ */

struct buf_up {
    const char *src;
    uint64_t len, part, next_off;
    uint32_t next_number;
    struct iovec *iovs; /* one per part */
};

static int bufup_next(void *ctx, struct s3d_put_part *p)
{
    struct buf_up *b = ctx;
    struct iovec *v;
    if (b->next_off >= b->len)
        return S3D_FEED_DONE;
    v = &b->iovs[b->next_number - 1];
    v->iov_base = (void *)(b->src + b->next_off);
    v->iov_len = (size_t)S3D_MIN(b->part, b->len - b->next_off);
    p->part_number = b->next_number++;
    p->iov = v;
    p->iovcnt = 1;
    p->length = v->iov_len;
    b->next_off += v->iov_len;
    return S3D_FEED_OK;
}

void s3d_topts_put(const struct topts *o, uint64_t total, const char *content_type,
                   struct s3d_put_options *po)
{
    memset(po, 0, sizeof(*po));
    po->content_type = content_type ? content_type : o->content_type;
    po->max_concurrency = o->max_conc;
    po->total_hint = total;
    po->progress = o->progress;
    po->progress_user = o->progress_user;
    po->cancel = o->cancel;
}

/* A multipart upload of the caller's memory: each part one iovec into it, no copy. */
static int upload_buffer_multipart(struct s3d_client *c, const char *bucket, const char *key,
                                   const void *src, uint64_t len, uint64_t part_size,
                                   const struct s3d_put_options *po)
{
    struct buf_up b = {.src = src, .len = len, .next_number = 1};
    const struct s3d_put_hooks h = {.next = bufup_next, .ctx = &b};
    int rc;
    b.part = s3d_upload_part_size(part_size, len);
    b.iovs = calloc((size_t)((len + b.part - 1) / b.part), sizeof(*b.iovs));
    if (b.iovs == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory");
    rc = s3d_xfer_put_multipart(c, bucket, key, &h, po);
    free(b.iovs);
    return rc;
}

int s3d_upload_from_buffer(struct s3d_client *c, const char *bucket, const char *key,
                           const void *src, uint64_t len, const struct s3d_transfer_options *opts)
{
    struct s3d_put_options po;
    struct topts o;
    int rc = s3d_topts_check_args(c, bucket, key);
    if (rc == 0)
        rc = s3d_topts_resolve(c, opts, &o);
    if (rc < 0)
        return rc;
    if (src == NULL && len > 0)
        return s3d_fail(S3D_EINVAL, "s3d_upload_from_buffer: src is NULL");
    s3d_topts_put(&o, len, NULL, &po);
    if (len < c->multipart_threshold) {
        struct iovec v = {.iov_base = (void *)src, .iov_len = (size_t)len};
        return s3d_xfer_put_single(c, bucket, key, &v, 1, &po);
    }
    return upload_buffer_multipart(c, bucket, key, src, len, o.part_size, &po);
}

/* Parts read from a file descriptor in order, each into a slot. */
struct fd_up {
    struct s3d_slots slots;
    int fd;
    const char *what;
    int eof;
    uint32_t next_number;
    uint64_t part;
    char *pending; /* a slot already filled (the first part), or NULL */
    uint64_t pending_len;
    /* A regular file: its size and mtime when the upload started, and the bytes read so far.
     * A file that shrinks, grows or is rewritten meanwhile fails the upload, as in the AWS
     * CLI, rather than uploading a truncated or mixed object. */
    int regular;
    struct stat st0;
    uint64_t total;
};

/* 0 while the file read so far still matches what it was when the upload started. */
static int check_unchanged(struct fd_up *f)
{
    struct stat st;
    if (!f->regular)
        return 0;
    if (f->total > (uint64_t)f->st0.st_size || (f->eof && f->total < (uint64_t)f->st0.st_size))
        return s3d_fail(S3D_EIO,
                        "%s: file changed while reading (%lld bytes when the upload started, "
                        "%s %llu)",
                        f->what, (long long)f->st0.st_size, f->eof ? "it ended at" : "read",
                        (unsigned long long)f->total);
    if (!f->eof)
        return 0;
    if (fstat(f->fd, &st) == 0 &&
        (st.st_size != f->st0.st_size || st.st_mtim.tv_sec != f->st0.st_mtim.tv_sec ||
         st.st_mtim.tv_nsec != f->st0.st_mtim.tv_nsec))
        return s3d_fail(S3D_EIO,
                        "%s: file changed while reading (modified during the upload; %lld "
                        "bytes now)",
                        f->what, (long long)st.st_size);
    return 0;
}

/* Reads up to n bytes (fewer only at end of input). */
static int read_full(int fd, char *p, uint64_t n, uint64_t *got, int *eof, const char *what)
{
    int rc = s3d_read_full(fd, p, n, got);
    if (rc < 0)
        return s3d_fail(s3d_err_from_errno(-rc), "read %s: %s", what, strerror(-rc));
    if (*got < n)
        *eof = 1;
    return 0;
}

static int fdup_next(void *ctx, struct s3d_put_part *p)
{
    struct fd_up *f = ctx;
    char *buf;
    uint64_t got;
    int rc;
    if (f->pending != NULL) {
        buf = f->pending;
        got = f->pending_len;
        f->pending = NULL;
    } else {
        if (f->eof)
            return S3D_FEED_DONE;
        buf = s3d_slot_get(&f->slots);
        if (buf == NULL)
            return s3d_slots_free_count(&f->slots) > 0 ? s3d_fail(S3D_ENOMEM, "out of memory")
                                                       : S3D_FEED_NOT_YET;
        rc = read_full(f->fd, buf, f->part, &got, &f->eof, f->what);
        if (rc < 0)
            return rc;
        f->total += got;
        rc = check_unchanged(f);
        if (rc < 0)
            return rc;
        if (got == 0) {
            s3d_slot_put(&f->slots, buf);
            return S3D_FEED_DONE;
        }
    }
    if (f->next_number > S3D_MAX_PARTS)
        return s3d_fail(S3D_ETOOBIG,
                        "%s: more than %u parts of %" PRIu64 " bytes; raise "
                        "part_size",
                        f->what, S3D_MAX_PARTS, f->part);
    s3d_slot_as_part(&f->slots, buf, got, f->next_number++, p);
    return S3D_FEED_OK;
}

static int fdup_release(void *ctx, const struct s3d_put_part *p)
{
    struct fd_up *f = ctx;
    s3d_slot_put(&f->slots, p->user);
    return 0;
}

/* Reads the first part into a slot, kept as pending for fdup_next: the size of the input
 * decides between one PUT and a multipart upload. */
static int fdup_read_first(struct fd_up *f, uint64_t size_hint)
{
    uint64_t first;
    int rc;
    f->pending = s3d_slot_get(&f->slots);
    if (f->pending == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory for a %" PRIu64 "-byte buffer", f->part);
    rc = read_full(f->fd, f->pending, f->part, &first, &f->eof, f->what);
    if (rc < 0)
        return rc;
    f->pending_len = first;
    f->total = first;
    if (!f->eof && f->regular && first == size_hint) {
        /* A regular file read to its size: check for the end without another part. */
        char probe;
        ssize_t r = read(f->fd, &probe, 1);
        if (r == 0)
            f->eof = 1;
        else if (r > 0)
            f->total++;
    }
    return check_unchanged(f);
}

/* Uploads what fd yields: one PUT when it ends within the first part and below the
 * threshold, else a multipart upload. st: the regular file's stat (NULL: a pipe, size unknown). */
static int upload_fd(struct s3d_client *c, const char *bucket, const char *key, int fd,
                     const char *what, const struct stat *st, const struct topts *o,
                     const char *content_type)
{
    uint64_t size_hint = st != NULL ? (uint64_t)st->st_size : 0;
    struct s3d_put_options po;
    struct fd_up f = {.fd = fd, .what = what};
    const struct s3d_put_hooks h = {.next = fdup_next, .release = fdup_release, .ctx = &f};
    uint64_t first;
    int rc;

    if (st != NULL) {
        f.regular = 1;
        f.st0 = *st;
    }
    f.part = s3d_upload_part_size(o->part_size, size_hint);
    if (size_hint != 0 && size_hint < c->multipart_threshold)
        f.part = size_hint; /* one PUT of the whole file */
    f.next_number = 1;
    /* As many slots as the cap, allocated as parts take them: a part is read when a request
     * may start, so the buffers in use follow the level, as a save's parts do. */
    rc = s3d_slots_init(&f.slots, o->max_conc, f.part);
    if (rc < 0)
        goto out;
    rc = fdup_read_first(&f, size_hint);
    if (rc < 0)
        goto out;
    first = f.pending_len;
    s3d_topts_put(o, size_hint, content_type, &po);
    if (f.eof && first < c->multipart_threshold) {
        struct iovec v = {.iov_base = f.pending, .iov_len = (size_t)first};
        po.total_hint = first;
        rc = s3d_xfer_put_single(c, bucket, key, &v, 1, &po);
        goto out;
    }
    rc = s3d_xfer_put_multipart(c, bucket, key, &h, &po);
out:
    s3d_slots_free(&f.slots);
    return rc;
}

int s3d_upload_from_file(struct s3d_client *c, const char *bucket, const char *key,
                         const char *path, const struct s3d_transfer_options *opts)
{
    struct topts o;
    struct stat st;
    int fd, rc = s3d_topts_check_args(c, bucket, key);
    if (rc == 0)
        rc = s3d_topts_resolve(c, opts, &o);
    if (rc < 0)
        return rc;
    if (path == NULL || path[0] == '\0')
        return s3d_fail(S3D_EINVAL, "s3d_upload_from_file: empty path");
    if (strcmp(path, "-") == 0)
        return upload_fd(c, bucket, key, STDIN_FILENO, "standard input", NULL, &o, NULL);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return s3d_fail(s3d_err_from_errno(errno), "open %s: %s", path, strerror(errno));
    if (fstat(fd, &st) < 0) {
        rc = s3d_fail(s3d_err_from_errno(errno), "stat %s: %s", path, strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
        rc = s3d_fail(S3D_EINVAL, "%s is a directory", path);
    } else {
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
        rc = upload_fd(c, bucket, key, fd, path, S_ISREG(st.st_mode) ? &st : NULL, &o, NULL);
    }
    close(fd);
    return rc;
}
