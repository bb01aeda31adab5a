/* safetensors.h - the safetensors header: parse and validate, build, patch CRCs.
 *
 * Pure: no I/O, no threads, no global state; every function is safe to call from any thread
 * on distinct objects. Depends only on src/common.
 *
 * The layout, exactly as the reference (the `safetensors` Rust crate / Python package 0.8):
 *   u64 little-endian N | N bytes of UTF-8 JSON | data region
 * JSON: {"NAME": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 *        "__metadata__": {"key": "string value", ...}}   (metadata optional, may be null)
 * Offsets are relative to the data region, which starts at 8 + N. The tensors, sorted by
 * (begin, end), must cover the data region exactly: no gap, no overlap, no trailing bytes.
 * N is at most S3D_ST_MAX_HEADER (100,000,000). Writers pad the JSON with spaces so that
 * 8 + N is a multiple of 8.
 *
 * Where this parser deliberately differs from the reference (all stricter, none looser):
 *  - a key repeated anywhere in the JSON is rejected (S3D_EFMT_DUPLICATE); the reference
 *    rejects repeated tensor names and fields too, but silently keeps the last of a repeated
 *    __metadata__ key;
 *  - dimensions and offsets must fit in int64 (the reference allows up to 2^64-1, which only
 *    a shape with a 0 dimension can use);
 *  - "-0" in a shape is read as 0 (the reference rejects it as a float);
 *  - a NUL character (\u0000) in a key is rejected (S3D_EFMT_JSON; jansson cannot hold it).
 *
 * s3direct's per-tensor CRC32C lives in __metadata__:
 *   "s3direct.format": "1",
 *   "s3direct.crc32c": "{\"NAME\":\"1b2c3d4e\",...}"   (a JSON object, as a string value,
 *                                                     8 lowercase hex digits per tensor)
 *   "s3direct.generation": "<32 hex digits>"           (in each shard of a sharded
 *                                                     checkpoint: the save it belongs to)
 *   "s3direct.header_crc32c": "<8 lowercase hex digits>"
 * The last one protects the header itself (a flipped bit in a metadata value or a tensor's
 * CRC would otherwise pass): it is the CRC-32C of the N bytes of JSON (padding included)
 * with its own 8 digits read as "00000000", and it is always the first entry of the first
 * key, so that the JSON starts with S3D_ST_HEADER_CRC_PREFIX. s3d_st_parse checks it when
 * the JSON starts so; a start 1 to 3 bits away from that prefix is a damaged header too.
 * Headers of other writers (any other start) are not checked. docs/internals/checkpoint.md
 * has the definition for other implementations. */
#ifndef S3D_FORMAT_SAFETENSORS_H
#define S3D_FORMAT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common/dynbuf.h"
#include "s3direct/checkpoint.h"
#include "common/compiler.h"

#define S3D_ST_MAX_HEADER          100000000u /* the reference's MAX_HEADER_SIZE */
#define S3D_ST_OBJECT_SIZE_UNKNOWN UINT64_MAX
#define S3D_ST_META_FORMAT         "s3direct.format"
#define S3D_ST_META_CRC32C         "s3direct.crc32c"
#define S3D_ST_META_GENERATION     "s3direct.generation"
#define S3D_ST_META_HEADER_CRC32C  "s3direct.header_crc32c"
/* The first bytes of the JSON of every header s3direct writes with CRCs: the header's own
 * CRC-32C is the first __metadata__ entry, its 8 hex digits right after this prefix. */
#define S3D_ST_HEADER_CRC_PREFIX "{\"__metadata__\":{\"" S3D_ST_META_HEADER_CRC32C "\":\""
#define S3D_ST_RESERVED_PREFIX   "s3direct."

/* One tensor of a parsed header. */
struct s3d_st_tensor {
    char *name; /* NUL-terminated UTF-8 (a JSON name holds no NUL); owned by the
                   header, like shape */
    size_t name_len;
    int32_t dtype;      /* enum s3d_dtype, never S3D_DTYPE_INVALID */
    int32_t ndim;       /* 0 for a scalar (shape []) */
    int64_t *shape;     /* ndim entries, each >= 0; NULL when ndim == 0 */
    uint64_t begin;     /* data_offsets, relative to the data region start */
    uint64_t end;       /* end - begin == s3d_dtype_nbytes(dtype, shape) */
    int32_t has_crc32c; /* 1 when the s3direct.crc32c map names this tensor */
    uint32_t crc32c;
};

struct s3d_st_meta {
    char *key; /* NUL-terminated UTF-8 */
    char *value;
};

/* A parsed, validated header. Everything in it is owned by it. */
struct s3d_st_header {
    uint64_t json_len;   /* N */
    uint64_t data_start; /* 8 + N: absolute offset of the data region */
    uint64_t data_len;   /* bytes of the data region (end of the last tensor) */
    size_t n_tensors;
    struct s3d_st_tensor *tensors; /* sorted by (begin, end), ties in header order */
    size_t n_metadata;
    struct s3d_st_meta *metadata; /* __metadata__ in header order, s3direct.* keys
                                     included exactly as stored */
    uint32_t *by_name;            /* n_tensors indexes into tensors, sorted by name (strcmp);
                                     used by s3d_st_find */
    char *name_pool;              /* storage of the tensor names and shapes (internal) */
    int64_t *shape_pool;
};

/* Reads N from the first 8 bytes of an object and checks it as the reference does:
 * N <= S3D_ST_MAX_HEADER, and when object_size is known (not S3D_ST_OBJECT_SIZE_UNKNOWN)
 * object_size >= 8 and 8 + N <= object_size. Stores N in *json_len.
 * Returns 0 or S3D_EFMT_HEADER_SIZE (message says which bound). No NULL arguments. */
S3D_NODISCARD int s3d_st_header_len(const uint8_t first8[8], uint64_t object_size,
                                    uint64_t *json_len);

/* Parses and validates the N = json_len bytes of header JSON (need not be NUL-terminated;
 * trailing space padding is fine), first checking the header CRC when it has one (see the
 * top of the file). object_size: the whole object's size, or
 * S3D_ST_OBJECT_SIZE_UNKNOWN to skip the checks against it; when known the data region
 * must end exactly at object_size.
 * Returns 0 and fills *out, which the caller frees with s3d_st_header_free; on failure *out
 * is left empty (safe to free) and the return is one of:
 *   S3D_ECHECKSUM         the header's own CRC-32C (s3direct.header_crc32c) does not
 *                         match, or the key that holds it is damaged
 *   S3D_EFMT_HEADER_SIZE  json_len over the cap, or 8 + json_len past object_size
 *   S3D_EFMT_UTF8         the header is not valid UTF-8 (message: byte offset, context)
 *   S3D_EFMT_JSON         not JSON, or not a JSON object
 *   S3D_EFMT_DUPLICATE    a key appears twice (tensor name, field or metadata key)
 *   S3D_EFMT_FIELD        a tensor entry is not an object, or dtype/shape/data_offsets is
 *                         missing or of the wrong JSON type
 *   S3D_EFMT_DTYPE        unknown dtype string (case-sensitive, as the reference)
 *   S3D_EFMT_SHAPE        a dimension not a non-negative integer, or the size overflows
 *   S3D_EFMT_OFFSETS      data_offsets not exactly two non-negative integers, or end < begin
 *   S3D_EFMT_SIZE_MISMATCH end - begin != the size of shape x dtype, or a sub-byte tensor
 *                         whose bit count is not whole bytes
 *   S3D_EFMT_OVERLAP      a tensor starts before the previous one (in offset order) ends
 *   S3D_EFMT_HOLE         a gap between tensors, or bytes after the last tensor that are
 *                         still inside the object
 *   S3D_EFMT_TRUNCATED    the data region runs past object_size
 *   S3D_EFMT_METADATA     __metadata__ not an object (or null), a non-string value, or a
 *                         malformed s3direct.crc32c map (not an object of 8-hex-digit strings
 *                         naming tensors of this header)
 *   S3D_ENOMEM
 * The message names the tensor or field. Not thread-affine; json and out must not be NULL.
 * Cost: the top-level object is walked one entry at a time (each value parsed alone), so
 * memory is the result plus one entry: the parse adds under 2x json_len to the peak
 * (test_st_memory). Measured here on a 99.6 MB header of 1.45 M tensors (`s3direct info`,
 * /usr/bin/time): 2.9 s of CPU and 297 MB peak RSS with the header itself, where jansson's
 * whole-document parse took 10.0 s and 1.62 GB. */
S3D_NODISCARD int s3d_st_parse(const char *json, size_t json_len, uint64_t object_size,
                               struct s3d_st_header *out);

/* Frees everything in h and leaves it empty. Accepts NULL and an empty/zeroed header. */
void s3d_st_header_free(struct s3d_st_header *h);

/* Index into h->tensors of the tensor called name[0..len); S3D_ENOTENSOR if none
 * (records the error). O(log n). */
S3D_NODISCARD int s3d_st_find(const struct s3d_st_header *h, const char *name, size_t len,
                              size_t *index);

/* The value of metadata key, or NULL. O(n). */
const char *s3d_st_meta_get(const struct s3d_st_header *h, const char *key);

/* Builds a complete header for tensors t[0..n) laid out in the given order with no gaps:
 * the 8-byte length, the JSON, and space padding so that the result's length (= the data
 * region start) is a multiple of 8. out must be initialized (s3d_dynbuf_init, any max: it
 * is raised to 8 + S3D_ST_MAX_HEADER); it is reset first and holds exactly the header on
 * success.
 * meta[0..n_meta): caller metadata, written in order (keys starting with "s3direct." are
 * refused). with_crc: adds "s3direct.format":"1" and an "s3direct.crc32c" map with the
 * placeholder 00000000 for every tensor.
 * offsets (may be NULL): n entries, set to each tensor's begin relative to the data region.
 * crc_pos (may be NULL; needed with with_crc to patch): n entries, set to the byte position
 * in out->data of each tensor's 8 hex digits (0 when !with_crc). With with_crc the header
 * also gets its own CRC (s3direct.header_crc32c, first), computed over the result: after
 * s3d_st_patch_crc, call s3d_st_seal.
 * Only t[i].name, dtype, ndim, shape and nbytes are read (ptr/device are not).
 * Returns 0, or S3D_EINVAL (message names the tensor or key: NULL/empty/duplicate/non-UTF-8
 * name, invalid dtype, negative ndim, shape whose size overflows or is not whole bytes,
 * nbytes != s3d_dtype_nbytes, NULL/non-UTF-8/reserved metadata key, NULL/non-UTF-8 value,
 * duplicate metadata key), S3D_ETOOBIG (JSON over S3D_ST_MAX_HEADER), S3D_ENOMEM. On failure
 * out is empty. */
S3D_NODISCARD int s3d_st_build(const struct s3d_tensor_src *t, size_t n,
                               const struct s3d_metadata_entry *meta, size_t n_meta, int with_crc,
                               struct s3d_dynbuf *out, uint64_t *offsets, size_t *crc_pos);

/* s3d_st_build, plus "s3direct.generation": generation in __metadata__ when generation is
 * not NULL (after the s3direct.* keys, before the caller's): the save that a shard of a
 * sharded checkpoint belongs to, which its index records too (index.h). */
S3D_NODISCARD int s3d_st_build_gen(const struct s3d_tensor_src *t, size_t n,
                                   const struct s3d_metadata_entry *meta, size_t n_meta,
                                   int with_crc, const char *generation, struct s3d_dynbuf *out,
                                   uint64_t *offsets, size_t *crc_pos);

/* Computes the header's own CRC-32C (s3direct.header_crc32c, see the top of the file) over
 * the JSON and writes it in place: call it last, after every s3d_st_patch_crc. header
 * is what s3d_st_build made with with_crc (the 8-byte length first). */
void s3d_st_seal(char *header);

/* Writes crc as 8 lowercase hex digits at header[pos..pos+8), a position returned by
 * s3d_st_build in crc_pos. The header length never changes. header must not be NULL. */
void s3d_st_patch_crc(char *header, size_t pos, uint32_t crc);

/* 1 if s[0..len) is valid UTF-8 (as Rust's str::from_utf8: no overlongs, no surrogates,
 * nothing above U+10FFFF), else 0; *bad_at (may be NULL) gets the offset of the first bad
 * byte. */
int s3d_utf8_valid(const char *s, size_t len, size_t *bad_at);

#endif
