/* device_host.c - the backends without a GPU.
 *
 * host: host memory only; device.c refuses every ordinal before a call gets here, so the
 * stream and event functions are never reached with a device and only need to be safe.
 *
 * emulated: pretend GPUs (one, or S3D_DEVICE_EMULATE_COUNT) as strict as hardware where it
 * matters to the data path:
 *   - device memory is a memfd mapped twice: the address handed out (the CUdeviceptr) is
 *     PROT_NONE, so a host access to device memory crashes like it would on a GPU; copies
 *     use the second, read-write mapping. A copy to or from an address that is not device
 *     memory fails (CUDA_ERROR_INVALID_VALUE) instead of touching host memory.
 *   - work queued on a stream (copies, test "kernels", waits for other streams) is deferred
 *     and performed as late as a real GPU could perform it: when a later event is seen
 *     complete, or on a synchronize. The first query of an event after its record answers
 *     "pending". Streams are unordered with respect to each other: only an explicit wait
 *     (s3d_device_wait_external, which is cuStreamWaitEvent on a GPU) orders them.
 *   - a caller's CUstream handle (what PyTorch passes) names an emulated stream: the handle
 *     of a stream made here (s3d_device_emu_stream_handle), or 0/2 for the legacy default
 *     stream of the device. Tests queue "kernels" on it (s3d_device_emu_kernel) that write
 *     device memory later, so a load or save that does not wait for the caller's stream
 *     gives wrong bytes.
 *   - a caller's CUevent handle (what torch.cuda.Event().cuda_event gives) names an event the
 *     test recorded on such a stream (s3d_device_emu_event_record): a wait for it
 *     (s3d_device_wait_event) orders the work queued on that stream before the record, and
 *     nothing queued after; a handle that names no such event fails as the driver would.
 * The state is process-wide, like a driver's: every s3d_device of the emulated backend sees
 * the same memory and streams. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/env.h"
#include "common/error.h"
#include "device/device_impl.h"

/* ---- host memory, shared by both --------------------------------------------------------- */

static int host_alloc(struct s3d_device *dev, size_t size, void **out)
{
    /* mmap: page-aligned, and large blocks go straight back to the kernel on free. */
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return s3d_fail(S3D_ENOMEM, "host_alloc: mmap of %zu bytes: %s", size, strerror(errno));
    *out = p;
    return 0;
}

static void host_free(struct s3d_device *dev, void *p, size_t size)
{
    munmap(p, size);
}

static int host_register(struct s3d_device *dev, int ordinal, void *p, size_t size)
{
    return 0;
}

static void host_unregister(struct s3d_device *dev, int ordinal, void *p)
{
}

static int host_pointer_info(struct s3d_device *dev, const void *ptr, int *is_device, int *ordinal)
{
    *is_device = 0;
    *ordinal = -1;
    return 0;
}

/* ---- host backend: no ordinal ever reaches these --------------------------------------- */

static int host_no_device(void)
{
    return s3d_fail(S3D_ENODEVICE, "no GPU available");
}
static int host_make_current(struct s3d_device *dev, int ordinal)
{
    return host_no_device();
}
static int host_mem_alloc(struct s3d_device *dev, int ordinal, size_t size, uint64_t *out)
{
    return host_no_device();
}
static void host_mem_free(struct s3d_device *dev, int ordinal, uint64_t dptr)
{
}
static int host_stream_new(struct s3d_device *dev, struct s3d_stream *s)
{
    return host_no_device();
}
static void host_stream_free(struct s3d_device *dev, struct s3d_stream *s)
{
}
static int host_copy_htod(struct s3d_device *dev, struct s3d_stream *s, uint64_t dst,
                          const void *src, size_t n)
{
    return host_no_device();
}
static int host_copy_dtoh(struct s3d_device *dev, struct s3d_stream *s, void *dst, uint64_t src,
                          size_t n)
{
    return host_no_device();
}
static int host_stream_sync(struct s3d_device *dev, struct s3d_stream *s)
{
    return 0;
}
static int host_event_new(struct s3d_device *dev, struct s3d_event *e)
{
    return host_no_device();
}
static void host_event_free(struct s3d_device *dev, struct s3d_event *e)
{
}
static int host_event_record(struct s3d_device *dev, struct s3d_event *e, struct s3d_stream *s)
{
    return 0;
}
static int host_event_query(struct s3d_device *dev, struct s3d_event *e)
{
    return 1;
}
static int host_event_sync(struct s3d_device *dev, struct s3d_event *e)
{
    return 0;
}
static int host_wait_external(struct s3d_device *dev, struct s3d_stream *s, uint64_t cs)
{
    return 0;
}
static int host_wait_event(struct s3d_device *dev, struct s3d_stream *s, uint64_t ev)
{
    return 0;
}

const struct s3d_device_ops s3d_host_ops = {
    .pointer_info = host_pointer_info,
    .make_current = host_make_current,
    .host_alloc = host_alloc,
    .host_free = host_free,
    .host_register = host_register,
    .host_unregister = host_unregister,
    .mem_alloc = host_mem_alloc,
    .mem_free = host_mem_free,
    .stream_new = host_stream_new,
    .stream_free = host_stream_free,
    .copy_htod = host_copy_htod,
    .copy_dtoh = host_copy_dtoh,
    .stream_sync = host_stream_sync,
    .event_new = host_event_new,
    .event_free = host_event_free,
    .event_record = host_event_record,
    .event_query = host_event_query,
    .event_sync = host_event_sync,
    .wait_external = host_wait_external,
    .wait_event = host_wait_event,
};

/* ---- emulated backend --------------------------------------------------------------- */

/* One device allocation: dev is the PROT_NONE address handed out, view the read-write
 * mapping of the same pages. */
struct emu_alloc {
    uintptr_t dev;
    unsigned char *view;
    size_t size; /* mapped (page multiple) */
    int ordinal;
};

/* A caller's CUevent: the stream it was last recorded on and the work up to seq. */
struct emu_xevent {
    uint64_t handle;
    uint64_t stream_id; /* 0: never recorded */
    uint64_t seq;
};

/* Process-wide. Locked part: everything, and every stream's op queue, under mu. mu is a leaf
 * lock (nothing else is taken inside). */
struct s3d_emu {
    pthread_mutex_t mu;
    struct s3d_stream **streams;
    size_t n_streams, cap_streams;
    uint64_t next_id;
    struct emu_alloc *allocs;
    size_t n_allocs, cap_allocs;
    struct s3d_stream *legacy[S3D_MAX_DEVICES]; /* legacy default streams, made on first use */
    int ctx_used[S3D_MAX_DEVICES];              /* a "context" was needed on this device */
    size_t pinned_bytes;                        /* host_alloc'ed and not freed */
    long registered;                            /* host_register'ed ranges not unregistered */
    long stale_copies;          /* copies run after their host memory was released */
    struct emu_xevent *xevents; /* the callers' events (s3d_device_emu_event_record) */
    size_t n_xevents, cap_xevents;
};

static struct s3d_emu g_emu = {.mu = PTHREAD_MUTEX_INITIALIZER, .next_id = 16};

int s3d_emu_open(struct s3d_device *dev)
{
    int64_t count = 1;
    if (s3d_env_int("S3D_DEVICE_EMULATE_COUNT", 1, S3D_MAX_DEVICES, &count) < 0)
        return s3d_fail(S3D_EINVAL, "S3D_DEVICE_EMULATE_COUNT=%s: expected 1 to %d",
                        s3d_env("S3D_DEVICE_EMULATE_COUNT"), S3D_MAX_DEVICES);
    dev->emu = &g_emu;
    dev->count = (int)count;
    return 0;
}

void s3d_emu_close(struct s3d_device *dev)
{
    dev->emu = NULL; /* process-wide state stays */
}

static struct s3d_stream *emu_find(struct s3d_emu *emu, uint64_t id)
{
    for (size_t i = 0; i < emu->n_streams; i++)
        if (emu->streams[i]->id == id)
            return emu->streams[i];
    return NULL;
}

static int emu_register_stream(struct s3d_emu *emu, struct s3d_stream *s)
{
    if (emu->n_streams == emu->cap_streams) {
        size_t cap = emu->cap_streams ? 2 * emu->cap_streams : 8;
        struct s3d_stream **v = s3d_reallocarray(emu->streams, cap, sizeof(*v));
        if (v == NULL)
            return s3d_fail(S3D_ENOMEM, "stream: out of memory");
        emu->streams = v;
        emu->cap_streams = cap;
    }
    s->id = emu->next_id++;
    emu->streams[emu->n_streams++] = s;
    return 0;
}

/* The read-write view of [addr, addr + n) when it lies inside one device allocation, else
 * NULL. Called with mu held. */
static unsigned char *emu_view(struct s3d_emu *emu, uintptr_t addr, size_t n)
{
    /* An allocation that holds addr itself first: the end of one allocation may be the start
     * of the next (adjacent mappings), and the end pointer (valid only for n == 0) must not
     * shadow the allocation that starts there. */
    for (size_t i = 0; i < emu->n_allocs; i++) {
        const struct emu_alloc *a = &emu->allocs[i];
        if (addr >= a->dev && addr - a->dev < a->size && n <= a->size - (addr - a->dev))
            return a->view + (addr - a->dev);
    }
    for (size_t i = 0; n == 0 && i < emu->n_allocs; i++) {
        const struct emu_alloc *a = &emu->allocs[i];
        if (addr >= a->dev && addr - a->dev == a->size)
            return a->view + a->size;
    }
    return NULL;
}

/* Performs the queued work with sequence numbers below seq. Called with mu held. depth
 * bounds the chain of waits (a cycle would hang a GPU; here it stops). */
static void emu_flush_depth(struct s3d_emu *emu, struct s3d_stream *s, uint64_t seq, int depth)
{
    while (s->done < s->n_ops && s->seq_base + s->done < seq) {
        const struct s3d_emu_op op = s->ops[s->done++];
        if (op.kind == S3D_EMU_COPY) {
            memcpy(op.dst, op.src, op.n);
            if (op.stale)
                emu->stale_copies++;
        } else if (op.kind == S3D_EMU_FILL) {
            memset(op.dst, op.byte, op.n);
        } else if (depth < 64) {
            struct s3d_stream *other = emu_find(emu, op.wait_id);
            if (other != NULL && other != s)
                emu_flush_depth(emu, other, op.wait_seq, depth + 1);
        }
    }
    if (s->done == s->n_ops) {
        s->seq_base += s->n_ops;
        s->n_ops = s->done = 0;
    }
}

static void emu_flush(struct s3d_emu *emu, struct s3d_stream *s, uint64_t seq)
{
    emu_flush_depth(emu, s, seq, 0);
}

static int emu_make_current(struct s3d_device *dev, int ordinal)
{
    pthread_mutex_lock(&dev->emu->mu);
    dev->emu->ctx_used[ordinal] = 1;
    pthread_mutex_unlock(&dev->emu->mu);
    return 0;
}

static int emu_pointer_info(struct s3d_device *dev, const void *ptr, int *is_device, int *ordinal)
{
    struct s3d_emu *emu = dev->emu;
    *is_device = 0;
    *ordinal = -1;
    pthread_mutex_lock(&emu->mu);
    for (size_t i = 0; i < emu->n_allocs; i++) {
        const struct emu_alloc *a = &emu->allocs[i];
        if ((uintptr_t)ptr >= a->dev && (uintptr_t)ptr - a->dev < a->size) {
            *is_device = 1;
            *ordinal = a->ordinal;
        }
    }
    pthread_mutex_unlock(&emu->mu);
    return 0;
}

static int emu_host_alloc(struct s3d_device *dev, size_t size, void **out)
{
    int rc = host_alloc(dev, size, out);
    if (rc == 0) {
        pthread_mutex_lock(&dev->emu->mu);
        dev->emu->pinned_bytes += size;
        pthread_mutex_unlock(&dev->emu->mu);
    }
    return rc;
}

/* Pinning needs a context: the one of ordinal, else device 0's (as on the cuda backend when
 * nothing is current). */
static int emu_host_register(struct s3d_device *dev, int ordinal, void *p, size_t size)
{
    pthread_mutex_lock(&dev->emu->mu);
    dev->emu->ctx_used[ordinal < 0 ? 0 : ordinal] = 1;
    dev->emu->registered++;
    pthread_mutex_unlock(&dev->emu->mu);
    return 0;
}

static void emu_host_unregister(struct s3d_device *dev, int ordinal, void *p)
{
    pthread_mutex_lock(&dev->emu->mu);
    dev->emu->registered--;
    pthread_mutex_unlock(&dev->emu->mu);
}

static void emu_host_free(struct s3d_device *dev, void *p, size_t size)
{
    pthread_mutex_lock(&dev->emu->mu);
    dev->emu->pinned_bytes -= size;
    pthread_mutex_unlock(&dev->emu->mu);
    host_free(dev, p, size);
}

static int emu_mem_alloc(struct s3d_device *dev, int ordinal, size_t size, uint64_t *out)
{
    struct s3d_emu *emu = dev->emu;
    size_t len = (size + 4095) & ~(size_t)4095;
    void *d = MAP_FAILED, *v = MAP_FAILED;
    int fd, rc = 0;

    fd = memfd_create("s3d-emulated-device", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
        rc = s3d_fail(S3D_ENOMEM, "mem_alloc: %zu bytes: %s", size, strerror(errno));
        goto out;
    }
    d = mmap(NULL, len, PROT_NONE, MAP_SHARED, fd, 0);
    v = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (d == MAP_FAILED || v == MAP_FAILED) {
        rc = s3d_fail(S3D_ENOMEM, "mem_alloc: %zu bytes: %s", size, strerror(errno));
        goto out;
    }
    pthread_mutex_lock(&emu->mu);
    if (emu->n_allocs == emu->cap_allocs) {
        size_t cap = emu->cap_allocs ? 2 * emu->cap_allocs : 16;
        struct emu_alloc *a = s3d_reallocarray(emu->allocs, cap, sizeof(*a));
        if (a == NULL) {
            pthread_mutex_unlock(&emu->mu);
            rc = s3d_fail(S3D_ENOMEM, "mem_alloc: out of memory");
            goto out;
        }
        emu->allocs = a;
        emu->cap_allocs = cap;
    }
    emu->allocs[emu->n_allocs++] = (struct emu_alloc){(uintptr_t)d, v, len, ordinal};
    emu->ctx_used[ordinal] = 1;
    pthread_mutex_unlock(&emu->mu);
    *out = (uint64_t)(uintptr_t)d;
out:
    if (rc < 0) {
        if (d != MAP_FAILED)
            munmap(d, len);
        if (v != MAP_FAILED)
            munmap(v, len);
    }
    if (fd >= 0)
        close(fd);
    return rc;
}

static void emu_mem_free(struct s3d_device *dev, int ordinal, uint64_t dptr)
{
    struct s3d_emu *emu = dev->emu;
    pthread_mutex_lock(&emu->mu);
    for (size_t i = 0; i < emu->n_allocs; i++) {
        struct emu_alloc a = emu->allocs[i];
        if (a.dev == (uintptr_t)dptr) {
            emu->allocs[i] = emu->allocs[--emu->n_allocs];
            munmap((void *)a.dev, a.size);
            munmap(a.view, a.size);
            break;
        }
    }
    pthread_mutex_unlock(&emu->mu);
}

static int emu_stream_new(struct s3d_device *dev, struct s3d_stream *s)
{
    struct s3d_emu *emu = dev->emu;
    int rc;
    pthread_mutex_lock(&emu->mu);
    rc = emu_register_stream(emu, s);
    if (rc == 0)
        emu->ctx_used[s->ordinal] = 1;
    pthread_mutex_unlock(&emu->mu);
    return rc;
}

static void emu_stream_free(struct s3d_device *dev, struct s3d_stream *s)
{
    struct s3d_emu *emu = dev->emu;
    pthread_mutex_lock(&emu->mu);
    emu_flush(emu, s, UINT64_MAX);
    for (size_t i = 0; i < emu->n_streams; i++) {
        if (emu->streams[i] == s) {
            emu->streams[i] = emu->streams[--emu->n_streams];
            break;
        }
    }
    pthread_mutex_unlock(&emu->mu);
    free(s->ops);
}

/* Appends op to s. Called with mu held. */
static int emu_push(struct s3d_stream *s, const struct s3d_emu_op *op)
{
    if (s->n_ops == s->cap_ops) {
        size_t cap = s->cap_ops ? 2 * s->cap_ops : 16;
        struct s3d_emu_op *v = s3d_reallocarray(s->ops, cap, sizeof(*v));
        if (v == NULL)
            return s3d_fail(S3D_ENOMEM, "emulated stream: out of memory");
        s->ops = v;
        s->cap_ops = cap;
    }
    s->ops[s->n_ops++] = *op;
    return 0;
}

static int emu_not_device(const char *fn, uint64_t addr, size_t n)
{
    return s3d_fail(S3D_ECUDA,
                    "%s: CUDA_ERROR_INVALID_VALUE (emulated device: 0x%llx + %zu is not "
                    "device memory)",
                    fn, (unsigned long long)addr, n);
}

static int emu_copy_htod(struct s3d_device *dev, struct s3d_stream *s, uint64_t dst,
                         const void *src, size_t n)
{
    struct s3d_emu *emu = dev->emu;
    struct s3d_emu_op op = {.kind = S3D_EMU_COPY, .src = src, .n = n};
    int rc;
    pthread_mutex_lock(&emu->mu);
    op.dst = emu_view(emu, (uintptr_t)dst, n);
    rc = op.dst == NULL ? emu_not_device("cuMemcpyHtoDAsync", dst, n) : emu_push(s, &op);
    pthread_mutex_unlock(&emu->mu);
    return rc;
}

static int emu_copy_dtoh(struct s3d_device *dev, struct s3d_stream *s, void *dst, uint64_t src,
                         size_t n)
{
    struct s3d_emu *emu = dev->emu;
    struct s3d_emu_op op = {.kind = S3D_EMU_COPY, .dst = dst, .n = n};
    int rc;
    pthread_mutex_lock(&emu->mu);
    op.src = emu_view(emu, (uintptr_t)src, n);
    rc = op.src == NULL ? emu_not_device("cuMemcpyDtoHAsync", src, n) : emu_push(s, &op);
    pthread_mutex_unlock(&emu->mu);
    return rc;
}

static int emu_stream_sync(struct s3d_device *dev, struct s3d_stream *s)
{
    pthread_mutex_lock(&dev->emu->mu);
    emu_flush(dev->emu, s, UINT64_MAX);
    pthread_mutex_unlock(&dev->emu->mu);
    return 0;
}

static int emu_event_new(struct s3d_device *dev, struct s3d_event *e)
{
    return 0;
}

static void emu_event_free(struct s3d_device *dev, struct s3d_event *e)
{
}

static int emu_event_record(struct s3d_device *dev, struct s3d_event *e, struct s3d_stream *s)
{
    pthread_mutex_lock(&dev->emu->mu);
    e->stream_id = s->id;
    e->seq = s->seq_base + s->n_ops;
    e->queried = 0;
    pthread_mutex_unlock(&dev->emu->mu);
    return 0;
}

/* Completes the event's work. Called with mu held. */
static void emu_complete(struct s3d_emu *emu, struct s3d_event *e)
{
    struct s3d_stream *s = e->stream_id ? emu_find(emu, e->stream_id) : NULL;
    if (s != NULL)
        emu_flush(emu, s, e->seq);
}

static int emu_event_query(struct s3d_device *dev, struct s3d_event *e)
{
    int done = 1;
    pthread_mutex_lock(&dev->emu->mu);
    if (e->stream_id != 0 && !e->queried) {
        e->queried = 1;
        done = 0;
    } else {
        emu_complete(dev->emu, e);
    }
    pthread_mutex_unlock(&dev->emu->mu);
    return done;
}

static int emu_event_sync(struct s3d_device *dev, struct s3d_event *e)
{
    pthread_mutex_lock(&dev->emu->mu);
    emu_complete(dev->emu, e);
    e->queried = 1;
    pthread_mutex_unlock(&dev->emu->mu);
    return 0;
}

/* Marks the copies still queued whose host side overlaps [p, p + n): whoever gave the memory
 * back did not wait for them. They still run when their stream's work runs (the damage is
 * real) and are counted then. */
static void emu_host_released(struct s3d_device *dev, const void *p, size_t n)
{
    struct s3d_emu *emu = dev->emu;
    const unsigned char *lo = p, *hi = lo + n;
    pthread_mutex_lock(&emu->mu);
    for (size_t i = 0; i < emu->n_streams; i++) {
        struct s3d_stream *s = emu->streams[i];
        for (size_t k = s->done; k < s->n_ops; k++) {
            struct s3d_emu_op *op = &s->ops[k];
            const unsigned char *d = op->dst, *sr = op->src;
            if (op->kind != S3D_EMU_COPY)
                continue;
            if ((d < hi && d + op->n > lo) || (sr < hi && sr + op->n > lo))
                op->stale = 1;
        }
    }
    pthread_mutex_unlock(&emu->mu);
}

/* The stream a caller's handle names on device ordinal (*out NULL on failure). Called with
 * mu held. */
static int emu_handle_stream(struct s3d_emu *emu, int ordinal, uint64_t handle,
                             struct s3d_stream **out)
{
    struct s3d_stream *s;
    int rc;
    *out = NULL;                      /* stays NULL on failure */
    if (handle == 0 || handle == 2) { /* legacy / per-thread default stream */
        if (emu->legacy[ordinal] == NULL) {
            s = calloc(1, sizeof(*s));
            if (s == NULL)
                return s3d_fail(S3D_ENOMEM, "emulated stream: out of memory");
            s->ordinal = ordinal;
            if ((rc = emu_register_stream(emu, s)) < 0) {
                free(s);
                return rc;
            }
            emu->legacy[ordinal] = s;
        }
        *out = emu->legacy[ordinal];
        return 0;
    }
    s = emu_find(emu, handle);
    if (s == NULL || s->ordinal != ordinal)
        return s3d_fail(S3D_ECUDA,
                        "cuStreamWaitEvent: CUDA_ERROR_INVALID_HANDLE (emulated device %d: "
                        "no stream 0x%llx)",
                        ordinal, (unsigned long long)handle);
    *out = s;
    return 0;
}

static int emu_wait_external(struct s3d_device *dev, struct s3d_stream *s, uint64_t handle)
{
    struct s3d_emu *emu = dev->emu;
    struct s3d_stream *caller;
    struct s3d_emu_op op = {.kind = S3D_EMU_WAIT};
    int rc;
    pthread_mutex_lock(&emu->mu);
    rc = emu_handle_stream(emu, s->ordinal, handle, &caller);
    if (rc == 0 && caller != s) {
        op.wait_id = caller->id;
        op.wait_seq = caller->seq_base + caller->n_ops;
        rc = emu_push(s, &op);
    }
    pthread_mutex_unlock(&emu->mu);
    return rc;
}

/* cuStreamWaitEvent with a caller's event: s runs the work the event captured first. */
static int emu_wait_event(struct s3d_device *dev, struct s3d_stream *s, uint64_t handle)
{
    struct s3d_emu *emu = dev->emu;
    struct s3d_emu_op op = {.kind = S3D_EMU_WAIT};
    const struct emu_xevent *x = NULL;
    int rc = 0;
    pthread_mutex_lock(&emu->mu);
    for (size_t i = 0; i < emu->n_xevents && x == NULL; i++)
        if (emu->xevents[i].handle == handle)
            x = &emu->xevents[i];
    if (x == NULL) {
        rc = s3d_fail(S3D_ECUDA,
                      "cuStreamWaitEvent: CUDA_ERROR_INVALID_HANDLE (emulated device: no event "
                      "0x%llx)",
                      (unsigned long long)handle);
    } else if (x->stream_id != 0 && x->stream_id != s->id) {
        op.wait_id = x->stream_id;
        op.wait_seq = x->seq;
        rc = emu_push(s, &op);
    }
    pthread_mutex_unlock(&emu->mu);
    return rc;
}

/* ---- test hooks -------------------------------------------------------------------------- */

int s3d_device_emu_event_record(struct s3d_device *dev, int ordinal, uint64_t stream,
                                uint64_t *event)
{
    struct s3d_emu *emu;
    struct s3d_stream *s;
    struct emu_xevent *x = NULL;
    int rc;
    if (dev == NULL || dev->emu == NULL || ordinal < 0 || ordinal >= dev->count)
        return s3d_fail(S3D_EINVAL, "emu_event_record: not an emulated device ordinal");
    emu = dev->emu;
    pthread_mutex_lock(&emu->mu);
    rc = emu_handle_stream(emu, ordinal, stream, &s);
    for (size_t i = 0; rc == 0 && *event != 0 && i < emu->n_xevents && x == NULL; i++)
        if (emu->xevents[i].handle == *event)
            x = &emu->xevents[i];
    if (rc == 0 && *event != 0 && x == NULL)
        rc = s3d_fail(S3D_EINVAL, "emu_event_record: no event 0x%llx", (unsigned long long)*event);
    if (rc == 0 && x == NULL && emu->n_xevents == emu->cap_xevents) {
        size_t cap = emu->cap_xevents ? 2 * emu->cap_xevents : 8;
        struct emu_xevent *v = s3d_reallocarray(emu->xevents, cap, sizeof(*v));
        if (v == NULL) {
            rc = s3d_fail(S3D_ENOMEM, "emu_event_record: out of memory");
        } else {
            emu->xevents = v;
            emu->cap_xevents = cap;
        }
    }
    if (rc == 0 && x == NULL) {
        x = &emu->xevents[emu->n_xevents++];
        x->handle = emu->next_id++; /* never a stream's handle */
    }
    if (rc == 0) {
        x->stream_id = s->id;
        x->seq = s->seq_base + s->n_ops;
        *event = x->handle;
    }
    pthread_mutex_unlock(&emu->mu);
    return rc;
}

uint64_t s3d_device_emu_stream_handle(const struct s3d_stream *s)
{
    return s->id;
}

int s3d_device_emu_kernel(struct s3d_device *dev, int ordinal, uint64_t stream, uint64_t dptr,
                          int byte, size_t n)
{
    struct s3d_emu *emu;
    struct s3d_stream *s;
    struct s3d_emu_op op = {.kind = S3D_EMU_FILL, .byte = byte, .n = n};
    int rc;
    if (dev == NULL || dev->emu == NULL || ordinal < 0 || ordinal >= dev->count)
        return s3d_fail(S3D_EINVAL, "emu_kernel: not an emulated device ordinal");
    emu = dev->emu;
    pthread_mutex_lock(&emu->mu);
    rc = emu_handle_stream(emu, ordinal, stream, &s);
    if (rc == 0) {
        op.dst = emu_view(emu, (uintptr_t)dptr, n);
        rc = op.dst == NULL ? emu_not_device("emulated kernel", dptr, n) : emu_push(s, &op);
    }
    pthread_mutex_unlock(&emu->mu);
    return rc;
}

int s3d_device_emu_sync_handle(struct s3d_device *dev, int ordinal, uint64_t stream)
{
    struct s3d_stream *s;
    int rc;
    if (dev == NULL || dev->emu == NULL || ordinal < 0 || ordinal >= dev->count)
        return s3d_fail(S3D_EINVAL, "emu_sync: not an emulated device ordinal");
    pthread_mutex_lock(&dev->emu->mu);
    rc = emu_handle_stream(dev->emu, ordinal, stream, &s);
    if (rc == 0)
        emu_flush(dev->emu, s, UINT64_MAX);
    pthread_mutex_unlock(&dev->emu->mu);
    return rc;
}

void *s3d_device_emu_view(uint64_t dptr)
{
    void *v;
    pthread_mutex_lock(&g_emu.mu);
    v = emu_view(&g_emu, (uintptr_t)dptr, 0);
    pthread_mutex_unlock(&g_emu.mu);
    return v;
}

/* The test hooks' counters: copies the size bytes of the g_emu field at field into out,
 * under the lock. */
static void emu_read(void *out, const void *field, size_t size)
{
    pthread_mutex_lock(&g_emu.mu);
    memcpy(out, field, size);
    pthread_mutex_unlock(&g_emu.mu);
}

int s3d_device_emu_ctx_used(int ordinal)
{
    int used;
    if (ordinal < 0 || ordinal >= S3D_MAX_DEVICES)
        return 0;
    emu_read(&used, &g_emu.ctx_used[ordinal], sizeof(used));
    return used;
}

size_t s3d_device_emu_pinned_bytes(void)
{
    size_t n;
    emu_read(&n, &g_emu.pinned_bytes, sizeof(n));
    return n;
}

long s3d_device_emu_registered(void)
{
    long n;
    emu_read(&n, &g_emu.registered, sizeof(n));
    return n;
}

long s3d_device_emu_stale_copies(void)
{
    long n;
    emu_read(&n, &g_emu.stale_copies, sizeof(n));
    return n;
}

void s3d_device_emu_reset_ctx(void)
{
    pthread_mutex_lock(&g_emu.mu);
    memset(g_emu.ctx_used, 0, sizeof(g_emu.ctx_used));
    pthread_mutex_unlock(&g_emu.mu);
}

const struct s3d_device_ops s3d_emu_ops = {
    .pointer_info = emu_pointer_info,
    .make_current = emu_make_current,
    .host_alloc = emu_host_alloc,
    .host_free = emu_host_free,
    .host_register = emu_host_register,
    .host_unregister = emu_host_unregister,
    .mem_alloc = emu_mem_alloc,
    .mem_free = emu_mem_free,
    .stream_new = emu_stream_new,
    .stream_free = emu_stream_free,
    .copy_htod = emu_copy_htod,
    .copy_dtoh = emu_copy_dtoh,
    .stream_sync = emu_stream_sync,
    .event_new = emu_event_new,
    .event_free = emu_event_free,
    .event_record = emu_event_record,
    .event_query = emu_event_query,
    .event_sync = emu_event_sync,
    .wait_external = emu_wait_external,
    .wait_event = emu_wait_event,
    .host_released = emu_host_released,
};
