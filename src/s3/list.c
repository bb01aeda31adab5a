/* list.c - the paginated S3 listings (ops.h): ListObjectsV2, ListMultipartUploads and
 * ListBuckets, each one pager over the same loop, which follows the markers each page gives
 * and stops on one it has seen before. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "s3/ops.h"
#include "s3/s3doc.h"

/* ---- paginated listings ------------------------------------------------------------------ */

/* One paginated listing. pager_run() owns the loop: request a page with the markers the last
 * page gave (none on the first), parse it, hand its entries to the caller, and follow the
 * markers until the last page or until the caller stops. Each listing supplies the steps in
 * its pager_ops and embeds the pager as its first member. */
struct pager;

struct pager_ops {
    const char *operation; /* S3 operation name, also the prefix of parse errors */
    /* Adds the listing's query parameters (with the markers) to op. */
    void (*query)(const struct pager *pg, struct s3d_s3_op *op);
    int (*parse)(const char *body, size_t len, void *page);
    /* Hands the page's entries to the caller's function; 1 when it asked to stop. */
    int (*deliver)(struct pager *pg);
    /* Moves the next page's markers out of the page into pg->marker: 0, or 1 when this was
     * the last page, or a negative code (recorded) for a page that cannot be followed. */
    int (*next)(struct pager *pg);
    void (*page_free)(void *page);
};

struct pager {
    const struct pager_ops *ops;
    const char *bucket; /* NULL for ListBuckets */
    void *page;         /* the listing's parsed-page struct, reused for every page */
    char *marker[2];    /* owned; from the last page, NULL on the first request */
};

static void pager_drop_markers(struct pager *pg)
{
    free(pg->marker[0]);
    free(pg->marker[1]);
    pg->marker[0] = pg->marker[1] = NULL;
}

/* Two 64-bit FNV-1a hashes (different offsets) of the page markers: a page's identity. */
struct marker_id {
    uint64_t a, b;
};

static struct marker_id marker_id(const struct pager *pg)
{
    struct marker_id id = {UINT64_C(14695981039346656037), UINT64_C(0x9ae16a3b2f90404f)};
    for (int m = 0; m < 2; m++) {
        const char *p = pg->marker[m] ? pg->marker[m] : "";
        for (;; p++) {
            id.a = (id.a ^ (unsigned char)*p) * UINT64_C(1099511628211);
            id.b = (id.b ^ (unsigned char)*p) * UINT64_C(0x100000001b3);
            id.b ^= id.b >> 29;
            if (*p == '\0')
                break;
        }
    }
    return id;
}

/* A listing whose server hands back a continuation marker it already gave would run forever,
 * delivering the same entries again (`rm --recursive` grew by 1.8 GB a minute): as
 * botocore's paginator does, a repeated marker ends the listing with an error. Returns 0, or
 * S3D_EPROTO (recorded) when the markers now in pg were seen before. */
static int pager_check_repeat(struct pager *pg, struct marker_id **seen, size_t *n, size_t *cap)
{
    struct marker_id id = marker_id(pg);
    for (size_t i = 0; i < *n; i++)
        if ((*seen)[i].a == id.a && (*seen)[i].b == id.b) {
            struct s3d_err_s3 d = {.operation = pg->ops->operation, .bucket = pg->bucket};
            return s3d_fail_s3(S3D_EPROTO, &d,
                               "%s%s%s: the server returned a continuation marker it had "
                               "already given (%.100s), after %zu pages: the listing would "
                               "never end, so it stops here",
                               pg->ops->operation, pg->bucket ? " s3://" : "",
                               pg->bucket ? pg->bucket : "", pg->marker[0] ? pg->marker[0] : "",
                               *n + 1);
        }
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        struct marker_id *v = realloc(*seen, nc * sizeof(*v));
        if (v == NULL)
            return s3d_fail(S3D_ENOMEM, "out of memory listing");
        *seen = v;
        *cap = nc;
    }
    (*seen)[(*n)++] = id;
    return 0;
}

static int pager_run(struct s3d_s3ctx *ctx, struct pager *pg)
{
    int rc = 0, stop = 0;
    struct marker_id *seen = NULL;
    size_t n_seen = 0, cap_seen = 0;

    while (!stop) {
        struct s3d_s3_op op;
        int nx;
        s3d_op_init(&op, pg->ops->operation, "GET", pg->bucket, NULL);
        pg->ops->query(pg, &op);
        rc = s3d_s3_op_run(ctx, &op);
        if (rc == 0) {
            rc = pg->ops->parse(op.req.resp.body.data ? op.req.resp.body.data : "",
                                op.req.resp.body.len, pg->page);
            if (rc < 0 && pg->bucket != NULL)
                s3d_fail_prefix(rc, "%s s3://%s", pg->ops->operation, pg->bucket);
            else if (rc < 0)
                s3d_fail_prefix(rc, "%s", pg->ops->operation);
        }
        s3d_s3_op_cleanup(&op);
        if (rc < 0)
            break;
        stop = pg->ops->deliver(pg);
        pager_drop_markers(pg);
        nx = pg->ops->next(pg);
        if (nx == 0 && !stop)
            nx = pager_check_repeat(pg, &seen, &n_seen, &cap_seen);
        if (nx != 0)
            stop = 1;
        if (nx < 0)
            rc = nx;
        pg->ops->page_free(pg->page);
    }
    pager_drop_markers(pg);
    free(seen);
    return rc;
}

struct uploads_pager {
    struct pager pg;
    const char *prefix;
    s3d_upload_entry_fn fn;
    void *user;
    struct s3d_xml_uploads_result res;
};

static void uploads_query(const struct pager *pg, struct s3d_s3_op *op)
{
    const struct uploads_pager *u = (const struct uploads_pager *)pg;
    s3d_s3_op_add_query(op, "uploads", "");
    if (u->prefix != NULL && u->prefix[0] != '\0')
        s3d_s3_op_add_query(op, "prefix", u->prefix);
    if (pg->marker[0] != NULL)
        s3d_s3_op_add_query(op, "key-marker", pg->marker[0]);
    if (pg->marker[1] != NULL)
        s3d_s3_op_add_query(op, "upload-id-marker", pg->marker[1]);
}

static int uploads_parse(const char *body, size_t len, void *page)
{
    return s3d_xml_parse_list_uploads(body, len, page);
}

static int uploads_deliver(struct pager *pg)
{
    struct uploads_pager *u = (struct uploads_pager *)pg;
    size_t i;
    for (i = 0; i < u->res.n_uploads; i++) {
        const struct s3d_xml_upload *x = &u->res.uploads[i];
        struct s3d_upload_entry ent = {sizeof(ent), x->key, x->upload_id, x->initiated,
                                       x->storage_class};
        if (u->fn(u->user, &ent) != 0)
            return 1;
    }
    return 0;
}

static int uploads_next(struct pager *pg)
{
    struct s3d_xml_uploads_result *r = &((struct uploads_pager *)pg)->res;
    if (!r->is_truncated || r->next_key_marker == NULL)
        return 1;
    pg->marker[0] = r->next_key_marker;
    pg->marker[1] = r->next_upload_id_marker;
    r->next_key_marker = r->next_upload_id_marker = NULL;
    return 0;
}

static void uploads_free(void *page)
{
    s3d_xml_uploads_free(page);
}

static const struct pager_ops uploads_ops = {"ListMultipartUploads", uploads_query, uploads_parse,
                                             uploads_deliver,        uploads_next,  uploads_free};

int s3d_op_list_uploads(struct s3d_s3ctx *ctx, const char *bucket, const char *prefix,
                        s3d_upload_entry_fn fn, void *user)
{
    struct uploads_pager u = {{&uploads_ops, bucket, &u.res, {NULL, NULL}}, prefix, fn, user, {0}};
    return pager_run(ctx, &u.pg);
}

struct buckets_pager {
    struct pager pg;
    s3d_bucket_fn fn;
    void *user;
    struct s3d_xml_buckets_result res;
};

static void buckets_query(const struct pager *pg, struct s3d_s3_op *op)
{
    if (pg->marker[0] != NULL)
        s3d_s3_op_add_query(op, "continuation-token", pg->marker[0]);
}

static int buckets_parse(const char *body, size_t len, void *page)
{
    return s3d_xml_parse_list_buckets(body, len, page);
}

static int buckets_deliver(struct pager *pg)
{
    struct buckets_pager *b = (struct buckets_pager *)pg;
    size_t i;
    for (i = 0; i < b->res.n_buckets; i++) {
        struct s3d_bucket_entry ent = {sizeof(ent), b->res.buckets[i].name,
                                       b->res.buckets[i].creation_date};
        if (b->fn(b->user, &ent) != 0)
            return 1;
    }
    return 0;
}

static int buckets_next(struct pager *pg)
{
    struct s3d_xml_buckets_result *r = &((struct buckets_pager *)pg)->res;
    /* A page without a token is the last (a repeated token: pager_check_repeat). */
    if (r->continuation_token == NULL || r->continuation_token[0] == '\0' || r->n_buckets == 0)
        return 1;
    pg->marker[0] = r->continuation_token;
    r->continuation_token = NULL;
    return 0;
}

static void buckets_free(void *page)
{
    s3d_xml_buckets_free(page);
}

static const struct pager_ops buckets_ops = {"ListBuckets",   buckets_query, buckets_parse,
                                             buckets_deliver, buckets_next,  buckets_free};

int s3d_op_list_buckets(struct s3d_s3ctx *ctx, s3d_bucket_fn fn, void *user)
{
    struct buckets_pager b = {{&buckets_ops, NULL, &b.res, {NULL, NULL}}, fn, user, {0}};
    return pager_run(ctx, &b.pg);
}

struct objects_pager {
    struct pager pg;
    const char *prefix, *delimiter;
    s3d_list_fn fn;
    void *user;
    struct s3d_xml_list_result res;
};

static void objects_query(const struct pager *pg, struct s3d_s3_op *op)
{
    const struct objects_pager *o = (const struct objects_pager *)pg;
    s3d_s3_op_add_query(op, "list-type", "2");
    if (o->prefix != NULL && o->prefix[0] != '\0')
        s3d_s3_op_add_query(op, "prefix", o->prefix);
    if (o->delimiter != NULL && o->delimiter[0] != '\0')
        s3d_s3_op_add_query(op, "delimiter", o->delimiter);
    if (pg->marker[0] != NULL)
        s3d_s3_op_add_query(op, "continuation-token", pg->marker[0]);
}

static int objects_parse(const char *body, size_t len, void *page)
{
    return s3d_xml_parse_list_v2(body, len, page);
}

/* Objects first, then the common prefixes (entries with is_prefix set), as S3 lists them;
 * page_last marks the page's last entry. */
static int objects_deliver(struct pager *pg)
{
    struct objects_pager *o = (struct objects_pager *)pg;
    const struct s3d_xml_list_result *r = &o->res;
    struct s3d_list_entry ent;
    size_t i;
    for (i = 0; i < r->n_contents; i++) {
        memset(&ent, 0, sizeof(ent));
        ent.struct_size = sizeof(ent);
        ent.key = r->contents[i].key;
        ent.size = r->contents[i].size;
        ent.last_modified = r->contents[i].last_modified;
        ent.etag = r->contents[i].etag ? r->contents[i].etag : "";
        ent.page_last = i + 1 == r->n_contents && r->n_prefixes == 0;
        if (o->fn(o->user, &ent) != 0)
            return 1;
    }
    for (i = 0; i < r->n_prefixes; i++) {
        memset(&ent, 0, sizeof(ent));
        ent.struct_size = sizeof(ent);
        ent.key = r->prefixes[i];
        ent.etag = "";
        ent.is_prefix = 1;
        ent.page_last = i + 1 == r->n_prefixes;
        if (o->fn(o->user, &ent) != 0)
            return 1;
    }
    return 0;
}

static int objects_next(struct pager *pg)
{
    struct s3d_xml_list_result *r = &((struct objects_pager *)pg)->res;
    if (!r->is_truncated)
        return 1;
    if (r->next_continuation_token == NULL) {
        struct s3d_err_s3 d = {.operation = "ListObjectsV2", .bucket = pg->bucket};
        return s3d_fail_s3(S3D_EPROTO, &d,
                           "ListObjectsV2 s3://%s: truncated page without a continuation token",
                           pg->bucket);
    }
    pg->marker[0] = r->next_continuation_token;
    r->next_continuation_token = NULL;
    return 0;
}

static void objects_free(void *page)
{
    s3d_xml_list_free(page);
}

static const struct pager_ops objects_ops = {"ListObjectsV2", objects_query, objects_parse,
                                             objects_deliver, objects_next,  objects_free};

int s3d_op_list_objects(struct s3d_s3ctx *ctx, const char *bucket, const char *prefix,
                        const char *delimiter, s3d_list_fn fn, void *user)
{
    struct objects_pager o = {
        {&objects_ops, bucket, &o.res, {NULL, NULL}}, prefix, delimiter, fn, user, {0}};
    return pager_run(ctx, &o.pg);
}
