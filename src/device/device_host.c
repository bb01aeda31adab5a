/* device_host.c - the backends without a GPU.
 *
 * host: host memory only; device.c refuses every ordinal before a call gets here, so the
 * stream and event functions are never reached with a device and only need to be safe.
 *
 * emulated: one pretend GPU whose memory is host memory. Copies are deferred and performed
 * as late as a real GPU could perform them (when a later event is seen complete, or on a
 * synchronize), and the first query of an event after its record answers "pending": a
 * caller that reuses a staging chunk before its copy is known done, or reads a device-to-host
 * destination too early, gets wrong bytes in tests instead of a race that only a GPU shows. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/alloc.h"
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

static int host_register(struct s3d_device *dev, void *p, size_t size)
{
    return 0;
}

static void host_unregister(struct s3d_device *dev, void *p)
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
};

/* ---- emulated backend --------------------------------------------------------------- */

/* Streams live in a registry so that an event can tell whether its stream still exists
 * (a freed stream has performed all its copies). Locked part: everything in struct s3d_emu
 * and every stream's op queue, under mu. Lock order: mu is a leaf (no other lock inside). */
struct s3d_emu {
    pthread_mutex_t mu;
    struct s3d_stream **streams;
    size_t n_streams, cap_streams;
    uint64_t next_id;
};

int s3d_emu_open(struct s3d_device *dev)
{
    struct s3d_emu *emu = calloc(1, sizeof(*emu));
    if (emu == NULL)
        return s3d_fail(S3D_ENOMEM, "device: out of memory");
    pthread_mutex_init(&emu->mu, NULL);
    emu->next_id = 1;
    dev->emu = emu;
    return 0;
}

void s3d_emu_close(struct s3d_device *dev)
{
    if (dev->emu == NULL)
        return;
    pthread_mutex_destroy(&dev->emu->mu);
    free(dev->emu->streams);
    free(dev->emu);
    dev->emu = NULL;
}

static struct s3d_stream *emu_find(struct s3d_emu *emu, uint64_t id)
{
    for (size_t i = 0; i < emu->n_streams; i++)
        if (emu->streams[i]->id == id)
            return emu->streams[i];
    return NULL;
}

/* Performs the queued copies with sequence numbers below seq. Called with mu held. */
static void emu_flush(struct s3d_stream *s, uint64_t seq)
{
    while (s->done < s->n_ops && s->seq_base + s->done < seq) {
        const struct s3d_emu_op *op = &s->ops[s->done++];
        memcpy(op->dst, op->src, op->n);
    }
    if (s->done == s->n_ops) {
        s->seq_base += s->n_ops;
        s->n_ops = s->done = 0;
    }
}

static int emu_make_current(struct s3d_device *dev, int ordinal)
{
    return 0;
}

static int emu_mem_alloc(struct s3d_device *dev, int ordinal, size_t size, uint64_t *out)
{
    void *p = NULL;
    if (posix_memalign(&p, 4096, size) != 0)
        return s3d_fail(S3D_ENOMEM, "mem_alloc: %zu bytes: out of memory", size);
    *out = (uint64_t)(uintptr_t)p;
    return 0;
}

static void emu_mem_free(struct s3d_device *dev, int ordinal, uint64_t dptr)
{
    free((void *)(uintptr_t)dptr);
}

static int emu_stream_new(struct s3d_device *dev, struct s3d_stream *s)
{
    struct s3d_emu *emu = dev->emu;
    int rc = 0;
    pthread_mutex_lock(&emu->mu);
    if (emu->n_streams == emu->cap_streams) {
        size_t cap = emu->cap_streams ? 2 * emu->cap_streams : 8;
        struct s3d_stream **v = s3d_reallocarray(emu->streams, cap, sizeof(*v));
        if (v == NULL) {
            rc = s3d_fail(S3D_ENOMEM, "stream: out of memory");
            goto out;
        }
        emu->streams = v;
        emu->cap_streams = cap;
    }
    s->id = emu->next_id++;
    emu->streams[emu->n_streams++] = s;
out:
    pthread_mutex_unlock(&emu->mu);
    return rc;
}

static void emu_stream_free(struct s3d_device *dev, struct s3d_stream *s)
{
    struct s3d_emu *emu = dev->emu;
    pthread_mutex_lock(&emu->mu);
    emu_flush(s, UINT64_MAX);
    for (size_t i = 0; i < emu->n_streams; i++) {
        if (emu->streams[i] == s) {
            emu->streams[i] = emu->streams[--emu->n_streams];
            break;
        }
    }
    pthread_mutex_unlock(&emu->mu);
    free(s->ops);
}

static int emu_queue(struct s3d_device *dev, struct s3d_stream *s, void *dst, const void *src,
                     size_t n)
{
    struct s3d_emu *emu = dev->emu;
    int rc = 0;
    pthread_mutex_lock(&emu->mu);
    if (s->n_ops == s->cap_ops) {
        size_t cap = s->cap_ops ? 2 * s->cap_ops : 16;
        struct s3d_emu_op *v = s3d_reallocarray(s->ops, cap, sizeof(*v));
        if (v == NULL) {
            rc = s3d_fail(S3D_ENOMEM, "copy: out of memory");
            goto out;
        }
        s->ops = v;
        s->cap_ops = cap;
    }
    s->ops[s->n_ops++] = (struct s3d_emu_op){dst, src, n};
out:
    pthread_mutex_unlock(&emu->mu);
    return rc;
}

static int emu_copy_htod(struct s3d_device *dev, struct s3d_stream *s, uint64_t dst,
                         const void *src, size_t n)
{
    return emu_queue(dev, s, (void *)(uintptr_t)dst, src, n);
}

static int emu_copy_dtoh(struct s3d_device *dev, struct s3d_stream *s, void *dst, uint64_t src,
                         size_t n)
{
    return emu_queue(dev, s, dst, (const void *)(uintptr_t)src, n);
}

static int emu_stream_sync(struct s3d_device *dev, struct s3d_stream *s)
{
    pthread_mutex_lock(&dev->emu->mu);
    emu_flush(s, UINT64_MAX);
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
        emu_flush(s, e->seq);
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

const struct s3d_device_ops s3d_emu_ops = {
    .pointer_info = host_pointer_info,
    .make_current = emu_make_current,
    .host_alloc = host_alloc,
    .host_free = host_free,
    .host_register = host_register,
    .host_unregister = host_unregister,
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
    .wait_external = host_wait_external,
};
