/* test_cuda_rules.c - the rules a real CUDA driver enforces, checked on CPU through the strict
 * emulated device (and the fake libcuda of fake_cuda.c, found through this test's run path):
 *   - loads and saves are ordered after the caller's stream on every device (a kernel still
 *     queued there is waited for), each device with its own stream; saves given the
 *     caller's events wait for those instead, and not for work queued after them;
 *   - host-only work never loads libcuda, so a process that only saved and loaded host
 *     tensors can fork() and use CUDA in the child;
 *   - every ordinal up to S3D_MAX_DEVICES - 1 (63) works, with its own caller stream;
 *   - a staging chunk goes back to the pool only once the device-to-host copies into it are
 *     done, also when a save fails midway (else a late copy lands in a chunk that the next
 *     transfer has taken). */
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../integ/ckpt_util.h"
#include "device/device.h"

static struct s3d_client *new_client(int device)
{
    struct s3d_client *c = NULL;
    struct s3d_client_options o;
    memset(&o, 0, sizeof(o));
    o.staging_bytes = 4 << 20; /* 4 x 1 MiB: several refills per tensor */
    o.part_size = 1 << 20;
    o.device = device;
    CHECK_OK(s3d_client_new(&o, &c));
    return c;
}

static void stream_order(void)
{
    static const int modes[] = {S3D_FILE_IO_AUTO, S3D_FILE_IO_DIRECT, S3D_FILE_IO_BUFFERED};
    char path[512];
    setenv("S3D_DEVICE_EMULATE", "1", 1);
    setenv("S3D_DEVICE_EMULATE_COUNT", "3", 1);
    for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
        struct s3d_client *c = new_client(0);
        snprintf(path, sizeof(path), "%s/order-%d.safetensors", t_tmpdir(), modes[m]);
        t_check_stream_order(c, path, 1, modes[m]);
        t_check_stream_order(c, path, 2, modes[m]);
        t_check_event_order(c, path, 1, modes[m], 0);
        t_check_event_order(c, path, 2, modes[m], 0);
        snprintf(path, sizeof(path), "%s/events-%d.safetensors.index.json", t_tmpdir(), modes[m]);
        t_check_event_order(c, path, 3, modes[m], 1 << 20);
        s3d_client_free(c);
    }
    unsetenv("S3D_DEVICE_EMULATE");
    unsetenv("S3D_DEVICE_EMULATE_COUNT");
}

/* Saves and loads of host tensors, every file I/O mode (DIRECT uses the staging pool). */
static void host_only_work(struct s3d_client *c)
{
    static const int modes[] = {S3D_FILE_IO_AUTO, S3D_FILE_IO_DIRECT, S3D_FILE_IO_BUFFERED};
    struct t_tensors ts;
    char path[512];
    t_make_tensors(&ts, 12, 300000, 5);
    for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
        struct s3d_write_options wo = {.file_io = modes[m]};
        snprintf(path, sizeof(path), "%s/host-%d.safetensors", t_tmpdir(), modes[m]);
        CHECK_OK(s3d_checkpoint_write(c, path, ts.src, ts.n, NULL, 0, &wo));
        t_verify_checkpoint(c, path, &ts, -1);
        unlink(path);
    }
    t_free_tensors(&ts);
}

/* The fake libcuda is what a dlopen("libcuda.so.1") finds here: host-only work must not load
 * it, and a forked child can then initialize CUDA (the fake refuses cuInit in a child of a
 * process that initialized it, as the driver does). */
static void host_only_never_touches_cuda(void)
{
    struct s3d_client *c = new_client(0); /* device 0 is the default: "use a GPU if any" */
    host_only_work(c);
    CHECK(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) == NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        void *h = dlopen("libcuda.so.1", RTLD_NOW);
        int (*init)(unsigned) = h ? (int (*)(unsigned))dlsym(h, "cuInit") : NULL;
        _exit(init == NULL ? 2 : init(0) == 0 ? 0 : 1);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st));
    if (WEXITSTATUS(st) == 2)
        printf("no libcuda.so.1 found for the fork check\n");
    else
        CHECK(WEXITSTATUS(st) == 0);
    s3d_client_free(c);

    /* Same with the emulated device selected: it is never opened, so no context is made and
     * nothing is pinned. */
    setenv("S3D_DEVICE_EMULATE", "1", 1);
    s3d_device_emu_reset_ctx();
    c = new_client(0);
    host_only_work(c);
    CHECK(!s3d_device_emu_ctx_used(0));
    CHECK(s3d_device_emu_pinned_bytes() == 0 && s3d_device_emu_registered() == 0);
    s3d_client_free(c);
    unsetenv("S3D_DEVICE_EMULATE");
}

/* The pool is pinned in the context of the device the tensors are on, and only that one. */
static void right_device_only(void)
{
    char path[512];
    struct t_tensors ts;
    setenv("S3D_DEVICE_EMULATE", "1", 1);
    setenv("S3D_DEVICE_EMULATE_COUNT", "2", 1);
    t_make_tensors(&ts, 6, 100000, 9);
    s3d_device_emu_reset_ctx();
    struct s3d_client *c = new_client(0);
    /* Everything on device 1 (emulated device memory lives outside any client). */
    for (size_t i = 0; i < ts.n; i++) {
        ts.src[i].ptr = (const void *)(uintptr_t)t_emu_copy_on(1, ts.data[i], ts.src[i].nbytes);
        ts.src[i].device = 1;
    }
    s3d_device_emu_reset_ctx();
    snprintf(path, sizeof(path), "%s/dev1.safetensors", t_tmpdir());
    struct s3d_write_options wo = {.file_io = S3D_FILE_IO_DIRECT};
    CHECK_OK(s3d_checkpoint_write(c, path, ts.src, ts.n, NULL, 0, &wo));
    CHECK(s3d_device_emu_ctx_used(1));
    CHECK(!s3d_device_emu_ctx_used(0));     /* no context on GPU 0 for a rank on GPU 1 */
    CHECK(s3d_device_emu_registered() > 0); /* the pool is pinned while the client holds it */
    s3d_client_free(c);
    CHECK(s3d_device_emu_registered() == 0);
    for (size_t i = 0; i < ts.n; i++)
        t_emu_free_on(1, (uint64_t)(uintptr_t)ts.src[i].ptr);
    for (size_t i = 0; i < ts.n; i++) {
        ts.src[i].ptr = ts.data[i];
        ts.src[i].device = -1;
    }
    t_free_tensors(&ts);
    unlink(path);
    unsetenv("S3D_DEVICE_EMULATE");
    unsetenv("S3D_DEVICE_EMULATE_COUNT");
}

/* A single-PUT save to S3 that fails while building its one part: tensor 0 is copied into a
 * staging chunk (queued, deferred), then tensor 1, named as device memory but a host pointer,
 * is refused by the device. The queued copy must be waited for before the chunk goes back to
 * the pool. No request is sent (the endpoint has no server). */
static void failed_single_put_waits_for_copies(void)
{
    static unsigned char host_bytes[64 << 10];
    struct s3d_client_options o;
    struct s3d_client *c = NULL;
    struct t_tensors ts;
    long stale;
    setenv("S3D_DEVICE_EMULATE", "1", 1);
    memset(&o, 0, sizeof(o));
    o.endpoint_url = "http://127.0.0.1:9";
    o.staging_bytes = 16 << 20; /* 16 x 1 MiB: room for two 5 MiB parts */
    o.part_size = 1 << 20;
    CHECK_OK(s3d_client_new(&o, &c));
    t_make_tensors(&ts, 2, 16 << 10, 21);
    CHECK(ts.src[0].nbytes > 0 && ts.src[1].nbytes > 0 && ts.src[1].nbytes <= sizeof(host_bytes));
    t_tensor_to_emu(&ts, 0);
    ts.src[1].ptr = host_bytes; /* not device memory: the copy is refused */
    ts.src[1].device = 0;
    stale = s3d_device_emu_stale_copies();
    CHECK_ERR(
        s3d_checkpoint_write(c, "s3://bucket/failed.safetensors", ts.src, ts.n, NULL, 0, NULL),
        S3D_ECUDA);
    CHECK_MSG_HAS("not device memory");
    CHECK(s3d_device_emu_stale_copies() == stale); /* no copy ran after its chunk was put back */
    /* The pool is whole again: a save of the device tensor alone goes through the same chunks
     * (to a file: no server needed) and reads back right. */
    {
        char path[512];
        struct t_tensors one = ts;
        one.n = 1;
        snprintf(path, sizeof(path), "%s/after-failed.safetensors", t_tmpdir());
        CHECK_OK(s3d_checkpoint_write(c, path, one.src, one.n, NULL, 0, NULL));
        t_verify_checkpoint(c, path, &one, -1);
        unlink(path);
    }
    CHECK(s3d_device_emu_stale_copies() == stale);
    ts.src[1].ptr = ts.data[1];
    ts.src[1].device = -1;
    t_free_tensors(&ts);
    s3d_client_free(c);
    unsetenv("S3D_DEVICE_EMULATE");
}

/* A save from and a read into emulated device 63 (of 64), every file I/O mode, ordered after
 * the caller's stream of device 63 (a kernel still queued there), with no context on any
 * other device. Device 64 does not exist. */
static void highest_ordinal(void)
{
    enum { NB = 300000, LAST = S3D_MAX_DEVICES - 1 };
    static const int modes[] = {S3D_FILE_IO_AUTO, S3D_FILE_IO_DIRECT, S3D_FILE_IO_BUFFERED};
    static uint64_t handles[S3D_MAX_DEVICES]; /* 0: the legacy stream, but for device 63 */
    static unsigned char want[NB];
    int64_t shape[1] = {NB};
    struct s3d_device *dev;
    struct s3d_stream *cs;
    uint64_t src, dst;
    char path[512];

    CHECK(S3D_MAX_DEVICES == 64);
    setenv("S3D_DEVICE_EMULATE", "1", 1);
    setenv("S3D_DEVICE_EMULATE_COUNT", "64", 1);
    CHECK_OK(s3d_device_open(S3D_DEVICE_EMULATE, &dev));
    CHECK(s3d_device_count(dev) == 64);
    CHECK_OK(s3d_device_stream_new(dev, LAST, &cs));
    handles[LAST] = s3d_device_emu_stream_handle(cs);
    CHECK_OK(s3d_device_mem_alloc(dev, LAST, NB, &src));
    CHECK_OK(s3d_device_mem_alloc(dev, LAST, NB, &dst));
    t_fill_random(want, NB, 63);
    memset(want, 0x63, 4096); /* what the caller's queued kernel writes */
    for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
        struct s3d_client *c = new_client(0);
        struct s3d_reader *r = NULL;
        struct s3d_tensor_src ts = {.name = "w",
                                    .dtype = S3D_DTYPE_U8,
                                    .ndim = 1,
                                    .shape = shape,
                                    .ptr = (const void *)(uintptr_t)src,
                                    .device = LAST,
                                    .nbytes = NB};
        struct s3d_write_options wo = {
            .file_io = modes[m], .cuda_streams = handles, .n_cuda_streams = S3D_MAX_DEVICES};
        struct s3d_read_options ro = {
            .file_io = modes[m], .cuda_streams = handles, .n_cuda_streams = S3D_MAX_DEVICES};
        struct s3d_tensor_dest td = {.ptr = (void *)(uintptr_t)dst, .device = LAST, .capacity = NB};
        size_t idx;
        snprintf(path, sizeof(path), "%s/dev63-%d.safetensors", t_tmpdir(), modes[m]);
        memcpy(s3d_device_emu_view(src), want, NB);
        memset(s3d_device_emu_view(src), 0, 4096);
        memset(s3d_device_emu_view(dst), 0, NB);
        /* The caller's kernel that produces the first 4 KiB is still queued on device 63's
         * stream. */
        CHECK_OK(s3d_device_emu_kernel(dev, LAST, handles[LAST], src, 0x63, 4096));
        s3d_device_emu_reset_ctx();
        CHECK_OK(s3d_checkpoint_write(c, path, &ts, 1, NULL, 0, &wo));
        CHECK_OK(s3d_reader_open(c, path, &r));
        CHECK_OK(s3d_reader_find(r, "w", &idx));
        td.index = idx;
        /* A kernel still writes the destination: the loaded bytes must land after it. */
        CHECK_OK(s3d_device_emu_kernel(dev, LAST, handles[LAST], dst, 0xEE, NB));
        CHECK_OK(s3d_reader_read(r, &td, 1, &ro));
        s3d_reader_close(r);
        CHECK_OK(s3d_device_stream_sync(dev, cs));
        CHECK(memcmp(s3d_device_emu_view(dst), want, NB) == 0);
        CHECK(s3d_device_emu_ctx_used(LAST));
        for (int k = 0; k < LAST; k++)
            CHECK(!s3d_device_emu_ctx_used(k));
        /* One past the last: refused, nothing written. */
        ts.device = S3D_MAX_DEVICES;
        CHECK_ERR(s3d_checkpoint_write(c, path, &ts, 1, NULL, 0, &wo), S3D_ENODEVICE);
        CHECK_MSG_HAS("cuda:64");
        unlink(path);
        s3d_client_free(c);
    }
    s3d_device_mem_free(dev, LAST, src);
    s3d_device_mem_free(dev, LAST, dst);
    s3d_device_stream_free(dev, cs);
    s3d_device_free(dev);
    unsetenv("S3D_DEVICE_EMULATE");
    unsetenv("S3D_DEVICE_EMULATE_COUNT");
}

int main(void)
{
    failed_single_put_waits_for_copies();
    highest_ordinal();
    host_only_never_touches_cuda();
    right_device_only();
    stream_order();
    printf("ok\n");
    return 0;
}
