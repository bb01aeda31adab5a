/* device_impl.h - between device.c (dispatch) and the backends (cuda_dl.c, device_host.c,
 * cufile_dl.c). Not used outside src/device/. */
#ifndef S3D_DEVICE_DEVICE_IMPL_H
#define S3D_DEVICE_DEVICE_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "device/device.h"
#include "common/compiler.h"

/* One backend's implementation of the calls in device.h. device.c has checked the arguments
 * (non-NULL handles, ordinal in range) before calling. */
struct s3d_device_ops {
    int (*pointer_info)(struct s3d_device *dev, const void *ptr, int *is_device, int *ordinal);
    int (*make_current)(struct s3d_device *dev, int ordinal);
    int (*host_alloc)(struct s3d_device *dev, size_t size, void **out);
    void (*host_free)(struct s3d_device *dev, void *p, size_t size);
    int (*host_register)(struct s3d_device *dev, int ordinal, void *p, size_t size);
    void (*host_unregister)(struct s3d_device *dev, int ordinal, void *p);
    int (*mem_alloc)(struct s3d_device *dev, int ordinal, size_t size, uint64_t *out);
    void (*mem_free)(struct s3d_device *dev, int ordinal, uint64_t dptr);
    int (*stream_new)(struct s3d_device *dev, struct s3d_stream *s);
    void (*stream_free)(struct s3d_device *dev, struct s3d_stream *s);
    int (*copy_htod)(struct s3d_device *dev, struct s3d_stream *s, uint64_t dst, const void *src,
                     size_t n);
    int (*copy_dtoh)(struct s3d_device *dev, struct s3d_stream *s, void *dst, uint64_t src,
                     size_t n);
    int (*stream_sync)(struct s3d_device *dev, struct s3d_stream *s);
    int (*event_new)(struct s3d_device *dev, struct s3d_event *e);
    void (*event_free)(struct s3d_device *dev, struct s3d_event *e);
    int (*event_record)(struct s3d_device *dev, struct s3d_event *e, struct s3d_stream *s);
    int (*event_query)(struct s3d_device *dev, struct s3d_event *e);
    int (*event_sync)(struct s3d_device *dev, struct s3d_event *e);
    int (*wait_external)(struct s3d_device *dev, struct s3d_stream *s, uint64_t caller_stream);
    int (*wait_event)(struct s3d_device *dev, struct s3d_stream *s, uint64_t caller_event);
    void (*host_released)(struct s3d_device *dev, const void *p, size_t n); /* NULL: no-op */
    /* The PCI address of device ordinal as the driver spells it ("0000:3B:00.0") into buf;
     * 0, or a negative code with the detail recorded. NULL: no PCI bus (host, emulated). */
    int (*pci_bus_id)(struct s3d_device *dev, int ordinal, char *buf, size_t cap);
};

/* A deferred operation of the emulated backend: a copy, a "kernel" that fills device memory,
 * or a wait for another stream's work up to a sequence number. Addresses are host views
 * (device pointers already translated to their read-write alias). */
enum s3d_emu_op_kind { S3D_EMU_COPY, S3D_EMU_FILL, S3D_EMU_WAIT };
struct s3d_emu_op {
    int kind;
    void *dst;
    const void *src;
    size_t n;
    int byte;                   /* S3D_EMU_FILL */
    uint64_t wait_id, wait_seq; /* S3D_EMU_WAIT */
    int stale;                  /* S3D_EMU_COPY: its host memory was released while it was queued */
};

struct s3d_stream {
    int ordinal;
    void *cu; /* CUstream (cuda backend) */
    /* Emulated backend: copies queued, not yet performed. ops[0..done) are performed;
     * seq_base + i is the sequence number of ops[i] (sequence numbers only grow). */
    uint64_t id; /* unique per device, for events that outlive the stream */
    struct s3d_emu_op *ops;
    size_t n_ops, cap_ops, done;
    uint64_t seq_base;
};

struct s3d_event {
    int ordinal;
    void *cu; /* CUevent (cuda backend) */
    /* Emulated backend: the stream and the sequence number the event waits for. */
    uint64_t stream_id; /* 0: never recorded */
    uint64_t seq;
    int queried; /* the first query after a record answers "pending" */
};

struct s3d_cuda; /* cuda_dl.c */
struct s3d_emu;  /* device_host.c */

struct s3d_device {
    const struct s3d_device_ops *ops;
    const char *backend; /* "cuda", "host", "emulated" */
    unsigned flags;
    int count; /* usable device ordinals */
    char why_host[512];
    struct s3d_cuda *cuda; /* cuda backend state, else NULL */
    struct s3d_emu *emu;   /* emulated backend state, else NULL */
};

extern const struct s3d_device_ops s3d_host_ops;
extern const struct s3d_device_ops s3d_emu_ops;
extern const struct s3d_device_ops s3d_cuda_ops;

/* Loads libcuda and initializes it. 0: dev->cuda, count set; 1: CUDA not usable, the reason
 * written into dev->why_host; negative: S3D_ENOMEM. */
S3D_NODISCARD int s3d_cuda_open(struct s3d_device *dev);
void s3d_cuda_close(struct s3d_device *dev);
/* The emulated backend's state. 0 or S3D_ENOMEM. */
S3D_NODISCARD int s3d_emu_open(struct s3d_device *dev);
void s3d_emu_close(struct s3d_device *dev);

/* Makes ordinal's primary context current for the duration of one operation and records in
 * *prev what was current before (a context, or none), for s3d_cuda_ctx_leave to put back: the
 * calling thread's current context (the caller's current device) is the same after every call.
 * ordinal S3D_ANY_CTX: whatever context is current already, else the lowest-numbered
 * primary context this device has retained, else device 0's (a process that has used no GPU
 * yet). cuda backend only. */
#define S3D_ANY_CTX (-1)
struct s3d_cuda_prev {
    void *ctx;   /* the context current before, NULL for none */
    int restore; /* 1: another context was made current, ctx goes back at leave */
};
S3D_NODISCARD int s3d_cuda_ctx_enter(struct s3d_device *dev, int ordinal,
                                     struct s3d_cuda_prev *prev);
void s3d_cuda_ctx_leave(struct s3d_device *dev, int ordinal, const struct s3d_cuda_prev *prev);

#endif
