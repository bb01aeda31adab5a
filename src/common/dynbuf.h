/* dynbuf.h - a growable byte buffer with a hard cap (after curl's dynbuf).
 *
 * Everything that grows with outside input (XML bodies, JSON headers, HTTP header lines) goes
 * through one of these, so a hostile peer hits the cap and gets S3D_ETOOBIG, never an OOM.
 * The content is always NUL-terminated (the NUL is not counted in len). */
#ifndef S3D_COMMON_DYNBUF_H
#define S3D_COMMON_DYNBUF_H

#include <stddef.h>
#include "common/compiler.h"

struct s3d_dynbuf {
    char *data; /* NULL until the first append */
    size_t len;
    size_t cap; /* allocated bytes, NUL included */
    size_t max; /* len may never exceed this */
};

void s3d_dynbuf_init(struct s3d_dynbuf *b, size_t max);
/* Appends n bytes; S3D_ETOOBIG when len would pass max (nothing appended), S3D_ENOMEM. */
S3D_NODISCARD int s3d_dynbuf_append(struct s3d_dynbuf *b, const void *data, size_t n);
S3D_NODISCARD int s3d_dynbuf_appendf(struct s3d_dynbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void s3d_dynbuf_reset(struct s3d_dynbuf *b); /* len = 0, memory kept */
void s3d_dynbuf_free(struct s3d_dynbuf *b);  /* back to the initial state, max kept */
/* Gives the caller the data (malloc'ed, NUL-terminated; NULL if empty) and resets b. */
char *s3d_dynbuf_take(struct s3d_dynbuf *b, size_t *len);

#endif
