/* test_device_emu.c - the emulated device is as strict as a GPU where the data path can go
 * wrong: device memory is not host memory (a host access crashes; a copy to host memory
 * passed as a device pointer fails), streams are unordered unless a wait orders them, a
 * caller's stream handle names real pending work ("kernels") that a wait honours, and a
 * second device exists only on request. Also the per-operation stream set built on them. */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device/device.h"
#include "testutil.h"

/* A host read of emulated device memory dies with SIGSEGV (in a child). */
static void host_access_faults(struct s3d_device *dev)
{
    uint64_t d;
    CHECK_OK(s3d_device_mem_alloc(dev, 0, 4096, &d));
    int st = t_child_read_status((const volatile void *)(uintptr_t)d); /* must fault */
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
    s3d_device_mem_free(dev, 0, d);
}

/* Host memory passed where device memory is expected is refused, not written. */
static void host_pointer_refused(struct s3d_device *dev)
{
    struct s3d_stream *s;
    unsigned char host[64], other[64];
    memset(other, 7, sizeof(other));
    CHECK_OK(s3d_device_stream_new(dev, 0, &s));
    CHECK_ERR(s3d_device_copy_htod(dev, s, (uint64_t)(uintptr_t)host, other, 64), S3D_ECUDA);
    CHECK_MSG_HAS("not device memory");
    CHECK_ERR(s3d_device_copy_dtoh(dev, s, host, (uint64_t)(uintptr_t)other, 64), S3D_ECUDA);
    int is_dev = 9, ord = 9;
    CHECK_OK(s3d_device_pointer_info(dev, host, &is_dev, &ord));
    CHECK(is_dev == 0 && ord == -1);
    uint64_t d;
    CHECK_OK(s3d_device_mem_alloc(dev, 0, 100, &d));
    CHECK_OK(s3d_device_pointer_info(dev, (void *)(uintptr_t)(d + 99), &is_dev, &ord));
    CHECK(is_dev == 1 && ord == 0);
    /* A copy running past the end of the allocation is refused too. */
    CHECK_ERR(s3d_device_copy_htod(dev, s, d + 4000, other, 200), S3D_ECUDA);
    s3d_device_mem_free(dev, 0, d);
    s3d_device_stream_free(dev, s);
}

/* Two streams: a sync of one does not run the other's work; a wait orders them. The caller's
 * "kernel" on its own stream runs only when that stream's work runs. */
static void streams_and_waits(struct s3d_device *dev)
{
    struct s3d_stream *caller, *copy;
    uint64_t d;
    unsigned char src[4096], back[4096];
    CHECK_OK(s3d_device_mem_alloc(dev, 0, 4096, &d));
    unsigned char *view = s3d_device_emu_view(d);
    CHECK(view != NULL);
    memset(view, 0, 4096);
    CHECK_OK(s3d_device_stream_new(dev, 0, &caller));
    CHECK_OK(s3d_device_stream_new(dev, 0, &copy));
    uint64_t h = s3d_device_emu_stream_handle(caller);

    /* Without a wait: the copy runs, then the caller's pending kernel overwrites it. */
    CHECK_OK(s3d_device_emu_kernel(dev, 0, h, d, 0x11, 4096));
    memset(src, 0x22, sizeof(src));
    CHECK_OK(s3d_device_copy_htod(dev, copy, d, src, 4096));
    CHECK_OK(s3d_device_stream_sync(dev, copy));
    CHECK(view[0] == 0x22);
    CHECK_OK(s3d_device_stream_sync(dev, caller));
    CHECK(view[0] == 0x11); /* the unordered result a missing wait gives */

    /* With the wait: the kernel runs first, the copy's bytes stay. */
    CHECK_OK(s3d_device_emu_kernel(dev, 0, h, d, 0x33, 4096));
    CHECK_OK(s3d_device_wait_external(dev, copy, h));
    CHECK_OK(s3d_device_copy_htod(dev, copy, d, src, 4096));
    CHECK_OK(s3d_device_stream_sync(dev, copy));
    CHECK(view[0] == 0x22 && view[4095] == 0x22);
    CHECK_OK(s3d_device_stream_sync(dev, caller));
    CHECK(view[0] == 0x22);

    /* A save-like read: the kernel that produces the bytes is waited for. */
    CHECK_OK(s3d_device_emu_kernel(dev, 0, h, d, 0x44, 4096));
    CHECK_OK(s3d_device_wait_external(dev, copy, h));
    CHECK_OK(s3d_device_copy_dtoh(dev, copy, back, d, 4096));
    CHECK_OK(s3d_device_stream_sync(dev, copy));
    CHECK(back[0] == 0x44 && back[4095] == 0x44);

    /* The legacy default stream (handle 0) is a stream too. */
    CHECK_OK(s3d_device_emu_kernel(dev, 0, 0, d, 0x55, 16));
    CHECK(view[0] == 0x44);
    CHECK_OK(s3d_device_wait_external(dev, copy, 0));
    CHECK_OK(s3d_device_stream_sync(dev, copy));
    CHECK(view[0] == 0x55);

    /* An unknown handle is an invalid handle, as on a GPU. */
    CHECK_ERR(s3d_device_wait_external(dev, copy, 0xdead0000), S3D_ECUDA);
    CHECK_MSG_HAS("INVALID_HANDLE");

    /* The caller's event (save_async's fence): a wait for it runs the work it captured, not
     * what the caller queued after it, and records nothing on the caller's stream. */
    {
        uint64_t ev = 0, ev2;
        CHECK_OK(s3d_device_emu_kernel(dev, 0, h, d, 0x66, 4096));
        CHECK_OK(s3d_device_emu_event_record(dev, 0, h, &ev));
        CHECK(ev != 0 && ev != h);
        CHECK_OK(s3d_device_emu_kernel(dev, 0, h, d, 0x77, 4096)); /* after the record */
        CHECK_OK(s3d_device_wait_event(dev, copy, ev));
        CHECK_OK(s3d_device_copy_dtoh(dev, copy, back, d, 4096));
        CHECK_OK(s3d_device_stream_sync(dev, copy));
        CHECK(back[0] == 0x66 && back[4095] == 0x66);
        CHECK_OK(s3d_device_stream_sync(dev, caller));
        CHECK(view[0] == 0x77);
        /* Recorded again: a new wait captures the new point; the handle stays. */
        CHECK_OK(s3d_device_emu_kernel(dev, 0, h, d, 0x78, 4096));
        ev2 = ev;
        CHECK_OK(s3d_device_emu_event_record(dev, 0, h, &ev2));
        CHECK(ev2 == ev);
        CHECK_OK(s3d_device_wait_event(dev, copy, ev));
        CHECK_OK(s3d_device_copy_dtoh(dev, copy, back, d, 16));
        CHECK_OK(s3d_device_stream_sync(dev, copy));
        CHECK(back[0] == 0x78);
        /* A stream's handle is not an event; 0 is refused before the backend. */
        CHECK_ERR(s3d_device_wait_event(dev, copy, h), S3D_ECUDA);
        CHECK_MSG_HAS("INVALID_HANDLE");
        CHECK_ERR(s3d_device_wait_event(dev, copy, 0), S3D_EINVAL);
        ev2 = 0xdead0001;
        CHECK_ERR(s3d_device_emu_event_record(dev, 0, h, &ev2), S3D_EINVAL);
    }

    /* An event is not ready until its work ran. */
    struct s3d_event *e;
    CHECK_OK(s3d_device_event_new(dev, 0, &e));
    CHECK_OK(s3d_device_copy_htod(dev, copy, d, src, 16));
    CHECK_OK(s3d_device_event_record(dev, e, copy));
    CHECK(s3d_device_event_query(dev, e) == 0);
    CHECK_OK(s3d_device_event_sync(dev, e));
    CHECK(s3d_device_event_query(dev, e) == 1);
    s3d_device_event_free(dev, e);

    s3d_device_stream_free(dev, copy);
    s3d_device_stream_free(dev, caller);
    s3d_device_mem_free(dev, 0, d);
}

/* Queues a "kernel" writing byte k on the caller's stream h, then a copy of byte c to d
 * through set's stream for device 0. *after_set: d's first byte once the set is synced;
 * *after_caller: once the caller's stream is synced too. */
static void kernel_then_copy(struct s3d_device *dev, struct s3d_stream_set *set, uint64_t h,
                             uint64_t d, int k, int c, int *after_set, int *after_caller)
{
    struct s3d_stream *st;
    unsigned char src[64];
    const unsigned char *view = s3d_device_emu_view(d);
    CHECK(view != NULL);
    CHECK_OK(s3d_device_emu_kernel(dev, 0, h, d, k, sizeof(src)));
    CHECK_OK(s3d_stream_set_get(set, 0, &st));
    CHECK(st == set->stream[0]);
    memset(src, c, sizeof(src));
    CHECK_OK(s3d_device_copy_htod(dev, st, d, src, sizeof(src)));
    CHECK_OK(s3d_stream_set_sync(set));
    *after_set = view[0];
    CHECK_OK(s3d_device_emu_sync_handle(dev, 0, h));
    *after_caller = view[0];
}

/* The per-operation stream set (device.h): one stream per ordinal, made once; it waits for
 * the caller's stream once per s3d_stream_set_wait_caller, and not at all without one. */
static void stream_set(struct s3d_device *dev)
{
    struct s3d_stream_set set;
    struct s3d_stream *caller, *first, *st;
    int after_set, after_caller;
    uint64_t d;
    CHECK_OK(s3d_device_mem_alloc(dev, 0, 64, &d));
    CHECK_OK(s3d_device_stream_new(dev, 0, &caller));
    uint64_t h = s3d_device_emu_stream_handle(caller);

    s3d_stream_set_init(&set, dev);
    s3d_stream_set_wait_caller(&set, 0, &h, 1); /* streams[0] = h */
    /* First use waits: the caller's kernel runs before the set's copy. */
    kernel_then_copy(dev, &set, h, d, 0x11, 0x22, &after_set, &after_caller);
    CHECK(after_set == 0x22 && after_caller == 0x22);
    first = set.stream[0];
    /* The same stream again, without a second wait: a later kernel is not ordered first. */
    kernel_then_copy(dev, &set, h, d, 0x33, 0x44, &after_set, &after_caller);
    CHECK(after_set == 0x44 && after_caller == 0x33);
    CHECK(set.stream[0] == first);
    /* Armed again (a file writer's next write): the existing stream waits once more. */
    s3d_stream_set_wait_caller(&set, 0, &h, 1);
    kernel_then_copy(dev, &set, h, d, 0x55, 0x66, &after_set, &after_caller);
    CHECK(after_set == 0x66 && after_caller == 0x66);
    CHECK(set.stream[0] == first);
    /* Ordinals outside 0..S3D_MAX_DEVICES-1 are refused. */
    CHECK_ERR(s3d_stream_set_get(&set, S3D_MAX_DEVICES, &st), S3D_ENODEVICE);
    CHECK_ERR(s3d_stream_set_get(&set, -1, &st), S3D_ENODEVICE);
    s3d_stream_set_free(&set);
    CHECK(set.stream[0] == NULL);

    /* Without the caller's streams: no wait at all. */
    s3d_stream_set_init(&set, dev);
    kernel_then_copy(dev, &set, h, d, 0x77, 0x88, &after_set, &after_caller);
    CHECK(after_set == 0x88 && after_caller == 0x77);
    s3d_stream_set_free(&set);

    s3d_device_stream_free(dev, caller);
    s3d_device_mem_free(dev, 0, d);
}

static void device_count(void)
{
    struct s3d_device *dev;
    CHECK_OK(s3d_device_open(S3D_DEVICE_EMULATE, &dev));
    CHECK(s3d_device_count(dev) == 1); /* one by default */
    s3d_device_free(dev);
    setenv("S3D_DEVICE_EMULATE_COUNT", "2", 1);
    CHECK_OK(s3d_device_open(S3D_DEVICE_EMULATE, &dev));
    CHECK(s3d_device_count(dev) == 2);
    s3d_device_emu_reset_ctx();
    uint64_t d;
    CHECK_OK(s3d_device_mem_alloc(dev, 1, 4096, &d));
    CHECK(s3d_device_emu_ctx_used(1) && !s3d_device_emu_ctx_used(0));
    int is_dev, ord;
    CHECK_OK(s3d_device_pointer_info(dev, (void *)(uintptr_t)d, &is_dev, &ord));
    CHECK(is_dev == 1 && ord == 1);
    s3d_device_mem_free(dev, 1, d);
    s3d_device_free(dev);
    setenv("S3D_DEVICE_EMULATE_COUNT", "0", 1);
    CHECK_ERR(s3d_device_open(S3D_DEVICE_EMULATE, &dev), S3D_EINVAL);
    unsetenv("S3D_DEVICE_EMULATE_COUNT");
}

int main(void)
{
    struct s3d_device *dev;
    CHECK_OK(s3d_device_open(S3D_DEVICE_EMULATE, &dev));
    host_access_faults(dev);
    host_pointer_refused(dev);
    streams_and_waits(dev);
    stream_set(dev);
    s3d_device_free(dev);
    device_count();
    printf("ok\n");
    return 0;
}
