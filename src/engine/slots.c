/* slots.c - a fixed set of reusable host buffers (contract in slots.h). */
#include "engine/slots.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"

int s3d_slots_init(struct s3d_slots *s, size_t n, uint64_t size)
{
    memset(s, 0, sizeof(*s));
    s->buf = calloc(n, sizeof(*s->buf));
    s->busy = calloc(n, sizeof(*s->busy));
    s->iov = calloc(n, sizeof(*s->iov));
    s->n = n;
    s->size = size;
    if (s->buf == NULL || s->busy == NULL || s->iov == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory");
    return 0;
}

void s3d_slots_free(struct s3d_slots *s)
{
    size_t i;
    for (i = 0; s->buf != NULL && i < s->n; i++)
        free(s->buf[i]);
    free(s->buf);
    free(s->busy);
    free(s->iov);
    memset(s, 0, sizeof(*s));
}

char *s3d_slot_get(struct s3d_slots *s)
{
    size_t i;
    for (i = 0; i < s->n; i++) {
        if (s->busy[i])
            continue;
        if (s->buf[i] == NULL) {
            s->buf[i] = malloc(s->size ? s->size : 1);
            if (s->buf[i] == NULL)
                return NULL;
        }
        s->busy[i] = 1;
        return s->buf[i];
    }
    return NULL;
}

void s3d_slot_put(struct s3d_slots *s, const void *p)
{
    size_t i;
    for (i = 0; i < s->n; i++)
        if (s->buf[i] == p)
            s->busy[i] = 0;
}

size_t s3d_slots_free_count(const struct s3d_slots *s)
{
    size_t i, k = 0;
    for (i = 0; i < s->n; i++)
        k += !s->busy[i];
    return k;
}

size_t s3d_slot_index(const struct s3d_slots *s, const void *p)
{
    size_t i;
    for (i = 0; i < s->n; i++)
        if (s->buf[i] == p)
            return i;
    return 0;
}

void s3d_slot_as_part(struct s3d_slots *s, char *buf, uint64_t len, uint32_t number,
                      struct s3d_put_part *part)
{
    struct iovec *v = &s->iov[s3d_slot_index(s, buf)];
    v->iov_base = buf;
    v->iov_len = (size_t)len;
    part->part_number = number;
    part->iov = v;
    part->iovcnt = 1;
    part->length = len;
    part->user = buf;
}
