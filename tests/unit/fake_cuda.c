/* fake_cuda.c - a stand-in libcuda.so.1 and libcufile.so.0 for CPU-only tests of cuda_dl.c and
 * cufile_dl.c (built twice, see device.cmake). "Device memory" is host memory; the fake keeps
 * the rules the real driver enforces that our code could get wrong:
 *   - only the versioned symbols that cuda.h maps to are exported (cuMemcpyHtoDAsync_v2, ...),
 *     so a dlsym of the wrong name fails the backend;
 *   - allocations, streams and events need a current context, and a copy or record on a
 *     stream needs that stream's context current (CUDA_ERROR_INVALID_CONTEXT otherwise);
 *   - pointers CUDA does not know answer CUDA_ERROR_INVALID_VALUE to cuPointerGetAttribute;
 *   - copies are deferred per stream and performed only when an event recorded after them
 *     is seen complete (its first cuEventQuery answers CUDA_ERROR_NOT_READY) or the stream is
 *     synchronized or destroyed; cuStreamWaitEvent makes a stream run the other stream's work
 *     up to the event first, so streams are unordered unless a wait orders them;
 *   - events are handles the driver knows: one that is NULL, was never made by cuEventCreate or
 *     was destroyed answers CUDA_ERROR_INVALID_HANDLE (400) to every event call, and is never
 *     read; cuStreamWaitEvent takes an event of any context (the driver's documentation: "may
 *     be from a different context or device than hStream") and only flags 0
 *     (CU_EVENT_WAIT_DEFAULT; anything else outside stream capture is CUDA_ERROR_INVALID_VALUE);
 *   - CUDA does not survive fork(): cuInit in a child of a process that initialized the
 *     driver fails with CUDA_ERROR_NOT_INITIALIZED (3), as the real driver refuses (set
 *     FAKE_CUDA_FORK_OK=1 in a child that only tests something else).
 *   - a cuFileWrite that does not start and end on a 4 KiB boundary reads the partial blocks
 *     first (GDS's read-modify-write), so it fails on a write-only descriptor (-1, EBADF);
 *   - a descriptor registered twice is refused (CU_FILE_HANDLE_ALREADY_REGISTERED);
 *   - cuFileRead/cuFileWrite of device memory need that device's context current
 *     (CU_FILE_CUDA_CONTEXT_MISMATCH otherwise); the device of the context the driver was
 *     opened in and the last file registered in is kept (fake_cufile_open_dev, _register_dev);
 *   - cuFile does not follow stream order: a cuFileRead/cuFileWrite while stream work that
 *     touches its device memory is still queued is counted (fake_cufile_unordered), and the
 *     I/O goes on, so that work runs after it and the bytes come out wrong, as on a GPU;
 *   - parameters (cuFileSetParameter*) only before the driver opens; with allow_compat_mode
 *     off, a file the fake cannot reach directly (every file while FAKE_CUFILE_NOT_DIRECT=1;
 *     =io: refused at each I/O instead) is refused at registration with
 *     CU_FILE_IO_NOT_SUPPORTED, as the GDS troubleshooting guide says; with it on, its I/O
 *     is counted as compatibility mode (fake_cufile_compat_ios). Built with
 *     FAKE_CUFILE_PRE_1_14 (fakecuda-old/), the parameter calls are missing, as before 1.14;
 * FAKE_CUDA_FAIL_INIT=1 makes cuInit fail; FAKE_CUDA_FAIL_COPY=1 makes copies fail with
 * CUDA_ERROR_ILLEGAL_ADDRESS, FAKE_CUDA_FAIL_RECORD=1 event records (copies queued before
 * stay queued: fake_cuda_pending_copies() shows who returned a buffer before they ran).
 * fake_cuda_stats() reports counters to the test, fake_cuda_ctx_refs(d) the references on device
 * d's primary context. cuMemHostRegister faults every page in, as pinning does, and keeps the
 * memory policy each range had then (fake_cuda_register_modes); cuDeviceGetPCIBusId answers a
 * fixed address per device (FAKE_CUDA_FAIL_BUSID=1: an error). */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
/* Counters bumped by any thread (concurrent loads in one test): atomic, for TSan. */
#define BUMP(x) __atomic_fetch_add(&(x), 1, __ATOMIC_RELAXED)

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

#define NDEV 2
struct fctx {
    int dev;
    int refs;
};
/* Work queued on a stream and performed as late as a GPU could: a copy, or a wait for another
 * stream's work up to a sequence number (cuStreamWaitEvent). */
struct fop {
    void *dst;
    const void *src;
    size_t n;
    struct fstream *wait; /* non-NULL: a wait */
    unsigned long long wait_seq;
};
struct fstream {
    struct fctx *ctx;
    unsigned flags;
    struct fop *ops;
    size_t n_ops, cap_ops, done;
    unsigned long long base; /* sequence number of ops[0] */
};
struct fevent {
    struct fctx *ctx;
    struct fstream *s; /* NULL: never recorded */
    unsigned long long seq;
    int queried;
    struct fevent *next_dead; /* g_dead's list */
};

static struct fctx g_ctx[NDEV] = {{0, 0}, {1, 0}};
static struct fstream g_legacy[NDEV];
static struct fstream *g_streams[256]; /* those cuStreamCreate made and not destroyed (g_mu) */
static struct fevent *g_events[256];   /* those cuEventCreate made and not destroyed (g_mu) */
/* Destroyed events, kept (reachable, not leaked) and never freed, so that no later event gets
 * a destroyed one's address and a stale handle stays stale (g_mu). */
static struct fevent *g_dead;
static __thread struct fctx *t_cur;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

struct alloc {
    char *p;
    size_t n;
    int type; /* 1 host (pinned), 2 device */
    int dev;
};
static struct alloc g_allocs[256];

struct fake_cuda_stats {
    int copies, bad_context, retains, releases, stream_flags_seen, wait_events, stream_syncs;
};
static int g_pending; /* copies queued and not yet performed, on every stream (under g_mu) */

/* Copies queued on any stream and not yet performed: what the libcufile copy asks to see
 * whether its I/O overlaps copies (a GPU's copy engine runs them meanwhile). */
EXPORT int fake_cuda_pending_copies(void)
{
    pthread_mutex_lock(&g_mu);
    int n = g_pending;
    pthread_mutex_unlock(&g_mu);
    return n;
}
static struct fake_cuda_stats g_stats;

static int overlaps(const void *a, size_t an, const void *b, size_t bn)
{
    const char *x = a, *y = b;
    return an > 0 && bn > 0 && x < y + bn && y < x + an;
}

/* Queued work on any stream that conflicts with an access of n bytes at p that no stream
 * orders: a copy into that memory, or (for_write: the access writes it) a copy out of it. What
 * the libcufile copy asks before each cuFileRead or cuFileWrite, which do not follow stream
 * order: such work runs after the I/O on a GPU, so the I/O sees or leaves the wrong bytes. */
EXPORT int fake_cuda_pending_on(const void *p, size_t n, int for_write)
{
    int hits = 0;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < 256 + NDEV; i++) {
        const struct fstream *st = i < 256 ? g_streams[i] : &g_legacy[i - 256];
        if (st == NULL)
            continue;
        for (size_t k = st->done; k < st->n_ops; k++) {
            const struct fop *op = &st->ops[k];
            if (op->wait == NULL &&
                (overlaps(op->dst, op->n, p, n) || (for_write && overlaps(op->src, op->n, p, n))))
                hits++;
        }
    }
    pthread_mutex_unlock(&g_mu);
    return hits;
}

EXPORT void fake_cuda_stats(struct fake_cuda_stats *out)
{
    *out = g_stats;
}

/* References held on device d's primary context (retains minus releases): 0 means nobody
 * made a context on that GPU. */
EXPORT int fake_cuda_ctx_refs(int d)
{
    return d >= 0 && d < NDEV ? g_ctx[d].refs : -1;
}

static int need_ctx(void)
{
    if (t_cur == NULL) {
        BUMP(g_stats.bad_context);
        return 201; /* CUDA_ERROR_INVALID_CONTEXT */
    }
    return 0;
}

static void track(char *p, size_t n, int type, int dev)
{
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < 256; i++)
        if (g_allocs[i].p == NULL) {
            g_allocs[i] = (struct alloc){p, n, type, dev};
            break;
        }
    pthread_mutex_unlock(&g_mu);
}

static struct alloc *find(const char *p)
{
    for (int i = 0; i < 256; i++)
        if (g_allocs[i].p != NULL && p >= g_allocs[i].p && p < g_allocs[i].p + g_allocs[i].n)
            return &g_allocs[i];
    return NULL;
}

static void untrack(void *p)
{
    pthread_mutex_lock(&g_mu);
    struct alloc *a = find(p);
    if (a != NULL)
        a->p = NULL;
    pthread_mutex_unlock(&g_mu);
}

static pid_t g_init_pid; /* the process that called cuInit; inherited by a fork child */

EXPORT CUresult cuInit(unsigned flags)
{
    const char *f = getenv("FAKE_CUDA_FAIL_INIT");
    const char *fork_ok = getenv("FAKE_CUDA_FORK_OK");
    if (f && *f == '1')
        return 100; /* CUDA_ERROR_NO_DEVICE */
    if (g_init_pid != 0 && g_init_pid != getpid() && !(fork_ok && *fork_ok == '1'))
        return 3; /* CUDA_ERROR_NOT_INITIALIZED: initialized in the parent, then fork() */
    g_init_pid = getpid();
    return 0;
}
EXPORT CUresult cuDriverGetVersion(int *v)
{
    *v = 12040;
    return 0;
}
EXPORT CUresult cuDeviceGetCount(int *n)
{
    *n = NDEV;
    return 0;
}
EXPORT CUresult cuDeviceGet(int *d, int ordinal)
{
    if (ordinal < 0 || ordinal >= NDEV)
        return 101;
    *d = ordinal;
    return 0;
}
/* The PCI addresses as drivers spell them: upper case, device 1 with an 8-digit domain (as
 * NVML's). FAKE_CUDA_FAIL_BUSID=1 makes the call fail (CUDA_ERROR_INVALID_DEVICE). */
EXPORT CUresult cuDeviceGetPCIBusId(char *bus, int len, int d)
{
    static const char *const ids[NDEV] = {"0000:3B:00.0", "00000000:86:00.0"};
    const char *f = getenv("FAKE_CUDA_FAIL_BUSID");
    if ((f && *f == '1') || d < 0 || d >= NDEV)
        return 101;
    if (len <= (int)strlen(ids[d]))
        return 1; /* CUDA_ERROR_INVALID_VALUE */
    snprintf(bus, (size_t)len, "%s", ids[d]);
    return 0;
}
EXPORT CUresult cuDevicePrimaryCtxRetain(void **ctx, int d)
{
    BUMP(g_ctx[d].refs);
    BUMP(g_stats.retains);
    *ctx = &g_ctx[d];
    return 0;
}
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int d)
{
    __atomic_fetch_sub(&g_ctx[d].refs, 1, __ATOMIC_RELAXED);
    BUMP(g_stats.releases);
    return 0;
}
EXPORT CUresult cuCtxGetCurrent(void **ctx)
{
    *ctx = t_cur;
    return 0;
}
EXPORT CUresult cuCtxSetCurrent(void *ctx)
{
    t_cur = ctx;
    return 0;
}
EXPORT CUresult cuMemHostAlloc(void **pp, size_t n, unsigned flags)
{
    int rc = need_ctx();
    if (rc)
        return rc;
    if (flags != 1 || posix_memalign(pp, 4096, n) != 0) /* PORTABLE expected */
        return 1;
    track(*pp, n, 1, -1);
    return 0;
}
EXPORT CUresult cuMemFreeHost(void *p)
{
    untrack(p);
    free(p);
    return 0;
}
/* The memory policy (get_mempolicy's mode: 0 default, 1 preferred, -1 unknown) that each range
 * registered had when cuMemHostRegister pinned it, in order (under g_mu). */
static int g_reg_modes[64];
static int g_n_reg;

EXPORT CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags)
{
    int mode = -1, rc = need_ctx();
    if (rc)
        return rc;
    /* As the driver, which pins the pages: each one is faulted in now, from the node the
     * range's memory policy says, so a policy set after this call places nothing. */
    if (syscall(SYS_get_mempolicy, &mode, NULL, 0ul, p, 2ul /* MPOL_F_ADDR */) != 0)
        mode = -1;
    pthread_mutex_lock(&g_mu);
    if (g_n_reg < 64)
        g_reg_modes[g_n_reg] = mode;
    g_n_reg++;
    pthread_mutex_unlock(&g_mu);
    madvise(p, n, 23 /* MADV_POPULATE_WRITE, Linux 5.14; older kernels: no-op */);
    return 0;
}

/* How many ranges cuMemHostRegister pinned; the modes of the first cap in out. */
EXPORT int fake_cuda_register_modes(int *out, int cap)
{
    pthread_mutex_lock(&g_mu);
    int n = g_n_reg;
    for (int i = 0; i < cap && i < n && i < 64; i++)
        out[i] = g_reg_modes[i];
    pthread_mutex_unlock(&g_mu);
    return n;
}
EXPORT CUresult cuMemHostUnregister(void *p)
{
    return 0;
}
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *d, size_t n)
{
    void *p;
    int rc = need_ctx();
    if (rc)
        return rc;
    if (posix_memalign(&p, 256, n) != 0)
        return 2;
    track(p, n, 2, t_cur->dev);
    *d = (CUdeviceptr)(uintptr_t)p;
    return 0;
}
EXPORT CUresult cuMemFree_v2(CUdeviceptr d)
{
    untrack((void *)(uintptr_t)d);
    free((void *)(uintptr_t)d);
    return 0;
}
/* The legacy default stream of each context (handles 0, 1, 2): g_legacy, set up lazily. */

static struct fstream *stream_of(void *s)
{
    if ((uintptr_t)s <= 2) {
        if (t_cur == NULL)
            return NULL;
        __atomic_store_n(&g_legacy[t_cur->dev].ctx, t_cur, __ATOMIC_RELAXED);
        return &g_legacy[t_cur->dev];
    }
    return s;
}

/* e is an event cuEventCreate made and cuEventDestroy has not destroyed (compared, never read:
 * a destroyed event's memory is gone). Called with g_mu held. */
static int event_live(const void *e)
{
    for (int i = 0; e != NULL && i < 256; i++)
        if (g_events[i] == e)
            return 1;
    return 0;
}

#define CUDA_ERROR_INVALID_HANDLE 400

static void push(struct fstream *s, struct fop op)
{
    if (s->n_ops == s->cap_ops) {
        s->cap_ops = s->cap_ops ? 2 * s->cap_ops : 16;
        s->ops = realloc(s->ops, s->cap_ops * sizeof(*s->ops));
        if (s->ops == NULL)
            abort();
    }
    s->ops[s->n_ops++] = op;
}

/* Performs s's work below sequence number seq. Called with g_mu held. */
static void run(struct fstream *s, unsigned long long seq, int depth)
{
    while (s->done < s->n_ops && s->base + s->done < seq) {
        struct fop op = s->ops[s->done++];
        if (op.wait != NULL) {
            if (depth < 32 && op.wait != s)
                run(op.wait, op.wait_seq, depth + 1);
        } else {
            memcpy(op.dst, op.src, op.n);
            g_pending--;
        }
    }
    if (s->done == s->n_ops) {
        s->base += s->n_ops;
        s->n_ops = s->done = 0;
    }
}

static CUresult copy(void *dst, const void *src, size_t n, void *stream)
{
    const char *f = getenv("FAKE_CUDA_FAIL_COPY");
    struct fstream *s = stream_of(stream);
    if (f && *f == '1')
        return 700; /* CUDA_ERROR_ILLEGAL_ADDRESS */
    if (t_cur == NULL || s == NULL || s->ctx != t_cur) {
        BUMP(g_stats.bad_context);
        return 201;
    }
    /* Deferred: the bytes move when the stream's work is seen complete or synchronized. */
    pthread_mutex_lock(&g_mu);
    push(s, (struct fop){dst, src, n, NULL, 0});
    g_pending++;
    pthread_mutex_unlock(&g_mu);
    BUMP(g_stats.copies);
    return 0;
}
EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *s)
{
    return copy((void *)(uintptr_t)dst, src, n, s);
}
EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *s)
{
    return copy(dst, (const void *)(uintptr_t)src, n, s);
}
EXPORT CUresult cuStreamCreate(void **s, unsigned flags)
{
    int rc = need_ctx();
    if (rc)
        return rc;
    struct fstream *st = calloc(1, sizeof(*st));
    st->ctx = t_cur;
    st->flags = flags;
    if (flags == 1)
        BUMP(g_stats.stream_flags_seen);
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < 256; i++)
        if (g_streams[i] == NULL) {
            g_streams[i] = st;
            break;
        }
    pthread_mutex_unlock(&g_mu);
    *s = st;
    return 0;
}
EXPORT CUresult cuStreamDestroy_v2(void *s)
{
    struct fstream *st = s;
    pthread_mutex_lock(&g_mu);
    run(st, ~0ull, 0); /* queued work completes, as on the GPU */
    for (int i = 0; i < 256; i++)
        if (g_streams[i] == st)
            g_streams[i] = NULL;
    pthread_mutex_unlock(&g_mu);
    free(st->ops);
    free(st);
    return 0;
}
EXPORT CUresult cuStreamSynchronize(void *s)
{
    struct fstream *st = stream_of(s);
    if (st == NULL)
        return 201;
    BUMP(g_stats.stream_syncs);
    pthread_mutex_lock(&g_mu);
    run(st, ~0ull, 0);
    pthread_mutex_unlock(&g_mu);
    return 0;
}
EXPORT CUresult cuStreamWaitEvent(void *s, void *e, unsigned flags)
{
    struct fstream *st = stream_of(s);
    struct fevent *ev = e;
    if (st == NULL || st->ctx != t_cur) {
        BUMP(g_stats.bad_context);
        return 201;
    }
    if (flags != 0)
        return 1; /* CUDA_ERROR_INVALID_VALUE: CU_EVENT_WAIT_EXTERNAL is for stream capture */
    pthread_mutex_lock(&g_mu);
    if (!event_live(ev)) {
        pthread_mutex_unlock(&g_mu);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    /* ev->ctx may be any context: the wait is cross-context (cross-device) on a GPU. */
    BUMP(g_stats.wait_events);
    if (ev->s != NULL)
        push(st, (struct fop){NULL, NULL, 0, ev->s, ev->seq});
    pthread_mutex_unlock(&g_mu);
    return 0;
}
EXPORT CUresult cuStreamGetCtx(void *s, void **ctx)
{
    *ctx = ((struct fstream *)s)->ctx;
    return 0;
}
EXPORT CUresult cuEventCreate(void **e, unsigned flags)
{
    int rc = need_ctx();
    if (rc)
        return rc;
    if (flags != 2) /* DISABLE_TIMING expected */
        return 1;
    struct fevent *ev = calloc(1, sizeof(*ev));
    int i;
    if (ev == NULL)
        return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    ev->ctx = t_cur;
    pthread_mutex_lock(&g_mu);
    for (i = 0; i < 256 && g_events[i] != NULL; i++)
        ;
    if (i < 256)
        g_events[i] = ev;
    pthread_mutex_unlock(&g_mu);
    if (i == 256) {
        free(ev);
        return 2;
    }
    *e = ev;
    return 0;
}
EXPORT CUresult cuEventDestroy_v2(void *e)
{
    pthread_mutex_lock(&g_mu);
    int i;
    for (i = 0; i < 256 && (e == NULL || g_events[i] != e); i++)
        ;
    if (i < 256) {
        g_events[i] = NULL;
        ((struct fevent *)e)->next_dead = g_dead;
        g_dead = e;
    }
    pthread_mutex_unlock(&g_mu);
    return i < 256 ? 0 : CUDA_ERROR_INVALID_HANDLE;
}
EXPORT CUresult cuEventRecord(void *e, void *s)
{
    const char *f = getenv("FAKE_CUDA_FAIL_RECORD");
    struct fevent *ev = e;
    if (f && *f == '1')
        return 700; /* CUDA_ERROR_ILLEGAL_ADDRESS: the work queued before stays queued */
    /* Streams 0, 1 (legacy) and 2 (per thread) mean the current context's. */
    struct fstream *st = stream_of(s);
    struct fctx *sc = st != NULL ? st->ctx : NULL;
    pthread_mutex_lock(&g_mu);
    if (!event_live(ev)) {
        pthread_mutex_unlock(&g_mu);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (sc == NULL || ev->ctx != sc || sc != t_cur) {
        pthread_mutex_unlock(&g_mu);
        BUMP(g_stats.bad_context);
        return 201;
    }
    ev->s = st;
    ev->seq = st->base + st->n_ops;
    ev->queried = 0;
    pthread_mutex_unlock(&g_mu);
    return 0;
}
/* CUDA_ERROR_NOT_READY on the first query after a record; then the work runs. */
EXPORT CUresult cuEventQuery(void *e)
{
    struct fevent *ev = e;
    CUresult r = 0;
    pthread_mutex_lock(&g_mu);
    if (!event_live(ev))
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (ev->s != NULL && !ev->queried) {
        ev->queried = 1;
        r = 600;
    } else if (ev->s != NULL) {
        run(ev->s, ev->seq, 0);
    }
    pthread_mutex_unlock(&g_mu);
    return r;
}
EXPORT CUresult cuEventSynchronize(void *e)
{
    struct fevent *ev = e;
    pthread_mutex_lock(&g_mu);
    if (!event_live(ev)) {
        pthread_mutex_unlock(&g_mu);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (ev->s != NULL)
        run(ev->s, ev->seq, 0);
    ev->queried = 1;
    pthread_mutex_unlock(&g_mu);
    return 0;
}
EXPORT CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr ptr)
{
    pthread_mutex_lock(&g_mu);
    struct alloc *a = find((const char *)(uintptr_t)ptr);
    struct alloc copy_of = a ? *a : (struct alloc){0};
    pthread_mutex_unlock(&g_mu);
    if (a == NULL)
        return 1; /* CUDA_ERROR_INVALID_VALUE */
    if (attr == 2)
        *(unsigned *)data = (unsigned)copy_of.type;
    else if (attr == 9)
        *(int *)data = copy_of.dev;
    else
        return 1;
    return 0;
}
EXPORT CUresult cuGetErrorString(CUresult r, const char **s)
{
    *s = r == 700   ? "an illegal memory access was encountered"
         : r == 100 ? "no CUDA-capable device is detected"
         : r == 201 ? "invalid device context"
         : r == 400 ? "invalid resource handle"
         : r == 1   ? "invalid argument"
                    : "unknown error";
    return 0;
}
EXPORT CUresult cuGetErrorName(CUresult r, const char **s)
{
    *s = r == 700   ? "CUDA_ERROR_ILLEGAL_ADDRESS"
         : r == 100 ? "CUDA_ERROR_NO_DEVICE"
         : r == 201 ? "CUDA_ERROR_INVALID_CONTEXT"
         : r == 400 ? "CUDA_ERROR_INVALID_HANDLE"
         : r == 1   ? "CUDA_ERROR_INVALID_VALUE"
                    : "CUDA_ERROR_UNKNOWN";
    return 0;
}

/* ---- libcufile.so.0 (the same file built as the other library) ---------------------------- */

/* The built copy that is libcufile has its own t_cur: ask the libcuda copy for the thread's
 * context, as the real cuFile asks the real driver. */
static void *cufile_ctx(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CUresult (*get)(void **) = NULL;
    void *ctx = NULL;
    if (lib != NULL) {
        *(void **)&get = dlsym(lib, "cuCtxGetCurrent");
        if (get != NULL)
            get(&ctx);
        dlclose(lib);
    }
    return ctx;
}

/* The device of the thread's current context (-1: none), and of the memory at p (-1: not
 * device memory CUDA knows), asked of the libcuda copy. */
static int cufile_ctx_dev(void)
{
    const struct fctx *c = cufile_ctx();
    return c != NULL ? c->dev : -1;
}
static int cufile_mem_dev(const void *p)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CUresult (*attr)(void *, int, CUdeviceptr) = NULL;
    int dev = -1;
    if (lib != NULL) {
        *(void **)&attr = dlsym(lib, "cuPointerGetAttribute");
        if (attr == NULL || attr(&dev, 9, (CUdeviceptr)(uintptr_t)p) != 0)
            dev = -1;
        dlclose(lib);
    }
    return dev;
}
static int g_cufile_open_dev = -1; /* the device of the context cuFileDriverOpen ran in */
static int g_cufile_reg_dev = -1;  /* ... and the last cuFileHandleRegister */
EXPORT int fake_cufile_open_dev(void)
{
    return g_cufile_open_dev;
}
EXPORT int fake_cufile_register_dev(void)
{
    return g_cufile_reg_dev;
}
typedef struct {
    int err;
    int cu_err;
} CUfileError_t;
typedef struct {
    int type;
    union {
        int fd;
        void *handle;
    } handle;
    const void *fs_ops;
} CUfileDescr_t;

static int g_cufile_open;
/* CUFileBoolConfigParameter_t values as set (the fake's defaults: allow_compat_mode on, the
 * rest off), and allow_compat_mode as it was when the driver opened (-1: not open yet). */
static _Bool g_bool_param[12] = {0, 1};
static int g_compat_at_open = -1;
static char g_cufile_logfile[256]; /* CUFILE_PARAM_ENV_LOGFILE_PATH as last set */
EXPORT CUfileError_t cuFileDriverOpen(void)
{
    const char *f = getenv("FAKE_CUFILE_FAIL_OPEN");
    if (f && *f == '1')
        return (CUfileError_t){5007, 0};   /* PLATFORM_NOT_SUPPORTED */
    if (cufile_ctx() == NULL)              /* the driver sets up in the current context */
        return (CUfileError_t){5011, 201}; /* CUDA_DRIVER_ERROR, CUDA_ERROR_INVALID_CONTEXT */
    g_cufile_open++;
    g_cufile_open_dev = cufile_ctx_dev();
    g_compat_at_open = g_bool_param[1];
    return (CUfileError_t){0, 0};
}
/* Successful cuFileDriverOpen calls. */
EXPORT int fake_cufile_opens(void)
{
    return g_cufile_open;
}
/* cuFileDriverClose_v2 (reference counted, cufile.h's cuFileDriverClose) and the old
 * cuFileDriverClose, both exported as by the real library: counted together. */
static int g_cufile_closes;
EXPORT CUfileError_t cuFileDriverClose_v2(void)
{
    if (g_cufile_open - g_cufile_closes <= 0)
        return (CUfileError_t){5001, 0}; /* DRIVER_NOT_INITIALIZED */
    g_cufile_closes++;
    return (CUfileError_t){0, 0};
}
EXPORT CUfileError_t cuFileDriverClose(void)
{
    return cuFileDriverClose_v2();
}
EXPORT int fake_cufile_closes(void)
{
    return g_cufile_closes;
}
EXPORT int fake_cufile_allow_compat_at_open(void)
{
    return g_compat_at_open;
}
#ifndef FAKE_CUFILE_PRE_1_14
/* cuFile 1.14+: bool parameters, only before the driver is open (as the library's properties
 * are read at open). */
EXPORT CUfileError_t cuFileSetParameterBool(int param, _Bool value)
{
    if (g_cufile_open)
        return (CUfileError_t){5026, 0}; /* DRIVER_ALREADY_OPEN */
    if (param < 0 || param > 11)
        return (CUfileError_t){5022, 0};
    g_bool_param[param] = value;
    return (CUfileError_t){0, 0};
}
/* cuFile 1.14+: string parameters, only before the driver is open (as the library's
 * properties are read at open). 1 = CUFILE_PARAM_ENV_LOGFILE_PATH. */
EXPORT CUfileError_t cuFileSetParameterString(int param, const char *value)
{
    if (g_cufile_open)
        return (CUfileError_t){5026, 0}; /* DRIVER_ALREADY_OPEN */
    if (param < 0 || param > 2 || value == NULL)
        return (CUfileError_t){5022, 0}; /* INVALID_VALUE */
    if (param == 1)
        snprintf(g_cufile_logfile, sizeof(g_cufile_logfile), "%s", value);
    return (CUfileError_t){0, 0};
}
#endif
EXPORT const char *fake_cufile_logfile(void)
{
    return g_cufile_logfile;
}
/* Driver modes (FAKE_CUFILE_MODE, read by each call): unset, nvidia-fs capable (its
 * dstatusflags say NVMe and NFS; whether nvidia-fs is loaded is the library's own check);
 * "p2pdma", cuFile 1.15 over the kernel's PCI P2PDMA (the P2P feature flag, use_pcip2pdma
 * on, no nvidia-fs version); "compat", force_compat_mode on. */
typedef struct {
    struct {
        unsigned int major_version, minor_version;
        size_t poll_thresh_size, max_direct_io_size;
        unsigned int dstatusflags, dcontrolflags;
    } nvfs;
    unsigned int fflags, max_device_cache_size, per_buffer_cache_size, max_device_pinned_mem_size,
        max_batch_io_size, max_batch_io_timeout_msecs;
} CUfileDrvProps_t;
static const char *fake_mode(void)
{
    const char *m = getenv("FAKE_CUFILE_MODE");
    return m != NULL ? m : "";
}
EXPORT CUfileError_t cuFileGetVersion(int *version)
{
    *version = 1150; /* 1.15 */
    return (CUfileError_t){0, 0};
}
EXPORT CUfileError_t cuFileDriverGetProperties(CUfileDrvProps_t *p)
{
    if (!g_cufile_open)
        return (CUfileError_t){5001, 0}; /* DRIVER_NOT_INITIALIZED */
    memset(p, 0, sizeof(*p));
    p->nvfs.max_direct_io_size = 16384;
    p->nvfs.dcontrolflags = 1u << 1; /* ALLOW_COMPAT_MODE */
    if (strcmp(fake_mode(), "p2pdma") == 0) {
        p->fflags = 1u << 4; /* CU_FILE_P2P_SUPPORTED */
    } else if (strcmp(fake_mode(), "compat") != 0) {
        p->nvfs.major_version = 2;
        p->nvfs.minor_version = 26;
        p->nvfs.dstatusflags = 1u << 4 | 1u << 2; /* NVME, NFS */
    }
    return (CUfileError_t){0, 0};
}
#ifndef FAKE_CUFILE_PRE_1_14
/* CUFileBoolConfigParameter_t: 1 PROPERTIES_ALLOW_COMPAT_MODE, 2 FORCE_COMPAT_MODE (on in
 * mode "compat"), 7 USE_PCIP2PDMA (on in mode "p2pdma"). */
EXPORT CUfileError_t cuFileGetParameterBool(int param, _Bool *value)
{
    if (param < 0 || param > 11 || value == NULL)
        return (CUfileError_t){5022, 0};
    *value = (param == 7 && strcmp(fake_mode(), "p2pdma") == 0) ||
             (param == 2 && strcmp(fake_mode(), "compat") == 0) || g_bool_param[param];
    return (CUfileError_t){0, 0};
}
#endif
/* 1 when the fake cannot reach the file of fd directly: FAKE_CUFILE_NOT_DIRECT set (=1 or
 * =io), read at each call. Not the file system's type: the tests' scratch folder may be on
 * tmpfs, and what real cuFile reaches is the library's model to get right, not the fake's. */
static int cufile_not_direct(int fd)
{
    const char *f = getenv("FAKE_CUFILE_NOT_DIRECT");
    (void)fd;
    return f != NULL && *f != 0;
}
/* I/Os served in compatibility mode (allow_compat_mode on, a file not reached directly). */
static int g_cufile_compat_ios;
EXPORT int fake_cufile_compat_ios(void)
{
    return g_cufile_compat_ios;
}
/* The caller's descriptors registered and not deregistered, by handle (own fd + 1): cuFile
 * refuses a descriptor registered twice. */
static int g_reg_fd[1024];
static pthread_mutex_t g_reg_mu = PTHREAD_MUTEX_INITIALIZER;
EXPORT CUfileError_t cuFileHandleRegister(void **fh, CUfileDescr_t *d)
{
    if (d->type != 1 || d->fs_ops != NULL || cufile_ctx() == NULL)
        return (CUfileError_t){5022, 0}; /* INVALID_VALUE */
    pthread_mutex_lock(&g_reg_mu);
    for (int i = 0; i < 1024; i++)
        if (g_reg_fd[i] == d->handle.fd + 1) {
            pthread_mutex_unlock(&g_reg_mu);
            return (CUfileError_t){5028, 0}; /* HANDLE_ALREADY_REGISTERED */
        }
    pthread_mutex_unlock(&g_reg_mu);
    const char *nd = getenv("FAKE_CUFILE_NOT_DIRECT");
    if (!g_bool_param[1] && cufile_not_direct(d->handle.fd) && !(nd && strcmp(nd, "io") == 0))
        return (CUfileError_t){5008, 0}; /* IO_NOT_SUPPORTED: no compatibility mode */
    /* The real cuFile handles unaligned I/O on an O_DIRECT fd; the fake reads through its own
     * buffered descriptor of the same file. */
    char p[64];
    snprintf(p, sizeof(p), "/proc/self/fd/%d", d->handle.fd);
    int fd = open(p, fcntl(d->handle.fd, F_GETFL) & O_ACCMODE);
    if (fd < 0)
        return (CUfileError_t){5030, 0}; /* INTERNAL_ERROR */
    if (fd >= 1024) {
        close(fd);
        return (CUfileError_t){5030, 0};
    }
    pthread_mutex_lock(&g_reg_mu);
    g_reg_fd[fd] = d->handle.fd + 1;
    pthread_mutex_unlock(&g_reg_mu);
    *fh = (void *)(intptr_t)(fd + 1);
    __atomic_store_n(&g_cufile_reg_dev, cufile_ctx_dev(), __ATOMIC_RELAXED);
    return (CUfileError_t){0, 0};
}
EXPORT void cuFileHandleDeregister(void *fh)
{
    const int fd = (int)(intptr_t)fh - 1;
    pthread_mutex_lock(&g_reg_mu);
    if (fd >= 0 && fd < 1024)
        g_reg_fd[fd] = 0;
    pthread_mutex_unlock(&g_reg_mu);
    close(fd);
}
EXPORT CUfileError_t cuFileBufRegister(const void *p, size_t n, int flags)
{
    return (CUfileError_t){0, 0};
}
EXPORT CUfileError_t cuFileBufDeregister(const void *p)
{
    return (CUfileError_t){0, 0};
}
/* cuFileRead/cuFileWrite calls made while stream work that touches their device memory was
 * still queued (fake_cuda_pending_on): the caller's kernels not waited for. The I/O goes on
 * regardless, as on a GPU, so the bytes come out wrong as they would there. */
static int g_cufile_unordered;
EXPORT int fake_cufile_unordered(void)
{
    return g_cufile_unordered;
}
static void note_unordered(const void *p, size_t n, int for_write)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    int (*pending_on)(const void *, size_t, int) = NULL;
    if (lib != NULL) {
        *(void **)&pending_on = dlsym(lib, "fake_cuda_pending_on");
        if (pending_on != NULL && pending_on(p, n, for_write) > 0)
            __atomic_fetch_add(&g_cufile_unordered, 1, __ATOMIC_RELAXED);
        dlclose(lib);
    }
}
/* The device memory of a cuFileRead/cuFileWrite is the current context's device's
 * (CU_FILE_CUDA_CONTEXT_MISMATCH otherwise, as cuFile maps the buffer in that context). */
static int cufile_ctx_mismatch(const void *p)
{
    const int cd = cufile_ctx_dev(), md = cufile_mem_dev(p);
    return cd < 0 || (md >= 0 && md != cd);
}
static int g_cufile_reads;
EXPORT int fake_cufile_reads(void)
{
    return g_cufile_reads;
}
/* cuFileRead/cuFileWrite calls made while a device copy was queued and not yet performed: on
 * a GPU that copy runs during the I/O. A CRC pass that copies back only after the I/O, or
 * synchronizes after each copy, never overlaps. */
static int g_cufile_overlapped;
EXPORT int fake_cufile_overlapped(void)
{
    return g_cufile_overlapped;
}
static void note_overlap(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    int (*pending)(void) = NULL;
    if (lib != NULL) {
        *(void **)&pending = dlsym(lib, "fake_cuda_pending_copies");
        if (pending != NULL && pending() > 0)
            BUMP(g_cufile_overlapped);
        dlclose(lib);
    }
}
/* A file not reached directly: refused with compatibility mode off (registered with
 * FAKE_CUFILE_NOT_DIRECT=io: -CU_FILE_IO_NOT_SUPPORTED), else counted as compatibility I/O. */
static ssize_t cufile_compat_io(int fd)
{
    if (!cufile_not_direct(fd))
        return 0;
    if (!g_bool_param[1])
        return -5008;
    BUMP(g_cufile_compat_ios);
    return 0;
}
/* Moves at most 1 MiB per call, to exercise the callers' loops over short transfers.
 * FAKE_CUFILE_FAIL_IO=1 makes it fail as a broken GDS path does (CU_FILE_IO_ERROR). */
EXPORT ssize_t cuFileRead(void *fh, void *base, size_t n, off_t off, off_t boff)
{
    const char *f = getenv("FAKE_CUFILE_FAIL_IO");
    if (cufile_ctx_mismatch((char *)base + boff))
        return -5015; /* CONTEXT_MISMATCH */
    const ssize_t compat = cufile_compat_io((int)(intptr_t)fh - 1);
    if (compat < 0)
        return compat;
    BUMP(g_cufile_reads);
    note_overlap();
    note_unordered((char *)base + boff, n > (1u << 20) ? 1u << 20 : n, 1);
    if (f && *f == '1')
        return -5044;
    return pread((int)(intptr_t)fh - 1, (char *)base + boff, n > (1u << 20) ? 1u << 20 : n, off);
}
/* A write that does not start and end on a 4 KiB boundary is, on real GDS, a read-modify-write
 * of the partial blocks through the registered descriptor: the fake reads those blocks first,
 * so a write-only descriptor fails as it does there (-1, errno EBADF). */
static int cufile_rmw_read(int fd, off_t off, size_t n)
{
    char blk[4096];
    off_t head = off & ~(off_t)4095, tail = (off + (off_t)n) & ~(off_t)4095;
    if (head != off && pread(fd, blk, sizeof(blk), head) < 0)
        return -1;
    if (tail != off + (off_t)n && tail != head && pread(fd, blk, sizeof(blk), tail) < 0)
        return -1;
    return 0;
}
static int g_cufile_rmw;
/* cuFileWrite calls that needed a read-modify-write. */
EXPORT int fake_cufile_rmw_writes(void)
{
    return g_cufile_rmw;
}
EXPORT ssize_t cuFileWrite(void *fh, const void *base, size_t n, off_t off, off_t boff)
{
    const char *f = getenv("FAKE_CUFILE_FAIL_IO");
    int fd = (int)(intptr_t)fh - 1;
    if (cufile_ctx_mismatch((const char *)base + boff))
        return -5015;
    const ssize_t compat = cufile_compat_io(fd);
    if (compat < 0)
        return compat;
    note_overlap();
    note_unordered((const char *)base + boff, n > (1u << 20) ? 1u << 20 : n, 0);
    if (f && *f == '1')
        return -5044;
    n = n > (1u << 20) ? 1u << 20 : n;
    if ((off % 4096) != 0 || ((off + (off_t)n) % 4096) != 0) {
        BUMP(g_cufile_rmw);
        if (cufile_rmw_read(fd, off, n) < 0)
            return -1;
    }
    return pwrite(fd, (const char *)base + boff, n, off);
}
