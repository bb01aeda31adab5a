/* alloc.c - small allocation helpers. */
#include "common/alloc.h"

#include <string.h>

char *s3d_strndup(const char *s, size_t len)
{
    char *p = malloc(len + 1);
    if (p == NULL)
        return NULL;
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

char *s3d_strdup(const char *s)
{
    return s == NULL ? NULL : s3d_strndup(s, strlen(s));
}
