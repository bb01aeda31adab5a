/* ops_multipart.c - the S3 operations of multipart uploads (see ops.h): create, the parts
 * (sent and copied, built here and driven by engine/xfer.c), the one body-checksum probe,
 * complete and abort; and the ETag a completed upload gets. */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <openssl/evp.h>

#include "common/compiler.h"
#include "common/crc32c.h"
#include "common/error.h"
#include "common/log.h"
#include "s3/ops.h"
#include "s3/ops_int.h"
#include "s3/retry.h"
#include "s3/s3doc.h"
#include "s3/uri.h"

/* The cap of a CompleteMultipartUpload body: a <Part> with its number, ETag and CRC32C is well
 * under COMPLETE_PART_XML, besides S3D_OP_XML_SLACK. */
#define COMPLETE_PART_XML 256

void s3d_op_upload_part_init(struct s3d_s3_op *op, const char *bucket, const char *key,
                             const char *upload_id, uint32_t part_number, char *number_buf,
                             const struct iovec *iov, int iovcnt, uint64_t length,
                             const char *crc_b64)
{
    s3d_op_init(op, "UploadPart", "PUT", bucket, key);
    snprintf(number_buf, 12, "%u", part_number);
    s3d_s3_op_add_query(op, "partNumber", number_buf);
    s3d_s3_op_add_query(op, "uploadId", upload_id);
    op->iov = iov;
    op->iovcnt = iovcnt;
    op->body_len = length;
    if (crc_b64 != NULL && crc_b64[0] != '\0')
        s3d_s3_op_add_header(op, "x-amz-checksum-crc32c", crc_b64);
}

int s3d_op_create_multipart(struct s3d_s3ctx *ctx, const char *bucket, const char *key,
                            const char *content_type, char **upload_id)
{
    struct s3d_s3_op op;
    int rc;
    *upload_id = NULL;
    s3d_op_init(&op, "CreateMultipartUpload", "POST", bucket, key);
    s3d_s3_op_add_query(&op, "uploads", "");
    s3d_s3_op_add_header(&op, "Content-Type", content_type ? content_type : S3D_OP_CT_OCTET);
    s3d_s3_op_add_header(&op, "x-amz-checksum-algorithm", "CRC32C");
    rc = s3d_s3_op_run(ctx, &op);
    if (rc == 0) {
        rc = s3d_xml_parse_initiate(op.req.resp.body.data ? op.req.resp.body.data : "",
                                    op.req.resp.body.len, upload_id);
        if (rc < 0)
            s3d_fail_prefix(rc, "CreateMultipartUpload s3://%s/%s", bucket, key);
    }
    s3d_s3_op_cleanup(&op);
    return rc;
}

/* The S3 codes a server answers a body whose x-amz-checksum-crc32c does not match with: AWS
 * S3 and Ceph RGW (19+) BadDigest, MinIO XAmzContentChecksumMismatch, others InvalidDigest or
 * InvalidChecksum. */
static int is_checksum_refusal(const char *code)
{
    static const char *const codes[] = {"BadDigest", "XAmzContentChecksumMismatch", "InvalidDigest",
                                        "InvalidChecksum"};
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        if (strcmp(code, codes[i]) == 0)
            return 1;
    return 0;
}

void s3d_op_probe_body_crc(struct s3d_s3ctx *ctx, const char *bucket, const char *key,
                           const char *upload_id)
{
    static const char byte[1] = {'s'};
    struct iovec iov = {.iov_base = (void *)byte, .iov_len = 1};
    struct s3d_s3_op op;
    char number[12], wrong[S3D_CRC32C_B64_LEN];
    int expected = S3D_BODY_CRC_UNKNOWN, rc, state;

    if (ctx->cfg.payload_signing != S3D_PAYLOAD_AUTO ||
        !atomic_compare_exchange_strong(&ctx->body_crc, &expected, S3D_BODY_CRC_PROBING))
        return;
    /* The CRC-32C of another byte; the body itself is signed, so nothing but the checksum can
     * be refused. Part 1: every upload sends its own part 1 after this one (the transfer starts
     * once the probe is answered), which replaces it; a part left out of the completion list
     * would fail it (Ceph RGW 16 wants every uploaded part listed). */
    s3d_crc32c_base64(s3d_crc32c(0, "t", 1), wrong);
    s3d_op_upload_part_init(&op, bucket, key, upload_id, 1, number, &iov, 1, 1, wrong);
    op.operation = "UploadPart (checksum probe)";
    rc = s3d_s3_op_run(ctx, &op);
    if (rc == 0)
        state = S3D_BODY_CRC_IGNORED;
    else if (is_checksum_refusal(op.s3_code))
        state = S3D_BODY_CRC_CHECKED;
    else if (op.req.resp.status >= 400 && op.req.resp.status < 500)
        state = S3D_BODY_CRC_IGNORED; /* refused for another reason: do not ask again */
    else
        state = S3D_BODY_CRC_UNKNOWN; /* no answer: the next upload asks again */
    s3d_s3_op_cleanup(&op);
    atomic_store(&ctx->body_crc, state);
    if (state == S3D_BODY_CRC_CHECKED)
        S3D_INFO("s3://%s/%s: the server refuses a wrong x-amz-checksum-crc32c: bodies that carry "
                 "one go as UNSIGNED-PAYLOAD from now on",
                 bucket, key);
    else if (state == S3D_BODY_CRC_IGNORED)
        S3D_INFO("s3://%s/%s: the server stored a body with a wrong x-amz-checksum-crc32c: every "
                 "body stays signed (SHA-256)",
                 bucket, key);
}

int s3d_op_copy_source(struct s3d_dynbuf *out, const char *bucket, const char *key)
{
    int rc;
    s3d_dynbuf_reset(out);
    rc = s3d_dynbuf_append(out, "/", 1);
    if (rc == 0)
        rc = s3d_uri_encode(out, bucket, strlen(bucket), 1);
    if (rc == 0)
        rc = s3d_dynbuf_append(out, "/", 1);
    if (rc == 0)
        rc = s3d_uri_encode(out, key, strlen(key), 0);
    if (rc == 0)
        rc = s3d_dynbuf_append(out, "", 1); /* the NUL, not counted */
    if (rc == 0)
        out->len--;
    return rc;
}

void s3d_op_upload_part_copy_init(struct s3d_s3_op *op, const char *bucket, const char *key,
                                  const char *upload_id, uint32_t part_number, char *number_buf,
                                  const char *copy_source, uint64_t offset, uint64_t length,
                                  char *range_buf, const char *if_match)
{
    s3d_op_init(op, "UploadPartCopy", "PUT", bucket, key);
    op->req.quiet_len = length; /* no byte flows while the server copies: http.h */
    snprintf(number_buf, 12, "%u", part_number);
    s3d_s3_op_add_query(op, "partNumber", number_buf);
    s3d_s3_op_add_query(op, "uploadId", upload_id);
    snprintf(range_buf, 64, "bytes=%" PRIu64 "-%" PRIu64, offset, offset + length - 1);
    s3d_s3_op_add_header(op, "x-amz-copy-source", copy_source);
    s3d_s3_op_add_header(op, "x-amz-copy-source-range", range_buf);
    if (if_match != NULL && if_match[0] != '\0')
        s3d_s3_op_add_header(op, "x-amz-copy-source-if-match", if_match);
}

int s3d_op_copy_part_result(struct s3d_s3_op *op, char etag[80], char crc32c[16])
{
    struct s3d_xml_copy_part res;
    struct s3d_xml_error xe;
    int rc;
    memset(&xe, 0, sizeof(xe));
    etag[0] = crc32c[0] = '\0';
    rc = s3d_xml_parse_copy_part(op->req.resp.body.data ? op->req.resp.body.data : "",
                                 op->req.resp.body.len, &res, &xe);
    if (rc == 1) {
        rc = s3d_op_error_in_body(op, &xe);
        s3d_xml_error_free(&xe);
        return rc;
    }
    if (rc < 0) {
        s3d_fail_prefix(rc, "UploadPartCopy s3://%s/%s", op->bucket, op->key);
        return rc;
    }
    snprintf(etag, 80, "%s", res.etag);
    if (res.crc32c != NULL)
        snprintf(crc32c, 16, "%s", res.crc32c);
    s3d_xml_copy_part_free(&res);
    return 0;
}

/* A Complete whose response was lost (connection reset after the server finished) is sent
 * again and answered NoSuchUpload: the upload is done if the object at the key is now a
 * multipart object of exactly n parts (ETag "...-n"). The NoSuchUpload detail is kept when
 * it is not. */
static int completed_already(struct s3d_s3ctx *ctx, const char *bucket, const char *key, size_t n)
{
    struct s3d_object_info info;
    struct s3d_err_record saved;
    struct s3d_err_s3 d;
    char suffix[32];
    size_t el, sl;
    int ok = 0;

    s3d_err_save(&saved, s3d_last_error_code());
    if (s3d_op_head(ctx, bucket, key, &info) == 0) {
        snprintf(suffix, sizeof(suffix), "-%zu\"", n);
        el = strlen(info.etag);
        sl = strlen(suffix);
        ok = el > sl && strcmp(info.etag + el - sl, suffix) == 0;
    }
    if (!ok) {
        memset(&d, 0, sizeof(d));
        d.operation = "CompleteMultipartUpload";
        d.bucket = bucket;
        d.key = key;
        d.http_status = saved.http_status;
        d.s3_code = saved.s3_code;
        d.request_id = saved.request_id;
        s3d_fail_s3(saved.code, &d, "%s", saved.message);
    }
    return ok;
}

int s3d_op_complete_multipart(struct s3d_s3ctx *ctx, const char *bucket, const char *key,
                              const char *upload_id, const struct s3d_op_part *parts, size_t n,
                              char *etag_out)
{
    struct s3d_s3_op op;
    struct s3d_xml_part *xp = NULL;
    struct s3d_dynbuf body;
    struct s3d_xml_complete res;
    struct s3d_xml_error xe;
    struct iovec iov;
    uint32_t attempt = 0;
    size_t i;
    int rc, resent = 0;

    s3d_dynbuf_init(&body, (size_t)n * COMPLETE_PART_XML + S3D_OP_XML_SLACK);
    memset(&res, 0, sizeof(res));
    memset(&xe, 0, sizeof(xe));
    xp = calloc(n ? n : 1, sizeof(*xp));
    if (xp == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory completing s3://%s/%s", bucket, key);
    for (i = 0; i < n; i++) {
        xp[i].part_number = parts[i].part_number;
        xp[i].etag = parts[i].etag;
        xp[i].checksum_crc32c = parts[i].crc32c[0] ? parts[i].crc32c : NULL;
    }
    rc = s3d_xml_build_complete(xp, n, &body);
    if (rc < 0)
        goto out;
    /* S3 may answer 200 and then report an InternalError in the body, or the body may never
     * come (S3 sends the status line early and the body when done): both are retried like a
     * 500, with the same upload id and parts. */
    for (;;) {
        struct s3d_retry_policy pol;
        uint64_t delay;
        int status = 500;
        s3d_op_init(&op, "CompleteMultipartUpload", "POST", bucket, key);
        s3d_s3_op_add_query(&op, "uploadId", upload_id);
        s3d_s3_op_add_header(&op, "Content-Type", "application/xml");
        s3d_op_set_body(&op, &iov, body.data, body.len);
        rc = s3d_s3_op_run(ctx, &op);
        attempt++;
        if (op.attempts > 1)
            resent = 1;
        if (rc == S3D_ENOUPLOAD && resent && completed_already(ctx, bucket, key, n)) {
            rc = 0;
        } else if (rc == 0 && op.req.resp.body.len == 0) {
            struct s3d_err_s3 d = s3d_op_detail(&op);
            rc = s3d_fail_s3(S3D_ENETWORK, &d,
                             "CompleteMultipartUpload s3://%s/%s: HTTP %ld without a body", bucket,
                             key, op.req.resp.status);
            status = 0;
        } else if (rc == 0) {
            rc = s3d_xml_parse_complete(op.req.resp.body.data, op.req.resp.body.len, &res, &xe);
            if (rc == 1) {
                rc = s3d_op_error_in_body(&op, &xe);
                s3d_xml_error_free(&xe);
            } else if (rc < 0) {
                s3d_fail_prefix(rc, "CompleteMultipartUpload s3://%s/%s", bucket, key);
                s3d_s3_op_cleanup(&op);
                break;
            }
        } else {
            s3d_s3_op_cleanup(&op);
            break;
        }
        if (rc < 0) {
            s3d_s3ctx_retry_policy(ctx, &pol);
            if (s3d_retry_decide(&pol, attempt, rc, status, op.s3_code, s3d_now_ms(),
                                 s3d_retry_random(), &delay)) {
                struct timespec ts = {(time_t)(delay / 1000), (long)(delay % 1000) * 1000000L};
                s3d_s3_op_cleanup(&op);
                nanosleep(&ts, NULL);
                resent = 1;
                continue;
            }
        }
        s3d_s3_op_cleanup(&op);
        break;
    }
out:
    if (etag_out != NULL)
        snprintf(etag_out, 80, "%s", rc == 0 && res.etag != NULL ? res.etag : "");
    s3d_xml_complete_free(&res);
    s3d_dynbuf_free(&body);
    free(xp);
    return rc;
}

int s3d_op_abort_multipart(struct s3d_s3ctx *ctx, const char *bucket, const char *key,
                           const char *upload_id)
{
    struct s3d_s3_op op;
    int rc;
    s3d_op_init(&op, "AbortMultipartUpload", "DELETE", bucket, key);
    op.ignore_stop = 1; /* the cleanup after a stopped upload: it must still run */
    s3d_s3_op_add_query(&op, "uploadId", upload_id);
    rc = s3d_s3_op_run(ctx, &op);
    s3d_s3_op_cleanup(&op);
    return rc;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int s3d_op_multipart_etag(const struct s3d_op_part *parts, size_t n, char out[80])
{
    unsigned char md[EVP_MAX_MD_SIZE], bin[16];
    unsigned int mdlen = 0, k;
    EVP_MD_CTX *m;
    size_t i;
    int ok;

    out[0] = '\0';
    m = EVP_MD_CTX_new();
    if (m == NULL)
        return -1;
    ok = n > 0 && EVP_DigestInit_ex(m, EVP_md5(), NULL) == 1;
    for (i = 0; ok && i < n; i++) {
        const char *e = parts[i].etag;
        ok = strlen(e) == 34 && e[0] == '"' && e[33] == '"';
        for (k = 0; ok && k < 16; k++) {
            int hi = hexval(e[1 + 2 * k]), lo = hexval(e[2 + 2 * k]);
            ok = hi >= 0 && lo >= 0;
            bin[k] = (unsigned char)(hi * 16 + lo);
        }
        ok = ok && EVP_DigestUpdate(m, bin, sizeof(bin)) == 1;
    }
    ok = ok && EVP_DigestFinal_ex(m, md, &mdlen) == 1 && mdlen == 16;
    EVP_MD_CTX_free(m);
    if (!ok)
        return -1;
    out[0] = '"';
    for (k = 0; k < 16; k++)
        snprintf(out + 1 + 2 * k, 3, "%02x", md[k]);
    snprintf(out + 33, 80 - 33, "-%zu\"", n);
    return 0;
}

int s3d_op_etag_same(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la >= 2 && a[0] == '"' && a[la - 1] == '"')
        a++, la -= 2;
    if (lb >= 2 && b[0] == '"' && b[lb - 1] == '"')
        b++, lb -= 2;
    return la == lb && la > 0 && strncasecmp(a, b, la) == 0;
}

int s3d_op_etag_shape(const char *etag, uint32_t *parts)
{
    size_t n = strlen(etag), i;
    uint32_t count = 0;
    *parts = 0;
    if (n >= 2 && etag[0] == '"' && etag[n - 1] == '"')
        etag++, n -= 2;
    if (n < 32)
        return 0;
    for (i = 0; i < 32; i++)
        if (hexval(etag[i]) < 0)
            return 0;
    if (n == 32)
        return 1;
    if (etag[32] != '-' || n == 33 || n > 38)
        return 0;
    for (i = 33; i < n; i++) {
        if (etag[i] < '0' || etag[i] > '9')
            return 0;
        count = count * 10 + (uint32_t)(etag[i] - '0');
    }
    if (count == 0)
        return 0;
    *parts = count;
    return 2;
}
