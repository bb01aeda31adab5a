/* ops_tagging.c - the S3 side of the CRC-32C s3direct keeps with the objects it writes (see
 * ops.h, and engine/own_checksum.c for its use): what a response tells of it, and the object
 * tag of a multipart upload, PutObjectTagging and GetObjectTagging. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dynbuf.h"
#include "common/error.h"
#include "s3/ops.h"
#include "s3/ops_int.h"
#include "s3/s3doc.h"

void s3d_op_sums_get(const struct s3d_s3_op *op, struct s3d_op_sums *out)
{
    snprintf(out->meta_crc32c, sizeof(out->meta_crc32c), "%s", op->req.resp.meta_crc32c);
    out->tag_count = op->req.resp.tagging_count;
}

int s3d_op_put_crc_tag(struct s3d_s3ctx *ctx, const char *bucket, const char *key,
                       const char *value)
{
    struct s3d_dynbuf body;
    struct s3d_s3_op op;
    struct iovec iov;
    char md5[32];
    int rc;

    s3d_dynbuf_init(&body, S3D_OP_XML_SLACK);
    s3d_op_init(&op, "PutObjectTagging", "PUT", bucket, key);
    rc = s3d_xml_build_tagging(S3D_OP_CRC_TAG, value, &body);
    if (rc == 0)
        rc = s3d_op_content_md5(body.data, body.len, md5);
    if (rc == 0) {
        s3d_s3_op_add_query(&op, "tagging", "");
        s3d_s3_op_add_header(&op, "Content-MD5", md5);
        s3d_s3_op_add_header(&op, "Content-Type", "application/xml");
        s3d_op_set_body(&op, &iov, body.data, body.len);
        rc = s3d_s3_op_run(ctx, &op);
    }
    s3d_s3_op_cleanup(&op);
    s3d_dynbuf_free(&body);
    return rc;
}

int s3d_op_get_crc_tag(struct s3d_s3ctx *ctx, const char *bucket, const char *key, char *value,
                       size_t cap)
{
    struct s3d_s3_op op;
    char *v = NULL;
    int rc;

    value[0] = '\0';
    s3d_op_init(&op, "GetObjectTagging", "GET", bucket, key);
    s3d_s3_op_add_query(&op, "tagging", "");
    rc = s3d_s3_op_run(ctx, &op);
    if (rc == 0) {
        rc = s3d_xml_parse_tag(op.req.resp.body.data ? op.req.resp.body.data : "",
                               op.req.resp.body.len, S3D_OP_CRC_TAG, &v);
        if (rc < 0)
            s3d_fail_prefix(rc, "GetObjectTagging s3://%s/%s", bucket, key);
    }
    if (rc == 0 && v != NULL && strlen(v) < cap)
        memcpy(value, v, strlen(v) + 1);
    free(v);
    s3d_s3_op_cleanup(&op);
    return rc;
}
