/* ops_int.h - what the files of the S3 operations share (ops.c: objects and buckets;
 * ops_multipart.c: multipart uploads; ops_tagging.c: the CRC-32C s3direct keeps with an
 * object). Internal to src/s3; everyone else uses ops.h. */
#ifndef S3D_S3_OPS_INT_H
#define S3D_S3_OPS_INT_H

#include <stddef.h>
#include <sys/uio.h>

#include "common/compiler.h"
#include "common/error.h"
#include "s3/s3ctx.h"
#include "s3/s3doc.h"

#define S3D_OP_CT_OCTET "application/octet-stream"

/* The room an XML request body gets besides its elements: declaration, root element, and room
 * to spare. */
#define S3D_OP_XML_SLACK 4096

/* The detail of op's failure for s3d_fail_s3: operation, bucket, key, HTTP status, request
 * id (pointers into op). */
struct s3d_err_s3 s3d_op_detail(const struct s3d_s3_op *op);

/* Sets op's body to the n bytes at p through *iov, which (with p) must outlive the op. */
void s3d_op_set_body(struct s3d_s3_op *op, struct iovec *iov, const void *p, size_t n);

/* A 200 answer whose body is an <Error> document xe (CompleteMultipartUpload, CopyObject,
 * DeleteObjects can do that): records the failure it describes, op->s3_code set, and returns
 * its negative code. */
S3D_NODISCARD int s3d_op_error_in_body(struct s3d_s3_op *op, const struct s3d_xml_error *xe);

/* base64(MD5(p[0..n))) into out, NUL-terminated: the Content-MD5 that DeleteObjects and
 * PutObjectTagging require. S3D_ENOMEM (recorded) when MD5 fails. */
S3D_NODISCARD int s3d_op_content_md5(const void *p, size_t n, char out[32]);

#endif
