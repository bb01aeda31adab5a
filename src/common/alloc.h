/* alloc.h - allocation helpers with overflow checks. All return NULL on failure (the caller
 * reports S3D_ENOMEM); free functions accept NULL. */
#ifndef S3D_COMMON_ALLOC_H
#define S3D_COMMON_ALLOC_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include "common/compiler.h"

/* calloc(n, size) that fails (NULL) on n * size overflow instead of wrapping. */
static inline void *s3d_calloc(size_t n, size_t size)
{
    return calloc(n == 0 ? 1 : n, size == 0 ? 1 : size);
}

/* realloc of an array of n elements of size bytes; NULL (old block untouched) on overflow. */
static inline void *s3d_reallocarray(void *p, size_t n, size_t size)
{
    if (size != 0 && n > SIZE_MAX / size)
        return NULL;
    return realloc(p, n * size == 0 ? 1 : n * size);
}

/* strdup of s[0..len) with a terminating NUL. */
char *s3d_strndup(const char *s, size_t len);
/* strdup that accepts NULL (returns NULL). */
char *s3d_strdup(const char *s);

/* a + b and a * b on uint64_t; return 0 and store the result, or -1 on overflow. */
S3D_NODISCARD static inline int s3d_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return __builtin_add_overflow(a, b, out) ? -1 : 0;
}
S3D_NODISCARD static inline int s3d_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}

#endif
