/* device.h - the GPU seen by the data path: the CUDA driver API and cuFile, both loaded with
 * dlopen at run time (no CUDA at build time), with a host backend behind the same calls.
 *
 * One struct s3d_device per client, made by s3d_device_open. Backends:
 *   - "cuda": libcuda.so.1 loaded, cuInit succeeded and at least one device exists;
 *   - "host": no GPU (no driver, no device, or forced). Normal, not an error: host memory
 *     works, any device ordinal fails with S3D_ENODEVICE;
 *   - "emulated": pretend GPUs (one; S3D_DEVICE_EMULATE_COUNT=N for more) as strict as a
 *     GPU for the data path: device memory is not host-accessible (a host access crashes, a
 *     host pointer given as device memory is refused), work queued on a stream is deferred
 *     until a synchronize or an event recorded after it is seen complete (its first query
 *     answers "pending"), streams are unordered unless a wait orders them, and a caller's
 *     stream handle names pending work ("kernels" queued by tests) that waits honour. See
 *     device_host.c and the test hooks at the end of this file. For tests only.
 * The pipeline is written once against these calls: on the host backend copies are memcpy
 * and events are always complete.
 *
 * Device memory is named by a uint64_t (a CUdeviceptr). Streams and events belong to one
 * device ordinal; every call that uses one first makes that device's primary context (the
 * one PyTorch uses, retained once per device and cached) current on the calling thread, so
 * any thread may call anything, and puts back what was current before (no context, when
 * there was none): the caller's current device is unchanged after every call but
 * s3d_device_make_current.
 *
 * Errors: every CUDA failure is S3D_ECUDA with the CUDA function's name and cuGetErrorString
 * text in the message; dlopen/dlsym failures carry dlerror().
 *
 * Threads: all functions are thread-safe. A stream or event may be used by one thread at a
 * time (the CUDA rule is looser; ours is what the emulated backend needs). */
#ifndef S3D_DEVICE_DEVICE_H
#define S3D_DEVICE_DEVICE_H

#include <stddef.h>
#include <stdint.h>
#include "common/compiler.h"

struct s3d_device;
struct s3d_stream;
struct s3d_event;

enum s3d_device_flags {
    S3D_DEVICE_FORCE_HOST = 1, /* never load libcuda (client option device = -1) */
    S3D_DEVICE_EMULATE = 2,    /* the emulated backend described above (tests) */
    S3D_DEVICE_NO_CUFILE = 4,  /* never load libcufile (cuFile reported unavailable) */
};

/* Opens the device layer: dlopen("libcuda.so.1"), cuInit(0), cuDeviceGetCount. A missing
 * library, a failing cuInit or zero devices give the host backend and return 0 (the reason is
 * kept: s3d_device_why_host). Nothing is retained or allocated on the GPU yet. Fails only on
 * S3D_ENOMEM or S3D_EINVAL (unknown flags). *out is NULL on failure. */
S3D_NODISCARD int s3d_device_open(unsigned flags, struct s3d_device **out);
/* Releases the retained primary contexts and the libraries' handles (the libraries stay
 * loaded: CUDA must not be unloaded from a running process). Every stream, event and host
 * allocation must be freed first. NULL ok. */
void s3d_device_free(struct s3d_device *dev);

/* 1 when device ordinals can be used (cuda or emulated backend), else 0. NULL: 0. */
int s3d_device_has_gpu(const struct s3d_device *dev);
/* Number of CUDA devices (1 when emulated, 0 on the host backend). */
int s3d_device_count(const struct s3d_device *dev);
/* "cuda", "host" or "emulated". Static string. */
const char *s3d_device_backend(const struct s3d_device *dev);
/* Why the host backend was chosen ("libcuda.so.1: cannot open shared object file...",
 * "cuInit: CUDA_ERROR_NO_DEVICE ...", "forced"); "" on the cuda backend. Owned by dev. */
const char *s3d_device_why_host(const struct s3d_device *dev);

/* Where ptr points: *is_device = 1 and *ordinal = the device for CUDA device memory (and
 * managed memory), else *is_device = 0 and *ordinal = -1 (host memory, pinned or not, and any
 * address CUDA does not know). Host and emulated backends: always host. Either out pointer
 * may be NULL. Returns 0, or S3D_ECUDA when the driver fails for another reason. */
S3D_NODISCARD int s3d_device_pointer_info(struct s3d_device *dev, const void *ptr, int *is_device,
                                          int *ordinal);

/* Makes the primary context of device ordinal current on the calling thread, retaining it
 * on first use (once per device per s3d_device). S3D_ENODEVICE for an ordinal out of range
 * or on the host backend; S3D_ECUDA. No-op on the emulated backend for ordinal 0. */
S3D_NODISCARD int s3d_device_make_current(struct s3d_device *dev, int ordinal);

/* ---- host memory ------------------------------------------------------------------- */

/* size bytes of host memory, page-aligned (4096 at least), that the GPU copies from and to
 * at full speed: cuMemHostAlloc(CU_MEMHOSTALLOC_PORTABLE) on the cuda backend (usable from
 * every context), else page-aligned ordinary memory. Slow (milliseconds per tens of MiB when
 * pinned): allocate once, reuse. *out is NULL on failure (S3D_ENOMEM, S3D_ECUDA, S3D_EINVAL
 * for size 0). */
S3D_NODISCARD int s3d_device_host_alloc(struct s3d_device *dev, size_t size, void **out);
/* Frees what s3d_device_host_alloc returned; size must be the size allocated. NULL ok. */
void s3d_device_host_free(struct s3d_device *dev, void *p, size_t size);
/* Pins existing host memory (cuMemHostRegister, PORTABLE) so copies from and to it run at
 * pinned speed; no-op on the host backend. The registration is made in the primary context
 * of device ordinal, which the library retains until s3d_device_free: a user's cuCtxDestroy
 * or device reset cannot unpin it underneath (ordinal -1: whatever context is current, else
 * device 0's). Unregister, with the same ordinal, before freeing the memory. */
S3D_NODISCARD int s3d_device_host_register(struct s3d_device *dev, int ordinal, void *p,
                                           size_t size);
void s3d_device_host_unregister(struct s3d_device *dev, int ordinal, void *p);

/* Says that the host memory [p, p + n) has gone back to its owner (a staging chunk put back
 * in its pool): whoever queued copies into or out of it has waited for them, so none is still
 * queued on any stream. No-op on the cuda and host backends (NULL dev ok). The emulated
 * backend checks it: a copy still queued there is marked, and when it runs (late, as on a GPU,
 * into memory that may have been handed out again) it is counted in
 * s3d_device_emu_stale_copies. */
void s3d_device_host_released(struct s3d_device *dev, const void *p, size_t n);

/* ---- host memory near a device (numa.c) ----------------------------------------------- */

/* The NUMA node of device ordinal's PCI function: cuDeviceGetPCIBusId, then
 * /sys/bus/pci/devices/<address>/numa_node (S3D_TEST_SYSFS_ROOT replaces /sys in builds with
 * the test hooks). -1 when there is none to use, the reason written into why (always
 * terminated): a host or emulated backend (no PCI bus), a driver without the call or failing
 * it (its message; it is also the thread's last error), no such file, or -1 in it (a one-node
 * machine, a VM). Not an error: the caller places nothing. */
int s3d_device_numa_node(struct s3d_device *dev, int ordinal, char *why, size_t why_cap);
/* Sets the memory policy of [p, p + size) (p page-aligned, a mapping of this process) to
 * prefer node: pages allocated there later come from node while it has free memory, from
 * another node after, and pages already present elsewhere are moved to it, but for those
 * pinned or shared with another process (MPOL_PREFERRED, MPOL_MF_MOVE). 0, or -1 with the
 * reason (mbind's errno) in why. */
int s3d_host_prefer_node(void *p, size_t size, int node, char *why, size_t why_cap);

/* ---- device memory (tests and benchmarks: the library itself never allocates any) ---- */

/* size bytes of device memory on ordinal (cuMemAlloc; emulated: host memory). */
S3D_NODISCARD int s3d_device_mem_alloc(struct s3d_device *dev, int ordinal, size_t size,
                                       uint64_t *out);
void s3d_device_mem_free(struct s3d_device *dev, int ordinal, uint64_t dptr); /* 0 ok */

/* ---- streams, copies, events --------------------------------------------------------- */

/* A non-blocking stream (CU_STREAM_NON_BLOCKING: it does not synchronize with the legacy
 * default stream) on device ordinal. *out is NULL on failure. */
S3D_NODISCARD int s3d_device_stream_new(struct s3d_device *dev, int ordinal,
                                        struct s3d_stream **out);
/* Waits for the stream's work, then destroys it. NULL ok. */
void s3d_device_stream_free(struct s3d_device *dev, struct s3d_stream *s);
/* The stream's device ordinal. */
int s3d_device_stream_ordinal(const struct s3d_stream *s);

/* Queues a copy of n bytes host -> device (src should be pinned memory: from the pool or
 * s3d_device_host_alloc; pageable memory works but is slow and synchronous). src must stay
 * valid and unchanged until an event recorded after the copy is complete. n == 0: no-op. */
S3D_NODISCARD int s3d_device_copy_htod(struct s3d_device *dev, struct s3d_stream *s, uint64_t dst,
                                       const void *src, size_t n);
/* Queues a copy of n bytes device -> host; dst holds the bytes only once an event recorded
 * after the copy is complete (or after s3d_device_stream_sync). */
S3D_NODISCARD int s3d_device_copy_dtoh(struct s3d_device *dev, struct s3d_stream *s, void *dst,
                                       uint64_t src, size_t n);
/* Blocks until everything queued on s is done (emulated: performs the deferred copies). */
S3D_NODISCARD int s3d_device_stream_sync(struct s3d_device *dev, struct s3d_stream *s);

/* A timing-free event (CU_EVENT_DISABLE_TIMING) on device ordinal. */
S3D_NODISCARD int s3d_device_event_new(struct s3d_device *dev, int ordinal, struct s3d_event **out);
void s3d_device_event_free(struct s3d_device *dev, struct s3d_event *e); /* NULL ok */
/* Captures the work queued on s so far; the event completes when that work is done. */
S3D_NODISCARD int s3d_device_event_record(struct s3d_device *dev, struct s3d_event *e,
                                          struct s3d_stream *s);
/* 1 when the recorded work is done (or nothing was ever recorded), 0 while pending,
 * or a negative S3D_E* code (S3D_ECUDA: the work failed). Never blocks. */
int s3d_device_event_query(struct s3d_device *dev, struct s3d_event *e);
/* Blocks until the recorded work is done. */
S3D_NODISCARD int s3d_device_event_sync(struct s3d_device *dev, struct s3d_event *e);
/* Makes s wait (on the GPU, without blocking the calling thread) for the work queued so far on
 * the caller's CUstream caller_stream (0: the legacy default stream; a per-thread default
 * stream handle, 2, works too): an event is recorded on caller_stream and s waits on it.
 * This is how saves wait for the kernels that produce the tensors. No-op on other backends. */
S3D_NODISCARD int s3d_device_wait_external(struct s3d_device *dev, struct s3d_stream *s,
                                           uint64_t caller_stream);
/* Makes s wait (on the GPU, without blocking the calling thread) for the work the caller's
 * CUevent caller_event captured when the caller recorded it (cuStreamWaitEvent, in s's
 * context; the event may belong to any context). Nothing is recorded: work queued on the
 * caller's streams after the record is not waited for. The event must not be recorded again
 * or destroyed before this returns (the GPU keeps what the wait captured). S3D_EINVAL for 0.
 * This is how save_async waits for its snapshot copies. No-op on the host backend. */
S3D_NODISCARD int s3d_device_wait_event(struct s3d_device *dev, struct s3d_stream *s,
                                        uint64_t caller_event);

/* ---- per-device stream sets ----------------------------------------------------------- */

/* Device ordinals one operation may use: destinations and sources on cuda:0..63. */
#define S3D_MAX_DEVICES 64

/* The caller's stream for device ordinal k: streams[k] when given (k < n), else def. The
 * cuda_stream / cuda_streams / n_cuda_streams options of loads and saves. */
static inline uint64_t s3d_caller_stream(uint64_t def, const uint64_t *streams, uint32_t n, int k)
{
    return streams != NULL && k >= 0 && (uint32_t)k < n ? streams[k] : def;
}

/* The streams of one operation (a load, a save, a file read or write): one per device
 * ordinal, made on first use. When the caller's streams are set (s3d_stream_set_wait_caller),
 * a stream first waits for the caller's stream on its device, once, before its first copy:
 * the caller's kernels may still read a destination or produce a source. When the caller
 * gave an event for the device (s3d_stream_set_wait_events), the stream waits for that event
 * instead (s3d_device_wait_event) and nothing is recorded on the caller's stream. Single-threaded:
 * the set belongs to the call that made it. s3d_stream_set_init first; fields read-only outside
 * stream_set.c (stream[k] is NULL until s3d_stream_set_get made it). */
struct s3d_stream_set {
    struct s3d_device *dev;
    struct s3d_stream *stream[S3D_MAX_DEVICES];
    unsigned char waited[S3D_MAX_DEVICES]; /* stream[k] waited for the caller's stream */
    int wait;                              /* the caller's streams below are set */
    uint64_t wait_def;
    const uint64_t *wait_streams; /* not owned: must outlive the set's use */
    uint32_t wait_n;
    const uint64_t *wait_events; /* the caller's CUevents per ordinal (0: none); not owned */
    uint32_t wait_events_n;
};

/* An empty set on dev: no stream, no waiting. */
void s3d_stream_set_init(struct s3d_stream_set *set, struct s3d_device *dev);
/* From now on each stream waits for the caller's stream on its device (s3d_caller_stream of
 * def, streams, n) before its next use, once: also for streams already made, so an operation
 * made of several calls (a file writer's writes) waits again at the start of each. */
void s3d_stream_set_wait_caller(struct s3d_stream_set *set, uint64_t def, const uint64_t *streams,
                                uint32_t n);
/* With s3d_stream_set_wait_caller (call it first, each time): the stream of ordinal k waits
 * for the caller's event events[k] instead of its stream, when k < n and events[k] != 0.
 * events may be NULL (none). Kept until the next call. */
void s3d_stream_set_wait_events(struct s3d_stream_set *set, const uint64_t *events, uint32_t n);
/* The stream for ordinal, made on first use and made to wait as described above.
 * S3D_ENODEVICE for an ordinal outside 0..S3D_MAX_DEVICES-1; errors of
 * s3d_device_stream_new, s3d_device_wait_external and s3d_device_wait_event. */
S3D_NODISCARD int s3d_stream_set_get(struct s3d_stream_set *set, int ordinal,
                                     struct s3d_stream **out);
/* Waits for the work queued on every stream of the set; every stream is waited for even after
 * an error. Returns the first error, else 0. */
S3D_NODISCARD int s3d_stream_set_sync(struct s3d_stream_set *set);
/* Waits for and destroys the streams; the set is empty again (init state kept). */
void s3d_stream_set_free(struct s3d_stream_set *set);

/* ---- cuFile (GPUDirect Storage) -------------------------------------------------------- */

struct s3d_cufile;

/* Whether cuFile can be used: loads libcufile.so.0 and calls cuFileDriverOpen the first time
 * (once per process; the driver is not closed while the process runs, but by an exit hook of
 * the process that opened it: see cufile_dl.c), in the primary context of device ordinal, the
 * device the I/O is for (-1, S3D_ANY_CTX: the caller's current context, else a primary context
 * this device retained, else device 0's; the data path always names its device, so a rank on
 * GPU 3 makes no context on GPU 0). Returns 1 when usable; 0 when not (no GPU, library missing,
 * driver or nvidia-fs refusing, no such ordinal), with the reason in *why (static or owned by the
 * process; why may be NULL) - not an error. Callers in mode AUTO ask s3d_cufile_gds() first,
 * so that cuFile is not even opened where it would not be used. */
int s3d_cufile_available(struct s3d_device *dev, int ordinal, const char **why);
/* 1 when real GPUDirect Storage may be there: the nvidia-fs kernel module, or cuFile 1.15's
 * PCI P2PDMA turned on in its configuration (use_pcip2pdma in CUFILE_ENV_PATH_JSON or
 * /etc/cufile.json); once the driver is open, 1 unless it reports compatibility mode. 0 when
 * cuFile would run in compatibility mode. S3D_FILE_IO_AUTO uses cuFile only with GDS. */
int s3d_cufile_gds(void);
/* 1 when the nvidia-fs kernel module is loaded (S3D_TEST_NVFS_PATH: tests name a file instead). */
int s3d_cufile_nvfs(void);
/* 1 when block device maj:min, as sysfs (normally "/sys"; tests pass a tree of their own)
 * describes it, is NVMe: a namespace or its partition, or an md or dm volume (RAID, LVM,
 * crypt, stacked up to 8 deep) whose every slave is; 0 otherwise. What AUTO asks of the device
 * under an ext4 or xfs file before it lets cuFile read or write it directly. */
int s3d_cufile_block_nvme(const char *sysfs, unsigned maj, unsigned min);

/* How cuFile moves bytes: through nvidia-fs, through the kernel's PCI P2PDMA (cuFile 1.15,
 * no nvidia-fs), or in compatibility mode (POSIX I/O into cuFile's bounce buffers). */
enum { S3D_CUFILE_MODE_COMPAT = 0, S3D_CUFILE_MODE_NVFS = 1, S3D_CUFILE_MODE_P2PDMA = 2 };
/* The open driver's mode (from cuFileDriverGetProperties, cuFileGetParameterBool and
 * nvidia-fs), -1 before it is open. */
int s3d_cufile_driver_mode(void);
/* The mode of one registered file: the driver's when it serves the file's file system
 * directly (ext4/xfs on a block device; for nvidia-fs also the file systems its dstatusflags
 * name), else compatibility mode. cuFileHandleRegister succeeds either way. NULL: compat. */
int s3d_cufile_file_mode(const struct s3d_cufile *f);
/* Why f has its mode ("ext4/xfs on an NVMe device the driver serves"). Static string. */
const char *s3d_cufile_file_why(const struct s3d_cufile *f);
/* "nvidia-fs", "p2pdma" or "compat". Static string. */
const char *s3d_cufile_mode_name(int mode);
/* The name of CUfileOpError code err as cufile.h spells it ("CU_FILE_IO_ERROR" for 5044),
 * "CU_FILE_?" for a code the header does not define. Static string. */
const char *s3d_cufile_err_name(int err);
/* Registers an open file with cuFile (cuFileHandleRegister), in device ordinal's primary
 * context (-1 as for s3d_cufile_available). A descriptor another open handle registered
 * already is not registered again (cuFile refuses that): the handle shares the registration,
 * which the last s3d_cufile_close of the descriptor drops, so concurrent reads may share one
 * descriptor. Thread-safe. The fd should be opened with O_DIRECT (GDS mode needs it;
 * compatibility mode works without); it stays owned by the caller and must outlive the
 * handle. S3D_ECUFILE on refusal, S3D_ENOTSUP when cuFile is not available. *out is NULL on
 * failure. */
S3D_NODISCARD int s3d_cufile_open(struct s3d_device *dev, int ordinal, int fd,
                                  struct s3d_cufile **out);
/* Frees the handle; cuFileHandleDeregister when it was the last on its descriptor. NULL ok. */
void s3d_cufile_close(struct s3d_cufile *f);
/* Registers [dptr, dptr + len) of device ordinal's memory for cuFile (optional: speeds up
 * repeated I/O to one buffer). Deregister with the same dptr before freeing the memory. */
S3D_NODISCARD int s3d_cufile_buf_register(struct s3d_device *dev, int ordinal, uint64_t dptr,
                                          size_t len);
S3D_NODISCARD int s3d_cufile_buf_deregister(struct s3d_device *dev, int ordinal, uint64_t dptr);
/* Reads len bytes at file_off straight into device memory at dptr (on device ordinal, made
 * current first). Loops over short transfers; stops early only at end of file. Stores the
 * bytes read in *out_n. S3D_ECUFILE (cuFile status named) or S3D_EIO (errno named). dptr is
 * given to cuFile as the buffer base: memory registered with s3d_cufile_buf_register must be
 * read into at its registered base. */
S3D_NODISCARD int s3d_cufile_read(struct s3d_cufile *f, int ordinal, uint64_t dptr, uint64_t len,
                                  uint64_t file_off, uint64_t *out_n);
/* Writes len bytes from device memory at dptr to the file at file_off; all or an error. */
S3D_NODISCARD int s3d_cufile_write(struct s3d_cufile *f, int ordinal, uint64_t dptr, uint64_t len,
                                   uint64_t file_off);

/* ---- emulated backend: test hooks (S3D_DEVICE_EMULATE) ------------------------------ */

/* The CUstream handle that names emulated stream s (what a caller passes as cuda_stream). */
uint64_t s3d_device_emu_stream_handle(const struct s3d_stream *s);
/* Queues a "kernel" on the caller's stream handle (0: the legacy default stream of ordinal)
 * that fills n bytes of device memory at dptr with byte when the stream's work runs.
 * S3D_EINVAL off the emulated backend; S3D_ECUDA when dptr is not device memory. */
S3D_NODISCARD int s3d_device_emu_kernel(struct s3d_device *dev, int ordinal, uint64_t stream,
                                        uint64_t dptr, int byte, size_t n);
/* Records a caller's CUevent on the caller's stream handle (as cuEventRecord): it captures the
 * work queued there so far. *event 0: a new event handle is made and stored in *event (never
 * freed: tests make a few); else *event is recorded again. S3D_EINVAL off the emulated
 * backend or for a handle this did not make. */
S3D_NODISCARD int s3d_device_emu_event_record(struct s3d_device *dev, int ordinal, uint64_t stream,
                                              uint64_t *event);
/* Runs everything queued on the caller's stream handle (cuStreamSynchronize). */
S3D_NODISCARD int s3d_device_emu_sync_handle(struct s3d_device *dev, int ordinal, uint64_t stream);
/* The host-accessible view of emulated device memory at dptr, NULL when dptr is not emulated
 * device memory. Tests only: what a kernel would see, without the deferred work. */
void *s3d_device_emu_view(uint64_t dptr);
/* 1 when something needed a context on emulated device ordinal since the last reset (a
 * stream, an allocation, make_current). */
int s3d_device_emu_ctx_used(int ordinal);
void s3d_device_emu_reset_ctx(void);
/* Bytes of "pinned" host memory allocated through the emulated backend and not freed. */
size_t s3d_device_emu_pinned_bytes(void);
/* Host ranges registered (pinned) through the emulated backend and not unregistered. */
long s3d_device_emu_registered(void);
/* Copies performed after their host memory was released (s3d_device_host_released) while
 * they were still queued, since the process started: each one a write into (or a read from)
 * memory its owner had given back. Never reset; tests compare before and after. */
long s3d_device_emu_stale_copies(void);

#endif
