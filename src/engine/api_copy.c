/* api_copy.c - s3d_copy_object (transfer.h): an object copied to another key.
 *
 * From the multipart threshold on, the server copies it (server_copy): UploadPartCopy parts
 * into a multipart upload, at the source's part boundaries (told by the server, or guessed
 * from its ETag's part count: ss_guess_parts), proved by MD5 ETags before
 * CompleteMultipartUpload (the rules, and when the copy goes through the client instead:
 * docs/internals/engine.md, "Server-side copies"). Through the client, a copy holds at most
 * s3d_client_buffers() slots of part_size bytes (the fixed concurrency, or what staging_bytes
 * holds while it adapts), fetched a window at a time and handed out as the parts of the
 * upload; below the multipart threshold one buffer of the object's size. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "common/compiler.h"
#include "common/crc32c.h"
#include "common/dynbuf.h"
#include "common/error.h"
#include "common/log.h"
#include "engine/api_transfer_int.h"
#include "engine/client_impl.h"
#include "engine/own_checksum.h"
#include "engine/part_size.h"
#include "engine/slots.h"
#include "engine/xfer.h"
#include "s3/limits.h"
#include "s3/ops.h"
#include "s3/retry.h"
#include "s3direct/transfer.h"

/* ---- copy: ranged GETs of a window of parts, then those parts uploaded --------------------- */

struct copy_ctx {
    struct s3d_client *c;
    const char *bucket, *key;
    const char *etag; /* of the source version the copy started on (If-Match) */
    uint64_t size, part, next_off;
    uint32_t next_number;
    struct topts *o;
    struct s3d_slots slots;
    struct s3d_get_job *win; /* the fetched window, one per slot */
    size_t win_n, win_next;
};

static int copy_next(void *ctx, struct s3d_put_part *p)
{
    struct copy_ctx *x = ctx;
    struct s3d_get_job *j;
    size_t k;
    int rc;
    if (x->win_next == x->win_n) {
        if (x->next_off >= x->size)
            return S3D_FEED_DONE;
        /* Fetch the next window only when every slot is back: memory stays bounded. */
        if (s3d_slots_free_count(&x->slots) < x->slots.n)
            return S3D_FEED_NOT_YET;
        x->win_n = 0;
        x->win_next = 0;
        for (k = 0; k < x->slots.n && x->next_off < x->size; k++) {
            j = &x->win[k];
            memset(j, 0, sizeof(*j));
            j->bucket = x->bucket;
            j->key = x->key;
            j->if_match = x->etag;
            j->object_size = x->size;
            j->offset = x->next_off;
            j->length = S3D_MIN(x->part, x->size - x->next_off);
            j->dst = s3d_slot_get(&x->slots);
            if (j->dst == NULL)
                return s3d_fail(S3D_ENOMEM, "out of memory for a copy buffer");
            x->next_off += j->length;
            x->win_n++;
        }
        rc = s3d_xfer_get(x->c, x->win, x->win_n, NULL, x->o->max_conc, NULL, NULL, x->o->cancel);
        if (rc < 0)
            return rc;
    }
    j = &x->win[x->win_next++];
    s3d_slot_as_part(&x->slots, j->dst, j->length, x->next_number++, p);
    return S3D_FEED_OK;
}

static int copy_release(void *ctx, const struct s3d_put_part *p)
{
    struct copy_ctx *x = ctx;
    s3d_slot_put(&x->slots, p->user);
    return 0;
}

/* A copy below the multipart threshold: one GET of the whole source (its version pinned by
 * If-Match), then one PUT. */
static int copy_single(struct s3d_client *c, const char *src_bucket, const char *src_key,
                       const char *dst_bucket, const char *dst_key,
                       const struct s3d_object_info *info, const struct s3d_want_crc *want,
                       const struct s3d_put_options *po)
{
    char *buf = malloc(info->size ? info->size : 1);
    int rc = 0;
    if (buf == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory");
    if (info->size > 0)
        rc = s3d_op_get_range(&c->s3, src_bucket, src_key, 0, info->size, buf, info->etag,
                              info->size);
    if (rc == 0 && want->b64[0] != '\0')
        rc = s3d_own_verify(src_bucket, src_key, want, s3d_crc32c(0, buf, (size_t)info->size));
    if (rc == 0) {
        struct iovec v = {.iov_base = buf, .iov_len = (size_t)info->size};
        rc = s3d_xfer_put_single(c, dst_bucket, dst_key, &v, 1, po);
    }
    free(buf);
    return rc;
}

/* A multipart copy: windows of ranged GETs into the slots, handed out as parts (copy_next). */
static int copy_multipart(struct s3d_client *c, const char *src_bucket, const char *src_key,
                          const char *dst_bucket, const char *dst_key,
                          const struct s3d_object_info *info, struct topts *o,
                          const struct s3d_put_options *po)
{
    struct copy_ctx x = {.c = c,
                         .bucket = src_bucket,
                         .key = src_key,
                         .etag = info->etag,
                         .size = info->size,
                         .part = s3d_upload_part_size(o->part_size, info->size),
                         .next_number = 1,
                         .o = o};
    const struct s3d_put_hooks h = {.next = copy_next, .release = copy_release, .ctx = &x};
    int rc = s3d_slots_init(&x.slots, s3d_client_buffers(c, o->max_conc, x.part), x.part);
    x.win = calloc(x.slots.n, sizeof(*x.win));
    if (rc == 0 && x.win == NULL)
        rc = s3d_fail(S3D_ENOMEM, "out of memory");
    if (rc == 0)
        rc = s3d_xfer_put_multipart(c, dst_bucket, dst_key, &h, po);
    s3d_slots_free(&x.slots);
    free(x.win);
    return rc;
}

/* ---- server-side copy: UploadPartCopy of the source's own parts ---------------------------- */

/* What s3d_copy_object does when a server-side copy cannot prove its bytes (or the server
 * will not copy): the copy goes through the client instead, which checks them itself. */
#define SS_FALLBACK 1
/* ss_learn_parts: the server does not tell the source's part sizes (why in x->why). */
#define SS_UNTOLD 2

/* A server-side copy: the source's parts (their byte lengths) copied as the same parts. */
struct ss_copy {
    const char *src_bucket, *src_key, *dst_bucket, *dst_key;
    const char *etag; /* the source's */
    const char *copy_source;
    uint64_t *lens;
    uint32_t n, next;
    int single;     /* a single-part source: its one part's ETag must be the source's */
    uint64_t guess; /* the part size guessed from the ETag (ss_guess_parts); 0 = none */
    uint64_t next_off;
    char why[400];    /* the reason to go through the client instead ("" = none) */
    char untold[300]; /* with guess: why the server's part sizes are not known */
};

static int ss_next(void *ctx, struct s3d_put_part *p)
{
    struct ss_copy *x = ctx;
    if (x->next == x->n)
        return S3D_FEED_DONE;
    p->part_number = x->next + 1;
    p->length = x->lens[x->next];
    p->copy_source = x->copy_source;
    p->copy_offset = x->next_off;
    p->copy_if_match = x->etag; /* Ceph RGW 16 ignores it: the answer's ETag is the proof */
    x->next_off += p->length;
    x->next++;
    return S3D_FEED_OK;
}

/* A refusal that says the server does not do this copy, where reading the source through the
 * client may still work: 501 or NotImplemented (no UploadPartCopy at all), 400 InvalidRequest
 * or InvalidArgument (AWS's answer for a source it cannot range-copy, an SSE-C object's). Any
 * other error (403, 404, 5xx after the retries) fails the copy: streaming would meet it too. */
static int copy_refused(int status, const char *code)
{
    if (s3d_retry_is_not_implemented(status, code))
        return 1;
    return status == 400 &&
           (strcmp(code, "InvalidRequest") == 0 || strcmp(code, "InvalidArgument") == 0);
}

/* check_copy: a part is kept only with an MD5 ETag, and the one part of a single-part
 * source's copy only with the source's ETag; the whole is checked before Complete
 * (expect_etag). Never 1: a part is not sent instead. */
static int ss_check(void *ctx, const struct s3d_put_part *p, const char *etag, const char *crc,
                    const char *why)
{
    struct ss_copy *x = ctx;
    uint32_t parts;
    (void)crc;
    if (etag == NULL) {
        struct s3d_error_info e = {.struct_size = sizeof(e)};
        s3d_error_get(&e);
        if (copy_refused(e.http_status, e.s3_code ? e.s3_code : ""))
            snprintf(x->why, sizeof(x->why), "the server refused UploadPartCopy: %s", why);
        else if (e.http_status == 412) /* a server that honours x-amz-copy-source-if-match */
            return s3d_fail(S3D_ECHANGED,
                            "copy of s3://%s/%s to s3://%s/%s: the source was replaced during "
                            "the copy (its ETag is no longer %s); nothing was written",
                            x->src_bucket, x->src_key, x->dst_bucket, x->dst_key, x->etag);
        return e.code < 0 ? e.code : s3d_fail(S3D_EPROTO, "%s", why);
    }
    if (s3d_op_etag_shape(etag, &parts) != 1) {
        snprintf(x->why, sizeof(x->why),
                 "the server answered UploadPartCopy of part %u with ETag %s, not an MD5",
                 p->part_number, etag);
        return s3d_fail(S3D_EPROTO, "%s", x->why);
    }
    if (x->single && !s3d_op_etag_same(etag, x->etag))
        return s3d_fail(S3D_ECHANGED,
                        "copy of s3://%s/%s to s3://%s/%s: the server copied bytes with ETag "
                        "%s, but the source's is %s: the source was replaced during the copy; "
                        "nothing was written",
                        x->src_bucket, x->src_key, x->dst_bucket, x->dst_key, etag, x->etag);
    return 0;
}

/* The source's part lengths into x (HEAD ?partNumber=k, one after another), or why not, in
 * x->why: SS_UNTOLD for a server that does not tell them (refuses partNumber with 400, 416 or
 * 501, or answers without the part count: Ceph RGW 16), SS_FALLBACK for sizes a copy cannot
 * use; other errors fail the copy. */
static int ss_learn_parts(struct s3d_client *c, struct ss_copy *x, uint64_t size,
                          struct s3d_cancel *cancel)
{
    uint64_t sum = 0;
    for (uint32_t k = 1; k <= x->n; k++) {
        uint32_t count;
        uint64_t len;
        int rc;
        if (s3d_cancel_is_set(cancel) || s3d_client_stopped(c))
            return s3d_fail(S3D_ECANCELED, "copy of s3://%s/%s canceled", x->src_bucket,
                            x->src_key);
        rc = s3d_op_head_part(&c->s3, x->src_bucket, x->src_key, k, &len, &count);
        if (rc < 0) {
            struct s3d_error_info e = {.struct_size = sizeof(e)};
            s3d_error_get(&e);
            if (e.http_status != 400 && e.http_status != 416 && e.http_status != 501)
                return rc;
            snprintf(x->why, sizeof(x->why), "HEAD ?partNumber=%u was refused: %s", k, e.message);
            return SS_UNTOLD;
        }
        if (count != x->n) {
            snprintf(x->why, sizeof(x->why),
                     "the server does not tell the source's part sizes (HEAD ?partNumber=%u "
                     "answered x-amz-mp-parts-count %u, the ETag says %u)",
                     k, count, x->n);
            return SS_UNTOLD;
        }
        if (k < x->n && len < S3D_MIN_PART_SIZE) {
            snprintf(x->why, sizeof(x->why),
                     "the source's part %u is %" PRIu64 " bytes, under the 5 MiB every part "
                     "but the last must have",
                     k, len);
            return SS_FALLBACK;
        }
        x->lens[k - 1] = len;
        sum += len;
    }
    if (sum != size) {
        snprintf(x->why, sizeof(x->why),
                 "the source's parts add up to %" PRIu64 " bytes, not its %" PRIu64, sum, size);
        return SS_FALLBACK;
    }
    return 0;
}

/* After SS_UNTOLD: x's parts guessed from the ETag's part count (s3d_guess_part_size: one
 * guess, as a wrong one costs a whole copy on the server before the ETag check rejects it;
 * x->guess, the reason kept in x->untold), or SS_FALLBACK with why not in x->why. */
static int ss_guess_parts(struct ss_copy *x, uint64_t size, uint64_t part_size)
{
    const uint64_t p = s3d_guess_part_size(size, x->n, part_size);
    snprintf(x->untold, sizeof(x->untold), "%.299s", x->why);
    if (p == 0) {
        snprintf(x->why, sizeof(x->why),
                 "%.280s, and no usual part size (s3direct's, the AWS CLI's, or the only MiB "
                 "multiple that fits) cuts its %" PRIu64 " bytes into %u parts",
                 x->untold, size, x->n);
        return SS_FALLBACK;
    }
    for (uint32_t k = 0; k < x->n; k++)
        x->lens[k] = k + 1 < x->n ? p : size - (uint64_t)(x->n - 1) * p;
    x->guess = p;
    x->why[0] = '\0';
    return 0;
}

/* What the copy's parts must combine to, into expect (80 bytes): a multipart source's own
 * ETag; for a single-part source, the ETag of a one-part upload of its bytes (the MD5 of its
 * MD5, "-1"). */
static void ss_expect_etag(const struct ss_copy *x, uint32_t shape, char expect[80])
{
    struct s3d_op_part one = {.part_number = 1};
    const char *e = x->etag + (x->etag[0] == '"');
    if (shape == 2) {
        snprintf(expect, 80, "%s", x->etag);
        return;
    }
    snprintf(one.etag, sizeof(one.etag), "\"%.32s\"", e);
    if (s3d_op_multipart_etag(&one, 1, expect) < 0)
        expect[0] = '\0';
}

/* After the upload ran with rc < 0: SS_FALLBACK, the reason in x->why, when the server
 * refused the copy (ss_check set it) or the guessed parts made another ETag than the
 * source's (made, the upload aborted); else rc. */
static int ss_failed(struct ss_copy *x, const char *made, int rc)
{
    if (x->why[0] != '\0')
        return SS_FALLBACK;
    if (x->guess == 0 || made[0] == '\0')
        return rc;
    snprintf(x->why, sizeof(x->why),
             "%.200s; the %u parts of %" PRIu64 " bytes guessed from its ETag are not its "
             "parts: copied, they make ETag %s, not the source's %s (the upload was aborted)",
             x->untold, x->n, x->guess, made, x->etag);
    return SS_FALLBACK;
}

/* The copy made by the server: 0, a failure (recorded), or SS_FALLBACK with the reason in
 * why (nothing written, no upload left). part_size: the client's, for a guess of the
 * source's parts (ss_guess_parts). */
static int server_copy(struct s3d_client *c, const char *src_bucket, const char *src_key,
                       const char *dst_bucket, const char *dst_key,
                       const struct s3d_object_info *info, const struct s3d_want_crc *want,
                       const struct s3d_put_options *po0, uint64_t part_size, char *why,
                       size_t why_cap)
{
    struct ss_copy x = {.src_bucket = src_bucket,
                        .src_key = src_key,
                        .dst_bucket = dst_bucket,
                        .dst_key = dst_key,
                        .etag = info->etag};
    const struct s3d_put_hooks h = {.next = ss_next, .check_copy = ss_check, .ctx = &x};
    struct s3d_put_options po = *po0;
    struct s3d_dynbuf src;
    char expect[80], made[80] = "";
    uint32_t parts = 0;
    const uint32_t shape = (uint32_t)s3d_op_etag_shape(info->etag, &parts);
    int rc;

    if (shape == 0)
        snprintf(x.why, sizeof(x.why), "the source's ETag %s is not MD5-based (encrypted?)",
                 info->etag);
    else if (shape == 1 && info->size > S3D_MAX_PART_SIZE)
        snprintf(x.why, sizeof(x.why), "the source is one upload of over 5 GiB");
    else if (parts > S3D_MAX_PARTS)
        snprintf(x.why, sizeof(x.why), "the source's ETag says %u parts", parts);
    if (x.why[0] != '\0') {
        snprintf(why, why_cap, "%s", x.why);
        return SS_FALLBACK;
    }
    x.n = shape == 2 ? parts : 1;
    x.single = shape == 1;
    x.lens = calloc(x.n, sizeof(*x.lens));
    if (x.lens == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory");
    x.lens[0] = info->size; /* also a multipart source of one part: nothing to learn */
    rc = x.n > 1 ? ss_learn_parts(c, &x, info->size, po.cancel) : 0;
    if (rc == SS_UNTOLD)
        rc = ss_guess_parts(&x, info->size, part_size);
    s3d_dynbuf_init(&src, 8192);
    if (rc == 0)
        rc = s3d_op_copy_source(&src, src_bucket, src_key);
    if (rc == 0) {
        x.copy_source = src.data;
        ss_expect_etag(&x, shape, expect);
        po.expect_etag = expect;
        po.made_etag = made;
        po.expect_crc32c = NULL;
        po.object_crc32c = want->b64; /* "" when the source's is not known: no tag */
        rc = s3d_xfer_put_multipart(c, dst_bucket, dst_key, &h, &po);
        if (rc < 0)
            rc = ss_failed(&x, made, rc);
        else if (x.guess != 0)
            S3D_DEBUG("copy of s3://%s/%s: %u parts of %" PRIu64 " bytes guessed from the ETag "
                      "(%s), proved by it",
                      src_bucket, src_key, x.n, x.guess, x.untold);
    }
    if (rc == SS_FALLBACK)
        snprintf(why, why_cap, "%s", x.why);
    s3d_dynbuf_free(&src);
    free(x.lens);
    return rc;
}

/* ---- s3d_copy_object ----------------------------------------------------------------------- */

int s3d_copy_object(struct s3d_client *c, const char *src_bucket, const char *src_key,
                    const char *dst_bucket, const char *dst_key,
                    const struct s3d_transfer_options *opts)
{
    struct s3d_object_info info;
    struct s3d_put_options po;
    struct s3d_op_sums sums;
    struct s3d_want_crc want;
    /* Zeroed: s3d_topts_resolve fills it, in a file the static analyzer does not see. */
    struct topts o = {0};
    char why[400];
    int rc = s3d_topts_check_args(c, src_bucket, src_key);
    if (rc == 0)
        rc = s3d_topts_check_args(c, dst_bucket, dst_key);
    if (rc == 0)
        rc = s3d_topts_resolve(c, opts, &o);
    if (rc < 0)
        return rc;
    rc = s3d_op_head_sums(&c->s3, src_bucket, src_key, &info, &sums);
    if (rc == 0) /* the HEAD carries the server's checksum: no second one */
        rc = s3d_own_object_checksum(c, src_bucket, src_key, &info, &sums, 1, &want);
    if (rc < 0)
        return rc;
    S3D_ASSERT(rc == 0); /* both return 0 or a negative code: want is filled */
    s3d_topts_put(
        &o, info.size,
        o.content_type ? o.content_type : (info.content_type[0] ? info.content_type : NULL), &po);
    /* The bytes read from the source are checked against its checksum before the copy is
     * stored (and given a CRC of its own). */
    po.expect_crc32c = want.b64;
    if (info.size < c->multipart_threshold || info.size == 0)
        return copy_single(c, src_bucket, src_key, dst_bucket, dst_key, &info, &want, &po);
    rc = server_copy(c, src_bucket, src_key, dst_bucket, dst_key, &info, &want, &po, o.part_size,
                     why, sizeof(why));
    if (rc != SS_FALLBACK)
        return rc;
    S3D_INFO("copy of s3://%s/%s to s3://%s/%s goes through the client: %s", src_bucket, src_key,
             dst_bucket, dst_key, why);
    return copy_multipart(c, src_bucket, src_key, dst_bucket, dst_key, &info, &o, &po);
}
