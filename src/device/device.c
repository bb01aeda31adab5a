/* device.c - chooses the backend and checks arguments once for all of them; the backends
 * (cuda_dl.c, device_host.c) trust what reaches them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "device/device_impl.h"

int s3d_device_open(unsigned flags, struct s3d_device **out)
{
    struct s3d_device *dev;
    int rc;

    *out = NULL;
    if (flags & ~(unsigned)(S3D_DEVICE_FORCE_HOST | S3D_DEVICE_EMULATE | S3D_DEVICE_NO_CUFILE))
        return s3d_fail(S3D_EINVAL, "device: unknown flags 0x%x", flags);
    dev = calloc(1, sizeof(*dev));
    if (dev == NULL)
        return s3d_fail(S3D_ENOMEM, "device: out of memory");
    dev->flags = flags;
    if (flags & S3D_DEVICE_EMULATE) {
        rc = s3d_emu_open(dev);
        if (rc < 0)
            goto fail;
        dev->ops = &s3d_emu_ops;
        dev->backend = "emulated";
        snprintf(dev->why_host, sizeof(dev->why_host), "emulated device");
    } else if (flags & S3D_DEVICE_FORCE_HOST) {
        dev->ops = &s3d_host_ops;
        dev->backend = "host";
        snprintf(dev->why_host, sizeof(dev->why_host), "forced");
    } else {
        rc = s3d_cuda_open(dev);
        if (rc < 0)
            goto fail;
        if (rc == 0) {
            dev->ops = &s3d_cuda_ops;
            dev->backend = "cuda";
            dev->why_host[0] = '\0';
        } else {
            dev->ops = &s3d_host_ops;
            dev->backend = "host";
        }
    }
    *out = dev;
    return 0;
fail:
    free(dev);
    return rc;
}

void s3d_device_free(struct s3d_device *dev)
{
    if (dev == NULL)
        return;
    s3d_cuda_close(dev);
    s3d_emu_close(dev);
    free(dev);
}

int s3d_device_has_gpu(const struct s3d_device *dev)
{
    return dev != NULL && dev->count > 0;
}

int s3d_device_count(const struct s3d_device *dev)
{
    return dev != NULL ? dev->count : 0;
}

const char *s3d_device_backend(const struct s3d_device *dev)
{
    return dev != NULL ? dev->backend : "host";
}

const char *s3d_device_why_host(const struct s3d_device *dev)
{
    return dev != NULL ? dev->why_host : "no device layer";
}

static int check_ordinal(const struct s3d_device *dev, int ordinal)
{
    if (ordinal < 0 || ordinal >= dev->count) {
        if (dev->count == 0)
            return s3d_fail(S3D_ENODEVICE, "GPU device %d: no GPU available (%s)", ordinal,
                            dev->why_host);
        return s3d_fail(S3D_ENODEVICE, "GPU device %d: only %d device(s) present", ordinal,
                        dev->count);
    }
    return 0;
}

int s3d_device_pointer_info(struct s3d_device *dev, const void *ptr, int *is_device, int *ordinal)
{
    int d = 0, o = -1, rc = 0;
    if (dev != NULL && ptr != NULL)
        rc = dev->ops->pointer_info(dev, ptr, &d, &o);
    if (is_device != NULL)
        *is_device = d;
    if (ordinal != NULL)
        *ordinal = o;
    return rc;
}

int s3d_device_make_current(struct s3d_device *dev, int ordinal)
{
    int rc = check_ordinal(dev, ordinal);
    return rc < 0 ? rc : dev->ops->make_current(dev, ordinal);
}

int s3d_device_host_alloc(struct s3d_device *dev, size_t size, void **out)
{
    *out = NULL;
    if (size == 0)
        return s3d_fail(S3D_EINVAL, "host_alloc: size 0");
    return dev->ops->host_alloc(dev, size, out);
}

void s3d_device_host_free(struct s3d_device *dev, void *p, size_t size)
{
    if (dev != NULL && p != NULL)
        dev->ops->host_free(dev, p, size);
}

int s3d_device_host_register(struct s3d_device *dev, int ordinal, void *p, size_t size)
{
    int rc;
    if (p == NULL || size == 0)
        return s3d_fail(S3D_EINVAL, "host_register: empty range");
    if (ordinal != -1 && (rc = check_ordinal(dev, ordinal)) < 0)
        return rc;
    return dev->ops->host_register(dev, ordinal, p, size);
}

void s3d_device_host_unregister(struct s3d_device *dev, int ordinal, void *p)
{
    if (dev != NULL && p != NULL && ordinal >= -1 && ordinal < dev->count)
        dev->ops->host_unregister(dev, ordinal, p);
}

int s3d_device_mem_alloc(struct s3d_device *dev, int ordinal, size_t size, uint64_t *out)
{
    int rc;
    *out = 0;
    if ((rc = check_ordinal(dev, ordinal)) < 0)
        return rc;
    if (size == 0)
        return s3d_fail(S3D_EINVAL, "mem_alloc: size 0");
    return dev->ops->mem_alloc(dev, ordinal, size, out);
}

void s3d_device_mem_free(struct s3d_device *dev, int ordinal, uint64_t dptr)
{
    if (dev != NULL && dptr != 0 && ordinal >= 0 && ordinal < dev->count)
        dev->ops->mem_free(dev, ordinal, dptr);
}

void s3d_device_host_released(struct s3d_device *dev, const void *p, size_t n)
{
    if (dev != NULL && p != NULL && n > 0 && dev->ops->host_released != NULL)
        dev->ops->host_released(dev, p, n);
}

/* A zeroed stream or event (size bytes; what names it in the error) for a valid ordinal, or
 * NULL with the error in *rc. */
static void *alloc_for(const struct s3d_device *dev, int ordinal, size_t size, const char *what,
                       int *rc)
{
    void *p;
    if ((*rc = check_ordinal(dev, ordinal)) < 0)
        return NULL;
    p = calloc(1, size);
    if (p == NULL)
        *rc = s3d_fail(S3D_ENOMEM, "%s: out of memory", what);
    return p;
}

int s3d_device_stream_new(struct s3d_device *dev, int ordinal, struct s3d_stream **out)
{
    int rc;
    struct s3d_stream *s = alloc_for(dev, ordinal, sizeof(*s), "stream", &rc);

    *out = NULL;
    if (s == NULL)
        return rc;
    s->ordinal = ordinal;
    if ((rc = dev->ops->stream_new(dev, s)) < 0)
        free(s);
    else
        *out = s;
    return rc;
}

void s3d_device_stream_free(struct s3d_device *dev, struct s3d_stream *s)
{
    if (dev == NULL || s == NULL)
        return;
    dev->ops->stream_free(dev, s);
    free(s);
}

int s3d_device_stream_ordinal(const struct s3d_stream *s)
{
    return s->ordinal;
}

int s3d_device_copy_htod(struct s3d_device *dev, struct s3d_stream *s, uint64_t dst,
                         const void *src, size_t n)
{
    if (n == 0)
        return 0;
    return dev->ops->copy_htod(dev, s, dst, src, n);
}

int s3d_device_copy_dtoh(struct s3d_device *dev, struct s3d_stream *s, void *dst, uint64_t src,
                         size_t n)
{
    if (n == 0)
        return 0;
    return dev->ops->copy_dtoh(dev, s, dst, src, n);
}

int s3d_device_stream_sync(struct s3d_device *dev, struct s3d_stream *s)
{
    return dev->ops->stream_sync(dev, s);
}

int s3d_device_event_new(struct s3d_device *dev, int ordinal, struct s3d_event **out)
{
    int rc;
    struct s3d_event *e = alloc_for(dev, ordinal, sizeof(*e), "event", &rc);

    *out = NULL;
    if (e == NULL)
        return rc;
    e->ordinal = ordinal;
    if ((rc = dev->ops->event_new(dev, e)) < 0)
        free(e);
    else
        *out = e;
    return rc;
}

void s3d_device_event_free(struct s3d_device *dev, struct s3d_event *e)
{
    if (dev == NULL || e == NULL)
        return;
    dev->ops->event_free(dev, e);
    free(e);
}

int s3d_device_event_record(struct s3d_device *dev, struct s3d_event *e, struct s3d_stream *s)
{
    if (e->ordinal != s->ordinal)
        return s3d_fail(S3D_EINVAL, "event of device %d recorded on a stream of device %d",
                        e->ordinal, s->ordinal);
    return dev->ops->event_record(dev, e, s);
}

int s3d_device_event_query(struct s3d_device *dev, struct s3d_event *e)
{
    return dev->ops->event_query(dev, e);
}

int s3d_device_event_sync(struct s3d_device *dev, struct s3d_event *e)
{
    return dev->ops->event_sync(dev, e);
}

int s3d_device_wait_external(struct s3d_device *dev, struct s3d_stream *s, uint64_t caller_stream)
{
    return dev->ops->wait_external(dev, s, caller_stream);
}

int s3d_device_wait_event(struct s3d_device *dev, struct s3d_stream *s, uint64_t caller_event)
{
    if (caller_event == 0)
        return s3d_fail(S3D_EINVAL, "wait for the caller's event: no event (0)");
    return dev->ops->wait_event(dev, s, caller_event);
}
