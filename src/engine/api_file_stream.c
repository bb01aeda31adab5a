/* api_file_stream.c - s3d_file_stream_*: the library's temporary-file commit (tmpfile.c) as
 * public API, so that writers outside the library (the Python package's local writer) commit
 * their files exactly as downloads and local checkpoint saves do, with no second copy of the
 * rules (name, mode, sweep of leftovers, fsync, rename, fsync of the folder). */
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/error.h"
#include "engine/tmpfile.h"
#include "s3direct/transfer.h"

struct s3d_file_stream {
    char *path;
    struct s3d_tmpfile tmp; /* emptied by finish, whatever its outcome */
};

int s3d_file_stream_new(const char *path, struct s3d_file_stream **out)
{
    struct s3d_file_stream *s;
    int rc;

    if (out == NULL)
        return s3d_fail(S3D_EINVAL, "s3d_file_stream_new: out is NULL");
    *out = NULL;
    if (path == NULL || path[0] == '\0')
        return s3d_fail(S3D_EINVAL, "s3d_file_stream_new: path is empty");
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return s3d_fail(S3D_ENOMEM, "write %s: out of memory", path);
    s->tmp.fd = -1;
    s->path = s3d_strdup(path);
    if (s->path == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "write %s: out of memory", path);
        goto fail;
    }
    rc = s3d_tmpfile_create(path, 0, &s->tmp);
    if (rc < 0)
        goto fail;
    *out = s;
    return 0;
fail:
    s3d_file_stream_free(s);
    return rc;
}

int s3d_file_stream_fd(const struct s3d_file_stream *s)
{
    return s == NULL ? -1 : s->tmp.fd;
}

int s3d_file_stream_finish(struct s3d_file_stream *s)
{
    if (s == NULL)
        return s3d_fail(S3D_EINVAL, "s3d_file_stream_finish: stream is NULL");
    if (s->tmp.fd < 0)
        return s3d_fail(S3D_EINVAL, "commit %s: already finished", s->path);
    return s3d_tmpfile_commit(&s->tmp, s->path);
}

void s3d_file_stream_free(struct s3d_file_stream *s)
{
    if (s == NULL)
        return;
    s3d_tmpfile_discard(&s->tmp);
    free(s->path);
    free(s);
}
