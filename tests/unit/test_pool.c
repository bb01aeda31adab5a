/* test_pool.c - the staging pool: sizes and alignment, every chunk distinct and inside the
 * pool, try_get never blocks, a blocked get wakes on put and on cancel, high-water mark, and
 * four threads hammering it never share a chunk, and a forked child does not inherit it. */
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device/device.h"
#include "engine/pool.h"
#include "testutil.h"

static struct s3d_pool *g_pool;

static void *putter(void *arg)
{
    usleep(50 * 1000);
    s3d_pool_put(g_pool, arg);
    return NULL;
}

static void *canceler(void *arg)
{
    usleep(50 * 1000);
    s3d_cancel_request(arg);
    return NULL;
}

#define ROUNDS 2000
static void *hammer(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    size_t cs = s3d_pool_chunk_size(g_pool);
    for (int i = 0; i < ROUNDS; i++) {
        unsigned char *c = s3d_pool_get(g_pool, NULL);
        CHECK(c != NULL);
        unsigned char tag = (unsigned char)(seed * 31 + (unsigned)i);
        c[0] = tag;
        c[cs - 1] = tag;
        if ((i & 7) == 0)
            sched_yield();
        /* Nobody else wrote into our chunk meanwhile. */
        CHECK(c[0] == tag && c[cs - 1] == tag);
        s3d_pool_put(g_pool, c + 100); /* any pointer inside the chunk */
    }
    return NULL;
}

/* A child forked while the pool exists does not get its pages (MADV_DONTFORK): pinned pages
 * shared copy-on-write with a child could have a GPU copy land in the copy the parent no
 * longer owns, and the child has no use for them (the client refuses use after fork). The
 * child dies touching one, by plain memory and by pinned (device-allocated) memory. */
static void not_inherited_by_fork(struct s3d_device *dev)
{
    struct s3d_device *devs[2] = {NULL, dev};
    for (int k = 0; k < 2; k++) {
        struct s3d_pool *p;
        CHECK_OK(s3d_pool_new(devs[k], 4 * 65536, 65536, &p));
        unsigned char *c = s3d_pool_try_get(p);
        CHECK(c != NULL);
        memset(c, 0x5a, 65536);
        int st = t_child_read_status(c + 100); /* must fault */
        if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV))
            t_fail(__FILE__, __LINE__, "pool %d: the forked child read the pool (status 0x%x)", k,
                   st);
        CHECK(c[100] == 0x5a && c[65535] == 0x5a); /* the parent's pages are intact */
        s3d_pool_put(p, c);
        s3d_pool_free(p);
    }
}

int main(void)
{
    struct s3d_device *dev;
    struct s3d_pool *p;
    CHECK_OK(s3d_device_open(S3D_DEVICE_FORCE_HOST, &dev));
    not_inherited_by_fork(dev);

    /* Defaults. */
    CHECK_OK(s3d_pool_new(dev, 0, 0, &p));
    CHECK(s3d_pool_chunk_size(p) == 8u << 20);
    CHECK(s3d_pool_chunk_count(p) == 32);
    s3d_pool_free(p);

    /* Rounding: 10000-byte chunks become 12288; at least 2 chunks. */
    CHECK_OK(s3d_pool_new(dev, 1000, 10000, &p));
    CHECK(s3d_pool_chunk_size(p) == 12288);
    CHECK(s3d_pool_chunk_count(p) == 2);
    s3d_pool_free(p);
    CHECK_ERR(s3d_pool_new(dev, 1ull << 40, 5ull << 30, &p), S3D_EINVAL);
    CHECK(p == NULL);

    /* 40 chunks of 3 MiB: several blocks (64 MiB each holds 21). */
    const size_t cs = 3u << 20, n = 40;
    CHECK_OK(s3d_pool_new(dev, n * cs, cs, &p));
    CHECK(s3d_pool_chunk_count(p) == n && s3d_pool_free_count(p) == n);
    unsigned char *got[40];
    for (size_t i = 0; i < n; i++) {
        got[i] = s3d_pool_try_get(p);
        CHECK(got[i] != NULL);
        CHECK(((uintptr_t)got[i] & 4095) == 0);
        CHECK(s3d_pool_owns(p, got[i]) && s3d_pool_owns(p, got[i] + cs - 1));
        memset(got[i], (int)i, cs);    /* whole chunk writable */
        for (size_t k = 0; k < i; k++) /* disjoint from every other chunk */
            CHECK(got[i] + cs <= got[k] || got[k] + cs <= got[i]);
    }
    for (size_t i = 0; i < n; i++)
        CHECK(got[i][0] == (unsigned char)i && got[i][cs - 1] == (unsigned char)i);
    CHECK(s3d_pool_try_get(p) == NULL); /* empty: returns at once */
    CHECK(s3d_pool_free_count(p) == 0);
    CHECK(s3d_pool_high_water(p) == n);
    int local = 0; /* only its address is looked up */
    CHECK(!s3d_pool_owns(p, &local));

    /* A blocked get wakes when another thread puts. */
    pthread_t th;
    g_pool = p;
    CHECK(pthread_create(&th, NULL, putter, got[7]) == 0);
    unsigned char *c = s3d_pool_get(p, NULL);
    CHECK(c == got[7]);
    pthread_join(th, NULL);

    /* A blocked get returns NULL on cancel. */
    struct s3d_cancel *cancel;
    CHECK_OK(s3d_cancel_new(&cancel));
    CHECK(pthread_create(&th, NULL, canceler, cancel) == 0);
    CHECK(s3d_pool_get(p, cancel) == NULL);
    pthread_join(th, NULL);
    s3d_cancel_free(cancel);

    for (size_t i = 0; i < n; i++)
        s3d_pool_put(p, got[i]);
    CHECK(s3d_pool_free_count(p) == n);
    s3d_pool_reset_high_water(p);
    CHECK(s3d_pool_high_water(p) == 0);
    void *a = s3d_pool_try_get(p), *b = s3d_pool_try_get(p);
    CHECK(s3d_pool_high_water(p) == 2);
    s3d_pool_put(p, a);
    s3d_pool_put(p, b);
    s3d_pool_put(p, NULL);
    s3d_pool_free(p);

    /* Four threads, three chunks: contention, no chunk ever shared. */
    CHECK_OK(s3d_pool_new(dev, 3 * 4096, 4096, &p));
    g_pool = p;
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        CHECK(pthread_create(&t[i], NULL, hammer, (void *)(uintptr_t)(i + 1)) == 0);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    CHECK(s3d_pool_free_count(p) == 3);
    /* How many chunks were out at once depends on scheduling (on a loaded machine the threads
     * may well run one after another): never more than the pool holds. */
    CHECK(s3d_pool_high_water(p) >= 1 && s3d_pool_high_water(p) <= 3);
    s3d_pool_reset_high_water(p);
    void *x = s3d_pool_try_get(p), *y = s3d_pool_try_get(p), *z = s3d_pool_try_get(p);
    CHECK(x != NULL && y != NULL && z != NULL);
    CHECK(s3d_pool_try_get(p) == NULL);
    CHECK(s3d_pool_high_water(p) == 3);
    s3d_pool_put(p, x);
    s3d_pool_put(p, y);
    s3d_pool_put(p, z);
    s3d_pool_free(p);
    s3d_pool_free(NULL);
    s3d_device_free(dev);
    return 0;
}
