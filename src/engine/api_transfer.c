/* api_transfer.c - what the public byte transfers of transfer.h share (api_transfer_int.h):
 * their arguments checked, their settings resolved (argument, else the client's: one
 * precedence, s3d_transfer_settings) and bounded, and the engine's upload options built from
 * them. The operations have one file each: downloads in api_download.c, uploads in
 * api_upload.c, copies in api_copy.c, upload streams in api_upload_stream.c. */
#include <inttypes.h>
#include <string.h>

#include "common/compiler.h"
#include "common/error.h"
#include "common/opts.h"
#include "engine/api_transfer_int.h"
#include "engine/client_impl.h"
#include "engine/xfer.h"
#include "s3/limits.h"
#include "s3/uri.h"
#include "s3direct/transfer.h"

void s3d_transfer_settings(const struct s3d_client *c, const struct s3d_transfer_options *t,
                           struct s3d_settings *out)
{
    out->max_conc = t->max_concurrency ? t->max_concurrency : c->max_concurrency;
    out->part_size = t->part_size ? t->part_size : c->part_size;
}

int s3d_topts_resolve(struct s3d_client *c, const struct s3d_transfer_options *in, struct topts *o)
{
    struct s3d_transfer_options t;
    struct s3d_settings set;
    s3d_opts_copy(&t, sizeof(t), in);
    s3d_transfer_settings(c, &t, &set);
    o->progress = t.progress;
    o->progress_user = t.progress_user;
    o->cancel = t.cancel;
    o->max_conc = set.max_conc;
    o->part_size = set.part_size;
    o->content_type = t.content_type;
    o->if_match = t.if_match;
    if (o->max_conc > S3D_MAX_CONCURRENCY)
        return s3d_fail(S3D_EINVAL, "max_concurrency %u is over %u", o->max_conc,
                        S3D_MAX_CONCURRENCY);
    o->max_conc = s3d_fd_clamp(o->max_conc);
    if (o->part_size > S3D_MAX_PART_SIZE)
        return s3d_fail(S3D_EINVAL, "part_size %" PRIu64 " is over 5 GiB", o->part_size);
    return 0;
}

int s3d_topts_check_args(struct s3d_client *c, const char *bucket, const char *key)
{
    int rc = s3d_client_check(c);
    if (rc < 0)
        return rc;
    if (bucket == NULL || key == NULL || key[0] == '\0')
        return s3d_fail(S3D_EINVAL, "bucket or key is empty");
    rc = s3d_bucket_name_check(bucket, strlen(bucket));
    /* 0 or S3D_EURI (s3/uri.h): the callers skip s3d_topts_resolve (which fills their topts) on any
     * non-zero result, then return only a negative one. */
    S3D_ASSERT(rc <= 0);
    return rc;
}

void s3d_topts_put(const struct topts *o, uint64_t total, const char *content_type,
                   struct s3d_put_options *po)
{
    memset(po, 0, sizeof(*po));
    po->content_type = content_type ? content_type : o->content_type;
    po->max_concurrency = o->max_conc;
    po->total_hint = total;
    po->progress = o->progress;
    po->progress_user = o->progress_user;
    po->cancel = o->cancel;
}
