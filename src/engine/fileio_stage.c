/* fileio_stage.c - what the file reader and writer share: I/O failures that name the path
 * and offset, cancel and progress checks, per-call streams, and the ring of staging
 * chunks in flight (see fileio_stage.h). */
#include "engine/fileio_stage.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/compiler.h"
#include "common/crc32c.h"
#include "common/fdio.h"
#include "common/error.h"
#include "common/log.h"
#include "engine/pool.h"

int fio_io_fail(int e, const char *what, const char *path, uint64_t off)
{
    return s3d_fail(s3d_err_from_errno(e), "%s %s at offset %llu: %s", what, path,
                    (unsigned long long)off, strerror(e));
}

int fio_check_cancel(const struct s3d_file_io_opts *o, uint64_t done, uint64_t total)
{
    if (o->cancel != NULL && s3d_cancel_requested(o->cancel))
        return s3d_fail(S3D_ECANCELED, "canceled");
    if (o->progress != NULL && o->progress(o->progress_user, done, total) != 0)
        return s3d_fail(S3D_ECANCELED, "canceled by the progress callback");
    return 0;
}

void fio_ring_init(struct fio_ring *r, struct s3d_device *dev, struct s3d_pool *pool)
{
    memset(r, 0, sizeof(*r));
    r->dev = dev;
    r->pool = pool;
    r->max = S3D_MIN((size_t)FIO_MAX_INFLIGHT, s3d_pool_chunk_count(pool));
}

/* 1 when every event of slot s is complete, 0 if not, < 0 on error. */
int fio_slot_query(struct fio_ring *r, struct fio_slot *s, int block)
{
    for (int o = 0; o < S3D_MAX_DEVICES; o++) {
        if (!s->recorded[o])
            continue;
        int rc = block ? s3d_device_event_sync(r->dev, s->ev[o])
                       : s3d_device_event_query(r->dev, s->ev[o]);
        if (rc < 0)
            return rc;
        if (!block && rc == 0)
            return 0;
        s->recorded[o] = 0;
    }
    return 1;
}

struct fio_slot *fio_ring_oldest(struct fio_ring *r)
{
    return r->count ? &r->s[r->head] : NULL;
}

void fio_ring_pop(struct fio_ring *r)
{
    struct fio_slot *s = &r->s[r->head];
    s3d_pool_put(r->pool, s->chunk);
    s->chunk = NULL;
    r->head = (r->head + 1) % FIO_MAX_INFLIGHT;
    r->count--;
}

/* On every exit path: waits for whatever copy may still use a chunk, then returns the
 * chunks and frees the events. */
void fio_ring_drain(struct fio_ring *r)
{
    while (r->count > 0) {
        fio_slot_query(r, fio_ring_oldest(r), 1);
        fio_ring_pop(r);
    }
    for (int i = 0; i < FIO_MAX_INFLIGHT; i++)
        for (int o = 0; o < S3D_MAX_DEVICES; o++) {
            s3d_device_event_free(r->dev, r->s[i].ev[o]);
            r->s[i].ev[o] = NULL;
        }
}

static struct fio_slot *push_chunk(struct fio_ring *r, void *chunk)
{
    struct fio_slot *s = &r->s[(r->head + r->count) % FIO_MAX_INFLIGHT];
    s->chunk = chunk;
    memset(s->recorded, 0, sizeof(s->recorded));
    memset(&s->job, 0, sizeof(s->job));
    r->count++;
    return s;
}

int fio_ring_next(struct fio_ring *r, struct s3d_cancel *cancel, fio_slot_done_fn on_done,
                  void *ctx, struct fio_slot **out)
{
    void *chunk = NULL;
    int rc;

    for (;;) {
        /* Release what already finished, without waiting. */
        while (r->count > 0) {
            rc = fio_slot_query(r, fio_ring_oldest(r), 0);
            if (rc < 0)
                return rc;
            if (rc == 0)
                break;
            if (on_done != NULL && (rc = on_done(ctx, fio_ring_oldest(r))) < 0)
                return rc;
            fio_ring_pop(r);
        }
        if (r->count < r->max && (chunk = s3d_pool_try_get(r->pool)) != NULL)
            break;
        if (r->count > 0) {
            /* Full, or the pool is empty: wait for our oldest copy. */
            if ((rc = fio_slot_query(r, fio_ring_oldest(r), 1)) < 0)
                return rc;
            if (on_done != NULL && (rc = on_done(ctx, fio_ring_oldest(r))) < 0)
                return rc;
            fio_ring_pop(r);
            continue;
        }
        /* Nothing of ours in flight and other users hold every chunk: wait for one. */
        chunk = s3d_pool_get(r->pool, cancel);
        if (chunk == NULL)
            return s3d_fail(S3D_ECANCELED, "canceled while waiting for a staging buffer");
        break;
    }
    *out = push_chunk(r, chunk);
    return 0;
}

int fio_ring_try_push(struct fio_ring *r, struct fio_slot **out)
{
    void *chunk;
    if (r->count >= r->max || (chunk = s3d_pool_try_get(r->pool)) == NULL)
        return 0;
    *out = push_chunk(r, chunk);
    return 1;
}

/* ---- reader threads ------------------------------------------------------------------- */

int s3d_fileio_reads_peak;
int s3d_fileio_read_hold;

/* Called with rs->mu held: the hold of s3d_fileio_read_hold (tests), once per reader set. */
static void hold_for_second(struct fio_readers *rs)
{
    struct timespec until;
    if (!__atomic_load_n(&s3d_fileio_read_hold, __ATOMIC_RELAXED) || rs->held)
        return;
    rs->held = 1;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 2;
    while (rs->peak < 2 && !rs->stop) /* not running: the second may be done already */
        if (pthread_cond_timedwait(&rs->cv, &rs->mu, &until) != 0)
            break;
}

static void *reader_main(void *arg)
{
    struct fio_readers *rs = arg;
    pthread_mutex_lock(&rs->mu);
    for (;;) {
        while (rs->q_count == 0 && !rs->stop)
            pthread_cond_wait(&rs->cv, &rs->mu);
        if (rs->stop)
            break;
        struct fio_read_job *j = rs->q[rs->q_head];
        rs->q_head = (rs->q_head + 1) % FIO_MAX_INFLIGHT;
        rs->q_count--;
        j->state = 2;
        rs->running++;
        rs->peak = S3D_MAX(rs->peak, rs->running);
        int peak = __atomic_load_n(&s3d_fileio_reads_peak, __ATOMIC_RELAXED);
        if (rs->running > peak)
            __atomic_store_n(&s3d_fileio_reads_peak, rs->running, __ATOMIC_RELAXED);
        pthread_cond_broadcast(&rs->cv);
        hold_for_second(rs);
        pthread_mutex_unlock(&rs->mu);
        uint64_t got = 0;
        int rc = s3d_pread_full(j->fd, j->buf, j->len, j->off, &got);
        pthread_mutex_lock(&rs->mu);
        j->rc = rc;
        j->got = got;
        j->state = 3;
        rs->running--;
        pthread_cond_broadcast(&rs->cv);
    }
    pthread_mutex_unlock(&rs->mu);
    return NULL;
}

void fio_readers_start(struct fio_readers *rs, int n)
{
    memset(rs, 0, sizeof(*rs));
    pthread_mutex_init(&rs->mu, NULL);
    pthread_cond_init(&rs->cv, NULL);
    n = S3D_MIN(n, FIO_READERS);
    for (int i = 0; i < n; i++) {
        int rc = pthread_create(&rs->th[i], NULL, reader_main, rs);
        if (rc != 0) {
            S3D_DEBUG("fileio: %d reader thread(s): %s", i, strerror(rc));
            break;
        }
        rs->n++;
    }
}

void fio_readers_submit(struct fio_readers *rs, struct fio_read_job *job)
{
    if (rs->n == 0) {
        job->rc = s3d_pread_full(job->fd, job->buf, job->len, job->off, &job->got);
        job->state = 3;
        return;
    }
    pthread_mutex_lock(&rs->mu);
    S3D_ASSERT(rs->q_count < FIO_MAX_INFLIGHT);
    job->state = 1;
    job->rc = 0;
    job->got = 0;
    rs->q[(rs->q_head + rs->q_count) % FIO_MAX_INFLIGHT] = job;
    rs->q_count++;
    pthread_cond_broadcast(&rs->cv);
    pthread_mutex_unlock(&rs->mu);
}

void fio_readers_wait(struct fio_readers *rs, struct fio_read_job *job)
{
    if (rs->n == 0)
        return;
    pthread_mutex_lock(&rs->mu);
    while (job->state != 3)
        pthread_cond_wait(&rs->cv, &rs->mu);
    pthread_mutex_unlock(&rs->mu);
}

void fio_readers_stop(struct fio_readers *rs)
{
    pthread_mutex_lock(&rs->mu);
    rs->stop = 1;
    /* Jobs not started never write their chunk; those running finish before the join. */
    for (; rs->q_count > 0; rs->q_count--) {
        rs->q[rs->q_head]->state = 0;
        rs->q_head = (rs->q_head + 1) % FIO_MAX_INFLIGHT;
    }
    pthread_cond_broadcast(&rs->cv);
    pthread_mutex_unlock(&rs->mu);
    for (int i = 0; i < rs->n; i++)
        pthread_join(rs->th[i], NULL);
    rs->n = 0;
    pthread_cond_destroy(&rs->cv);
    pthread_mutex_destroy(&rs->mu);
}

int fio_slot_record(struct fio_ring *r, struct fio_slot *s, int ordinal, struct s3d_stream *stream)
{
    int rc;
    if (s->ev[ordinal] == NULL && (rc = s3d_device_event_new(r->dev, ordinal, &s->ev[ordinal])) < 0)
        return rc;
    if ((rc = s3d_device_event_record(r->dev, s->ev[ordinal], stream)) < 0)
        return rc;
    s->recorded[ordinal] = 1;
    return 0;
}

int s3d_fileio_refuse_direct;

int fio_open_direct(const char *path, int flags)
{
    int fd;
    if (s3d_fileio_refuse_direct == 1) {
        errno = EINVAL;
        return -1;
    }
    fd = open(path, flags | O_DIRECT | O_CLOEXEC);
    if (fd < 0 && errno == EINVAL)
        S3D_DEBUG("fileio: %s refuses O_DIRECT, using buffered I/O", path);
    return fd;
}

int fio_reopen_direct(int fd, const char *path)
{
    char self[64];
    struct stat a, b;
    int dfd;
    if (s3d_fileio_refuse_direct == 1) {
        errno = EINVAL;
        return -1;
    }
    snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
    dfd = open(self, O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (dfd < 0) {
        S3D_DEBUG("fileio: %s: no O_DIRECT descriptor (%s), using buffered I/O", path,
                  strerror(errno));
        return -1;
    }
    if (fstat(fd, &a) != 0 || fstat(dfd, &b) != 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino) {
        S3D_DEBUG("fileio: %s: /proc/self/fd/%d is another file, using buffered I/O", path, fd);
        close(dfd);
        errno = ESTALE;
        return -1;
    }
    return dfd;
}

/* Pipelined in pieces of one chunk over two chunks (one when the pool has one):
 *
 *   read:   cuFileRead k | wait copy k-2, sum it | queue copy k -> chunk k%2, record ev
 *   write:  wait copy k-2, sum it | queue copy k -> chunk k%2, record ev | cuFileWrite k
 *
 * so the copy back of piece k runs on the copy engine while cuFile moves piece k+1 (read) or
 * piece k itself (write), and the thread waits on an event only when it needs the chunk again:
 * no synchronize per piece, no second pass over the whole range after the I/O. */
int fio_cufile_crc_io(const struct fio_cufile_io *io, uint64_t *moved, int *io_failed)
{
    struct s3d_stream *st;
    struct s3d_event *ev[2] = {NULL, NULL};
    void *chunk[2] = {NULL, NULL};
    uint64_t plen[2] = {0, 0}, pos = 0;
    int pending[2] = {0, 0}, rc, taken = 0;
    size_t nb = 1, k = 0;
    uint32_t crc = 0;

    *moved = 0;
    *io_failed = 0;
    if (io->crc_out == NULL) { /* nothing to sum: one cuFile call for the whole range */
        if (io->is_write)
            rc = s3d_cufile_write(io->cf, io->ordinal, io->dptr, io->len, io->file_off);
        else
            rc = s3d_cufile_read(io->cf, io->ordinal, io->dptr, io->len, io->file_off, moved);
        if (rc < 0)
            *io_failed = 1;
        else if (io->is_write)
            *moved = io->len;
        return rc;
    }
    if (io->pool == NULL)
        return s3d_fail(S3D_EINVAL, "a CRC of GPU memory needs a staging pool");
    const uint64_t csize = s3d_pool_chunk_size(io->pool);
    if ((rc = s3d_stream_set_get(io->g, io->ordinal, &st)) < 0)
        return rc;
    nb = s3d_pool_chunk_count(io->pool) >= 2 ? 2 : 1;
    if (s3d_pool_get_n(io->pool, nb, chunk, 1, io->cancel) != 0)
        return s3d_fail(S3D_ECANCELED, "canceled while waiting for a staging buffer");
    taken = 1;
    for (size_t b = 0; b < nb; b++)
        if ((rc = s3d_device_event_new(io->dev, io->ordinal, &ev[b])) < 0)
            goto out;
    for (; pos < io->len; pos += plen[k % nb], k++) {
        const size_t b = k % nb;
        const uint64_t step = S3D_MIN(io->len - pos, csize);
        uint64_t got = step;
        if (!io->is_write) {
            rc = s3d_cufile_read(io->cf, io->ordinal, io->dptr + pos, step, io->file_off + pos,
                                 &got);
            if (rc < 0) {
                *io_failed = 1;
                goto out;
            }
        }
        if (pending[b]) { /* piece k - nb: its copy ran while cuFile moved the later ones */
            if ((rc = s3d_device_event_sync(io->dev, ev[b])) < 0)
                goto out;
            crc = s3d_crc32c(crc, chunk[b], (size_t)plen[b]);
            pending[b] = 0;
        }
        if (got > 0) {
            if ((rc = s3d_device_copy_dtoh(io->dev, st, chunk[b], io->dptr + pos, (size_t)got)) < 0)
                goto out;
            /* Pending from here: a failed record leaves the copy queued with no event to wait
             * on, and only the stream's synchronize at out then keeps the chunk from going
             * back to the pool (to another transfer) before the copy has written it. */
            pending[b] = 1;
            if ((rc = s3d_device_event_record(io->dev, ev[b], st)) < 0)
                goto out;
        }
        plen[b] = got;
        if (io->is_write) {
            rc = s3d_cufile_write(io->cf, io->ordinal, io->dptr + pos, step, io->file_off + pos);
            if (rc < 0) {
                *io_failed = 1;
                goto out;
            }
        }
        *moved += got;
        if (got < step) { /* end of file: the caller reports the truncation */
            k++;
            break;
        }
        if (io->cancel != NULL && s3d_cancel_requested(io->cancel)) {
            rc = s3d_fail(S3D_ECANCELED, "canceled");
            goto out;
        }
    }
    /* The last pieces, oldest first: k is one past the last piece, so piece k - nb + i is in
     * chunk (k + i) % nb. */
    for (size_t i = 0; i < nb; i++) {
        const size_t b = (k + i) % nb;
        if (!pending[b])
            continue;
        if ((rc = s3d_device_event_sync(io->dev, ev[b])) < 0)
            goto out;
        crc = s3d_crc32c(crc, chunk[b], (size_t)plen[b]);
        pending[b] = 0;
    }
    *io->crc_out = crc;
out:
    if (pending[0] || pending[1]) /* copies still queued into the chunks: done before put */
        s3d_ignore_rc(s3d_device_stream_sync(io->dev, st));
    for (size_t b = 0; b < 2; b++) {
        if (taken && chunk[b] != NULL)
            s3d_pool_put(io->pool, chunk[b]);
        s3d_device_event_free(io->dev, ev[b]);
    }
    return rc;
}
