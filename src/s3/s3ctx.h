/* s3ctx.h - the S3 context of a client: the resolved configuration, the libcurl connection
 * cache, and one signed S3 request (an "op") built, run, retried and judged.
 *
 * Connections. libcurl keeps connections in the connection cache of a multi handle. The
 * context keeps a pool of idle multi handles: a thread that runs requests takes one
 * (s3d_s3ctx_multi_acquire), adds its easy handles to it, and gives it back with its
 * kept-alive connections inside, for the next caller on any thread. A multi handle is used
 * by one thread at a time, so the connection cache itself is never shared between concurrent
 * threads (libcurl documents sharing CURL_LOCK_DATA_CONNECT between concurrent threads as
 * unsafe in the 7.8x series we build against). DNS results and TLS sessions are shared by
 * every handle through one CURLSH with a mutex per data kind, so a new connection skips the
 * resolve and resumes its TLS session. When the endpoint's name has several addresses, each
 * request is given one of them (s3/addrs.h) and connects there with CURLOPT_CONNECT_TO; a
 * connection is then reused only by requests given the same address.
 *
 * Threads: s3d_s3ctx_* functions are thread-safe; an op belongs to one thread. */
#ifndef S3D_S3_S3CTX_H
#define S3D_S3_S3CTX_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include <curl/curl.h>

#include "common/dynbuf.h"
#include "s3/addrs.h"
#include "s3/config.h"
#include "s3/creds.h"
#include "s3/http.h"
#include "s3/retry.h"
#include "s3/sigv4.h"
#include "s3direct/client.h"
#include "common/compiler.h"

#define S3D_DEFAULT_MAX_ATTEMPTS       5u
#define S3D_DEFAULT_CONNECT_TIMEOUT_MS 10000u
#define S3D_DEFAULT_LOW_SPEED_TIME_S   30u
#define S3D_DEFAULT_LOW_SPEED_LIMIT    1024u
/* CURLOPT_BUFFERSIZE: the write callback's chunk. Measured in docs/internals/engine.md; larger
 * buffers mean fewer callbacks per part. */
#define S3D_DEFAULT_CURL_BUFFER (256L * 1024L)

/* Buckets S3 said are in another region than the client's (x-amz-bucket-region, or <Region>,
 * on a 301 PermanentRedirect or a 400 AuthorizationHeaderMalformed), as botocore's region
 * redirector keeps them: requests to such a bucket are signed for its region and, on the
 * default AWS endpoint, sent to that region's endpoint. A few entries; the oldest goes. */
#define S3D_REGION_MAP_N 16
struct s3d_region_map {
    pthread_mutex_t mu;
    unsigned n, next;
    struct {
        char bucket[64];
        char region[32];
    } e[S3D_REGION_MAP_N];
};

struct s3d_s3ctx {
    struct s3d_config cfg;       /* read-only after init */
    struct s3d_http_conf http;   /* read-only after init */
    struct s3d_credcache *creds; /* thread-safe itself; NULL for an anonymous client */
    uint32_t max_attempts;
    uint32_t deadline_ms;      /* per request, retries included; 0 = none */
    uint32_t retry_base_ms;    /* S3D_RETRY_BASE_MS, or env S3D_TEST_RETRY_BASE_MS (tests) */
    long max_host_connections; /* CURLMOPT_MAX_HOST_CONNECTIONS of each multi */
    char proxy[512];           /* the proxy libcurl uses for the endpoint (environment), or "" */
    CURLSH *share;
    pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];
    /* The endpoint's addresses: which one each request connects to (s3/addrs.h). */
    struct s3d_resolver resolver;
    /* Idle multi handles (with their connections), guarded by pool_lock. */
    pthread_mutex_t pool_lock;
    struct s3d_multi **idle;
    size_t n_idle, cap_idle;
    size_t n_out; /* multis acquired and not yet released: requests in flight (pool_lock) */
    struct s3d_region_map regions;
    /* The client's stop flag (s3d_client_set_cancel), or NULL: s3d_s3_op_run checks it while
     * it waits for an answer and between attempts. */
    const atomic_int *_Atomic stop;
    /* payload_signing AUTO over plain http: whether the server refuses a body whose
     * x-amz-checksum-crc32c is wrong (S3D_BODY_CRC_*), learnt once per client by
     * s3d_op_probe_body_crc. Bodies are hashed into the signature unless it is CHECKED. */
    atomic_int body_crc;
};

enum {
    S3D_BODY_CRC_UNKNOWN = 0,
    S3D_BODY_CRC_PROBING = 1, /* one upload is asking now; the others sign meanwhile */
    S3D_BODY_CRC_CHECKED = 2, /* a wrong CRC-32C was refused: bodies that carry one go unsigned */
    S3D_BODY_CRC_IGNORED = 3, /* a wrong CRC-32C was stored: every body is signed */
};

/* Resolves the configuration (s3d_config_resolve) and creates the share. max_conns is the
 * client's concurrency (the client, which resolves it from the options and the configuration,
 * passes 0 and sets max_host_connections afterwards). Returns 0 or an S3D_E* code (recorded);
 * on failure *ctx needs no cleanup. */
S3D_NODISCARD int s3d_s3ctx_init(struct s3d_s3ctx *ctx, const struct s3d_client_options *opts,
                                 uint32_t max_conns);
/* Closes every idle connection and frees the context. No multi may be out: a request still
 * running on another thread (s3d_client_free under a call) fails S3D_ASSERT in debug and
 * sanitizer builds. NULL ok. */
void s3d_s3ctx_cleanup(struct s3d_s3ctx *ctx);

/* A multi handle and the sockets of its connections. Every socket a connection of m opens
 * goes through callbacks that s3d_multi_add sets on each easy handle, so the set is complete
 * however the connections are reused. It exists for s3d_multi_unacked: an upload counts only
 * the bytes its peer has acknowledged, not those still queued in the kernel's send buffer (up
 * to 4 MiB per connection, filled at memory speed), which would make a path look many times
 * faster than it is while the buffers of new connections fill. */
struct s3d_multi {
    CURLM *m;
    struct s3d_sockset socks; /* the open sockets of m's connections */
};

/* An idle multi handle (with its connections) or a new one; NULL only on out of memory
 * (recorded as S3D_ENOMEM). The caller owns it until s3d_s3ctx_multi_release, which it must
 * call with no easy handle left attached. */
struct s3d_multi *s3d_s3ctx_multi_acquire(struct s3d_s3ctx *ctx);
void s3d_s3ctx_multi_release(struct s3d_s3ctx *ctx, struct s3d_multi *mm);
/* curl_multi_add_handle of e (set up for req by s3d_http_setup) to mm->m, with the sockets it
 * opens kept in mm's set (s3d_http_track_sockets). */
CURLMcode s3d_multi_add(struct s3d_multi *mm, CURL *e, struct s3d_http_req *req);
/* Bytes handed to the sockets of mm's connections that their peers have not acknowledged yet
 * (SIOCOUTQ: unsent plus unacknowledged), summed over the set. */
uint64_t s3d_multi_unacked(const struct s3d_multi *mm);

/* The retry policy of one request starting now (deadline from the client's deadline_ms). */
void s3d_s3ctx_retry_policy(const struct s3d_s3ctx *ctx, struct s3d_retry_policy *out);

/* ---- one S3 request ----------------------------------------------------------------------- */

#define S3D_OP_MAX_QUERY   8
#define S3D_OP_MAX_HEADERS 8

struct s3d_s3_op {
    /* Set by the caller (zero the struct first; strings must outlive the op). */
    const char *operation; /* "GetObject", for messages */
    const char *method;
    const char *bucket;                    /* NULL: service-level */
    const char *key;                       /* NULL or "": bucket-level */
    struct s3d_kv query[S3D_OP_MAX_QUERY]; /* unencoded parameters */
    size_t n_query;
    struct s3d_kv headers[S3D_OP_MAX_HEADERS]; /* signed and sent (Range, Content-Type,
                                                 Content-MD5, x-amz-checksum-crc32c...) */
    size_t n_headers;
    const struct iovec *iov; /* request body; NULL/0 for none */
    int iovcnt;
    /* from_file: the body is body_file's range of a file instead (http.h, s3d_http_fdbody);
     * payload_hash must then be set by the caller (s3d_s3ctx_signs_body says which). */
    int from_file;
    struct s3d_http_fdbody body_file;
    /* With from_file: the body goes as aws-chunked in signed chunks (payload_hash
     * S3D_STREAMING_PAYLOAD, Content-Encoding and x-amz-decoded-content-length added by the
     * caller); each prepare seeds chunk from its signature and points body_file at it. */
    int chunked_body;
    struct s3d_http_chunked chunk;
    char decoded_len[24]; /* x-amz-decoded-content-length's value */
    uint64_t body_len;
    void *dst; /* 2xx body destination; NULL = op->req.resp.body */
    uint64_t dst_cap;
    int exact_length; /* with dst or to_fd: the 2xx body must be exactly dst_cap bytes */
    /* Or, dst NULL and to_fd set: the 2xx body goes to the file dst_fd at offset dst_off by
     * pwrite (http.h); a failed write is an error that is not retried. */
    int to_fd;
    int dst_fd;
    uint64_t dst_off;
    int sum_body;      /* req.resp.crc: CRC-32C of the 2xx body received, chained onto crc_seed */
    uint32_t crc_seed; /* set again before each attempt: the sum of what earlier ones kept */
    /* Results, valid after s3d_s3_op_result. */
    struct s3d_http_req req; /* req.resp: status, headers, body */
    char s3_code[64];        /* <Code> of an error body, "" if none */
    char payload_hash[65];   /* computed once, reused by retries */
    uint32_t attempts;       /* requests sent by s3d_s3_op_run */
    int expired_retried;     /* an ExpiredToken answer already caused one refresh + retry */
    int region_retried;      /* a wrong-region answer already caused one resend */
    int ignore_stop;         /* runs even after the client's stop flag (an abort's cleanup) */
    char region[32];         /* the region the last attempt was signed for */
    /* Internal. */
    struct s3d_dynbuf url, host, path, query_buf, sig;
    struct curl_slist *slist;
    char range_buf[64];
    struct s3d_creds *signed_with; /* the snapshot of the last signature (a reference) */
    int build_rc; /* the first failure of s3d_s3_op_add_header / _add_query / _set_range */
    /* The address this attempt connects to (s3/addrs.h), until judged or cleaned up. */
    struct s3d_resolver *lease_from;
    struct s3d_addr_lease lease;
    struct curl_slist connect_to; /* CURLOPT_CONNECT_TO: one node over connect_to_line */
    char connect_to_line[320];
};

/* Builds the URL, signs the request (now), gives it an address of the endpoint (when it has
 * several), and sets up the easy handle e (fresh or reset). May be called again on the same
 * op for a retry (it re-signs, and may pick another address). Returns 0 or an S3D_E* code
 * (recorded). */
S3D_NODISCARD int s3d_s3_op_prepare(struct s3d_s3ctx *ctx, struct s3d_s3_op *op, CURL *e);

/* Judges a finished transfer (and gives its address back, noting whether it could be
 * connected to): returns 0 for a 2xx response that fits what was asked, or the
 * S3D_E* code of the failure after recording it once with s3d_fail_s3 (operation, bucket,
 * key, HTTP status, S3 code and message, request id). cc is curl's result for e. */
S3D_NODISCARD int s3d_s3_op_result(struct s3d_s3ctx *ctx, struct s3d_s3_op *op, CURL *e,
                                   CURLcode cc);

/* 1 when the failure just judged by s3d_s3_op_result (returned as err) may be retried. */
int s3d_s3_op_transient(const struct s3d_s3_op *op, int err);

/* 1 when the failure just judged (err) says the credentials expired (ExpiredToken) and this
 * op has not yet retried for that: the cache is told to refresh, and the caller resends at
 * once (the resend is re-signed with the fresh credentials). Called at most once per op. */
S3D_NODISCARD int s3d_s3_op_expired_retry(struct s3d_s3ctx *ctx, struct s3d_s3_op *op, int err);

/* 1 when the failure just judged says the bucket is in another region than the one this
 * attempt was signed for (301 PermanentRedirect or 400 with x-amz-bucket-region or
 * <Region>) and this op has not yet resent for that: the region is remembered for the bucket
 * (logged at info) and the caller resends at once. Called at most once per op. */
S3D_NODISCARD int s3d_s3_op_region_retry(struct s3d_s3ctx *ctx, struct s3d_s3_op *op, int err);

/* 1 when s3d_s3_op_prepare signs a non-empty body with its SHA-256 (0: UNSIGNED-PAYLOAD).
 * with_crc: the request carries x-amz-checksum-crc32c. For a caller that hashes a body
 * itself (from_file) into op->payload_hash before the first prepare. */
int s3d_s3ctx_signs_body(struct s3d_s3ctx *ctx, int with_crc);
/* 1 when a part from a file goes as aws-chunked in signed chunks, read once as it is sent
 * (s3d_s3_op.chunked_body): AUTO signing against a server shown not to check the CRC-32C. */
int s3d_s3ctx_streams_body(struct s3d_s3ctx *ctx);

/* Runs op to completion on the calling thread with retries (new signature per attempt,
 * backoff with full jitter, the client's attempts and deadline). Returns 0 or the S3D_E*
 * code of the last failure (recorded). */
S3D_NODISCARD int s3d_s3_op_run(struct s3d_s3ctx *ctx, struct s3d_s3_op *op);

/* Frees what the op holds. The op may then be reused after zeroing. NULL ok. */
void s3d_s3_op_cleanup(struct s3d_s3_op *op);

/* Building a request: these return 0, or S3D_EINVAL (recorded) when the op's fixed array is
 * full, a bug in the caller. The first failure is also kept in the op (build_rc) and returned
 * by s3d_s3_op_prepare, so a request is never sent without a part it was given, and a caller
 * adding its few parts need not check each one (curl's dynbuf keeps its error the same way).
 * Names and values must outlive the op. */
/* Adds a header to sign and send. */
int s3d_s3_op_add_header(struct s3d_s3_op *op, const char *name, const char *value);
/* Adds a query parameter (unencoded). */
int s3d_s3_op_add_query(struct s3d_s3_op *op, const char *name, const char *value);
/* Sets the Range header to bytes=first-last (into op's own storage). */
int s3d_s3_op_set_range(struct s3d_s3_op *op, uint64_t first, uint64_t last);

#endif
