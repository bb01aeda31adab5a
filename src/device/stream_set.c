/* stream_set.c - the streams of one operation, one per device ordinal (device.h). Written
 * once for checkpoint loads and saves and file reads and writes: each made its own array of
 * streams and "waited" flags before. */
#include <string.h>

#include "common/error.h"
#include "device/device.h"

void s3d_stream_set_init(struct s3d_stream_set *set, struct s3d_device *dev)
{
    memset(set, 0, sizeof(*set));
    set->dev = dev;
}

void s3d_stream_set_wait_caller(struct s3d_stream_set *set, uint64_t def, const uint64_t *streams,
                                uint32_t n)
{
    set->wait = 1;
    set->wait_def = def;
    set->wait_streams = streams;
    set->wait_n = n;
    memset(set->waited, 0, sizeof(set->waited));
}

void s3d_stream_set_wait_events(struct s3d_stream_set *set, const uint64_t *events, uint32_t n)
{
    set->wait_events = events;
    set->wait_events_n = events != NULL ? n : 0;
}

/* Makes stream[ordinal] wait for what the caller gave for that device: its event, else its
 * stream. */
static int wait_caller(struct s3d_stream_set *set, int ordinal)
{
    if ((uint32_t)ordinal < set->wait_events_n && set->wait_events[ordinal] != 0) {
        uint64_t ev = set->wait_events[ordinal];
        int rc = s3d_device_wait_event(set->dev, set->stream[ordinal], ev);
        /* The driver's error alone does not say which of the caller's handles it refused. */
        if (rc < 0)
            return s3d_fail_prefix(rc, "s3d_write_options.cuda_events[%d] (CUevent 0x%llx)",
                                   ordinal, (unsigned long long)ev);
        return 0;
    }
    return s3d_device_wait_external(
        set->dev, set->stream[ordinal],
        s3d_caller_stream(set->wait_def, set->wait_streams, set->wait_n, ordinal));
}

int s3d_stream_set_get(struct s3d_stream_set *set, int ordinal, struct s3d_stream **out)
{
    int rc;
    if (ordinal < 0 || ordinal >= S3D_MAX_DEVICES)
        return s3d_fail(S3D_ENODEVICE, "GPU device %d: out of range", ordinal);
    if (set->stream[ordinal] == NULL) {
        rc = s3d_device_stream_new(set->dev, ordinal, &set->stream[ordinal]);
        if (rc < 0)
            return rc;
    }
    if (set->wait && !set->waited[ordinal]) {
        rc = wait_caller(set, ordinal);
        if (rc < 0)
            return rc;
        set->waited[ordinal] = 1;
    }
    *out = set->stream[ordinal];
    return 0;
}

int s3d_stream_set_sync(struct s3d_stream_set *set)
{
    int rc = 0;
    for (int k = 0; k < S3D_MAX_DEVICES; k++)
        if (set->stream[k] != NULL) {
            int src = s3d_device_stream_sync(set->dev, set->stream[k]);
            if (rc == 0 && src < 0)
                rc = src;
        }
    return rc;
}

void s3d_stream_set_free(struct s3d_stream_set *set)
{
    for (int k = 0; k < S3D_MAX_DEVICES; k++) {
        s3d_device_stream_free(set->dev, set->stream[k]); /* waits for the stream's work */
        set->stream[k] = NULL;
        set->waited[k] = 0;
    }
}
