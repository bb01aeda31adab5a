/* resources.c - lazy creation of the client's device handle and staging pool. */
#include "engine/resources.h"

#include <stdlib.h>
#include <string.h>

#include "common/env.h"
#include "common/error.h"
#include "device/device.h"
#include "engine/client_impl.h"
#include "engine/pool.h"

static unsigned device_flags(const struct s3d_client *c)
{
    const char *emu = s3d_env("S3D_DEVICE_EMULATE");
    if (emu != NULL && strcmp(emu, "1") == 0)
        return S3D_DEVICE_EMULATE;
    return c->device_opt < 0 ? S3D_DEVICE_FORCE_HOST : 0;
}

/* Called with lazy_lock held. */
static int device_locked(struct s3d_client *c)
{
    if (c->device != NULL)
        return 0;
    return s3d_device_open(device_flags(c), &c->device);
}

int s3d_client_device(struct s3d_client *c, struct s3d_device **out)
{
    int rc;
    pthread_mutex_lock(&c->lazy_lock);
    rc = device_locked(c);
    *out = c->device;
    pthread_mutex_unlock(&c->lazy_lock);
    return rc;
}

struct s3d_device *s3d_client_device_if_open(struct s3d_client *c)
{
    struct s3d_device *dev;
    pthread_mutex_lock(&c->lazy_lock);
    dev = c->device;
    pthread_mutex_unlock(&c->lazy_lock);
    return dev;
}

int s3d_client_pool(struct s3d_client *c, int ordinal, struct s3d_pool **out)
{
    int rc = 0;
    pthread_mutex_lock(&c->lazy_lock);
    if (ordinal >= 0)
        rc = device_locked(c);
    /* Plain memory first: host-only transfers make no CUDA call at all. */
    if (rc == 0 && c->pool == NULL)
        rc = s3d_pool_new(NULL, c->staging_bytes, c->part_size, &c->pool);
    if (rc == 0 && ordinal >= 0 && s3d_device_has_gpu(c->device))
        rc = s3d_pool_pin(c->pool, c->device, ordinal);
    *out = c->pool;
    pthread_mutex_unlock(&c->lazy_lock);
    return rc;
}

void s3d_client_free_resources(struct s3d_client *c)
{
    s3d_pool_free(c->pool);
    c->pool = NULL;
    s3d_device_free(c->device);
    c->device = NULL;
}
