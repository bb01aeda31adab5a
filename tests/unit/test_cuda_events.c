/* test_cuda_events.c - the caller's events (s3d_write_options.cuda_events, what save_async
 * passes) on the cuda backend (cuda_dl.c), against the stand-in libcuda of fake_cuda.c found
 * first through this executable's run path. The caller (torch) works on GPU 1: a "kernel"
 * (a copy the caller queued on its own stream, deferred by the fake until something orders
 * it) produces the tensor, the caller records an event after it, then queues more work that
 * overwrites the tensor. A save given the event must hold the producer's bytes: not the
 * stale bytes from before it (no wait), nor the later work's (a wait for the whole stream).
 * Skipped when a real driver library is found first. */
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include "device/device.h"
#include "testutil.h"

enum { NB = (3u << 20) + 5 };

static int (*get_cur)(void **);
static int (*set_cur)(void *);
static int (*retain)(void **, int);
static int (*stream_create)(void **, unsigned);
static int (*stream_destroy)(void *);
static int (*stream_sync)(void *);
static int (*event_create)(void **, unsigned);
static int (*event_record)(void *, void *);
static int (*event_destroy)(void *);
static int (*htod_async)(unsigned long long, const void *, size_t, void *);

static unsigned char g_want[NB], g_later[NB];

static void *current(void)
{
    void *c = NULL;
    get_cur(&c);
    return c;
}

/* d holds stale bytes; the caller's stream has the producer queued, then the event recorded
 * (returned), then later work queued that overwrites d. */
static void *queue_producer(uint64_t d, void *caller)
{
    void *ev = NULL;
    memset((void *)(uintptr_t)d, 0x11, NB);
    CHECK(htod_async(d, g_want, NB, caller) == 0);
    CHECK(event_create(&ev, 2) == 0 && event_record(ev, caller) == 0);
    CHECK(htod_async(d, g_later, NB, caller) == 0);
    return ev;
}

/* Saves d (on device 1) to a file with these options and returns the saved bytes. */
static void save_and_read(struct s3d_client *cl, uint64_t d, const struct s3d_write_options *wo,
                          unsigned char *back)
{
    int64_t shp[1] = {NB};
    struct s3d_tensor_src ts = {.name = "w",
                                .dtype = S3D_DTYPE_U8,
                                .ndim = 1,
                                .shape = shp,
                                .ptr = (const void *)(uintptr_t)d,
                                .device = 1,
                                .nbytes = NB};
    struct s3d_tensor_dest td = {.ptr = back, .device = -1, .capacity = NB};
    struct s3d_reader *rd = NULL;
    char path[600];
    snprintf(path, sizeof(path), "%s/events.safetensors", t_tmpdir());
    CHECK_OK(s3d_checkpoint_write(cl, path, &ts, 1, NULL, 0, wo));
    CHECK_OK(s3d_reader_open(cl, path, &rd));
    CHECK_OK(s3d_reader_find(rd, "w", &td.index));
    CHECK_OK(s3d_reader_read(rd, &td, 1, NULL));
    s3d_reader_close(rd);
    unlink(path);
}

int main(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (lib == NULL)
        t_skip("the fake libcuda.so.1 does not load: %s", dlerror());
    if (dlsym(lib, "fake_cuda_stats") == NULL)
        t_skip("the real libcuda.so.1 is found before the fake one");
    *(void **)&get_cur = dlsym(lib, "cuCtxGetCurrent");
    *(void **)&set_cur = dlsym(lib, "cuCtxSetCurrent");
    *(void **)&retain = dlsym(lib, "cuDevicePrimaryCtxRetain");
    *(void **)&stream_create = dlsym(lib, "cuStreamCreate");
    *(void **)&stream_destroy = dlsym(lib, "cuStreamDestroy_v2");
    *(void **)&stream_sync = dlsym(lib, "cuStreamSynchronize");
    *(void **)&event_create = dlsym(lib, "cuEventCreate");
    *(void **)&event_record = dlsym(lib, "cuEventRecord");
    *(void **)&event_destroy = dlsym(lib, "cuEventDestroy_v2");
    *(void **)&htod_async = dlsym(lib, "cuMemcpyHtoDAsync_v2");
    memset(g_want, 0x5a, sizeof(g_want));
    memset(g_later, 0xee, sizeof(g_later));

    struct s3d_device *dev;
    void *mine, *caller, *ev;
    uint64_t d;
    unsigned char *back = malloc(NB);
    CHECK(back != NULL);
    CHECK(retain(&mine, 1) == 0);
    set_cur(mine); /* the caller works on GPU 1, as torch after torch.cuda.set_device(1) */
    CHECK_OK(s3d_device_open(0, &dev));
    CHECK_STREQ(s3d_device_backend(dev), "cuda");
    CHECK_OK(s3d_device_mem_alloc(dev, 1, NB, &d));
    CHECK(stream_create(&caller, 1) == 0);

    /* The device call, from a thread with no current context (the save thread): the wait
     * is made in the stream's context and none is left current. */
    {
        struct s3d_stream *s;
        CHECK_OK(s3d_device_stream_new(dev, 1, &s));
        ev = queue_producer(d, caller);
        set_cur(NULL);
        CHECK_OK(s3d_device_wait_event(dev, s, (uint64_t)(uintptr_t)ev));
        CHECK(current() == NULL);
        CHECK_OK(s3d_device_copy_dtoh(dev, s, back, d, NB));
        CHECK_OK(s3d_device_stream_sync(dev, s));
        CHECK(current() == NULL);
        CHECK(back[0] == 0x5a && back[NB - 1] == 0x5a && memcmp(back, g_want, NB) == 0);
        set_cur(mine);
        CHECK(stream_sync(caller) == 0);
        CHECK(event_destroy(ev) == 0);
        s3d_device_stream_free(dev, s);
    }

    /* The whole save through a client, staged (the pool) and by cuFile-free file I/O. */
    struct s3d_client_options co;
    struct s3d_client *cl = NULL;
    memset(&co, 0, sizeof(co));
    co.staging_bytes = 4u << 20;
    co.part_size = 1u << 20;
    CHECK_OK(s3d_client_new(&co, &cl));
    {
        uint64_t events[2] = {0, 0};
        struct s3d_write_options wo = {.struct_size = sizeof(wo),
                                       .file_io = S3D_FILE_IO_BUFFERED,
                                       .cuda_stream = (uint64_t)(uintptr_t)caller,
                                       .cuda_events = events,
                                       .n_cuda_events = 2};
        ev = queue_producer(d, caller);
        events[1] = (uint64_t)(uintptr_t)ev;
        save_and_read(cl, d, &wo, back);
        CHECK(current() == mine);
        if (memcmp(back, g_want, NB) != 0)
            t_fail(__FILE__, __LINE__, "saved 0x%02x..0x%02x, want the producer's 0x5a", back[0],
                   back[NB - 1]);
        CHECK(stream_sync(caller) == 0);
        CHECK(event_destroy(ev) == 0);

        /* Event 0 for the device: the stream rule, so the later work is in the save. */
        ev = queue_producer(d, caller);
        events[1] = 0;
        save_and_read(cl, d, &wo, back);
        CHECK(memcmp(back, g_later, NB) == 0);
        CHECK(stream_sync(caller) == 0);
        CHECK(event_destroy(ev) == 0);

        /* A count without the array: refused, nothing written. */
        wo.cuda_events = NULL;
        CHECK_ERR(s3d_checkpoint_write(cl, "/nonexistent/x.safetensors", NULL, 0, NULL, 0, &wo),
                  S3D_EINVAL);
        CHECK_MSG_HAS("n_cuda_events");
    }
    s3d_client_free(cl);
    CHECK(stream_destroy(caller) == 0);
    s3d_device_mem_free(dev, 1, d);
    s3d_device_free(dev);
    free(back);
    printf("ok\n");
    return 0;
}
