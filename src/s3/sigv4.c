/* sigv4.c - AWS Signature Version 4 for S3 (header and presigned forms), SHA-256.
 *
 * Outline: canonical request -> its SHA-256 -> string to sign -> HMAC with the signing key
 * derived from (secret, date, region, "s3"). Both forms share sign_canonical(); they differ in
 * what goes into the canonical request (headers vs X-Amz-* query parameters). */
#include "s3/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/compiler.h"
#include "common/error.h"
#include "s3/config.h"
#include "s3/uri.h"

#define ALGO         "AWS4-HMAC-SHA256"
#define SERVICE(req) ((req)->service != NULL && (req)->service[0] != '\0' ? (req)->service : "s3")
/* Canonical requests hold a key (<= 1 KiB, x3 encoded), a few headers and query parameters. */
#define SIGV4_MAX_TEXT (256 * 1024)
#define SECRET_MAX     128    /* the longest secret access key signed (AWS's are 40 bytes) */
#define PRESIGN_MAX_S  604800 /* SigV4's limit on X-Amz-Expires: 7 days */

static const char hexdig[] = "0123456789abcdef";

static void to_hex(const unsigned char *p, size_t n, char *out)
{
    size_t i;
    for (i = 0; i < n; i++) {
        out[2 * i] = hexdig[p[i] >> 4];
        out[2 * i + 1] = hexdig[p[i] & 15];
    }
    out[2 * n] = '\0';
}

/* ---- SHA-256 ------------------------------------------------------------------------- */

int s3d_sha256_init(struct s3d_sha256 *h)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    h->ctx = NULL;
    if (ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(ctx);
        return s3d_fail(S3D_ENOMEM, "SHA-256: cannot create an OpenSSL digest context");
    }
    h->ctx = ctx;
    return 0;
}

int s3d_sha256_update(struct s3d_sha256 *h, const void *p, size_t n)
{
    if (h->ctx == NULL)
        return s3d_fail(S3D_EINVAL, "SHA-256: update on an uninitialized context");
    if (n > 0 && EVP_DigestUpdate((EVP_MD_CTX *)h->ctx, p, n) != 1)
        return s3d_fail(S3D_ENOMEM, "SHA-256: EVP_DigestUpdate failed");
    return 0;
}

int s3d_sha256_final(struct s3d_sha256 *h, char out[65])
{
    unsigned char md[32];
    unsigned int mdlen = 0;
    int ok;
    if (h->ctx == NULL)
        return s3d_fail(S3D_EINVAL, "SHA-256: final on an uninitialized context");
    ok = EVP_DigestFinal_ex((EVP_MD_CTX *)h->ctx, md, &mdlen) == 1 && mdlen == 32;
    s3d_sha256_free(h);
    if (!ok)
        return s3d_fail(S3D_ENOMEM, "SHA-256: EVP_DigestFinal_ex failed");
    to_hex(md, 32, out);
    return 0;
}

void s3d_sha256_free(struct s3d_sha256 *h)
{
    if (h == NULL)
        return;
    EVP_MD_CTX_free((EVP_MD_CTX *)h->ctx);
    h->ctx = NULL;
}

int s3d_sha256_iov_hex(const struct iovec *iov, int iovcnt, char out[65])
{
    struct s3d_sha256 h;
    int i, rc;
    if ((rc = s3d_sha256_init(&h)) < 0)
        return rc;
    for (i = 0; i < iovcnt; i++) {
        if ((rc = s3d_sha256_update(&h, iov[i].iov_base, iov[i].iov_len)) < 0) {
            s3d_sha256_free(&h);
            return rc;
        }
    }
    return s3d_sha256_final(&h, out);
}

int s3d_sha256_hex(const void *p, size_t n, char out[65])
{
    unsigned char md[32];
    unsigned int mdlen = 0;
    if (EVP_Digest(p, n, md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen != 32)
        return s3d_fail(S3D_ENOMEM, "SHA-256: EVP_Digest failed");
    to_hex(md, 32, out);
    return 0;
}

static int hmac256(const void *key, size_t klen, const void *msg, size_t mlen,
                   unsigned char out[32])
{
    unsigned int len = 0;
    if (HMAC(EVP_sha256(), key, (int)klen, msg, mlen, out, &len) == NULL || len != 32)
        return s3d_fail(S3D_ENOMEM, "HMAC-SHA256 failed");
    return 0;
}

/* ---- signing key ------------------------------------------------------------------------ */

/* Per-thread cache of the last derived key: no lock, and a client signing from many threads
 * derives at most once per thread per day. Entries that do not fit are just not cached. */
static _Thread_local struct {
    int valid;
    char date[9];
    char region[64];
    char service[16];
    char secret[SECRET_MAX];
    unsigned char key[32];
} tl_key;

static int signing_key(const char *secret, const char *date8, const char *region,
                       const char *service, unsigned char key[32])
{
    unsigned char k1[32], k2[32], k3[32];
    char first[4 + SECRET_MAX + 1];
    size_t slen = strlen(secret), rlen = strlen(region), svlen = strlen(service);
    int rc, cacheable = slen < sizeof(tl_key.secret) && rlen < sizeof(tl_key.region) &&
                        svlen < sizeof(tl_key.service);
    if (cacheable && tl_key.valid && strcmp(tl_key.date, date8) == 0 &&
        strcmp(tl_key.region, region) == 0 && strcmp(tl_key.service, service) == 0 &&
        strcmp(tl_key.secret, secret) == 0) {
        memcpy(key, tl_key.key, 32);
        return 0;
    }
    if (slen > SECRET_MAX)
        return s3d_fail(S3D_EINVAL, "secret access key is %zu bytes long (at most %d)", slen,
                        SECRET_MAX);
    memcpy(first, "AWS4", 4);
    memcpy(first + 4, secret, slen);
    if ((rc = hmac256(first, 4 + slen, date8, 8, k1)) < 0 ||
        (rc = hmac256(k1, 32, region, rlen, k2)) < 0 ||
        (rc = hmac256(k2, 32, service, svlen, k3)) < 0 ||
        (rc = hmac256(k3, 32, "aws4_request", 12, key)) < 0)
        goto out;
    if (cacheable) {
        memcpy(tl_key.date, date8, 9);
        memcpy(tl_key.region, region, rlen + 1);
        memcpy(tl_key.service, service, svlen + 1);
        memcpy(tl_key.secret, secret, slen + 1);
        memcpy(tl_key.key, key, 32);
        tl_key.valid = 1;
    }
out:
    memset(first, 0, sizeof(first));
    return rc;
}

int s3d_sigv4_chunk_key(const char *secret, const char *region, time_t now,
                        struct s3d_sigv4_chunk_key *out)
{
    char date8[9];
    int rc = s3d_sigv4_amz_date(now, out->amz_date);
    if (rc < 0)
        return rc;
    memcpy(date8, out->amz_date, 8);
    date8[8] = '\0';
    if ((size_t)snprintf(out->scope, sizeof(out->scope), "%s/%s/s3/aws4_request", date8, region) >=
        sizeof(out->scope))
        return s3d_fail(S3D_EINVAL, "SigV4: region \"%.40s\" too long", region);
    return signing_key(secret, date8, region, "s3", out->key);
}

int s3d_sigv4_chunk_sign(const struct s3d_sigv4_chunk_key *k, const char prev[65],
                         const char data_sha[65], char sig[65])
{
    char sts[400];
    unsigned char mac[32];
    int n = snprintf(sts, sizeof(sts), "AWS4-HMAC-SHA256-PAYLOAD\n%s\n%s\n%.64s\n%s\n%.64s",
                     k->amz_date, k->scope, prev, S3D_EMPTY_SHA256, data_sha);
    int rc = hmac256(k->key, 32, sts, (size_t)n, mac);
    if (rc < 0)
        return rc;
    to_hex(mac, 32, sig);
    return 0;
}

/* ---- canonical pieces ------------------------------------------------------------------- */

/* Writes v (0 <= v < 10^n) as exactly n decimal digits. */
static void put_digits(char *out, int v, int n)
{
    while (n-- > 0) {
        out[n] = (char)('0' + v % 10);
        v /= 10;
    }
}

int s3d_sigv4_amz_date(time_t t, char out[17])
{
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL || tm.tm_year + 1900 < 0 || tm.tm_year + 1900 > 9999)
        return s3d_fail(S3D_EINVAL, "signing time %lld is out of range", (long long)t);
    put_digits(out, tm.tm_year + 1900, 4);
    put_digits(out + 4, tm.tm_mon + 1, 2);
    put_digits(out + 6, tm.tm_mday, 2);
    out[8] = 'T';
    put_digits(out + 9, tm.tm_hour, 2);
    put_digits(out + 11, tm.tm_min, 2);
    put_digits(out + 13, tm.tm_sec, 2);
    out[15] = 'Z';
    out[16] = '\0';
    return 0;
}

struct enc_pair {
    char *k;
    char *v;
};

static int cmp_pair(const void *a, const void *b)
{
    const struct enc_pair *x = a, *y = b;
    int c = strcmp(x->k, y->k);
    return c != 0 ? c : strcmp(x->v, y->v);
}

static char *encode_dup(const char *s, int *rc)
{
    struct s3d_dynbuf b;
    char *out;
    size_t n;
    s3d_dynbuf_init(&b, SIGV4_MAX_TEXT);
    if ((*rc = s3d_uri_encode(&b, s, strlen(s), 1)) < 0) {
        s3d_dynbuf_free(&b);
        return NULL;
    }
    out = s3d_dynbuf_take(&b, &n);
    if (out == NULL && (out = strdup("")) == NULL)
        *rc = s3d_fail(S3D_ENOMEM, "out of memory encoding a query parameter");
    return out;
}

int s3d_sigv4_canonical_query(const struct s3d_kv *params, size_t n, struct s3d_dynbuf *out)
{
    struct enc_pair *pairs = NULL;
    size_t i, done = 0;
    int rc = 0;
    if (n == 0)
        return 0;
    if ((pairs = s3d_calloc(n, sizeof(*pairs))) == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory building a query string");
    for (; done < n; done++) {
        if (params[done].name == NULL || params[done].value == NULL) {
            rc = s3d_fail(S3D_EINVAL, "query parameter %zu has a NULL name or value", done);
            goto out;
        }
        if ((pairs[done].k = encode_dup(params[done].name, &rc)) == NULL)
            goto out;
        if ((pairs[done].v = encode_dup(params[done].value, &rc)) == NULL) {
            free(pairs[done].k);
            goto out;
        }
    }
    qsort(pairs, n, sizeof(*pairs), cmp_pair);
    for (i = 0; i < n; i++) {
        if ((rc = s3d_dynbuf_appendf(out, "%s%s=%s", i ? "&" : "", pairs[i].k, pairs[i].v)) < 0) {
            rc = s3d_fail(rc, "query string over its limit of %zu bytes", out->max);
            goto out;
        }
    }
out:
    for (i = 0; i < done; i++) {
        free(pairs[i].k);
        free(pairs[i].v);
    }
    free(pairs);
    return rc;
}

/* One header of the canonical request: name lower-cased, value trimmed and folded. */
struct canon_hdr {
    char *name;
    char *value;
};

static int cmp_hdr(const void *a, const void *b)
{
    return strcmp(((const struct canon_hdr *)a)->name, ((const struct canon_hdr *)b)->name);
}

static int is_token_char(unsigned char c)
{
    return c > 32 && c < 127 && c != ':' && c != '(' && c != ')' && c != ',' && c != ';' &&
           c != '"' && c != '/' && c != '[' && c != ']' && c != '?' && c != '=' && c != '{' &&
           c != '}' && c != '\\' && c != '<' && c != '>' && c != '@';
}

static int canon_header(const char *name, const char *value, struct canon_hdr *h)
{
    size_t nlen = strlen(name), i, o = 0;
    const char *v = value;
    char *out;
    if (nlen == 0)
        return s3d_fail(S3D_EINVAL, "SigV4: empty header name");
    if ((h->name = s3d_strndup(name, nlen)) == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory signing a request");
    for (i = 0; i < nlen; i++) {
        unsigned char c = (unsigned char)h->name[i];
        if (!is_token_char(c))
            return s3d_fail(S3D_EINVAL, "SigV4: invalid character in header name \"%s\"", name);
        if (c >= 'A' && c <= 'Z')
            h->name[i] = (char)(c - 'A' + 'a');
    }
    if ((out = malloc(strlen(value) + 1)) == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory signing a request");
    h->value = out;
    /* Trim both ends and fold each inner run of blanks into one space, as AWS does. */
    for (; *v; v++) {
        unsigned char c = (unsigned char)*v;
        if (c == '\r' || c == '\n' || c == 0x7f || (c < 32 && c != '\t'))
            return s3d_fail(S3D_EINVAL, "SigV4: header \"%s\" has a control character", name);
        if (c == ' ' || c == '\t') {
            if (o > 0 && out[o - 1] != ' ')
                out[o++] = ' ';
        } else {
            out[o++] = (char)c;
        }
    }
    if (o > 0 && out[o - 1] == ' ')
        o--;
    out[o] = '\0';
    return 0;
}

static int reserved_header(const char *lname)
{
    return strcmp(lname, "host") == 0 || strcmp(lname, "x-amz-date") == 0 ||
           strcmp(lname, "x-amz-content-sha256") == 0 ||
           strcmp(lname, "x-amz-security-token") == 0 || strcmp(lname, "authorization") == 0;
}

static int valid_payload_hash(const char *h)
{
    size_t i;
    if (strcmp(h, S3D_UNSIGNED_PAYLOAD) == 0 || strcmp(h, S3D_STREAMING_PAYLOAD) == 0)
        return 1;
    for (i = 0; i < 64; i++)
        if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f')))
            return 0;
    return h[64] == '\0';
}

static int check_common(const struct s3d_sigv4_request *req, const struct s3d_sigv4_creds *creds)
{
    if (req == NULL || creds == NULL || req->method == NULL || req->host == NULL ||
        req->canonical_path == NULL || req->region == NULL)
        return s3d_fail(S3D_EINVAL, "SigV4: NULL method, host, path, region or request");
    if (req->canonical_path[0] != '/')
        return s3d_fail(S3D_EINVAL, "SigV4: canonical path \"%.100s\" does not start with '/'",
                        req->canonical_path);
    if (creds->access_key_id == NULL || creds->secret_access_key == NULL ||
        creds->access_key_id[0] == '\0' || creds->secret_access_key[0] == '\0')
        return s3d_fail(S3D_ENOCREDS, "no credentials to sign the request with");
    if (req->region[0] == '\0' || strchr(req->region, '/') != NULL)
        return s3d_fail(S3D_EINVAL, "SigV4: invalid region \"%s\"", req->region);
    if ((req->n_query > 0 && req->query == NULL))
        return s3d_fail(S3D_EINVAL, "SigV4: n_query > 0 with NULL query");
    return 0;
}

/* From a finished canonical request: string to sign and signature (hex into sig). */
static int sign_canonical(const struct s3d_dynbuf *creq, const char *amz_date, const char *region,
                          const char *service, const char *secret, struct s3d_sigv4_trace *trace,
                          char sig[65])
{
    char creq_hash[65], date8[9];
    unsigned char key[32], mac[32];
    struct s3d_dynbuf sts;
    int rc;
    s3d_dynbuf_init(&sts, SIGV4_MAX_TEXT);
    if ((rc = s3d_sha256_hex(creq->data, creq->len, creq_hash)) < 0)
        goto out;
    memcpy(date8, amz_date, 8);
    date8[8] = '\0';
    if ((rc = s3d_dynbuf_appendf(&sts, ALGO "\n%s\n%s/%s/%s/aws4_request\n%s", amz_date, date8,
                                 region, service, creq_hash)) < 0) {
        rc = s3d_fail(rc, "SigV4: string to sign over its limit");
        goto out;
    }
    if ((rc = signing_key(secret, date8, region, service, key)) < 0 ||
        (rc = hmac256(key, 32, sts.data, sts.len, mac)) < 0)
        goto out;
    to_hex(mac, 32, sig);
    if (trace != NULL) {
        s3d_dynbuf_reset(&trace->canonical_request);
        s3d_dynbuf_reset(&trace->string_to_sign);
        if ((rc = s3d_dynbuf_append(&trace->canonical_request, creq->data, creq->len)) < 0 ||
            (rc = s3d_dynbuf_append(&trace->string_to_sign, sts.data, sts.len)) < 0) {
            rc = s3d_fail(rc, "SigV4: trace buffer too small");
            goto out;
        }
        memcpy(trace->signature, sig, 65);
    }
out:
    memset(key, 0, sizeof(key));
    s3d_dynbuf_free(&sts);
    return rc;
}

int s3d_sigv4_sign(const struct s3d_sigv4_request *req, const struct s3d_sigv4_creds *creds,
                   struct s3d_dynbuf *headers_out, struct s3d_sigv4_trace *trace)
{
    struct canon_hdr *hdrs = NULL;
    struct s3d_dynbuf creq, signed_names;
    const char *payload;
    const char *token;
    char amz_date[17], sig[65];
    size_t nh = 0, i, cap;
    int rc;

    s3d_dynbuf_init(&creq, SIGV4_MAX_TEXT);
    s3d_dynbuf_init(&signed_names, SIGV4_MAX_TEXT);
    if ((rc = check_common(req, creds)) < 0)
        goto out;
    if (req->n_headers > 0 && req->headers == NULL) {
        rc = s3d_fail(S3D_EINVAL, "SigV4: n_headers > 0 with NULL headers");
        goto out;
    }
    payload = req->payload_hash ? req->payload_hash : S3D_UNSIGNED_PAYLOAD;
    if (!valid_payload_hash(payload)) {
        rc = s3d_fail(S3D_EINVAL,
                      "SigV4: payload hash \"%.80s\" is neither 64 lower-case hex "
                      "digits nor UNSIGNED-PAYLOAD",
                      payload);
        goto out;
    }
    token = creds->session_token && creds->session_token[0] ? creds->session_token : NULL;
    if ((rc = s3d_sigv4_amz_date(req->now, amz_date)) < 0)
        goto out;

    cap = req->n_headers + 4;
    if ((hdrs = s3d_calloc(cap, sizeof(*hdrs))) == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "out of memory signing a request");
        goto out;
    }
    for (i = 0; i < req->n_headers; i++) {
        if (req->headers[i].name == NULL || req->headers[i].value == NULL) {
            rc = s3d_fail(S3D_EINVAL, "SigV4: header %zu has a NULL name or value", i);
            goto out;
        }
        rc = canon_header(req->headers[i].name, req->headers[i].value, &hdrs[nh++]);
        if (rc < 0)
            goto out;
        if (reserved_header(hdrs[nh - 1].name)) {
            rc = s3d_fail(S3D_EINVAL, "SigV4: header \"%s\" is added by the signer",
                          req->headers[i].name);
            goto out;
        }
    }
    if ((rc = canon_header("host", req->host, &hdrs[nh++])) < 0 ||
        (rc = canon_header("x-amz-content-sha256", payload, &hdrs[nh++])) < 0 ||
        (rc = canon_header("x-amz-date", amz_date, &hdrs[nh++])) < 0 ||
        (token && (rc = canon_header("x-amz-security-token", token, &hdrs[nh++])) < 0))
        goto out;
    qsort(hdrs, nh, sizeof(*hdrs), cmp_hdr);
    for (i = 1; i < nh; i++) {
        if (strcmp(hdrs[i].name, hdrs[i - 1].name) == 0) {
            rc = s3d_fail(S3D_EINVAL, "SigV4: header \"%s\" given twice", hdrs[i].name);
            goto out;
        }
    }

    /* Canonical request: method, path, query, headers, blank, signed header names, payload. */
    if ((rc = s3d_dynbuf_appendf(&creq, "%s\n%s\n", req->method, req->canonical_path)) < 0)
        goto toobig;
    if ((rc = s3d_sigv4_canonical_query(req->query, req->n_query, &creq)) < 0)
        goto out;
    if ((rc = s3d_dynbuf_append(&creq, "\n", 1)) < 0)
        goto toobig;
    for (i = 0; i < nh; i++) {
        if ((rc = s3d_dynbuf_appendf(&creq, "%s:%s\n", hdrs[i].name, hdrs[i].value)) < 0 ||
            (rc = s3d_dynbuf_appendf(&signed_names, "%s%s", i ? ";" : "", hdrs[i].name)) < 0)
            goto toobig;
    }
    if ((rc = s3d_dynbuf_appendf(&creq, "\n%s\n%s", signed_names.data, payload)) < 0)
        goto toobig;
    if ((rc = sign_canonical(&creq, amz_date, req->region, SERVICE(req), creds->secret_access_key,
                             trace, sig)) < 0)
        goto out;

    if ((rc = s3d_dynbuf_appendf(headers_out,
                                 "Authorization: " ALGO " Credential=%s/%.8s/%s/%s/aws4_request, "
                                 "SignedHeaders=%s, Signature=%s\n"
                                 "x-amz-content-sha256: %s\nx-amz-date: %s\n",
                                 creds->access_key_id, amz_date, req->region, SERVICE(req),
                                 signed_names.data, sig, payload, amz_date)) < 0 ||
        (token &&
         (rc = s3d_dynbuf_appendf(headers_out, "x-amz-security-token: %s\n", token)) < 0)) {
        rc = s3d_fail(rc, "SigV4: header buffer over its limit of %zu bytes", headers_out->max);
        goto out;
    }
    goto out;
toobig:
    rc = s3d_fail(rc, "SigV4: canonical request over its limit of %d bytes", SIGV4_MAX_TEXT);
out:
    if (hdrs != NULL) {
        for (i = 0; i < cap; i++) {
            free(hdrs[i].name);
            free(hdrs[i].value);
        }
        free(hdrs);
    }
    s3d_dynbuf_free(&creq);
    s3d_dynbuf_free(&signed_names);
    return rc;
}

int s3d_sigv4_presign(const struct s3d_sigv4_request *req, const struct s3d_sigv4_creds *creds,
                      uint32_t expires_s, const char *url_base, struct s3d_dynbuf *url_out,
                      struct s3d_sigv4_trace *trace)
{
    struct s3d_kv *params = NULL;
    struct s3d_dynbuf creq, query, credential;
    struct canon_hdr host = {NULL, NULL};
    const char *token;
    char amz_date[17], expires[16], sig[65];
    size_t n = 0, i;
    int rc;

    s3d_dynbuf_init(&creq, SIGV4_MAX_TEXT);
    s3d_dynbuf_init(&query, SIGV4_MAX_TEXT);
    s3d_dynbuf_init(&credential, SIGV4_MAX_TEXT);
    if ((rc = check_common(req, creds)) < 0)
        goto out;
    if (url_base == NULL) {
        rc = s3d_fail(S3D_EINVAL, "SigV4 presign: NULL url_base");
        goto out;
    }
    if (expires_s < 1 || expires_s > PRESIGN_MAX_S) {
        rc = s3d_fail(S3D_EINVAL, "presigned URL lifetime %u s is outside 1..%d", expires_s,
                      PRESIGN_MAX_S);
        goto out;
    }
    token = creds->session_token && creds->session_token[0] ? creds->session_token : NULL;
    if ((rc = s3d_sigv4_amz_date(req->now, amz_date)) < 0)
        goto out;
    snprintf(expires, sizeof(expires), "%u", expires_s);
    if ((rc = s3d_dynbuf_appendf(&credential, "%s/%.8s/%s/%s/aws4_request", creds->access_key_id,
                                 amz_date, req->region, SERVICE(req))) < 0)
        goto toobig;
    if ((params = s3d_calloc(req->n_query + 6, sizeof(*params))) == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "out of memory presigning a URL");
        goto out;
    }
    for (i = 0; i < req->n_query; i++)
        params[n++] = req->query[i];
    params[n++] = (struct s3d_kv){"X-Amz-Algorithm", ALGO};
    params[n++] = (struct s3d_kv){"X-Amz-Credential", credential.data};
    params[n++] = (struct s3d_kv){"X-Amz-Date", amz_date};
    params[n++] = (struct s3d_kv){"X-Amz-Expires", expires};
    params[n++] = (struct s3d_kv){"X-Amz-SignedHeaders", "host"};
    if (token)
        params[n++] = (struct s3d_kv){"X-Amz-Security-Token", token};
    if ((rc = s3d_sigv4_canonical_query(params, n, &query)) < 0)
        goto out;
    if ((rc = canon_header("host", req->host, &host)) < 0)
        goto out;
    if ((rc = s3d_dynbuf_appendf(&creq, "%s\n%s\n%s\nhost:%s\n\nhost\n" S3D_UNSIGNED_PAYLOAD,
                                 req->method, req->canonical_path, query.data, host.value)) < 0)
        goto toobig;
    if ((rc = sign_canonical(&creq, amz_date, req->region, SERVICE(req), creds->secret_access_key,
                             trace, sig)) < 0)
        goto out;
    if ((rc = s3d_dynbuf_appendf(url_out, "%s?%s&X-Amz-Signature=%s", url_base, query.data, sig)) <
        0) {
        rc = s3d_fail(rc, "presigned URL over its limit of %zu bytes", url_out->max);
        goto out;
    }
    goto out;
toobig:
    rc = s3d_fail(rc, "SigV4 presign: text over its limit of %d bytes", SIGV4_MAX_TEXT);
out:
    free(host.name);
    free(host.value);
    free(params);
    s3d_dynbuf_free(&creq);
    s3d_dynbuf_free(&query);
    s3d_dynbuf_free(&credential);
    return rc;
}

int s3d_presign_url(const struct s3d_config *cfg, const char *method, const char *bucket,
                    const char *key, uint32_t expires_s, time_t now, struct s3d_dynbuf *url_out)
{
    struct s3d_dynbuf base, host, path;
    struct s3d_sigv4_request req;
    struct s3d_sigv4_creds creds;
    int rc;
    s3d_dynbuf_init(&base, SIGV4_MAX_TEXT);
    s3d_dynbuf_init(&host, SIGV4_MAX_TEXT);
    s3d_dynbuf_init(&path, SIGV4_MAX_TEXT);
    if (cfg == NULL || method == NULL || bucket == NULL || key == NULL) {
        rc = s3d_fail(S3D_EINVAL, "presign: NULL argument");
        goto out;
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "PUT") != 0 && strcmp(method, "HEAD") != 0 &&
        strcmp(method, "DELETE") != 0) {
        rc = s3d_fail(S3D_EINVAL, "presign: method \"%.20s\" is not GET, PUT, HEAD or DELETE",
                      method);
        goto out;
    }
    if (cfg->anonymous || cfg->access_key_id == NULL || cfg->secret_access_key == NULL) {
        rc = s3d_fail(S3D_ENOCREDS, "presign s3://%s/%s: no credentials (%s)", bucket, key,
                      cfg->anonymous ? "the client is anonymous" : "none found");
        goto out;
    }
    if ((rc = s3d_bucket_name_check(bucket, strlen(bucket))) < 0)
        goto out;
    if ((rc = s3d_config_build_url(cfg, bucket, key, NULL, &base, &host, &path)) < 0)
        goto out;
    memset(&req, 0, sizeof(req));
    req.method = method;
    req.host = host.data;
    req.canonical_path = path.data;
    req.region = cfg->region;
    req.now = now;
    creds.access_key_id = cfg->access_key_id;
    creds.secret_access_key = cfg->secret_access_key;
    creds.session_token = cfg->session_token;
    rc = s3d_sigv4_presign(&req, &creds, expires_s, base.data, url_out, NULL);
out:
    s3d_dynbuf_free(&base);
    s3d_dynbuf_free(&host);
    s3d_dynbuf_free(&path);
    return rc;
}
