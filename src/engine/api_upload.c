/* api_upload.c - s3d_upload_from_buffer and s3d_upload_from_file (transfer.h), built on the
 * engine (xfer.h).
 *
 * Memory: an upload from a buffer sends the caller's memory directly (one iovec per part),
 * bounded only by the client's level (the adaptive controller, conc.h), like a checkpoint
 * save. An upload from a regular file holds no part in memory either: each part is a range of
 * the file (s3d_put_part from_fd), read by the engine in small chunks for its checksums, then
 * again by curl's read callback straight into curl's buffer (xfer.h). Standard input, pipes
 * and files that look empty go through buffers of part_size bytes ("slots"), allocated as
 * requests need them: a part is read into a slot in the next hook,
 * holds it until its answer and gives it back in release, so the buffers in use follow the
 * level. Upload streams (api_upload_stream.c) hold at most s3d_client_buffers() slots (the
 * fixed concurrency, or what staging_bytes holds while it adapts). Downloads are in
 * api_download.c, copies in api_copy.c, what they share in api_transfer.c. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common/compiler.h"
#include "common/error.h"
#include "common/fdio.h"
#include "engine/api_transfer_int.h"
#include "engine/client_impl.h"
#include "engine/part_size.h"
#include "engine/slots.h"
#include "engine/xfer.h"
#include "s3/limits.h"
#include "s3direct/transfer.h"

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
    /* Zeroed: s3d_topts_resolve fills it, in a file the static analyzer does not see. */
    struct topts o = {0};
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
    uint64_t released; /* bytes of the parts the server accepted (ranges of the file) */
    /* Last modified more than S3D_SETTLED_S before the upload began: any later write gives it
     * another mtime, so fstat alone finds a change and its parts may be read once as they are
     * sent (s3d_put_part.read_once). A file written just before may be written again within
     * the same timestamp tick (or 2 s on FAT, 1 s on ext4 with small inodes): its parts keep
     * the two passes, whose checksums catch any change. */
    int settled;
};

#define S3D_SETTLED_S 3

/* Whether st was last modified more than S3D_SETTLED_S seconds ago (a future mtime: no). */
static int settled(const struct stat *st)
{
    struct timespec now;
    return clock_gettime(CLOCK_REALTIME, &now) == 0 &&
           (int64_t)now.tv_sec - (int64_t)st->st_mtim.tv_sec > S3D_SETTLED_S;
}

static int same_time(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

/* 0 while the file's size, mtime and ctime are what they were when the upload started (as
 * tar and rsync check): a write or a truncation since then changed them, unless within one
 * timestamp tick of the first stat. */
static int check_stat(struct fd_up *f)
{
    struct stat st;
    if (fstat(f->fd, &st) == 0 &&
        (st.st_size != f->st0.st_size || !same_time(&st.st_mtim, &f->st0.st_mtim) ||
         !same_time(&st.st_ctim, &f->st0.st_ctim)))
        return s3d_fail(S3D_EIO,
                        "%s: file changed while reading (modified during the upload; %lld "
                        "bytes now)",
                        f->what, (long long)st.st_size);
    return 0;
}

/* 0 while the file read so far still matches what it was when the upload started. */
static int check_unchanged(struct fd_up *f)
{
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
    return check_stat(f);
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

/* A regular file's next part: a range of it (s3d_put_part from_fd), which the engine reads
 * for its checksums and again as it sends it, or once as it sends it in signed chunks, never
 * into a buffer of its own. Once every part is handed out, the file must still be what it was
 * (and again once every part is accepted: fdup_release_range). */
static int fdup_next_range(void *ctx, struct s3d_put_part *p)
{
    struct fd_up *f = ctx;
    uint64_t size = (uint64_t)f->st0.st_size;
    if (f->total >= size) {
        f->eof = 1;
        int rc = check_unchanged(f);
        return rc < 0 ? rc : S3D_FEED_DONE;
    }
    if (f->next_number > S3D_MAX_PARTS)
        return s3d_fail(S3D_ETOOBIG, "%s: more than %u parts of %" PRIu64 " bytes; raise part_size",
                        f->what, S3D_MAX_PARTS, f->part);
    p->part_number = f->next_number++;
    p->from_fd = 1;
    p->read_once = f->settled;
    p->fd = f->fd;
    p->fd_offset = f->total;
    p->length = S3D_MIN(f->part, size - f->total);
    f->total += p->length;
    return S3D_FEED_OK;
}

/* A part of a regular file the server accepted: after the last one, before the upload is
 * completed, the file must still be what it was. With parts sent in signed chunks, each read
 * once as it is sent (engine/xfer.h), this is what detects a file changed in place. */
static int fdup_release_range(void *ctx, const struct s3d_put_part *p)
{
    struct fd_up *f = ctx;
    f->released += p->length;
    return f->released == (uint64_t)f->st0.st_size ? check_stat(f) : 0;
}

/* The one PUT of a regular file, its checksums computed: the file must still be what it was. */
static int single_body_read(void *ctx)
{
    struct fd_up *f = ctx;
    f->eof = 1;
    return check_unchanged(f);
}

/* A regular file of st_size bytes, sent from the file itself (parts as ranges of it): one PUT
 * below the threshold, else a multipart upload. */
static int upload_ranges(struct s3d_client *c, const char *bucket, const char *key, struct fd_up *f,
                         struct s3d_put_options *po)
{
    const struct s3d_put_hooks h = {
        .next = fdup_next_range, .release = fdup_release_range, .ctx = f};
    uint64_t size = (uint64_t)f->st0.st_size;
    if (size < c->multipart_threshold) {
        struct s3d_put_part p = {.part_number = 1, .length = size, .from_fd = 1, .fd = f->fd};
        f->total = size;
        po->body_read = single_body_read;
        po->body_ctx = f;
        return s3d_xfer_put_single_part(c, bucket, key, &p, po);
    }
    return s3d_xfer_put_multipart(c, bucket, key, &h, po);
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
 * threshold, else a multipart upload. st: the regular file's stat (NULL: a pipe, size unknown).
 * A regular file that is not empty is sent from the file (upload_ranges); the rest through
 * slots, read in order. */
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
        f.settled = settled(st);
    }
    f.part = s3d_upload_part_size(o->part_size, size_hint);
    if (size_hint != 0 && size_hint < c->multipart_threshold)
        f.part = size_hint; /* one PUT of the whole file */
    f.next_number = 1;
    if (st != NULL && st->st_size > 0) {
        /* An empty size may still read bytes (/proc): the slots find out. */
        s3d_topts_put(o, size_hint, content_type, &po);
        return upload_ranges(c, bucket, key, &f, &po);
    }
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
    /* Zeroed: s3d_topts_resolve fills it, in a file the static analyzer does not see. */
    struct topts o = {0};
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
