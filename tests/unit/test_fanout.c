/* test_fanout.c - n jobs over at most t threads (engine/fanout.h): every job runs once; no
 * more than t at once; the first error in index order is the result whatever the order the
 * jobs fail in; a job stopped after another failed (S3D_ECANCELED) does not hide the failure;
 * nothing starts after a failure; the poll's stop cancels with S3D_ECANCELED and stop() is
 * called once; one thread runs inline, in order, on the calling thread. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "engine/fanout.h"
#include "testutil.h"

#define N 24

struct ctx {
    atomic_int ran[N];
    atomic_int now, most, stops, polls;
    atomic_int stopped;
    int fail_at[N];     /* nonzero: job i fails after fail_at[i] ms */
    int cancel_on_stop; /* jobs wait for stop() and return S3D_ECANCELED */
    int poll_stop_after;
    pthread_t caller;
    atomic_int off_caller; /* a job ran on another thread */
};

static int job(void *p, size_t i)
{
    struct ctx *c = p;
    int now = atomic_fetch_add(&c->now, 1) + 1, most = atomic_load(&c->most);
    while (now > most && !atomic_compare_exchange_weak(&c->most, &most, now))
        ;
    atomic_fetch_add(&c->ran[i], 1);
    if (!pthread_equal(pthread_self(), c->caller))
        atomic_store(&c->off_caller, 1);
    if (c->fail_at[i]) {
        usleep((useconds_t)c->fail_at[i] * 1000);
        atomic_fetch_sub(&c->now, 1);
        return s3d_fail(S3D_EIO, "job %zu failed", i);
    }
    for (int k = 0; k < 30; k++) {
        if (c->cancel_on_stop && atomic_load(&c->stopped)) {
            atomic_fetch_sub(&c->now, 1);
            return s3d_fail(S3D_ECANCELED, "job %zu stopped", i);
        }
        usleep(1000);
    }
    atomic_fetch_sub(&c->now, 1);
    return 0;
}

static void stop(void *p)
{
    struct ctx *c = p;
    atomic_fetch_add(&c->stops, 1);
    atomic_store(&c->stopped, 1);
}

static int poll_fn(void *p)
{
    struct ctx *c = p;
    return atomic_fetch_add(&c->polls, 1) + 1 >= c->poll_stop_after && c->poll_stop_after > 0;
}

static struct s3d_fanout fan(struct ctx *c, size_t n, uint32_t t)
{
    memset(c, 0, sizeof(*c));
    c->caller = pthread_self();
    return (struct s3d_fanout){
        .n = n, .threads = t, .job = job, .stop = stop, .ctx = c, .what = "test"};
}

static const char *message(void)
{
    static struct s3d_error_info e;
    s3d_error_get(&e);
    return e.message;
}

int main(void)
{
    static struct ctx c;
    struct s3d_fanout f;
    int started = 0;

    /* Every job once, at most 4 at once, and more than one. */
    f = fan(&c, N, 4);
    CHECK_OK(s3d_fanout_run(&f));
    for (int i = 0; i < N; i++)
        CHECK(atomic_load(&c.ran[i]) == 1);
    CHECK(atomic_load(&c.most) <= 4 && atomic_load(&c.most) > 1);
    CHECK(atomic_load(&c.off_caller) && atomic_load(&c.stops) == 0);

    /* Job 9 fails first (at 2 ms), job 3 later (at 60 ms): job 3's error is the result. */
    f = fan(&c, N, 8);
    c.fail_at[3] = 60;
    c.fail_at[9] = 2;
    CHECK(s3d_fanout_run(&f) == S3D_EIO);
    CHECK(strstr(message(), "job 3 failed") != NULL);
    CHECK(atomic_load(&c.stops) == 1);
    for (int i = 0; i < N; i++)
        started += atomic_load(&c.ran[i]);
    CHECK(started < N); /* nothing started after the failure */

    /* Jobs stopped after job 5 failed return S3D_ECANCELED: job 5's error stands, even though
     * jobs 0..4 have lower indexes. */
    f = fan(&c, N, 8);
    c.cancel_on_stop = 1;
    c.fail_at[5] = 5;
    CHECK(s3d_fanout_run(&f) == S3D_EIO);
    CHECK(strstr(message(), "job 5 failed") != NULL);

    /* The poll stops the run: S3D_ECANCELED naming it, stop() once. */
    f = fan(&c, N, 4);
    c.cancel_on_stop = 1;
    c.poll_stop_after = 2;
    f.poll = poll_fn;
    f.poll_ms = 5;
    CHECK(s3d_fanout_run(&f) == S3D_ECANCELED);
    CHECK(strstr(message(), "test canceled") != NULL);
    CHECK(atomic_load(&c.stops) == 1);

    /* One thread: inline, in order, stopping at the first failure. */
    f = fan(&c, N, 1);
    c.fail_at[2] = 1;
    CHECK(s3d_fanout_run(&f) == S3D_EIO);
    CHECK(!atomic_load(&c.off_caller) && atomic_load(&c.ran[1]) == 1 &&
          atomic_load(&c.ran[3]) == 0);
    CHECK(atomic_load(&c.most) == 1);
    printf("ok\n");
    return 0;
}
