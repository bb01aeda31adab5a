/* pool.c - the staging pool.
 *
 * Layout (defaults: 256 MiB total, 8 MiB chunks, blocks of at most 64 MiB):
 *
 *   blocks[0]  (s3d_device_host_alloc: pinned, page-aligned)
 *   +----------+----------+----------+----------+----------+----------+----------+----------+
 *   | chunk 0  | chunk 1  | chunk 2  | chunk 3  | chunk 4  | chunk 5  | chunk 6  | chunk 7  |
 *   +----------+----------+----------+----------+----------+----------+----------+----------+
 *   blocks[1]
 *   +----------+----------+-- ... --+----------+
 *   | chunk 8  | chunk 9  |          | chunk 15 |      ... up to blocks[3]: 32 chunks in all
 *   +----------+----------+-- ... --+----------+
 *
 *   free[]:  stack of free chunk indices (LIFO: a chunk just put back is warm in cache)
 *   out[i]:  1 while chunk i is handed out (catches a double put)
 *
 * Pinning is slow and pinned memory is scarce, so the whole pool is allocated once, in a few
 * blocks (one huge pinned allocation fails more often than several moderate ones), and never
 * grows. Chunk size is a multiple of 4096 and blocks are page-aligned, so every chunk is
 * aligned for O_DIRECT. The blocks are MADV_DONTFORK: a forked child does not get them.
 * Pinned by s3d_pool_pin for a GPU, they first prefer that GPU's NUMA node (place_blocks).
 *
 * Threads: the locked part (free[], n_free, out[], in_use, high_water) is under mu; cv
 * signals a put. Everything else is set at creation and read-only. mu is a leaf lock. */
#include "engine/pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "common/compiler.h"
#include "common/error.h"
#include "common/log.h"
#include "device/device.h"
#include "s3direct/client.h"

#define BLOCK_TARGET (64ull << 20)
#define ALIGN        4096ull
/* The largest chunk and the most chunks a pool may be asked for (S3D_EINVAL beyond). */
#define POOL_MAX_CHUNK  (4ull << 30)
#define POOL_MAX_CHUNKS (1u << 20)

struct pool_block {
    unsigned char *base;
    size_t size;
    size_t first; /* index of its first chunk */
};

struct s3d_pool {
    struct s3d_device *dev; /* allocated the blocks; NULL: plain mmap (host-only use) */
    /* Pinned later by s3d_pool_pin (cuMemHostRegister in ordinal's primary context): set
     * once under the caller's lock (resources.c lazy_lock) and mu, read under mu by
     * s3d_pool_put (which tells the device layer the chunk is released) and at free. */
    struct s3d_device *pin_dev;
    int pin_ordinal;
    size_t chunk_size;
    size_t n_chunks;
    size_t n_blocks;
    struct pool_block *blocks;
    /* locked part */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t *free_idx;
    size_t n_free;
    unsigned char *out;
    size_t in_use, high_water;
};

int s3d_pool_new(struct s3d_device *dev, uint64_t total_bytes, uint64_t chunk_bytes,
                 struct s3d_pool **out)
{
    struct s3d_pool *p;
    uint64_t n_chunks, per_block;
    int rc;

    *out = NULL;
    if (total_bytes == 0)
        total_bytes = S3D_POOL_DEFAULT_TOTAL;
    if (chunk_bytes == 0)
        chunk_bytes = S3D_POOL_DEFAULT_CHUNK;
    if (chunk_bytes > POOL_MAX_CHUNK)
        return s3d_fail(S3D_EINVAL, "staging pool: chunk of %llu bytes is over 4 GiB",
                        (unsigned long long)chunk_bytes);
    chunk_bytes = (chunk_bytes + ALIGN - 1) & ~(ALIGN - 1);
    n_chunks = total_bytes / chunk_bytes;
    if (n_chunks < 2)
        n_chunks = 2; /* one chunk cannot overlap a read with a copy */
    if (n_chunks > POOL_MAX_CHUNKS)
        return s3d_fail(S3D_EINVAL, "staging pool: %llu chunks is too many",
                        (unsigned long long)n_chunks);
    per_block = BLOCK_TARGET / chunk_bytes;
    if (per_block == 0)
        per_block = 1;

    p = calloc(1, sizeof(*p));
    if (p == NULL)
        return s3d_fail(S3D_ENOMEM, "staging pool: out of memory");
    p->dev = dev;
    p->chunk_size = (size_t)chunk_bytes;
    p->n_chunks = (size_t)n_chunks;
    p->n_blocks = (size_t)((n_chunks + per_block - 1) / per_block);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->blocks = calloc(p->n_blocks, sizeof(*p->blocks));
    p->free_idx = calloc(p->n_chunks, sizeof(*p->free_idx));
    p->out = calloc(p->n_chunks, 1);
    if (p->blocks == NULL || p->free_idx == NULL || p->out == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "staging pool: out of memory");
        goto fail;
    }
    for (size_t b = 0, first = 0; b < p->n_blocks; b++) {
        size_t k = (size_t)(n_chunks - first < per_block ? n_chunks - first : per_block);
        void *base = NULL;
        if (dev != NULL) {
            rc = s3d_device_host_alloc(dev, k * p->chunk_size, &base);
        } else {
            base = mmap(NULL, k * p->chunk_size, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            rc = base == MAP_FAILED ? s3d_fail(S3D_ENOMEM, "mmap: %s", strerror(errno)) : 0;
            if (base == MAP_FAILED)
                base = NULL;
        }
        if (rc < 0) {
            s3d_fail_prefix(rc, "staging pool of %zu x %zu bytes", p->n_chunks, p->chunk_size);
            goto fail;
        }
        /* Not inherited by fork(): pages shared copy-on-write with a child could have a GPU
         * copy land in the copy the parent no longer owns (the RDMA rule), and a child has no
         * use for them (the client refuses use in a forked child). Memory the driver mapped
         * itself may refuse the advice (EINVAL for VM_IO mappings): the driver keeps those
         * out of children itself. */
        if (madvise(base, k * p->chunk_size, MADV_DONTFORK) != 0)
            S3D_INFO("staging pool: madvise(MADV_DONTFORK): %s", strerror(errno));
        p->blocks[b] = (struct pool_block){base, k * p->chunk_size, first};
        first += k;
    }
    /* Push in reverse so that chunk 0 is handed out first (tests read addresses in order). */
    for (size_t i = 0; i < p->n_chunks; i++)
        p->free_idx[i] = p->n_chunks - 1 - i;
    p->n_free = p->n_chunks;
    *out = p;
    return 0;
fail:
    s3d_pool_free(p);
    return rc;
}

void s3d_pool_free(struct s3d_pool *p)
{
    if (p == NULL)
        return;
    if (p->blocks != NULL)
        for (size_t b = 0; b < p->n_blocks; b++) {
            if (p->blocks[b].base == NULL)
                continue;
            if (p->pin_dev != NULL)
                s3d_device_host_unregister(p->pin_dev, p->pin_ordinal, p->blocks[b].base);
            if (p->dev != NULL)
                s3d_device_host_free(p->dev, p->blocks[b].base, p->blocks[b].size);
            else
                munmap(p->blocks[b].base, p->blocks[b].size);
        }
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->blocks);
    free(p->free_idx);
    free(p->out);
    free(p);
}

static void *chunk_addr(const struct s3d_pool *p, size_t idx)
{
    for (size_t b = 0; b < p->n_blocks; b++) {
        const struct pool_block *bl = &p->blocks[b];
        if (idx < bl->first + bl->size / p->chunk_size)
            return bl->base + (idx - bl->first) * p->chunk_size;
    }
    return NULL;
}

/* Index of the chunk holding ptr, or (size_t)-1. */
static size_t chunk_index(const struct s3d_pool *p, const void *ptr)
{
    const unsigned char *c = ptr;
    for (size_t b = 0; b < p->n_blocks; b++) {
        const struct pool_block *bl = &p->blocks[b];
        if (bl->base != NULL && c >= bl->base && c < bl->base + bl->size)
            return bl->first + (size_t)(c - bl->base) / p->chunk_size;
    }
    return (size_t)-1;
}

/* Takes a free chunk. Called with mu held and n_free > 0. */
static void *take_locked(struct s3d_pool *p)
{
    size_t idx;
    S3D_ASSERT(p->n_free > 0 && p->n_free + p->in_use == p->n_chunks);
    idx = p->free_idx[--p->n_free];
    S3D_ASSERT(idx < p->n_chunks && !p->out[idx]);
    p->out[idx] = 1;
    p->in_use++;
    if (p->in_use > p->high_water)
        p->high_water = p->in_use;
    return chunk_addr(p, idx);
}

void *s3d_pool_try_get(struct s3d_pool *p)
{
    void *c = NULL;
    pthread_mutex_lock(&p->mu);
    if (p->n_free > 0)
        c = take_locked(p);
    pthread_mutex_unlock(&p->mu);
    return c;
}

/* Waits until n chunks are free; 0, or -1 when cancel is requested meanwhile. */
static int wait_free_locked(struct s3d_pool *p, size_t n, struct s3d_cancel *cancel)
{
    while (p->n_free < n) {
        if (cancel != NULL && s3d_cancel_requested(cancel))
            return -1;
        if (cancel == NULL) {
            pthread_cond_wait(&p->cv, &p->mu);
        } else {
            /* A cancel request does not signal cv: look at it every 20 ms. */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 20 * 1000 * 1000;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&p->cv, &p->mu, &ts);
        }
    }
    return 0;
}

void *s3d_pool_get(struct s3d_pool *p, struct s3d_cancel *cancel)
{
    void *c = NULL;
    pthread_mutex_lock(&p->mu);
    if (wait_free_locked(p, 1, cancel) == 0)
        c = take_locked(p);
    pthread_mutex_unlock(&p->mu);
    return c;
}

int s3d_pool_get_n(struct s3d_pool *p, size_t n, void **out, int blocking,
                   struct s3d_cancel *cancel)
{
    int rc = 0;
    pthread_mutex_lock(&p->mu);
    if (n > p->n_chunks)
        rc = -1;
    else if (!blocking && p->n_free < n)
        rc = 1;
    else if (blocking)
        rc = wait_free_locked(p, n, cancel);
    if (rc == 0)
        for (size_t i = 0; i < n; i++)
            out[i] = take_locked(p);
    pthread_mutex_unlock(&p->mu);
    return rc;
}

void s3d_pool_put(struct s3d_pool *p, void *chunk)
{
    struct s3d_device *dev;
    size_t idx;
    if (p == NULL || chunk == NULL)
        return;
    idx = chunk_index(p, chunk);
    if (idx == (size_t)-1)
        abort(); /* not ours: memory corruption would follow, stop here */
    pthread_mutex_lock(&p->mu);
    dev = p->dev != NULL ? p->dev : p->pin_dev;
    pthread_mutex_unlock(&p->mu);
    /* The caller has waited for every copy into the chunk (the emulated device checks). */
    s3d_device_host_released(dev, chunk_addr(p, idx), p->chunk_size);
    pthread_mutex_lock(&p->mu);
    if (!p->out[idx])
        abort(); /* put twice */
    S3D_ASSERT(p->in_use > 0 && p->n_free < p->n_chunks);
    p->out[idx] = 0;
    p->in_use--;
    p->free_idx[p->n_free++] = idx;
    /* Broadcast: a waiter for n chunks that still finds too few must not take the wakeup
     * a waiter for fewer needed. */
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

size_t s3d_pool_chunk_size(const struct s3d_pool *p)
{
    return p->chunk_size;
}

size_t s3d_pool_chunk_count(const struct s3d_pool *p)
{
    return p->n_chunks;
}

/* One counter of the locked part, read under mu. */
static size_t read_locked(struct s3d_pool *p, const size_t *counter)
{
    size_t n;
    pthread_mutex_lock(&p->mu);
    n = *counter;
    pthread_mutex_unlock(&p->mu);
    return n;
}

size_t s3d_pool_free_count(struct s3d_pool *p)
{
    return read_locked(p, &p->n_free);
}

size_t s3d_pool_high_water(struct s3d_pool *p)
{
    return read_locked(p, &p->high_water);
}

void s3d_pool_reset_high_water(struct s3d_pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->high_water = p->in_use;
    pthread_mutex_unlock(&p->mu);
}

int s3d_pool_owns(const struct s3d_pool *p, const void *ptr)
{
    return p != NULL && ptr != NULL && chunk_index(p, ptr) != (size_t)-1;
}

/* Makes the blocks' pages prefer the NUMA node of GPU ordinal, before cuMemHostRegister
 * faults them all in: the pages land on that GPU's socket, and its copies do not cross the
 * link between sockets. Pages already touched (host-only transfers used the pool first) are
 * moved there. Nothing here fails the pin: no node known, or mbind refused, is logged. */
static void place_blocks(const struct s3d_pool *p, struct s3d_device *dev, int ordinal)
{
    char why[512];
    const int node = s3d_device_numa_node(dev, ordinal, why, sizeof(why));
    if (node < 0) {
        S3D_DEBUG("staging pool: no NUMA node for cuda:%d: %s", ordinal, why);
        return;
    }
    for (size_t b = 0; b < p->n_blocks; b++)
        if (s3d_host_prefer_node(p->blocks[b].base, p->blocks[b].size, node, why, sizeof(why)) <
            0) {
            S3D_INFO("staging pool: not placed on NUMA node %d (cuda:%d): %s", node, ordinal, why);
            return;
        }
    S3D_DEBUG("staging pool: %zu x %zu bytes prefer NUMA node %d, cuda:%d's", p->n_chunks,
              p->chunk_size, node, ordinal);
}

int s3d_pool_pin(struct s3d_pool *p, struct s3d_device *dev, int ordinal)
{
    size_t b;
    int rc = 0;
    if (p->dev != NULL || p->pin_dev != NULL)
        return 0; /* allocated pinned, or pinned already */
    place_blocks(p, dev, ordinal);
    for (b = 0; b < p->n_blocks; b++) {
        rc = s3d_device_host_register(dev, ordinal, p->blocks[b].base, p->blocks[b].size);
        if (rc < 0)
            break;
    }
    if (rc < 0) {
        while (b-- > 0)
            s3d_device_host_unregister(dev, ordinal, p->blocks[b].base);
        return s3d_fail_prefix(rc, "pinning the staging pool (%zu x %zu bytes)", p->n_chunks,
                               p->chunk_size);
    }
    pthread_mutex_lock(&p->mu); /* s3d_pool_put reads pin_dev from other threads */
    p->pin_dev = dev;
    p->pin_ordinal = ordinal;
    pthread_mutex_unlock(&p->mu);
    return 0;
}

int s3d_pool_is_pinned(const struct s3d_pool *p)
{
    return p->dev != NULL || p->pin_dev != NULL;
}
