/* dynbuf.c - capped growable buffer. */
#include "common/dynbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

void s3d_dynbuf_init(struct s3d_dynbuf *b, size_t max)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = max;
}

static int grow(struct s3d_dynbuf *b, size_t need)
{
    size_t cap = b->cap ? b->cap : 256;
    char *p;
    while (cap < need)
        cap = cap > ((size_t)-1) / 2 ? need : cap * 2;
    if (cap > b->max + 1)
        cap = b->max + 1;
    p = realloc(b->data, cap);
    if (p == NULL)
        return S3D_ENOMEM;
    b->data = p;
    b->cap = cap;
    return 0;
}

int s3d_dynbuf_append(struct s3d_dynbuf *b, const void *data, size_t n)
{
    int rc;
    if (n > b->max - b->len || b->len > b->max)
        return S3D_ETOOBIG;
    if (b->len + n + 1 > b->cap) {
        rc = grow(b, b->len + n + 1);
        if (rc < 0)
            return rc;
    }
    if (n > 0)
        memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int s3d_dynbuf_appendf(struct s3d_dynbuf *b, const char *fmt, ...)
{
    char small[512];
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0)
        return S3D_EINVAL;
    if ((size_t)n < sizeof(small))
        return s3d_dynbuf_append(b, small, (size_t)n);
    {
        char *big = malloc((size_t)n + 1);
        int rc;
        if (big == NULL)
            return S3D_ENOMEM;
        va_start(ap, fmt);
        vsnprintf(big, (size_t)n + 1, fmt, ap);
        va_end(ap);
        rc = s3d_dynbuf_append(b, big, (size_t)n);
        free(big);
        return rc;
    }
}

void s3d_dynbuf_reset(struct s3d_dynbuf *b)
{
    b->len = 0;
    if (b->data != NULL)
        b->data[0] = '\0';
}

void s3d_dynbuf_free(struct s3d_dynbuf *b)
{
    free(b->data);
    s3d_dynbuf_init(b, b->max);
}

char *s3d_dynbuf_take(struct s3d_dynbuf *b, size_t *len)
{
    char *p = b->data;
    if (len != NULL)
        *len = b->len;
    s3d_dynbuf_init(b, b->max);
    return p;
}
