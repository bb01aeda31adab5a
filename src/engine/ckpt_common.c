/* ckpt_common.c - URI classification and progress accumulation for checkpoints. */
#include "engine/ckpt_common.h"

#include <string.h>

#include "common/error.h"
#include "s3direct/object.h"

int s3d_loc_parse(const char *uri, struct s3d_loc *loc)
{
    int rc;
    memset(loc, 0, sizeof(*loc));
    if (uri == NULL || *uri == '\0')
        return s3d_fail(S3D_EINVAL, "empty checkpoint path");
    loc->path = uri;
    if (strncmp(uri, "s3://", 5) != 0)
        return 0;
    loc->is_s3 = 1;
    rc = s3d_uri_parse(uri, loc->bucket, sizeof(loc->bucket), loc->key, sizeof(loc->key));
    if (rc < 0)
        return rc;
    if (loc->key[0] == '\0')
        return s3d_fail(S3D_EURI, "%s: names a bucket, not an object", uri);
    return 0;
}

int s3d_str_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

int s3d_progress_acc_cb(void *user, uint64_t done, uint64_t total)
{
    const struct s3d_progress_acc *acc = user;
    (void)total;
    if (acc->fn == NULL)
        return 0;
    return acc->fn(acc->user, acc->base + done, acc->total);
}
