/* s3direct/checkpoint.h - tensors in the safetensors layout, between GPU or host memory and
 * S3 objects or local files.
 *
 * A checkpoint is either one safetensors object/file, or a sharded checkpoint as Hugging Face
 * writes it: NAME.safetensors.index.json ({"metadata": {"total_size": N}, "weight_map":
 * {tensor: shard file}}) beside shards NAME-00001-of-0000N.safetensors.
 *
 * URIs: "s3://bucket/key" for S3, anything else is a local path.
 *
 * Memory: loads into host memory write straight into the destination; loads into GPU memory
 * and saves from it pass through the client's staging pool, so host memory used is bounded
 * by the pool's size whatever the checkpoint's size. */
#ifndef S3DIRECT_CHECKPOINT_H
#define S3DIRECT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include "s3direct/client.h"

#ifdef __cplusplus
extern "C" {
#endif

/* safetensors dtypes. Values are ABI. */
enum s3d_dtype {
    S3D_DTYPE_INVALID = 0,
    S3D_DTYPE_BOOL = 1,
    S3D_DTYPE_U8,
    S3D_DTYPE_I8,
    S3D_DTYPE_I16,
    S3D_DTYPE_U16,
    S3D_DTYPE_F16,
    S3D_DTYPE_BF16,
    S3D_DTYPE_I32,
    S3D_DTYPE_U32,
    S3D_DTYPE_F32,
    S3D_DTYPE_F64,
    S3D_DTYPE_I64,
    S3D_DTYPE_U64,
    S3D_DTYPE_C64,
    S3D_DTYPE_F8_E4M3,
    S3D_DTYPE_F8_E5M2,
    S3D_DTYPE_F8_E8M0,
    S3D_DTYPE_F8_E4M3FNUZ,
    S3D_DTYPE_F8_E5M2FNUZ,
    S3D_DTYPE_F4,
    S3D_DTYPE_F6_E2M3,
    S3D_DTYPE_F6_E3M2,
    S3D_DTYPE_COUNT_ /* not a dtype */
};

/* "BF16" for S3D_DTYPE_BF16; NULL for an invalid value. Static. */
S3D_API const char *s3d_dtype_name(int dtype);
/* The dtype named by name[0..len); S3D_DTYPE_INVALID if unknown. */
S3D_API int s3d_dtype_from_name(const char *name, size_t len);
/* Bits per element (1 for BOOL is not used: BOOL is 8; F4 is 4, F6_* are 6). 0 if invalid. */
S3D_API int s3d_dtype_bits(int dtype);
/* Bytes of a tensor of this dtype and shape, with the sub-byte rule of safetensors (the
 * element count times the bit width must be a multiple of 8). S3D_EFMT_SHAPE for a negative
 * dimension or an overflow, S3D_EFMT_SIZE_MISMATCH for a bit count that is not whole bytes. */
S3D_API int s3d_dtype_nbytes(int dtype, const int64_t *shape, int32_t ndim, uint64_t *out);

/* ---- reading -------------------------------------------------------------------------- */

struct s3d_reader;

/* One tensor of an open checkpoint. Strings and arrays are owned by the reader. An output
 * struct that can grow (version.h): set struct_size, or zero the struct; only its first
 * struct_size bytes are written. */
struct s3d_tensor_info {
    uint32_t struct_size; /* sizeof(struct s3d_tensor_info); 0 = the first version's size */
    const char *name;
    int32_t dtype; /* enum s3d_dtype */
    int32_t ndim;
    const int64_t *shape; /* ndim entries */
    uint64_t nbytes;
    uint32_t shard;     /* index into the reader's shards; 0 for a single file */
    uint64_t offset;    /* absolute byte offset of the data in its shard */
    int32_t has_crc32c; /* 1 when the writer stored a CRC32C for it */
    uint32_t crc32c;
};

/* Opens a checkpoint and reads its header(s) only: one ranged GET (or read) for a single
 * object, the index plus each shard's header for a sharded checkpoint. Everything read is
 * validated; a malformed header fails with its S3D_EFMT_* code and a message naming the tensor
 * or field. uri may name a .safetensors object/file or a .safetensors.index.json.
 * Versions: reads of an object carry the ETag it had at the open (another version fails with
 * S3D_ECHANGED); a local file stays open (one descriptor per shard, until s3d_reader_close),
 * so its reads return the file that was opened even if the path is replaced or removed. */
S3D_API int s3d_reader_open(struct s3d_client *c, const char *uri, struct s3d_reader **out);
/* Frees the reader and everything it owns (tensor names, shapes, metadata strings). NULL ok. */
S3D_API void s3d_reader_close(struct s3d_reader *r);

/* Tensors, in data-offset order within each shard, shards in index order. */
S3D_API size_t s3d_reader_num_tensors(const struct s3d_reader *r);
S3D_API int s3d_reader_tensor(const struct s3d_reader *r, size_t i, struct s3d_tensor_info *out);
/* Index of the tensor called name; S3D_ENOTENSOR if none. */
S3D_API int s3d_reader_find(const struct s3d_reader *r, const char *name, size_t *out_index);
/* __metadata__ entries (of the first shard for a sharded checkpoint), in header order. */
S3D_API size_t s3d_reader_num_metadata(const struct s3d_reader *r);
S3D_API int s3d_reader_metadata(const struct s3d_reader *r, size_t i, const char **key,
                                const char **value);
/* The value for key, or NULL. */
S3D_API const char *s3d_reader_metadata_get(const struct s3d_reader *r, const char *key);
S3D_API size_t s3d_reader_num_shards(const struct s3d_reader *r);
/* URI of shard i and the size of its header (8-byte length field included). */
S3D_API int s3d_reader_shard(const struct s3d_reader *r, size_t i, const char **uri,
                             uint64_t *header_bytes, uint64_t *object_bytes);
/* The version of shard i that this reader opened and reads from, as an opaque string: two
 * readers give the same string only if they read the same bytes (the ETag of an object; the
 * inode number, size and modification time of a local file, so that a file replaced by a
 * rename or written in place reads as another version). For processes that must agree on
 * one version before sharing what they read (load(group=)). NULL if r is NULL or i is out of
 * range; the string lives as long as the reader. */
S3D_API const char *s3d_reader_shard_version(const struct s3d_reader *r, size_t i);

/* Where one tensor (or a byte range of it) goes. */
struct s3d_tensor_dest {
    size_t index;        /* tensor index in the reader */
    void *ptr;           /* host pointer, or CUdeviceptr when device >= 0 */
    int32_t device;      /* -1: host memory; >= 0: CUDA device ordinal */
    uint64_t capacity;   /* bytes available at ptr; must be >= the bytes read */
    uint64_t src_offset; /* byte offset inside the tensor; 0 for the whole tensor */
    uint64_t length;     /* bytes to read from src_offset; 0 = to the end of the tensor */
};

enum s3d_file_io {
    S3D_FILE_IO_AUTO = 0,     /* cuFile for device memory when its driver opens, else DIRECT */
    S3D_FILE_IO_CUFILE = 1,   /* GPUDirect Storage; S3D_ECUFILE if it cannot be used, or the
                                  file cannot be reached directly (cuFile's compatibility mode
                                  is off unless S3D_CUFILE_COMPAT=1) */
    S3D_FILE_IO_DIRECT = 2,   /* O_DIRECT into the staging pool (buffered if the file system
                                  refuses O_DIRECT) */
    S3D_FILE_IO_BUFFERED = 3, /* plain page-cache reads and writes */
};

/* Tensors as they arrive (s3d_read_options.on_ready): dest is the index of a destination in
 * the array given to s3d_reader_read. Return 0 to go on; anything else stops the read, which
 * then fails with S3D_ECANCELED. */
typedef int (*s3d_ready_fn)(void *user, size_t dest);

struct s3d_read_options {
    uint32_t struct_size;     /* sizeof; 0 = current */
    s3d_progress_fn progress; /* bytes of tensor data done / total */
    void *progress_user;
    struct s3d_cancel *cancel;
    int32_t no_verify; /* 1: skip the per-tensor CRC32C check (it needs whole tensors) */
    int32_t file_io;   /* enum s3d_file_io */
    /* The caller's current CUstream on each device (PyTorch: torch.cuda.current_stream(d)):
     * copies into device memory of device k wait for the work queued on cuda_streams[k] so
     * far (kernels still reading the destination, or blocks the caching allocator recycled),
     * and that stream waits for the copies. Devices k >= n_cuda_streams (or all, when
     * cuda_streams is NULL) use cuda_stream; 0 is the legacy default stream. */
    uint64_t cuda_stream;
    const uint64_t *cuda_streams;
    uint32_t n_cuda_streams;
    /* Tensors as they arrive (NULL = off). Called on the thread that called s3d_reader_read,
     * once for each destination, as soon as all its bytes are in place: checked against the
     * stored CRC32C when the whole tensor is read (a mismatch fails the read with
     * S3D_ECHECKSUM before the destination is reported), and for device memory after its
     * copies completed on the device, so the caller may use it on any stream at once.
     * Destinations of zero bytes are reported first. With on_ready the requests start in the
     * order of the destination array (the first destination's bytes are asked for first),
     * so order the array as the tensors are needed; without it, in the order that finishes
     * the whole read soonest. Destinations not yet reported when the read fails hold
     * unspecified bytes. */
    s3d_ready_fn on_ready;
    void *ready_user;
    /* Filled with what the read did when it succeeds (NULL = not wanted). */
    struct s3d_read_stats *stats;
};

/* What a read did (s3d_read_options.stats). An output struct that can grow (version.h).
 * Local files only (0 when reading from S3): the tensor bytes delivered by each way of
 * reading a file, so that a caller can tell which ran. A cuFile read that fails and is read
 * again through the staging pool counts under the path that delivered the bytes. */
struct s3d_read_stats {
    uint32_t struct_size;    /* sizeof(struct s3d_read_stats); 0 = the first version's size */
    uint64_t bytes_cufile;   /* read by cuFile (GPUDirect Storage) straight into GPU memory */
    uint64_t bytes_direct;   /* read with O_DIRECT (into pool chunks, or into host memory) */
    uint64_t bytes_buffered; /* read through the page cache (mode BUFFERED, host destinations
                                outside DIRECT's aligned middle, O_DIRECT refused) */
};

/* Reads the chosen tensors in one planned transfer: only their byte ranges are fetched,
 * adjacent ranges coalesced, at most max_concurrency requests in flight. Returns when every
 * byte is in place: copies to GPU memory are complete (the device is synchronized with the
 * library's streams) before it returns, so the caller may use the tensors on any stream.
 * A whole tensor read is checked against its stored CRC32C unless no_verify; a mismatch fails
 * with S3D_ECHECKSUM naming the tensor and the object. */
S3D_API int s3d_reader_read(struct s3d_reader *r, const struct s3d_tensor_dest *dests, size_t n,
                            const struct s3d_read_options *opts);

/* ---- writing -------------------------------------------------------------------------- */

/* One tensor to save: a contiguous byte span in host or device memory. */
struct s3d_tensor_src {
    const char *name; /* UTF-8, unique within the checkpoint */
    int32_t dtype;
    int32_t ndim;
    const int64_t *shape;
    const void *ptr; /* host pointer, or CUdeviceptr when device >= 0 */
    int32_t device;  /* -1: host memory; >= 0: CUDA device ordinal */
    uint64_t nbytes; /* must equal s3d_dtype_nbytes(dtype, shape) */
};

struct s3d_metadata_entry {
    const char *key; /* NUL-terminated UTF-8; keys starting with "s3direct." are
                        reserved for the library */
    const char *value;
};

struct s3d_write_options {
    uint32_t struct_size;     /* sizeof; 0 = current */
    s3d_progress_fn progress; /* bytes of tensor data done / total */
    void *progress_user;
    struct s3d_cancel *cancel;
    uint64_t max_shard_size; /* 0: one object. Otherwise uri must end in
                                ".safetensors.index.json"; shards NAME-TOKEN-0000i-of-0000N
                                .safetensors (TOKEN: 16 hex digits, new for each save) are
                                written beside it, each holding at most this many data bytes
                                (a larger tensor gets a shard of its own) */
    int32_t no_checksum;     /* 1: store no per-tensor CRC32C */
    int32_t file_io;         /* enum s3d_file_io */
    uint64_t cuda_stream;    /* CUstream that produced the device tensors (0 = legacy default
                                stream): copies wait for the work queued on it so far */
    /* Per-device producer streams, as in s3d_read_options: the copies from device k wait for
     * cuda_streams[k] when k < n_cuda_streams, else for cuda_stream. */
    const uint64_t *cuda_streams;
    uint32_t n_cuda_streams;
    /* Incremental save: a previous checkpoint (an object, a file or a sharded index; NULL =
     * none). Tensors whose name, dtype, shape and CRC-32C equal the base's (its stored CRC)
     * are not sent again: on S3 their byte ranges become UploadPartCopy parts of the base
     * (each copied part proved against the bytes the client holds: the part's checksum or
     * MD5 ETag the server returns; a part that cannot be proved, or that the server refuses,
     * is sent instead); in a folder they are copied from the base file with
     * copy_file_range (checked by reading them back). The result is an ordinary, complete
     * checkpoint with no reference to the base. A base that is missing, on other storage,
     * without CRCs, or shares nothing usable gives a full save and one info log line
     * saying why; it never fails the save. Needs per-tensor checksums (not no_checksum). */
    const char *base;
    /* Filled with what the save did when it succeeds (NULL = not wanted). */
    struct s3d_write_stats *stats;
    /* Per-device producer events (CUevent handles), instead of the streams above: the copies
     * out of device memory of device k wait for cuda_events[k] when k < n_cuda_events and
     * cuda_events[k] != 0; any other device follows the stream rule above. The wait is on
     * the GPU (cuStreamWaitEvent on the library's own stream, made by the library before its
     * first copy from that device): it does not block the calling thread, and it waits for
     * the work the event captured when it was recorded, not for anything queued after it on
     * the stream it was recorded on. The caller must have recorded each event (cuEventRecord)
     * before the call, and must neither record it again nor destroy it until the write
     * returns; the library only waits on the events and never records, queries or destroys
     * them. An event not recorded yet completes at once (as cuStreamWaitEvent has it): the
     * copies do not wait. Events may belong to any context. An event the driver does not
     * know (destroyed, or not an event) fails the write with S3D_ECUDA naming
     * cuda_events[k], the destination left as it was. */
    const uint64_t *cuda_events;
    uint32_t n_cuda_events;
};

/* What a save did (s3d_write_options.stats). An output struct that can grow (version.h). */
struct s3d_write_stats {
    uint32_t struct_size;    /* sizeof(struct s3d_write_stats); 0 = the first version's size */
    uint64_t bytes_total;    /* bytes of every object or file written, headers included */
    uint64_t bytes_sent;     /* bytes the client uploaded or wrote itself (a part sent again
                                after a refused copy counts here) */
    uint64_t bytes_copied;   /* bytes copied from the base without passing through the client
                                (UploadPartCopy, copy_file_range) */
    uint64_t tensors_total;  /* tensors written */
    uint64_t tensors_reused; /* of those, equal in the base (name, dtype, shape, CRC-32C),
                                copied or not (too small a run is sent) */
    uint32_t parts_copied;   /* UploadPartCopy parts kept (S3), or copied ranges (files) */
    uint32_t copies_refused; /* copies the server refused or that could not be proved, sent
                                instead */
    int32_t base_used;       /* 1 when the base served at least one range; 0: a full save */
    /* Local files only (0 for S3): the tensor bytes the client wrote by each way of writing a
     * file (headers and bytes_copied not included). Saves never write with O_DIRECT (a
     * device tensor staged through the pool is written through the page cache), so
     * bytes_direct is 0 today. A cuFile write that fails and is written again through the
     * pool counts under bytes_buffered. */
    uint64_t bytes_cufile;   /* written by cuFile (GPUDirect Storage) from GPU memory */
    uint64_t bytes_direct;   /* written with O_DIRECT */
    uint64_t bytes_buffered; /* written through the page cache */
};

/* Writes tensors and metadata as a safetensors checkpoint. Tensors are laid out in the order
 * given; with a base, the tensors it holds unchanged go after the others, in the base's
 * order, so that they make long copied ranges (readers never depend on the order). Atomic: on S3
 * each object appears only when complete (a multipart upload is aborted on failure); for files,
 * each is written under a temporary name in the same folder, fsynced, and renamed. Sharded: the
 * shards go under names of this save's own (several at once to S3), the index replaces the old one
 * last, and only then are the old checkpoint's shards removed (docs/internals/checkpoint.md,
 * "Shards"). On failure the previous checkpoint at uri is left as it was; of two saves at once, the
 * last index written wins, whole. The tensors must not change until it returns: a multipart
 * upload reads its first part's device bytes twice, and fails with S3D_ECHANGED when they
 * differ. */
S3D_API int s3d_checkpoint_write(struct s3d_client *c, const char *uri,
                                 const struct s3d_tensor_src *tensors, size_t n,
                                 const struct s3d_metadata_entry *metadata, size_t n_metadata,
                                 const struct s3d_write_options *opts);

#ifdef __cplusplus
}
#endif
#endif
