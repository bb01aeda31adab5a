/* env.c - the one reader of the process environment (env.h). */
#include "common/env.h"

#include <errno.h>
#include <stdlib.h>

const char *s3d_env(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : NULL;
}

int s3d_env_int(const char *name, int64_t lo, int64_t hi, int64_t *out)
{
    const char *v = s3d_env(name);
    char *end;
    long long n;
    if (v == NULL)
        return 0;
    errno = 0;
    n = strtoll(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || n < lo || n > hi)
        return -1;
    *out = (int64_t)n;
    return 1;
}
