/* http.h - one HTTP request over a libcurl easy handle: the body fed from memory through an
 * iovec, the response body written straight into the caller's memory (bounds-checked) or into
 * a capped buffer, response headers parsed with caps, and the translation of CURLcode and HTTP
 * status into S3D_E* codes.
 *
 * This layer knows nothing of S3 signing or XML (s3ctx.h builds on it). A request is owned by
 * one thread at a time; nothing here locks. */
#ifndef S3D_S3_HTTP_H
#define S3D_S3_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include <curl/curl.h>

#include "common/dynbuf.h"
#include "common/compiler.h"
#include "s3/sigv4.h"

/* Caps on what a server may send us beyond object bytes; a buffered 2xx body (an S3 XML
 * document) is capped at S3D_XML_MAX_BODY (s3/xml.h), the one limit the XML reader enforces. */
#define S3D_HTTP_MAX_HEADER_BYTES (64u * 1024u) /* all response header lines together */
#define S3D_HTTP_MAX_ERROR_BODY   (64u * 1024u) /* error bodies: the rest is dropped */

/* What the response said, parsed from its headers. Strings are NUL-terminated, "" if absent;
 * a longer value than its field is cut. */
struct s3d_http_resp {
    long status; /* of the last response; 0 when none came */
    int has_content_length;
    uint64_t content_length;
    char etag[80];
    char request_id[128];
    char content_type[128];
    char last_modified[64];
    char content_range[96];
    char checksum_crc32c[16];
    char checksum_type[16];  /* x-amz-checksum-type: COMPOSITE or FULL_OBJECT */
    char meta_crc32c[16];    /* x-amz-meta-s3d-crc32c: the CRC-32C s3direct stored (ops.h) */
    uint32_t tagging_count;  /* x-amz-tagging-count */
    uint32_t mp_parts_count; /* x-amz-mp-parts-count (a GET or HEAD with partNumber) */
    char bucket_region[32];  /* x-amz-bucket-region (S3 sends it with 301 and 400 answers) */
    uint64_t received;       /* body bytes of a 2xx response written to dst (or dst_fd) */
    uint32_t crc;            /* with sum_body: CRC-32C of those bytes, chained onto crc_seed */
    int write_errno;         /* a pwrite to dst_fd failed with this errno: the transfer stopped */
    size_t header_bytes;
    int overflow;           /* a 2xx body longer than dst_cap (protocol error) */
    int header_toobig;      /* headers over S3D_HTTP_MAX_HEADER_BYTES */
    int body_toobig;        /* a 2xx body over body.max without dst */
    struct s3d_dynbuf body; /* 2xx body when dst is NULL (capped at body_max), or the
                               error body (capped at S3D_HTTP_MAX_ERROR_BODY, the rest
                               dropped) */
};

/* Settings shared by every request of a client. */
struct s3d_http_conf {
    CURLSH *share; /* DNS + TLS session cache; may be NULL */
    long connect_timeout_ms;
    long low_speed_limit; /* bytes/s; 0 = no stall detection */
    long low_speed_time_s;
    long buffer_size; /* CURLOPT_BUFFERSIZE; 0 = curl's default */
    int no_verify_ssl;
    const char *ca_bundle; /* NULL = system CAs */
    int verbose;           /* CURLOPT_VERBOSE (S3D_LOG=debug) */
};

/* The open sockets of one connection cache (a multi handle's), kept by the callbacks that
 * s3d_http_track_sockets sets, so the set is complete however connections are reused; read
 * by s3d_sockset_unacked. Used by one thread at a time (the multi handle's). */
struct s3d_sockset {
    int *fds; /* in no order */
    size_t n, cap;
};

/* A request body read from a file instead of memory (s3d_http_req.fdbody): the bytes
 * [off, off + body_len) of fd, read with pread as curl asks for them, never held in a buffer.
 * check_crc: their CRC-32C must be crc, checked before the last bytes are handed to curl, so
 * that a file changed since crc was computed ends the request (fd_err) instead of completing
 * it with other bytes. A read that fails or ends early (a truncated file) ends it too. */
struct s3d_http_fdbody {
    int fd;
    uint64_t off;
    int check_crc;
    uint32_t crc;
    /* Non-NULL: the range is sent as aws-chunked in signed chunks (sigv4.h) read, hashed and
     * signed in one pass (http_chunked.c); its CRC-32C is then known only once sent (fd_crc).
     * check_crc must be 0. Must stay valid until the request is finished. */
    const struct s3d_http_chunked *chunked;
};

/* The data bytes of each signed chunk but the last ones (the final short one, the empty one):
 * with its header (90 bytes) and trailing CRLF a chunk fits curl's upload buffer, set to
 * S3D_HTTP_CHUNK_BUF for such a body, so that it is read from the file straight into it.
 * 256 KiB rather than curl's default 64 KiB: a quarter of the preads, sends and callbacks;
 * measured on a 1 GiB cp over loopback: -0.2 CPU-s and -10 % wall against 64 KiB chunks,
 * which gained nothing over two passes (docs/internals/performance.md, issue 34). */
#define S3D_HTTP_CHUNK_BUF (256u << 10)
#define S3D_HTTP_CHUNK     (S3D_HTTP_CHUNK_BUF - 96u)

/* The signing of one attempt's chunks: the request's signing key and scope, and its
 * signature (the seed of the chain). Test hooks: corrupt (S3D_TEST_CHUNK_CORRUPT) flips one
 * byte of the first chunk after it was hashed, to show that the server checks; stage
 * (S3D_TEST_CHUNK_STAGE) stages every chunk, as when curl offers less room than one. */
struct s3d_http_chunked {
    struct s3d_sigv4_chunk_key key;
    char seed[65];
    int corrupt;
    int stage;
};

/* The Content-Length of n data bytes sent as aws-chunked in S3D_HTTP_CHUNK chunks. */
uint64_t s3d_http_chunked_len(uint64_t n);

/* Fills c for a request signed with the header lines sig_headers (s3d_sigv4_sign's output,
 * which holds the seed signature) with secret for region at now. 0, or S3D_EINVAL / S3D_ENOMEM
 * recorded. */
S3D_NODISCARD int s3d_http_chunked_seed(struct s3d_http_chunked *c, const char *sig_headers,
                                        const char *secret, const char *region, time_t now);

/* Why a file body ended its request (s3d_http_req.fd_err). */
enum { S3D_HTTP_FD_OK = 0, S3D_HTTP_FD_READ, S3D_HTTP_FD_SHORT, S3D_HTTP_FD_CHANGED };

struct s3d_http_req {
    /* Set by the caller. */
    const char *method;         /* "GET", "PUT", "POST", "HEAD", "DELETE" */
    const char *url;            /* NUL-terminated, already percent-encoded */
    struct curl_slist *headers; /* owned by the caller; must contain "Expect:" for bodies
                                   (s3ctx adds it) and stay valid until finished */
    const struct iovec *iov;    /* request body, NULL/0 for none; must stay valid until the
                                   request is finished */
    int iovcnt;
    /* Non-NULL: the body is read from this file range instead of iov (must stay valid until
     * the request is finished). */
    const struct s3d_http_fdbody *fdbody;
    uint64_t body_len; /* sum of iov lengths */
    void *dst;         /* receives a 2xx body; NULL = into resp.body */
    uint64_t dst_cap;  /* bytes writable at dst */
    /* Or, with dst NULL and to_fd set: the 2xx body is written with pwrite into dst_fd at file
     * offset dst_off as it arrives (no buffer, no mapping), bounded by dst_cap as dst is. */
    int to_fd;
    int dst_fd;
    uint64_t dst_off;
    int sum_body;      /* resp.crc sums the 2xx body as it arrives (dst or dst_fd) */
    uint32_t crc_seed; /* the CRC-32C that resp.crc chains onto (what came before) */
    size_t body_max;   /* cap of resp.body for a 2xx body without dst;
                          0 = S3D_XML_MAX_BODY */
    long timeout_ms;   /* whole request; 0 = none */
    /* > 0: a request the server answers only when done with that many bytes, no byte
     * flowing meanwhile (UploadPartCopy of a 5 GiB part: minutes): no stall detection (it
     * would end, and resend, a copy in progress) but a limit on the whole request, the conf's
     * stall window plus quiet_len at S3D_HTTP_QUIET_RATE, or timeout_ms when that is less. */
    uint64_t quiet_len;
    /* Internal state. */
    int iov_idx;
    size_t iov_off;
    uint64_t sent;
    /* fdbody: the CRC-32C of the bytes read from the body's start; the S3D_HTTP_FD_* that
     * ended the request, and with S3D_HTTP_FD_READ its errno. */
    uint32_t fd_crc;
    int fd_err;
    int fd_errno;
    /* fdbody->chunked: the previous chunk's signature, whether the final chunk went, and a
     * chunk staged here when curl offers less room than a whole one (allocated then, freed
     * by s3d_http_req_cleanup): bytes [stage_pos, stage_len) of it are still to go. */
    char chunk_prev[65];
    int chunk_final;
    unsigned char *stage;
    size_t stage_pos, stage_len;
    int sock_errno; /* errno of a socket() that failed (EMFILE: no descriptor left), else 0 */
    struct s3d_sockset *socks; /* where sockets it opens are kept (s3d_http_track_sockets) */
    char errbuf[CURL_ERROR_SIZE];
    struct s3d_http_resp resp;
};

#define S3D_HTTP_QUIET_RATE (1ull << 20) /* bytes/s, the slowest copy quiet_len allows */

/* Prepares req (resets the response and the body cursor, keeps the caller's fields) and sets
 * every option on the easy handle e, which must be fresh or curl_easy_reset. Returns 0, or
 * S3D_ENOMEM / S3D_EINVAL (after s3d_fail). The caller then runs e (curl_multi or
 * curl_easy_perform). */
S3D_NODISCARD int s3d_http_setup(CURL *e, struct s3d_http_req *req,
                                 const struct s3d_http_conf *conf);

/* After s3d_http_setup: sockets e opens for req go into s (which must outlive every connection
 * of the multi handle e runs on: they are closed through it, at the latest by
 * curl_multi_cleanup). */
void s3d_http_track_sockets(CURL *e, struct s3d_http_req *req, struct s3d_sockset *s);
/* Bytes handed to the sockets of s that their peers have not acknowledged yet (SIOCOUTQ:
 * unsent plus unacknowledged), summed. */
uint64_t s3d_sockset_unacked(const struct s3d_sockset *s);
void s3d_sockset_free(struct s3d_sockset *s);

/* Frees what the response holds (its body buffer). The request itself is the caller's. */
void s3d_http_req_cleanup(struct s3d_http_req *req);

/* For http.c and http_chunked.c: n bytes of r's file body (fdbody) at data offset r->sent
 * into dst, by s3d_pread_full; 0, or -1 with fd_err / fd_errno set (a read error, or the file
 * ended first) and *got the bytes that came. */
int s3d_http_fd_pread(struct s3d_http_req *r, void *dst, size_t n, size_t *got);

/* For http.c: the read and the rewind of a chunked file body (http_chunked.c). */
size_t s3d_http_read_chunked(struct s3d_http_req *r, char *buf, size_t want);
void s3d_http_chunked_rewind(struct s3d_http_req *r);

/* The S3D_E* code for a transfer that curl finished with cc != CURLE_OK. os_errno is
 * CURLINFO_OS_ERRNO. Couldn't connect -> S3D_ECONNECT, timeouts / low speed -> S3D_ETIMEDOUT,
 * TLS -> S3D_ETLS, everything else -> S3D_ENETWORK. Pure. */
int s3d_http_err_from_curl(CURLcode cc);

/* The S3D_E* code for an HTTP error status (>= 300) with the S3 <Code> (NULL or "" when the
 * body had none). is_object: the request named a key (404 without a code -> S3D_ENOSUCHKEY;
 * otherwise S3D_ENOSUCHBUCKET for a bucket request). Pure. */
int s3d_http_err_from_status(long status, const char *s3_code, int is_object);

/* One request or response header line (n bytes, no line end) as it may be shown: the value
 * of Authorization after "Signature=" (the whole value when it has none), and the whole value
 * of X-Amz-Security-Token, x-amz-sso_bearer_token and X-aws-ec2-metadata-token become
 * "[redacted]"; other lines are copied. Writes at most cap bytes with the NUL (cut if
 * longer); returns the length written. Pure. */
size_t s3d_http_redact(const char *in, size_t n, char *out, size_t cap);

/* The proxy libcurl takes from the environment for url (it reads no proxy option from us):
 * http_proxy (lower case only) for http://, https_proxy or HTTPS_PROXY for https://, else
 * all_proxy or ALL_PROXY; none when no_proxy / NO_PROXY is "*" or lists the host or a domain
 * it is in. Copies it into out (cap bytes) and returns 1, or returns 0 when there is none.
 * env: getenv, or a table lookup in tests. Pure given env. */
int s3d_http_proxy_for(const char *url, const char *(*env)(const char *name), char *out,
                       size_t cap);

/* One line of description of a failed curl transfer for error messages: the OS error for
 * connection failures ("Connection refused"), else curl's error buffer, else
 * curl_easy_strerror. Returns a pointer into req->errbuf or a static string. */
const char *s3d_http_curl_detail(struct s3d_http_req *req, CURL *e, CURLcode cc);

#endif
