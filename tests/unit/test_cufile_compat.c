/* test_cufile_compat.c - cuFile's own compatibility mode turned off before its driver opens
 * (cufile_dl.c, compat_off), against the stand-in libcufile of fake_cuda.c found through this
 * executable's run path. A file our model judges direct (nvidia-fs loaded, ext4/xfs on NVMe:
 * test hooks) that cuFile can reach only in compatibility mode (FAKE_CUFILE_NOT_DIRECT) goes
 * through the staging pool in mode AUTO, its bytes counted there and not as cuFile's, and
 * fails with S3D_ECUFILE naming cuFile's code in mode CUFILE. The way back (S3D_CUFILE_COMPAT=1),
 * a cuFile without cuFileSetParameterBool (before 1.14: the fakecuda-old build) and a driver
 * another library opened first keep today's behaviour. Each case runs in a process of its own
 * (the driver is opened once per process). Skipped when a real libcufile is found first. */
#include <dlfcn.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "device/device.h"
#include "engine/fileio.h"
#include "engine/pool.h"
#include "testutil.h"

#define FSZ (3u << 20)

static void *g_culib;

static int fake_int(const char *name)
{
    int (*f)(void) = NULL;
    *(void **)&f = dlsym(g_culib, name);
    if (f == NULL)
        t_fail(__FILE__, __LINE__, "the fake libcufile has no %s", name);
    return f();
}

struct rig {
    struct s3d_device *dev;
    struct s3d_pool *pool;
    uint64_t dptr;
    unsigned char *want;
    const char *path;
};

/* Reads the file's FSZ bytes at offset 1 into the device in mode `mode`; 0 or the error. On
 * success the bytes and the CRC are checked and *cnt holds the bytes by path. */
static int read_once(struct rig *g, int mode, struct s3d_file_io_counts *cnt)
{
    uint32_t crc = 0;
    struct s3d_file_range r = {1, FSZ, (void *)(uintptr_t)g->dptr, 0, &crc};
    struct s3d_file_io_opts o = {.mode = mode, .counts = cnt};
    memset(cnt, 0, sizeof(*cnt));
    memset((void *)(uintptr_t)g->dptr, 0, FSZ);
    int rc = s3d_file_read_ranges(g->dev, g->pool, g->path, &r, 1, &o);
    if (rc == 0) {
        CHECK(memcmp((void *)(uintptr_t)g->dptr, g->want + 1, FSZ) == 0);
        CHECK(crc == s3d_crc32c(0, g->want + 1, FSZ));
        CHECK_EQ_U64(cnt->cufile + cnt->direct + cnt->buffered, FSZ);
    }
    return rc;
}

/* Saves the device's FSZ bytes (as read_once left them) to path.out in mode `mode`. */
static int write_once(struct rig *g, int mode, struct s3d_file_io_counts *cnt)
{
    char out[PATH_MAX];
    struct s3d_file_writer *w = NULL;
    struct s3d_file_io_opts o = {.mode = mode, .counts = cnt};
    struct s3d_file_seg seg = {(const void *)(uintptr_t)g->dptr, FSZ, 0};
    uint32_t crc = 0;
    unsigned char *back = malloc(FSZ);
    memset(cnt, 0, sizeof(*cnt));
    memcpy((void *)(uintptr_t)g->dptr, g->want + 1, FSZ);
    snprintf(out, sizeof(out), "%s.out", g->path);
    CHECK(back != NULL);
    CHECK_OK(s3d_file_writer_open(g->dev, g->pool, out, &o, &w));
    int rc = s3d_file_writer_write(w, 0, &seg, 1, &crc);
    if (rc == 0)
        rc = s3d_file_writer_commit(w);
    s3d_file_writer_free(w);
    if (rc == 0) {
        int fd = open(out, O_RDONLY);
        CHECK(fd >= 0 && read(fd, back, FSZ) == (ssize_t)FSZ);
        close(fd);
        CHECK(memcmp(back, g->want + 1, FSZ) == 0);
        CHECK(crc == s3d_crc32c(0, g->want + 1, FSZ));
        CHECK_EQ_U64(cnt->cufile + cnt->direct + cnt->buffered, FSZ);
    }
    unlink(out);
    free(back);
    return rc;
}

/* test_cufile_compat case CASE FILE: one case, in a fresh process. */
static int run_case(const char *c, const char *path)
{
    struct rig g = {.path = path};
    struct s3d_file_io_counts cnt;
    int fd = open(path, O_RDONLY);
    g.want = malloc(FSZ + 1);
    CHECK(fd >= 0 && g.want != NULL && read(fd, g.want, FSZ + 1) == (ssize_t)FSZ + 1);
    close(fd);
    setenv("S3D_TEST_NVFS_PATH", path, 1);      /* nvidia-fs loaded */
    setenv("S3D_TEST_CUFILE_BLOCK", "nvme", 1); /* the folder on NVMe: judged direct */
    setenv("FAKE_CUFILE_NOT_DIRECT", "1", 1);   /* ... but cuFile reaches it in compat only */
    if (strcmp(c, "old") == 0) {
        /* cuFile before 1.14: loaded first, it is the libcufile.so.0 the library finds. */
        char exe[PATH_MAX], lib[PATH_MAX + 32];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        CHECK(n > 0);
        exe[n] = 0;
        snprintf(lib, sizeof(lib), "%s/../fakecuda-old/libcufile.so.0", dirname(exe));
        g_culib = dlopen(lib, RTLD_NOW);
        CHECK(g_culib != NULL && dlsym(g_culib, "cuFileSetParameterBool") == NULL);
    } else {
        g_culib = dlopen("libcufile.so.0", RTLD_NOW);
        CHECK(g_culib != NULL);
    }
    if (strcmp(c, "keep") == 0)
        setenv("S3D_CUFILE_COMPAT", "1", 1);
    CHECK_OK(s3d_device_open(0, &g.dev));
    CHECK_OK(s3d_device_mem_alloc(g.dev, 0, FSZ, &g.dptr));
    CHECK_OK(s3d_pool_new(g.dev, 4u << 20, 1u << 20, &g.pool));
    if (strcmp(c, "first") == 0) {
        /* Another library in the process opened the driver first (in a context of its own):
         * the parameter can no longer be set, and everything goes on as before. */
        void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        int (*retain)(void **, int) = NULL, (*set_cur)(void *) = NULL;
        struct {
            int err, cu_err;
        } (*drv_open)(void) = NULL;
        void *ctx = NULL;
        CHECK(cuda != NULL);
        *(void **)&retain = dlsym(cuda, "cuDevicePrimaryCtxRetain");
        *(void **)&set_cur = dlsym(cuda, "cuCtxSetCurrent");
        *(void **)&drv_open = dlsym(g_culib, "cuFileDriverOpen");
        CHECK(retain != NULL && set_cur != NULL && drv_open != NULL);
        CHECK(retain(&ctx, 0) == 0 && set_cur(ctx) == 0 && drv_open().err == 0);
        CHECK(set_cur(NULL) == 0);
    }

    if (strcmp(c, "off") == 0 || strcmp(c, "off-io") == 0) {
        if (strcmp(c, "off-io") == 0) /* registered, but each I/O refused */
            setenv("FAKE_CUFILE_NOT_DIRECT", "io", 1);
        /* AUTO: cuFile refuses the file, the staging pool moves it, and counts it. */
        CHECK_OK(read_once(&g, S3D_FILE_IO_AUTO, &cnt));
        CHECK_EQ_U64(cnt.cufile, 0);
        CHECK_EQ_U64(cnt.direct + cnt.buffered, FSZ);
        CHECK(fake_int("fake_cufile_opens") == 1);
        CHECK(fake_int("fake_cufile_allow_compat_at_open") == 0); /* set before the open */
        CHECK_OK(write_once(&g, S3D_FILE_IO_AUTO, &cnt));
        CHECK_EQ_U64(cnt.cufile, 0);
        CHECK(fake_int("fake_cufile_compat_ios") == 0); /* cuFile never served it slowly */
        /* CUFILE: GPUDirect or an error that names cuFile's code and the way back. */
        CHECK_ERR(read_once(&g, S3D_FILE_IO_CUFILE, &cnt), S3D_ECUFILE);
        CHECK_MSG_HAS("CU_FILE_IO_NOT_SUPPORTED");
        CHECK_MSG_HAS("S3D_CUFILE_COMPAT=1");
        CHECK_ERR(write_once(&g, S3D_FILE_IO_CUFILE, &cnt), S3D_ECUFILE);
        CHECK_MSG_HAS("CU_FILE_IO_NOT_SUPPORTED");
        /* A file cuFile reaches directly still goes through cuFile. */
        unsetenv("FAKE_CUFILE_NOT_DIRECT");
        CHECK_OK(read_once(&g, S3D_FILE_IO_AUTO, &cnt));
        CHECK_EQ_U64(cnt.cufile, FSZ);
    } else { /* keep, old, first: cuFile's compatibility mode stays on, as before */
        CHECK_OK(read_once(&g, S3D_FILE_IO_AUTO, &cnt));
        CHECK_EQ_U64(cnt.cufile, FSZ); /* judged direct: cuFile, in its compat mode */
        CHECK(fake_int("fake_cufile_allow_compat_at_open") == 1);
        CHECK(fake_int("fake_cufile_compat_ios") > 0);
        CHECK_OK(read_once(&g, S3D_FILE_IO_CUFILE, &cnt));
        CHECK_EQ_U64(cnt.cufile, FSZ);
    }
    s3d_pool_free(g.pool);
    s3d_device_mem_free(g.dev, 0, g.dptr);
    s3d_device_free(g.dev);
    free(g.want);
    return 0;
}

int main(int argc, char **argv)
{
    static const char *const cases[] = {"off", "off-io", "keep", "old", "first"};
    char path[PATH_MAX];
    unsigned char *data;
    if (argc == 4 && strcmp(argv[1], "case") == 0)
        return run_case(argv[2], argv[3]);
    void *cu = dlopen("libcufile.so.0", RTLD_NOW);
    if (cu == NULL || dlsym(cu, "fake_cufile_compat_ios") == NULL)
        t_skip("the fake libcufile.so.0 is not the one found");
    dlclose(cu);
    snprintf(path, sizeof(path), "%s/compat.bin", t_tmpdir());
    data = malloc(FSZ + 1);
    CHECK(data != NULL);
    t_fill_random(data, FSZ + 1, 39);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0 && write(fd, data, FSZ + 1) == (ssize_t)FSZ + 1);
    close(fd);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int status;
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            /* A new process image: a forked child would not open cuFile's driver again. */
            execl("/proc/self/exe", "test_cufile_compat", "case", cases[i], path, (char *)NULL);
            _exit(127);
        }
        CHECK(waitpid(pid, &status, 0) == pid);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            t_fail(__FILE__, __LINE__, "case %s: status 0x%x", cases[i], status);
        printf("case %s: ok\n", cases[i]);
    }
    unlink(path);
    rmdir(t_tmpdir());
    free(data);
    return 0;
}
