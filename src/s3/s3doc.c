/* s3doc.c - the S3 XML documents: one small handler over the s3d_xml_walk() element stack per
 * response type (Error, ListObjectsV2, Create/CompleteMultipartUpload, ListMultipartUploads,
 * ListBuckets, DeleteObjects), and the two request bodies S3 needs (CompleteMultipartUpload,
 * Delete). */
#include "s3/s3doc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/compiler.h"
#include "common/error.h"
#include "s3/timefmt.h"
#include "s3/xml.h"

/* ---- helpers for the handlers ------------------------------------------------------------ */

static int dup_text(char **dst, const char *t, size_t n)
{
    char *s = s3d_strndup(t, n);
    if (s == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory parsing an S3 response");
    free(*dst);
    *dst = s;
    return 0;
}

static int parse_u64(const char *doc, const char *field, const char *t, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    size_t i = 0;
    while (i < n && s3d_xml_is_ws(t[i]))
        i++;
    while (n > i && s3d_xml_is_ws(t[n - 1]))
        n--;
    if (i == n)
        return s3d_fail(S3D_EPROTO, "%s response: empty <%s>", doc, field);
    for (; i < n; i++) {
        if (t[i] < '0' || t[i] > '9' || v > (UINT64_MAX - 9) / 10)
            return s3d_fail(S3D_EPROTO, "%s response: <%s> \"%.*s\" is not a number", doc, field,
                            (int)S3D_MIN(n, 40), t);
        v = v * 10 + (uint64_t)(t[i] - '0');
    }
    *out = v;
    return 0;
}

static int parse_bool(const char *doc, const char *field, const char *t, size_t n, int *out)
{
    if (n == 4 && memcmp(t, "true", 4) == 0)
        *out = 1;
    else if (n == 5 && memcmp(t, "false", 5) == 0)
        *out = 0;
    else
        return s3d_fail(S3D_EPROTO, "%s response: <%s> \"%.*s\" is not true or false", doc, field,
                        (int)S3D_MIN(n, 40), t);
    return 0;
}

/* Makes room for one more element in *arr (of *n, capacity *cap). */
static int grow(void **arr, size_t *n, size_t *cap, size_t elem)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        void *p = s3d_reallocarray(*arr, nc, elem);
        if (p == NULL)
            return s3d_fail(S3D_ENOMEM, "out of memory parsing an S3 response");
        *arr = p;
        *cap = nc;
    }
    memset((char *)*arr + *n * elem, 0, elem);
    (*n)++;
    return 0;
}

static int want_root(const char *doc, const struct s3d_xml_name *stack, int depth, const char *root)
{
    if (depth == 0 && !s3d_xml_name_is(&stack[0], root))
        return s3d_fail(S3D_EPROTO, "%s response: root element is <%.*s>, expected <%s>", doc,
                        (int)S3D_MIN(stack[0].len, 64), stack[0].p, root);
    return 0;
}

/* ---- Error ----------------------------------------------------------------------------- */

int s3d_xml_is_error(const char *body, size_t len)
{
    return s3d_xml_root_is(body, len, "Error");
}

static int err_fields(struct s3d_xml_error *e, const struct s3d_xml_name *n, const char *t,
                      size_t len)
{
    char **dst = s3d_xml_name_is(n, "Code")         ? &e->code
                 : s3d_xml_name_is(n, "Message")    ? &e->message
                 : s3d_xml_name_is(n, "RequestId")  ? &e->request_id
                 : s3d_xml_name_is(n, "Key")        ? &e->key
                 : s3d_xml_name_is(n, "BucketName") ? &e->bucket_name
                 : s3d_xml_name_is(n, "Resource")   ? &e->resource
                                                    : NULL;
    return dst ? dup_text(dst, t, len) : 0;
}

static int error_start(void *ctx, const struct s3d_xml_name *stack, int depth)
{
    (void)ctx;
    return want_root("error", stack, depth, "Error");
}

static int error_end(void *ctx, const struct s3d_xml_name *stack, int depth, const char *t,
                     size_t len)
{
    return depth == 1 ? err_fields(ctx, &stack[1], t, len) : 0;
}

void s3d_xml_error_free(struct s3d_xml_error *e)
{
    if (e == NULL)
        return;
    free(e->code);
    free(e->message);
    free(e->request_id);
    free(e->key);
    free(e->bucket_name);
    free(e->resource);
    memset(e, 0, sizeof(*e));
}

static int check_args(const char *doc, const char *body, const void *out)
{
    if (body == NULL || out == NULL)
        return s3d_fail(S3D_EINVAL, "%s: NULL body or result", doc);
    return 0;
}

/* The frame of every parser over one result struct: the arguments checked, the result zeroed,
 * the walk, and on failure the result freed again (free_out clears it). */
static int parse_doc(const char *doc, const char *body, size_t len, void *out, size_t out_size,
                     const struct s3d_xml_handler *h, void (*free_out)(void *))
{
    int rc;
    if ((rc = check_args(doc, body, out)) < 0)
        return rc;
    memset(out, 0, out_size);
    if ((rc = s3d_xml_walk(doc, body, len, h)) < 0)
        free_out(out);
    return rc;
}

static void error_free_v(void *r)
{
    s3d_xml_error_free(r);
}

int s3d_xml_parse_error(const char *body, size_t len, struct s3d_xml_error *out)
{
    struct s3d_xml_handler h = {error_start, error_end, out};
    return parse_doc("error", body, len, out, sizeof(*out), &h, error_free_v);
}

/* ---- ListObjectsV2 --------------------------------------------------------------------- */

#define DOC_LIST "ListObjectsV2"

struct list_ctx {
    struct s3d_xml_list_result *r;
    size_t cap_contents, cap_prefixes;
    int in_prefix_entry;
};

static int list_start(void *ctx, const struct s3d_xml_name *stack, int depth)
{
    struct list_ctx *c = ctx;
    struct s3d_xml_list_result *r = c->r;
    int rc;
    if ((rc = want_root(DOC_LIST, stack, depth, "ListBucketResult")) < 0)
        return rc;
    if (depth == 1 && s3d_xml_name_is(&stack[1], "Contents")) {
        if ((rc = grow((void **)&r->contents, &r->n_contents, &c->cap_contents,
                       sizeof(*r->contents))) < 0)
            return rc;
    } else if (depth == 1 && s3d_xml_name_is(&stack[1], "CommonPrefixes")) {
        c->in_prefix_entry = 0;
    }
    return 0;
}

static int list_end(void *ctx, const struct s3d_xml_name *stack, int depth, const char *t,
                    size_t len)
{
    struct list_ctx *c = ctx;
    struct s3d_xml_list_result *r = c->r;
    int rc;
    if (depth == 1) {
        const struct s3d_xml_name *n = &stack[1];
        if (s3d_xml_name_is(n, "IsTruncated"))
            return parse_bool(DOC_LIST, "IsTruncated", t, len, &r->is_truncated);
        if (s3d_xml_name_is(n, "NextContinuationToken"))
            return dup_text(&r->next_continuation_token, t, len);
        if (s3d_xml_name_is(n, "KeyCount"))
            return parse_u64(DOC_LIST, "KeyCount", t, len, &r->key_count);
        if (s3d_xml_name_is(n, "Contents") && r->contents[r->n_contents - 1].key == NULL)
            return s3d_fail(S3D_EPROTO, DOC_LIST " response: <Contents> %zu has no <Key>",
                            r->n_contents);
        if (s3d_xml_name_is(n, "CommonPrefixes") && !c->in_prefix_entry)
            return s3d_fail(S3D_EPROTO, DOC_LIST " response: <CommonPrefixes> without "
                                                 "<Prefix>");
        return 0;
    }
    if (depth == 2 && s3d_xml_name_is(&stack[1], "Contents")) {
        struct s3d_xml_object *o = &r->contents[r->n_contents - 1];
        const struct s3d_xml_name *n = &stack[2];
        if (s3d_xml_name_is(n, "Key"))
            return dup_text(&o->key, t, len);
        if (s3d_xml_name_is(n, "Size"))
            return parse_u64(DOC_LIST, "Size", t, len, &o->size);
        if (s3d_xml_name_is(n, "ETag"))
            return dup_text(&o->etag, t, len);
        if (s3d_xml_name_is(n, "LastModified"))
            return s3d_time_parse_iso8601(t, len, &o->last_modified);
        return 0;
    }
    if (depth == 2 && s3d_xml_name_is(&stack[1], "CommonPrefixes") &&
        s3d_xml_name_is(&stack[2], "Prefix")) {
        char *p = NULL;
        if ((rc = dup_text(&p, t, len)) < 0)
            return rc;
        if ((rc = grow((void **)&r->prefixes, &r->n_prefixes, &c->cap_prefixes,
                       sizeof(*r->prefixes))) < 0) {
            free(p);
            return rc;
        }
        r->prefixes[r->n_prefixes - 1] = p;
        c->in_prefix_entry = 1;
    }
    return 0;
}

void s3d_xml_list_free(struct s3d_xml_list_result *r)
{
    size_t i;
    if (r == NULL)
        return;
    for (i = 0; i < r->n_contents; i++) {
        free(r->contents[i].key);
        free(r->contents[i].etag);
    }
    free(r->contents);
    for (i = 0; i < r->n_prefixes; i++)
        free(r->prefixes[i]);
    free(r->prefixes);
    free(r->next_continuation_token);
    memset(r, 0, sizeof(*r));
}

static void list_free_v(void *r)
{
    s3d_xml_list_free(r);
}

int s3d_xml_parse_list_v2(const char *body, size_t len, struct s3d_xml_list_result *out)
{
    struct list_ctx c = {out, 0, 0, 0};
    struct s3d_xml_handler h = {list_start, list_end, &c};
    return parse_doc(DOC_LIST, body, len, out, sizeof(*out), &h, list_free_v);
}

/* ---- InitiateMultipartUpload ----------------------------------------------------------- */

#define DOC_INIT "CreateMultipartUpload"

static int init_start(void *ctx, const struct s3d_xml_name *stack, int depth)
{
    (void)ctx;
    return want_root(DOC_INIT, stack, depth, "InitiateMultipartUploadResult");
}

static int init_end(void *ctx, const struct s3d_xml_name *stack, int depth, const char *t,
                    size_t len)
{
    return depth == 1 && s3d_xml_name_is(&stack[1], "UploadId") ? dup_text(ctx, t, len) : 0;
}

int s3d_xml_parse_initiate(const char *body, size_t len, char **upload_id)
{
    char *id = NULL;
    struct s3d_xml_handler h = {init_start, init_end, &id};
    int rc;
    if ((rc = check_args(DOC_INIT, body, upload_id)) < 0)
        return rc;
    *upload_id = NULL;
    if ((rc = s3d_xml_walk(DOC_INIT, body, len, &h)) < 0)
        goto fail;
    if (id == NULL || id[0] == '\0') {
        rc = s3d_fail(S3D_EPROTO, DOC_INIT " response has no <UploadId>");
        goto fail;
    }
    *upload_id = id;
    return 0;
fail:
    free(id);
    return rc;
}

/* ---- CompleteMultipartUpload ----------------------------------------------------------- */

#define DOC_COMPLETE "CompleteMultipartUpload"

struct complete_ctx {
    struct s3d_xml_complete *out;
    struct s3d_xml_error *err;
    int is_error;
};

static int complete_start(void *ctx, const struct s3d_xml_name *stack, int depth)
{
    struct complete_ctx *c = ctx;
    if (depth != 0)
        return 0;
    if (s3d_xml_name_is(&stack[0], "Error")) {
        c->is_error = 1;
        return 0;
    }
    /* moto answers <CompleteMultipartUploadResponse> (the S3 docs of 2006 named it so) with
     * the same children: refused, every multipart upload to it failed although complete. */
    if (s3d_xml_name_is(&stack[0], "CompleteMultipartUploadResponse"))
        return 0;
    return want_root(DOC_COMPLETE, stack, depth, "CompleteMultipartUploadResult");
}

static int complete_end(void *ctx, const struct s3d_xml_name *stack, int depth, const char *t,
                        size_t len)
{
    struct complete_ctx *c = ctx;
    const struct s3d_xml_name *n = &stack[1];
    if (depth != 1)
        return 0;
    if (c->is_error)
        return err_fields(c->err, n, t, len);
    if (s3d_xml_name_is(n, "Location"))
        return dup_text(&c->out->location, t, len);
    if (s3d_xml_name_is(n, "Bucket"))
        return dup_text(&c->out->bucket, t, len);
    if (s3d_xml_name_is(n, "Key"))
        return dup_text(&c->out->key, t, len);
    if (s3d_xml_name_is(n, "ETag"))
        return dup_text(&c->out->etag, t, len);
    return 0;
}

void s3d_xml_complete_free(struct s3d_xml_complete *c)
{
    if (c == NULL)
        return;
    free(c->location);
    free(c->bucket);
    free(c->key);
    free(c->etag);
    memset(c, 0, sizeof(*c));
}

int s3d_xml_parse_complete(const char *body, size_t len, struct s3d_xml_complete *out,
                           struct s3d_xml_error *err)
{
    struct s3d_xml_error tmp = {0};
    struct complete_ctx c = {out, &tmp, 0};
    struct s3d_xml_handler h = {complete_start, complete_end, &c};
    int rc;
    if ((rc = check_args(DOC_COMPLETE, body, out)) < 0 ||
        (rc = check_args(DOC_COMPLETE, body, err)) < 0)
        return rc;
    memset(out, 0, sizeof(*out));
    if ((rc = s3d_xml_walk(DOC_COMPLETE, body, len, &h)) < 0) {
        s3d_xml_complete_free(out);
        s3d_xml_error_free(&tmp);
        return rc;
    }
    if (c.is_error) {
        *err = tmp;
        return 1;
    }
    return 0;
}

/* ---- UploadPartCopy ------------------------------------------------------------------- */

#define DOC_COPY_PART "UploadPartCopy"

struct copy_part_ctx {
    struct s3d_xml_copy_part *out;
    struct s3d_xml_error *err;
    int is_error;
};

static int copy_part_start(void *ctx, const struct s3d_xml_name *stack, int depth)
{
    struct copy_part_ctx *c = ctx;
    if (depth != 0)
        return 0;
    if (s3d_xml_name_is(&stack[0], "Error")) {
        c->is_error = 1;
        return 0;
    }
    return want_root(DOC_COPY_PART, stack, depth, "CopyPartResult");
}

static int copy_part_end(void *ctx, const struct s3d_xml_name *stack, int depth, const char *t,
                         size_t len)
{
    struct copy_part_ctx *c = ctx;
    const struct s3d_xml_name *n = &stack[1];
    if (depth != 1)
        return 0;
    if (c->is_error)
        return err_fields(c->err, n, t, len);
    if (s3d_xml_name_is(n, "ETag"))
        return dup_text(&c->out->etag, t, len);
    if (s3d_xml_name_is(n, "ChecksumCRC32C"))
        return dup_text(&c->out->crc32c, t, len);
    return 0;
}

int s3d_xml_parse_copy_part(const char *body, size_t len, struct s3d_xml_copy_part *out,
                            struct s3d_xml_error *err)
{
    struct s3d_xml_error tmp = {0};
    struct copy_part_ctx c = {out, &tmp, 0};
    struct s3d_xml_handler h = {copy_part_start, copy_part_end, &c};
    int rc;
    if ((rc = check_args(DOC_COPY_PART, body, out)) < 0 ||
        (rc = check_args(DOC_COPY_PART, body, err)) < 0)
        return rc;
    memset(out, 0, sizeof(*out));
    if ((rc = s3d_xml_walk(DOC_COPY_PART, body, len, &h)) < 0) {
        s3d_xml_copy_part_free(out);
        s3d_xml_error_free(&tmp);
        return rc;
    }
    if (c.is_error) {
        *err = tmp;
        return 1;
    }
    if (out->etag == NULL || out->etag[0] == '\0') {
        s3d_xml_copy_part_free(out);
        return s3d_fail(S3D_EPROTO, "%s response: no <ETag>", DOC_COPY_PART);
    }
    return 0;
}

void s3d_xml_copy_part_free(struct s3d_xml_copy_part *c)
{
    if (c == NULL)
        return;
    free(c->etag);
    free(c->crc32c);
    memset(c, 0, sizeof(*c));
}

/* ---- ListMultipartUploads -------------------------------------------------------------- */

#define DOC_UPLOADS "ListMultipartUploads"

struct uploads_ctx {
    struct s3d_xml_uploads_result *r;
    size_t cap;
};

static int uploads_start(void *ctx, const struct s3d_xml_name *stack, int depth)
{
    struct uploads_ctx *c = ctx;
    int rc;
    if ((rc = want_root(DOC_UPLOADS, stack, depth, "ListMultipartUploadsResult")) < 0)
        return rc;
    if (depth == 1 && s3d_xml_name_is(&stack[1], "Upload"))
        return grow((void **)&c->r->uploads, &c->r->n_uploads, &c->cap, sizeof(*c->r->uploads));
    return 0;
}

static int uploads_end(void *ctx, const struct s3d_xml_name *stack, int depth, const char *t,
                       size_t len)
{
    struct uploads_ctx *c = ctx;
    struct s3d_xml_uploads_result *r = c->r;
    if (depth == 1) {
        const struct s3d_xml_name *n = &stack[1];
        if (s3d_xml_name_is(n, "IsTruncated"))
            return parse_bool(DOC_UPLOADS, "IsTruncated", t, len, &r->is_truncated);
        if (s3d_xml_name_is(n, "NextKeyMarker"))
            return dup_text(&r->next_key_marker, t, len);
        if (s3d_xml_name_is(n, "NextUploadIdMarker"))
            return dup_text(&r->next_upload_id_marker, t, len);
        if (s3d_xml_name_is(n, "Upload")) {
            struct s3d_xml_upload *u = &r->uploads[r->n_uploads - 1];
            if (u->key == NULL || u->upload_id == NULL)
                return s3d_fail(S3D_EPROTO,
                                DOC_UPLOADS " response: <Upload> %zu lacks <Key> "
                                            "or <UploadId>",
                                r->n_uploads);
        }
        return 0;
    }
    if (depth == 2 && s3d_xml_name_is(&stack[1], "Upload")) {
        struct s3d_xml_upload *u = &r->uploads[r->n_uploads - 1];
        if (s3d_xml_name_is(&stack[2], "Key"))
            return dup_text(&u->key, t, len);
        if (s3d_xml_name_is(&stack[2], "UploadId"))
            return dup_text(&u->upload_id, t, len);
        if (s3d_xml_name_is(&stack[2], "Initiated"))
            return s3d_time_parse_iso8601(t, len, &u->initiated);
        if (s3d_xml_name_is(&stack[2], "StorageClass"))
            return dup_text(&u->storage_class, t, len);
    }
    return 0;
}

void s3d_xml_uploads_free(struct s3d_xml_uploads_result *r)
{
    size_t i;
    if (r == NULL)
        return;
    for (i = 0; i < r->n_uploads; i++) {
        free(r->uploads[i].key);
        free(r->uploads[i].upload_id);
        free(r->uploads[i].storage_class);
    }
    free(r->uploads);
    free(r->next_key_marker);
    free(r->next_upload_id_marker);
    memset(r, 0, sizeof(*r));
}

static void uploads_free_v(void *r)
{
    s3d_xml_uploads_free(r);
}

int s3d_xml_parse_list_uploads(const char *body, size_t len, struct s3d_xml_uploads_result *out)
{
    struct uploads_ctx c = {out, 0};
    struct s3d_xml_handler h = {uploads_start, uploads_end, &c};
    return parse_doc(DOC_UPLOADS, body, len, out, sizeof(*out), &h, uploads_free_v);
}

/* ---- ListBuckets ----------------------------------------------------------------------- */

#define DOC_BUCKETS "ListBuckets"

struct buckets_ctx {
    struct s3d_xml_buckets_result *r;
    size_t cap;
};

static int buckets_start(void *ctx, const struct s3d_xml_name *stack, int depth)
{
    struct buckets_ctx *c = ctx;
    int rc;
    if ((rc = want_root(DOC_BUCKETS, stack, depth, "ListAllMyBucketsResult")) < 0)
        return rc;
    if (depth == 2 && s3d_xml_name_is(&stack[1], "Buckets") && s3d_xml_name_is(&stack[2], "Bucket"))
        return grow((void **)&c->r->buckets, &c->r->n_buckets, &c->cap, sizeof(*c->r->buckets));
    return 0;
}

static int buckets_end(void *ctx, const struct s3d_xml_name *stack, int depth, const char *t,
                       size_t len)
{
    struct buckets_ctx *c = ctx;
    struct s3d_xml_buckets_result *r = c->r;
    struct s3d_xml_bucket *b;
    if (depth == 1 && s3d_xml_name_is(&stack[1], "ContinuationToken"))
        return dup_text(&r->continuation_token, t, len);
    if (depth < 2 || !s3d_xml_name_is(&stack[1], "Buckets") ||
        !s3d_xml_name_is(&stack[2], "Bucket"))
        return 0;
    b = &r->buckets[r->n_buckets - 1];
    if (depth == 2 && (b->name == NULL || b->name[0] == '\0'))
        return s3d_fail(S3D_EPROTO, DOC_BUCKETS " response: <Bucket> %zu has no <Name>",
                        r->n_buckets);
    if (depth == 3 && s3d_xml_name_is(&stack[3], "Name"))
        return dup_text(&b->name, t, len);
    if (depth == 3 && s3d_xml_name_is(&stack[3], "CreationDate"))
        return s3d_time_parse_iso8601(t, len, &b->creation_date);
    return 0;
}

void s3d_xml_buckets_free(struct s3d_xml_buckets_result *r)
{
    size_t i;
    if (r == NULL)
        return;
    for (i = 0; i < r->n_buckets; i++)
        free(r->buckets[i].name);
    free(r->buckets);
    free(r->continuation_token);
    memset(r, 0, sizeof(*r));
}

static void buckets_free_v(void *r)
{
    s3d_xml_buckets_free(r);
}

int s3d_xml_parse_list_buckets(const char *body, size_t len, struct s3d_xml_buckets_result *out)
{
    struct buckets_ctx c = {out, 0};
    struct s3d_xml_handler h = {buckets_start, buckets_end, &c};
    return parse_doc(DOC_BUCKETS, body, len, out, sizeof(*out), &h, buckets_free_v);
}

/* ---- DeleteObjects --------------------------------------------------------------------- */

#define DOC_DELETE "DeleteObjects"

struct delete_ctx {
    struct s3d_xml_delete_result *r;
    size_t cap_deleted, cap_errors;
};

static int delete_start(void *ctx, const struct s3d_xml_name *stack, int depth)
{
    struct delete_ctx *c = ctx;
    struct s3d_xml_delete_result *r = c->r;
    int rc;
    if ((rc = want_root(DOC_DELETE, stack, depth, "DeleteResult")) < 0)
        return rc;
    if (depth == 1 && s3d_xml_name_is(&stack[1], "Deleted"))
        return grow((void **)&r->deleted, &r->n_deleted, &c->cap_deleted, sizeof(*r->deleted));
    if (depth == 1 && s3d_xml_name_is(&stack[1], "Error"))
        return grow((void **)&r->errors, &r->n_errors, &c->cap_errors, sizeof(*r->errors));
    return 0;
}

static int delete_end(void *ctx, const struct s3d_xml_name *stack, int depth, const char *t,
                      size_t len)
{
    struct delete_ctx *c = ctx;
    struct s3d_xml_delete_result *r = c->r;
    if (depth == 1 && s3d_xml_name_is(&stack[1], "Deleted") && r->deleted[r->n_deleted - 1] == NULL)
        return s3d_fail(S3D_EPROTO, DOC_DELETE " response: <Deleted> without <Key>");
    if (depth == 1 && s3d_xml_name_is(&stack[1], "Error")) {
        const struct s3d_xml_delete_error *e = &r->errors[r->n_errors - 1];
        if (e->key == NULL || e->code == NULL)
            return s3d_fail(S3D_EPROTO, DOC_DELETE " response: <Error> without <Key> or "
                                                   "<Code>");
    }
    if (depth != 2)
        return 0;
    if (s3d_xml_name_is(&stack[1], "Deleted") && s3d_xml_name_is(&stack[2], "Key"))
        return dup_text(&r->deleted[r->n_deleted - 1], t, len);
    if (s3d_xml_name_is(&stack[1], "Error")) {
        struct s3d_xml_delete_error *e = &r->errors[r->n_errors - 1];
        if (s3d_xml_name_is(&stack[2], "Key"))
            return dup_text(&e->key, t, len);
        if (s3d_xml_name_is(&stack[2], "Code"))
            return dup_text(&e->code, t, len);
        if (s3d_xml_name_is(&stack[2], "Message"))
            return dup_text(&e->message, t, len);
    }
    return 0;
}

void s3d_xml_delete_free(struct s3d_xml_delete_result *r)
{
    size_t i;
    if (r == NULL)
        return;
    for (i = 0; i < r->n_deleted; i++)
        free(r->deleted[i]);
    free(r->deleted);
    for (i = 0; i < r->n_errors; i++) {
        free(r->errors[i].key);
        free(r->errors[i].code);
        free(r->errors[i].message);
    }
    free(r->errors);
    memset(r, 0, sizeof(*r));
}

static void delete_free_v(void *r)
{
    s3d_xml_delete_free(r);
}

int s3d_xml_parse_delete(const char *body, size_t len, struct s3d_xml_delete_result *out)
{
    struct delete_ctx c = {out, 0, 0};
    struct s3d_xml_handler h = {delete_start, delete_end, &c};
    return parse_doc(DOC_DELETE, body, len, out, sizeof(*out), &h, delete_free_v);
}

/* ---- builders ------------------------------------------------------------------------- */

#define S3_XMLNS "http://s3.amazonaws.com/doc/2006-03-01/"
#define XML_DECL "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"

int s3d_xml_escape(struct s3d_dynbuf *out, const char *s, size_t len)
{
    size_t i, run = 0;
    int rc = 0;
    for (i = 0; i < len; i++) {
        const char *ent = s[i] == '&'    ? "&amp;"
                          : s[i] == '<'  ? "&lt;"
                          : s[i] == '>'  ? "&gt;"
                          : s[i] == '\r' ? "&#13;"
                                         : NULL;
        if (ent == NULL) {
            run++;
            continue;
        }
        if ((run > 0 && (rc = s3d_dynbuf_append(out, s + i - run, run)) < 0) ||
            (rc = s3d_dynbuf_append(out, ent, strlen(ent))) < 0)
            goto fail;
        run = 0;
    }
    if (run > 0 && (rc = s3d_dynbuf_append(out, s + len - run, run)) < 0)
        goto fail;
    return 0;
fail:
    return s3d_fail(rc, "XML request body over its limit of %zu bytes", out->max);
}

static int append(struct s3d_dynbuf *out, const char *s)
{
    int rc = s3d_dynbuf_append(out, s, strlen(s));
    return rc < 0 ? s3d_fail(rc, "XML request body over its limit of %zu bytes", out->max) : 0;
}

int s3d_xml_build_complete(const struct s3d_xml_part *parts, size_t n, struct s3d_dynbuf *out)
{
    size_t i;
    int rc;
    if (parts == NULL || n == 0 || n > S3D_MAX_PARTS)
        return s3d_fail(S3D_EINVAL, "CompleteMultipartUpload needs 1..%u parts, got %zu",
                        S3D_MAX_PARTS, n);
    if ((rc = append(out, XML_DECL "<CompleteMultipartUpload xmlns=\"" S3_XMLNS "\">")) < 0)
        return rc;
    for (i = 0; i < n; i++) {
        char num[48];
        if (parts[i].etag == NULL)
            return s3d_fail(S3D_EINVAL, "CompleteMultipartUpload: part %u has no ETag",
                            parts[i].part_number);
        snprintf(num, sizeof(num), "<Part><PartNumber>%u</PartNumber><ETag>", parts[i].part_number);
        if ((rc = append(out, num)) < 0 ||
            (rc = s3d_xml_escape(out, parts[i].etag, strlen(parts[i].etag))) < 0 ||
            (rc = append(out, "</ETag>")) < 0)
            return rc;
        if (parts[i].checksum_crc32c != NULL &&
            ((rc = append(out, "<ChecksumCRC32C>")) < 0 ||
             (rc = s3d_xml_escape(out, parts[i].checksum_crc32c,
                                  strlen(parts[i].checksum_crc32c))) < 0 ||
             (rc = append(out, "</ChecksumCRC32C>")) < 0))
            return rc;
        if ((rc = append(out, "</Part>")) < 0)
            return rc;
    }
    return append(out, "</CompleteMultipartUpload>");
}

int s3d_xml_build_delete(const char *const *keys, size_t n, int quiet, struct s3d_dynbuf *out)
{
    size_t i, j;
    int rc;
    if (keys == NULL || n == 0 || n > S3D_MAX_DELETE_KEYS)
        return s3d_fail(S3D_EINVAL, "DeleteObjects takes 1..%u keys, got %zu", S3D_MAX_DELETE_KEYS,
                        n);
    for (i = 0; i < n; i++) {
        if (keys[i] == NULL || keys[i][0] == '\0')
            return s3d_fail(S3D_EINVAL, "DeleteObjects: key %zu is empty", i);
        for (j = 0; keys[i][j]; j++) {
            unsigned char c = (unsigned char)keys[i][j];
            if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
                return s3d_fail(S3D_EINVAL,
                                "DeleteObjects: key \"%.200s\" holds control "
                                "character 0x%02x, which XML 1.0 cannot carry",
                                keys[i], c);
        }
    }
    if ((rc = append(out, XML_DECL "<Delete xmlns=\"" S3_XMLNS "\">")) < 0 ||
        (quiet && (rc = append(out, "<Quiet>true</Quiet>")) < 0))
        return rc;
    for (i = 0; i < n; i++) {
        if ((rc = append(out, "<Object><Key>")) < 0 ||
            (rc = s3d_xml_escape(out, keys[i], strlen(keys[i]))) < 0 ||
            (rc = append(out, "</Key></Object>")) < 0)
            return rc;
    }
    return append(out, "</Delete>");
}

/* ---- object tagging (the CRC-32C tag of a multipart upload, ops.h) ----------------------- */

#define DOC_TAGGING "GetObjectTagging"

struct tagging_ctx {
    const char *want;  /* the tag key looked for */
    char *key, *value; /* of the <Tag> being read */
    char *found;       /* the value of the tag named want */
};

static int tagging_start(void *ctx, const struct s3d_xml_name *stack, int depth)
{
    (void)ctx;
    return want_root(DOC_TAGGING, stack, depth, "Tagging");
}

static int tagging_end(void *ctx, const struct s3d_xml_name *stack, int depth, const char *t,
                       size_t len)
{
    struct tagging_ctx *c = ctx;
    if (depth != 3 && depth != 2)
        return 0;
    if (!s3d_xml_name_is(&stack[1], "TagSet") || !s3d_xml_name_is(&stack[2], "Tag"))
        return 0;
    if (depth == 3 && s3d_xml_name_is(&stack[3], "Key"))
        return dup_text(&c->key, t, len);
    if (depth == 3 && s3d_xml_name_is(&stack[3], "Value"))
        return dup_text(&c->value, t, len);
    if (depth == 2) {
        /* </Tag>: keep the value when the key is the one looked for. */
        if (c->key != NULL && strcmp(c->key, c->want) == 0 && c->found == NULL) {
            c->found = c->value != NULL ? c->value : s3d_strndup("", 0);
            c->value = NULL;
            if (c->found == NULL)
                return s3d_fail(S3D_ENOMEM, "out of memory parsing an S3 response");
        }
        free(c->key);
        free(c->value);
        c->key = c->value = NULL;
    }
    return 0;
}

int s3d_xml_parse_tag(const char *body, size_t len, const char *key, char **value)
{
    struct tagging_ctx c = {.want = key};
    struct s3d_xml_handler h = {tagging_start, tagging_end, &c};
    int rc;
    if ((rc = check_args(DOC_TAGGING, body, value)) < 0)
        return rc;
    *value = NULL;
    rc = s3d_xml_walk(DOC_TAGGING, body, len, &h);
    free(c.key);
    free(c.value);
    if (rc < 0) {
        free(c.found);
        return rc;
    }
    *value = c.found;
    return 0;
}

int s3d_xml_build_tagging(const char *key, const char *value, struct s3d_dynbuf *out)
{
    int rc;
    if ((rc = append(out, XML_DECL "<Tagging xmlns=\"" S3_XMLNS "\"><TagSet><Tag><Key>")) < 0 ||
        (rc = s3d_xml_escape(out, key, strlen(key))) < 0 ||
        (rc = append(out, "</Key><Value>")) < 0 ||
        (rc = s3d_xml_escape(out, value, strlen(value))) < 0)
        return rc;
    return append(out, "</Value></Tag></TagSet></Tagging>");
}
