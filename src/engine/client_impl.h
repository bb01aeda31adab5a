/* client_impl.h - struct s3d_client and struct s3d_cancel (internal to the library).
 *
 * Thread model: everything in the client is read-only after s3d_client_new except the members
 * named below with their lock. Transfers from several threads share the client; each takes
 * its own multi handle from s3.idle (see s3/s3ctx.h), so nothing on the data path locks
 * except that pool and libcurl's share. */
#ifndef S3D_ENGINE_CLIENT_IMPL_H
#define S3D_ENGINE_CLIENT_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "engine/conc.h"
#include "engine/pool.h"
#include "s3/s3ctx.h"
#include "s3direct/client.h"
#include "common/compiler.h"
#include "s3/limits.h"

/* Defaults of the client options (client.h). part_size and concurrency: measured against the
 * local RGW, see docs/internals/engine.md. */
/* The cap of the adaptive concurrency: 512 requests of 50-100 MB/s each fill a 400 Gbit/s
 * node, and fit the usual 1024 file descriptors. */
#define S3D_DEFAULT_CONCURRENCY 512u
/* One staging chunk holds one part: the pool's defaults (pool.h) are the client's. */
#define S3D_DEFAULT_PART_SIZE     ((uint64_t)S3D_POOL_DEFAULT_CHUNK)
#define S3D_DEFAULT_STAGING_BYTES ((uint64_t)S3D_POOL_DEFAULT_TOTAL)
/* S3D_MAX_CONCURRENCY: s3/config.h, which checks the profile's values against it and
 * S3D_MAX_PART_SIZE. S3's limits on uploads (part sizes, parts, one PutObject): s3/limits.h. */

struct s3d_pool;
struct s3d_device;

struct s3d_client {
    /* 1 for the owner (until s3d_client_free) + 1 per open reader and upload stream, which
     * keep using the client: the last s3d_client_unref frees it. */
    atomic_uint refs;
    struct s3d_s3ctx s3;      /* config, connections; thread-safe */
    pid_t pid;                /* the process that created it (fork check) */
    uint32_t max_concurrency; /* the cap */
    uint32_t min_concurrency; /* the floor; == max_concurrency: fixed */
    uint64_t target_throughput;
    struct s3d_conc conc; /* the requests in flight over every transfer (engine/conc.h) */
    /* s3d_client_set_cancel's token: every transfer of the client stops when it is set (the
     * S3 layer sees its flag as s3.stop). */
    struct s3d_cancel *_Atomic stop;
    /* 1 once the server refused a conditional PutObject whose If-Match held the ETag as sent
     * (quoted) and took it bare (Ceph RGW 16): later index writes send it bare at once
     * (ckpt_shards.c, write_index_s3). */
    atomic_int put_if_match_bare;
    uint64_t part_size;
    uint64_t multipart_threshold;
    uint64_t staging_bytes;
    int32_t device_opt; /* client option device: -1 never, >= 0 ordinal hint */

    /* Created on first use by whoever needs them (the checkpoint pipeline: staging pool;
     * the device layer: the GPU handle), under lazy_lock; freed by s3d_client_free (pool
     * first, then device). NULL until then. */
    pthread_mutex_t lazy_lock;
    struct s3d_pool *pool;
    struct s3d_device *device;
};

struct s3d_cancel {
    atomic_int requested;
};

/* 0 when c may be used by the calling process; S3D_EINVAL (recorded) when c is NULL or was
 * created in another process (fork: create a new client in the child). Every public entry
 * point that takes a client calls this first. */
S3D_NODISCARD int s3d_client_check(const struct s3d_client *c);

/* One more user of c (a reader or upload stream made from it): c stays allocated until the
 * matching s3d_client_unref, even when s3d_client_free comes first. Any thread. */
void s3d_client_ref(struct s3d_client *c);
/* Drops a reference; the last one frees the client (in the thread that drops it). */
void s3d_client_unref(struct s3d_client *c);

/* want, lowered so that want connections fit in the file descriptors left under
 * RLIMIT_NOFILE (a reserve kept for files and libcurl's own); at least 1. A concurrency the
 * limit cannot hold would fail half-way with S3D_EMFILE. */
uint32_t s3d_fd_clamp(uint32_t want);

/* How many part-size buffers an upload stream or a copy with the cap max_conc may hold:
 * the cap when the concurrency is fixed, else what staging_bytes holds of part-size buffers
 * (at least 2, at most the cap); the adaptive level then grows no further for that transfer
 * (its buffers are the limit). */
size_t s3d_client_buffers(const struct s3d_client *c, uint32_t max_conc, uint64_t part_size);

/* 1 when cancel (may be NULL) has been requested. Lock-free, any thread. */
static inline int s3d_cancel_is_set(const struct s3d_cancel *cancel)
{
    return cancel != NULL && atomic_load_explicit(&((struct s3d_cancel *)cancel)->requested,
                                                  memory_order_acquire) != 0;
}

/* 1 when the client's own token (s3d_client_set_cancel) has been requested. */
static inline int s3d_client_stopped(struct s3d_client *c)
{
    return s3d_cancel_is_set(atomic_load_explicit(&c->stop, memory_order_acquire));
}

#endif
