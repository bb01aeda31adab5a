/* xfer.c - the transfer scheduler: one curl-multi loop under every data transfer (contract in
 * xfer.h). The public API files (api_*.c) and the checkpoint pipeline sit on top of it.
 *
 * One event loop on the calling thread drives up to N requests at once on a multi handle
 * taken from the client (its kept-alive connections come with it). Each request is an
 * "item": an op (s3/s3ctx.h), its easy handle, and its retry state. An item that fails with
 * a transient error waits out its backoff in the WAITING state while the others go on; it
 * restarts when its time has come and a connection is free (retries go before new work).
 * A ranged GET that broke mid-body restarts at the first byte not yet received.
 *
 * Loop turn: cancel check -> restart due retries -> feed new work (prepare / next hooks) ->
 * curl_multi_perform -> judge finished requests -> poll hook -> progress -> the client's
 * concurrency budget -> curl_multi_poll (short when a hook is waiting for its own work, else
 * until the next retry or 100 ms).
 *
 * How many requests run: at most the transfer's cap (max_concurrency), and a new one starts
 * only while the client's requests in flight, over every transfer on every thread, are below
 * the level its controller chose (engine/conc.h); a transfer with nothing in flight may
 * always start one, so that no transfer waits on another's buffers.
 *
 * The same loop runs downloads (GET jobs), multipart parts, and single PUTs: the kinds differ
 * only in how they feed, build an attempt, and finish. */
#include "engine/xfer.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/compiler.h"
#include "common/crc32c.h"
#include "common/error.h"
#include "common/log.h"
#include "engine/client_impl.h"
#include "engine/conc.h"
#include "engine/multipart.h"
#include "s3/ops.h"

enum item_state { ITEM_FREE = 0, ITEM_RUNNING, ITEM_WAITING };
enum eng_kind { KIND_GET, KIND_PART, KIND_SINGLE };

struct item {
    int state;
    CURL *e; /* created on first use, reset per attempt */
    struct s3d_s3_op op;
    uint32_t attempts;
    uint64_t retry_at;
    uint64_t started_ms; /* this attempt's start, for the controller's measure of uploads */
    struct s3d_retry_policy pol;
    /* GET */
    struct s3d_get_job *job;
    int if_match_set; /* the op carries If-Match: job->if_match */
    /* PUT */
    struct s3d_put_part part;
    int synthetic; /* the empty part 1 of an upload that got no parts */
    char number[12];
    char crc[S3D_CRC32C_B64_LEN];
    uint32_t crc_v;      /* the CRC32C crc holds */
    char copy_range[64]; /* a copy part's x-amz-copy-source-range */
};

struct engine {
    struct s3d_client *c;
    enum eng_kind kind;
    struct s3d_multi *mm; /* the multi handle and its connections' sockets */
    struct item *items;
    size_t n_items;
    size_t hw_items; /* items[hw_items..] have never been used */
    size_t in_flight, waiting;
    uint32_t max_conc; /* this transfer's cap */
    struct s3d_conc *budget;
    int budget_blocked;  /* work was ready but the client's budget was full this turn */
    uint64_t bytes_told; /* bytes moved, as told to the budget */
    int draining_told;   /* requests told to the budget as draining */
    uint64_t last_tick_ms;
    s3d_progress_fn progress;
    void *progress_user;
    struct s3d_cancel *cancel;
    int (*poll)(void *ctx);
    void *hook_ctx;
    uint64_t total;      /* for progress */
    uint64_t done_bytes; /* of finished items */
    uint64_t last_progress_ms;
    int feed_done;
    int feed_blocked; /* a hook said "not yet" this turn */
    /* GET */
    struct s3d_get_job *jobs;
    size_t n_jobs, next_job;
    const struct s3d_get_hooks *gh;
    /* PUT */
    const char *bucket, *key;
    const char *upload_id;
    const struct s3d_put_hooks *ph;
    struct s3d_op_part *parts; /* accepted parts */
    size_t n_parts, cap_parts;
    size_t handed_out;
    unsigned char *seen;   /* part numbers handed out, 1..10000 */
    uint64_t copied_bytes; /* of copy parts kept: progress, never the controller's bytes */
    int object_crc;        /* object_crc32c given: a copy part's CRC is the server's, or none */
    struct s3d_put_part single; /* the one PUT's body */
    unsigned char *scratch;     /* for the checksums of parts from a file (xfer_body.h) */
    const struct s3d_put_options *single_o; /* content type and condition; may be NULL */
    uint64_t single_len;
    char etag[80];
};

static void item_reset(struct item *it)
{
    CURL *e = it->e;
    s3d_s3_op_cleanup(&it->op);
    memset(it, 0, sizeof(*it));
    it->e = e;
}

/* Builds and starts one attempt of an item whose op fields are set. */
static int start_attempt(struct engine *g, struct item *it)
{
    int rc;
    if (it->e == NULL) {
        it->e = curl_easy_init();
        if (it->e == NULL)
            return s3d_fail(S3D_ENOMEM, "curl_easy_init failed");
    } else {
        curl_easy_reset(it->e);
    }
    if (it->attempts == 0)
        s3d_s3ctx_retry_policy(&g->c->s3, &it->pol);
    it->attempts++;
    if (g->kind == KIND_GET) {
        struct s3d_get_job *j = it->job;
        uint64_t first = j->offset + j->received, last = j->offset + j->length - 1;
        rc = s3d_s3_op_set_range(&it->op, first, last);
        if (rc < 0)
            return rc;
        if (j->if_match != NULL && j->if_match[0] != '\0' && !it->if_match_set) {
            /* Every attempt, resumed ones included, asks for the version the download
             * started on. */
            rc = s3d_op_if_match(&it->op, j->if_match);
            if (rc < 0)
                return rc;
            it->if_match_set = 1;
        }
        s3d_xfer_job_sink(&it->op, j);
        /* A first range not yet answered may end early, at the object's end. */
        it->op.exact_length = j->first == NULL || j->pinned;
    }
    if (it->pol.deadline_ms != 0) {
        uint64_t now = s3d_now_ms();
        it->op.req.timeout_ms = now < it->pol.deadline_ms ? (long)(it->pol.deadline_ms - now) : 1;
    }
    rc = s3d_s3_op_prepare(&g->c->s3, &it->op, it->e);
    if (rc < 0)
        return rc;
    curl_easy_setopt(it->e, CURLOPT_PRIVATE, it);
    if (s3d_multi_add(g->mm, it->e, &it->op.req) != CURLM_OK)
        return s3d_fail(S3D_ENOMEM, "curl_multi_add_handle failed");
    if (it->state == ITEM_WAITING) {
        S3D_ASSERT(g->waiting > 0);
        g->waiting--;
    }
    S3D_ASSERT(it->state != ITEM_RUNNING && g->in_flight < g->n_items);
    it->state = ITEM_RUNNING;
    g->in_flight++;
    it->started_ms = s3d_now_ms();
    s3d_conc_started(g->budget, g->kind != KIND_GET);
    return 0;
}

static struct item *free_item(struct engine *g)
{
    size_t i;
    for (i = 0; i < g->hw_items; i++)
        if (g->items[i].state == ITEM_FREE)
            return &g->items[i];
    if (g->hw_items < g->n_items)
        return &g->items[g->hw_items++];
    return NULL;
}

/* One more request may start: under the transfer's cap, and under the client's level unless
 * this transfer has nothing in flight (it may always run one). */
static int may_start(struct engine *g)
{
    if (g->in_flight >= g->max_conc)
        return 0;
    if (g->in_flight == 0 || s3d_conc_may_start(g->budget))
        return 1;
    g->budget_blocked = 1;
    return 0;
}

/* ---- feeding ------------------------------------------------------------------------------ */

static int feed_get(struct engine *g, struct item *it)
{
    struct s3d_get_job *j;
    int r;
    if (g->next_job >= g->n_jobs)
        return S3D_FEED_DONE;
    j = &g->jobs[g->next_job];
    if (j->length == 0)
        return s3d_fail(S3D_EINVAL, "GetObject s3://%s/%s: empty range at %" PRIu64, j->bucket,
                        j->key, j->offset);
    if (g->gh != NULL && g->gh->prepare != NULL) {
        r = g->gh->prepare(g->gh->ctx, j);
        if (r != S3D_FEED_OK)
            return r;
    }
    if (j->dst == NULL && !j->to_fd)
        return s3d_fail(S3D_EINVAL,
                        "GetObject s3://%s/%s: no destination for the range at %" PRIu64, j->bucket,
                        j->key, j->offset);
    if (j->received > j->length)
        return s3d_fail(S3D_EINVAL, "GetObject s3://%s/%s: job already past its length", j->bucket,
                        j->key);
    g->next_job++;
    if (j->received == j->length) {
        /* Nothing left (a caller re-running finished jobs). */
        g->done_bytes += j->length;
        if (g->gh != NULL && g->gh->done != NULL) {
            r = g->gh->done(g->gh->ctx, j);
            return r < 0 ? r : 0;
        }
        return 0;
    }
    item_reset(it);
    it->job = j;
    s3d_op_get_init(&it->op, j->bucket, j->key, j->offset + j->received, j->offset + j->length - 1,
                    NULL); /* its destination is set per attempt */
    if (j->first != NULL) {
        r = s3d_s3_op_add_header(&it->op, "x-amz-checksum-mode", "ENABLED");
        if (r < 0)
            return r;
    }
    return start_attempt(g, it);
}

/* A part the server copies from another object (p->copy_source): UploadPartCopy. */
static int feed_copy_part(struct engine *g, struct item *it, const struct s3d_put_part *p)
{
    if (p->iovcnt != 0 || p->length == 0 || g->ph->check_copy == NULL)
        return s3d_fail(S3D_EINVAL,
                        "UploadPartCopy s3://%s/%s: part %u: a copy part has no iovec, a "
                        "length and a check_copy hook",
                        g->bucket, g->key, p->part_number);
    g->seen[p->part_number] = 1;
    g->handed_out++;
    it->part = *p;
    it->crc_v = p->copy_crc;
    s3d_crc32c_base64(p->copy_crc, it->crc);
    s3d_op_upload_part_copy_init(&it->op, g->bucket, g->key, g->upload_id, p->part_number,
                                 it->number, p->copy_source, p->copy_offset, p->length,
                                 it->copy_range, p->copy_if_match);
    return start_attempt(g, it);
}

static int feed_part(struct engine *g, struct item *it)
{
    struct s3d_put_part p;
    int r, i;

    memset(&p, 0, sizeof(p));
    r = g->ph->next(g->ph->ctx, &p);
    if (r == S3D_FEED_DONE && g->handed_out == 0) {
        /* S3 cannot complete an upload with no part: send one empty part. */
        p.part_number = 1;
        p.iov = NULL;
        p.iovcnt = 0;
        p.length = 0;
        item_reset(it);
        it->synthetic = 1;
    } else if (r != S3D_FEED_OK) {
        return r;
    } else {
        uint64_t sum = 0;
        item_reset(it);
        if (p.part_number < 1 || p.part_number > S3D_MAX_PARTS)
            return s3d_fail(S3D_EINVAL, "UploadPart s3://%s/%s: part number %u not in 1..%u",
                            g->bucket, g->key, p.part_number, S3D_MAX_PARTS);
        if (g->seen[p.part_number])
            return s3d_fail(S3D_EINVAL, "UploadPart s3://%s/%s: part number %u handed out twice",
                            g->bucket, g->key, p.part_number);
        if (p.copy_source != NULL)
            return feed_copy_part(g, it, &p);
        for (i = 0; i < p.iovcnt; i++)
            sum += p.iov[i].iov_len;
        if (sum != p.length && !p.from_fd)
            return s3d_fail(S3D_EINVAL,
                            "UploadPart s3://%s/%s: part %u length %" PRIu64
                            " is not the sum of its iovec (%" PRIu64 ")",
                            g->bucket, g->key, p.part_number, p.length, sum);
    }
    g->seen[p.part_number] = 1;
    g->handed_out++;
    it->part = p;
    /* The body (and its CRC-32C) once the op is built, the CRC-32C header after it. */
    s3d_op_upload_part_init(&it->op, g->bucket, g->key, g->upload_id, p.part_number, it->number,
                            p.iov, p.iovcnt, p.length, NULL);
    r = s3d_xfer_part_body(&g->c->s3, &it->op, &p, &it->crc_v, it->crc, &g->scratch);
    if (r < 0)
        return s3d_fail_prefix(r, "UploadPart s3://%s/%s", g->bucket, g->key);
    return start_attempt(g, it);
}

static int feed_single(struct engine *g, struct item *it)
{
    uint32_t crc = 0;
    int rc;
    if (g->handed_out > 0)
        return S3D_FEED_DONE;
    g->handed_out = 1;
    item_reset(it);
    it->op.operation = "PutObject";
    it->op.method = "PUT";
    it->op.bucket = g->bucket;
    it->op.key = g->key;
    rc = s3d_xfer_body(&g->c->s3, &it->op, &g->single, &crc, &g->scratch);
    if (rc < 0)
        return s3d_fail_prefix(rc, "PutObject s3://%s/%s", g->bucket, g->key);
    if (g->single_o != NULL && g->single_o->body_read != NULL &&
        (rc = g->single_o->body_read(g->single_o->body_ctx)) < 0)
        return rc;
    /* The CRC32C twice: for a server that checks and stores checksums, and as user metadata
     * for one that does neither (Ceph RGW 16), which a download checks against. */
    it->crc_v = crc;
    s3d_crc32c_base64(crc, it->crc);
    s3d_s3_op_add_header(&it->op, "Content-Type",
                         g->single_o && g->single_o->content_type ? g->single_o->content_type
                                                                  : "application/octet-stream");
    s3d_s3_op_add_header(&it->op, "x-amz-checksum-crc32c", it->crc);
    s3d_s3_op_add_header(&it->op, S3D_OP_CRC_META, it->crc);
    if (g->single_o != NULL && g->single_o->if_match != NULL && g->single_o->if_match[0])
        s3d_s3_op_add_header(&it->op, "If-Match", g->single_o->if_match);
    if (g->single_o != NULL && g->single_o->if_none_match)
        s3d_s3_op_add_header(&it->op, "If-None-Match", "*");
    return start_attempt(g, it);
}

static int feed(struct engine *g, struct item *it)
{
    switch (g->kind) {
    case KIND_GET:
        return feed_get(g, it);
    case KIND_PART:
        return feed_part(g, it);
    case KIND_SINGLE:
        return feed_single(g, it);
    }
    return S3D_FEED_DONE;
}

/* ---- finishing ---------------------------------------------------------------------------- */

/* A copy part dropped (check_copy answered 1): its number is free again, and the feed asks
 * next() once more, which hands it out as a sent part. */
static int forget_part(struct engine *g, struct item *it)
{
    S3D_ASSERT(g->seen[it->part.part_number] && g->handed_out > 0);
    g->seen[it->part.part_number] = 0;
    g->handed_out--;
    g->feed_done = 0;
    return 0;
}

/* A copy part the server refused (err, recorded) or answered with a body that does not fit:
 * the producer decides (check_copy with etag NULL): send the part instead, or fail. */
static int copy_dropped(struct engine *g, struct item *it, int err)
{
    char why[256];
    int keep;
    snprintf(why, sizeof(why), "%s", s3d_last_error_message());
    keep = g->ph->check_copy(g->ph->ctx, &it->part, NULL, NULL, why);
    if (keep < 0)
        return keep;
    if (keep == 0)
        return err; /* a refused copy cannot be kept */
    return forget_part(g, it);
}

static int finish_ok(struct engine *g, struct item *it)
{
    int rc = 0;
    switch (g->kind) {
    case KIND_GET:
        if (it->job->first != NULL && !it->job->pinned) {
            struct s3d_get_job *j = it->job;
            rc = s3d_op_first_info(&it->op, j->offset + j->received, 1, j->first);
            if (rc < 0)
                return rc;
            if (j->first_sums != NULL)
                s3d_op_sums_get(&it->op, j->first_sums);
            j->length = j->received + it->op.req.resp.received;
            j->if_match = j->first->etag;
            j->object_size = j->first->size;
            j->pinned = 1;
        }
        it->job->received = it->job->length;
        it->job->crc = it->op.req.resp.crc; /* with sum: the range's whole sum */
        g->done_bytes += it->job->length;
        if (g->gh != NULL && g->gh->done != NULL)
            rc = g->gh->done(g->gh->ctx, it->job);
        break;
    case KIND_PART: {
        struct s3d_op_part *p;
        char copy_etag[80] = "", crc[16] = "";
        const int is_copy = it->part.copy_source != NULL;
        if (is_copy) {
            int keep;
            rc = s3d_op_copy_part_result(&it->op, copy_etag, crc);
            if (rc < 0)
                return copy_dropped(g, it, rc);
            keep = g->ph->check_copy(g->ph->ctx, &it->part, copy_etag, crc, NULL);
            if (keep < 0)
                return keep;
            if (keep == 1)
                return forget_part(g, it);
        } else if (it->op.req.resp.etag[0] == '\0') {
            struct s3d_err_s3 d = {.operation = "UploadPart",
                                   .bucket = g->bucket,
                                   .key = g->key,
                                   .http_status = (int)it->op.req.resp.status,
                                   .request_id = it->op.req.resp.request_id};
            return s3d_fail_s3(S3D_EPROTO, &d,
                               "UploadPart s3://%s/%s part %u: no ETag in the "
                               "response",
                               g->bucket, g->key, it->part.part_number);
        } else if ((rc = s3d_xfer_part_sent(&it->op, &it->crc_v, it->crc)) < 0) {
            return rc;
        }
        if (g->n_parts == g->cap_parts) {
            size_t cap = g->cap_parts ? g->cap_parts * 2 : 64;
            struct s3d_op_part *np = realloc(g->parts, cap * sizeof(*np));
            if (np == NULL)
                return s3d_fail(S3D_ENOMEM, "out of memory recording parts");
            g->parts = np;
            g->cap_parts = cap;
        }
        p = &g->parts[g->n_parts++];
        memset(p, 0, sizeof(*p));
        p->part_number = it->part.part_number;
        snprintf(p->crc32c, sizeof(p->crc32c), "%s", is_copy && g->object_crc ? crc : it->crc);
        p->crc = is_copy && g->object_crc ? 0 : it->crc_v;
        p->length = it->part.length;
        if (is_copy) {
            /* Quoted as UploadPart's header ETag is (the XML may carry it bare). */
            if (copy_etag[0] == '"')
                snprintf(p->etag, sizeof(p->etag), "%s", copy_etag);
            else
                snprintf(p->etag, sizeof(p->etag), "\"%.77s\"", copy_etag);
            g->copied_bytes += it->part.length;
            break;
        }
        snprintf(p->etag, sizeof(p->etag), "%s", it->op.req.resp.etag);
        g->done_bytes += it->part.length;
        if (!it->synthetic && g->ph->release != NULL)
            rc = g->ph->release(g->ph->ctx, &it->part);
        break;
    }
    case KIND_SINGLE:
        snprintf(g->etag, sizeof(g->etag), "%s", it->op.req.resp.etag);
        g->done_bytes += it->op.body_len;
        break;
    }
    return rc;
}

/* A GET's response (2xx) is of the version the job is pinned to: its ETag and object size
 * (s3d_op_check_version). If-Match is not enough: a relay or server that ignores it answers a
 * replaced object with the new bytes. */
static int check_version(const struct item *it)
{
    const struct s3d_get_job *j = it->job;
    return s3d_op_check_version(&it->op, j->offset + j->received, j->if_match, j->object_size);
}

/* A failed attempt: keep what arrived of a GET, then retry or give up. */
static int finish_err(struct engine *g, struct item *it, int err)
{
    const struct s3d_http_resp *r = &it->op.req.resp;
    uint64_t delay;
    if (g->kind == KIND_GET && r->status == 206 && !r->overflow) {
        struct s3d_get_job *j = it->job;
        /* The bytes that came before the break are kept only if they are of the version. */
        int rc = check_version(it);
        if (rc < 0)
            return rc;
        if (j->first != NULL && !j->pinned) {
            /* The headers came before the connection broke: they tell the size and the
             * version, which the resumed attempt asks for exactly. */
            rc = s3d_op_first_info(&it->op, j->offset + j->received, 0, j->first);
            if (rc < 0)
                return rc;
            if (j->first_sums != NULL)
                s3d_op_sums_get(&it->op, j->first_sums);
            if (j->first->size - j->offset < j->length)
                j->length = j->first->size - j->offset;
            j->if_match = j->first->etag;
            j->object_size = j->first->size;
            j->pinned = 1;
        }
        s3d_xfer_job_keep(j, r);
    }
    if (r->status == 429 || (r->status == 503 && strcmp(it->op.s3_code, "SlowDown") == 0))
        s3d_conc_note_throttle(g->budget);
    if (s3d_s3_op_expired_retry(&g->c->s3, &it->op, err) ||
        s3d_s3_op_region_retry(&g->c->s3, &it->op, err)) {
        it->state = ITEM_WAITING;
        it->retry_at = s3d_now_ms();
        g->waiting++;
        return 0;
    }
    if (!s3d_retry_decide(&it->pol, it->attempts, err, (int)r->status, it->op.s3_code, s3d_now_ms(),
                          s3d_retry_random(), &delay)) {
        if (it->attempts > 1 && s3d_s3_op_transient(&it->op, err))
            s3d_fail_prefix(err, "after %u attempts", it->attempts);
        if (g->kind == KIND_PART && it->part.copy_source != NULL && err != S3D_ECANCELED)
            return copy_dropped(g, it, err);
        return err;
    }
    S3D_DEBUG("%s s3://%s/%s: attempt %u failed (%s); retry in %" PRIu64 " ms", it->op.operation,
              it->op.bucket, it->op.key, it->attempts, s3d_last_error_message(), delay);
    it->state = ITEM_WAITING;
    it->retry_at = s3d_now_ms() + delay;
    g->waiting++;
    return 0;
}

/* The time from the request sent (libcurl's pretransfer) to the timer `until` of a finished
 * request, in ms (at most 60 s): 1 with *ms set, 0 when libcurl has no such times. */
static int ms_after_send(struct item *it, CURLINFO until, uint32_t *ms)
{
    curl_off_t pre = 0, end = 0;
    if (curl_easy_getinfo(it->e, CURLINFO_PRETRANSFER_TIME_T, &pre) != CURLE_OK ||
        curl_easy_getinfo(it->e, until, &end) != CURLE_OK || end <= pre)
        return 0;
    *ms = (uint32_t)S3D_MIN((end - pre) / 1000, (curl_off_t)60000);
    return 1;
}

/* For the controller: a GET's time to its first byte (its window lengths), an upload's time
 * and bytes (its measure of uploads). */
static void tell_times(struct engine *g, struct item *it)
{
    uint32_t ms;
    if (g->kind == KIND_GET) {
        if (ms_after_send(it, CURLINFO_STARTTRANSFER_TIME_T, &ms))
            s3d_conc_ttfb(g->budget, ms);
    } else {
        curl_off_t sent = 0;
        if (curl_easy_getinfo(it->e, CURLINFO_SIZE_UPLOAD_T, &sent) == CURLE_OK && sent > 0)
            s3d_conc_upload_done(g->budget, it->started_ms, (uint64_t)sent);
    }
}

static int check_range_status(struct engine *g, struct item *it)
{
    /* A server that ignores Range answers 200 with the whole object: right only when we
     * asked from byte 0 (and then the length check catches a longer object). */
    const struct s3d_http_resp *r = &it->op.req.resp;
    if (g->kind == KIND_GET && r->status == 200 && it->job->offset + it->job->received != 0) {
        struct s3d_err_s3 d = {.operation = "GetObject",
                               .bucket = it->job->bucket,
                               .key = it->job->key,
                               .http_status = 200,
                               .request_id = r->request_id};
        return s3d_fail_s3(S3D_EPROTO, &d,
                           "GetObject s3://%s/%s: the server ignored the Range header (HTTP "
                           "200 for a range from byte %" PRIu64 ")",
                           it->job->bucket, it->job->key, it->job->offset + it->job->received);
    }
    return 0;
}

static int drain(struct engine *g)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(g->mm->m, &left)) != NULL) {
        struct item *it = NULL;
        int rc;
        if (msg->msg != CURLMSG_DONE)
            continue;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&it);
        CURLcode cc = msg->data.result;
        curl_multi_remove_handle(g->mm->m, it->e);
        S3D_ASSERT(it->state == ITEM_RUNNING && g->in_flight > 0);
        g->in_flight--;
        s3d_conc_finished(g->budget, g->kind != KIND_GET);
        it->state = ITEM_FREE;
        rc = s3d_s3_op_result(&g->c->s3, &it->op, it->e, cc);
        if (rc == 0) {
            tell_times(g, it);
            rc = check_range_status(g, it);
        }
        if (rc == 0 && g->kind == KIND_GET) {
            rc = check_version(it);
            if (rc < 0)
                return rc; /* another version: retrying cannot help */
        }
        if (rc == 0) {
            rc = finish_ok(g, it);
            if (rc < 0)
                return rc;
            continue;
        }
        rc = finish_err(g, it, rc);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Bytes moved so far: finished items, and what running ones sent or received. */
static uint64_t bytes_moved(const struct engine *g)
{
    uint64_t b = g->done_bytes;
    size_t i;
    for (i = 0; i < g->hw_items; i++) {
        const struct item *it = &g->items[i];
        if (it->state == ITEM_FREE)
            continue;
        if (g->kind == KIND_GET) {
            b += it->job->received;
            if (it->state == ITEM_RUNNING && it->op.req.resp.status == 206)
                b += it->op.req.resp.received;
        } else if (it->state == ITEM_RUNNING) {
            b += it->op.req.sent;
        }
    }
    return b;
}

/* Bytes the path has carried, for the budget: for a GET what arrived; for a PUT what the peer
 * acknowledged, i.e. what curl handed to the sockets less what still sits in their send queues.
 * Counting what curl handed over would credit each new connection with a send buffer's worth
 * (up to 4 MiB) at memory speed, and the controller would judge a level by how fast buffers
 * fill (docs/internals/engine.md, "What the controller counts"). */
static uint64_t bytes_carried(const struct engine *g)
{
    uint64_t b = bytes_moved(g), q;
    if (g->kind == KIND_GET || g->in_flight == 0)
        return b;
    q = s3d_multi_unacked(g->mm);
    return q < b - g->done_bytes ? b - q : g->done_bytes;
}

static uint64_t bytes_so_far(const struct engine *g)
{
    uint64_t b = bytes_moved(g) + g->copied_bytes;
    return g->total && b > g->total ? g->total : b;
}

/* The budget feed: at most every CONC_TICK_MS, the bytes moved since the last report, then
 * the controller's turn (engine/conc.h). */
#define CONC_TICK_MS 5u

/* Nothing left to hand out: every request still to come is a retry. */
static int nothing_to_start(const struct engine *g)
{
    return g->feed_done || (g->kind == KIND_GET && g->next_job >= g->n_jobs);
}

static void tell_budget(struct engine *g)
{
    uint64_t now = s3d_now_ms(), b;
    int draining;
    if (now < g->last_tick_ms + CONC_TICK_MS)
        return;
    g->last_tick_ms = now;
    draining = nothing_to_start(g) ? (int)g->in_flight : 0;
    s3d_conc_draining(g->budget, draining - g->draining_told);
    g->draining_told = draining;
    b = bytes_carried(g);
    if (b > g->bytes_told) {
        /* A retried part sends its bytes again: only what goes past the mark counts. */
        s3d_conc_add_bytes(g->budget, b - g->bytes_told);
        g->bytes_told = b;
    }
    s3d_conc_tick(g->budget);
}

/* Progress is reported at most this often (ms), and once at the end. */
#define PROGRESS_EVERY_MS 10

static int report_progress(struct engine *g, int force)
{
    uint64_t now;
    if (g->progress == NULL)
        return 0;
    now = s3d_now_ms();
    if (!force && now - g->last_progress_ms < PROGRESS_EVERY_MS)
        return 0;
    g->last_progress_ms = now;
    if (g->progress(g->progress_user, bytes_so_far(g), g->total) != 0)
        return s3d_fail(S3D_ECANCELED, "transfer canceled by the progress callback");
    return 0;
}

/* ---- the loop ------------------------------------------------------------------------------ */

/* How long one turn waits in curl_multi_poll, at most (ms): only sockets to wait for; a poll
 * hook whose own work (GPU copies) is checked this often; a hook that said "not yet". */
#define WAIT_IDLE_MS    100
#define WAIT_POLL_MS    10
#define WAIT_BLOCKED_MS 2
/* After the last request: the pause between poll hook calls while it still has work. */
#define DRAIN_PAUSE_NS 1000000L

/* Takes the items and a multi handle for a run. */
static int loop_open(struct engine *g)
{
    g->n_items = (size_t)g->max_conc * 2;
    g->items = calloc(g->n_items, sizeof(*g->items));
    if (g->items == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory starting a transfer");
    g->mm = s3d_s3ctx_multi_acquire(&g->c->s3);
    if (g->mm == NULL)
        return s3d_last_error_code();
    return 0;
}

/* Drops what is still in flight and gives the items and the multi handle back. */
static void loop_close(struct engine *g)
{
    size_t i;
    if (g->items != NULL && bytes_carried(g) > g->bytes_told)
        s3d_conc_add_bytes(g->budget, bytes_carried(g) - g->bytes_told);
    for (i = 0; g->items != NULL && i < g->hw_items; i++) {
        struct item *it = &g->items[i];
        if (it->state == ITEM_RUNNING) {
            curl_multi_remove_handle(g->mm->m, it->e);
            s3d_conc_finished(g->budget, g->kind != KIND_GET);
        }
        s3d_s3_op_cleanup(&it->op);
        if (it->e != NULL)
            curl_easy_cleanup(it->e);
    }
    free(g->items);
    g->items = NULL;
    free(g->scratch);
    g->scratch = NULL;
    s3d_conc_draining(g->budget, -g->draining_told);
    g->draining_told = 0;
    s3d_s3ctx_multi_release(&g->c->s3, g->mm);
    g->mm = NULL;
}

/* Restarts the items whose backoff is over (before any new work), while a connection is
 * free. */
static int restart_due(struct engine *g)
{
    uint64_t now = s3d_now_ms();
    size_t i;
    for (i = 0; i < g->hw_items && g->waiting > 0; i++) {
        struct item *it = &g->items[i];
        if (it->state == ITEM_WAITING && it->retry_at <= now) {
            if (!may_start(g))
                break;
            int rc = start_attempt(g, it);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

/* Feeds new work into free items while a connection is free, until the feed says "not yet"
 * (feed_blocked) or "no more" (feed_done). */
static int feed_free(struct engine *g)
{
    g->feed_blocked = 0;
    while (!g->feed_done && may_start(g)) {
        struct item *it = free_item(g);
        int r;
        if (it == NULL)
            break;
        r = feed(g, it);
        if (r < 0)
            return r;
        if (r == S3D_FEED_NOT_YET) {
            g->feed_blocked = 1;
            break;
        }
        if (r == S3D_FEED_DONE)
            g->feed_done = 1;
    }
    return 0;
}

/* The caller's poll hook, if any: pending work of its own counts as "not yet". */
static int poll_hook(struct engine *g)
{
    int p;
    if (g->poll == NULL)
        return 0;
    p = g->poll(g->hook_ctx);
    if (p < 0)
        return p;
    if (p != S3D_POLL_IDLE)
        g->feed_blocked = 1;
    return 0;
}

/* The longest this turn may wait: never past the next retry time; short when a hook waits
 * for its own work. */
static long wait_ms(const struct engine *g)
{
    long timeout = WAIT_IDLE_MS;
    size_t i;
    if (g->feed_blocked || g->budget_blocked)
        timeout = WAIT_BLOCKED_MS;
    else if (g->poll != NULL)
        timeout = WAIT_POLL_MS;
    for (i = 0; i < g->hw_items && g->waiting > 0; i++) {
        const struct item *it = &g->items[i];
        if (it->state == ITEM_WAITING) {
            uint64_t t = s3d_now_ms();
            long wait = it->retry_at > t ? (long)(it->retry_at - t) : 0;
            timeout = S3D_MIN(timeout, wait);
        }
    }
    return timeout;
}

/* One turn of the loop (see the top of the file). *finished = 1 when everything has been fed
 * and nothing is in flight or waiting. */
static int turn(struct engine *g, int *finished)
{
    int running = 0, rc;

    *finished = 0;
    if (s3d_cancel_is_set(g->cancel) || s3d_client_stopped(g->c))
        return s3d_fail(S3D_ECANCELED, "transfer canceled");
    g->budget_blocked = 0;
    rc = restart_due(g);
    if (rc == 0)
        rc = feed_free(g);
    if (rc < 0)
        return rc;
    /* After feeding: the budget sees the requests this turn runs, not the gap between one
     * finishing and the next starting. */
    tell_budget(g);
    if (g->feed_done && g->in_flight == 0 && g->waiting == 0) {
        *finished = 1;
        return 0;
    }
    if (curl_multi_perform(g->mm->m, &running) != CURLM_OK)
        return s3d_fail(S3D_ENOMEM, "curl_multi_perform failed");
    rc = drain(g);
    if (rc == 0)
        rc = poll_hook(g);
    if (rc == 0)
        rc = report_progress(g, 0);
    if (rc < 0)
        return rc;
    /* Wait only for something that can happen: a socket, a hook's own work, a retry.
     * With nothing in flight and nothing pending, go straight to the next turn. */
    if (g->in_flight > 0 || g->waiting > 0 || g->feed_blocked || g->budget_blocked)
        curl_multi_poll(g->mm->m, NULL, 0, (int)wait_ms(g), NULL);
    return 0;
}

/* Everything transferred: lets the caller finish its asynchronous work (poll until idle). */
static int drain_hook(struct engine *g)
{
    while (g->poll != NULL) {
        int p = g->poll(g->hook_ctx);
        if (p < 0)
            return p;
        if (p == S3D_POLL_IDLE)
            break;
        if (s3d_cancel_is_set(g->cancel) || s3d_client_stopped(g->c))
            return s3d_fail(S3D_ECANCELED, "transfer canceled");
        struct timespec ts = {0, DRAIN_PAUSE_NS};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* The loop. Returns 0 when every item finished, else the first error (recorded). */
static int run(struct engine *g)
{
    int finished = 0;
    int rc = loop_open(g);
    while (rc == 0 && !finished)
        rc = turn(g, &finished);
    if (rc == 0)
        rc = drain_hook(g);
    if (rc == 0)
        rc = report_progress(g, 1);
    loop_close(g);
    return rc;
}

/* ---- public (internal) entry points -------------------------------------------------------- */

/* Zeroes g and sets what every kind of run has: max_conc 0 = the client's. */
static void engine_init(struct engine *g, struct s3d_client *c, enum eng_kind kind,
                        uint32_t max_conc, s3d_progress_fn progress, void *progress_user,
                        struct s3d_cancel *cancel)
{
    memset(g, 0, sizeof(*g));
    g->c = c;
    g->kind = kind;
    g->max_conc = max_conc ? max_conc : c->max_concurrency;
    g->budget = &c->conc;
    g->progress = progress;
    g->progress_user = progress_user;
    g->cancel = cancel;
}

int s3d_xfer_get(struct s3d_client *c, struct s3d_get_job *jobs, size_t n,
                 const struct s3d_get_hooks *hooks, uint32_t max_concurrency,
                 s3d_progress_fn progress, void *progress_user, struct s3d_cancel *cancel)
{
    struct engine g;
    size_t i;
    int rc = s3d_client_check(c);
    if (rc < 0)
        return rc;
    if (n > 0 && jobs == NULL)
        return s3d_fail(S3D_EINVAL, "s3d_xfer_get: jobs is NULL");
    engine_init(&g, c, KIND_GET, max_concurrency, progress, progress_user, cancel);
    g.jobs = jobs;
    g.n_jobs = n;
    g.gh = hooks;
    g.poll = hooks ? hooks->poll : NULL;
    g.hook_ctx = hooks ? hooks->ctx : NULL;
    for (i = 0; i < n; i++)
        g.total += jobs[i].length;
    return run(&g);
}

int s3d_xfer_put_multipart(struct s3d_client *c, const char *bucket, const char *key,
                           const struct s3d_put_hooks *hooks, const struct s3d_put_options *o)
{
    struct engine g;
    char *upload_id = NULL;
    int rc = s3d_client_check(c);
    if (rc < 0)
        return rc;
    if (hooks == NULL || hooks->next == NULL)
        return s3d_fail(S3D_EINVAL, "s3d_xfer_put_multipart: no next hook");
    engine_init(&g, c, KIND_PART, o ? o->max_concurrency : 0, o ? o->progress : NULL,
                o ? o->progress_user : NULL, o ? o->cancel : NULL);
    g.bucket = bucket;
    g.key = key;
    g.ph = hooks;
    g.poll = hooks->poll;
    g.hook_ctx = hooks->ctx;
    g.total = o ? o->total_hint : 0;
    g.object_crc = o != NULL && o->object_crc32c != NULL;
    g.seen = calloc(S3D_MAX_PARTS + 1, 1);
    if (g.seen == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory starting an upload");
    if (o != NULL && s3d_cancel_is_set(o->cancel)) {
        rc = s3d_fail(S3D_ECANCELED, "upload of s3://%s/%s canceled", bucket, key);
        goto out;
    }
    rc = s3d_multipart_create(c, bucket, key, o ? o->content_type : NULL, &upload_id);
    if (rc < 0)
        goto out;
    g.upload_id = upload_id;
    rc = run(&g);
    if (rc == 0 && s3d_cancel_is_set(g.cancel))
        rc = s3d_fail(S3D_ECANCELED, "upload of s3://%s/%s canceled", bucket, key);
    rc = s3d_multipart_finish(c, bucket, key, upload_id, g.parts, g.n_parts, o, rc);
out:
    free(upload_id);
    free(g.parts);
    free(g.seen);
    return rc;
}

int s3d_xfer_put_single_part(struct s3d_client *c, const char *bucket, const char *key,
                             const struct s3d_put_part *p, const struct s3d_put_options *o)
{
    struct engine g;
    int rc = s3d_client_check(c);
    if (rc < 0)
        return rc;
    if (p->length > S3D_MAX_SINGLE_PUT)
        return s3d_fail(S3D_ETOOBIG,
                        "PutObject s3://%s/%s: %" PRIu64 " bytes is over the 5 GiB "
                        "limit of one PUT",
                        bucket, key, p->length);
    engine_init(&g, c, KIND_SINGLE, 1, o ? o->progress : NULL, o ? o->progress_user : NULL,
                o ? o->cancel : NULL);
    g.bucket = bucket;
    g.key = key;
    g.single = *p;
    g.single_o = o;
    g.total = p->length;
    return run(&g);
}
