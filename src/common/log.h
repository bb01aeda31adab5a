/* log.h - diagnostics to stderr, off unless S3D_LOG=error|warn|info|debug is set.
 * Thread-safe (one fprintf per line). */
#ifndef S3D_COMMON_LOG_H
#define S3D_COMMON_LOG_H

enum s3d_log_level { S3D_LOG_OFF = 0, S3D_LOG_ERROR, S3D_LOG_WARN, S3D_LOG_INFO, S3D_LOG_DEBUG };

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
