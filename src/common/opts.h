/* opts.h - reading a caller's versioned options struct, filling a caller's output struct.
 *
 * Every public options struct starts with uint32_t struct_size, and new fields are added at
 * the end: a caller built against an older header passes a shorter struct. Only the prefix it
 * covers is read; the fields it does not know stay zero, which means "default".
 *
 * Output structs the caller provides follow the same rule the other way (version.h): the
 * library fills a whole struct of its own, then copies only the prefix the caller's
 * struct_size covers. struct_size 0 means the first published layout, whose size is frozen
 * below (S3D_*_SIZE_V1): a field appended later must not change it. */
#ifndef S3D_COMMON_OPTS_H
#define S3D_COMMON_OPTS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "s3direct/s3direct.h"

/* Zeroes out (out_size bytes) and copies the prefix of src that src's struct_size covers
 * (struct_size 0 = the current size). src may be NULL (all defaults). */
static inline void s3d_opts_copy(void *out, size_t out_size, const void *src)
{
    uint32_t struct_size;
    size_t n = out_size;
    memset(out, 0, out_size);
    if (src == NULL)
        return;
    memcpy(&struct_size, src, sizeof(struct_size));
    if (struct_size != 0 && struct_size < n)
        n = struct_size;
    memcpy(out, src, n);
}

/* Bytes of a struct up to and including field, rounded up to the struct's alignment: the
 * sizeof the struct had when field was its last one. */
#define S3D_SIZE_THROUGH(type, field)                                                              \
    ((offsetof(type, field) + sizeof(((type *)0)->field) + _Alignof(type) - 1) / _Alignof(type) *  \
     _Alignof(type))

/* The first published (0.1) layouts: what struct_size 0 means. Frozen: when a field is
 * appended, these stay as they are. */
#define S3D_OBJECT_INFO_SIZE_V1   S3D_SIZE_THROUGH(struct s3d_object_info, checksum_crc32c)
#define S3D_CLIENT_CONFIG_SIZE_V1 S3D_SIZE_THROUGH(struct s3d_client_config, gpu_available)
#define S3D_ERROR_INFO_SIZE_V1    S3D_SIZE_THROUGH(struct s3d_error_info, request_id)
#define S3D_TENSOR_INFO_SIZE_V1   S3D_SIZE_THROUGH(struct s3d_tensor_info, crc32c)
#define S3D_WRITE_STATS_SIZE_V1   S3D_SIZE_THROUGH(struct s3d_write_stats, base_used)
#define S3D_READ_STATS_SIZE_V1    S3D_SIZE_THROUGH(struct s3d_read_stats, bytes_buffered)

/* Copies the filled struct full (full_size bytes, struct_size first) into the caller's out:
 * only the prefix out's struct_size covers (0 = v1_size), never more than full_size, and
 * never struct_size itself, which stays as the caller set it. */
static inline void s3d_out_copy(void *out, const void *full, size_t full_size, size_t v1_size)
{
    uint32_t struct_size;
    size_t n;
    memcpy(&struct_size, out, sizeof(struct_size));
    n = struct_size == 0 ? v1_size : struct_size;
    if (n > full_size)
        n = full_size;
    if (n > sizeof(struct_size))
        memcpy((char *)out + sizeof(struct_size), (const char *)full + sizeof(struct_size),
               n - sizeof(struct_size));
}

#endif
