/* ops.c - the S3 operations (see ops.h): each builds an op, runs it with retries, and parses
 * what came back. */
#include "s3/ops.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>

#include "common/compiler.h"
#include "common/error.h"
#include "s3/timefmt.h"
#include "s3/s3doc.h"

#define CT_OCTET "application/octet-stream"

static struct s3d_err_s3 detail(const struct s3d_s3_op *op)
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

static void op_init(struct s3d_s3_op *op, const char *operation, const char *method,
                    const char *bucket, const char *key)
{
    memset(op, 0, sizeof(*op));
    op->operation = operation;
    op->method = method;
    op->bucket = bucket;
    op->key = key;
}

static void set_body(struct s3d_s3_op *op, struct iovec *iov, const void *p, size_t n)
{
    iov->iov_base = (void *)p;
    iov->iov_len = n;
    op->iov = iov;
    op->iovcnt = 1;
    op->body_len = n;
}

/* A HEAD answered 404 has no body, so it cannot say whether the key or the whole bucket is
 * missing. Ask the bucket (one more request, on this error path only) and report
 * S3D_ENOSUCHBUCKET when it is the bucket; otherwise keep the original NoSuchKey error. */
static int head_404(struct s3d_s3ctx *ctx, const struct s3d_s3_op *op)
{
    struct s3d_error_info info;
    struct s3d_err_s3 d = detail(op);
    struct s3d_s3_op bop;
    char saved[1024];
    int brc;

    s3d_last_error(&info);
    snprintf(saved, sizeof(saved), "%s", info.message);
    op_init(&bop, "HeadBucket", "HEAD", op->bucket, NULL);
    brc = s3d_s3_op_run(ctx, &bop);
    s3d_s3_op_cleanup(&bop);
    if (brc == S3D_ENOSUCHBUCKET) {
        d.s3_code = "NoSuchBucket";
        return s3d_fail_s3(S3D_ENOSUCHBUCKET, &d,
                           "HeadObject s3://%s/%s: HTTP 404 no such bucket '%s'", op->bucket,
                           op->key, op->bucket);
    }
    d.s3_code = "NoSuchKey";
    return s3d_fail_s3(S3D_ENOSUCHKEY, &d, "%s", saved);
}

/* The object's fields that every HEAD or GET response carries. */
static void fill_info(const struct s3d_http_resp *r, struct s3d_object_info *out)
{
    snprintf(out->etag, sizeof(out->etag), "%s", r->etag);
    snprintf(out->content_type, sizeof(out->content_type), "%s", r->content_type);
    snprintf(out->checksum_crc32c, sizeof(out->checksum_crc32c), "%s", r->checksum_crc32c);
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
    struct s3d_error_info info;
    struct s3d_err_s3 d = detail(op);
    struct s3d_s3_op gop;
    char saved[1024], byte;
    int grc, coded;

    s3d_last_error(&info);
    snprintf(saved, sizeof(saved), "%s", info.message);
    op_init(&gop, "GetObject", "GET", op->bucket, op->key);
    (void)s3d_s3_op_set_range(&gop, 0, 0);
    gop.dst = &byte;
    gop.dst_cap = 1;
    grc = s3d_s3_op_run(ctx, &gop);
    coded = grc < 0 && gop.s3_code[0] != '\0' && gop.req.resp.status == 403;
    s3d_s3_op_cleanup(&gop);
    if (coded)
        return grc;
    return s3d_fail_s3(S3D_EACCESS, &d, "%s", saved);
}

int s3d_op_head(struct s3d_s3ctx *ctx, const char *bucket, const char *key,
                struct s3d_object_info *out)
{
    struct s3d_s3_op op;
    const struct s3d_http_resp *r;
    int rc;

    op_init(&op, "HeadObject", "HEAD", bucket, key);
    /* Servers that store additional checksums return them only when asked. */
    s3d_s3_op_add_header(&op, "x-amz-checksum-mode", "ENABLED");
    memset(out, 0, sizeof(*out));
    rc = s3d_s3_op_run(ctx, &op);
    if (rc == S3D_ENOSUCHKEY)
        rc = head_404(ctx, &op);
    else if (rc < 0 && op.req.resp.status == 403 && op.s3_code[0] == '\0')
        rc = head_403(ctx, &op);
    if (rc < 0)
        goto out;
    r = &op.req.resp;
    if (!r->has_content_length) {
        struct s3d_err_s3 d = detail(&op);
        rc = s3d_fail_s3(S3D_EPROTO, &d, "HeadObject s3://%s/%s: no Content-Length", bucket, key);
        goto out;
    }
    out->size = r->content_length;
    fill_info(r, out);
out:
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
            struct s3d_err_s3 d = detail(op);
            return s3d_fail_s3(S3D_EPROTO, &d,
                               "GetObject s3://%s/%s: Content-Range \"%s\" does not fit the "
                               "%" PRIu64 " bytes received from offset %" PRIu64,
                               op->bucket, op->key, r->content_range, r->received, offset);
        }
        info->size = t;
    } else if (r->status == 200 && offset == 0 && complete) {
        info->size = r->received; /* the whole object, and it fit */
    } else {
        struct s3d_err_s3 d = detail(op);
        return s3d_fail_s3(S3D_EPROTO, &d,
                           "GetObject s3://%s/%s: HTTP %ld without a usable Content-Range for "
                           "a range from byte %" PRIu64,
                           op->bucket, op->key, r->status, offset);
    }
    fill_info(r, info);
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
    op_init(op, "GetObject", "GET", bucket, key);
    (void)s3d_s3_op_set_range(op, first, last);
    op->dst = dst;
    op->dst_cap = last - first + 1;
    op->exact_length = 1;
}

int s3d_op_get_range(struct s3d_s3ctx *ctx, const char *bucket, const char *key, uint64_t offset,
                     uint64_t length, void *dst, const char *if_match)
{
    struct s3d_s3_op op;
    int rc;
    if (length == 0)
        return s3d_fail(S3D_EINVAL, "GetObject s3://%s/%s: empty range", bucket, key);
    s3d_op_get_init(&op, bucket, key, offset, offset + length - 1, dst);
    rc = s3d_op_if_match(&op, if_match);
    if (rc == 0)
        rc = s3d_s3_op_run(ctx, &op);
    s3d_s3_op_cleanup(&op);
    return rc;
}

int s3d_op_put(struct s3d_s3ctx *ctx, const char *bucket, const char *key, const struct iovec *iov,
               int iovcnt, const char *content_type, char *etag_out)
{
    struct s3d_s3_op op;
    uint64_t len = 0;
    int i, rc;

    op_init(&op, "PutObject", "PUT", bucket, key);
    for (i = 0; i < iovcnt; i++)
        len += iov[i].iov_len;
    op.iov = iov;
    op.iovcnt = iovcnt;
    op.body_len = len;
    s3d_s3_op_add_header(&op, "Content-Type", content_type ? content_type : CT_OCTET);
    rc = s3d_s3_op_run(ctx, &op);
    if (rc == 0 && etag_out != NULL)
        snprintf(etag_out, 80, "%s", op.req.resp.etag);
    s3d_s3_op_cleanup(&op);
    return rc;
}

void s3d_op_upload_part_init(struct s3d_s3_op *op, const char *bucket, const char *key,
                             const char *upload_id, uint32_t part_number, char *number_buf,
                             const struct iovec *iov, int iovcnt, uint64_t length,
                             const char *crc_b64)
{
    op_init(op, "UploadPart", "PUT", bucket, key);
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
    op_init(&op, "CreateMultipartUpload", "POST", bucket, key);
    s3d_s3_op_add_query(&op, "uploads", "");
    s3d_s3_op_add_header(&op, "Content-Type", content_type ? content_type : CT_OCTET);
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

/* A 200 answer whose body is an <Error> document (CompleteMultipartUpload, CopyObject,
 * DeleteObjects can do that): the failure it describes. */
static int error_in_body(struct s3d_s3_op *op, const struct s3d_xml_error *xe)
{
    struct s3d_err_s3 d = detail(op);
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

/* A Complete whose response was lost (connection reset after the server finished) is sent
 * again and answered NoSuchUpload: the upload is done if the object at the key is now a
 * multipart object of exactly n parts (ETag "...-n"). The NoSuchUpload detail is kept when
 * it is not. */
static int completed_already(struct s3d_s3ctx *ctx, const char *bucket, const char *key, size_t n)
{
    struct s3d_object_info info;
    struct s3d_error_info e;
    struct s3d_err_s3 d;
    char suffix[32], msg[1536], s3code[128], rid[160];
    size_t el, sl;
    int code, status, ok = 0;

    s3d_last_error(&e);
    code = e.code;
    status = e.http_status;
    snprintf(msg, sizeof(msg), "%s", e.message);
    snprintf(s3code, sizeof(s3code), "%s", e.s3_code);
    snprintf(rid, sizeof(rid), "%s", e.request_id);
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
        d.http_status = status;
        d.s3_code = s3code;
        d.request_id = rid;
        s3d_fail_s3(code, &d, "%s", msg);
    }
    return ok;
}

int s3d_op_complete_multipart(struct s3d_s3ctx *ctx, const char *bucket, const char *key,
                              const char *upload_id, const struct s3d_op_part *parts, size_t n)
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

    s3d_dynbuf_init(&body, (size_t)n * 256 + 4096);
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
        op_init(&op, "CompleteMultipartUpload", "POST", bucket, key);
        s3d_s3_op_add_query(&op, "uploadId", upload_id);
        s3d_s3_op_add_header(&op, "Content-Type", "application/xml");
        set_body(&op, &iov, body.data, body.len);
        rc = s3d_s3_op_run(ctx, &op);
        attempt++;
        if (op.attempts > 1)
            resent = 1;
        if (rc == S3D_ENOUPLOAD && resent && completed_already(ctx, bucket, key, n)) {
            rc = 0;
        } else if (rc == 0 && op.req.resp.body.len == 0) {
            struct s3d_err_s3 d = detail(&op);
            rc = s3d_fail_s3(S3D_ENETWORK, &d,
                             "CompleteMultipartUpload s3://%s/%s: HTTP %ld without a body", bucket,
                             key, op.req.resp.status);
            status = 0;
        } else if (rc == 0) {
            rc = s3d_xml_parse_complete(op.req.resp.body.data, op.req.resp.body.len, &res, &xe);
            if (rc == 1) {
                rc = error_in_body(&op, &xe);
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
    op_init(&op, "AbortMultipartUpload", "DELETE", bucket, key);
    s3d_s3_op_add_query(&op, "uploadId", upload_id);
    rc = s3d_s3_op_run(ctx, &op);
    s3d_s3_op_cleanup(&op);
    return rc;
}

int s3d_op_list_uploads(struct s3d_s3ctx *ctx, const char *bucket, const char *prefix,
                        s3d_upload_entry_fn fn, void *user)
{
    char *key_marker = NULL, *id_marker = NULL;
    int rc = 0, stop = 0;

    while (!stop) {
        struct s3d_s3_op op;
        struct s3d_xml_uploads_result res;
        size_t i;
        memset(&res, 0, sizeof(res));
        op_init(&op, "ListMultipartUploads", "GET", bucket, NULL);
        s3d_s3_op_add_query(&op, "uploads", "");
        if (prefix != NULL && prefix[0] != '\0')
            s3d_s3_op_add_query(&op, "prefix", prefix);
        if (key_marker != NULL)
            s3d_s3_op_add_query(&op, "key-marker", key_marker);
        if (id_marker != NULL)
            s3d_s3_op_add_query(&op, "upload-id-marker", id_marker);
        rc = s3d_s3_op_run(ctx, &op);
        if (rc == 0) {
            rc = s3d_xml_parse_list_uploads(op.req.resp.body.data ? op.req.resp.body.data : "",
                                            op.req.resp.body.len, &res);
            if (rc < 0)
                s3d_fail_prefix(rc, "ListMultipartUploads s3://%s", bucket);
        }
        s3d_s3_op_cleanup(&op);
        if (rc < 0)
            break;
        for (i = 0; i < res.n_uploads && !stop; i++) {
            const struct s3d_xml_upload *x = &res.uploads[i];
            struct s3d_upload_entry ent = {x->key, x->upload_id, x->initiated, x->storage_class};
            if (fn(user, &ent) != 0)
                stop = 1;
        }
        free(key_marker);
        free(id_marker);
        key_marker = id_marker = NULL;
        if (!res.is_truncated || res.next_key_marker == NULL)
            stop = 1;
        else {
            key_marker = res.next_key_marker;
            id_marker = res.next_upload_id_marker;
            res.next_key_marker = res.next_upload_id_marker = NULL;
        }
        s3d_xml_uploads_free(&res);
    }
    free(key_marker);
    free(id_marker);
    return rc;
}

int s3d_op_list_buckets(struct s3d_s3ctx *ctx, s3d_bucket_fn fn, void *user)
{
    char *token = NULL;
    int rc = 0, stop = 0;

    while (!stop) {
        struct s3d_s3_op op;
        struct s3d_xml_buckets_result res;
        size_t i;
        memset(&res, 0, sizeof(res));
        op_init(&op, "ListBuckets", "GET", NULL, NULL);
        if (token != NULL)
            s3d_s3_op_add_query(&op, "continuation-token", token);
        rc = s3d_s3_op_run(ctx, &op);
        if (rc == 0) {
            rc = s3d_xml_parse_list_buckets(op.req.resp.body.data ? op.req.resp.body.data : "",
                                            op.req.resp.body.len, &res);
            if (rc < 0)
                s3d_fail_prefix(rc, "ListBuckets");
        }
        s3d_s3_op_cleanup(&op);
        if (rc < 0)
            break;
        for (i = 0; i < res.n_buckets && !stop; i++) {
            struct s3d_bucket_entry ent = {res.buckets[i].name, res.buckets[i].creation_date};
            if (fn(user, &ent) != 0)
                stop = 1;
        }
        free(token);
        token = NULL;
        /* A page without a token is the last; a server repeating the token would loop. */
        if (res.continuation_token == NULL || res.continuation_token[0] == '\0' ||
            res.n_buckets == 0)
            stop = 1;
        else {
            token = res.continuation_token;
            res.continuation_token = NULL;
        }
        s3d_xml_buckets_free(&res);
    }
    free(token);
    return rc;
}

int s3d_op_list_objects(struct s3d_s3ctx *ctx, const char *bucket, const char *prefix,
                        const char *delimiter, s3d_list_fn fn, void *user)
{
    char *token = NULL;
    int rc = 0, stop = 0;

    while (!stop) {
        struct s3d_s3_op op;
        struct s3d_xml_list_result res;
        struct s3d_list_entry ent;
        size_t i;
        memset(&res, 0, sizeof(res));
        op_init(&op, "ListObjectsV2", "GET", bucket, NULL);
        s3d_s3_op_add_query(&op, "list-type", "2");
        if (prefix != NULL && prefix[0] != '\0')
            s3d_s3_op_add_query(&op, "prefix", prefix);
        if (delimiter != NULL && delimiter[0] != '\0')
            s3d_s3_op_add_query(&op, "delimiter", delimiter);
        if (token != NULL)
            s3d_s3_op_add_query(&op, "continuation-token", token);
        rc = s3d_s3_op_run(ctx, &op);
        if (rc == 0) {
            rc = s3d_xml_parse_list_v2(op.req.resp.body.data ? op.req.resp.body.data : "",
                                       op.req.resp.body.len, &res);
            if (rc < 0)
                s3d_fail_prefix(rc, "ListObjectsV2 s3://%s", bucket);
        }
        s3d_s3_op_cleanup(&op);
        if (rc < 0)
            break;
        for (i = 0; i < res.n_contents && !stop; i++) {
            memset(&ent, 0, sizeof(ent));
            ent.key = res.contents[i].key;
            ent.size = res.contents[i].size;
            ent.last_modified = res.contents[i].last_modified;
            ent.etag = res.contents[i].etag ? res.contents[i].etag : "";
            if (fn(user, &ent) != 0)
                stop = 1;
        }
        for (i = 0; i < res.n_prefixes && !stop; i++) {
            memset(&ent, 0, sizeof(ent));
            ent.key = res.prefixes[i];
            ent.etag = "";
            ent.is_prefix = 1;
            if (fn(user, &ent) != 0)
                stop = 1;
        }
        free(token);
        token = NULL;
        if (!res.is_truncated)
            stop = 1;
        else if (res.next_continuation_token == NULL) {
            struct s3d_err_s3 d = {.operation = "ListObjectsV2", .bucket = bucket};
            rc = s3d_fail_s3(S3D_EPROTO, &d,
                             "ListObjectsV2 s3://%s: truncated page without a continuation "
                             "token",
                             bucket);
            stop = 1;
        } else {
            token = res.next_continuation_token;
            res.next_continuation_token = NULL;
        }
        s3d_xml_list_free(&res);
    }
    free(token);
    return rc;
}

int s3d_op_delete_object(struct s3d_s3ctx *ctx, const char *bucket, const char *key)
{
    struct s3d_s3_op op;
    int rc;
    op_init(&op, "DeleteObject", "DELETE", bucket, key);
    rc = s3d_s3_op_run(ctx, &op);
    s3d_s3_op_cleanup(&op);
    return rc;
}

/* base64(MD5(p[0..n))): DeleteObjects requires Content-MD5. */
static int content_md5(const void *p, size_t n, char out[32])
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
        size_t batch = S3D_MIN(n - at, (size_t)1000);
        struct s3d_dynbuf body;
        struct s3d_s3_op op;
        struct s3d_xml_delete_result res;
        struct iovec iov;
        char md5[32];

        s3d_dynbuf_init(&body, 8u << 20);
        memset(&res, 0, sizeof(res));
        op_init(&op, "DeleteObjects", "POST", bucket, NULL);
        rc = s3d_xml_build_delete(keys + at, batch, 1, &body);
        if (rc == 0)
            rc = content_md5(body.data, body.len, md5);
        if (rc == 0) {
            s3d_s3_op_add_query(&op, "delete", "");
            s3d_s3_op_add_header(&op, "Content-MD5", md5);
            s3d_s3_op_add_header(&op, "Content-Type", "application/xml");
            set_body(&op, &iov, body.data, body.len);
            rc = s3d_s3_op_run(ctx, &op);
        }
        if (rc == 0) {
            const char *b = op.req.resp.body.data ? op.req.resp.body.data : "";
            if (s3d_xml_is_error(b, op.req.resp.body.len)) {
                struct s3d_xml_error xe;
                memset(&xe, 0, sizeof(xe));
                rc = s3d_xml_parse_error(b, op.req.resp.body.len, &xe);
                if (rc == 0)
                    rc = error_in_body(&op, &xe);
                s3d_xml_error_free(&xe);
            } else {
                rc = s3d_xml_parse_delete(b, op.req.resp.body.len, &res);
                if (rc < 0)
                    s3d_fail_prefix(rc, "DeleteObjects s3://%s", bucket);
                else if (res.n_errors > 0) {
                    struct s3d_err_s3 d = detail(&op);
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
    op_init(&op, "HeadBucket", "HEAD", bucket, NULL);
    rc = s3d_s3_op_run(ctx, &op);
    if (rc == 0 || rc == S3D_EACCESS) {
        struct s3d_err_s3 d = detail(&op);
        s3d_s3_op_cleanup(&op);
        return s3d_fail_s3(S3D_EBUCKETEXISTS, &d, "CreateBucket %s: the bucket already exists%s",
                           bucket, rc == 0 ? " and is yours" : " (owned by another account)");
    }
    s3d_s3_op_cleanup(&op);
    if (rc != S3D_ENOSUCHBUCKET)
        return rc;
    rc = 0;
    s3d_dynbuf_init(&body, 4096);
    op_init(&op, "CreateBucket", "PUT", bucket, NULL);
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
        set_body(&op, &iov, body.data, body.len);
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
    op_init(&op, "DeleteBucket", "DELETE", bucket, NULL);
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
