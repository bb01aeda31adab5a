/* log.c - diagnostics: stderr lines controlled by S3D_LOG, or a callback (s3direct/log.h).
 *
 * The sink (callback + user pointer) is read under sink_lock and called outside it, so a slow
 * callback (the Python one takes the GIL) never blocks a thread that changes the sink. The
 * enabled level is one atomic int: max(S3D_LOG level, callback level). */
#include "common/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/env.h"

static int level_from_env(void)
{
    const char *v = s3d_env("S3D_LOG");
    if (v == NULL)
        return S3D_LOG_OFF;
    if (strcmp(v, "error") == 0)
        return S3D_LOG_ERROR;
    if (strcmp(v, "warn") == 0)
        return S3D_LOG_WARN;
    if (strcmp(v, "info") == 0)
        return S3D_LOG_INFO;
    if (strcmp(v, "debug") == 0)
        return S3D_LOG_DEBUG;
    return S3D_LOG_WARN;
}

/* Read once; a benign race (every thread computes the same value). */
static int cached_env_level = -1;
/* Effective level; -1 until first computed. */
static int cached_level = -1;

static pthread_mutex_t sink_lock = PTHREAD_MUTEX_INITIALIZER;
static s3d_log_fn sink_fn; /* under sink_lock */
static void *sink_user;    /* under sink_lock */
static int sink_level;     /* under sink_lock */

int s3d_log_env_level(void)
{
    int l = __atomic_load_n(&cached_env_level, __ATOMIC_RELAXED);
    if (l < 0) {
        l = level_from_env();
        __atomic_store_n(&cached_env_level, l, __ATOMIC_RELAXED);
    }
    return l;
}

void s3d_log_set_callback(s3d_log_fn fn, void *user, int max_level)
{
    int env = s3d_log_env_level();
    if (max_level < S3D_LOG_OFF)
        max_level = S3D_LOG_OFF;
    if (max_level > S3D_LOG_DEBUG)
        max_level = S3D_LOG_DEBUG;
    pthread_mutex_lock(&sink_lock);
    sink_fn = fn;
    sink_user = user;
    sink_level = fn != NULL ? max_level : S3D_LOG_OFF;
    __atomic_store_n(&cached_level, env > sink_level ? env : sink_level, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&sink_lock);
}

int s3d_log_enabled(int level)
{
    int l = __atomic_load_n(&cached_level, __ATOMIC_RELAXED);
    if (l < 0) {
        l = s3d_log_env_level();
        pthread_mutex_lock(&sink_lock);
        if (sink_level > l)
            l = sink_level;
        __atomic_store_n(&cached_level, l, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&sink_lock);
    }
    return level <= l;
}

void s3d_log(int level, const char *fmt, ...)
{
    static const char *const names[] = {"off", "error", "warn", "info", "debug"};
    char line[2048];
    char stamp[32];
    struct timespec ts;
    struct tm tm;
    time_t secs;
    s3d_log_fn fn;
    void *user;
    va_list ap;
    int n;

    pthread_mutex_lock(&sink_lock);
    fn = sink_fn;
    user = sink_user;
    pthread_mutex_unlock(&sink_lock);
    if (fn != NULL) {
        va_start(ap, fmt);
        n = vsnprintf(line, sizeof(line), fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        fn(user, level, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
        return;
    }
    /* ISO 8601 in UTC with milliseconds (2026-12-07T14:03:11.042Z), as the Python bridge
     * formats its lines (python/s3direct/_log.py): readable, and sortable across hosts. */
    clock_gettime(CLOCK_REALTIME, &ts);
    secs = ts.tv_sec;
    if (gmtime_r(&secs, &tm) == NULL ||
        strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm) == 0)
        snprintf(stamp, sizeof(stamp), "%ld", (long)ts.tv_sec);
    n = snprintf(line, sizeof(line), "[s3direct %s.%03ldZ %s] ", stamp, ts.tv_nsec / 1000000,
                 names[level < 0 || level > 4 ? 0 : level]);
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", line);
}
