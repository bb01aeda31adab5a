/* log.h - diagnostics to stderr, off unless S3D_LOG=error|warn|info|debug is set, or to the
 * callback set by s3d_log_set_callback (include/s3direct/log.h). Thread-safe (one fprintf or
 * one callback per line). */
#ifndef S3D_COMMON_LOG_H
#define S3D_COMMON_LOG_H

#include "s3direct/log.h"

int s3d_log_enabled(int level);
void s3d_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define S3D_DEBUG(...)                                                                             \
    do {                                                                                           \
        if (s3d_log_enabled(S3D_LOG_DEBUG))                                                        \
            s3d_log(S3D_LOG_DEBUG, __VA_ARGS__);                                                   \
    } while (0)
#define S3D_INFO(...)                                                                              \
    do {                                                                                           \
        if (s3d_log_enabled(S3D_LOG_INFO))                                                         \
            s3d_log(S3D_LOG_INFO, __VA_ARGS__);                                                    \
    } while (0)
#define S3D_WARN(...)                                                                              \
    do {                                                                                           \
        if (s3d_log_enabled(S3D_LOG_WARN))                                                         \
            s3d_log(S3D_LOG_WARN, __VA_ARGS__);                                                    \
    } while (0)

#endif
