/* http.c - requests over libcurl (see http.h).
 *
 * The body of an upload is read by curl straight from the caller's iovec, and the body of a
 * download is written by curl's write callback straight into the caller's memory: the only
 * user-space copy on the data path is the one from curl's receive buffer to its destination.
 * A server that sends more than the destination holds aborts the transfer (resp.overflow),
 * which the caller reports as S3D_EPROTO; nothing is ever written past dst_cap. A body may
 * instead go to a file (to_fd): written with pwrite at its offset from the write callback,
 * and summed there (sum_body), so a download to a file has no buffer and no mapped page. */
#include "s3/http.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/sockios.h>

#include "common/alloc.h"
#include "common/compiler.h"
#include "common/crc32c.h"
#include "common/error.h"
#include "common/fdio.h"
#include "s3/xml.h"

/* The next bytes of a file body (s3d_http_fdbody), read straight into curl's buffer: a body
 * from a file is never held in memory of ours. */
int s3d_http_fd_pread(struct s3d_http_req *r, void *dst, size_t n, size_t *got)
{
    const struct s3d_http_fdbody *b = r->fdbody;
    uint64_t k = 0;
    int rc = s3d_pread_full(b->fd, dst, n, b->off + r->sent, &k);
    *got = (size_t)k;
    if (rc == 0 && k == n)
        return 0;
    r->fd_err = rc < 0 ? S3D_HTTP_FD_READ : S3D_HTTP_FD_SHORT;
    r->fd_errno = rc < 0 ? -rc : 0;
    return -1;
}

static size_t read_fd(struct s3d_http_req *r, char *buf, size_t want)
{
    const struct s3d_http_fdbody *b = r->fdbody;
    size_t n = (size_t)S3D_MIN((uint64_t)want, r->body_len - r->sent), got = 0;
    if (s3d_http_fd_pread(r, buf, n, &got) < 0)
        return CURL_READFUNC_ABORT;
    if (b->check_crc) {
        r->fd_crc = s3d_crc32c(r->fd_crc, buf, got);
        if (r->sent + got == r->body_len && r->fd_crc != b->crc) {
            /* The last bytes never go: the server sees a body cut short, never stores it. */
            r->fd_err = S3D_HTTP_FD_CHANGED;
            return CURL_READFUNC_ABORT;
        }
    }
    r->sent += got;
    return got;
}

static size_t read_cb(char *buf, size_t size, size_t nmemb, void *ud)
{
    struct s3d_http_req *r = ud;
    size_t want = size * nmemb, got = 0;
    if (r->fdbody != NULL)
        return r->fdbody->chunked ? s3d_http_read_chunked(r, buf, want) : read_fd(r, buf, want);
    while (got < want && r->iov_idx < r->iovcnt) {
        const struct iovec *v = &r->iov[r->iov_idx];
        size_t n = S3D_MIN(want - got, v->iov_len - r->iov_off);
        memcpy(buf + got, (const char *)v->iov_base + r->iov_off, n);
        got += n;
        r->iov_off += n;
        if (r->iov_off == v->iov_len) {
            r->iov_idx++;
            r->iov_off = 0;
        }
    }
    r->sent += got;
    return got;
}

/* curl rewinds the body when it resends a request on a new connection (a kept-alive one the
 * server had closed): without this, such a resend fails with CURLE_SEND_FAIL_REWIND. */
static int seek_cb(void *ud, curl_off_t off, int origin)
{
    struct s3d_http_req *r = ud;
    uint64_t left;
    if (origin != SEEK_SET || off < 0 || (uint64_t)off > r->body_len)
        return CURL_SEEKFUNC_FAIL;
    if (r->fdbody != NULL) {
        /* The running CRC-32C check (and a chunk chain) restarts with the body only. */
        if (off != 0 && (r->fdbody->check_crc || r->fdbody->chunked))
            return CURL_SEEKFUNC_CANTSEEK;
        if (r->fdbody->chunked) {
            s3d_http_chunked_rewind(r);
            return CURL_SEEKFUNC_OK;
        }
        r->sent = (uint64_t)off;
        r->fd_crc = 0;
        return CURL_SEEKFUNC_OK;
    }
    r->iov_idx = 0;
    r->iov_off = 0;
    r->sent = (uint64_t)off;
    left = (uint64_t)off;
    while (r->iov_idx < r->iovcnt && left >= r->iov[r->iov_idx].iov_len) {
        left -= r->iov[r->iov_idx].iov_len;
        r->iov_idx++;
    }
    r->iov_off = (size_t)left;
    return CURL_SEEKFUNC_OK;
}

/* The Content-Length of req's body: aws-chunked is longer than its data. */
static uint64_t body_wire_len(const struct s3d_http_req *req)
{
    if (req->fdbody != NULL && req->fdbody->chunked)
        return s3d_http_chunked_len(req->body_len);
    return req->body_len;
}

static int status_ok(long status)
{
    return status >= 200 && status < 300;
}

/* A 2xx body into dst_fd at dst_off + received, summed as it passes (sum_body). Only bytes
 * written whole count as received (and in resp.crc): a failed pwrite stops the transfer. */
static size_t write_fd(struct s3d_http_req *r, const char *data, size_t n)
{
    int rc = s3d_pwrite_full(r->dst_fd, data, n, r->dst_off + r->resp.received);
    if (rc < 0) {
        r->resp.write_errno = -rc;
        return 0;
    }
    if (r->sum_body)
        r->resp.crc = s3d_crc32c(r->resp.crc, data, n);
    r->resp.received += n;
    return n;
}

static size_t write_cb(char *data, size_t size, size_t nmemb, void *ud)
{
    struct s3d_http_req *r = ud;
    size_t n = size * nmemb;
    if (status_ok(r->resp.status)) {
        if (r->dst != NULL || r->to_fd) {
            if (n > r->dst_cap - r->resp.received || r->resp.received > r->dst_cap) {
                r->resp.overflow = 1;
                return 0;
            }
            if (r->dst == NULL)
                return write_fd(r, data, n);
            memcpy((char *)r->dst + r->resp.received, data, n);
            if (r->sum_body)
                r->resp.crc = s3d_crc32c(r->resp.crc, data, n);
            r->resp.received += n;
            return n;
        }
        if (s3d_dynbuf_append(&r->resp.body, data, n) < 0) {
            r->resp.body_toobig = 1;
            return 0;
        }
        r->resp.received += n;
        return n;
    }
    /* Error body: the <Code> is near the top; keep the first 64 KiB, drop the rest. An
     * append that fails (no memory) only loses that detail: the status still decides. */
    if (r->resp.body.len < S3D_HTTP_MAX_ERROR_BODY)
        s3d_ignore_rc(s3d_dynbuf_append(&r->resp.body, data,
                                        S3D_MIN(n, S3D_HTTP_MAX_ERROR_BODY - r->resp.body.len)));
    return n;
}

static void copy_value(char *dst, size_t cap, const char *v, size_t len)
{
    size_t n = S3D_MIN(len, cap - 1);
    memcpy(dst, v, n);
    dst[n] = '\0';
}

/* A header's count (digits up to 1,000,000; 0 when there are none). */
static uint32_t small_count(const char *v, const char *end)
{
    uint32_t n = 0;
    for (const char *p = v; p < end && isdigit((unsigned char)*p) && n < 1000000; p++)
        n = n * 10 + (uint32_t)(*p - '0');
    return n;
}

static int name_is(const char *line, size_t name_len, const char *name)
{
    return strlen(name) == name_len && strncasecmp(line, name, name_len) == 0;
}

static size_t header_cb(char *line, size_t size, size_t nitems, void *ud)
{
    struct s3d_http_req *r = ud;
    struct s3d_http_resp *h = &r->resp;
    size_t len = size * nitems, name_len;
    const char *colon, *v, *end;

    h->header_bytes += len;
    if (h->header_bytes > S3D_HTTP_MAX_HEADER_BYTES) {
        h->header_toobig = 1;
        return 0;
    }
    if (len >= 5 && memcmp(line, "HTTP/", 5) == 0) {
        /* A new response (after 100 Continue or on a resend): forget the previous one. */
        const char *sp = memchr(line, ' ', len);
        long st = 0;
        if (sp != NULL) {
            for (sp++; sp < line + len && isdigit((unsigned char)*sp); sp++)
                st = st * 10 + (*sp - '0');
        }
        h->status = st;
        h->has_content_length = 0;
        h->etag[0] = h->request_id[0] = h->content_type[0] = h->last_modified[0] = '\0';
        h->content_range[0] = h->checksum_crc32c[0] = h->meta_crc32c[0] = '\0';
        h->checksum_type[0] = '\0';
        h->tagging_count = 0;
        h->bucket_region[0] = '\0';
        return len;
    }
    colon = memchr(line, ':', len);
    if (colon == NULL)
        return len;
    name_len = (size_t)(colon - line);
    v = colon + 1;
    end = line + len;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
        end--;
    if (name_is(line, name_len, "etag"))
        copy_value(h->etag, sizeof(h->etag), v, (size_t)(end - v));
    else if (name_is(line, name_len, "x-amz-request-id"))
        copy_value(h->request_id, sizeof(h->request_id), v, (size_t)(end - v));
    else if (name_is(line, name_len, "x-amzn-requestid") && h->request_id[0] == '\0')
        /* The other AWS spelling, as botocore reads it: moto's server sends only this one. */
        copy_value(h->request_id, sizeof(h->request_id), v, (size_t)(end - v));
    else if (name_is(line, name_len, "content-type"))
        copy_value(h->content_type, sizeof(h->content_type), v, (size_t)(end - v));
    else if (name_is(line, name_len, "last-modified"))
        copy_value(h->last_modified, sizeof(h->last_modified), v, (size_t)(end - v));
    else if (name_is(line, name_len, "content-range"))
        copy_value(h->content_range, sizeof(h->content_range), v, (size_t)(end - v));
    else if (name_is(line, name_len, "x-amz-checksum-crc32c"))
        copy_value(h->checksum_crc32c, sizeof(h->checksum_crc32c), v, (size_t)(end - v));
    else if (name_is(line, name_len, "x-amz-checksum-type"))
        copy_value(h->checksum_type, sizeof(h->checksum_type), v, (size_t)(end - v));
    else if (name_is(line, name_len, "x-amz-meta-s3d-crc32c"))
        copy_value(h->meta_crc32c, sizeof(h->meta_crc32c), v, (size_t)(end - v));
    else if (name_is(line, name_len, "x-amz-bucket-region"))
        copy_value(h->bucket_region, sizeof(h->bucket_region), v, (size_t)(end - v));
    else if (name_is(line, name_len, "x-amz-tagging-count"))
        h->tagging_count = small_count(v, end);
    else if (name_is(line, name_len, "x-amz-mp-parts-count"))
        h->mp_parts_count = small_count(v, end);
    else if (name_is(line, name_len, "content-length")) {
        uint64_t cl = 0;
        const char *p = v;
        int ok = p < end;
        for (; p < end; p++) {
            if (!isdigit((unsigned char)*p) || cl > (UINT64_MAX - 9) / 10) {
                ok = 0;
                break;
            }
            cl = cl * 10 + (uint64_t)(*p - '0');
        }
        h->has_content_length = ok;
        h->content_length = ok ? cl : 0;
    }
    return len;
}

void s3d_http_req_cleanup(struct s3d_http_req *req)
{
    if (req == NULL)
        return;
    s3d_dynbuf_free(&req->resp.body);
    free(req->stage);
    req->stage = NULL;
}

/* Header names (with the colon) whose whole value is a secret: the session token, the SSO
 * portal's bearer token, the IMDSv2 session token (not its -ttl-seconds request header). */
static const char *const secret_headers[] = {
    "x-amz-security-token:", "x-amz-sso_bearer_token:", "x-aws-ec2-metadata-token:"};

size_t s3d_http_redact(const char *in, size_t n, char *out, size_t cap)
{
    static const char auth[] = "authorization:", red[] = "[redacted]";
    size_t keep = n, name = 0, o, i;
    const char *sig;

    if (cap == 0)
        return 0;
    for (i = 0; i < sizeof(secret_headers) / sizeof(secret_headers[0]); i++) {
        size_t l = strlen(secret_headers[i]);
        if (n >= l && strncasecmp(in, secret_headers[i], l) == 0)
            keep = name = l;
    }
    if (name == 0 && n >= sizeof(auth) - 1 && strncasecmp(in, auth, sizeof(auth) - 1) == 0) {
        /* Keep the algorithm, credential scope and signed headers; drop the signature. Any
         * other scheme (a container credentials token) is dropped whole. */
        sig = memmem(in, n, "Signature=", 10);
        keep = sig != NULL ? (size_t)(sig - in) + 10 : sizeof(auth) - 1;
        if (sig == NULL)
            name = keep;
    }
    o = keep < cap - 1 ? keep : cap - 1;
    memcpy(out, in, o);
    if (keep < n) {
        size_t r = sizeof(red) - 1;
        if (keep == name)
            out[o < cap - 1 ? o++ : o] = ' ';
        r = r < cap - 1 - o ? r : cap - 1 - o;
        memcpy(out + o, red, r);
        o += r;
    }
    out[o] = '\0';
    return o;
}

#define DEBUG_LINE_MAX 4096 /* one verbose line as printed; longer ones are cut */

/* CURLOPT_VERBOSE output (S3D_CURL_VERBOSE) through s3d_http_redact: the request signature,
 * the session token and the credential providers' tokens (SSO bearer, IMDSv2, container
 * Authorization) never reach the terminal or a log. Bodies (which carry the credentials the
 * providers answer with, and the IMDSv2 token itself) are not printed. */
static int debug_cb(CURL *e, curl_infotype type, char *data, size_t size, void *ud)
{
    static const char *const prefix[] = {"* ", "< ", "> "};
    char line[DEBUG_LINE_MAX];
    size_t at = 0;
    (void)e;
    (void)ud;
    if (type != CURLINFO_TEXT && type != CURLINFO_HEADER_IN && type != CURLINFO_HEADER_OUT)
        return 0;
    while (at < size) {
        const char *nl = memchr(data + at, '\n', size - at);
        size_t len = nl != NULL ? (size_t)(nl - (data + at)) : size - at;
        size_t ll = len;
        if (ll > 0 && data[at + ll - 1] == '\r')
            ll--;
        if (ll > 0 || type == CURLINFO_TEXT) {
            s3d_http_redact(data + at, ll, line, sizeof(line));
            fprintf(stderr, "%s%s\n", prefix[type], line);
        }
        at += len + 1;
    }
    return 0;
}

static const char *env_any(const char *(*env)(const char *), const char *a, const char *b)
{
    const char *v = env(a);
    if ((v == NULL || v[0] == '\0') && b != NULL)
        v = env(b);
    return v != NULL && v[0] != '\0' ? v : NULL;
}

/* 1 when host is listed in no_proxy ("*", "host", "domain", ".domain"). */
static int no_proxy_match(const char *list, const char *host, size_t hl)
{
    while (*list != '\0') {
        const char *end = strchr(list, ',');
        size_t n = end != NULL ? (size_t)(end - list) : strlen(list);
        const char *e = list;
        while (n > 0 && (*e == ' ' || *e == '\t')) {
            e++;
            n--;
        }
        while (n > 0 && (e[n - 1] == ' ' || e[n - 1] == '\t'))
            n--;
        if (n == 1 && e[0] == '*')
            return 1;
        if (n > 0 && e[0] == '.') {
            e++;
            n--;
        }
        if (n > 0 && n <= hl && strncasecmp(host + hl - n, e, n) == 0 &&
            (n == hl || host[hl - n - 1] == '.'))
            return 1;
        list += end != NULL ? (size_t)(end - list) + 1 : strlen(list);
    }
    return 0;
}

int s3d_http_proxy_for(const char *url, const char *(*env)(const char *name), char *out, size_t cap)
{
    const char *p, *np, *h, *he;
    int https = strncasecmp(url, "https://", 8) == 0;
    size_t hl;

    if (cap > 0)
        out[0] = '\0';
    if (!https && strncasecmp(url, "http://", 7) != 0)
        return 0;
    h = url + (https ? 8 : 7);
    he = h + strcspn(h, ":/?#");
    if (*h == '[') /* [IPv6] */
        he = strchr(h, ']') != NULL ? strchr(h, ']') + 1 : he;
    hl = (size_t)(he - h);
    p = https ? env_any(env, "https_proxy", "HTTPS_PROXY") : env_any(env, "http_proxy", NULL);
    if (p == NULL)
        p = env_any(env, "all_proxy", "ALL_PROXY");
    if (p == NULL)
        return 0;
    np = env_any(env, "no_proxy", "NO_PROXY");
    if (np != NULL && no_proxy_match(np, h, hl))
        return 0;
    snprintf(out, cap, "%s", p);
    return 1;
}

/* Opens the sockets libcurl asks for, keeping the errno of a failure: curl reports a socket()
 * refused for lack of descriptors as a plain "couldn't connect". */
static curl_socket_t opensocket_cb(void *ud, curlsocktype purpose, struct curl_sockaddr *a)
{
    struct s3d_http_req *req = ud;
    curl_socket_t s;
    (void)purpose;
    s = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
    if (s == CURL_SOCKET_BAD) {
        req->sock_errno = errno;
        return s;
    }
    if (req->socks != NULL) {
        struct s3d_sockset *set = req->socks;
        if (set->n == set->cap) {
            size_t cap = set->cap ? set->cap * 2 : 16;
            int *grown = s3d_reallocarray(set->fds, cap, sizeof(*grown));
            if (grown == NULL)
                return s; /* untracked: its bytes count when curl hands them over */
            set->fds = grown;
            set->cap = cap;
        }
        set->fds[set->n++] = s;
    }
    return s;
}

static int closesocket_cb(void *ud, curl_socket_t fd)
{
    struct s3d_sockset *set = ud;
    size_t i;
    for (i = 0; i < set->n; i++) {
        if (set->fds[i] == fd) {
            set->fds[i] = set->fds[--set->n];
            break;
        }
    }
    return close(fd);
}

void s3d_http_track_sockets(CURL *e, struct s3d_http_req *req, struct s3d_sockset *s)
{
    req->socks = s;
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, closesocket_cb);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, s);
}

uint64_t s3d_sockset_unacked(const struct s3d_sockset *s)
{
    uint64_t b = 0;
    size_t i;
    for (i = 0; i < s->n; i++) {
        int q = 0;
        if (ioctl(s->fds[i], SIOCOUTQ, &q) == 0 && q > 0)
            b += (uint64_t)q;
    }
    return b;
}

void s3d_sockset_free(struct s3d_sockset *s)
{
    free(s->fds);
    memset(s, 0, sizeof(*s));
}

/* The limit on the whole request (0 = none): req's timeout_ms, or less for a quiet request
 * (quiet_len, http.h). */
static long whole_timeout_ms(const struct s3d_http_req *req, const struct s3d_http_conf *conf)
{
    /* the stall window; 30 s (S3D_DEFAULT_LOW_SPEED_TIME_S) where the conf has none */
    const uint64_t window_s = conf->low_speed_time_s > 0 ? (uint64_t)conf->low_speed_time_s : 30;
    uint64_t ms;
    if (req->quiet_len == 0)
        return req->timeout_ms;
    ms = window_s * 1000 + req->quiet_len * 1000 / S3D_HTTP_QUIET_RATE;
    return req->timeout_ms > 0 && (uint64_t)req->timeout_ms < ms ? req->timeout_ms : (long)ms;
}

#define SETOPT(opt, val)                                                                           \
    do {                                                                                           \
        if (curl_easy_setopt(e, opt, val) != CURLE_OK)                                             \
            goto fail_opt;                                                                         \
    } while (0)

int s3d_http_setup(CURL *e, struct s3d_http_req *req, const struct s3d_http_conf *conf)
{
    const char *m = req->method;
    size_t max = req->body_max ? req->body_max : S3D_XML_MAX_BODY;

    s3d_dynbuf_free(&req->resp.body);
    memset(&req->resp, 0, sizeof(req->resp));
    s3d_dynbuf_init(&req->resp.body, max);
    req->resp.crc = req->crc_seed;
    req->iov_idx = 0;
    req->iov_off = 0;
    req->sent = 0;
    req->fd_crc = 0;
    req->fd_err = S3D_HTTP_FD_OK;
    req->fd_errno = 0;
    if (req->fdbody != NULL && req->fdbody->chunked)
        s3d_http_chunked_rewind(req);
    req->sock_errno = 0;
    req->socks = NULL; /* s3d_http_track_sockets, after this */
    req->errbuf[0] = '\0';

    SETOPT(CURLOPT_URL, req->url);
    /* Send the path exactly as signed: keys may hold "." and ".." segments. */
    SETOPT(CURLOPT_PATH_AS_IS, 1L);
    SETOPT(CURLOPT_HTTPHEADER, req->headers);
    SETOPT(CURLOPT_NOSIGNAL, 1L);
    SETOPT(CURLOPT_ERRORBUFFER, req->errbuf);
    SETOPT(CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    SETOPT(CURLOPT_TCP_NODELAY, 1L);
    SETOPT(CURLOPT_TCP_KEEPALIVE, 1L);
    SETOPT(CURLOPT_WRITEFUNCTION, write_cb);
    SETOPT(CURLOPT_WRITEDATA, req);
    SETOPT(CURLOPT_HEADERFUNCTION, header_cb);
    SETOPT(CURLOPT_HEADERDATA, req);
    SETOPT(CURLOPT_PRIVATE, req);
    SETOPT(CURLOPT_OPENSOCKETFUNCTION, opensocket_cb);
    SETOPT(CURLOPT_OPENSOCKETDATA, req);
    if (conf->share != NULL)
        SETOPT(CURLOPT_SHARE, conf->share);
    if (conf->connect_timeout_ms > 0)
        SETOPT(CURLOPT_CONNECTTIMEOUT_MS, conf->connect_timeout_ms);
    if (conf->low_speed_limit > 0 && conf->low_speed_time_s > 0 && req->quiet_len == 0) {
        SETOPT(CURLOPT_LOW_SPEED_LIMIT, conf->low_speed_limit);
        SETOPT(CURLOPT_LOW_SPEED_TIME, conf->low_speed_time_s);
    }
    if (whole_timeout_ms(req, conf) > 0)
        SETOPT(CURLOPT_TIMEOUT_MS, whole_timeout_ms(req, conf));
    if (conf->buffer_size > 0)
        SETOPT(CURLOPT_BUFFERSIZE, conf->buffer_size);
    if (conf->no_verify_ssl) {
        SETOPT(CURLOPT_SSL_VERIFYPEER, 0L);
        SETOPT(CURLOPT_SSL_VERIFYHOST, 0L);
    } else {
        SETOPT(CURLOPT_SSL_VERIFYPEER, 1L);
        SETOPT(CURLOPT_SSL_VERIFYHOST, 2L);
        if (conf->ca_bundle != NULL && conf->ca_bundle[0] != '\0')
            SETOPT(CURLOPT_CAINFO, conf->ca_bundle);
    }
    if (conf->verbose) {
        SETOPT(CURLOPT_DEBUGFUNCTION, debug_cb);
        SETOPT(CURLOPT_VERBOSE, 1L);
    }

    if (strcmp(m, "GET") == 0) {
        SETOPT(CURLOPT_HTTPGET, 1L);
    } else if (strcmp(m, "HEAD") == 0) {
        SETOPT(CURLOPT_NOBODY, 1L);
    } else if (strcmp(m, "PUT") == 0) {
        SETOPT(CURLOPT_UPLOAD, 1L);
        SETOPT(CURLOPT_INFILESIZE_LARGE, (curl_off_t)body_wire_len(req));
        if (req->fdbody != NULL && req->fdbody->chunked)
            SETOPT(CURLOPT_UPLOAD_BUFFERSIZE, (long)S3D_HTTP_CHUNK_BUF); /* a whole chunk */
        SETOPT(CURLOPT_READFUNCTION, read_cb);
        SETOPT(CURLOPT_READDATA, req);
        SETOPT(CURLOPT_SEEKFUNCTION, seek_cb);
        SETOPT(CURLOPT_SEEKDATA, req);
    } else if (strcmp(m, "POST") == 0) {
        SETOPT(CURLOPT_POST, 1L);
        SETOPT(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
        if (req->body_len > 0) {
            SETOPT(CURLOPT_READFUNCTION, read_cb);
            SETOPT(CURLOPT_READDATA, req);
            SETOPT(CURLOPT_SEEKFUNCTION, seek_cb);
            SETOPT(CURLOPT_SEEKDATA, req);
        } else {
            SETOPT(CURLOPT_POSTFIELDS, "");
        }
    } else if (strcmp(m, "DELETE") == 0) {
        SETOPT(CURLOPT_CUSTOMREQUEST, "DELETE");
    } else {
        return s3d_fail(S3D_EINVAL, "HTTP method %s is not supported", m);
    }
    return 0;

fail_opt:
    return s3d_fail(S3D_ENOMEM, "setting up a %s request for %s failed", m, req->url);
}

int s3d_http_err_from_curl(CURLcode cc)
{
    switch (cc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        return S3D_ECONNECT;
    case CURLE_OPERATION_TIMEDOUT:
        return S3D_ETIMEDOUT;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_ENGINE_INITFAILED:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_SHUTDOWN_FAILED:
    case CURLE_USE_SSL_FAILED:
        return S3D_ETLS;
    case CURLE_OUT_OF_MEMORY:
        return S3D_ENOMEM;
    default:
        return S3D_ENETWORK;
    }
}

int s3d_http_err_from_status(long status, const char *s3_code, int is_object)
{
    static const struct {
        const char *code;
        int err;
    } map[] = {
        {"NoSuchKey", S3D_ENOSUCHKEY},
        {"NoSuchBucket", S3D_ENOSUCHBUCKET},
        {"AccessDenied", S3D_EACCESS},
        {"AllAccessDisabled", S3D_EACCESS},
        {"SignatureDoesNotMatch", S3D_ESIGNATURE},
        {"InvalidAccessKeyId", S3D_EKEYID},
        {"ExpiredToken", S3D_EEXPIRED},
        {"ExpiredTokenException", S3D_EEXPIRED},
        {"SlowDown", S3D_ESLOWDOWN},
        {"InvalidRange", S3D_ERANGE},
        {"NoSuchUpload", S3D_ENOUPLOAD},
        {"BucketAlreadyOwnedByYou", S3D_EBUCKETEXISTS},
        {"BucketAlreadyExists", S3D_EBUCKETEXISTS},
        {"InternalError", S3D_ESERVER},
        {"ServiceUnavailable", S3D_ESLOWDOWN},
        {"RequestTimeout", S3D_ETIMEDOUT},
        {"EntityTooLarge", S3D_ETOOBIG},
        {"EntityTooSmall", S3D_EINVAL},
        {"InvalidPart", S3D_EPROTO},
        {"InvalidPartOrder", S3D_EPROTO},
        {"InvalidDigest", S3D_ECHECKSUM},
        {"BadDigest", S3D_ECHECKSUM},
        {"InvalidBucketName", S3D_EINVAL},
        {"BucketNotEmpty", S3D_EINVAL},
    };
    size_t i;
    if (s3_code != NULL && s3_code[0] != '\0') {
        for (i = 0; i < S3D_ARRAY_LEN(map); i++)
            if (strcmp(s3_code, map[i].code) == 0)
                return map[i].err;
    }
    switch (status) {
    case 403:
        return S3D_EACCESS;
    case 404:
        return is_object ? S3D_ENOSUCHKEY : S3D_ENOSUCHBUCKET;
    case 416:
        return S3D_ERANGE;
    case 503:
        return S3D_ESLOWDOWN;
    case 409:
        return S3D_EHTTP;
    }
    if (status >= 500)
        return S3D_ESERVER;
    return S3D_EHTTP;
}

const char *s3d_http_curl_detail(struct s3d_http_req *req, CURL *e, CURLcode cc)
{
    long os_err = 0;
    if (cc == CURLE_COULDNT_CONNECT && e != NULL &&
        curl_easy_getinfo(e, CURLINFO_OS_ERRNO, &os_err) == CURLE_OK && os_err != 0) {
        snprintf(req->errbuf, sizeof(req->errbuf), "%s", strerror((int)os_err));
        return req->errbuf;
    }
    if (req->errbuf[0] != '\0')
        return req->errbuf;
    return curl_easy_strerror(cc);
}
