/* cufile_dl.c - GPUDirect Storage through cuFile, loaded with dlopen("libcufile.so.0").
 *
 * The cuFile driver is process-wide: it is opened once per process on first use (never again
 * in a forked child of a process that tried it: reported unavailable there), logs to
 * /dev/null (cuFile 1.14+, set through cuFileSetParameterString: the environment is never
 * written) unless S3D_LOG=debug or CUFILE_LOGFILE_PATH says otherwise, and is never closed
 * while the process runs (closing it under other users, e.g. a
 * second client or another library, is unsafe, and the process exit releases it). When the library
 * or the driver is missing the reason is kept and every caller is told "not available", so AUTO
 * falls back to O_DIRECT. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "common/error.h"
#include "common/log.h"
#include "device/device_impl.h"

/* ---- the subset of cufile.h we use ----------------------------------------------------- */

#define CUFILEOP_BASE_ERR             5000
#define CU_FILE_SUCCESS               0
#define CU_FILE_HANDLE_TYPE_OPAQUE_FD 1
#define CUFILE_PARAM_ENV_LOGFILE_PATH 1 /* CUFileStringConfigParameter_t */

typedef struct {
    int err;    /* CUfileOpError */
    int cu_err; /* CUresult, for CU_FILE_CUDA_DRIVER_ERROR */
} CUfileError_t;

typedef struct {
    int type; /* CUfileFileHandleType */
    union {
        int fd;
        void *handle;
    } handle;
    const void *fs_ops; /* CUfileFSOps_t *; NULL for kernel file systems */
} CUfileDescr_t;

typedef void *CUfileHandle_t;

struct cufile_fns {
    CUfileError_t (*cuFileDriverOpen)(void);
    CUfileError_t (*cuFileHandleRegister)(CUfileHandle_t *fh, CUfileDescr_t *descr);
    void (*cuFileHandleDeregister)(CUfileHandle_t fh);
    CUfileError_t (*cuFileBufRegister)(const void *base, size_t length, int flags);
    CUfileError_t (*cuFileBufDeregister)(const void *base);
    ssize_t (*cuFileRead)(CUfileHandle_t fh, void *base, size_t size, off_t file_offset,
                          off_t buf_offset);
    ssize_t (*cuFileWrite)(CUfileHandle_t fh, const void *base, size_t size, off_t file_offset,
                           off_t buf_offset);
    /* cuFile 1.14+ (NULL before): param is a CUFileStringConfigParameter_t */
    CUfileError_t (*cuFileSetParameterString)(int param, const char *value);
};

/* Process-wide state. Locked part: everything, under mu, until state != 0; afterwards
 * read-only. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_state; /* 0 not tried, 1 usable, -1 not available */
static pid_t g_pid; /* the process that set g_state: a forked child starts over */
static char g_why[512];
static struct cufile_fns g_f;

struct s3d_cufile {
    struct s3d_device *dev;
    CUfileHandle_t fh;
    int fd;
};

const char *s3d_cufile_err_name(int e)
{
    static const char *const names[] = {
        "CU_FILE_SUCCESS",
        "CU_FILE_DRIVER_NOT_INITIALIZED",
        "CU_FILE_DRIVER_INVALID_PROPS",
        "CU_FILE_DRIVER_UNSUPPORTED_LIMIT",
        "CU_FILE_DRIVER_VERSION_MISMATCH",
        "CU_FILE_DRIVER_VERSION_READ_ERROR",
        "CU_FILE_DRIVER_CLOSING",
        "CU_FILE_PLATFORM_NOT_SUPPORTED",
        "CU_FILE_IO_NOT_SUPPORTED",
        "CU_FILE_DEVICE_NOT_SUPPORTED",
        "CU_FILE_NVFS_DRIVER_ERROR",
        "CU_FILE_CUDA_DRIVER_ERROR",
        "CU_FILE_CUDA_POINTER_INVALID",
        "CU_FILE_CUDA_MEMORY_TYPE_INVALID",
        "CU_FILE_CUDA_POINTER_RANGE_ERROR",
        "CU_FILE_CUDA_CONTEXT_MISMATCH",
        "CU_FILE_INVALID_MAPPING_SIZE",
        "CU_FILE_INVALID_MAPPING_RANGE",
        "CU_FILE_INVALID_FILE_TYPE",
        "CU_FILE_INVALID_FILE_OPEN_FLAG",
        "CU_FILE_DIO_NOT_SET",
        "CU_FILE_?",
        "CU_FILE_INVALID_VALUE",
        "CU_FILE_MEMORY_ALREADY_REGISTERED",
        "CU_FILE_MEMORY_NOT_REGISTERED",
        "CU_FILE_PERMISSION_DENIED",
        "CU_FILE_DRIVER_ALREADY_OPEN",
        "CU_FILE_HANDLE_NOT_REGISTERED",
        "CU_FILE_HANDLE_ALREADY_REGISTERED",
        "CU_FILE_DEVICE_NOT_FOUND",
        "CU_FILE_INTERNAL_ERROR",
        "CU_FILE_GETNEWFD_FAILED",
        "CU_FILE_?",
        "CU_FILE_NVFS_SETUP_ERROR",
        "CU_FILE_IO_DISABLED",
        "CU_FILE_BATCH_SUBMIT_FAILED",
        "CU_FILE_GPU_MEMORY_PINNING_FAILED",
        "CU_FILE_BATCH_FULL",
        "CU_FILE_ASYNC_NOT_SUPPORTED",
        "CU_FILE_INTERNAL_BATCH_SETUP_ERROR",
        "CU_FILE_INTERNAL_BATCH_SUBMIT_ERROR",
        "CU_FILE_INTERNAL_BATCH_GETSTATUS_ERROR",
        "CU_FILE_INTERNAL_BATCH_CANCEL_ERROR",
        "CU_FILE_NOMEM_ERROR",
        "CU_FILE_IO_ERROR",
        "CU_FILE_INTERNAL_BUF_REGISTER_ERROR",
        "CU_FILE_HASH_OPR_ERROR",
        "CU_FILE_INVALID_CONTEXT_ERROR",
        "CU_FILE_NVFS_INTERNAL_DRIVER_ERROR",
        "CU_FILE_BATCH_NOCOMPAT_ERROR",
        "CU_FILE_IO_MAX_ERROR",
    };
    if (e == 0)
        return names[0];
    if (e > CUFILEOP_BASE_ERR && e - CUFILEOP_BASE_ERR < (int)(sizeof(names) / sizeof(names[0])))
        return names[e - CUFILEOP_BASE_ERR];
    return "CU_FILE_?";
}

static void describe(CUfileError_t st, char *buf, size_t cap)
{
    if (st.err == CUFILEOP_BASE_ERR + 11) /* CU_FILE_CUDA_DRIVER_ERROR */
        snprintf(buf, cap, "%s (%d, CUresult %d)", s3d_cufile_err_name(st.err), st.err, st.cu_err);
    else
        snprintf(buf, cap, "%s (%d)", s3d_cufile_err_name(st.err), st.err);
}

static void try_open(void)
{
    static const struct {
        const char *name;
        size_t off;
    } syms[] = {
#define SYM(f) {#f, offsetof(struct cufile_fns, f)}
        SYM(cuFileDriverOpen),  SYM(cuFileHandleRegister), SYM(cuFileHandleDeregister),
        SYM(cuFileBufRegister), SYM(cuFileBufDeregister),  SYM(cuFileRead),
        SYM(cuFileWrite),
#undef SYM
    };
    void *lib = dlopen("libcufile.so.0", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        const char *e = dlerror();
        snprintf(g_why, sizeof(g_why), "%s", e ? e : "dlopen libcufile.so.0 failed");
        g_state = -1;
        return;
    }
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        void *p;
        dlerror();
        p = dlsym(lib, syms[i].name);
        if (p == NULL) {
            const char *e = dlerror();
            snprintf(g_why, sizeof(g_why), "libcufile.so.0: %s", e ? e : syms[i].name);
            g_state = -1;
            return; /* the library stays loaded: unloading it is not known to be safe */
        }
        memcpy((char *)&g_f + syms[i].off, &p, sizeof(p));
    }
    /* cuFile logs to ./cufile.log by default: keep it out of the user's working directory
     * unless asked (S3D_LOG=debug, or the user's own CUFILE_LOGFILE_PATH). Through its
     * parameter API, before the driver opens: a setenv() here would race with every other
     * thread's getenv() (curl's, Python's). cuFile before 1.14 has no such call and logs
     * where its cufile.json says. */
    dlerror();
    *(void **)&g_f.cuFileSetParameterString = dlsym(lib, "cuFileSetParameterString");
    const char *lvl = getenv("S3D_LOG");
    if (g_f.cuFileSetParameterString != NULL && getenv("CUFILE_LOGFILE_PATH") == NULL &&
        (lvl == NULL || strcmp(lvl, "debug") != 0)) {
        CUfileError_t ps = g_f.cuFileSetParameterString(CUFILE_PARAM_ENV_LOGFILE_PATH, "/dev/null");
        if (ps.err != CU_FILE_SUCCESS)
            S3D_INFO("cufile: log file not redirected: %s (%d)", s3d_cufile_err_name(ps.err),
                     ps.err);
    }
    CUfileError_t st = g_f.cuFileDriverOpen();
    if (st.err != CU_FILE_SUCCESS) {
        char what[160];
        describe(st, what, sizeof(what));
        snprintf(g_why, sizeof(g_why), "cuFileDriverOpen: %s", what);
        g_state = -1;
        return;
    }
    g_state = 1;
}

int s3d_cufile_available(struct s3d_device *dev, int ordinal, const char **why)
{
    const char *reason = NULL;
    int ok = 0;

    if (dev == NULL || dev->cuda == NULL) {
        reason = dev != NULL && dev->emu != NULL ? "emulated device" : "no GPU";
    } else if (dev->flags & S3D_DEVICE_NO_CUFILE) {
        reason = "cuFile disabled";
    } else if (ordinal < S3D_ANY_CTX || ordinal >= dev->count) {
        reason = "no such GPU device";
    } else {
        /* cuFileDriverOpen needs a CUDA context on the thread: the one of the device the I/O
         * is for (with S3D_ANY_CTX a thread with none current would make one on GPU 0). */
        struct s3d_cuda_prev prev;
        if (s3d_cuda_ctx_enter(dev, ordinal, &prev) < 0) {
            reason = "no CUDA context";
        } else {
            pthread_mutex_lock(&g_mu);
            if (g_state != 0 && g_pid != getpid()) {
                /* Forked after the parent tried cuFile: its driver state (threads, nvidia-fs
                 * handles) did not come along, and reopening it in the child is not safe. */
                g_pid = getpid();
                g_state = -1;
                snprintf(g_why, sizeof(g_why),
                         "cuFile was opened by the parent process before fork(); not "
                         "reopened in the child");
            }
            if (g_state == 0) {
                g_pid = getpid();
                try_open();
                if (g_state < 0)
                    S3D_INFO("cufile: not used: %s", g_why);
            }
            pthread_mutex_unlock(&g_mu);
            s3d_cuda_ctx_leave(dev, ordinal, &prev);
            ok = g_state > 0;
            reason = ok ? "" : g_why;
        }
    }
    if (why != NULL)
        *why = reason;
    return ok;
}

int s3d_cufile_gds(void)
{
    /* GPUDirect Storage proper needs the nvidia-fs kernel module; without it cuFile runs in
     * compatibility mode (POSIX reads into its own bounce buffers), slower than our staged
     * O_DIRECT path, which also gets the CRC32C for free. S3D_NVFS_PATH (tests) names the
     * file to look for instead. */
    const char *p = getenv("S3D_NVFS_PATH");
    return access(p != NULL ? p : "/proc/driver/nvidia-fs/version", R_OK) == 0;
}

static int not_available(struct s3d_device *dev, int ordinal)
{
    const char *why = NULL;
    if (s3d_cufile_available(dev, ordinal, &why))
        return 0;
    return s3d_fail(S3D_ENOTSUP, "cuFile not available: %s", why);
}

int s3d_cufile_open(struct s3d_device *dev, int ordinal, int fd, struct s3d_cufile **out)
{
    struct s3d_cufile *f;
    CUfileDescr_t d;
    CUfileError_t st;
    struct s3d_cuda_prev prev;
    int rc;

    *out = NULL;
    if ((rc = not_available(dev, ordinal)) < 0)
        return rc;
    f = calloc(1, sizeof(*f));
    if (f == NULL)
        return s3d_fail(S3D_ENOMEM, "cufile: out of memory");
    memset(&d, 0, sizeof(d));
    d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
    d.handle.fd = fd;
    d.fs_ops = NULL;
    if ((rc = s3d_cuda_ctx_enter(dev, ordinal, &prev)) < 0)
        goto fail;
    st = g_f.cuFileHandleRegister(&f->fh, &d);
    s3d_cuda_ctx_leave(dev, ordinal, &prev);
    if (st.err != CU_FILE_SUCCESS) {
        char what[160];
        describe(st, what, sizeof(what));
        rc = s3d_fail(S3D_ECUFILE, "cuFileHandleRegister(fd %d): %s", fd, what);
        goto fail;
    }
    f->dev = dev;
    f->fd = fd;
    *out = f;
    return 0;
fail:
    free(f);
    return rc;
}

void s3d_cufile_close(struct s3d_cufile *f)
{
    if (f == NULL)
        return;
    g_f.cuFileHandleDeregister(f->fh);
    free(f);
}

/* cuFileBufRegister (reg = 1; len bytes) or cuFileBufDeregister (reg = 0) of dptr, in
 * ordinal's context. */
static int buf_reg(struct s3d_device *dev, int ordinal, int reg, uint64_t dptr, size_t len)
{
    const void *p = (const void *)(uintptr_t)dptr;
    CUfileError_t st;
    struct s3d_cuda_prev prev;
    int rc;
    if ((rc = not_available(dev, ordinal)) < 0)
        return rc;
    if ((rc = s3d_cuda_ctx_enter(dev, ordinal, &prev)) < 0)
        return rc;
    st = reg ? g_f.cuFileBufRegister(p, len, 0) : g_f.cuFileBufDeregister(p);
    s3d_cuda_ctx_leave(dev, ordinal, &prev);
    if (st.err != CU_FILE_SUCCESS) {
        char what[160];
        describe(st, what, sizeof(what));
        return reg ? s3d_fail(S3D_ECUFILE, "cuFileBufRegister(%zu bytes): %s", len, what)
                   : s3d_fail(S3D_ECUFILE, "cuFileBufDeregister: %s", what);
    }
    return 0;
}

int s3d_cufile_buf_register(struct s3d_device *dev, int ordinal, uint64_t dptr, size_t len)
{
    return buf_reg(dev, ordinal, 1, dptr, len);
}

int s3d_cufile_buf_deregister(struct s3d_device *dev, int ordinal, uint64_t dptr)
{
    return buf_reg(dev, ordinal, 0, dptr, 0);
}

/* cuFileRead/Write return bytes, -1 with errno for a file system error, or the negated
 * CUfileOpError. */
static int io_fail(const char *fn, ssize_t r, uint64_t off)
{
    if (r == -1) {
        int e = errno;
        return s3d_fail(s3d_err_from_errno(e) == S3D_ENOMEM ? S3D_ENOMEM : S3D_EIO,
                        "%s at offset %llu: %s", fn, (unsigned long long)off, strerror(e));
    }
    return s3d_fail(S3D_ECUFILE, "%s at offset %llu: %s (%d)", fn, (unsigned long long)off,
                    s3d_cufile_err_name((int)-r), (int)-r);
}

/* One cuFile call moves at most this much (cuFile splits internally as well; a bound keeps
 * off_t arithmetic and progress granular). */
#define IO_STEP (1ull << 30)

/* Reads (is_write = 0) or writes len bytes between device memory at dptr and the file at
 * file_off, in IO_STEP steps, in ordinal's context; *out_n = bytes moved. A read stops early
 * only at end of file; a write that moves nothing is an error. */
static int cufile_io(struct s3d_cufile *f, int ordinal, int is_write, uint64_t dptr, uint64_t len,
                     uint64_t file_off, uint64_t *out_n)
{
    const char *fn = is_write ? "cuFileWrite" : "cuFileRead";
    uint64_t done = 0;
    struct s3d_cuda_prev prev;
    int rc;

    *out_n = 0;
    if ((rc = s3d_cuda_ctx_enter(f->dev, ordinal, &prev)) < 0)
        return rc;
    while (done < len) {
        size_t step = (size_t)(len - done < IO_STEP ? len - done : IO_STEP);
        off_t at = (off_t)(file_off + done);
        ssize_t r =
            is_write ? g_f.cuFileWrite(f->fh, (const void *)(uintptr_t)dptr, step, at, (off_t)done)
                     : g_f.cuFileRead(f->fh, (void *)(uintptr_t)dptr, step, at, (off_t)done);
        if (r == 0 && !is_write)
            break; /* end of file */
        if (r <= 0) {
            rc = r == 0 ? s3d_fail(S3D_EIO, "%s at offset %llu: wrote nothing", fn,
                                   (unsigned long long)(file_off + done))
                        : io_fail(fn, r, file_off + done);
            break;
        }
        done += (uint64_t)r;
    }
    s3d_cuda_ctx_leave(f->dev, ordinal, &prev);
    *out_n = done;
    return rc;
}

int s3d_cufile_read(struct s3d_cufile *f, int ordinal, uint64_t dptr, uint64_t len,
                    uint64_t file_off, uint64_t *out_n)
{
    return cufile_io(f, ordinal, 0, dptr, len, file_off, out_n);
}

int s3d_cufile_write(struct s3d_cufile *f, int ordinal, uint64_t dptr, uint64_t len,
                     uint64_t file_off)
{
    uint64_t done;
    return cufile_io(f, ordinal, 1, dptr, len, file_off, &done);
}
