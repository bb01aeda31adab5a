/* ops.c - the S3 operations on objects and buckets (see ops.h): each builds an op, runs it
 * with retries, and parses what came back; with the helpers every operation file shares
 * (ops_int.h). Multipart uploads are in ops_multipart.c, the CRC-32C tag in ops_tagging.c,
 * the listings in list.c. */
#include "s3/ops.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>

#include "common/compiler.h"
#include "common/error.h"
#include "s3/limits.h"
#include "s3/ops_int.h"
#include "s3/timefmt.h"
#include "s3/s3doc.h"

/* The cap of a Delete body: it holds at most S3D_MAX_DELETE_KEYS keys of at most 1,024 bytes,
 * each byte escaped to at most 5. */
#define DELETE_BODY_MAX (8u << 20)

struct s3d_err_s3 s3d_op_detail(const struct s3d_s3_op *op)
{
    struct s3d_err_s3 d;
    memset(&d, 0, sizeof(d));
    d.operation = op->operation;
    d.bucket = op->bucket;
    d.key = op->key;
    d.http_status = (int)op->req.resp.status;
    d.request_id = op->req.resp.request_id;
    return d;
}

void s3d_op_init(struct s3d_s3_op *op, const char *operation, const char *method,
                 const char *bucket, const char *key)
{
    memset(op, 0, sizeof(*op));
    op->operation = operation;
    op->method = method;
    op->bucket = bucket;
    op->key = key;
}

void s3d_op_set_body(struct s3d_s3_op *op, struct iovec *iov, const void *p, size_t n)
{
    iov->iov_base = (void *)p;
    iov->iov_len = n;
    op->iov = iov;
    op->iovcnt = 1;
    op->body_len = n;
}

/* A 200 answer whose body is an <Error> document (CompleteMultipartUpload, CopyObject,
 * DeleteObjects can do that): the failure it describes. */
int s3d_op_error_in_body(struct s3d_s3_op *op, const struct s3d_xml_error *xe)
{
    struct s3d_err_s3 d = s3d_op_detail(op);
    int err;
    snprintf(op->s3_code, sizeof(op->s3_code), "%s", xe->code ? xe->code : "");
    err = s3d_http_err_from_status(500, op->s3_code, 1);
    d.s3_code = op->s3_code;
    d.s3_message = xe->message;
    if (xe->request_id != NULL && d.request_id[0] == '\0')
        d.request_id = xe->request_id;
    return s3d_fail_s3(err, &d, "%s s3://%s/%s: HTTP %ld with an error body: %s%s%s", op->operation,
                       op->bucket, op->key ? op->key : "", op->req.resp.status, op->s3_code,
                       xe->message && xe->message[0] ? ": " : "", xe->message ? xe->message : "");
}

/* A HEAD answered 404 has no body, so it cannot say whether the key or the whole bucket is
 * missing. Ask the bucket (one more request, on this error path only) and report
 * S3D_ENOSUCHBUCKET when it is the bucket; otherwise keep the original NoSuchKey error. */
static int head_404(struct s3d_s3ctx *ctx, const struct s3d_s3_op *op)
{
    struct s3d_err_record saved;
    struct s3d_err_s3 d = s3d_op_detail(op);
    struct s3d_s3_op bop;
    int brc;

    s3d_err_save(&saved, s3d_last_error_code());
    s3d_op_init(&bop, "HeadBucket", "HEAD", op->bucket, NULL);
    brc = s3d_s3_op_run(ctx, &bop);
    s3d_s3_op_cleanup(&bop);
    if (brc == S3D_ENOSUCHBUCKET) {
        d.s3_code = "NoSuchBucket";
        return s3d_fail_s3(S3D_ENOSUCHBUCKET, &d,
                           "HeadObject s3://%s/%s: HTTP 404 no such bucket '%s'", op->bucket,
                           op->key, op->bucket);
    }
    d.s3_code = "NoSuchKey";
    return s3d_fail_s3(S3D_ENOSUCHKEY, &d, "%s", saved.message);
}

/* The checksum of a response as a caller may read it: a multipart object's ("...-N" ETag)
 * checksum without its "-N" part count is a composite one (a CRC of the parts' CRCs, not of
 * the bytes) unless the response says x-amz-checksum-type: FULL_OBJECT. moto's HEAD drops the
 * "-N" and the type header; taken as a full-object CRC32C, every multipart download failed
 * with a false mismatch. The part count is put back from the ETag, so that the value reads as
 * composite again. */
static void fill_checksum(const struct s3d_http_resp *r, char *out, size_t cap)
{
    const char *dash = strrchr(r->etag, '-');
    size_t n = 0;
    if (r->checksum_crc32c[0] == '\0' || strchr(r->checksum_crc32c, '-') != NULL || dash == NULL ||
        strcmp(r->checksum_type, "FULL_OBJECT") == 0) {
        snprintf(out, cap, "%s", r->checksum_crc32c);
        return;
    }
    while (dash[1 + n] >= '0' && dash[1 + n] <= '9')
        n++;
    if (n == 0 || n > 5) { /* not "-N" with N <= 10000: not a multipart ETag */
        snprintf(out, cap, "%s", r->checksum_crc32c);
        return;
    }
    if ((size_t)snprintf(out, cap, "%s-%.*s", r->checksum_crc32c, (int)n, dash + 1) >= cap)
        out[0] = '\0'; /* cannot happen: base64 of 4 bytes and 5 digits fit */
}

/* The object's fields that every HEAD or GET response carries. */
static void fill_info(const struct s3d_http_resp *r, struct s3d_object_info *out)
{
    snprintf(out->etag, sizeof(out->etag), "%s", r->etag);
    snprintf(out->content_type, sizeof(out->content_type), "%s", r->content_type);
    fill_checksum(r, out->checksum_crc32c, sizeof(out->checksum_crc32c));
    if (r->last_modified[0] != '\0' &&
        s3d_time_parse_rfc1123(r->last_modified, strlen(r->last_modified), &out->last_modified) < 0)
        out->last_modified = 0; /* informative only: a strange date is not a failure */
}

/* A HEAD answered 403 has no body, so a wrong secret and a wrong key id both read as "access
 * denied". A GET of one byte is refused with the same cause and an <Error> body that names
 * it (SignatureDoesNotMatch, InvalidAccessKeyId): report that one. Without a code in it the
 * HEAD's error stands. */
static int head_403(struct s3d_s3ctx *ctx, const struct s3d_s3_op *op)
{
    struct s3d_err_record saved;
    struct s3d_err_s3 d = s3d_op_detail(op);
    struct s3d_s3_op gop;
    char byte;
    int grc, coded;

    s3d_err_save(&saved, s3d_last_error_code());
    s3d_op_init(&gop, "GetObject", "GET", op->bucket, op->key);
    (void)s3d_s3_op_set_range(&gop, 0, 0);
    gop.dst = &byte;
    gop.dst_cap = 1;
    grc = s3d_s3_op_run(ctx, &gop);
    coded = grc < 0 && gop.s3_code[0] != '\0' && gop.req.resp.status == 403;
    s3d_s3_op_cleanup(&gop);
    if (coded)
        return grc;
    return s3d_fail_s3(S3D_EACCESS, &d, "%s", saved.message);
}

int s3d_op_head(struct s3d_s3ctx *ctx, const char *bucket, const char *key,
                struct s3d_object_info *out)
{
    return s3d_op_head_sums(ctx, bucket, key, out, NULL);
}

int s3d_op_head_sums(struct s3d_s3ctx *ctx, const char *bucket, const char *key,
                     struct s3d_object_info *out, struct s3d_op_sums *sums)
{
    struct s3d_s3_op op;
    const struct s3d_http_resp *r;
    int rc;

    s3d_op_init(&op, "HeadObject", "HEAD", bucket, key);
    /* Servers that store additional checksums return them only when asked. */
    s3d_s3_op_add_header(&op, "x-amz-checksum-mode", "ENABLED");
    memset(out, 0, sizeof(*out));
    if (sums != NULL)
        memset(sums, 0, sizeof(*sums));
    rc = s3d_s3_op_run(ctx, &op);
    if (rc == S3D_ENOSUCHKEY)
        rc = head_404(ctx, &op);
    else if (rc < 0 && op.req.resp.status == 403 && op.s3_code[0] == '\0')
        rc = head_403(ctx, &op);
    if (rc < 0)
        goto out;
    r = &op.req.resp;
    if (!r->has_content_length) {
        struct s3d_err_s3 d = s3d_op_detail(&op);
        rc = s3d_fail_s3(S3D_EPROTO, &d, "HeadObject s3://%s/%s: no Content-Length", bucket, key);
        goto out;
    }
    out->size = r->content_length;
    fill_info(r, out);
    if (sums != NULL)
        s3d_op_sums_get(&op, sums);
out:
    s3d_s3_op_cleanup(&op);
    return rc;
}

int s3d_op_head_part(struct s3d_s3ctx *ctx, const char *bucket, const char *key,
                     uint32_t part_number, uint64_t *length, uint32_t *parts_count)
{
    struct s3d_s3_op op;
    char number[12];
    int rc;

    s3d_op_init(&op, "HeadObject", "HEAD", bucket, key);
    snprintf(number, sizeof(number), "%u", part_number);
    s3d_s3_op_add_query(&op, "partNumber", number);
    *length = 0;
    *parts_count = 0;
    rc = s3d_s3_op_run(ctx, &op);
    if (rc == 0 && !op.req.resp.has_content_length) {
        struct s3d_err_s3 d = s3d_op_detail(&op);
        rc = s3d_fail_s3(S3D_EPROTO, &d, "HeadObject s3://%s/%s?partNumber=%u: no Content-Length",
                         bucket, key, part_number);
    }
    if (rc == 0) {
        *length = op.req.resp.content_length;
        *parts_count = op.req.resp.mp_parts_count;
    }
    s3d_s3_op_cleanup(&op);
    return rc;
}

/* "bytes A-B/T" of a 206: A, B and T. -1 when it is not that. */
static int parse_content_range(const char *s, uint64_t *a, uint64_t *b, uint64_t *t)
{
    char *end;
    if (strncmp(s, "bytes ", 6) != 0)
        return -1;
    s += 6;
    if (*s < '0' || *s > '9')
        return -1;
    *a = strtoull(s, &end, 10);
    if (*end != '-' || end[1] < '0' || end[1] > '9')
        return -1;
    *b = strtoull(end + 1, &end, 10);
    if (*end != '/' || end[1] < '0' || end[1] > '9')
        return -1;
    *t = strtoull(end + 1, &end, 10);
    if (*end != '\0' || *b < *a || *t <= *b)
        return -1;
    return 0;
}

int s3d_op_first_info(const struct s3d_s3_op *op, uint64_t offset, int complete,
                      struct s3d_object_info *info)
{
    const struct s3d_http_resp *r = &op->req.resp;
    uint64_t a, b, t;

    memset(info, 0, sizeof(*info));
    if (r->status == 206) {
        if (parse_content_range(r->content_range, &a, &b, &t) < 0 || a != offset ||
            (complete && b - a + 1 != r->received)) {
            struct s3d_err_s3 d = s3d_op_detail(op);
            return s3d_fail_s3(S3D_EPROTO, &d,
                               "GetObject s3://%s/%s: Content-Range \"%s\" does not fit the "
                               "%" PRIu64 " bytes received from offset %" PRIu64,
                               op->bucket, op->key, r->content_range, r->received, offset);
        }
        info->size = t;
    } else if (r->status == 200 && offset == 0 && complete) {
        info->size = r->received; /* the whole object, and it fit */
    } else {
        struct s3d_err_s3 d = s3d_op_detail(op);
        return s3d_fail_s3(S3D_EPROTO, &d,
                           "GetObject s3://%s/%s: HTTP %ld without a usable Content-Range for "
                           "a range from byte %" PRIu64,
                           op->bucket, op->key, r->status, offset);
    }
    fill_info(r, info);
    return 0;
}

int s3d_op_check_version(const struct s3d_s3_op *op, uint64_t first, const char *etag,
                         uint64_t size)
{
    const struct s3d_http_resp *r = &op->req.resp;
    uint64_t a = 0, b = 0, t = 0;
    int have_total = 0;

    if (r->status == 206 && parse_content_range(r->content_range, &a, &b, &t) == 0) {
        have_total = 1;
    } else if (r->status == 200 && first == 0 && r->has_content_length) {
        t = r->content_length;
        have_total = 1;
    }
    if (etag != NULL && etag[0] != '\0' && strcmp(r->etag, etag) != 0) {
        struct s3d_err_s3 d = s3d_op_detail(op);
        return s3d_fail_s3(S3D_ECHANGED, &d,
                           "GetObject s3://%s/%s: the object changed during the download (it "
                           "started on ETag %s; the range from byte %" PRIu64
                           " came with %s%s, so the server ignored If-Match): download it again",
                           op->bucket, op->key, etag, first, r->etag[0] ? "ETag " : "no ETag",
                           r->etag);
    }
    if (size == 0)
        return 0;
    if (!have_total || (r->status == 206 && a != first)) {
        struct s3d_err_s3 d = s3d_op_detail(op);
        return s3d_fail_s3(S3D_EPROTO, &d,
                           "GetObject s3://%s/%s: HTTP %ld with Content-Range \"%s\" for the "
                           "range from byte %" PRIu64,
                           op->bucket, op->key, r->status, r->content_range, first);
    }
    if (t != size) {
        struct s3d_err_s3 d = s3d_op_detail(op);
        return s3d_fail_s3(S3D_ECHANGED, &d,
                           "GetObject s3://%s/%s: the object changed during the download (it "
                           "started at %" PRIu64 " bytes; the range from byte %" PRIu64
                           " says %" PRIu64 "): download it again",
                           op->bucket, op->key, size, first, t);
    }
    return 0;
}

int s3d_op_if_match(struct s3d_s3_op *op, const char *etag)
{
    if (etag == NULL || etag[0] == '\0')
        return 0;
    return s3d_s3_op_add_header(op, "If-Match", etag);
}

void s3d_op_get_init(struct s3d_s3_op *op, const char *bucket, const char *key, uint64_t first,
                     uint64_t last, void *dst)
{
    s3d_op_init(op, "GetObject", "GET", bucket, key);
    (void)s3d_s3_op_set_range(op, first, last);
    op->dst = dst;
    op->dst_cap = last - first + 1;
    op->exact_length = 1;
}

int s3d_op_get_range(struct s3d_s3ctx *ctx, const char *bucket, const char *key, uint64_t offset,
                     uint64_t length, void *dst, const char *if_match, uint64_t object_size)
{
    struct s3d_s3_op op;
    int rc;
    if (length == 0)
        return s3d_fail(S3D_EINVAL, "GetObject s3://%s/%s: empty range", bucket, key);
    s3d_op_get_init(&op, bucket, key, offset, offset + length - 1, dst);
    rc = s3d_op_if_match(&op, if_match);
    if (rc == 0)
        rc = s3d_s3_op_run(ctx, &op);
    if (rc == 0)
        rc = s3d_op_check_version(&op, offset, if_match, object_size);
    s3d_s3_op_cleanup(&op);
    return rc;
}

int s3d_op_put(struct s3d_s3ctx *ctx, const char *bucket, const char *key, const struct iovec *iov,
               int iovcnt, const char *content_type, char *etag_out)
{
    struct s3d_s3_op op;
    uint64_t len = 0;
    int i, rc;

    s3d_op_init(&op, "PutObject", "PUT", bucket, key);
    for (i = 0; i < iovcnt; i++)
        len += iov[i].iov_len;
    op.iov = iov;
    op.iovcnt = iovcnt;
    op.body_len = len;
    s3d_s3_op_add_header(&op, "Content-Type", content_type ? content_type : S3D_OP_CT_OCTET);
    rc = s3d_s3_op_run(ctx, &op);
    if (rc == 0 && etag_out != NULL)
        snprintf(etag_out, 80, "%s", op.req.resp.etag);
    s3d_s3_op_cleanup(&op);
    return rc;
}

int s3d_op_delete_object(struct s3d_s3ctx *ctx, const char *bucket, const char *key)
{
    struct s3d_s3_op op;
    int rc;
    s3d_op_init(&op, "DeleteObject", "DELETE", bucket, key);
    rc = s3d_s3_op_run(ctx, &op);
    s3d_s3_op_cleanup(&op);
    return rc;
}

/* base64(MD5(p[0..n))): DeleteObjects requires Content-MD5. */
int s3d_op_content_md5(const void *p, size_t n, char out[32])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (EVP_Digest(p, n, md, &mdlen, EVP_md5(), NULL) != 1)
        return s3d_fail(S3D_ENOMEM, "MD5 failed");
    EVP_EncodeBlock((unsigned char *)out, md, (int)mdlen);
    return 0;
}

int s3d_op_delete_objects(struct s3d_s3ctx *ctx, const char *bucket, const char *const *keys,
                          size_t n)
{
    size_t at = 0;
    int rc = 0;
    while (rc == 0 && at < n) {
        size_t batch = S3D_MIN(n - at, (size_t)S3D_MAX_DELETE_KEYS);
        struct s3d_dynbuf body;
        struct s3d_s3_op op;
        struct s3d_xml_delete_result res;
        struct iovec iov;
        char md5[32];

        s3d_dynbuf_init(&body, DELETE_BODY_MAX);
        memset(&res, 0, sizeof(res));
        s3d_op_init(&op, "DeleteObjects", "POST", bucket, NULL);
        rc = s3d_xml_build_delete(keys + at, batch, 1, &body);
        if (rc == 0)
            rc = s3d_op_content_md5(body.data, body.len, md5);
        if (rc == 0) {
            s3d_s3_op_add_query(&op, "delete", "");
            s3d_s3_op_add_header(&op, "Content-MD5", md5);
            s3d_s3_op_add_header(&op, "Content-Type", "application/xml");
            s3d_op_set_body(&op, &iov, body.data, body.len);
            rc = s3d_s3_op_run(ctx, &op);
        }
        if (rc == 0) {
            const char *b = op.req.resp.body.data ? op.req.resp.body.data : "";
            if (s3d_xml_is_error(b, op.req.resp.body.len)) {
                struct s3d_xml_error xe;
                memset(&xe, 0, sizeof(xe));
                rc = s3d_xml_parse_error(b, op.req.resp.body.len, &xe);
                if (rc == 0)
                    rc = s3d_op_error_in_body(&op, &xe);
                s3d_xml_error_free(&xe);
            } else {
                rc = s3d_xml_parse_delete(b, op.req.resp.body.len, &res);
                if (rc < 0)
                    s3d_fail_prefix(rc, "DeleteObjects s3://%s", bucket);
                else if (res.n_errors > 0) {
                    struct s3d_err_s3 d = s3d_op_detail(&op);
                    const struct s3d_xml_delete_error *de = &res.errors[0];
                    d.key = de->key;
                    d.s3_code = de->code;
                    d.s3_message = de->message;
                    rc = s3d_fail_s3(s3d_http_err_from_status(403, de->code, 1), &d,
                                     "DeleteObjects s3://%s: key \"%s\" refused: %s%s%s "
                                     "(%zu of %zu keys refused)",
                                     bucket, de->key ? de->key : "", de->code ? de->code : "",
                                     de->message && de->message[0] ? ": " : "",
                                     de->message ? de->message : "", res.n_errors, batch);
                }
            }
        }
        s3d_xml_delete_free(&res);
        s3d_s3_op_cleanup(&op);
        s3d_dynbuf_free(&body);
        at += batch;
    }
    return rc;
}

int s3d_op_create_bucket(struct s3d_s3ctx *ctx, const char *bucket)
{
    struct s3d_s3_op op;
    struct s3d_dynbuf body;
    struct iovec iov;
    const char *region = ctx->cfg.region;
    int rc = 0;

    /* us-east-1 (and Ceph RGW) answer 200 to re-creating a bucket you own: ask first, so
     * that "already exists" is reported the same everywhere. */
    s3d_op_init(&op, "HeadBucket", "HEAD", bucket, NULL);
    rc = s3d_s3_op_run(ctx, &op);
    if (rc == 0 || rc == S3D_EACCESS) {
        struct s3d_err_s3 d = s3d_op_detail(&op);
        s3d_s3_op_cleanup(&op);
        return s3d_fail_s3(S3D_EBUCKETEXISTS, &d, "CreateBucket %s: the bucket already exists%s",
                           bucket, rc == 0 ? " and is yours" : " (owned by another account)");
    }
    s3d_s3_op_cleanup(&op);
    if (rc != S3D_ENOSUCHBUCKET)
        return rc;
    s3d_dynbuf_init(&body, 4096);
    s3d_op_init(&op, "CreateBucket", "PUT", bucket, NULL);
    if (region != NULL && region[0] != '\0' && strcmp(region, "us-east-1") != 0) {
        rc = s3d_dynbuf_appendf(&body, "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/"
                                       "doc/2006-03-01/\"><LocationConstraint>");
        if (rc == 0)
            rc = s3d_xml_escape(&body, region, strlen(region));
        if (rc == 0)
            rc = s3d_dynbuf_appendf(&body, "</LocationConstraint></CreateBucketConfiguration>");
        if (rc < 0) {
            rc = s3d_fail(rc, "CreateBucket %s: building the body failed", bucket);
            goto out;
        }
        s3d_s3_op_add_header(&op, "Content-Type", "application/xml");
        s3d_op_set_body(&op, &iov, body.data, body.len);
    }
    rc = s3d_s3_op_run(ctx, &op);
out:
    s3d_s3_op_cleanup(&op);
    s3d_dynbuf_free(&body);
    return rc;
}

int s3d_op_delete_bucket(struct s3d_s3ctx *ctx, const char *bucket)
{
    struct s3d_s3_op op;
    int rc;
    s3d_op_init(&op, "DeleteBucket", "DELETE", bucket, NULL);
    rc = s3d_s3_op_run(ctx, &op);
    s3d_s3_op_cleanup(&op);
    return rc;
}

int s3d_op_presign(struct s3d_s3ctx *ctx, const char *method, const char *bucket, const char *key,
                   uint32_t expires_s, char *out, size_t out_cap)
{
    struct s3d_dynbuf url;
    int rc;
    struct s3d_config cfg = ctx->cfg; /* shallow: only the credentials are replaced */
    struct s3d_creds *cr = NULL;
    s3d_dynbuf_init(&url, 64 * 1024);
    if (!cfg.anonymous) {
        if ((rc = s3d_credcache_get(ctx->creds, &cr)) < 0) {
            s3d_dynbuf_free(&url);
            return s3d_fail_prefix(rc, "presign s3://%s/%s", bucket ? bucket : "", key ? key : "");
        }
        cfg.access_key_id = cr->access_key_id;
        cfg.secret_access_key = cr->secret_access_key;
        cfg.session_token = cr->session_token;
    }
    rc = s3d_presign_url(&cfg, method, bucket, key, expires_s, time(NULL), &url);
    s3d_creds_release(cr);
    if (rc == 0) {
        if (url.len + 1 > out_cap)
            rc = s3d_fail(S3D_ETOOBIG, "presigned URL needs %zu bytes, buffer holds %zu",
                          url.len + 1, out_cap);
        else
            memcpy(out, url.data, url.len + 1);
    }
    s3d_dynbuf_free(&url);
    return rc;
}
