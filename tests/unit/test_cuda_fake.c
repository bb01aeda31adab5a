/* test_cuda_fake.c - the cuda backend (cuda_dl.c) and cuFile (cufile_dl.c) against the
 * stand-in libraries of fake_cuda.c, found first through this executable's run path: the
 * versioned symbol names, the context rules (allocations need a context, a stream's work needs
 * its context current, the caller's context is current again after every call), error
 * messages, and the staged and cuFile file paths on the cuda code. Skipped when a real driver
 * library is found first (LD_LIBRARY_PATH on a GPU machine). */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "device/device.h"
#include "engine/fileio.h"
#include "engine/fileio_stage.h"
#include "engine/pool.h"
#include "testutil.h"

struct fake_cuda_stats {
    int copies, bad_context, retains, releases, stream_flags_seen, wait_events, stream_syncs;
};

static void (*stats)(struct fake_cuda_stats *);
static int (*get_cur)(void **);
static int (*set_cur)(void *);
static int (*retain)(void **, int);
static int (*release)(int);
static int (*stream_create)(void **, unsigned);
static int (*stream_destroy)(void *);
static int (*htod_async)(unsigned long long, const void *, size_t, void *);

static void *current(void)
{
    void *c = NULL;
    get_cur(&c);
    return c;
}

/* A checkpoint round trip from and into device 1 (d1, 8 MiB) by a new client on a thread with
 * no current context, loaded in mode AUTO, as Python's helper threads do: neither the cuFile
 * check nor its use (nvidia-fs present) may make a context on GPU 0, and none is left
 * current. nvfs_path names the stand-in for /proc/driver/nvidia-fs/version (NULL: none). */
static void load_into_dev1(uint64_t d1, int (*ctx_refs)(int), const char *nvfs_path)
{
    int64_t shp[1] = {3u << 20};
    struct s3d_tensor_src ts = {.name = "w",
                                .dtype = S3D_DTYPE_U8,
                                .ndim = 1,
                                .shape = shp,
                                .ptr = (const void *)(uintptr_t)d1,
                                .device = 1,
                                .nbytes = 3u << 20};
    struct s3d_tensor_dest td = {
        .ptr = (void *)(uintptr_t)(d1 + (4u << 20)), .device = 1, .capacity = 3u << 20};
    struct s3d_write_stats ws = {.struct_size = sizeof(ws)}; /* which path: the counters */
    struct s3d_read_stats rs = {.struct_size = sizeof(rs)};
    struct s3d_write_options wo = {.file_io = S3D_FILE_IO_BUFFERED, .stats = &ws};
    struct s3d_read_options ro = {.file_io = S3D_FILE_IO_AUTO, .stats = &rs};
    struct s3d_client_options co;
    struct s3d_client *cl = NULL;
    struct s3d_reader *rd = NULL;
    void *saved = current();
    char path[600];
    int refs0 = ctx_refs(0);

    memset(&co, 0, sizeof(co));
    co.staging_bytes = 8u << 20;
    co.part_size = 1u << 20;
    snprintf(path, sizeof(path), "%s/dev1-auto.safetensors", t_tmpdir());
    if (nvfs_path != NULL)
        setenv("S3D_TEST_NVFS_PATH", nvfs_path, 1);
    else
        unsetenv("S3D_TEST_NVFS_PATH");
    set_cur(NULL);
    CHECK_OK(s3d_client_new(&co, &cl));
    t_fill_random((void *)(uintptr_t)d1, 3u << 20, 61);
    memset((void *)(uintptr_t)(d1 + (4u << 20)), 0, 3u << 20);
    CHECK_OK(s3d_checkpoint_write(cl, path, &ts, 1, NULL, 0, &wo));
    CHECK_OK(s3d_reader_open(cl, path, &rd));
    CHECK_OK(s3d_reader_find(rd, "w", &td.index));
    CHECK_OK(s3d_reader_read(rd, &td, 1, &ro));
    s3d_reader_close(rd);
    CHECK(memcmp((void *)(uintptr_t)(d1 + (4u << 20)), (void *)(uintptr_t)d1, 3u << 20) == 0);
    CHECK(ws.bytes_cufile == 0 && ws.bytes_direct == 0 && ws.bytes_buffered == 3u << 20);
    CHECK(rs.bytes_cufile == (nvfs_path ? 3u << 20 : 0));
    CHECK(rs.bytes_cufile + rs.bytes_direct + rs.bytes_buffered == 3u << 20);
    CHECK(current() == NULL);
    if (ctx_refs(0) != refs0)
        t_fail(__FILE__, __LINE__, "a load into cuda:1 (nvidia-fs %s) made a context on GPU 0",
               nvfs_path ? "present" : "absent");
    s3d_client_free(cl);
    unlink(path);
    unsetenv("S3D_TEST_NVFS_PATH");
    set_cur(saved);
}

/* test_cuda_fake cufile-mode MODE EXT4_FILE TMPFS_FILE CUFILE_JSON: run by main in a process
 * of its own, with the fake libcufile in driver mode MODE ("p2pdma": cuFile 1.15 over PCI
 * P2PDMA, no nvidia-fs; "compat": force_compat_mode, nvidia-fs present). Exit 0 when the
 * driver and each file are seen in the right mode. */
static int cufile_mode_child(char **argv)
{
    const int p2p = strcmp(argv[2], "p2pdma") == 0;
    struct s3d_device *d2;
    struct s3d_cufile *h1 = NULL, *h2 = NULL;
    const char *why = NULL;
    setenv("FAKE_CUFILE_MODE", argv[2], 1);
    if (p2p) {
        unsetenv("S3D_TEST_NVFS_PATH");
        setenv("CUFILE_ENV_PATH_JSON", "/nonexistent/cufile.json", 1);
        if (s3d_cufile_gds() != 0) /* no nvidia-fs, no P2PDMA configured */
            return 2;
        setenv("CUFILE_ENV_PATH_JSON", argv[5], 1);
        if (s3d_cufile_gds() != 1) /* configured: worth opening */
            return 3;
    } else {
        setenv("S3D_TEST_NVFS_PATH", argv[3], 1);
    }
    if (s3d_device_open(0, &d2) != 0 || s3d_cufile_available(d2, 0, &why) != 1)
        return 4;
    const int want = p2p ? S3D_CUFILE_MODE_P2PDMA : S3D_CUFILE_MODE_COMPAT;
    if (s3d_cufile_driver_mode() != want || s3d_cufile_gds() != p2p)
        return 5;
    int e2 = open(argv[3], O_RDONLY), s2 = open(argv[4], O_RDONLY);
    if (s3d_cufile_open(d2, 0, e2, &h1) != 0 || s3d_cufile_open(d2, 0, s2, &h2) != 0)
        return 6;
    if (s3d_cufile_file_mode(h1) != want || s3d_cufile_file_mode(h2) != S3D_CUFILE_MODE_COMPAT)
        return 7;
    s3d_cufile_close(h1);
    s3d_cufile_close(h2);
    close(e2);
    close(s2);
    s3d_device_free(d2);
    return 0;
}

/* test_cuda_fake cufile-ctx FILE read|write: run by main in a process of its own (a fresh
 * cuFile driver), on a thread whose current context is device 0's, reading FILE into device 1
 * in mode AUTO (nvidia-fs present) and CUFILE and writing it back from there, or ("write")
 * only saving from device 1 in mode AUTO, the first cuFile use: the driver is opened, the
 * file registered and every cuFile call made in device 1's context (the fake refuses I/O
 * into memory of another device than the current context's), and the thread's context is
 * device 0's again after each call. Exit 0 when so. */
static int cufile_ctx_child(char **argv)
{
    void *culib = dlopen("libcufile.so.0", RTLD_NOW), *ctx0;
    int (*open_dev)(void) = culib ? (int (*)(void))dlsym(culib, "fake_cufile_open_dev") : NULL;
    int (*reg_dev)(void) = culib ? (int (*)(void))dlsym(culib, "fake_cufile_register_dev") : NULL;
    int (*reads)(void) = culib ? (int (*)(void))dlsym(culib, "fake_cufile_reads") : NULL;
    struct s3d_device *d;
    struct s3d_pool *pl;
    struct s3d_file_writer *w;
    uint64_t dst;
    uint32_t c = 0, wc = 0;
    char out[600];
    const size_t n = 3u << 20;
    unsigned char *want = malloc(n), *back = malloc(n);
    int rc = 0;
    int fd = open(argv[2], O_RDONLY);
    if (open_dev == NULL || reg_dev == NULL || reads == NULL || want == NULL || back == NULL ||
        fd < 0 || pread(fd, want, n, 1) != (ssize_t)n)
        return 2;
    close(fd);
    setenv("S3D_TEST_NVFS_PATH", argv[2], 1);
    setenv("S3D_TEST_CUFILE_BLOCK", "nvme", 1);
    if (retain(&ctx0, 0) != 0 || set_cur(ctx0) != 0 || s3d_device_open(0, &d) != 0 ||
        s3d_device_mem_alloc(d, 1, 8u << 20, &dst) != 0 ||
        s3d_pool_new(d, 4u << 20, 1u << 20, &pl) != 0)
        return 3;
    struct s3d_file_range r = {1, n, (void *)(uintptr_t)(dst + 8), 1, &c};
    struct s3d_file_io_opts o = {.mode = S3D_FILE_IO_AUTO};
    struct s3d_file_seg seg = {(const void *)(uintptr_t)(dst + 8), n, 1};
    snprintf(out, sizeof(out), "%s.ctx-out", argv[2]);
    if (strcmp(argv[3], "write") == 0) { /* a save opens the driver: AUTO, nvidia-fs present */
        memcpy((void *)(uintptr_t)(dst + 8), want, n);
        if (s3d_file_writer_open(d, pl, out, &o, &w) != 0 ||
            s3d_file_writer_write(w, 0, &seg, 1, &wc) != 0 || s3d_file_writer_commit(w) != 0)
            return 10;
        s3d_file_writer_free(w);
        unlink(out);
        rc = open_dev() == 1 && reg_dev() == 1 && current() == ctx0 ? 0 : 11;
        goto out;
    }
    if (s3d_file_read_ranges(d, pl, argv[2], &r, 1, &o) != 0 || reads() == 0)
        return 4; /* AUTO opened cuFile and read through it */
    if (open_dev() != 1 || reg_dev() != 1 || current() != ctx0)
        return 5;
    o.mode = S3D_FILE_IO_CUFILE;
    memset((void *)(uintptr_t)dst, 0, 8u << 20);
    if (s3d_file_read_ranges(d, pl, argv[2], &r, 1, &o) != 0 || reg_dev() != 1 ||
        current() != ctx0 || memcmp((void *)(uintptr_t)(dst + 8), want, n) != 0 ||
        c != s3d_crc32c(0, want, n))
        return 6;
    if (s3d_file_writer_open(d, pl, out, &o, &w) != 0 ||
        s3d_file_writer_write(w, 0, &seg, 1, &wc) != 0 || s3d_file_writer_commit(w) != 0 ||
        reg_dev() != 1 || current() != ctx0)
        return 7;
    s3d_file_writer_free(w);
    fd = open(out, O_RDONLY);
    if (fd < 0 || read(fd, back, n) != (ssize_t)n || memcmp(back, want, n) != 0 ||
        wc != s3d_crc32c(0, want, n))
        return 8;
    close(fd);
    unlink(out);
out:
    s3d_pool_free(pl);
    s3d_device_mem_free(d, 1, dst);
    s3d_device_free(d);
    free(want);
    free(back);
    return rc;
}

/* Concurrent reads of one file through one descriptor (the reader's own, as when the file
 * system refuses O_DIRECT), each into its own 1 MiB of device memory, mode CUFILE. */
struct shared_read {
    struct s3d_device *dev;
    struct s3d_pool *pool;
    const char *path;
    int fd, rc;
    uint64_t dst, off;
    uint32_t crc;
};
static void *shared_read_main(void *arg)
{
    struct shared_read *a = arg;
    struct s3d_file_range r = {a->off, 1u << 20, (void *)(uintptr_t)a->dst, 1, &a->crc};
    struct s3d_file_io_opts o = {.mode = S3D_FILE_IO_CUFILE};
    for (int i = 0; i < 8 && a->rc == 0; i++)
        a->rc = s3d_file_read_ranges_fd(a->dev, a->pool, a->fd, a->path, &r, 1, &o);
    return NULL;
}

/* test_cuda_fake cufile-exit never|open|fork: run by main in a process of its own, which exits
 * with exit() after it never opened cuFile, opened it, or opened it and forked a child that
 * exits too. An exit hook registered before cuFile was opened runs after the library's and
 * checks that the driver was closed exactly once in the process that opened it and never
 * elsewhere: _exit(20 + closes) otherwise. */
static pid_t g_opener;
static int (*g_closes)(void);
static void exit_check(void)
{
    const int want = getpid() == g_opener ? 1 : 0;
    if (g_closes() != want)
        _exit(20 + g_closes());
}
static int cufile_exit_child(char **argv)
{
    void *culib = dlopen("libcufile.so.0", RTLD_NOW);
    struct s3d_device *d;
    *(void **)&g_closes = culib != NULL ? dlsym(culib, "fake_cufile_closes") : NULL;
    if (g_closes == NULL || atexit(exit_check) != 0)
        return 2;
    if (strcmp(argv[2], "never") == 0)
        exit(0);
    if (s3d_device_open(0, &d) != 0 || s3d_cufile_available(d, 1, NULL) != 1)
        return 3;
    s3d_device_free(d); /* cuFile's driver stays open: it is the process's */
    g_opener = getpid();
    if (strcmp(argv[2], "fork") == 0) {
        int status;
        pid_t pid = fork();
        if (pid == 0)
            exit(0); /* inherits the hooks: closes nothing it never opened */
        if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0)
            return 4;
    }
    exit(0);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "cufile-exit") == 0)
        return cufile_exit_child(argv);
    if (argc == 6 && strcmp(argv[1], "cufile-mode") == 0)
        return cufile_mode_child(argv);
    if (argc == 4 && strcmp(argv[1], "cufile-ctx") == 0) {
        void *lib = dlopen("libcuda.so.1", RTLD_NOW);
        if (lib == NULL)
            return 9;
        *(void **)&get_cur = dlsym(lib, "cuCtxGetCurrent");
        *(void **)&set_cur = dlsym(lib, "cuCtxSetCurrent");
        *(void **)&retain = dlsym(lib, "cuDevicePrimaryCtxRetain");
        return cufile_ctx_child(argv);
    }
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (lib == NULL)
        t_skip("the fake libcuda.so.1 does not load: %s", dlerror());
    if (dlsym(lib, "fake_cuda_stats") == NULL)
        t_skip("the real libcuda.so.1 is found before the fake one");
    void *culib = dlopen("libcufile.so.0", RTLD_NOW);
    int fake_cufile = culib != NULL && dlsym(culib, "fake_cuda_stats") != NULL;
    *(void **)&stats = dlsym(lib, "fake_cuda_stats");
    *(void **)&get_cur = dlsym(lib, "cuCtxGetCurrent");
    *(void **)&set_cur = dlsym(lib, "cuCtxSetCurrent");
    *(void **)&retain = dlsym(lib, "cuDevicePrimaryCtxRetain");
    *(void **)&htod_async = dlsym(lib, "cuMemcpyHtoDAsync_v2");
    *(void **)&release = dlsym(lib, "cuDevicePrimaryCtxRelease_v2");
    *(void **)&stream_create = dlsym(lib, "cuStreamCreate");
    *(void **)&stream_destroy = dlsym(lib, "cuStreamDestroy_v2");
    struct fake_cuda_stats st;
    struct s3d_device *dev;

    /* cuInit failing: the host backend with the driver's words, not an error. */
    setenv("FAKE_CUDA_FAIL_INIT", "1", 1);
    CHECK_OK(s3d_device_open(0, &dev));
    CHECK_STREQ(s3d_device_backend(dev), "host");
    CHECK(strstr(s3d_device_why_host(dev), "cuInit: no CUDA-capable device is detected "
                                           "(CUDA_ERROR_NO_DEVICE, 100)") != NULL);
    s3d_device_free(dev);
    unsetenv("FAKE_CUDA_FAIL_INIT");

    CHECK_OK(s3d_device_open(0, &dev));
    CHECK_STREQ(s3d_device_backend(dev), "cuda");
    CHECK(s3d_device_count(dev) == 2 && s3d_device_has_gpu(dev));

    /* The caller's context is on device 1 and nothing has made one on device 0: the calls
     * that need only some context (pinned memory, pointer queries, pinning for no particular
     * device) use the caller's, so GPU 0 gets no context, and the caller's stays current. */
    {
        int (*ctx_refs)(int);
        void *theirs1, *hp;
        static unsigned char reg[3 * 4096];
        int isd1, ord1;
        *(void **)&ctx_refs = dlsym(lib, "fake_cuda_ctx_refs");
        CHECK(ctx_refs != NULL && ctx_refs(0) == 0);
        CHECK(retain(&theirs1, 1) == 0);
        set_cur(theirs1);
        CHECK_OK(s3d_device_host_alloc(dev, 1u << 20, &hp));
        CHECK(current() == theirs1);
        CHECK_OK(s3d_device_pointer_info(dev, hp, &isd1, &ord1));
        CHECK(isd1 == 0 && ord1 == -1);
        CHECK_OK(s3d_device_host_register(dev, -1, reg, sizeof(reg)));
        s3d_device_host_unregister(dev, -1, reg);
        s3d_device_host_free(dev, hp, 1u << 20);
        CHECK(current() == theirs1);
        CHECK(ctx_refs(0) == 0); /* no context on GPU 0 */
        set_cur(NULL);
        CHECK(release(1) == 0);
    }

    /* No context current (Python's helper threads), but this device already works on GPU 1
     * (a load into cuda:1 retained it): pointer queries and pinned memory use that context
     * rather than fall back to device 0's, and leave none current. */
    {
        int (*ctx_refs)(int);
        struct s3d_device *d2;
        uint64_t dn;
        void *hp;
        int isd, ord;
        *(void **)&ctx_refs = dlsym(lib, "fake_cuda_ctx_refs");
        CHECK(ctx_refs(0) == 0 && current() == NULL);
        CHECK_OK(s3d_device_open(0, &d2));
        CHECK_OK(s3d_device_mem_alloc(d2, 1, 4096, &dn));
        CHECK(current() == NULL);
        CHECK_OK(s3d_device_pointer_info(d2, (void *)(uintptr_t)dn, &isd, &ord));
        CHECK(isd == 1 && ord == 1);
        CHECK_OK(s3d_device_host_alloc(d2, 1u << 20, &hp));
        CHECK_OK(s3d_device_pointer_info(d2, hp, &isd, &ord));
        CHECK(isd == 0 && ord == -1);
        s3d_device_host_free(d2, hp, 1u << 20);
        CHECK(current() == NULL);
        if (ctx_refs(0) != 0)
            t_fail(__FILE__, __LINE__,
                   "no context current: a pointer query or pinned "
                   "allocation made a context on GPU 0");
        s3d_device_mem_free(d2, 1, dn);
        s3d_device_free(d2);
    }

    /* No context current: pinned memory still works (device 0's primary is retained), and
     * none is current afterwards: the caller's current device is unchanged by every call. */
    CHECK(current() == NULL);
    void *h;
    CHECK_OK(s3d_device_host_alloc(dev, 1u << 20, &h));
    CHECK(current() == NULL);
    {
        uint64_t dn;
        struct s3d_stream *sn;
        struct s3d_event *en;
        CHECK_OK(s3d_device_mem_alloc(dev, 1, 4096, &dn));
        CHECK(current() == NULL);
        CHECK_OK(s3d_device_stream_new(dev, 1, &sn));
        CHECK(current() == NULL);
        CHECK_OK(s3d_device_event_new(dev, 1, &en));
        CHECK_OK(s3d_device_copy_htod(dev, sn, dn, h, 4096));
        CHECK_OK(s3d_device_event_record(dev, en, sn));
        CHECK(s3d_device_event_query(dev, en) >= 0);
        CHECK_OK(s3d_device_event_sync(dev, en));
        CHECK_OK(s3d_device_wait_external(dev, sn, 0));
        CHECK_OK(s3d_device_stream_sync(dev, sn));
        CHECK(current() == NULL);
        s3d_device_event_free(dev, en);
        s3d_device_stream_free(dev, sn);
        s3d_device_mem_free(dev, 1, dn);
        CHECK(current() == NULL);
    }
    int isd, ord;
    CHECK_OK(s3d_device_pointer_info(dev, h, &isd, &ord));
    CHECK(isd == 0 && ord == -1);
    int local = 0;
    CHECK_OK(s3d_device_pointer_info(dev, &local, &isd, &ord)); /* unknown to CUDA */
    CHECK(isd == 0 && ord == -1);

    /* The caller works on device 1: every call leaves its context current. */
    void *mine;
    CHECK(retain(&mine, 1) == 0);
    set_cur(mine);
    uint64_t d0, d1;
    CHECK_OK(s3d_device_mem_alloc(dev, 0, 8u << 20, &d0));
    CHECK(current() == mine);
    CHECK_OK(s3d_device_mem_alloc(dev, 1, 8u << 20, &d1));
    CHECK_OK(s3d_device_pointer_info(dev, (void *)(uintptr_t)(d0 + 5), &isd, &ord));
    CHECK(isd == 1 && ord == 0);
    CHECK_OK(s3d_device_pointer_info(dev, (void *)(uintptr_t)d1, &isd, &ord));
    CHECK(isd == 1 && ord == 1);

    struct s3d_stream *s0;
    struct s3d_event *e0;
    CHECK_OK(s3d_device_stream_new(dev, 0, &s0));
    CHECK_OK(s3d_device_event_new(dev, 0, &e0));
    memset(h, 0x42, 4096);
    memset((void *)(uintptr_t)d0, 0, 4096);
    CHECK_OK(s3d_device_copy_htod(dev, s0, d0, h, 4096));
    CHECK_OK(s3d_device_event_record(dev, e0, s0));
    CHECK(s3d_device_event_query(dev, e0) == 0); /* CUDA_ERROR_NOT_READY: not run yet */
    CHECK(((unsigned char *)(uintptr_t)d0)[0] == 0);
    CHECK_OK(s3d_device_event_sync(dev, e0));
    CHECK(s3d_device_event_query(dev, e0) == 1);
    CHECK(((unsigned char *)(uintptr_t)d0)[4095] == 0x42);
    CHECK_OK(s3d_device_copy_dtoh(dev, s0, (char *)h + 8192, d0, 4096));
    CHECK_OK(s3d_device_stream_sync(dev, s0));
    CHECK(current() == mine);

    /* Waiting on the caller's streams: the legacy default stream, and one of its own context
     * (device 1) while ours is on device 0. */
    CHECK_OK(s3d_device_wait_external(dev, s0, 0));
    void *theirs;
    CHECK(stream_create(&theirs, 1) == 0);
    /* The caller's stream has a copy into d1 queued: after the wait, our read of d1 sees it
     * (the fake runs the caller's work first, as the GPU orders it). */
    static unsigned char pattern[4096], seen[4096];
    memset(pattern, 0x5c, sizeof(pattern));
    memset((void *)(uintptr_t)d1, 0, 4096);
    CHECK(htod_async(d1, pattern, 4096, theirs) == 0);
    CHECK_OK(s3d_device_wait_external(dev, s0, (uint64_t)(uintptr_t)theirs));
    CHECK_OK(s3d_device_copy_dtoh(dev, s0, seen, d1, 4096));
    CHECK_OK(s3d_device_stream_sync(dev, s0));
    CHECK(seen[0] == 0x5c && seen[4095] == 0x5c);
    CHECK(current() == mine);
    CHECK(stream_destroy(theirs) == 0);

    /* A failing copy: S3D_ECUDA naming the function and the driver's words. */
    setenv("FAKE_CUDA_FAIL_COPY", "1", 1);
    CHECK_ERR(s3d_device_copy_htod(dev, s0, d0, h, 16), S3D_ECUDA);
    CHECK_MSG_HAS("cuMemcpyHtoDAsync: an illegal memory access was encountered "
                  "(CUDA_ERROR_ILLEGAL_ADDRESS, 700)");
    unsetenv("FAKE_CUDA_FAIL_COPY");
    struct s3d_stream *none;
    CHECK_ERR(s3d_device_stream_new(dev, 2, &none), S3D_ENODEVICE);
    CHECK(none == NULL);

    /* The staged file path on the cuda code, to device 1. */
    char path[512];
    snprintf(path, sizeof(path), "%s/fake.bin", t_tmpdir());
    const size_t fsz = (5u << 20) + 333;
    unsigned char *data = malloc(fsz);
    CHECK(data != NULL);
    t_fill_random(data, fsz, 17);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && write(fd, data, fsz) == (ssize_t)fsz);
    close(fd);
    struct s3d_pool *pool;
    CHECK_OK(s3d_pool_new(dev, 4 * (1u << 20), 1u << 20, &pool));
    uint32_t crc[2];
    struct s3d_file_range r[2] = {{4097, 3u << 20, (void *)(uintptr_t)(d1 + 8), 1, &crc[0]},
                                  {fsz - 100, 100, (void *)(uintptr_t)d0, 0, &crc[1]}};
    struct s3d_file_io_opts o = {.mode = S3D_FILE_IO_DIRECT};
    CHECK_OK(s3d_file_read_ranges(dev, pool, path, r, 2, &o));
    CHECK(memcmp((void *)(uintptr_t)(d1 + 8), data + 4097, 3u << 20) == 0);
    CHECK(memcmp((void *)(uintptr_t)d0, data + fsz - 100, 100) == 0);
    CHECK(crc[0] == s3d_crc32c(0, data + 4097, 3u << 20));
    CHECK(crc[1] == s3d_crc32c(0, data + fsz - 100, 100));
    CHECK(current() == mine);

    /* The public API on the cuda code: a save of tensors on both devices and a load back,
     * on a thread whose current context is the caller's (device 1), then on one with none:
     * the bytes are right and the thread's current context is what it was. */
    {
        void *ctxs[2] = {mine, NULL};
        int64_t shp[2][1] = {{1u << 20}, {300001}};
        struct s3d_client *cl = NULL;
        struct s3d_client_options co;
        char cpath[600];
        memset(&co, 0, sizeof(co));
        co.staging_bytes = 4u << 20;
        co.part_size = 1u << 20;
        snprintf(cpath, sizeof(cpath), "%s/fake-ckpt.safetensors", t_tmpdir());
        for (int k = 0; k < 2; k++) {
            static const int modes[] = {S3D_FILE_IO_DIRECT, S3D_FILE_IO_BUFFERED};
            struct s3d_tensor_src ts[2] = {{.name = "a",
                                            .dtype = S3D_DTYPE_U8,
                                            .ndim = 1,
                                            .shape = shp[0],
                                            .ptr = (const void *)(uintptr_t)d0,
                                            .device = 0,
                                            .nbytes = 1u << 20},
                                           {.name = "b",
                                            .dtype = S3D_DTYPE_U8,
                                            .ndim = 1,
                                            .shape = shp[1],
                                            .ptr = (const void *)(uintptr_t)d1,
                                            .device = 1,
                                            .nbytes = 300001}};
            struct s3d_reader *rd = NULL;
            struct s3d_write_options cwo = {.file_io = modes[k]};
            struct s3d_read_options cro = {.file_io = modes[k]};
            struct s3d_tensor_dest td[2] = {{.index = 0,
                                             .ptr = (void *)(uintptr_t)(d1 + (2u << 20)),
                                             .device = 1,
                                             .capacity = 1u << 20},
                                            {.index = 1,
                                             .ptr = (void *)(uintptr_t)(d0 + (2u << 20)),
                                             .device = 0,
                                             .capacity = 300001}};
            set_cur(ctxs[k]);
            CHECK_OK(s3d_client_new(&co, &cl));
            t_fill_random((void *)(uintptr_t)d0, 1u << 20, 40 + k);
            t_fill_random((void *)(uintptr_t)d1, 300001, 50 + k);
            CHECK_OK(s3d_checkpoint_write(cl, cpath, ts, 2, NULL, 0, &cwo));
            CHECK(current() == ctxs[k]);
            CHECK_OK(s3d_reader_open(cl, cpath, &rd));
            CHECK(current() == ctxs[k]);
            CHECK_OK(s3d_reader_read(rd, td, 2, &cro));
            CHECK(current() == ctxs[k]);
            s3d_reader_close(rd);
            CHECK(memcmp((void *)(uintptr_t)(d1 + (2u << 20)), (void *)(uintptr_t)d0, 1u << 20) ==
                  0);
            CHECK(memcmp((void *)(uintptr_t)(d0 + (2u << 20)), (void *)(uintptr_t)d1, 300001) == 0);
            s3d_client_free(cl);
            CHECK(current() == ctxs[k]);
            unlink(cpath);
        }
        set_cur(mine);
    }

    /* cuFile: read (in 1 MiB pieces, the fake's limit) with the CRC pass, and write. */
    const char *why = NULL;
    if (fake_cufile) {
        /* The test folder counts as being on NVMe (the per-file mode checks below say why). */
        setenv("S3D_TEST_CUFILE_BLOCK", "nvme", 1);
        int (*cf_opens)(void) = (int (*)(void))dlsym(culib, "fake_cufile_opens");
        int (*ctx_refs)(int) = (int (*)(int))dlsym(lib, "fake_cuda_ctx_refs");
        CHECK(cf_opens != NULL && ctx_refs != NULL);
        /* Without nvidia-fs, AUTO would not use cuFile: the driver is not even opened. */
        load_into_dev1(d1, ctx_refs, NULL);
        CHECK(cf_opens() == 0);

        /* A driver that refuses: "not available" with the reason (a child forked before
         * this process tried cuFile may open it itself). */
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            struct s3d_device *d2;
            setenv("FAKE_CUFILE_FAIL_OPEN", "1", 1);
            setenv("FAKE_CUDA_FORK_OK", "1", 1); /* a real driver would refuse: see below */
            set_cur(NULL);
            if (s3d_device_open(0, &d2) != 0 || s3d_cufile_available(d2, -1, &why) != 0 ||
                strstr(why, "cuFileDriverOpen: CU_FILE_PLATFORM_NOT_SUPPORTED (5007)") == NULL)
                _exit(1);
            _exit(0);
        }
        int status;
        CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);

        const char *env_log = getenv("CUFILE_LOGFILE_PATH");
        CHECK(s3d_cufile_available(dev, -1, &why) == 1);
        void *cf_lib = dlopen("libcufile.so.0", RTLD_NOW | RTLD_NOLOAD);
        /* cuFile's log goes nowhere near the working directory unless asked, through its
         * parameter API (set before the driver opens), not through the environment: a
         * setenv() races with every other thread's getenv(). */
        const char *(*cf_logfile)(void) =
            cf_lib ? (const char *(*)(void))dlsym(cf_lib, "fake_cufile_logfile") : NULL;
        CHECK(cf_logfile != NULL);
        CHECK(getenv("CUFILE_LOGFILE_PATH") == env_log); /* the environment is untouched */
        if (getenv("S3D_LOG") == NULL && env_log == NULL)
            CHECK_STREQ(cf_logfile(), "/dev/null");
        else
            CHECK_STREQ(cf_logfile(), "");
        int (*cf_reads)(void) = cf_lib ? (int (*)(void))dlsym(cf_lib, "fake_cufile_reads") : NULL;
        CHECK(cf_reads != NULL);
        int (*cf_overlapped)(void) =
            cf_lib ? (int (*)(void))dlsym(cf_lib, "fake_cufile_overlapped") : NULL;
        CHECK(cf_overlapped != NULL);
        memset((void *)(uintptr_t)d1, 0, 8u << 20);
        r[0].file_offset = 1;
        o.mode = S3D_FILE_IO_CUFILE;
        /* The CRC of bytes cuFile put on the GPU is summed from copies back that run while
         * cuFile reads the next piece (3 pieces of the 1 MiB chunk here), with no synchronize
         * per piece: at most the one before the first read (the caller's work). */
        struct fake_cuda_stats c0, c1;
        r[0].crc_out = NULL; /* the synchronizes of a read without CRC */
        stats(&c0);
        CHECK_OK(s3d_file_read_ranges(dev, pool, path, r, 1, &o));
        stats(&c1);
        const int syncs_no_crc = c1.stream_syncs - c0.stream_syncs;
        r[0].crc_out = &crc[0];
        memset((void *)(uintptr_t)d1, 0, 8u << 20);
        int ov0 = cf_overlapped();
        struct s3d_file_io_counts cnt = {0, 0, 0}; /* the bytes by path, here all cuFile's */
        o.counts = &cnt;
        stats(&c0);
        CHECK_OK(s3d_file_read_ranges(dev, pool, path, r, 1, &o));
        stats(&c1);
        o.counts = NULL;
        CHECK(cnt.cufile == 3u << 20 && cnt.direct == 0 && cnt.buffered == 0);
        CHECK(memcmp((void *)(uintptr_t)(d1 + 8), data + 1, 3u << 20) == 0);
        CHECK(crc[0] == s3d_crc32c(0, data + 1, 3u << 20));
        if (cf_overlapped() - ov0 < 2 || c1.stream_syncs - c0.stream_syncs > syncs_no_crc)
            t_fail(__FILE__, __LINE__, "cuFile read: %d reads overlapped a copy, %d syncs (%d)",
                   cf_overlapped() - ov0, c1.stream_syncs - c0.stream_syncs, syncs_no_crc);
        /* Every length around the pieces: the right CRC, the chunks back in the pool. */
        static const uint64_t cl[] = {
            1, 4095, (1u << 20) - 1, 1u << 20, (1u << 20) + 1, (2u << 20) + 7, 3u << 20};
        for (size_t q = 0; q < S3D_ARRAY_LEN(cl); q++) {
            struct s3d_file_range one = {4096 + 3, cl[q], (void *)(uintptr_t)(d1 + 16), 1, &crc[0]};
            crc[0] = 0;
            CHECK_OK(s3d_file_read_ranges(dev, pool, path, &one, 1, &o));
            CHECK(memcmp((void *)(uintptr_t)(d1 + 16), data + 4096 + 3, cl[q]) == 0);
            CHECK(crc[0] == s3d_crc32c(0, data + 4096 + 3, cl[q]));
            CHECK(s3d_pool_free_count(pool) == 4);
        }
        /* cuFile does not follow stream order. A read into memory the caller's stream still
         * writes (a kernel queued before the load) and a write of memory it still writes
         * (the kernel producing the tensor) wait for that work first: the fake libcufile
         * counts I/O that did not (fake_cufile_unordered), whose bytes come out wrong as on
         * a GPU (the queued work runs after the I/O). */
        {
            int (*unordered)(void) = (int (*)(void))dlsym(culib, "fake_cufile_unordered");
            int (*stream_sync)(void *) = (int (*)(void *))dlsym(lib, "cuStreamSynchronize");
            static unsigned char junk[1u << 20];
            char wout[600];
            struct s3d_file_writer *w;
            struct s3d_file_seg seg = {(const void *)(uintptr_t)(d1 + 8), 3u << 20, 1};
            void *caller;
            uint32_t wcrc = 0;
            CHECK(unordered != NULL && stream_sync != NULL && stream_create(&caller, 1) == 0);
            const int u0 = unordered();
            memset(junk, 0xee, sizeof(junk));
            memset((void *)(uintptr_t)d1, 0, 8u << 20);
            for (unsigned q = 0; q < 3; q++)
                CHECK(htod_async(d1 + 8 + (q << 20), junk, sizeof(junk), caller) == 0);
            o.cuda_stream = (uint64_t)(uintptr_t)caller;
            CHECK_OK(s3d_file_read_ranges(dev, pool, path, r, 1, &o));
            CHECK(stream_sync(caller) == 0);
            CHECK(memcmp((void *)(uintptr_t)(d1 + 8), data + 1, 3u << 20) == 0);
            CHECK(crc[0] == s3d_crc32c(0, data + 1, 3u << 20));
            memset((void *)(uintptr_t)(d1 + 8), 0x11, 3u << 20); /* stale until the kernel */
            CHECK(htod_async(d1 + 8, data + 1, 3u << 20, caller) == 0);
            snprintf(wout, sizeof(wout), "%s/fake-order.bin", t_tmpdir());
            CHECK_OK(s3d_file_writer_open(dev, pool, wout, &o, &w));
            CHECK_OK(s3d_file_writer_write(w, 0, &seg, 1, &wcrc));
            CHECK_OK(s3d_file_writer_commit(w));
            s3d_file_writer_free(w);
            CHECK(wcrc == s3d_crc32c(0, data + 1, 3u << 20));
            unsigned char *wb = malloc(3u << 20);
            int wfd = open(wout, O_RDONLY);
            CHECK(wb != NULL && wfd >= 0 && read(wfd, wb, 3u << 20) == (ssize_t)(3u << 20));
            close(wfd);
            CHECK(memcmp(wb, data + 1, 3u << 20) == 0);
            free(wb);
            unlink(wout);
            if (unordered() != u0)
                t_fail(__FILE__, __LINE__, "%d cuFile calls ran before the caller's stream work",
                       unordered() - u0);
            o.cuda_stream = 0;
            CHECK(stream_destroy(caller) == 0);
        }
        /* A copy back queued, then its event record fails: the chunks go back to the pool
         * only once that copy has run (the fake runs it only when asked, as late as a GPU
         * could), or another transfer that takes them would see its bytes overwritten. */
        {
            int (*pending)(void) = (int (*)(void))dlsym(lib, "fake_cuda_pending_copies");
            struct s3d_stream_set g;
            struct s3d_cufile *cf = NULL;
            uint64_t moved = 0;
            int failed = 0, rfd = open(path, O_RDONLY);
            CHECK(pending != NULL && rfd >= 0);
            s3d_stream_set_init(&g, dev);
            CHECK_OK(s3d_cufile_open(dev, 1, rfd, &cf));
            const struct fio_cufile_io io = {
                dev, pool, &g, cf, NULL, 1, 0, (uint64_t)(uintptr_t)(d1 + 8), 3u << 20, 1, crc};
            setenv("FAKE_CUDA_FAIL_RECORD", "1", 1);
            CHECK_ERR(fio_cufile_crc_io(&io, &moved, &failed), S3D_ECUDA);
            unsetenv("FAKE_CUDA_FAIL_RECORD");
            CHECK_MSG_HAS("cuEventRecord");
            if (pending() != 0)
                t_fail(__FILE__, __LINE__,
                       "%d copies into staging chunks still queued after "
                       "they went back to the pool",
                       pending());
            CHECK(s3d_pool_free_count(pool) == 4);
            s3d_stream_set_free(&g);
            s3d_cufile_close(cf);
            close(rfd);
        }
        /* One descriptor, registered with cuFile by concurrent reads (the fake refuses a
         * descriptor registered twice, as cuFile does): one registration, shared, dropped
         * with the last reference. */
        {
            struct shared_read a[4];
            pthread_t th[4];
            struct s3d_cufile *held = NULL;
            int sfd = open(path, O_RDONLY);
            CHECK(sfd >= 0);
            CHECK_OK(s3d_cufile_open(dev, 1, sfd, &held)); /* another load's, still open */
            s3d_fileio_refuse_direct = 1;
            for (int k = 0; k < 4; k++) {
                a[k] = (struct shared_read){.dev = dev,
                                            .pool = pool,
                                            .path = path,
                                            .fd = sfd,
                                            .dst = d1 + ((uint64_t)k << 21),
                                            .off = 4096u * k + 5};
                CHECK(pthread_create(&th[k], NULL, shared_read_main, &a[k]) == 0);
            }
            for (int k = 0; k < 4; k++) {
                CHECK(pthread_join(th[k], NULL) == 0);
                if (a[k].rc != 0)
                    t_fail(__FILE__, __LINE__, "read %d of a shared descriptor: %s", k,
                           s3d_err_name(a[k].rc));
                CHECK(memcmp((void *)(uintptr_t)a[k].dst, data + a[k].off, 1u << 20) == 0);
                CHECK(a[k].crc == s3d_crc32c(0, data + a[k].off, 1u << 20));
            }
            s3d_fileio_refuse_direct = 0;
            s3d_cufile_close(held);
            CHECK_OK(s3d_cufile_open(dev, 1, sfd, &held)); /* deregistered with the last */
            s3d_cufile_close(held);
            close(sfd);
        }
        /* AUTO: no nvidia-fs here, so cuFile would run in compatibility mode: the staged
         * path is used. With nvidia-fs (S3D_TEST_NVFS_PATH stands in for it), cuFile. */
        o.mode = S3D_FILE_IO_AUTO;
        int before = cf_reads();
        unsetenv("S3D_TEST_NVFS_PATH");
        CHECK(!s3d_cufile_gds());
        CHECK_OK(s3d_file_read_ranges(dev, pool, path, r, 1, &o));
        CHECK(cf_reads() == before);
        setenv("S3D_TEST_NVFS_PATH", path, 1);
        CHECK(s3d_cufile_gds());
        CHECK_OK(s3d_file_read_ranges(dev, pool, path, r, 1, &o));
        CHECK(cf_reads() > before);
        /* The same load by a new client on a thread with no context: through cuFile, whose
         * driver check and file handle use device 1's context, not GPU 0's. */
        before = cf_reads();
        load_into_dev1(d1, ctx_refs, path);
        CHECK(cf_reads() > before);
        setenv("S3D_TEST_NVFS_PATH", path, 1);
        /* A cuFileRead failing at run time: AUTO falls back to the staged path (right bytes);
         * CUFILE fails with the cuFile code named. */
        setenv("FAKE_CUFILE_FAIL_IO", "1", 1);
        memset((void *)(uintptr_t)d1, 0, 8u << 20);
        crc[0] = 0;
        memset(&cnt, 0, sizeof(cnt));
        o.counts = &cnt; /* the bytes count under the staged path that delivered them */
        CHECK_OK(s3d_file_read_ranges(dev, pool, path, r, 1, &o));
        o.counts = NULL;
        CHECK(cnt.cufile == 0 && cnt.direct + cnt.buffered == 3u << 20);
        CHECK(memcmp((void *)(uintptr_t)(d1 + 8), data + 1, 3u << 20) == 0);
        CHECK(crc[0] == s3d_crc32c(0, data + 1, 3u << 20));
        o.mode = S3D_FILE_IO_CUFILE;
        CHECK_ERR(s3d_file_read_ranges(dev, pool, path, r, 1, &o), S3D_ECUFILE);
        CHECK_MSG_HAS("CU_FILE_IO_ERROR");
        unsetenv("FAKE_CUFILE_FAIL_IO");
        unsetenv("S3D_TEST_NVFS_PATH");

        char out[600];
        snprintf(out, sizeof(out), "%s/fake-out.bin", t_tmpdir());
        struct s3d_file_writer *w;
        struct s3d_file_seg seg = {(const void *)(uintptr_t)(d1 + 8), 3u << 20, 1};
        uint32_t wcrc;
        o.mode = S3D_FILE_IO_CUFILE;
        /* At offset 10 every cuFileWrite is unaligned: a read-modify-write, which needs a
         * descriptor that can read. */
        int (*cf_rmw)(void) =
            cf_lib ? (int (*)(void))dlsym(cf_lib, "fake_cufile_rmw_writes") : NULL;
        CHECK(cf_rmw != NULL);
        int rmw_before = cf_rmw();
        memset(&cnt, 0, sizeof(cnt));
        o.counts = &cnt;
        CHECK_OK(s3d_file_writer_open(dev, pool, out, &o, &w));
        o.counts = NULL;
        ov0 = cf_overlapped();
        stats(&c0);
        CHECK_OK(s3d_file_writer_write(w, 10, &seg, 1, &wcrc));
        stats(&c1);
        CHECK(cf_rmw() > rmw_before);
        /* Writes too: each piece's copy back runs while cuFile writes it. */
        if (cf_overlapped() - ov0 < 3 || c1.stream_syncs - c0.stream_syncs > syncs_no_crc)
            t_fail(__FILE__, __LINE__, "cuFile write: %d writes overlapped a copy, %d syncs",
                   cf_overlapped() - ov0, c1.stream_syncs - c0.stream_syncs);
        CHECK_OK(s3d_file_writer_pwrite(w, 0, "0123456789", 10));
        CHECK_OK(s3d_file_writer_commit(w));
        s3d_file_writer_free(w);
        CHECK(wcrc == s3d_crc32c(0, data + 1, 3u << 20));
        CHECK(cnt.cufile == 3u << 20 && cnt.direct == 0 && cnt.buffered == 0);
        size_t n = (3u << 20) + 10;
        unsigned char *back = malloc(n + 1);
        fd = open(out, O_RDONLY);
        CHECK(fd >= 0 && read(fd, back, n + 1) == (ssize_t)n);
        close(fd);
        CHECK(memcmp(back, "0123456789", 10) == 0 && memcmp(back + 10, data + 1, n - 10) == 0);
        free(back);
        unlink(out);

        /* A cuFileWrite failing at run time: AUTO (with nvidia-fs) writes the segment
         * through the staging pool instead, with the same bytes. */
        setenv("S3D_TEST_NVFS_PATH", path, 1);
        setenv("FAKE_CUFILE_FAIL_IO", "1", 1);
        o.mode = S3D_FILE_IO_AUTO;
        memset(&cnt, 0, sizeof(cnt));
        o.counts = &cnt;
        CHECK_OK(s3d_file_writer_open(dev, pool, out, &o, &w));
        o.counts = NULL;
        CHECK_OK(s3d_file_writer_write(w, 10, &seg, 1, &wcrc));
        CHECK_OK(s3d_file_writer_pwrite(w, 0, "0123456789", 10));
        CHECK_OK(s3d_file_writer_commit(w));
        s3d_file_writer_free(w);
        CHECK(wcrc == s3d_crc32c(0, data + 1, 3u << 20));
        CHECK(cnt.cufile == 0 && cnt.direct == 0 && cnt.buffered == 3u << 20);
        back = malloc(n + 1);
        fd = open(out, O_RDONLY);
        CHECK(fd >= 0 && read(fd, back, n + 1) == (ssize_t)n);
        close(fd);
        CHECK(memcmp(back, "0123456789", 10) == 0 && memcmp(back + 10, data + 1, n - 10) == 0);
        free(back);
        unlink(out);
        unsetenv("FAKE_CUFILE_FAIL_IO");
        unsetenv("S3D_TEST_NVFS_PATH");

        /* Which way cuFile moves a file's bytes. nvidia-fs here (the fake's properties serve
         * NVMe): a file on ext4 goes direct, a file on tmpfs is registered all the same but
         * runs in compatibility mode, so AUTO reads it through the staging pool. */
        setenv("S3D_TEST_NVFS_PATH", path, 1);
        CHECK(s3d_cufile_driver_mode() == S3D_CUFILE_MODE_NVFS);
        CHECK_STREQ(s3d_cufile_mode_name(S3D_CUFILE_MODE_NVFS), "nvidia-fs");
        char shm_path[128];
        snprintf(shm_path, sizeof(shm_path), "/dev/shm/s3d-fake-%ld.bin", (long)getpid());
        int sfd = open(shm_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        CHECK(sfd >= 0 && write(sfd, data, fsz) == (ssize_t)fsz);
        int efd = open(path, O_RDONLY);
        CHECK(efd >= 0);
        struct s3d_cufile *cfe, *cfs;
        /* ext4 on a disk that is not NVMe (a VM's virtio disk): compatibility mode too. */
        setenv("S3D_TEST_CUFILE_BLOCK", "other", 1);
        CHECK_OK(s3d_cufile_open(dev, 1, efd, &cfe));
        CHECK(s3d_cufile_file_mode(cfe) == S3D_CUFILE_MODE_COMPAT);
        s3d_cufile_close(cfe);
        setenv("S3D_TEST_CUFILE_BLOCK", "nvme", 1); /* as if the test folder were on NVMe */
        CHECK_OK(s3d_cufile_open(dev, 1, efd, &cfe));
        CHECK_OK(s3d_cufile_open(dev, 1, sfd, &cfs));
        CHECK(s3d_cufile_file_mode(cfe) == S3D_CUFILE_MODE_NVFS);
        CHECK(s3d_cufile_file_mode(cfs) == S3D_CUFILE_MODE_COMPAT);
        s3d_cufile_close(cfe);
        s3d_cufile_close(cfs);
        o.mode = S3D_FILE_IO_AUTO;
        int reads0 = cf_reads();
        struct s3d_file_range sr = {4097, 3u << 20, (void *)(uintptr_t)(d1 + 8), 1, &crc[0]};
        memset((void *)(uintptr_t)d1, 0, 8u << 20);
        CHECK_OK(s3d_file_read_ranges(dev, pool, shm_path, &sr, 1, &o));
        CHECK(cf_reads() == reads0); /* tmpfs: the staged path */
        CHECK(memcmp((void *)(uintptr_t)(d1 + 8), data + 4097, 3u << 20) == 0);
        CHECK(crc[0] == s3d_crc32c(0, data + 4097, 3u << 20));
        CHECK_OK(s3d_file_read_ranges(dev, pool, path, &sr, 1, &o));
        CHECK(cf_reads() > reads0); /* ext4: cuFile */
        /* CUFILE mode on a file cuFile cannot reach directly (as tmpfs is): its compatibility
         * mode is off, so an error naming cuFile's code, not a slow read under its name. */
        reads0 = cf_reads();
        o.mode = S3D_FILE_IO_CUFILE;
        setenv("FAKE_CUFILE_NOT_DIRECT", "1", 1);
        CHECK(s3d_file_read_ranges(dev, pool, shm_path, &sr, 1, &o) == S3D_ECUFILE);
        CHECK(strstr(s3d_last_error_message(), "CU_FILE_IO_NOT_SUPPORTED") != NULL);
        unsetenv("FAKE_CUFILE_NOT_DIRECT");
        CHECK(cf_reads() == reads0);
        close(efd);
        close(sfd);
        unsetenv("S3D_TEST_NVFS_PATH");
        /* cuFile 1.15's P2PDMA (no nvidia-fs): AUTO opens cuFile when cufile.json turns
         * use_pcip2pdma on, the driver reports it, and ext4 goes direct, tmpfs not. Forced
         * compatibility mode: not GDS even with nvidia-fs. Each in a child, which opens its
         * own driver. */
        char json[600];
        snprintf(json, sizeof(json), "%s/cufile.json", t_tmpdir());
        FILE *jf = fopen(json, "w");
        CHECK(jf != NULL);
        fputs("{\n  \"properties\": {\n    // \"use_pcip2pdma\": false,\n"
              "    \"use_pcip2pdma\" : true\n  }\n}\n",
              jf);
        fclose(jf);
        /* cuFile's driver is closed at exit by the process that opened it, once, and not by
         * a child forked after (its implicit close at exit crashes on GDS hosts). */
        static const char *const exits[] = {"never", "open", "fork"};
        for (size_t m = 0; m < S3D_ARRAY_LEN(exits); m++) {
            pid = fork();
            CHECK(pid >= 0);
            if (pid == 0) {
                execl("/proc/self/exe", "test_cuda_fake", "cufile-exit", exits[m], (char *)NULL);
                _exit(9);
            }
            CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status));
            if (WEXITSTATUS(status) != 0)
                t_fail(__FILE__, __LINE__, "cuFile close at exit (%s): child exit %d", exits[m],
                       WEXITSTATUS(status));
        }
        /* The driver, the file handle and the I/O in the destination's context when the
         * caller's thread works on another GPU. */
        for (int m = 0; m < 2; m++) {
            pid = fork();
            CHECK(pid >= 0);
            if (pid == 0) {
                execl("/proc/self/exe", "test_cuda_fake", "cufile-ctx", path,
                      m == 0 ? "read" : "write", (char *)NULL);
                _exit(9);
            }
            CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status));
            if (WEXITSTATUS(status) != 0)
                t_fail(__FILE__, __LINE__,
                       "cuFile %s with device 0's context current, device 1's memory: child "
                       "exit %d",
                       m == 0 ? "read" : "write", WEXITSTATUS(status));
        }
        for (int m = 0; m < 2; m++) {
            pid = fork();
            CHECK(pid >= 0);
            if (pid == 0) {
                /* A new process image: a forked child would not reopen the parent's cuFile. */
                execl("/proc/self/exe", "test_cuda_fake", "cufile-mode",
                      m == 0 ? "p2pdma" : "compat", path, shm_path, json, (char *)NULL);
                _exit(9);
            }
            CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status));
            if (WEXITSTATUS(status) != 0)
                t_fail(__FILE__, __LINE__, "cuFile mode %s: child exit %d",
                       m == 0 ? "p2pdma" : "compat", WEXITSTATUS(status));
        }
        unlink(json);
        unlink(shm_path);

        /* A child forked after this process opened cuFile does not reopen it. */
        pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            struct s3d_device *d2;
            setenv("FAKE_CUDA_FORK_OK", "1", 1);
            set_cur(NULL);
            if (s3d_device_open(0, &d2) != 0 || s3d_cufile_available(d2, -1, &why) != 0 ||
                strstr(why, "fork()") == NULL)
                _exit(1);
            _exit(0);
        }
        CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
        unsetenv("S3D_TEST_CUFILE_BLOCK");
    } else {
        printf("a real libcufile.so.0 is found first: cuFile part skipped\n");
    }

    stats(&st);
    printf("fake driver: %d copies, %d retains, %d waits, %d bad-context calls\n", st.copies,
           st.retains, st.wait_events, st.bad_context);
    CHECK(st.bad_context == 0);
    CHECK(st.stream_flags_seen >= 2); /* ours were CU_STREAM_NON_BLOCKING */
    /* 1 + 2 above, + each read waiting for the caller stream once per device (2 for the
     * staged read, 1 for each of the 15 cuFile-mode reads cuFile accepts and the staged read of
     * a tmpfs file), +
     * the 3 writers waiting on it, + 4 for each of the 2 checkpoint round trips (a save and a load
     * on 2 devices), + 2 for each of the 2 round trips on device 1 of load_into_dev1, + the 32
     * reads of a shared descriptor. */
    CHECK(st.wait_events == 1 + 4 + 8 + (19 + 4 + 32) * fake_cufile);
    CHECK(st.copies > 6);

    unlink(path);
    rmdir(t_tmpdir());
    free(data);
    s3d_pool_free(pool);
    s3d_device_event_free(dev, e0);
    s3d_device_stream_free(dev, s0);
    s3d_device_mem_free(dev, 0, d0);
    s3d_device_mem_free(dev, 1, d1);
    s3d_device_host_free(dev, h, 1u << 20);
    set_cur(NULL);
    release(1);
    s3d_device_free(dev);
    stats(&st);
    CHECK(st.retains == st.releases); /* every primary context retained is released */
    return 0;
}
