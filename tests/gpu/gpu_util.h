/* gpu_util.h - shared by the GPU tests and the GPU benchmark: skip without a GPU. */
#ifndef S3D_TESTS_GPU_UTIL_H
#define S3D_TESTS_GPU_UTIL_H

#include "device/device.h"
#include "testutil.h"

/* Opens the device layer; exits 77 (skip) unless the cuda backend came up. */
static inline struct s3d_device *gpu_open_or_skip(void)
{
    struct s3d_device *dev;
    CHECK_OK(s3d_device_open(0, &dev));
    if (strcmp(s3d_device_backend(dev), "cuda") != 0) {
        const char *why = s3d_device_why_host(dev);
        char msg[600];
        snprintf(msg, sizeof(msg), "%s", why);
        s3d_device_free(dev);
        t_skip("no GPU: %s", msg);
    }
    return dev;
}

#endif
