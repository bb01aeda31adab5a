/* cuda_dl.c - the cuda backend: the CUDA driver API loaded with dlopen("libcuda.so.1").
 *
 * No CUDA header is used at build time: the few types, constants and signatures needed are
 * declared below with the values of cuda.h. cuda.h maps several names to versioned symbols
 * (#define cuMemcpyHtoDAsync cuMemcpyHtoDAsync_v2 ...); dlsym needs the real symbol, so the
 * table below names them explicitly.
 *
 * Contexts: PyTorch (the CUDA runtime) uses each device's primary context. We retain it once
 * per device (cuDevicePrimaryCtxRetain) and, for each operation, make it current on the
 * calling thread only if another context is current there, putting the caller's back
 * afterwards: the caller's notion of its current device is never changed by a call into us.
 * When no context was current, ours is left current (cheaper next time, invisible to the
 * runtime, which would pick the same primary context). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "device/device_impl.h"

/* ---- the subset of cuda.h we use ------------------------------------------------------ */

typedef int CUresult; /* enum cudaError_enum */
typedef int CUdevice;
typedef unsigned long long CUdeviceptr; /* CUdeviceptr_v2 on 64-bit platforms */
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;

#define CUDA_SUCCESS               0
#define CUDA_ERROR_INVALID_VALUE   1
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_NO_DEVICE       100
#define CUDA_ERROR_INVALID_HANDLE  400
#define CUDA_ERROR_NOT_READY       600

#define CU_MEMHOSTALLOC_PORTABLE            0x01
#define CU_MEMHOSTREGISTER_PORTABLE         0x01
#define CU_STREAM_NON_BLOCKING              0x1
#define CU_EVENT_DISABLE_TIMING             0x2
#define CU_POINTER_ATTRIBUTE_CONTEXT        1
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE    2
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define CU_MEMORYTYPE_HOST                  0x01
#define CU_MEMORYTYPE_DEVICE                0x02
#define CU_MEMORYTYPE_UNIFIED               0x04

#define CU_STREAM_LEGACY     ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

struct cuda_fns {
    CUresult (*cuInit)(unsigned int flags);
    CUresult (*cuDriverGetVersion)(int *version);
    CUresult (*cuDeviceGetCount)(int *count);
    CUresult (*cuDeviceGet)(CUdevice *dev, int ordinal);
    CUresult (*cuDeviceGetPCIBusId)(char *bus_id, int len, CUdevice dev); /* optional */
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);
    CUresult (*cuDevicePrimaryCtxRelease)(CUdevice dev); /* _v2 */
    CUresult (*cuCtxGetCurrent)(CUcontext *ctx);
    CUresult (*cuCtxSetCurrent)(CUcontext ctx);
    CUresult (*cuMemHostAlloc)(void **pp, size_t size, unsigned int flags);
    CUresult (*cuMemFreeHost)(void *p);
    CUresult (*cuMemHostRegister)(void *p, size_t size, unsigned int flags); /* _v2 */
    CUresult (*cuMemHostUnregister)(void *p);
    CUresult (*cuMemAlloc)(CUdeviceptr *dptr, size_t size);                                /* _v2 */
    CUresult (*cuMemFree)(CUdeviceptr dptr);                                               /* _v2 */
    CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr dst, const void *src, size_t n, CUstream s); /* _v2 */
    CUresult (*cuMemcpyDtoHAsync)(void *dst, CUdeviceptr src, size_t n, CUstream s);       /* _v2 */
    CUresult (*cuStreamCreate)(CUstream *s, unsigned int flags);
    CUresult (*cuStreamDestroy)(CUstream s); /* _v2 */
    CUresult (*cuStreamSynchronize)(CUstream s);
    CUresult (*cuStreamWaitEvent)(CUstream s, CUevent e, unsigned int flags);
    CUresult (*cuStreamGetCtx)(CUstream s, CUcontext *ctx); /* optional */
    CUresult (*cuEventCreate)(CUevent *e, unsigned int flags);
    CUresult (*cuEventDestroy)(CUevent e); /* _v2 */
    CUresult (*cuEventRecord)(CUevent e, CUstream s);
    CUresult (*cuEventQuery)(CUevent e);
    CUresult (*cuEventSynchronize)(CUevent e);
    CUresult (*cuPointerGetAttribute)(void *data, int attribute, CUdeviceptr ptr);
    CUresult (*cuGetErrorString)(CUresult r, const char **str);
    CUresult (*cuGetErrorName)(CUresult r, const char **str);
};

/* Retained primary contexts. Locked part: ctx[] writes, under mu; reads of a non-NULL
 * entry are lock-free (an entry goes from NULL to its final value once). */
struct s3d_cuda {
    void *lib;
    struct cuda_fns f;
    int count;
    pthread_mutex_t mu;
    CUcontext *ctx; /* count entries, NULL until retained */
};

/* ---- errors ---------------------------------------------------------------------------- */

static void cu_describe(const struct cuda_fns *f, CUresult r, char *buf, size_t cap)
{
    const char *name = NULL, *str = NULL;
    if (f->cuGetErrorName == NULL || f->cuGetErrorName(r, &name) != CUDA_SUCCESS)
        name = NULL;
    if (f->cuGetErrorString == NULL || f->cuGetErrorString(r, &str) != CUDA_SUCCESS)
        str = NULL;
    snprintf(buf, cap, "%s (%s, %d)", str ? str : "unknown error", name ? name : "CUDA_ERROR_?", r);
}

/* The one place a CUresult becomes an S3D code. */
static int cu_fail(const struct s3d_cuda *c, const char *fn, CUresult r)
{
    char what[256];
    cu_describe(&c->f, r, what, sizeof(what));
    return s3d_fail(S3D_ECUDA, "%s: %s", fn, what);
}

/* 0 for CUDA_SUCCESS, else cu_fail's error naming fn. */
static int cu_check(const struct s3d_cuda *c, const char *fn, CUresult r)
{
    return r == CUDA_SUCCESS ? 0 : cu_fail(c, fn, r);
}

/* ---- loading --------------------------------------------------------------------------- */

static int load_symbols(struct s3d_cuda *c, char *why, size_t why_cap)
{
    static const struct {
        const char *name;
        size_t off;
        int optional;
    } syms[] = {
#define SYM(field, name, opt) {name, offsetof(struct cuda_fns, field), opt}
        SYM(cuInit, "cuInit", 0),
        SYM(cuDriverGetVersion, "cuDriverGetVersion", 0),
        SYM(cuDeviceGetCount, "cuDeviceGetCount", 0),
        SYM(cuDeviceGet, "cuDeviceGet", 0),
        SYM(cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId", 1),
        SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 0),
        SYM(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", 0),
        SYM(cuCtxGetCurrent, "cuCtxGetCurrent", 0),
        SYM(cuCtxSetCurrent, "cuCtxSetCurrent", 0),
        SYM(cuMemHostAlloc, "cuMemHostAlloc", 0),
        SYM(cuMemFreeHost, "cuMemFreeHost", 0),
        SYM(cuMemHostRegister, "cuMemHostRegister_v2", 0),
        SYM(cuMemHostUnregister, "cuMemHostUnregister", 0),
        SYM(cuMemAlloc, "cuMemAlloc_v2", 0),
        SYM(cuMemFree, "cuMemFree_v2", 0),
        SYM(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", 0),
        SYM(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", 0),
        SYM(cuStreamCreate, "cuStreamCreate", 0),
        SYM(cuStreamDestroy, "cuStreamDestroy_v2", 0),
        SYM(cuStreamSynchronize, "cuStreamSynchronize", 0),
        SYM(cuStreamWaitEvent, "cuStreamWaitEvent", 0),
        SYM(cuStreamGetCtx, "cuStreamGetCtx", 1),
        SYM(cuEventCreate, "cuEventCreate", 0),
        SYM(cuEventDestroy, "cuEventDestroy_v2", 0),
        SYM(cuEventRecord, "cuEventRecord", 0),
        SYM(cuEventQuery, "cuEventQuery", 0),
        SYM(cuEventSynchronize, "cuEventSynchronize", 0),
        SYM(cuPointerGetAttribute, "cuPointerGetAttribute", 0),
        SYM(cuGetErrorString, "cuGetErrorString", 0),
        SYM(cuGetErrorName, "cuGetErrorName", 0),
#undef SYM
    };
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        void *p;
        dlerror();
        p = dlsym(c->lib, syms[i].name);
        if (p == NULL && !syms[i].optional) {
            const char *e = dlerror();
            snprintf(why, why_cap, "libcuda.so.1: %s", e ? e : syms[i].name);
            return -1;
        }
        /* POSIX guarantees object and function pointers convert through void *. */
        memcpy((char *)&c->f + syms[i].off, &p, sizeof(p));
    }
    return 0;
}

int s3d_cuda_open(struct s3d_device *dev)
{
    struct s3d_cuda *c;
    CUresult r;
    int n = 0;
    char what[256];

    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return s3d_fail(S3D_ENOMEM, "device: out of memory");
    pthread_mutex_init(&c->mu, NULL);
    /* RTLD_NOW: a missing symbol shows here, not as a crash in the middle of a transfer. */
    c->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (c->lib == NULL) {
        const char *e = dlerror();
        snprintf(dev->why_host, sizeof(dev->why_host), "%s", e ? e : "dlopen libcuda.so.1");
        goto host;
    }
    if (load_symbols(c, dev->why_host, sizeof(dev->why_host)) < 0)
        goto host;
    r = c->f.cuInit(0);
    if (r != CUDA_SUCCESS) {
        cu_describe(&c->f, r, what, sizeof(what));
        snprintf(dev->why_host, sizeof(dev->why_host), "cuInit: %s", what);
        goto host;
    }
    r = c->f.cuDeviceGetCount(&n);
    if (r != CUDA_SUCCESS || n <= 0) {
        cu_describe(&c->f, r != CUDA_SUCCESS ? r : CUDA_ERROR_NO_DEVICE, what, sizeof(what));
        snprintf(dev->why_host, sizeof(dev->why_host), "cuDeviceGetCount: %s", what);
        goto host;
    }
    c->ctx = calloc((size_t)n, sizeof(*c->ctx));
    if (c->ctx == NULL) {
        pthread_mutex_destroy(&c->mu);
        free(c); /* the library stays loaded: unloading CUDA from a live process is unsafe */
        return s3d_fail(S3D_ENOMEM, "device: out of memory");
    }
    c->count = n;
    dev->cuda = c;
    dev->count = n;
    {
        int v = 0;
        c->f.cuDriverGetVersion(&v);
        S3D_INFO("cuda: driver %d.%d, %d device(s)", v / 1000, (v % 1000) / 10, n);
    }
    return 0;
host:
    S3D_INFO("cuda: not used: %s", dev->why_host);
    pthread_mutex_destroy(&c->mu);
    free(c);
    return 1;
}

void s3d_cuda_close(struct s3d_device *dev)
{
    struct s3d_cuda *c = dev->cuda;
    if (c == NULL)
        return;
    for (int i = 0; i < c->count; i++) {
        if (c->ctx[i] != NULL) {
            CUdevice d;
            if (c->f.cuDeviceGet(&d, i) == CUDA_SUCCESS)
                c->f.cuDevicePrimaryCtxRelease(d);
        }
    }
    pthread_mutex_destroy(&c->mu);
    free(c->ctx);
    free(c);
    dev->cuda = NULL;
}

/* ---- contexts -------------------------------------------------------------------------- */

static int retain(struct s3d_cuda *c, int ordinal, CUcontext *out)
{
    CUcontext ctx = __atomic_load_n(&c->ctx[ordinal], __ATOMIC_ACQUIRE);
    CUresult r;
    CUdevice d;
    int rc = 0;

    *out = ctx; /* NULL (and rc < 0) on failure */
    if (ctx != NULL)
        return 0;
    pthread_mutex_lock(&c->mu);
    ctx = c->ctx[ordinal];
    if (ctx == NULL) {
        if ((r = c->f.cuDeviceGet(&d, ordinal)) != CUDA_SUCCESS) {
            rc = cu_fail(c, "cuDeviceGet", r);
            goto out;
        }
        if ((r = c->f.cuDevicePrimaryCtxRetain(&ctx, d)) != CUDA_SUCCESS) {
            rc = cu_fail(c, "cuDevicePrimaryCtxRetain", r);
            goto out;
        }
        __atomic_store_n(&c->ctx[ordinal], ctx, __ATOMIC_RELEASE);
    }
    *out = ctx;
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int s3d_cuda_ctx_enter(struct s3d_device *dev, int ordinal, struct s3d_cuda_prev *prev)
{
    struct s3d_cuda *c = dev->cuda;
    CUcontext ctx, cur = NULL;
    CUresult r;
    int rc;

    prev->ctx = NULL;
    prev->restore = 0;
    if ((r = c->f.cuCtxGetCurrent(&cur)) != CUDA_SUCCESS)
        return cu_fail(c, "cuCtxGetCurrent", r);
    /* Any context will do (pinned PORTABLE memory, pointer queries): use the caller's rather
     * than create one on device 0, which would cost every rank of a multi-GPU job a context
     * on GPU 0. */
    if (ordinal < 0 && cur != NULL)
        return 0;
    if (ordinal < 0) {
        /* None current (Python's helper threads): a context this device already retained
         * (the GPU its transfers use) before device 0's, which only a process that has used
         * no GPU yet falls back to. */
        ordinal = 0;
        for (int d = 0; d < c->count; d++)
            if (__atomic_load_n(&c->ctx[d], __ATOMIC_ACQUIRE) != NULL) {
                ordinal = d;
                break;
            }
    }
    if ((rc = retain(c, ordinal, &ctx)) < 0)
        return rc;
    if (cur == ctx)
        return 0;
    if ((r = c->f.cuCtxSetCurrent(ctx)) != CUDA_SUCCESS)
        return cu_fail(c, "cuCtxSetCurrent", r);
    /* Also when none was current: a thread that had no context must not be left with ours
     * (its runtime-API current device would change under it). */
    prev->ctx = cur;
    prev->restore = 1;
    return 0;
}

void s3d_cuda_ctx_leave(struct s3d_device *dev, int ordinal, const struct s3d_cuda_prev *prev)
{
    if (prev->restore)
        dev->cuda->f.cuCtxSetCurrent((CUcontext)prev->ctx);
}

/* ENTER/LEAVE bracket one driver call sequence; every function below uses them so that no
 * path forgets to put the caller's context back. */
#define ENTER(dev, ordinal)                                                                        \
    struct s3d_cuda_prev prev_ctx_;                                                                \
    do {                                                                                           \
        int e_rc_ = s3d_cuda_ctx_enter(dev, ordinal, &prev_ctx_);                                  \
        if (e_rc_ < 0)                                                                             \
            return e_rc_;                                                                          \
    } while (0)
#define LEAVE(dev, ordinal) s3d_cuda_ctx_leave(dev, ordinal, &prev_ctx_)

static int cuda_make_current(struct s3d_device *dev, int ordinal)
{
    struct s3d_cuda *c = dev->cuda;
    CUcontext ctx;
    CUresult r;
    int rc = retain(c, ordinal, &ctx);
    if (rc < 0)
        return rc;
    if ((r = c->f.cuCtxSetCurrent(ctx)) != CUDA_SUCCESS)
        return cu_fail(c, "cuCtxSetCurrent", r);
    return 0;
}

/* ---- pointers and memory --------------------------------------------------------------- */

static int cuda_pointer_info(struct s3d_device *dev, const void *ptr, int *is_device, int *ordinal)
{
    struct s3d_cuda *c = dev->cuda;
    unsigned int type = 0;
    int ord = -1, rc = 0;
    CUresult r;

    ENTER(dev, S3D_ANY_CTX);
    r = c->f.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                   (CUdeviceptr)(uintptr_t)ptr);
    if (r == CUDA_ERROR_INVALID_VALUE) {
        /* Not an address CUDA knows: ordinary host memory. */
        *is_device = 0;
        *ordinal = -1;
        goto out;
    }
    if (r != CUDA_SUCCESS) {
        rc = cu_fail(c, "cuPointerGetAttribute(MEMORY_TYPE)", r);
        goto out;
    }
    if (type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED) {
        *is_device = 0; /* pinned or registered host memory */
        *ordinal = -1;
        goto out;
    }
    r = c->f.cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                   (CUdeviceptr)(uintptr_t)ptr);
    if (r != CUDA_SUCCESS) {
        rc = cu_fail(c, "cuPointerGetAttribute(DEVICE_ORDINAL)", r);
        goto out;
    }
    *is_device = 1;
    *ordinal = ord;
out:
    LEAVE(dev, S3D_ANY_CTX);
    return rc;
}

static int cuda_host_alloc(struct s3d_device *dev, size_t size, void **out)
{
    struct s3d_cuda *c = dev->cuda;
    CUresult r;
    int rc = 0;
    ENTER(dev, S3D_ANY_CTX);
    /* PORTABLE: pinned for every context, so one pool serves all GPUs. */
    r = c->f.cuMemHostAlloc(out, size, CU_MEMHOSTALLOC_PORTABLE);
    if (r != CUDA_SUCCESS) {
        *out = NULL;
        rc = cu_fail(c, "cuMemHostAlloc", r);
        rc = s3d_fail_prefix(rc, "pinning %zu bytes", size);
    }
    LEAVE(dev, S3D_ANY_CTX);
    return rc;
}

static void cuda_host_free_impl(struct s3d_device *dev, void *p)
{
    struct s3d_cuda *c = dev->cuda;
    struct s3d_cuda_prev prev;
    if (s3d_cuda_ctx_enter(dev, S3D_ANY_CTX, &prev) < 0)
        return;
    CUresult r = c->f.cuMemFreeHost(p);
    if (r != CUDA_SUCCESS)
        S3D_WARN("cuMemFreeHost failed: %d", r);
    s3d_cuda_ctx_leave(dev, S3D_ANY_CTX, &prev);
}

static void cuda_host_free(struct s3d_device *dev, void *p, size_t size)
{
    cuda_host_free_impl(dev, p);
}

static int cuda_host_register(struct s3d_device *dev, int ordinal, void *p, size_t size)
{
    struct s3d_cuda *c = dev->cuda;
    int rc;
    ENTER(dev, ordinal);
    rc = cu_check(c, "cuMemHostRegister",
                  c->f.cuMemHostRegister(p, size, CU_MEMHOSTREGISTER_PORTABLE));
    LEAVE(dev, ordinal);
    return rc;
}

static void cuda_host_unregister(struct s3d_device *dev, int ordinal, void *p)
{
    struct s3d_cuda *c = dev->cuda;
    struct s3d_cuda_prev prev;
    if (s3d_cuda_ctx_enter(dev, ordinal, &prev) < 0)
        return;
    c->f.cuMemHostUnregister(p);
    s3d_cuda_ctx_leave(dev, ordinal, &prev);
}

static int cuda_mem_alloc(struct s3d_device *dev, int ordinal, size_t size, uint64_t *out)
{
    struct s3d_cuda *c = dev->cuda;
    CUdeviceptr d = 0;
    int rc;
    ENTER(dev, ordinal);
    rc = cu_check(c, "cuMemAlloc", c->f.cuMemAlloc(&d, size));
    *out = d;
    LEAVE(dev, ordinal);
    return rc;
}

static void cuda_mem_free(struct s3d_device *dev, int ordinal, uint64_t dptr)
{
    struct s3d_cuda *c = dev->cuda;
    struct s3d_cuda_prev prev;
    if (s3d_cuda_ctx_enter(dev, ordinal, &prev) < 0)
        return;
    c->f.cuMemFree((CUdeviceptr)dptr);
    s3d_cuda_ctx_leave(dev, ordinal, &prev);
}

/* For the staging pool's NUMA placement (numa.c). Needs no context: cuInit is enough. */
static int cuda_pci_bus_id(struct s3d_device *dev, int ordinal, char *buf, size_t cap)
{
    struct s3d_cuda *c = dev->cuda;
    CUdevice d;
    CUresult r;
    if (c->f.cuDeviceGetPCIBusId == NULL)
        return s3d_fail(S3D_ENOTSUP, "cuDeviceGetPCIBusId: not in this libcuda.so.1");
    if ((r = c->f.cuDeviceGet(&d, ordinal)) != CUDA_SUCCESS)
        return cu_fail(c, "cuDeviceGet", r);
    if ((r = c->f.cuDeviceGetPCIBusId(buf, (int)cap, d)) != CUDA_SUCCESS)
        return cu_fail(c, "cuDeviceGetPCIBusId", r);
    buf[cap - 1] = '\0';
    return 0;
}

/* ---- streams and events ---------------------------------------------------------------- */

static int cuda_stream_new(struct s3d_device *dev, struct s3d_stream *s)
{
    struct s3d_cuda *c = dev->cuda;
    CUstream cs = NULL;
    int rc;
    ENTER(dev, s->ordinal);
    rc = cu_check(c, "cuStreamCreate", c->f.cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
    s->cu = cs;
    LEAVE(dev, s->ordinal);
    return rc;
}

static void cuda_stream_free(struct s3d_device *dev, struct s3d_stream *s)
{
    struct s3d_cuda *c = dev->cuda;
    struct s3d_cuda_prev prev;
    if (s->cu == NULL || s3d_cuda_ctx_enter(dev, s->ordinal, &prev) < 0)
        return;
    /* Copies may still read a staging chunk: finish them before the chunk is reused. */
    c->f.cuStreamSynchronize((CUstream)s->cu);
    c->f.cuStreamDestroy((CUstream)s->cu);
    s3d_cuda_ctx_leave(dev, s->ordinal, &prev);
}

static int cuda_copy_htod(struct s3d_device *dev, struct s3d_stream *s, uint64_t dst,
                          const void *src, size_t n)
{
    struct s3d_cuda *c = dev->cuda;
    int rc;
    ENTER(dev, s->ordinal);
    rc = cu_check(c, "cuMemcpyHtoDAsync",
                  c->f.cuMemcpyHtoDAsync((CUdeviceptr)dst, src, n, (CUstream)s->cu));
    LEAVE(dev, s->ordinal);
    return rc;
}

static int cuda_copy_dtoh(struct s3d_device *dev, struct s3d_stream *s, void *dst, uint64_t src,
                          size_t n)
{
    struct s3d_cuda *c = dev->cuda;
    int rc;
    ENTER(dev, s->ordinal);
    rc = cu_check(c, "cuMemcpyDtoHAsync",
                  c->f.cuMemcpyDtoHAsync(dst, (CUdeviceptr)src, n, (CUstream)s->cu));
    LEAVE(dev, s->ordinal);
    return rc;
}

static int cuda_stream_sync(struct s3d_device *dev, struct s3d_stream *s)
{
    struct s3d_cuda *c = dev->cuda;
    int rc;
    ENTER(dev, s->ordinal);
    rc = cu_check(c, "cuStreamSynchronize", c->f.cuStreamSynchronize((CUstream)s->cu));
    LEAVE(dev, s->ordinal);
    return rc;
}

static int cuda_event_new(struct s3d_device *dev, struct s3d_event *e)
{
    struct s3d_cuda *c = dev->cuda;
    CUevent ce = NULL;
    int rc;
    ENTER(dev, e->ordinal);
    rc = cu_check(c, "cuEventCreate", c->f.cuEventCreate(&ce, CU_EVENT_DISABLE_TIMING));
    e->cu = ce;
    LEAVE(dev, e->ordinal);
    return rc;
}

static void cuda_event_free(struct s3d_device *dev, struct s3d_event *e)
{
    struct s3d_cuda *c = dev->cuda;
    struct s3d_cuda_prev prev;
    if (e->cu == NULL || s3d_cuda_ctx_enter(dev, e->ordinal, &prev) < 0)
        return;
    c->f.cuEventDestroy((CUevent)e->cu);
    s3d_cuda_ctx_leave(dev, e->ordinal, &prev);
}

static int cuda_event_record(struct s3d_device *dev, struct s3d_event *e, struct s3d_stream *s)
{
    struct s3d_cuda *c = dev->cuda;
    int rc;
    ENTER(dev, s->ordinal);
    rc = cu_check(c, "cuEventRecord", c->f.cuEventRecord((CUevent)e->cu, (CUstream)s->cu));
    LEAVE(dev, s->ordinal);
    return rc;
}

static int cuda_event_query(struct s3d_device *dev, struct s3d_event *e)
{
    struct s3d_cuda *c = dev->cuda;
    CUresult r;
    int rc;
    ENTER(dev, e->ordinal);
    r = c->f.cuEventQuery((CUevent)e->cu);
    if (r == CUDA_SUCCESS)
        rc = 1;
    else if (r == CUDA_ERROR_NOT_READY)
        rc = 0;
    else
        rc = cu_fail(c, "cuEventQuery", r);
    LEAVE(dev, e->ordinal);
    return rc;
}

static int cuda_event_sync(struct s3d_device *dev, struct s3d_event *e)
{
    struct s3d_cuda *c = dev->cuda;
    int rc;
    ENTER(dev, e->ordinal);
    rc = cu_check(c, "cuEventSynchronize", c->f.cuEventSynchronize((CUevent)e->cu));
    LEAVE(dev, e->ordinal);
    return rc;
}

static int cuda_wait_external(struct s3d_device *dev, struct s3d_stream *s, uint64_t caller_stream)
{
    struct s3d_cuda *c = dev->cuda;
    CUstream cs = (CUstream)(uintptr_t)caller_stream;
    CUcontext sctx = NULL, cur = NULL;
    CUevent ev = NULL;
    CUresult r;
    int rc = 0;

    ENTER(dev, s->ordinal);
    /* The event must belong to the caller stream's context, which may be another device's:
     * switch to it for the record when the driver can tell us which it is. The legacy and
     * per-thread default streams (0, 1, 2) mean the current context's, i.e. ours. */
    if (caller_stream > 2 && c->f.cuStreamGetCtx != NULL &&
        c->f.cuStreamGetCtx(cs, &sctx) == CUDA_SUCCESS && sctx != NULL) {
        c->f.cuCtxGetCurrent(&cur);
        if (sctx != cur && (r = c->f.cuCtxSetCurrent(sctx)) != CUDA_SUCCESS) {
            rc = cu_fail(c, "cuCtxSetCurrent", r);
            goto out;
        }
    }
    if ((r = c->f.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS) {
        rc = cu_fail(c, "cuEventCreate", r);
        goto restore;
    }
    if ((r = c->f.cuEventRecord(ev, cs)) != CUDA_SUCCESS) {
        rc = cu_fail(c, "cuEventRecord(caller stream)", r);
        goto restore;
    }
    /* Back in our stream's context for the wait (cuStreamWaitEvent accepts an event of
     * another context or device). */
    if (sctx != NULL && sctx != cur && cur != NULL &&
        (r = c->f.cuCtxSetCurrent(cur)) != CUDA_SUCCESS) {
        rc = cu_fail(c, "cuCtxSetCurrent", r);
        goto restore;
    }
    if ((r = c->f.cuStreamWaitEvent((CUstream)s->cu, ev, 0)) != CUDA_SUCCESS)
        rc = cu_fail(c, "cuStreamWaitEvent", r);
restore:
    /* Destroying a recorded event is allowed: its resources go when it completes. */
    if (ev != NULL)
        c->f.cuEventDestroy(ev);
    if (sctx != NULL && sctx != cur && cur != NULL)
        c->f.cuCtxSetCurrent(cur);
out:
    LEAVE(dev, s->ordinal);
    return rc;
}

/* cuStreamWaitEvent needs the waiting stream's context current (ENTER makes it so); it
 * accepts an event of any context or device. */
static int cuda_wait_event(struct s3d_device *dev, struct s3d_stream *s, uint64_t caller_event)
{
    struct s3d_cuda *c = dev->cuda;
    CUresult r;
    int rc;
    ENTER(dev, s->ordinal);
    r = c->f.cuStreamWaitEvent((CUstream)s->cu, (CUevent)(uintptr_t)caller_event, 0);
    rc = cu_check(c, "cuStreamWaitEvent(caller event)", r);
    if (r == CUDA_ERROR_INVALID_HANDLE)
        rc = s3d_fail_prefix(rc, "not a live event (destroyed, or not made by cuEventCreate; "
                                 "keep each one until the write returns)");
    LEAVE(dev, s->ordinal);
    return rc;
}

const struct s3d_device_ops s3d_cuda_ops = {
    .pointer_info = cuda_pointer_info,
    .make_current = cuda_make_current,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .host_register = cuda_host_register,
    .host_unregister = cuda_host_unregister,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .stream_new = cuda_stream_new,
    .stream_free = cuda_stream_free,
    .copy_htod = cuda_copy_htod,
    .copy_dtoh = cuda_copy_dtoh,
    .stream_sync = cuda_stream_sync,
    .event_new = cuda_event_new,
    .event_free = cuda_event_free,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_sync = cuda_event_sync,
    .wait_external = cuda_wait_external,
    .wait_event = cuda_wait_event,
    .pci_bus_id = cuda_pci_bus_id,
};
