/* s3ctx.c - the S3 context and one signed request (see s3ctx.h). */
#include "s3/s3ctx.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/alloc.h"
#include "common/compiler.h"
#include "common/env.h"
#include "common/error.h"
#include "common/log.h"
#include "s3/s3doc.h"
#include "s3/xml.h"

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *ud)
{
    struct s3d_s3ctx *ctx = ud;
    (void)h;
    (void)access;
    if ((int)data >= 0 && data < CURL_LOCK_DATA_LAST)
        pthread_mutex_lock(&ctx->share_locks[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *ud)
{
    struct s3d_s3ctx *ctx = ud;
    (void)h;
    if ((int)data >= 0 && data < CURL_LOCK_DATA_LAST)
        pthread_mutex_unlock(&ctx->share_locks[data]);
}

static void multi_free(struct s3d_multi *mm);

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init_once(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static const char *env_get(const char *name)
{
    return s3d_env(name);
}

/* A libcurl built without TLS (a system's or a user's own build: ours, Debian's and the glibc
 * 2.28 set's all have OpenSSL) has no SSL session cache to share: CURLSHE_NOT_BUILT_IN is not
 * a failure there. */
static int share_ssl_ok(CURLSHcode c)
{
    return c == CURLSHE_OK || c == CURLSHE_NOT_BUILT_IN;
}

int s3d_s3ctx_init(struct s3d_s3ctx *ctx, const struct s3d_client_options *opts, uint32_t max_conns)
{
    int rc, i;
    memset(ctx, 0, sizeof(*ctx));
    pthread_once(&curl_once, curl_init_once);
    if (curl_init_rc != CURLE_OK)
        return s3d_fail(S3D_ENOMEM, "curl_global_init failed: %s",
                        curl_easy_strerror(curl_init_rc));
    rc = s3d_config_resolve(opts, &ctx->cfg);
    if (rc < 0)
        return rc;
    for (i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&ctx->share_locks[i], NULL);
    pthread_mutex_init(&ctx->pool_lock, NULL);
    pthread_mutex_init(&ctx->regions.mu, NULL);
    ctx->share = curl_share_init();
    if (ctx->share == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "curl_share_init failed");
        goto fail;
    }
    if (curl_share_setopt(ctx->share, CURLSHOPT_LOCKFUNC, share_lock) != CURLSHE_OK ||
        curl_share_setopt(ctx->share, CURLSHOPT_UNLOCKFUNC, share_unlock) != CURLSHE_OK ||
        curl_share_setopt(ctx->share, CURLSHOPT_USERDATA, ctx) != CURLSHE_OK ||
        curl_share_setopt(ctx->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK ||
        !share_ssl_ok(curl_share_setopt(ctx->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION))) {
        rc = s3d_fail(S3D_ENOMEM, "setting up the curl share failed");
        goto fail;
    }
    ctx->max_attempts = opts && opts->max_attempts ? opts->max_attempts
                        : ctx->cfg.max_attempts    ? ctx->cfg.max_attempts
                                                   : S3D_DEFAULT_MAX_ATTEMPTS;
    ctx->deadline_ms = opts ? opts->deadline_ms : 0;
    ctx->retry_base_ms = S3D_RETRY_BASE_MS;
    {
        /* Tests shorten the backoff so that retry paths stay quick. */
        int64_t b;
        if (S3D_TEST_HOOK_INT("S3D_TEST_RETRY_BASE_MS", 1, UINT32_MAX, &b) == 1)
            ctx->retry_base_ms = (uint32_t)b;
    }
    ctx->max_host_connections = max_conns;
    ctx->http.share = ctx->share;
    ctx->http.connect_timeout_ms = opts && opts->connect_timeout_ms
                                       ? (long)opts->connect_timeout_ms
                                       : (long)S3D_DEFAULT_CONNECT_TIMEOUT_MS;
    ctx->http.low_speed_time_s = opts && opts->low_speed_time_s
                                     ? (long)opts->low_speed_time_s
                                     : (long)S3D_DEFAULT_LOW_SPEED_TIME_S;
    ctx->http.low_speed_limit = opts && opts->low_speed_limit ? (long)opts->low_speed_limit
                                                              : (long)S3D_DEFAULT_LOW_SPEED_LIMIT;
    ctx->http.buffer_size = S3D_DEFAULT_CURL_BUFFER;
    {
        /* Measurement hook (benchmarks only): S3D_CURL_BUFFER=bytes. */
        int64_t b;
        if (s3d_env_int("S3D_CURL_BUFFER", 1, INT32_MAX, &b) == 1)
            ctx->http.buffer_size = (long)b;
    }
    ctx->http.no_verify_ssl = ctx->cfg.no_verify_ssl;
    ctx->http.ca_bundle = ctx->cfg.ca_bundle;
    S3D_INFO("CA bundle: %s (%s)", ctx->cfg.ca_bundle ? ctx->cfg.ca_bundle : "libcurl's default",
             ctx->cfg.ca_bundle_source);
    ctx->http.verbose = s3d_env("S3D_CURL_VERBOSE") != NULL;
    /* Only to name it in errors: a proxy that cannot be reached is not the endpoint. */
    (void)s3d_http_proxy_for(ctx->cfg.endpoint_url, env_get, ctx->proxy, sizeof(ctx->proxy));
    /* Through a proxy the proxy resolves the name; an IP literal has one address. */
    s3d_resolver_init(&ctx->resolver, !ctx->cfg.host_is_ip && ctx->proxy[0] == '\0', ctx->cfg.port);
    if (!ctx->cfg.anonymous &&
        (rc = s3d_credcache_new(&ctx->cfg, &ctx->http, opts ? opts->profile : NULL, &ctx->creds)) <
            0)
        goto fail;
    return 0;

fail:
    if (ctx->resolver.port != 0)
        s3d_resolver_cleanup(&ctx->resolver);
    if (ctx->share != NULL)
        curl_share_cleanup(ctx->share);
    for (i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_destroy(&ctx->share_locks[i]);
    pthread_mutex_destroy(&ctx->pool_lock);
    pthread_mutex_destroy(&ctx->regions.mu);
    s3d_config_free(&ctx->cfg);
    memset(ctx, 0, sizeof(*ctx));
    return rc;
}

void s3d_s3ctx_cleanup(struct s3d_s3ctx *ctx)
{
    size_t j;
    int i;
    if (ctx == NULL || ctx->share == NULL)
        return;
    /* Read unlocked: if another thread could still change it, the client is being freed
     * under that thread's call, which is what this catches. */
    S3D_ASSERT(ctx->n_out == 0);
    for (j = 0; j < ctx->n_idle; j++)
        multi_free(ctx->idle[j]);
    free(ctx->idle);
    curl_share_cleanup(ctx->share);
    for (i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_destroy(&ctx->share_locks[i]);
    pthread_mutex_destroy(&ctx->pool_lock);
    pthread_mutex_destroy(&ctx->regions.mu);
    s3d_resolver_cleanup(&ctx->resolver);
    s3d_credcache_free(ctx->creds);
    s3d_config_free(&ctx->cfg);
    memset(ctx, 0, sizeof(*ctx));
}

/* ---- multi handles and their sockets ------------------------------------------------------ */

CURLMcode s3d_multi_add(struct s3d_multi *mm, CURL *e, struct s3d_http_req *req)
{
    s3d_http_track_sockets(e, req, &mm->socks);
    return curl_multi_add_handle(mm->m, e);
}

uint64_t s3d_multi_unacked(const struct s3d_multi *mm)
{
    return s3d_sockset_unacked(&mm->socks);
}

/* Closes the connections (through the socket set's callback, which needs mm), then frees mm. */
static void multi_free(struct s3d_multi *mm)
{
    if (mm == NULL)
        return;
    curl_multi_cleanup(mm->m);
    s3d_sockset_free(&mm->socks);
    free(mm);
}

struct s3d_multi *s3d_s3ctx_multi_acquire(struct s3d_s3ctx *ctx)
{
    struct s3d_multi *mm = NULL;
    long keep;
    int emfile;
    pthread_mutex_lock(&ctx->pool_lock);
    if (ctx->n_idle > 0)
        mm = ctx->idle[--ctx->n_idle];
    ctx->n_out++; /* until s3d_s3ctx_multi_release, or the failure below */
    pthread_mutex_unlock(&ctx->pool_lock);
    if (mm != NULL)
        return mm;
    errno = 0;
    mm = calloc(1, sizeof(*mm));
    if (mm != NULL) {
        mm->m = curl_multi_init();
        if (mm->m == NULL) {
            free(mm);
            mm = NULL;
        }
    }
    if (mm == NULL) {
        emfile = errno == EMFILE || errno == ENFILE;
        pthread_mutex_lock(&ctx->pool_lock);
        ctx->n_out--; /* nothing handed out */
        pthread_mutex_unlock(&ctx->pool_lock);
        if (emfile)
            s3d_fail(S3D_EMFILE, "creating a connection pool: %s", S3D_EMFILE_HINT);
        else
            s3d_fail(S3D_ENOMEM, "curl_multi_init failed");
        return NULL;
    }
    /* Keep every connection a transfer opened (transfers may ask for more than the client's
     * concurrency), so the next transfer finds them warm. */
    keep = S3D_MAX(ctx->max_host_connections * 2, 64L);
    curl_multi_setopt(mm->m, CURLMOPT_MAXCONNECTS, keep);
    return mm;
}

void s3d_s3ctx_multi_release(struct s3d_s3ctx *ctx, struct s3d_multi *mm)
{
    struct s3d_multi **grown;
    if (mm == NULL)
        return;
    pthread_mutex_lock(&ctx->pool_lock);
    S3D_ASSERT(ctx->n_out > 0);
    ctx->n_out--;
    if (ctx->n_idle == ctx->cap_idle) {
        size_t cap = ctx->cap_idle ? ctx->cap_idle * 2 : 8;
        grown = s3d_reallocarray(ctx->idle, cap, sizeof(*grown));
        if (grown == NULL) {
            pthread_mutex_unlock(&ctx->pool_lock);
            multi_free(mm);
            return;
        }
        ctx->idle = grown;
        ctx->cap_idle = cap;
    }
    ctx->idle[ctx->n_idle++] = mm;
    pthread_mutex_unlock(&ctx->pool_lock);
}

void s3d_s3ctx_retry_policy(const struct s3d_s3ctx *ctx, struct s3d_retry_policy *out)
{
    out->max_attempts = ctx->max_attempts;
    out->base_ms = ctx->retry_base_ms;
    out->cap_ms = S3D_RETRY_CAP_MS;
    out->start_ms = s3d_now_ms();
    out->deadline_ms = ctx->deadline_ms ? out->start_ms + ctx->deadline_ms : 0;
    out->connect_budget_ms = S3D_RETRY_CONNECT_BUDGET_MS;
    out->throttle_budget_ms = S3D_RETRY_THROTTLE_BUDGET_MS;
}

/* ---- ops ---------------------------------------------------------------------------------- */

int s3d_s3_op_add_header(struct s3d_s3_op *op, const char *name, const char *value)
{
    if (op->n_headers >= S3D_OP_MAX_HEADERS) {
        int rc = s3d_fail(S3D_EINVAL, "%s: too many headers", op->operation);
        if (op->build_rc == 0)
            op->build_rc = rc;
        return rc;
    }
    op->headers[op->n_headers].name = name;
    op->headers[op->n_headers].value = value;
    op->n_headers++;
    return 0;
}

int s3d_s3_op_add_query(struct s3d_s3_op *op, const char *name, const char *value)
{
    if (op->n_query >= S3D_OP_MAX_QUERY) {
        int rc = s3d_fail(S3D_EINVAL, "%s: too many query parameters", op->operation);
        if (op->build_rc == 0)
            op->build_rc = rc;
        return rc;
    }
    op->query[op->n_query].name = name;
    op->query[op->n_query].value = value ? value : "";
    op->n_query++;
    return 0;
}

int s3d_s3_op_set_range(struct s3d_s3_op *op, uint64_t first, uint64_t last)
{
    size_t i;
    snprintf(op->range_buf, sizeof(op->range_buf), "bytes=%" PRIu64 "-%" PRIu64, first, last);
    for (i = 0; i < op->n_headers; i++)
        if (strcmp(op->headers[i].name, "Range") == 0) {
            op->headers[i].value = op->range_buf;
            return 0;
        }
    return s3d_s3_op_add_header(op, "Range", op->range_buf);
}

/* Caps of an op's request strings. A key is at most 1,024 bytes (three times that encoded);
 * the URL holds the endpoint, the path and the query; the signature buffer holds the
 * Authorization header (or a presigned query). */
#define OP_URL_MAX         16384
#define OP_HOST_MAX        1024
#define OP_PATH_MAX        8192
#define OP_QUERY_MAX       8192
#define OP_SIG_MAX         8192
#define OP_HEADER_LINE_MAX 4096 /* one "Name: value" request header */

static void op_bufs_init(struct s3d_s3_op *op)
{
    if (op->url.max == 0) {
        s3d_dynbuf_init(&op->url, OP_URL_MAX);
        s3d_dynbuf_init(&op->host, OP_HOST_MAX);
        s3d_dynbuf_init(&op->path, OP_PATH_MAX);
        s3d_dynbuf_init(&op->query_buf, OP_QUERY_MAX);
        s3d_dynbuf_init(&op->sig, OP_SIG_MAX);
    }
}

static int slist_add(struct curl_slist **l, const char *line)
{
    struct curl_slist *n = curl_slist_append(*l, line);
    if (n == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory building request headers");
    *l = n;
    return 0;
}

static int slist_addf(struct curl_slist **l, const char *name, const char *value)
{
    char line[OP_HEADER_LINE_MAX];
    int n = snprintf(line, sizeof(line), "%s: %s", name, value);
    if (n < 0 || (size_t)n >= sizeof(line))
        return s3d_fail(S3D_ETOOBIG, "request header %s is too long", name);
    return slist_add(l, line);
}

static void op_release_addr(struct s3d_s3_op *op, int conn_failed, int responded)
{
    if (op->lease_from != NULL)
        s3d_resolver_done(op->lease_from, &op->lease, conn_failed, responded);
    op->lease_from = NULL;
}

/* Gives the request one of the endpoint's addresses, when its name has several: the URL, the
 * Host header and the signature keep the name; only the TCP connection goes to the address. */
static int op_connect_to(struct s3d_s3ctx *ctx, struct s3d_s3_op *op, CURL *e)
{
    const char *host = op->host.data;
    size_t name_len = strcspn(host, ":"); /* the Host header carries a non-default port */
    int n;

    if (!s3d_resolver_pick(&ctx->resolver, host, name_len, &op->lease))
        return 0;
    op->lease_from = &ctx->resolver;
    n = snprintf(op->connect_to_line, sizeof(op->connect_to_line), "%.*s:%u:%s:%u", (int)name_len,
                 host, (unsigned)ctx->cfg.port, op->lease.text, (unsigned)ctx->cfg.port);
    if (n < 0 || (size_t)n >= sizeof(op->connect_to_line)) {
        op_release_addr(op, 0, 0);
        return 0; /* a name this long is left to libcurl */
    }
    op->connect_to.data = op->connect_to_line;
    op->connect_to.next = NULL;
    if (curl_easy_setopt(e, CURLOPT_CONNECT_TO, &op->connect_to) != CURLE_OK) {
        op_release_addr(op, 0, 0);
        return s3d_fail(S3D_ENOMEM, "%s: setting the address to connect to failed", op->operation);
    }
    return 0;
}

/* After a transfer: tells the resolver whether its address could be connected to, and logs
 * the address of each new connection. */
static void op_judge_addr(struct s3d_s3_op *op, CURL *e, CURLcode cc)
{
    curl_off_t connect_us = 0;
    long new_conns = 0;
    int connected, conn_failed, responded = op->req.resp.status != 0;

    if (op->lease_from == NULL)
        return;
    if (curl_easy_getinfo(e, CURLINFO_CONNECT_TIME_T, &connect_us) != CURLE_OK)
        connect_us = 0;
    connected = connect_us > 0 || responded;
    if (connected && curl_easy_getinfo(e, CURLINFO_NUM_CONNECTS, &new_conns) == CURLE_OK &&
        new_conns > 0)
        S3D_DEBUG("%s: new connection to %s at %s", op->operation, op->host.data, op->lease.text);
    /* Not for a socket the process could not make (no descriptor): not the address's fault. */
    conn_failed =
        !connected && op->req.sock_errno == 0 &&
        (cc == CURLE_COULDNT_CONNECT || (cc == CURLE_OPERATION_TIMEDOUT &&
                                         strstr(op->req.errbuf, "Connection timed out") != NULL));
    op_release_addr(op, conn_failed, responded);
}

/* The region requests to bucket are signed for: the one S3 named for it, else the client's. */
static void region_of(struct s3d_s3ctx *ctx, const char *bucket, char out[32])
{
    unsigned i;
    snprintf(out, 32, "%s", ctx->cfg.region);
    if (bucket == NULL)
        return;
    pthread_mutex_lock(&ctx->regions.mu);
    for (i = 0; i < ctx->regions.n; i++)
        if (strcmp(ctx->regions.e[i].bucket, bucket) == 0) {
            snprintf(out, 32, "%s", ctx->regions.e[i].region);
            break;
        }
    pthread_mutex_unlock(&ctx->regions.mu);
}

static void region_remember(struct s3d_s3ctx *ctx, const char *bucket, const char *region)
{
    struct s3d_region_map *m = &ctx->regions;
    unsigned i, slot;
    if (strlen(bucket) >= sizeof(m->e[0].bucket))
        return;
    pthread_mutex_lock(&m->mu);
    for (i = 0; i < m->n && strcmp(m->e[i].bucket, bucket) != 0; i++) {
    }
    if (i < m->n) {
        slot = i;
    } else if (m->n < S3D_REGION_MAP_N) {
        slot = m->n++;
    } else {
        slot = m->next;
        m->next = (m->next + 1) % S3D_REGION_MAP_N;
    }
    snprintf(m->e[slot].bucket, sizeof(m->e[slot].bucket), "%s", bucket);
    snprintf(m->e[slot].region, sizeof(m->e[slot].region), "%s", region);
    pthread_mutex_unlock(&m->mu);
}

/* A region name as S3 spells them ("eu-west-2", "us-gov-west-1"): 1 to 31 of [a-z0-9-]. */
static int region_valid(const char *r)
{
    size_t n = strlen(r);
    if (n == 0 || n >= 32)
        return 0;
    for (; *r; r++)
        if (!((*r >= 'a' && *r <= 'z') || (*r >= '0' && *r <= '9') || *r == '-'))
            return 0;
    return 1;
}

/* Whether op carries an x-amz-checksum-crc32c (s3d_s3ctx_signs_body's with_crc). */
static int op_has_crc(const struct s3d_s3_op *op)
{
    for (size_t i = 0; i < op->n_headers; i++)
        if (strcasecmp(op->headers[i].name, "x-amz-checksum-crc32c") == 0)
            return 1;
    return 0;
}

/* Where the op's 2xx body goes: memory, or a file, and whether it is summed (http.h). */
static void req_sink(struct s3d_http_req *req, const struct s3d_s3_op *op)
{
    req->dst = op->dst;
    req->dst_cap = op->dst_cap;
    req->to_fd = op->to_fd;
    req->dst_fd = op->dst_fd;
    req->dst_off = op->dst_off;
    req->sum_body = op->sum_body;
    req->crc_seed = op->crc_seed;
}

/* AUTO over plain http: a body goes unsigned only when it carries an x-amz-checksum-crc32c and
 * the server has shown that it refuses a wrong one (s3d_op_probe_body_crc); the checksum then
 * protects the bytes as the signed hash would. */
int s3d_s3ctx_signs_body(struct s3d_s3ctx *ctx, int with_crc)
{
    const struct s3d_config *cfg = &ctx->cfg;
    if (cfg->anonymous)
        return 0;
    return cfg->payload_signing == S3D_PAYLOAD_SIGNED ||
           (cfg->payload_signing == S3D_PAYLOAD_AUTO &&
            !(with_crc && atomic_load(&ctx->body_crc) == S3D_BODY_CRC_CHECKED));
}

/* Only where AUTO signs because the server was shown not to check a body's CRC-32C (Ceph RGW
 * 16): that CRC-32C, known only once the body is sent, cannot go in a header before it. A
 * server that checks it gets it in the header (two passes: the sums, then the send), as does
 * one whose answer is not known yet, and a client that forces SIGNED. */
int s3d_s3ctx_streams_body(struct s3d_s3ctx *ctx)
{
    return ctx->cfg.payload_signing == S3D_PAYLOAD_AUTO && !ctx->cfg.anonymous &&
           atomic_load(&ctx->body_crc) == S3D_BODY_CRC_IGNORED;
}

/* The payload hash op is signed with, computed once (retries reuse it): the body's SHA-256,
 * or UNSIGNED-PAYLOAD (the empty body's hash when it has none). */
static int op_payload_hash(struct s3d_s3ctx *ctx, struct s3d_s3_op *op)
{
    int sign;
    if (op->payload_hash[0] != '\0')
        return 0;
    sign = s3d_s3ctx_signs_body(ctx, op_has_crc(op));
    if (sign && op->body_len > 0 && op->from_file)
        return s3d_fail(S3D_EINVAL, "%s: the payload hash of a body from a file is the caller's",
                        op->operation);
    if (sign && op->body_len > 0)
        return s3d_sha256_iov_hex(op->iov, op->iovcnt, op->payload_hash);
    snprintf(op->payload_hash, sizeof(op->payload_hash), "%s",
             sign || op->body_len == 0 ? S3D_EMPTY_SHA256 : S3D_UNSIGNED_PAYLOAD);
    return 0;
}

int s3d_s3_op_prepare(struct s3d_s3ctx *ctx, struct s3d_s3_op *op, CURL *e)
{
    const struct s3d_config *cfg = &ctx->cfg;
    struct s3d_sigv4_request sr;
    struct s3d_sigv4_creds cr;
    int rc, has_ctype = 0;
    size_t i;
    char *line, *nl;

    if (op->build_rc < 0) /* a header or parameter could not be added: recorded then */
        return op->build_rc;
    op_release_addr(op, 0, 0); /* an attempt that was never judged */
    op_bufs_init(op);
    s3d_dynbuf_reset(&op->url);
    s3d_dynbuf_reset(&op->host);
    s3d_dynbuf_reset(&op->path);
    s3d_dynbuf_reset(&op->query_buf);
    s3d_dynbuf_reset(&op->sig);
    curl_slist_free_all(op->slist);
    op->slist = NULL;
    op->s3_code[0] = '\0';

    rc = s3d_sigv4_canonical_query(op->query, op->n_query, &op->query_buf);
    if (rc < 0)
        return rc;
    region_of(ctx, op->bucket, op->region);
    if (cfg->endpoint_is_default && strcmp(op->region, cfg->region) != 0) {
        /* The bucket is in another region: that region's endpoint, as botocore goes there. */
        struct s3d_config at = *cfg;
        char host[96];
        snprintf(host, sizeof(host), "s3.%s.amazonaws.com", op->region);
        at.host = host;
        rc = s3d_config_build_url(&at, op->bucket, op->key,
                                  op->query_buf.len ? op->query_buf.data : NULL, &op->url,
                                  &op->host, &op->path);
    } else {
        rc = s3d_config_build_url(cfg, op->bucket, op->key,
                                  op->query_buf.len ? op->query_buf.data : NULL, &op->url,
                                  &op->host, &op->path);
    }
    if (rc < 0)
        return rc;

    if (!cfg->anonymous) {
        s3d_creds_release(op->signed_with);
        op->signed_with = NULL;
        if ((rc = s3d_credcache_get(ctx->creds, &op->signed_with)) < 0)
            return s3d_fail_prefix(rc, "%s", op->operation);
        if ((rc = op_payload_hash(ctx, op)) < 0)
            return rc;
        memset(&sr, 0, sizeof(sr));
        sr.method = op->method;
        sr.host = op->host.data;
        sr.canonical_path = op->path.data;
        sr.query = op->query;
        sr.n_query = op->n_query;
        sr.headers = op->headers;
        sr.n_headers = op->n_headers;
        sr.payload_hash = op->payload_hash;
        sr.region = op->region;
        sr.now = time(NULL);
        cr.access_key_id = op->signed_with->access_key_id;
        cr.secret_access_key = op->signed_with->secret_access_key;
        cr.session_token = op->signed_with->session_token;
        rc = s3d_sigv4_sign(&sr, &cr, &op->sig, NULL);
        if (rc == 0 && op->from_file && op->chunked_body) {
            rc = s3d_http_chunked_seed(&op->chunk, op->sig.data, cr.secret_access_key, op->region,
                                       sr.now);
            op->body_file.chunked = &op->chunk;
        }
        if (rc < 0)
            return rc;
    }

    rc = slist_addf(&op->slist, "Host", op->host.data);
    for (i = 0; rc == 0 && i < op->n_headers; i++) {
        if (strcasecmp(op->headers[i].name, "Content-Type") == 0)
            has_ctype = 1;
        rc = slist_addf(&op->slist, op->headers[i].name, op->headers[i].value);
    }
    for (line = op->sig.data; rc == 0 && line != NULL && *line != '\0'; line = nl + 1) {
        nl = strchr(line, '\n');
        if (nl == NULL) {
            rc = slist_add(&op->slist, line);
            break;
        }
        *nl = '\0';
        rc = slist_add(&op->slist, line);
        *nl = '\n';
    }
    /* No 100-continue round trip before bodies; no form content type on POST. */
    if (rc == 0)
        rc = slist_add(&op->slist, "Expect:");
    if (rc == 0 && !has_ctype)
        rc = slist_add(&op->slist, "Content-Type:");
    if (rc < 0)
        return rc;

    op->req.method = op->method;
    op->req.url = op->url.data;
    op->req.headers = op->slist;
    op->req.iov = op->iov;
    op->req.iovcnt = op->iovcnt;
    op->req.fdbody = op->from_file ? &op->body_file : NULL;
    op->req.body_len = op->body_len;
    req_sink(&op->req, op);
    if (op->req.body_max == 0)
        op->req.body_max = S3D_XML_MAX_BODY;
    rc = s3d_http_setup(e, &op->req, &ctx->http);
    if (rc < 0)
        return rc;
    return op_connect_to(ctx, op, e);
}

static const char *header_value(const struct s3d_s3_op *op, const char *name)
{
    size_t i;
    for (i = 0; i < op->n_headers; i++)
        if (strcasecmp(op->headers[i].name, name) == 0)
            return op->headers[i].value;
    return NULL;
}

static const char *or_empty(const char *s)
{
    return s ? s : "";
}

/* The <Code> of an error body the XML parser refused (cut at our 64 KiB cap, or followed by
 * junk): the code is what maps the error, so take it from the text. */
static void scan_code(const char *body, char *out, size_t cap)
{
    const char *b = strstr(body, "<Code>"), *e;
    size_t n;
    if (b == NULL)
        return;
    b += 6;
    e = strstr(b, "</Code>");
    if (e == NULL)
        return;
    n = (size_t)(e - b);
    if (n == 0 || n >= cap)
        return;
    memcpy(out, b, n);
    out[n] = '\0';
}

/* HTTP 412 to a request that carried a condition: S3D_ECHANGED, said as what it means (0 for
 * a 412 without one, an error like any other). */
static int precondition_failed(struct s3d_s3_op *op, const struct s3d_err_s3 *d, const char *where)
{
    const char *m = header_value(op, "If-Match"), *nm = header_value(op, "If-None-Match");
    const char *sp = op->s3_code[0] ? " " : "";
    if (strcmp(op->method, "PUT") == 0 && (m != NULL || nm != NULL))
        /* A conditional write (s3d_put_options' if_match, if_none_match): another object is
         * in place than the one the writer expected. */
        return s3d_fail_s3(S3D_ECHANGED, d,
                           "%s: the object in place is not the one this write expected (%s: "
                           "%s; HTTP 412%s%s)",
                           where, m != NULL ? "If-Match" : "If-None-Match", m != NULL ? m : nm, sp,
                           op->s3_code);
    if (m != NULL)
        /* The ETag pinned by the first response of a download no longer matches. */
        return s3d_fail_s3(S3D_ECHANGED, d,
                           "%s: the object changed during the download (it no longer has ETag "
                           "%s; HTTP 412%s%s): download it again",
                           where, m, sp, op->s3_code);
    return 0;
}

/* The server refused a body from a file as not matching its signed SHA-256 or its CRC-32C:
 * the file changed after its checksums were computed. */
static int file_changed_answer(const struct s3d_s3_op *op)
{
    return op->from_file && (strcmp(op->s3_code, "XAmzContentSHA256Mismatch") == 0 ||
                             strcmp(op->s3_code, "BadDigest") == 0);
}

/* A body from a file that ended its request (http.h, fd_err): S3D_EIO, never retried, the
 * bytes the checksums were computed from no longer being there to send. */
static int fd_body_failed(struct s3d_s3_op *op, const struct s3d_err_s3 *d, const char *where)
{
    const struct s3d_http_req *r = &op->req;
    uint64_t at = op->body_file.off + r->sent;
    if (r->fd_err == S3D_HTTP_FD_READ)
        return s3d_fail_s3(S3D_EIO, d, "%s: reading the file at byte %" PRIu64 ": %s", where, at,
                           strerror(r->fd_errno));
    if (r->fd_err == S3D_HTTP_FD_SHORT)
        return s3d_fail_s3(S3D_EIO, d,
                           "%s: file changed while reading (it ended at byte %" PRIu64
                           " while the part was being sent: truncated)",
                           where, at);
    return s3d_fail_s3(S3D_EIO, d,
                       "%s: file changed while reading (bytes %" PRIu64 "-%" PRIu64
                       " no longer match the CRC-32C computed from them before sending); the "
                       "request was cut short, nothing stored",
                       where, op->body_file.off, op->body_file.off + op->body_len - 1);
}

int s3d_s3_op_result(struct s3d_s3ctx *ctx, struct s3d_s3_op *op, CURL *e, CURLcode cc)
{
    struct s3d_http_resp *r = &op->req.resp;
    struct s3d_err_s3 d;
    struct s3d_xml_error xe;
    int err, rid, is_object = op->key != NULL && op->key[0] != '\0';
    const char *b = or_empty(op->bucket), *k = or_empty(op->key);
    char where[1400];

    op_judge_addr(op, e, cc);
    memset(&d, 0, sizeof(d));
    d.operation = op->operation;
    d.bucket = op->bucket;
    d.key = op->key;
    d.http_status = (int)r->status;
    d.request_id = r->request_id;
    if (op->bucket != NULL)
        snprintf(where, sizeof(where), "%s s3://%s%s%s", op->operation, b, is_object ? "/" : "", k);
    else
        snprintf(where, sizeof(where), "%s", op->operation);

    if (s3d_log_enabled(S3D_LOG_DEBUG)) {
        /* One line per request at debug level (docs/python.md, "Logging"). */
        curl_off_t us = 0;
        const char *range = header_value(op, "Range");
        if (curl_easy_getinfo(e, CURLINFO_TOTAL_TIME_T, &us) != CURLE_OK)
            us = 0;
        S3D_DEBUG("%s %s%s%s: %s%ld, %" PRIu64 " bytes sent, %" PRIu64 " received in %.1f ms%s%s",
                  op->method, where, range ? " " : "", range ? range : "",
                  cc == CURLE_OK ? "HTTP " : "no answer ", cc == CURLE_OK ? r->status : 0L,
                  op->body_len, r->received, (double)us / 1000.0,
                  r->request_id[0] ? ", request id " : "", r->request_id);
    }
    if (r->overflow)
        return s3d_fail_s3(S3D_EPROTO, &d,
                           "%s: the server sent more than the %" PRIu64 " bytes asked (HTTP %ld)",
                           where, op->dst_cap, r->status);
    if (r->write_errno != 0)
        /* Not the network's fault, and not worth a retry (ENOSPC, EIO, EFBIG). */
        return s3d_fail_s3(s3d_err_from_errno(r->write_errno), &d,
                           "%s: writing the body into the file at offset %" PRIu64 ": %s", where,
                           op->dst_off + r->received, strerror(r->write_errno));
    if (op->req.fd_err != S3D_HTTP_FD_OK)
        return fd_body_failed(op, &d, where);
    if (r->header_toobig)
        return s3d_fail_s3(S3D_EPROTO, &d, "%s: response headers over %u bytes", where,
                           S3D_HTTP_MAX_HEADER_BYTES);
    if (r->body_toobig)
        return s3d_fail_s3(S3D_ETOOBIG, &d, "%s: response body over %zu bytes", where,
                           op->req.body_max);
    if (cc != CURLE_OK) {
        const char *detail = s3d_http_curl_detail(&op->req, e, cc);
        long os_errno = 0;
        err = s3d_http_err_from_curl(cc);
        d.http_status = 0;
        if (op->req.sock_errno != 0)
            os_errno = op->req.sock_errno;
        else if (curl_easy_getinfo(e, CURLINFO_OS_ERRNO, &os_errno) != CURLE_OK)
            os_errno = 0;
        if (os_errno == EMFILE || os_errno == ENFILE)
            /* No socket could be made: not the network's fault, and not worth a retry. */
            return s3d_fail_s3(S3D_EMFILE, &d, "%s: %s", where, S3D_EMFILE_HINT);
        if (cc == CURLE_COULDNT_RESOLVE_PROXY || (err == S3D_ECONNECT && ctx->proxy[0] != '\0'))
            return s3d_fail_s3(err, &d,
                               "%s: could not connect to the proxy %s (from the environment: "
                               "https_proxy, http_proxy, all_proxy, no_proxy) for %s: %s",
                               where, ctx->proxy[0] ? ctx->proxy : "(unknown)",
                               ctx->cfg.endpoint_url, detail);
        if (err == S3D_ECONNECT)
            return s3d_fail_s3(err, &d, "%s: could not connect to %s: %s", where,
                               ctx->cfg.endpoint_url, detail);
        return s3d_fail_s3(err, &d, "%s: %s (after %" PRIu64 " bytes) from %s", where, detail,
                           r->received, ctx->cfg.endpoint_url);
    }
    if (r->status >= 200 && r->status < 300) {
        if ((op->dst != NULL || op->to_fd) && op->exact_length && r->received != op->dst_cap)
            return s3d_fail_s3(S3D_EPROTO, &d,
                               "%s: the server sent %" PRIu64 " bytes, %" PRIu64 " expected", where,
                               r->received, op->dst_cap);
        return 0;
    }

    /* An HTTP error: the <Error> body names the cause; HEAD responses have no body. */
    memset(&xe, 0, sizeof(xe));
    if (r->body.len > 0 && s3d_xml_is_error(r->body.data, r->body.len)) {
        if (s3d_xml_parse_error(r->body.data, r->body.len, &xe) < 0)
            memset(&xe, 0, sizeof(xe));
    }
    if (xe.code != NULL)
        snprintf(op->s3_code, sizeof(op->s3_code), "%s", xe.code);
    else if (r->body.len > 0)
        scan_code(r->body.data, op->s3_code, sizeof(op->s3_code));
    err = s3d_http_err_from_status(r->status, op->s3_code, is_object);
    d.s3_code = op->s3_code;
    d.s3_message = xe.message;
    if (r->request_id[0] == '\0' && xe.request_id != NULL)
        d.request_id = xe.request_id;
    if (r->status == 412 && (err = precondition_failed(op, &d, where)) != 0) {
        s3d_xml_error_free(&xe);
        return err;
    }
    /* A server that sends no request id (a HEAD's answer has no body to carry one) gets no
     * placeholder in the message. */
    rid = d.request_id != NULL && d.request_id[0] != '\0';
    if (file_changed_answer(op))
        err = S3D_EIO;
    err = s3d_fail_s3(err, &d, "%s: HTTP %ld %s%s%s%s%s%s%s%s%s%s", where, r->status,
                      op->s3_code[0] ? op->s3_code : s3d_strerror(err),
                      xe.message && xe.message[0] ? ": " : "", or_empty(xe.message),
                      r->bucket_region[0] ? " (the bucket is in region " : "", r->bucket_region,
                      r->bucket_region[0] ? ")" : "", rid ? " (request id " : "",
                      rid ? d.request_id : "", rid ? ")" : "",
                      file_changed_answer(op) ? "; file changed while reading: its bytes differ "
                                                "from the checksums computed before sending"
                                              : "");
    s3d_xml_error_free(&xe);
    return err;
}

int s3d_s3_op_expired_retry(struct s3d_s3ctx *ctx, struct s3d_s3_op *op, int err)
{
    if (err != S3D_EEXPIRED || op->expired_retried || ctx->creds == NULL || op->signed_with == NULL)
        return 0;
    op->expired_retried = 1;
    if (!s3d_credcache_expired(ctx->creds, op->signed_with))
        return 0;
    S3D_INFO("%s: the server says the credentials expired; refreshing and resending once",
             op->operation);
    return 1;
}

int s3d_s3_op_region_retry(struct s3d_s3ctx *ctx, struct s3d_s3_op *op, int err)
{
    const struct s3d_http_resp *r = &op->req.resp;
    char region[32];
    (void)err;
    if (op->region_retried || op->bucket == NULL || (r->status != 301 && r->status != 400))
        return 0;
    region[0] = '\0';
    if (r->bucket_region[0] != '\0') {
        snprintf(region, sizeof(region), "%s", r->bucket_region);
    } else if (r->body.len > 0 && r->body.data != NULL) {
        /* AuthorizationHeaderMalformed names the region in its body. */
        const char *b = strstr(r->body.data, "<Region>"), *e;
        if (b != NULL && (e = strstr(b + 8, "</Region>")) != NULL && e - (b + 8) < 32) {
            memcpy(region, b + 8, (size_t)(e - (b + 8)));
            region[e - (b + 8)] = '\0';
        }
    }
    if (!region_valid(region) || strcmp(region, op->region) == 0)
        return 0;
    op->region_retried = 1;
    region_remember(ctx, op->bucket, region);
    S3D_INFO("%s s3://%s: the bucket is in region %s, not %s (HTTP %ld%s%s): sending its requests "
             "there",
             op->operation, op->bucket, region, op->region, r->status, op->s3_code[0] ? " " : "",
             op->s3_code);
    return 1;
}

int s3d_s3_op_transient(const struct s3d_s3_op *op, int err)
{
    return s3d_retry_is_transient(err, (int)op->req.resp.status, op->s3_code);
}

static int stopped(const struct s3d_s3ctx *ctx)
{
    const atomic_int *f =
        atomic_load_explicit(&((struct s3d_s3ctx *)ctx)->stop, memory_order_acquire);
    return f != NULL && atomic_load_explicit(f, memory_order_acquire) != 0;
}

/* Waits ms, in steps of at most STOP_CHECK_MS so that the client's stop flag is seen (unless
 * the op ignores it); 1 when it was. */
#define STOP_CHECK_MS 50u
static int sleep_ms(const struct s3d_s3ctx *ctx, const struct s3d_s3_op *op, uint64_t ms)
{
    while (ms > 0 && (op->ignore_stop || !stopped(ctx))) {
        uint64_t step = ms < STOP_CHECK_MS ? ms : STOP_CHECK_MS;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)step * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
        ms -= step;
    }
    return !op->ignore_stop && stopped(ctx);
}

int s3d_s3_op_run(struct s3d_s3ctx *ctx, struct s3d_s3_op *op)
{
    struct s3d_retry_policy pol;
    struct s3d_multi *mm = NULL;
    CURL *e = NULL;
    uint32_t attempt = 0;
    int rc;

    s3d_s3ctx_retry_policy(ctx, &pol);
    mm = s3d_s3ctx_multi_acquire(ctx);
    if (mm == NULL)
        return s3d_last_error_code();
    e = curl_easy_init();
    if (e == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "curl_easy_init failed");
        goto out;
    }
    for (;;) {
        CURLMsg *msg;
        CURLcode cc = CURLE_OK;
        int running = 1, left;
        uint64_t delay;

        attempt++;
        op->attempts = attempt;
        curl_easy_reset(e);
        if (pol.deadline_ms != 0) {
            uint64_t now = s3d_now_ms();
            op->req.timeout_ms = now < pol.deadline_ms ? (long)(pol.deadline_ms - now) : 1;
        }
        rc = s3d_s3_op_prepare(ctx, op, e);
        if (rc < 0)
            goto out;
        if (s3d_multi_add(mm, e, &op->req) != CURLM_OK) {
            rc = s3d_fail(S3D_ENOMEM, "curl_multi_add_handle failed");
            goto out;
        }
        while (running) {
            if (curl_multi_perform(mm->m, &running) != CURLM_OK)
                break;
            if (running && !op->ignore_stop && stopped(ctx)) {
                curl_multi_remove_handle(mm->m, e);
                rc = s3d_fail(S3D_ECANCELED, "%s canceled", op->operation);
                goto out;
            }
            if (running)
                curl_multi_poll(mm->m, NULL, 0, (int)STOP_CHECK_MS * 2, NULL);
        }
        while ((msg = curl_multi_info_read(mm->m, &left)) != NULL)
            if (msg->msg == CURLMSG_DONE && msg->easy_handle == e)
                cc = msg->data.result;
        curl_multi_remove_handle(mm->m, e);
        rc = s3d_s3_op_result(ctx, op, e, cc);
        if (rc == 0)
            break;
        if (s3d_s3_op_expired_retry(ctx, op, rc) || s3d_s3_op_region_retry(ctx, op, rc))
            continue;
        if (!s3d_retry_decide(&pol, attempt, rc, (int)op->req.resp.status, op->s3_code,
                              s3d_now_ms(), s3d_retry_random(), &delay))
            break;
        S3D_DEBUG("%s: attempt %u failed (%s), retrying in %" PRIu64 " ms", op->operation, attempt,
                  s3d_last_error_message(), delay);
        if (sleep_ms(ctx, op, delay)) {
            rc = s3d_fail(S3D_ECANCELED, "%s canceled", op->operation);
            break;
        }
    }
out:
    if (e != NULL)
        curl_easy_cleanup(e);
    s3d_s3ctx_multi_release(ctx, mm);
    return rc;
}

void s3d_s3_op_cleanup(struct s3d_s3_op *op)
{
    if (op == NULL)
        return;
    op_release_addr(op, 0, 0);
    curl_slist_free_all(op->slist);
    op->slist = NULL;
    s3d_creds_release(op->signed_with);
    op->signed_with = NULL;
    s3d_http_req_cleanup(&op->req);
    s3d_dynbuf_free(&op->url);
    s3d_dynbuf_free(&op->host);
    s3d_dynbuf_free(&op->path);
    s3d_dynbuf_free(&op->query_buf);
    s3d_dynbuf_free(&op->sig);
}
