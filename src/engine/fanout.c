/* fanout.c - n independent jobs over at most t threads (fanout.h). */
#include "engine/fanout.h"

#include <pthread.h>
#include <time.h>

#include "common/error.h"

#define FANOUT_THREADS_MAX 64

struct run {
    const struct s3d_fanout *f;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t next, failed;       /* the next job; the lowest failing index, n if none */
    struct s3d_err_record err; /* of failed */
    uint32_t running;
    int stopped; /* stop() was called (a failure or the poll) */
};

/* Under mu: records job i's rc; 1 when stop() is to be called (the first stop). */
static int record(struct run *r, size_t i, int rc)
{
    if (rc >= 0 || (rc == S3D_ECANCELED && r->stopped))
        return 0;
    if (i < r->failed) {
        r->failed = i;
        s3d_err_save(&r->err, rc);
    }
    if (r->stopped)
        return 0;
    r->stopped = 1;
    return 1;
}

static void *worker(void *arg)
{
    struct run *r = arg;
    const struct s3d_fanout *f = r->f;
    pthread_mutex_lock(&r->mu);
    while (!r->stopped && r->next < f->n) {
        size_t i = r->next++;
        int rc, stop;
        pthread_mutex_unlock(&r->mu);
        rc = f->job(f->ctx, i);
        pthread_mutex_lock(&r->mu);
        stop = record(r, i, rc);
        pthread_cond_signal(&r->cv);
        if (stop && f->stop != NULL) {
            pthread_mutex_unlock(&r->mu);
            f->stop(f->ctx);
            pthread_mutex_lock(&r->mu);
        }
    }
    r->running--;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

static int run_inline(const struct s3d_fanout *f)
{
    for (size_t i = 0; i < f->n; i++) {
        int rc = f->job(f->ctx, i);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* The calling thread's part while workers run: poll every poll_ms and as jobs end. */
static void supervise(struct run *r)
{
    const struct s3d_fanout *f = r->f;
    uint32_t ms = f->poll_ms ? f->poll_ms : 20;
    pthread_mutex_lock(&r->mu);
    while (r->running > 0) {
        struct timespec ts;
        int stop = 0;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)(ms % 1000) * 1000000L;
        ts.tv_sec += ms / 1000 + ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        if (f->poll != NULL)
            pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        else
            pthread_cond_wait(&r->cv, &r->mu);
        if (f->poll == NULL || r->stopped)
            continue;
        pthread_mutex_unlock(&r->mu);
        stop = f->poll(f->ctx) != 0;
        pthread_mutex_lock(&r->mu);
        if (stop && !r->stopped) {
            r->stopped = 1;
            if (f->stop != NULL) {
                pthread_mutex_unlock(&r->mu);
                f->stop(f->ctx);
                pthread_mutex_lock(&r->mu);
            }
        }
    }
    pthread_mutex_unlock(&r->mu);
}

int s3d_fanout_run(const struct s3d_fanout *f)
{
    pthread_t th[FANOUT_THREADS_MAX];
    struct run r = {.f = f, .failed = f->n};
    uint32_t want = f->threads < FANOUT_THREADS_MAX ? f->threads : FANOUT_THREADS_MAX, started;

    if (want > f->n)
        want = (uint32_t)f->n;
    if (want <= 1)
        return run_inline(f);
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    pthread_mutex_lock(&r.mu);
    for (started = 0; started < want; started++) {
        if (pthread_create(&th[started], NULL, worker, &r) != 0)
            break;
        r.running++;
    }
    pthread_mutex_unlock(&r.mu);
    if (started == 0) {
        r.running = 1;
        worker(&r); /* no thread could start: this one does it all */
    } else {
        supervise(&r);
    }
    for (uint32_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    /* The last look, which may stop the run before its caller commits anything. */
    if (r.failed == f->n && !r.stopped && f->poll != NULL && f->poll(f->ctx) != 0)
        r.stopped = 1;
    pthread_cond_destroy(&r.cv);
    pthread_mutex_destroy(&r.mu);
    if (r.failed < f->n)
        return s3d_err_restore(&r.err);
    if (r.stopped)
        return s3d_fail(S3D_ECANCELED, "%s canceled", f->what ? f->what : "operation");
    return 0;
}
