/* log.c - stderr diagnostics controlled by S3D_LOG. */
#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int level_from_env(void)
{
    const char *v = getenv("S3D_LOG");
    if (v == NULL || *v == '\0')
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
static int cached_level = -1;

int s3d_log_enabled(int level)
{
    int l = __atomic_load_n(&cached_level, __ATOMIC_RELAXED);
    if (l < 0) {
        l = level_from_env();
        __atomic_store_n(&cached_level, l, __ATOMIC_RELAXED);
    }
    return level <= l;
}

void s3d_log(int level, const char *fmt, ...)
{
    static const char *const names[] = {"off", "error", "warn", "info", "debug"};
    char line[2048];
    struct timespec ts;
    va_list ap;
    int n;
    clock_gettime(CLOCK_REALTIME, &ts);
    n = snprintf(line, sizeof(line), "[s3direct %ld.%03ld %s] ", (long)ts.tv_sec,
                 ts.tv_nsec / 1000000, names[level < 0 || level > 4 ? 0 : level]);
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", line);
}
