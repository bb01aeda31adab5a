/* retry.h - the retry policy: which failures are transient, and how long to wait before the
 * next attempt (exponential backoff with full jitter, bounded by a cap, the attempt budget and
 * a deadline). Pure functions, no I/O, no clock: callers pass the time in, so the decisions
 * are table-testable without a server. Thread-safe (no state). */
#ifndef S3D_S3_RETRY_H
#define S3D_S3_RETRY_H

#include <stdint.h>

struct s3d_retry_policy {
    uint32_t max_attempts;       /* tries per request, the first included; >= 1 */
    uint32_t base_ms;            /* backoff of the first retry is drawn from [0, base_ms] */
    uint32_t cap_ms;             /* no single wait is longer than this */
    uint64_t deadline_ms;        /* absolute time (same clock as now_ms) after which no retry
                                    starts; 0 = no deadline */
    uint64_t start_ms;           /* when the request's first try started (same clock) */
    uint32_t connect_budget_ms;  /* S3D_ECONNECT is retried past max_attempts until this long
                                    after start_ms; 0 = no such budget */
    uint32_t throttle_budget_ms; /* a throttling answer (s3d_retry_is_throttle) is retried
                                    past max_attempts until this long after start_ms; 0 = no
                                    such budget */
};

#define S3D_RETRY_BASE_MS 100u
#define S3D_RETRY_CAP_MS  20000u
/* A server restarting (radosgw takes 1-2 s, a load balancer's target a few) refuses
 * connections for seconds, and a refused connection sent nothing: five tries whose full-jitter
 * waits add up to 0.75 s on average gave up within about 1 s. botocore's standard mode waits
 * up to 1 + 2 s over its 3 tries; this covers a few seconds whatever the draws. */
#define S3D_RETRY_CONNECT_BUDGET_MS 5000u
/* S3 answers 503 SlowDown when a prefix's request rate is exceeded, for as long as the burst
 * of requests lasts (checkpoints of many ranks meet it at once). Five tries gave up after
 * about 0.75 s of waiting; botocore's standard and adaptive modes wait up to 20 s a try. A
 * request that is throttled goes on being retried, its waits growing to S3D_RETRY_CAP_MS,
 * until this long after its first try: spells of 10 s and more are survived, and one that
 * never ends fails within this bound (plus the last request). */
#define S3D_RETRY_THROTTLE_BUDGET_MS 30000u

/* 1 when a request that failed with err (an S3D_E* code), the HTTP status (0 when no response
 * came) and the S3 <Code> (NULL or "" when none) may succeed if sent again; 0 otherwise.
 * Transient: 5xx, 503 SlowDown, 400 RequestTimeout, connection refused/reset, timeouts and
 * stalls, network errors. Never: other 4xx, TLS, protocol (more bytes than asked), local
 * errors, cancellation. */
int s3d_retry_is_transient(int err, int http_status, const char *s3_code);

/* 1 when the answer says the server does not do what was asked: HTTP 501 or the S3 code
 * NotImplemented (NULL or "" when none). An answer, not a failure: never retried; a caller
 * may try another way (a copy through the client, a write without a condition). */
int s3d_retry_is_not_implemented(int http_status, const char *s3_code);

/* 1 when the failure is the server asking the client to slow down: HTTP 429 or 503, or the
 * S3 codes SlowDown, Throttling, ThrottlingException, RequestLimitExceeded,
 * TooManyRequestsException, RequestThrottled, ServiceUnavailable. */
int s3d_retry_is_throttle(int err, int http_status, const char *s3_code);

/* The upper bound of the wait before retry number `retry` (1 = the first retry):
 * min(cap_ms, base_ms * 2^(retry-1)). */
uint64_t s3d_retry_backoff_cap(const struct s3d_retry_policy *p, uint32_t retry);

/* Full jitter: a wait drawn uniformly from [0, s3d_retry_backoff_cap()] using rnd (any 64-bit
 * random value). */
uint64_t s3d_retry_backoff_ms(const struct s3d_retry_policy *p, uint32_t retry, uint64_t rnd);

/* The decision after attempt number `attempts_done` (1 = the first try failed) failed with
 * (err, http_status, s3_code) at time now_ms. Returns 1 and stores the wait in *delay_ms when
 * the request should be sent again; returns 0 when it must fail now (not transient, attempts
 * used up, or the wait would end past the deadline). A connection that could not be made
 * (S3D_ECONNECT: refused, or the name not resolved) is retried past max_attempts (when that is
 * above 1) until connect_budget_ms after start_ms, and a throttling answer until
 * throttle_budget_ms after start_ms, the last wait shortened to end there. */
int s3d_retry_decide(const struct s3d_retry_policy *p, uint32_t attempts_done, int err,
                     int http_status, const char *s3_code, uint64_t now_ms, uint64_t rnd,
                     uint64_t *delay_ms);

/* A random 64-bit value for the jitter (thread-safe, not cryptographic). */
uint64_t s3d_retry_random(void);

/* Monotonic clock in milliseconds. */
uint64_t s3d_now_ms(void);

#endif
