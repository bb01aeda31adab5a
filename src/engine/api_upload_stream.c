/* api_upload_stream.c - s3d_upload_stream_*: an upload fed by writes of any size.
 *
 * The writing thread copies into part_size buffers; each full buffer is queued for a worker
 * thread that runs the multipart engine (s3d_xfer_put_multipart) and hands queued buffers to
 * it as parts. Buffers come back through the release hook. At most max_concurrency buffers
 * exist, so memory is bounded whatever the stream's length; a writer that finds none free
 * waits for one. A stream that ends inside its first buffer is sent as one PutObject from the
 * calling thread and no worker is ever started.
 *
 * Locking: mu guards everything below "shared"; the writer owns cur/cur_len; the worker owns
 * the engine. Order: mu is the only lock. */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/compiler.h"
#include "common/error.h"
#include "engine/api_transfer_int.h"
#include "engine/client_impl.h"
#include "engine/part_size.h"
#include "engine/slots.h"
#include "engine/xfer.h"
#include "s3direct/transfer.h"

struct qent {
    char *buf;
    uint64_t len;
    uint32_t number;
};

struct s3d_upload_stream {
    struct s3d_client *c;
    char *bucket, *key, *content_type;
    struct s3d_put_options po;
    uint64_t part;
    /* Writer-owned. */
    char *cur;
    uint64_t cur_len;
    uint64_t total;
    uint32_t next_number;
    int started, finished, failed;
    pthread_t th;
    /* Shared, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct s3d_slots slots; /* of part bytes */
    struct qent *q;         /* slots.n entries */
    size_t q_head, q_len;
    int eof, abort, worker_done, worker_rc;
    struct s3d_err_record werr;
};

static int st_next(void *ctx, struct s3d_put_part *p)
{
    struct s3d_upload_stream *s = ctx;
    int r;
    pthread_mutex_lock(&s->mu);
    if (s->abort) {
        pthread_mutex_unlock(&s->mu);
        return s3d_fail(S3D_ECANCELED, "upload stream to s3://%s/%s abandoned", s->bucket, s->key);
    }
    if (s->q_len > 0) {
        struct qent e = s->q[s->q_head];
        s->q_head = (s->q_head + 1) % s->slots.n;
        s->q_len--;
        s3d_slot_as_part(&s->slots, e.buf, e.len, e.number, p);
        r = S3D_FEED_OK;
    } else {
        r = s->eof ? S3D_FEED_DONE : S3D_FEED_NOT_YET;
    }
    pthread_mutex_unlock(&s->mu);
    return r;
}

static int st_release(void *ctx, const struct s3d_put_part *p)
{
    struct s3d_upload_stream *s = ctx;
    pthread_mutex_lock(&s->mu);
    s3d_slot_put(&s->slots, p->user);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static void *worker(void *arg)
{
    struct s3d_upload_stream *s = arg;
    const struct s3d_put_hooks h = {.next = st_next, .release = st_release, .ctx = s};
    int rc = s3d_xfer_put_multipart(s->c, s->bucket, s->key, &h, &s->po);
    pthread_mutex_lock(&s->mu);
    if (rc < 0)
        s3d_err_save(&s->werr, rc);
    s->worker_rc = rc;
    s->worker_done = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int s3d_upload_stream_new(struct s3d_client *c, const char *bucket, const char *key,
                          const struct s3d_transfer_options *opts, struct s3d_upload_stream **out)
{
    struct topts o = {0};
    struct s3d_upload_stream *s;
    int rc;

    if (out == NULL)
        return s3d_fail(S3D_EINVAL, "s3d_upload_stream_new: out is NULL");
    *out = NULL;
    /* The checks and the resolution of every byte transfer (api_transfer.c): max_concurrency
     * and part_size bounded, the concurrency lowered to what ulimit -n holds. */
    rc = s3d_topts_check_args(c, bucket, key);
    if (rc == 0)
        rc = s3d_topts_resolve(c, opts, &o);
    if (rc < 0)
        return rc;
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory");
    s->c = c;
    s3d_client_ref(c); /* dropped by s3d_upload_stream_free: it outlives s3d_client_free */
    s->bucket = s3d_strdup(bucket);
    s->key = s3d_strdup(key);
    s->content_type = s3d_strdup(o.content_type);
    s->part = s3d_upload_part_size(o.part_size, 0);
    s3d_topts_put(&o, 0, s->content_type, &s->po);
    s->next_number = 1;
    rc =
        s3d_slots_init(&s->slots, S3D_MAX(s3d_client_buffers(c, o.max_conc, s->part), 2u), s->part);
    s->q = calloc(s->slots.n, sizeof(*s->q));
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (rc < 0 || s->bucket == NULL || s->key == NULL || (o.content_type && !s->content_type) ||
        s->q == NULL) {
        s3d_upload_stream_free(s);
        return s3d_fail(S3D_ENOMEM, "out of memory");
    }
    *out = s;
    return 0;
}

/* Queues the writer's full (or last) buffer for the worker, starting it on the first. */
static int enqueue_cur(struct s3d_upload_stream *s)
{
    int rc = 0;
    if (s->next_number > S3D_MAX_PARTS)
        return s3d_fail(S3D_ETOOBIG,
                        "upload stream to s3://%s/%s: more than %u parts of %" PRIu64
                        " bytes; raise part_size",
                        s->bucket, s->key, S3D_MAX_PARTS, s->part);
    pthread_mutex_lock(&s->mu);
    s->q[(s->q_head + s->q_len) % s->slots.n] =
        (struct qent){.buf = s->cur, .len = s->cur_len, .number = s->next_number++};
    s->q_len++;
    pthread_mutex_unlock(&s->mu);
    s->cur = NULL;
    s->cur_len = 0;
    if (!s->started) {
        if (pthread_create(&s->th, NULL, worker, s) != 0)
            return s3d_fail(S3D_ENOMEM, "could not start the upload thread");
        s->started = 1;
    }
    return rc;
}

int s3d_upload_stream_write(struct s3d_upload_stream *s, const void *data, size_t len)
{
    const char *p = data;
    int rc;
    if (s == NULL || (data == NULL && len > 0))
        return s3d_fail(S3D_EINVAL, "s3d_upload_stream_write: NULL argument");
    if (s->finished || s->failed)
        return s3d_fail(S3D_EINVAL, "upload stream to s3://%s/%s is %s", s->bucket, s->key,
                        s->finished ? "finished" : "failed");
    while (len > 0) {
        uint64_t n;
        if (s->cur == NULL) {
            int oom = 0;
            pthread_mutex_lock(&s->mu);
            while ((s->cur = s3d_slot_get(&s->slots)) == NULL &&
                   !(oom = s3d_slots_free_count(&s->slots) > 0) && !s->worker_done)
                pthread_cond_wait(&s->cv, &s->mu);
            if (s->cur == NULL) {
                int wrc = s->worker_done ? s->worker_rc : 0;
                pthread_mutex_unlock(&s->mu);
                s->failed = 1;
                if (oom)
                    return s3d_fail(S3D_ENOMEM, "out of memory for a %" PRIu64 "-byte buffer",
                                    s->part);
                if (wrc < 0)
                    return s3d_err_restore(&s->werr);
                return s3d_fail(S3D_EPROTO, "upload stream ended early");
            }
            pthread_mutex_unlock(&s->mu);
        }
        n = S3D_MIN((uint64_t)len, s->part - s->cur_len);
        memcpy(s->cur + s->cur_len, p, (size_t)n);
        s->cur_len += n;
        s->total += n;
        p += n;
        len -= (size_t)n;
        if (s->cur_len == s->part) {
            rc = enqueue_cur(s);
            if (rc < 0) {
                s->failed = 1;
                return rc;
            }
        }
    }
    return 0;
}

int s3d_upload_stream_finish(struct s3d_upload_stream *s)
{
    int rc;
    if (s == NULL)
        return s3d_fail(S3D_EINVAL, "s3d_upload_stream_finish: stream is NULL");
    if (s->finished || s->failed)
        return s3d_fail(S3D_EINVAL, "upload stream to s3://%s/%s is %s", s->bucket, s->key,
                        s->finished ? "finished" : "failed");
    if (!s->started && s->total < s->c->multipart_threshold) {
        struct iovec v = {.iov_base = s->cur, .iov_len = (size_t)s->cur_len};
        s->po.total_hint = s->total;
        rc = s3d_xfer_put_single(s->c, s->bucket, s->key, &v, s->cur ? 1 : 0, &s->po);
        s->finished = rc == 0;
        s->failed = rc < 0;
        return rc;
    }
    if (s->cur_len > 0) {
        rc = enqueue_cur(s);
        if (rc < 0) {
            s->failed = 1;
            return rc;
        }
    }
    pthread_mutex_lock(&s->mu);
    s->eof = 1;
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);
    s->started = 0;
    rc = s->worker_rc < 0 ? s3d_err_restore(&s->werr) : 0;
    s->finished = rc == 0;
    s->failed = rc < 0;
    return rc;
}

void s3d_upload_stream_free(struct s3d_upload_stream *s)
{
    if (s == NULL)
        return;
    if (s->started) {
        /* Not finished: the worker's next hook fails, and the engine aborts the upload. */
        pthread_mutex_lock(&s->mu);
        s->abort = 1;
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->th, NULL);
    }
    s3d_slots_free(&s->slots);
    free(s->q);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->bucket);
    free(s->key);
    free(s->content_type);
    s3d_client_unref(s->c);
    free(s);
}
