/* xfer_get.c - the GET conveniences on top of the transfer loop (xfer.h): a download's
 * ranges planned as jobs, a buffer of an object already known downloaded in them, and the
 * first GET of a download, which also tells what a HEAD would; where each attempt of a range
 * writes, and what a broken one keeps. */
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/compiler.h"
#include "common/error.h"
#include "engine/client_impl.h"
#include "engine/xfer.h"
#include "s3/ops.h"

void s3d_xfer_job_sink(struct s3d_s3_op *op, const struct s3d_get_job *j)
{
    op->to_fd = j->to_fd;
    op->dst_fd = j->fd;
    op->dst_off = j->fd_off + j->received;
    op->dst = j->to_fd ? NULL : (char *)j->dst + j->received;
    op->dst_cap = j->length - j->received;
    op->sum_body = j->sum;
    op->crc_seed = j->crc;
}

void s3d_xfer_job_keep(struct s3d_get_job *j, const struct s3d_http_resp *r)
{
    /* Only the bytes written whole are counted (http.c): none past them is in the sum. */
    j->received += r->received;
    j->crc = r->crc;
}

int s3d_xfer_make_jobs(const char *bucket, const char *key, const char *if_match,
                       uint64_t object_size, uint64_t offset, uint64_t len, uint64_t part,
                       struct s3d_get_job **out, size_t *n_out)
{
    uint64_t n = len == 0 ? 0 : (len + part - 1) / part, i;
    struct s3d_get_job *jobs;
    *out = NULL;
    *n_out = 0;
    if (n == 0)
        return 0;
    if (n > SIZE_MAX / sizeof(*jobs))
        return s3d_fail(S3D_ETOOBIG, "too many ranges");
    jobs = calloc((size_t)n, sizeof(*jobs));
    if (jobs == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory planning %" PRIu64 " ranges", n);
    for (i = 0; i < n; i++) {
        jobs[i].bucket = bucket;
        jobs[i].key = key;
        jobs[i].if_match = if_match;
        jobs[i].object_size = object_size;
        jobs[i].offset = offset + i * part;
        jobs[i].length = S3D_MIN(part, len - i * part);
    }
    *out = jobs;
    *n_out = (size_t)n;
    return 0;
}

int s3d_xfer_get_buffer(struct s3d_client *c, const char *bucket, const char *key,
                        const char *if_match, uint64_t object_size, uint64_t offset, uint64_t len,
                        void *dst)
{
    struct s3d_get_job *jobs = NULL;
    size_t n;
    int rc = s3d_xfer_make_jobs(bucket, key, if_match, object_size, offset, len, c->part_size,
                                &jobs, &n);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n; i++)
        jobs[i].dst = (char *)dst + (jobs[i].offset - offset);
    if (n > 0)
        rc = s3d_xfer_get(c, jobs, n, NULL, 0, NULL, NULL, NULL);
    free(jobs);
    return rc;
}

int s3d_xfer_get_first(struct s3d_client *c, const char *bucket, const char *key, uint64_t offset,
                       uint64_t want, void *dst, uint64_t *got, struct s3d_object_info *info,
                       struct s3d_op_sums *sums, const char *if_match, struct s3d_cancel *cancel)
{
    struct s3d_get_job job;
    int rc;

    *got = 0;
    memset(info, 0, sizeof(*info));
    if (sums != NULL)
        memset(sums, 0, sizeof(*sums));
    memset(&job, 0, sizeof(job));
    job.bucket = bucket;
    job.key = key;
    job.offset = offset;
    job.length = want;
    job.dst = dst;
    job.first = info;
    job.first_sums = sums;
    job.if_match = if_match;
    rc = s3d_xfer_get(c, &job, 1, NULL, 1, NULL, NULL, cancel);
    if (rc == S3D_ERANGE) {
        /* At or past the end (an empty object answers every range with 416). */
        rc = s3d_op_head(&c->s3, bucket, key, info);
        if (rc == 0 && if_match != NULL && if_match[0] != '\0' && strcmp(info->etag, if_match) != 0)
            rc = s3d_fail(S3D_ECHANGED,
                          "GetObject s3://%s/%s: the object changed (ETag %s, now %s): open it "
                          "again",
                          bucket, key, if_match, info->etag);
        if (rc == 0 && offset > info->size)
            rc = s3d_fail(S3D_ERANGE,
                          "s3://%s/%s: offset %" PRIu64 " is past the end (%" PRIu64 " bytes)",
                          bucket, key, offset, info->size);
        return rc;
    }
    if (rc == 0)
        *got = job.length;
    return rc;
}
