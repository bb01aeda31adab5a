/* compiler.h - small portability macros. */
#ifndef S3D_COMMON_COMPILER_H
#define S3D_COMMON_COMPILER_H

#define S3D_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define S3D_MIN(a, b)    ((a) < (b) ? (a) : (b))
#define S3D_MAX(a, b)    ((a) > (b) ? (a) : (b))

#endif
