/* test_gpu_device.c - the cuda backend on a real GPU (skipped without one): pointer kinds,
 * pinned and registered host memory, async copies both ways with events, waiting on the
 * caller's stream and on the caller's event (what save_async passes), and that a call leaves
 * the caller's current context as it found it. */
#include <dlfcn.h>

#include "gpu_util.h"

typedef int (*ctx_create_fn)(void **ctx, unsigned flags, int dev);
typedef int (*ctx_get_fn)(void **ctx);
typedef int (*ctx_set_fn)(void *ctx);
typedef int (*ctx_destroy_fn)(void *ctx);
typedef int (*stream_create_fn)(void **s, unsigned flags);
typedef int (*stream_destroy_fn)(void *s);
typedef int (*event_create_fn)(void **e, unsigned flags);
typedef int (*event_record_fn)(void *e, void *s);
typedef int (*event_destroy_fn)(void *e);
typedef int (*htod_fn)(uint64_t dst, const void *src, size_t n, void *s);

/* The caller's event (s3d_device_wait_event) from the driver itself: the caller's stream
 * copies h1 into d, records the event; our stream waits for it and copies d back. The
 * handle and context rules of the real driver are what this checks; the wait's order is
 * checked on the stand-ins (test_cuda_events, test_cuda_rules). */
static void caller_event(struct s3d_device *dev, void *lib, struct s3d_stream *s, uint64_t d,
                         void *h1, void *h2, size_t n)
{
    stream_create_fn screate = (stream_create_fn)dlsym(lib, "cuStreamCreate");
    stream_destroy_fn sdestroy = (stream_destroy_fn)dlsym(lib, "cuStreamDestroy_v2");
    event_create_fn ecreate = (event_create_fn)dlsym(lib, "cuEventCreate");
    event_record_fn erecord = (event_record_fn)dlsym(lib, "cuEventRecord");
    event_destroy_fn edestroy = (event_destroy_fn)dlsym(lib, "cuEventDestroy_v2");
    htod_fn htod = (htod_fn)dlsym(lib, "cuMemcpyHtoDAsync_v2");
    void *caller = NULL, *ev = NULL;
    CHECK(screate && sdestroy && ecreate && erecord && edestroy && htod);
    CHECK_OK(s3d_device_make_current(dev, 0)); /* the caller's context, as torch's */
    CHECK(screate(&caller, 1) == 0 && ecreate(&ev, 2) == 0);
    t_fill_random(h1, n, 7);
    memset(h2, 0, n);
    CHECK(htod(d, h1, n, caller) == 0);
    CHECK(erecord(ev, caller) == 0);
    CHECK_OK(s3d_device_wait_event(dev, s, (uint64_t)(uintptr_t)ev));
    CHECK_OK(s3d_device_copy_dtoh(dev, s, h2, d, n));
    CHECK_OK(s3d_device_stream_sync(dev, s));
    CHECK(memcmp(h1, h2, n) == 0);
    CHECK(edestroy(ev) == 0 && sdestroy(caller) == 0);
}

int main(void)
{
    struct s3d_device *dev = gpu_open_or_skip();
    const size_t n = 64u << 20;
    int is_dev, ord;

    printf("devices: %d\n", s3d_device_count(dev));
    CHECK(s3d_device_count(dev) >= 1);
    CHECK_OK(s3d_device_make_current(dev, 0));
    CHECK_ERR(s3d_device_make_current(dev, s3d_device_count(dev)), S3D_ENODEVICE);

    uint64_t d;
    CHECK_OK(s3d_device_mem_alloc(dev, 0, n, &d));
    CHECK_OK(s3d_device_pointer_info(dev, (const void *)(uintptr_t)d, &is_dev, &ord));
    CHECK(is_dev == 1 && ord == 0);
    CHECK_OK(s3d_device_pointer_info(dev, (const void *)(uintptr_t)(d + 12345), &is_dev, &ord));
    CHECK(is_dev == 1 && ord == 0);

    void *h1, *h2;
    CHECK_OK(s3d_device_host_alloc(dev, n, &h1));
    CHECK_OK(s3d_device_host_alloc(dev, n, &h2));
    CHECK(((uintptr_t)h1 & 4095) == 0);
    CHECK_OK(s3d_device_pointer_info(dev, h1, &is_dev, &ord));
    CHECK(is_dev == 0 && ord == -1);
    char stack_var = 0; /* only its address is looked up */
    CHECK_OK(s3d_device_pointer_info(dev, &stack_var, &is_dev, &ord));
    CHECK(is_dev == 0 && ord == -1);

    /* Round trip through the GPU in 8 MiB pieces with an event per piece. */
    struct s3d_stream *s;
    struct s3d_event *e;
    CHECK_OK(s3d_device_stream_new(dev, 0, &s));
    CHECK_OK(s3d_device_event_new(dev, 0, &e));
    t_fill_random(h1, n, 99);
    memset(h2, 0, n);
    for (size_t off = 0; off < n; off += 8u << 20)
        CHECK_OK(s3d_device_copy_htod(dev, s, d + off, (char *)h1 + off, 8u << 20));
    CHECK_OK(s3d_device_event_record(dev, e, s));
    int q;
    while ((q = s3d_device_event_query(dev, e)) == 0)
        ;
    CHECK(q == 1);
    CHECK_OK(s3d_device_copy_dtoh(dev, s, h2, d + 1, n - 1));
    CHECK_OK(s3d_device_event_record(dev, e, s));
    CHECK_OK(s3d_device_event_sync(dev, e));
    CHECK(memcmp(h2, (char *)h1 + 1, n - 1) == 0);

    /* The legacy default stream as the caller's stream. */
    CHECK_OK(s3d_device_wait_external(dev, s, 0));
    CHECK_OK(s3d_device_stream_sync(dev, s));

    /* Registered (pinned after the fact) ordinary memory. */
    void *m = aligned_alloc(4096, 1u << 20);
    CHECK(m != NULL);
    CHECK_OK(s3d_device_host_register(dev, 0, m, 1u << 20));
    memset(m, 0x5a, 1u << 20);
    CHECK_OK(s3d_device_copy_htod(dev, s, d, m, 1u << 20));
    CHECK_OK(s3d_device_copy_dtoh(dev, s, h2, d, 1u << 20));
    CHECK_OK(s3d_device_stream_sync(dev, s));
    CHECK(((unsigned char *)h2)[0] == 0x5a && ((unsigned char *)h2)[(1u << 20) - 1] == 0x5a);
    s3d_device_host_unregister(dev, 0, m);
    free(m);

    /* A call leaves the caller's (non-primary) context current. */
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    CHECK(lib != NULL);
    ctx_create_fn create = (ctx_create_fn)dlsym(lib, "cuCtxCreate_v2");
    ctx_get_fn get = (ctx_get_fn)dlsym(lib, "cuCtxGetCurrent");
    ctx_set_fn set = (ctx_set_fn)dlsym(lib, "cuCtxSetCurrent");
    ctx_destroy_fn destroy = (ctx_destroy_fn)dlsym(lib, "cuCtxDestroy_v2");
    caller_event(dev, lib, s, d, h1, h2, n);
    if (create && get && set && destroy) {
        void *mine = NULL, *cur = NULL;
        CHECK(create(&mine, 0, 0) == 0); /* also makes it current */
        CHECK_OK(s3d_device_copy_htod(dev, s, d, h1, 4096));
        CHECK_OK(s3d_device_stream_sync(dev, s));
        CHECK(get(&cur) == 0 && cur == mine);
        CHECK(destroy(mine) == 0);
        set(NULL);
    } else {
        printf("cuCtxCreate_v2 not found: context check skipped\n");
    }

    const char *why = NULL;
    printf("cuFile: %s\n", s3d_cufile_available(dev, 0, &why) ? "available" : why);

    s3d_device_event_free(dev, e);
    s3d_device_stream_free(dev, s);
    s3d_device_host_free(dev, h1, n);
    s3d_device_host_free(dev, h2, n);
    s3d_device_mem_free(dev, 0, d);
    s3d_device_free(dev);
    return 0;
}
