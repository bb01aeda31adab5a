/* s3direct/log.h - where the library's diagnostic lines go.
 *
 * By default lines go to stderr, and only when the environment variable S3D_LOG is set to
 * error, warn, info or debug (read once, at the first line logged). A program may instead take
 * every line through a callback (the Python package forwards them to the `logging` module).
 * The library stays the only source of its lines; this header only chooses their sink. */
#ifndef S3DIRECT_LOG_H
#define S3DIRECT_LOG_H

#include <stddef.h>
#include "s3direct/version.h"

#ifdef __cplusplus
extern "C" {
#endif

enum s3d_log_level { S3D_LOG_OFF = 0, S3D_LOG_ERROR, S3D_LOG_WARN, S3D_LOG_INFO, S3D_LOG_DEBUG };

/* Receives one line: level (enum s3d_log_level), the text without a trailing newline or any
 * prefix (no time, no level), and its length; line is valid only during the call. Runs on the
 * thread that logged, often one of the library's worker threads, possibly several at once: it
 * must be thread-safe, return promptly and not call back into s3direct. */
typedef void (*s3d_log_fn)(void *user, int level, const char *line, size_t len);

/* Sends every line at or above the importance of max_level (S3D_LOG_WARN: errors and
 * warnings) to fn instead of stderr; S3D_LOG, when set, can only widen that to more detail.
 * fn NULL restores stderr and the S3D_LOG level alone. May be called at any time from any
 * thread; a line being logged while it is called may still reach the previous callback. */
S3D_API void s3d_log_set_callback(s3d_log_fn fn, void *user, int max_level);

/* The level S3D_LOG asks for (S3D_LOG_OFF when it is not set; an unknown value is warn). */
S3D_API int s3d_log_env_level(void);

#ifdef __cplusplus
}
#endif

#endif
