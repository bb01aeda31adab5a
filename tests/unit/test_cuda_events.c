/* test_cuda_events.c - the caller's events (s3d_write_options.cuda_events, what save_async
 * passes) on the cuda backend (cuda_dl.c), against the stand-in libcuda of fake_cuda.c found
 * first through this executable's run path. The caller (torch) works on GPU 1: a "kernel"
 * (a copy the caller queued on its own stream, deferred by the fake until something orders
 * it) produces the tensor, the caller records an event after it, then queues more work that
 * overwrites the tensor. A save given the event must hold the producer's bytes: not the
 * stale bytes from before it (no wait), nor the later work's (a wait for the whole stream).
 * A destroyed event fails the save with a clear error and leaves the path as it was.
 * Skipped when a real driver library is found first. */
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
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
static int (*wait_event)(void *, void *, unsigned);

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

/* The stand-in's cuStreamWaitEvent is as strict as the driver, whose documentation this
 * follows: a NULL, unknown or destroyed event is CUDA_ERROR_INVALID_HANDLE (400), never
 * read; flags other than 0 outside stream capture CUDA_ERROR_INVALID_VALUE (1); an event of
 * another context (device) is waited on; stream NULL is the current context's legacy
 * stream. */
static void check_fake_wait_event(void *mine, void *caller)
{
    void *other_ctx = NULL, *other = NULL, *ev = NULL;
    CHECK(retain(&other_ctx, 0) == 0);
    set_cur(other_ctx);
    CHECK(event_create(&other, 2) == 0 && event_record(other, NULL) == 0);
    set_cur(mine);
    CHECK(wait_event(caller, other, 0) == 0); /* GPU 0's event, GPU 1's stream */
    CHECK(wait_event(NULL, other, 0) == 0);   /* GPU 1's legacy stream */
    CHECK(wait_event(caller, other, 1) == 1);
    CHECK(wait_event(caller, NULL, 0) == 400);
    CHECK(wait_event(caller, g_want, 0) == 400); /* not an event */
    CHECK(event_create(&ev, 2) == 0 && event_destroy(ev) == 0);
    CHECK(wait_event(caller, ev, 0) == 400);
    CHECK(event_record(ev, caller) == 400 && event_destroy(ev) == 400);
    CHECK(stream_sync(caller) == 0);
    CHECK(event_destroy(other) == 0);
}

/* A destroyed event in cuda_events: the save fails with the library's error naming the
 * option, the index and the driver's CUDA_ERROR_INVALID_HANDLE (the strict fake answers as
 * the driver, it does not read the stale handle), and the checkpoint already at the path is
 * left whole: no other bytes, no temporary file. */
static void check_destroyed_event(struct s3d_client *cl, uint64_t d, void *caller,
                                  struct s3d_write_options *wo, uint64_t *events)
{
    int64_t shp[1] = {NB};
    struct s3d_tensor_src ts = {
        .name = "w", .dtype = S3D_DTYPE_U8, .ndim = 1, .shape = shp, .nbytes = NB};
    struct s3d_tensor_dest td = {.ptr = NULL, .device = -1, .capacity = NB};
    unsigned char *back = malloc(NB);
    struct s3d_reader *rd = NULL;
    char dir[600], path[700];
    void *ev = NULL;

    CHECK(back != NULL);
    snprintf(dir, sizeof(dir), "%s/destroyed", t_tmpdir());
    CHECK(mkdir(dir, 0700) == 0);
    snprintf(path, sizeof(path), "%s/kept.safetensors", dir);
    ts.ptr = g_later; /* the checkpoint there before: host bytes */
    ts.device = -1;
    CHECK_OK(s3d_checkpoint_write(cl, path, &ts, 1, NULL, 0, NULL));

    ev = queue_producer(d, caller);
    CHECK(stream_sync(caller) == 0);
    CHECK(event_destroy(ev) == 0);
    CHECK(event_destroy(ev) == 400); /* the fake knows it is gone */
    events[1] = (uint64_t)(uintptr_t)ev;
    ts.ptr = (const void *)(uintptr_t)d;
    ts.device = 1;
    CHECK_ERR(s3d_checkpoint_write(cl, path, &ts, 1, NULL, 0, wo), S3D_ECUDA);
    CHECK_MSG_HAS("s3d_write_options.cuda_events[1]");
    CHECK_MSG_HAS("CUDA_ERROR_INVALID_HANDLE");
    CHECK_MSG_HAS("destroyed");
    CHECK(t_dir_entries(dir) == 1);
    td.ptr = back;
    CHECK_OK(s3d_reader_open(cl, path, &rd));
    CHECK_OK(s3d_reader_find(rd, "w", &td.index));
    CHECK_OK(s3d_reader_read(rd, &td, 1, NULL));
    s3d_reader_close(rd);
    CHECK(memcmp(back, g_later, NB) == 0);
    unlink(path);
    rmdir(dir);
    events[1] = 0;
    free(back);
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
    *(void **)&wait_event = dlsym(lib, "cuStreamWaitEvent");
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
    check_fake_wait_event(mine, caller);

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

        check_destroyed_event(cl, d, caller, &wo, events);

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
