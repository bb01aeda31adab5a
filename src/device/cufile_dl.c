/* cufile_dl.c - GPUDirect Storage through cuFile, loaded with dlopen("libcufile.so.0").
 *
 * The cuFile driver is process-wide: it is opened once per process on first use (never again
 * in a forked child of a process that tried it: reported unavailable there), logs to
 * /dev/null (cuFile 1.14+, set through cuFileSetParameterString: the environment is never
 * written) unless S3D_LOG=debug or CUFILE_LOGFILE_PATH says otherwise, and is not closed
 * while the process runs (a second client or another library may still use it), but at exit:
 * cuFile's own implicit close at process exit is known to crash on GDS hosts (NVIDIA/cudf#17121,
 * rapidsai/kvikio#497), which torchrun reports as a failed rank. So the process that opened it
 * registers an exit hook once (atexit), which closes it with cuFileDriverClose_v2 (reference
 * counted: another library's open stays; cuFileDriverClose before cuFile 1.7), unless a file
 * handle of ours is still registered (a thread still doing I/O) or the hook runs in a forked
 * child, which never opened it. When the library or the driver is missing the reason is kept
 * and every caller is told "not available", so AUTO falls back to O_DIRECT. Before the open,
 * cuFile's own compatibility mode is turned off (compat_off), so that cuFile refuses a file it
 * cannot reach directly instead of serving it slowly under the name of GPUDirect Storage. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "common/env.h"
#include "common/error.h"
#include "common/log.h"
#include "device/device_impl.h"

/* ---- the subset of cufile.h we use ----------------------------------------------------- */

#define CUFILEOP_BASE_ERR             5000
#define CU_FILE_SUCCESS               0
#define CU_FILE_HANDLE_TYPE_OPAQUE_FD 1
#define CU_FILE_IO_NOT_SUPPORTED      5008
#define CUFILE_PARAM_ENV_LOGFILE_PATH 1 /* CUFileStringConfigParameter_t */
/* CUFileBoolConfigParameter_t (cuFile 1.14+) */
#define CUFILE_PARAM_PROPERTIES_ALLOW_COMPAT_MODE 1
#define CUFILE_PARAM_FORCE_COMPAT_MODE            2
#define CUFILE_PARAM_USE_PCIP2PDMA                7
/* Bit positions in CUfileDrvProps_t.nvfs.dstatusflags (CUfileDriverStatusFlags_t) */
#define CU_FILE_LUSTRE_SUPPORTED        0
#define CU_FILE_WEKAFS_SUPPORTED        1
#define CU_FILE_NFS_SUPPORTED           2
#define CU_FILE_GPFS_SUPPORTED          3
#define CU_FILE_NVME_SUPPORTED          4
#define CU_FILE_NVMEOF_SUPPORTED        5
#define CU_FILE_SCSI_SUPPORTED          6
#define CU_FILE_SCALEFLUX_CSD_SUPPORTED 7
#define CU_FILE_NVMESH_SUPPORTED        8
#define CU_FILE_BEEGFS_SUPPORTED        9
#define CU_FILE_VIRTIOFS_SUPPORTED      13
/* Bit positions in CUfileDrvProps_t.nvfs.dcontrolflags and .fflags */
#define CU_FILE_ALLOW_COMPAT_MODE 1
#define CU_FILE_P2P_SUPPORTED     4 /* cuFile 1.15: PCI P2PDMA (no nvidia-fs) */

/* cuFileDriverGetProperties' output. Only nvfs and fflags are read; the buffer handed over is
 * larger than any version's struct so that a newer cuFile writing more fields cannot
 * overrun it. */
typedef struct {
    struct {
        unsigned int major_version;
        unsigned int minor_version;
        size_t poll_thresh_size;
        size_t max_direct_io_size;
        unsigned int dstatusflags;
        unsigned int dcontrolflags;
    } nvfs;
    unsigned int fflags; /* CUfileFeatureFlags_t */
    unsigned int max_device_cache_size;
    unsigned int per_buffer_cache_size;
    unsigned int max_device_pinned_mem_size;
    unsigned int max_batch_io_size;
    unsigned int max_batch_io_timeout_msecs;
} CUfileDrvProps_t;

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
    /* cuFile 1.14+ (NULL before): param is a CUFileStringConfigParameter_t, or a
     * CUFileBoolConfigParameter_t */
    CUfileError_t (*cuFileSetParameterString)(int param, const char *value);
    CUfileError_t (*cuFileSetParameterBool)(int param, _Bool value);
    /* optional, NULL when missing: cuFile 1.6+ / 1.14+ */
    CUfileError_t (*cuFileGetVersion)(int *version);
    CUfileError_t (*cuFileDriverGetProperties)(CUfileDrvProps_t *props);
    CUfileError_t (*cuFileGetParameterBool)(int param, _Bool *value);
    CUfileError_t (*cuFileDriverClose)(void); /* _v2 when there; NULL: never closed */
};

/* Process-wide state. Locked part: everything, under mu, until state != 0; afterwards
 * read-only. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_state; /* 0 not tried, 1 usable, -1 not available */
static pid_t g_pid; /* the process that set g_state: a forked child starts over */
static char g_why[512];
static struct cufile_fns g_f;
/* What the open driver does (set with g_state = 1): how it moves bytes, its version, and which
 * file systems nvidia-fs serves directly (dstatusflags). */
static int g_version;
static unsigned g_dstatus, g_nvfs_major, g_fflags;
static int g_have_props, g_p2p, g_force_compat;
static int g_compat_off; /* allow_compat_mode was turned off before the driver opened */
static int g_handles;    /* s3d_cufile handles open (each holds a registration reference) */
static struct cufile_reg *g_regs; /* the descriptors registered with cuFile */
static int g_exit_hooked;         /* close_at_exit registered (once per process image) */

/* One cuFile registration per open descriptor: cuFile refuses a descriptor registered twice
 * (CU_FILE_HANDLE_ALREADY_REGISTERED), and concurrent reads of one file may share the
 * reader's descriptor (a file system that refuses O_DIRECT). Each s3d_cufile_open of a
 * registered descriptor takes a reference; the last s3d_cufile_close deregisters it. The
 * list is under g_mu; dev and ino tell a descriptor number reused for another file. */
struct cufile_reg {
    int fd;
    dev_t dev;
    ino_t ino;
    int refs;
    CUfileHandle_t fh;
    struct cufile_reg *next;
};

struct s3d_cufile {
    struct s3d_device *dev;
    struct cufile_reg *reg; /* shared: the registration of fd */
    CUfileHandle_t fh;      /* reg->fh */
    int fd;
    int mode;        /* S3D_CUFILE_MODE_*: how this file's I/O runs */
    const char *why; /* static: why that mode */
};

const char *s3d_cufile_mode_name(int mode)
{
    switch (mode) {
    case S3D_CUFILE_MODE_NVFS:
        return "nvidia-fs";
    case S3D_CUFILE_MODE_P2PDMA:
        return "p2pdma";
    default:
        return "compat";
    }
}

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

/* 1 when the cuFile configuration (CUFILE_ENV_PATH_JSON, else /etc/cufile.json) turns PCI
 * P2PDMA on ("use_pcip2pdma": true): read before the driver is opened, so that mode AUTO
 * opens cuFile only where it may go direct. A plain scan, not a JSON parser: the key is
 * unique in the file, and a wrong answer only costs one driver open (its own properties
 * decide after that). */
static int json_p2pdma(void)
{
    const char *p = s3d_env("CUFILE_ENV_PATH_JSON");
    char buf[65536];
    FILE *f = fopen(p != NULL ? p : "/etc/cufile.json", "re");
    int on = 0;
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    for (char *k = strstr(buf, "\"use_pcip2pdma\""); k != NULL && !on;
         k = strstr(k + 1, "\"use_pcip2pdma\"")) {
        /* a commented-out line ("//") does not count */
        char *line = k;
        while (line > buf && line[-1] != '\n')
            line--;
        while (*line == ' ' || *line == '\t')
            line++;
        if (line[0] == '/' && line[1] == '/')
            continue;
        const char *v = k + strlen("\"use_pcip2pdma\"");
        while (*v == ' ' || *v == '\t' || *v == ':')
            v++;
        on = strncmp(v, "true", 4) == 0;
    }
    return on;
}

/* The open driver's mode, from what detect_mode read of this cuFile: nvidia-fs when its
 * module is there (looked for at each call; its dstatusflags list the file systems it
 * serves); PCI P2PDMA (cuFile 1.15, no nvidia-fs) when the library reports the feature and
 * use_pcip2pdma is on; else compatibility mode (POSIX reads into cuFile's own bounce
 * buffers). Forced compatibility wins. Called with g_mu held. */
static int mode_locked(void)
{
    if (g_force_compat)
        return S3D_CUFILE_MODE_COMPAT;
    if (s3d_cufile_nvfs() && (!g_have_props || g_nvfs_major > 0))
        return S3D_CUFILE_MODE_NVFS;
    if (g_p2p && (g_fflags >> CU_FILE_P2P_SUPPORTED & 1u))
        return S3D_CUFILE_MODE_P2PDMA;
    return S3D_CUFILE_MODE_COMPAT;
}

static void detect_mode(void *lib)
{
    CUfileDrvProps_t props[4]; /* see the type: room for a newer, larger struct */
    _Bool p2p = 0, force = 0;
    int have_props = 0;

    dlerror();
    *(void **)&g_f.cuFileGetVersion = dlsym(lib, "cuFileGetVersion");
    *(void **)&g_f.cuFileDriverGetProperties = dlsym(lib, "cuFileDriverGetProperties");
    *(void **)&g_f.cuFileGetParameterBool = dlsym(lib, "cuFileGetParameterBool");
    g_version = 0;
    if (g_f.cuFileGetVersion != NULL && g_f.cuFileGetVersion(&g_version).err != CU_FILE_SUCCESS)
        g_version = 0;
    memset(props, 0, sizeof(props));
    if (g_f.cuFileDriverGetProperties != NULL &&
        g_f.cuFileDriverGetProperties(props).err == CU_FILE_SUCCESS)
        have_props = 1;
    if (g_f.cuFileGetParameterBool != NULL) {
        if (g_f.cuFileGetParameterBool(CUFILE_PARAM_USE_PCIP2PDMA, &p2p).err != CU_FILE_SUCCESS)
            p2p = 0;
        if (g_f.cuFileGetParameterBool(CUFILE_PARAM_FORCE_COMPAT_MODE, &force).err !=
            CU_FILE_SUCCESS)
            force = 0;
    }
    g_have_props = have_props;
    g_dstatus = have_props ? props[0].nvfs.dstatusflags : 0;
    g_nvfs_major = have_props ? props[0].nvfs.major_version : 0;
    g_fflags = have_props ? props[0].fflags : 0;
    g_p2p = p2p;
    g_force_compat = force;
    S3D_DEBUG("cufile: version %d, driver mode %s (nvidia-fs %s, use_pcip2pdma %d, P2P feature "
              "%u, force_compat_mode %d, dstatusflags 0x%x)",
              g_version, s3d_cufile_mode_name(mode_locked()),
              s3d_cufile_nvfs() ? "loaded" : "absent", (int)p2p,
              g_fflags >> CU_FILE_P2P_SUPPORTED & 1u, (int)force, g_dstatus);
}

/* The exit hook: closes the driver this process opened, when no file of ours is registered.
 * Never waits for the lock (a thread stopped inside try_open would hang the exit). */
static void close_at_exit(void)
{
    if (pthread_mutex_trylock(&g_mu) != 0)
        return;
    if (g_state > 0 && g_pid == getpid() && g_handles == 0 && g_f.cuFileDriverClose != NULL) {
        g_state = -1;
        snprintf(g_why, sizeof(g_why), "cuFile's driver was closed at process exit");
        s3d_ignore_rc(g_f.cuFileDriverClose().err); /* exiting: nobody to tell */
    }
    pthread_mutex_unlock(&g_mu);
}

/* cuFile's own compatibility mode off, before the driver opens (cuFile 1.14+; the setting is
 * the process's): a file cuFile cannot reach directly is then refused, at registration
 * (CU_FILE_IO_NOT_SUPPORTED) or at its I/O, instead of being served through cuFile's bounce
 * buffers under our cuFile counter where our model judged it direct. AUTO then moves it
 * through the staging pool; mode CUFILE fails naming the code. Left as cuFile's configuration
 * says when S3D_CUFILE_COMPAT=1 (the user wants cuFile's compatibility mode), when cufile.json
 * forces compatibility mode, when this cuFile has no cuFileSetParameterBool (before 1.14:
 * as before), or when cuFile refuses (another library in the process opened the driver
 * first). Called with g_mu held. */
static void compat_off(void *lib)
{
    CUfileError_t (*get)(int, _Bool *) = NULL;
    const char *keep = s3d_env("S3D_CUFILE_COMPAT");
    _Bool force = 0;
    dlerror();
    *(void **)&g_f.cuFileSetParameterBool = dlsym(lib, "cuFileSetParameterBool");
    *(void **)&get = dlsym(lib, "cuFileGetParameterBool");
    if (keep != NULL && strcmp(keep, "1") == 0) {
        S3D_DEBUG("cufile: compatibility mode left as cuFile's configuration says "
                  "(S3D_CUFILE_COMPAT=1)");
        return;
    }
    if (g_f.cuFileSetParameterBool == NULL) {
        S3D_DEBUG("cufile: compatibility mode left as configured: this cuFile has no "
                  "cuFileSetParameterBool (before 1.14)");
        return;
    }
    if (get != NULL && get(CUFILE_PARAM_FORCE_COMPAT_MODE, &force).err == CU_FILE_SUCCESS &&
        force) {
        S3D_DEBUG("cufile: compatibility mode left on: cufile.json forces it "
                  "(force_compat_mode)");
        return;
    }
    CUfileError_t st = g_f.cuFileSetParameterBool(CUFILE_PARAM_PROPERTIES_ALLOW_COMPAT_MODE, 0);
    if (st.err != CU_FILE_SUCCESS) {
        char what[160];
        describe(st, what, sizeof(what));
        S3D_DEBUG("cufile: compatibility mode left as configured: cuFileSetParameterBool("
                  "allow_compat_mode) failed: %s (driver already opened in this process?)",
                  what);
        return;
    }
    g_compat_off = 1;
    S3D_DEBUG("cufile: compatibility mode off (allow_compat_mode false): a file cuFile cannot "
              "reach directly is refused and goes through the staging pool in mode AUTO");
}

/* The end of a message about a cuFile code: why a file was refused when compat_off turned
 * cuFile's compatibility mode off, else "". */
static const char *compat_hint(int err)
{
    return err == CU_FILE_IO_NOT_SUPPORTED && g_compat_off
               ? "; cuFile cannot reach this file directly and its compatibility mode is off "
                 "(S3D_CUFILE_COMPAT=1 allows it)"
               : "";
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
    const char *lvl = s3d_env("S3D_LOG");
    if (g_f.cuFileSetParameterString != NULL && s3d_env("CUFILE_LOGFILE_PATH") == NULL &&
        (lvl == NULL || strcmp(lvl, "debug") != 0)) {
        CUfileError_t ps = g_f.cuFileSetParameterString(CUFILE_PARAM_ENV_LOGFILE_PATH, "/dev/null");
        if (ps.err != CU_FILE_SUCCESS)
            S3D_INFO("cufile: log file not redirected: %s (%d)", s3d_cufile_err_name(ps.err),
                     ps.err);
    }
    compat_off(lib); /* before the open, which reads the parameters */
    CUfileError_t st = g_f.cuFileDriverOpen();
    if (st.err != CU_FILE_SUCCESS) {
        char what[160];
        describe(st, what, sizeof(what));
        snprintf(g_why, sizeof(g_why), "cuFileDriverOpen: %s", what);
        g_state = -1;
        return;
    }
    detect_mode(lib);
    dlerror();
    *(void **)&g_f.cuFileDriverClose = dlsym(lib, "cuFileDriverClose_v2");
    if (g_f.cuFileDriverClose == NULL)
        *(void **)&g_f.cuFileDriverClose = dlsym(lib, "cuFileDriverClose");
    if (!g_exit_hooked && atexit(close_at_exit) == 0)
        g_exit_hooked = 1;
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

int s3d_cufile_nvfs(void)
{
    /* S3D_TEST_NVFS_PATH (tests) names the file to look for instead. */
    const char *p = S3D_TEST_HOOK("S3D_TEST_NVFS_PATH");
    return access(p != NULL ? p : "/proc/driver/nvidia-fs/version", R_OK) == 0;
}

int s3d_cufile_gds(void)
{
    /* GPUDirect Storage proper needs the nvidia-fs kernel module, or (cuFile 1.15) the
     * kernel's PCI P2PDMA with use_pcip2pdma on; without either cuFile runs in compatibility
     * mode (POSIX reads into its own bounce buffers), slower than our staged O_DIRECT path,
     * which also gets the CRC32C for free. Once the driver is open its own answer counts. */
    int mode = -1;
    pthread_mutex_lock(&g_mu);
    if (g_state > 0 && g_pid == getpid())
        mode = mode_locked();
    pthread_mutex_unlock(&g_mu);
    if (mode >= 0)
        return mode != S3D_CUFILE_MODE_COMPAT;
    return s3d_cufile_nvfs() || json_p2pdma();
}

int s3d_cufile_driver_mode(void)
{
    int mode;
    pthread_mutex_lock(&g_mu);
    mode = g_state > 0 ? mode_locked() : -1;
    pthread_mutex_unlock(&g_mu);
    return mode;
}

/* 1 when the block device at sysfs folder dir (a /sys/class/block/NAME or /sys/dev/block/M:m
 * path, or a slave link) is NVMe: its resolved path names an nvme controller (a partition's
 * too); else a stacked device (md RAID, dm: LVM, crypt) whose slaves are all NVMe, followed
 * down to depth 8 (LVM on md on NVMe partitions); a partition of a stacked device asks its
 * parent's slaves. 0 for anything else or what cannot be read. */
static int sysfs_block_nvme(const char *dir, int depth)
{
    char real[PATH_MAX], sub[PATH_MAX + 16];
    struct dirent *e;
    DIR *d;
    int n = 0, all = 1;
    if (depth > 8 || realpath(dir, real) == NULL)
        return 0;
    if (strstr(real, "/nvme") != NULL)
        return 1;
    snprintf(sub, sizeof(sub), "%s/partition", real);
    if (access(sub, F_OK) == 0) { /* a partition: the slaves are its parent's */
        char *slash = strrchr(real, '/');
        if (slash == NULL)
            return 0;
        *slash = 0;
    }
    snprintf(sub, sizeof(sub), "%s/slaves", real);
    if ((d = opendir(sub)) == NULL)
        return 0;
    while (all && (e = readdir(d)) != NULL) {
        char slave[PATH_MAX + 16 + 256];
        if (e->d_name[0] == '.')
            continue;
        snprintf(slave, sizeof(slave), "%s/%s", sub, e->d_name);
        n++;
        all = sysfs_block_nvme(slave, depth + 1);
    }
    closedir(d);
    return n > 0 && all;
}

int s3d_cufile_block_nvme(const char *sysfs, unsigned maj, unsigned min)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/dev/block/%u:%u", sysfs, maj, min);
    return sysfs_block_nvme(dir, 0);
}

/* 1 when the file system of fd sits on NVMe (s3d_cufile_block_nvme: plain, partitions, md and
 * dm volumes over NVMe such as a DGX's /raid). S3D_TEST_CUFILE_BLOCK=nvme|other (tests) says
 * instead. */
static int block_is_nvme(int fd)
{
    struct stat st;
    const char *force = S3D_TEST_HOOK("S3D_TEST_CUFILE_BLOCK");
    if (force != NULL)
        return strcmp(force, "nvme") == 0;
    if (fstat(fd, &st) != 0)
        return 0;
    return s3d_cufile_block_nvme("/sys", major(st.st_dev), minor(st.st_dev));
}

/* How the driver in mode `mode` serves a file on the file system of fd: directly when it is
 * one the driver supports, else in compatibility mode. P2PDMA serves ext4 and xfs on NVMe
 * only; nvidia-fs says in its dstatusflags which devices (NVMe, SCSI, ...) and which network
 * and parallel file systems it serves. */
static int file_mode(int mode, unsigned dstatus, int fd, const char **why)
{
    struct statfs fs;
    if (mode == S3D_CUFILE_MODE_COMPAT) {
        *why = "the driver runs in compatibility mode";
        return mode;
    }
    if (fstatfs(fd, &fs) != 0) {
        *why = "fstatfs failed";
        return S3D_CUFILE_MODE_COMPAT;
    }
    int bit = -1;
    const unsigned long t = (unsigned long)fs.f_type;
    const unsigned other_block = 1u << CU_FILE_SCSI_SUPPORTED |
                                 1u << CU_FILE_SCALEFLUX_CSD_SUPPORTED |
                                 1u << CU_FILE_NVMESH_SUPPORTED;
    if (t == 0xEF53ul || t == 0x58465342ul) { /* ext4, xfs: on a block device */
        const int nvme = block_is_nvme(fd);
        if (nvme && (mode == S3D_CUFILE_MODE_P2PDMA ||
                     (dstatus & (1u << CU_FILE_NVME_SUPPORTED | 1u << CU_FILE_NVMEOF_SUPPORTED)))) {
            *why = "ext4/xfs on an NVMe device the driver serves";
            return mode;
        }
        if (!nvme && mode == S3D_CUFILE_MODE_NVFS && (dstatus & other_block) != 0) {
            *why = "ext4/xfs on a block device nvidia-fs may serve (not NVMe)";
            return mode;
        }
        *why = nvme ? "ext4/xfs on NVMe, but the driver serves no NVMe"
                    : "ext4/xfs on a device that is not NVMe (virtio, ...)";
        return S3D_CUFILE_MODE_COMPAT;
    }
    if (mode == S3D_CUFILE_MODE_P2PDMA) {
        *why = "P2PDMA serves ext4 and xfs on NVMe only";
        return S3D_CUFILE_MODE_COMPAT;
    }
    switch (t) {
    case 0x6969ul: /* NFS */
        bit = CU_FILE_NFS_SUPPORTED;
        break;
    case 0x0BD00BD0ul: /* Lustre */
        bit = CU_FILE_LUSTRE_SUPPORTED;
        break;
    case 0x47504653ul: /* GPFS */
        bit = CU_FILE_GPFS_SUPPORTED;
        break;
    case 0x19830326ul: /* BeeGFS */
        bit = CU_FILE_BEEGFS_SUPPORTED;
        break;
    case 0x6a656a63ul: /* virtiofs (FUSE magic is shared: checked by the flag only) */
        bit = CU_FILE_VIRTIOFS_SUPPORTED;
        break;
    default:
        break;
    }
    if (bit >= 0 && (dstatus >> bit & 1u)) {
        *why = "a file system nvidia-fs serves";
        return mode;
    }
    *why = "a file system the driver does not serve directly (tmpfs, overlayfs, ...)";
    return S3D_CUFILE_MODE_COMPAT;
}

int s3d_cufile_file_mode(const struct s3d_cufile *f)
{
    return f != NULL ? f->mode : S3D_CUFILE_MODE_COMPAT;
}

const char *s3d_cufile_file_why(const struct s3d_cufile *f)
{
    return f != NULL ? f->why : "";
}

static int not_available(struct s3d_device *dev, int ordinal)
{
    const char *why = NULL;
    if (s3d_cufile_available(dev, ordinal, &why))
        return 0;
    return s3d_fail(S3D_ENOTSUP, "cuFile not available: %s", why);
}

/* A reference on fd's registration, registering it (in the current context) when it is not
 * yet: *out set, or < 0 (S3D_ECUFILE naming cuFile's code, S3D_EIO when fd cannot be
 * stat'ed). Called with g_mu held. */
static int reg_get_locked(int fd, struct cufile_reg **out)
{
    struct stat sb;
    CUfileDescr_t d;
    CUfileError_t st;
    struct cufile_reg *r;

    if (fstat(fd, &sb) != 0)
        return s3d_fail(S3D_EIO, "cufile: fstat(fd %d): %s", fd, strerror(errno));
    for (r = g_regs; r != NULL; r = r->next)
        if (r->fd == fd && r->dev == sb.st_dev && r->ino == sb.st_ino) {
            r->refs++;
            *out = r;
            return 0;
        }
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return s3d_fail(S3D_ENOMEM, "cufile: out of memory");
    memset(&d, 0, sizeof(d));
    d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
    d.handle.fd = fd;
    d.fs_ops = NULL;
    st = g_f.cuFileHandleRegister(&r->fh, &d);
    if (st.err != CU_FILE_SUCCESS) {
        char what[160];
        free(r);
        describe(st, what, sizeof(what));
        return s3d_fail(S3D_ECUFILE, "cuFileHandleRegister(fd %d): %s%s", fd, what,
                        compat_hint(st.err));
    }
    r->fd = fd;
    r->dev = sb.st_dev;
    r->ino = sb.st_ino;
    r->refs = 1;
    r->next = g_regs;
    g_regs = r;
    *out = r;
    return 0;
}

/* Drops a reference on r; the last deregisters the descriptor. Called with g_mu held. */
static void reg_put_locked(struct cufile_reg *r)
{
    struct cufile_reg **pp;
    if (--r->refs > 0)
        return;
    for (pp = &g_regs; *pp != r; pp = &(*pp)->next)
        S3D_ASSERT(*pp != NULL);
    *pp = r->next;
    g_f.cuFileHandleDeregister(r->fh);
    free(r);
}

int s3d_cufile_open(struct s3d_device *dev, int ordinal, int fd, struct s3d_cufile **out)
{
    struct s3d_cufile *f;
    struct s3d_cuda_prev prev;
    int rc;

    *out = NULL;
    if ((rc = not_available(dev, ordinal)) < 0)
        return rc;
    f = calloc(1, sizeof(*f));
    if (f == NULL)
        return s3d_fail(S3D_ENOMEM, "cufile: out of memory");
    if ((rc = s3d_cuda_ctx_enter(dev, ordinal, &prev)) < 0)
        goto fail;
    pthread_mutex_lock(&g_mu);
    rc = reg_get_locked(fd, &f->reg);
    /* Registered is not direct: with its compatibility mode on (compat_off did not turn it
     * off) cuFile registers any file and serves the ones it cannot reach directly in that
     * mode. Which one this is by our model, for AUTO and for --debug. */
    const int dmode = mode_locked();
    if (rc == 0)
        g_handles++;
    pthread_mutex_unlock(&g_mu);
    s3d_cuda_ctx_leave(dev, ordinal, &prev);
    if (rc < 0)
        goto fail;
    f->fh = f->reg->fh;
    f->dev = dev;
    f->fd = fd;
    f->mode = file_mode(dmode, g_dstatus, fd, &f->why);
    S3D_DEBUG("cufile: fd %d: mode %s (%s)", fd, s3d_cufile_mode_name(f->mode), f->why);
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
    pthread_mutex_lock(&g_mu);
    reg_put_locked(f->reg);
    g_handles--;
    pthread_mutex_unlock(&g_mu);
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
    return s3d_fail(S3D_ECUFILE, "%s at offset %llu: %s (%d)%s", fn, (unsigned long long)off,
                    s3d_cufile_err_name((int)-r), (int)-r, compat_hint((int)-r));
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
