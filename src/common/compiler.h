/* compiler.h - small portability and testing macros. */
#ifndef S3D_COMMON_COMPILER_H
#define S3D_COMMON_COMPILER_H

/* File-local functions that unit tests call: static in the library, visible (but still not
 * exported from the shared library, whose visibility is hidden) in test builds. */
#ifdef S3D_TESTING
#define S3D_STATIC
#else
#define S3D_STATIC static
#endif

#define S3D_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define S3D_MIN(a, b)    ((a) < (b) ? (a) : (b))
#define S3D_MAX(a, b)    ((a) > (b) ? (a) : (b))

#endif
