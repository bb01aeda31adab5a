/* jsonbuf.c - jansson output into a capped dynbuf. */
#include "format/jsonbuf.h"

#include "s3direct/errors.h"

struct dump_ctx {
    struct s3d_dynbuf *b;
    int rc;
};

static int dump_cb(const char *buf, size_t size, void *data)
{
    struct dump_ctx *d = data;
    int rc = s3d_dynbuf_append(d->b, buf, size);
    if (rc < 0) {
        d->rc = rc;
        return -1;
    }
    return 0;
}

int s3d_json_dump_to(const json_t *root, size_t flags, struct s3d_dynbuf *out)
{
    struct dump_ctx dc = {out, 0};
    if (json_dump_callback(root, dump_cb, &dc, flags) < 0)
        return dc.rc < 0 ? dc.rc : S3D_ENOMEM;
    return 0;
}
