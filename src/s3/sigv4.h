/* sigv4.h - AWS Signature Version 4 for service "s3" (and "sts" for the credential chain),
 * SHA-256 helpers (internal).
 *
 * Two forms:
 *   - header form (s3d_sigv4_sign): the caller sends the request with the returned headers
 *     (Authorization, x-amz-date, x-amz-content-sha256, x-amz-security-token);
 *   - presigned query form (s3d_sigv4_presign, and s3d_presign_url which does everything for
 *     the public s3d_presign): the signature goes in the URL, only "host" is signed and the
 *     payload is UNSIGNED-PAYLOAD.
 *
 * Paths: S3 signs the path once-encoded, exactly as sent (no double encoding, no "."/".."
 * normalization): pass s3d_config_build_url's canonical_path.
 * Query: pass parameters UNENCODED; they are encoded with s3d_uri_encode(encode_slash = 1) and
 * sorted by encoded name, then encoded value. A parameter with an empty value ("uploads") is
 * rendered "uploads=" in both the canonical request and s3d_sigv4_canonical_query, which S3
 * accepts.
 *
 * Threads: every function is thread-safe. The derived signing key is cached per thread for the
 * last (secret, date, region), so repeated signing costs one HMAC chain per day per thread. */
#ifndef S3D_S3_SIGV4_H
#define S3D_S3_SIGV4_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include <time.h>

#include "common/dynbuf.h"
#include "common/compiler.h"

struct s3d_config;

#define S3D_UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"
/* The payload hash of a body sent in signed chunks (aws-chunked, s3d_sigv4_chunk_sign). */
#define S3D_STREAMING_PAYLOAD "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
/* SHA-256 of zero bytes, the payload hash of a request with no body. */
#define S3D_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* A name/value pair; both NUL-terminated, value may be "" but not NULL. */
struct s3d_kv {
    const char *name;
    const char *value;
};

struct s3d_sigv4_creds {
    const char *access_key_id;     /* required */
    const char *secret_access_key; /* required */
    const char *session_token;     /* NULL or "" = none */
};

struct s3d_sigv4_request {
    const char *method;         /* "GET", "PUT", ... */
    const char *host;           /* Host header value (s3d_config_build_url host_header) */
    const char *canonical_path; /* already percent-encoded, starts with '/' */
    const struct s3d_kv *query; /* unencoded parameters, any order; may be NULL if n 0 */
    size_t n_query;
    const struct s3d_kv *headers; /* extra headers to sign (Range, Content-Type,
                                     Content-MD5, x-amz-*...); any case, values are trimmed
                                     and inner runs of blanks folded; names must be unique and
                                     must not be host, x-amz-date, x-amz-content-sha256,
                                     x-amz-security-token or authorization (added here).
                                     May be NULL if n_headers is 0. Ignored by presign. */
    size_t n_headers;
    const char *payload_hash; /* 64 lower-case hex, or S3D_UNSIGNED_PAYLOAD;
                                 NULL = UNSIGNED-PAYLOAD. Ignored by presign. */
    const char *region;       /* e.g. "us-east-1" */
    time_t now;               /* signing time, seconds since the epoch (UTC) */
    const char *service;      /* credential scope service; NULL = "s3" ("sts" for STS) */
};

/* Optional outputs for tests and debugging (S3D_LOG=debug, sigv4_tool). Initialize the two
 * dynbufs with s3d_dynbuf_init before the call and free them after. */
struct s3d_sigv4_trace {
    struct s3d_dynbuf canonical_request;
    struct s3d_dynbuf string_to_sign;
    char signature[65];
};

/* Signs a request in the header form. Appends to headers_out (not reset first) one line per
 * header to send, each "Name: value\n" (split on '\n' for curl_slist_append):
 *   Authorization: AWS4-HMAC-SHA256 Credential=AKID/DATE/REGION/s3/aws4_request,
 *                  SignedHeaders=..., Signature=...
 *   x-amz-content-sha256: <payload hash>
 *   x-amz-date: YYYYMMDDTHHMMSSZ
 *   x-amz-security-token: <token>          (only with a session token)
 * The caller sends these plus Host (= req->host) and its own req->headers, unchanged.
 * trace may be NULL. Returns 0, S3D_EINVAL (NULL field, a reserved or duplicate header name, a
 * malformed payload hash, a time out of range), S3D_ENOCREDS (no key id or secret),
 * S3D_ETOOBIG / S3D_ENOMEM. Every failure is recorded with s3d_fail. */
S3D_NODISCARD int s3d_sigv4_sign(const struct s3d_sigv4_request *req,
                                 const struct s3d_sigv4_creds *creds,
                                 struct s3d_dynbuf *headers_out, struct s3d_sigv4_trace *trace);

/* Presigned query form. url_base is "SCHEME://HOST[:PORT]PATH" (s3d_config_build_url with no
 * query); the result appended to url_out (not reset first) is url_base + "?" + the canonical
 * query: req->query plus X-Amz-Algorithm, X-Amz-Credential, X-Amz-Date, X-Amz-Expires,
 * X-Amz-SignedHeaders=host and X-Amz-Security-Token (with a session token), sorted, then
 * "&X-Amz-Signature=...". expires_s must be 1..604800 (S3D_EINVAL otherwise). Signs only host
 * with UNSIGNED-PAYLOAD; req->headers and req->payload_hash are ignored. Errors as
 * s3d_sigv4_sign. */
S3D_NODISCARD int s3d_sigv4_presign(const struct s3d_sigv4_request *req,
                                    const struct s3d_sigv4_creds *creds, uint32_t expires_s,
                                    const char *url_base, struct s3d_dynbuf *url_out,
                                    struct s3d_sigv4_trace *trace);

/* Everything the public s3d_presign needs: builds the URL for method/bucket/key with cfg
 * (addressing, endpoint, region, credentials), signs it for expires_s seconds from now and
 * appends it to url_out. S3D_ENOCREDS when cfg has no credentials (or is anonymous),
 * S3D_EINVAL for a method other than GET/PUT/HEAD/DELETE or expires_s out of 1..604800. */
S3D_NODISCARD int s3d_presign_url(const struct s3d_config *cfg, const char *method,
                                  const char *bucket, const char *key, uint32_t expires_s,
                                  time_t now, struct s3d_dynbuf *url_out);

/* The canonical query string of params: each name and value encoded (s3d_uri_encode,
 * encode_slash 1), "name=value" joined with '&', sorted. Appended to out (not reset). The same
 * string goes in the URL (s3d_config_build_url's query) and is signed. n 0 appends nothing. */
S3D_NODISCARD int s3d_sigv4_canonical_query(const struct s3d_kv *params, size_t n,
                                            struct s3d_dynbuf *out);

/* "YYYYMMDDTHHMMSSZ" for t (UTC) into out. Returns 0, or S3D_EINVAL when t is not
 * representable (before year 0 / after 9999). */
S3D_NODISCARD int s3d_sigv4_amz_date(time_t t, char out[17]);

/* ---- signed chunks (STREAMING-AWS4-HMAC-SHA256-PAYLOAD) --------------------------------
 * A body sent as aws-chunked: the request is signed with S3D_STREAMING_PAYLOAD as its payload
 * hash (its signature is the seed), then each chunk "hex(size);chunk-signature=SIG\r\n" data
 * "\r\n", the last one empty, where SIG is the HMAC with the request's signing key of
 *   "AWS4-HMAC-SHA256-PAYLOAD\n" amz_date "\n" scope "\n" previous SIG "\n"
 *   hex SHA-256("") "\n" hex SHA-256(data)
 * the previous SIG being the seed for the first chunk. */
struct s3d_sigv4_chunk_key {
    unsigned char key[32]; /* the request's signing key */
    char amz_date[17];
    char scope[96]; /* DATE/REGION/SERVICE/aws4_request */
};

/* The signing key and scope of a request signed at now for region (service "s3"). Returns 0,
 * S3D_EINVAL (a secret too long, a time out of range) or S3D_ENOMEM, recorded. */
S3D_NODISCARD int s3d_sigv4_chunk_key(const char *secret, const char *region, time_t now,
                                      struct s3d_sigv4_chunk_key *out);

/* The signature of a chunk whose data hashes (hex SHA-256) to data_sha, after the signature
 * prev (the seed, or the previous chunk's), into sig. Returns 0 or S3D_ENOMEM, recorded. */
S3D_NODISCARD int s3d_sigv4_chunk_sign(const struct s3d_sigv4_chunk_key *k, const char prev[65],
                                       const char data_sha[65], char sig[65]);

/* ---- SHA-256 (OpenSSL EVP) --------------------------------------------------------------- */

/* Lower-case hex SHA-256 of p[0..n) into out (NUL-terminated). Returns 0 or S3D_ENOMEM. */
S3D_NODISCARD int s3d_sha256_hex(const void *p, size_t n, char out[65]);

/* Hex SHA-256 of the concatenation of iov[0..iovcnt). Returns 0 or S3D_ENOMEM. */
S3D_NODISCARD int s3d_sha256_iov_hex(const struct iovec *iov, int iovcnt, char out[65]);

/* Incremental form, for bodies that arrive in pieces. init, update any number of times, then
 * final (which also frees) or free (to abandon). One context per thread at a time. */
struct s3d_sha256 {
    void *ctx; /* EVP_MD_CTX *; NULL when not initialized */
};
S3D_NODISCARD int s3d_sha256_init(struct s3d_sha256 *h);
S3D_NODISCARD int s3d_sha256_update(struct s3d_sha256 *h, const void *p, size_t n);
S3D_NODISCARD int s3d_sha256_final(struct s3d_sha256 *h, char out[65]);
void s3d_sha256_free(struct s3d_sha256 *h); /* NULL or uninitialized ok */

#endif
