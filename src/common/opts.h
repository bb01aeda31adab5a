/* opts.h - reading a caller's versioned options struct.
 *
 * Every public options struct starts with uint32_t struct_size, and new fields are added at
 * the end: a caller built against an older header passes a shorter struct. Only the prefix it
 * covers is read; the fields it does not know stay zero, which means "default". */
#ifndef S3D_COMMON_OPTS_H
#define S3D_COMMON_OPTS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

#endif
