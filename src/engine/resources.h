/* resources.h - the client's lazily created device handle and staging pool.
 *
 * Plain byte transfers need neither, so a client allocates no pinned memory until the first
 * tensor load or save asks for it. Both live until s3d_client_free. */
#ifndef S3D_ENGINE_RESOURCES_H
#define S3D_ENGINE_RESOURCES_H

#include "common/compiler.h"

struct s3d_client;
struct s3d_device;
struct s3d_pool;

/* The client's device layer, opened on first call (host backend when there is no GPU, or
 * when the client option device is -1). The environment variable S3D_DEVICE_EMULATE=1 selects
 * the emulated GPU of device.h: for tests only. Thread-safe. */
S3D_NODISCARD int s3d_client_device(struct s3d_client *c, struct s3d_device **out);
/* The client's device layer if something opened it already, else NULL: never opens it (that
 * loads libcuda and calls cuInit, after which a forked child cannot use CUDA). Thread-safe. */
struct s3d_device *s3d_client_device_if_open(struct s3d_client *c);
/* The client's staging pool (staging_bytes total in part_size chunks), created on first call
 * in plain memory. ordinal < 0: for host-only work (the device layer is not opened: no
 * libcuda, no context, no pinned memory). ordinal >= 0: for device transfers: the device
 * layer is opened and the pool pinned (once, PORTABLE, so it serves every device) in device
 * ordinal's primary context, which stays retained while the pool lives. Thread-safe. */
S3D_NODISCARD int s3d_client_pool(struct s3d_client *c, int ordinal, struct s3d_pool **out);
/* Frees the pool, then the device layer. Called by s3d_client_free only. */
void s3d_client_free_resources(struct s3d_client *c);

#endif
