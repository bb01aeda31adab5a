/* retry.c - the retry policy (see retry.h). Full jitter after the AWS architecture blog
 * "Exponential Backoff And Jitter": spreading retries uniformly over [0, cap] breaks the
 * synchronized waves that plain exponential backoff produces when many parts fail at once. */
#include "s3/retry.h"

#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "common/error.h"

int s3d_retry_is_not_implemented(int http_status, const char *s3_code)
{
    return http_status == 501 || (s3_code != NULL && strcmp(s3_code, "NotImplemented") == 0);
}

int s3d_retry_is_transient(int err, int http_status, const char *s3_code)
{
    if (s3_code != NULL && s3_code[0] != '\0') {
        if (strcmp(s3_code, "RequestTimeout") == 0 || strcmp(s3_code, "SlowDown") == 0 ||
            strcmp(s3_code, "InternalError") == 0 || strcmp(s3_code, "ServiceUnavailable") == 0)
            return 1;
    }
    /* 501 Not Implemented is an answer, not a failure (botocore does not retry it either): a
     * copy that a server refuses so goes through the client at once (engine/api_copy.c). */
    if (s3d_retry_is_not_implemented(http_status, s3_code))
        return 0;
    if (http_status >= 500)
        return 1;
    if (http_status == 408 || http_status == 429)
        return 1;
    if (http_status >= 400)
        return 0;
    switch (err) {
    case S3D_ESERVER:
    case S3D_ESLOWDOWN:
    case S3D_ECONNECT:
    case S3D_ETIMEDOUT:
    case S3D_ENETWORK:
        return 1;
    default:
        return 0;
    }
}

int s3d_retry_is_throttle(int err, int http_status, const char *s3_code)
{
    static const char *const codes[] = {"SlowDown",
                                        "Throttling",
                                        "ThrottlingException",
                                        "RequestLimitExceeded",
                                        "TooManyRequestsException",
                                        "RequestThrottled",
                                        "ServiceUnavailable"};
    if (http_status == 429 || http_status == 503 || err == S3D_ESLOWDOWN)
        return 1;
    if (s3_code != NULL)
        for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
            if (strcmp(s3_code, codes[i]) == 0)
                return 1;
    return 0;
}

uint64_t s3d_retry_backoff_cap(const struct s3d_retry_policy *p, uint32_t retry)
{
    uint64_t b = p->base_ms;
    uint32_t shift = retry > 0 ? retry - 1 : 0;
    if (shift > 40)
        shift = 40;
    b <<= shift;
    return b < p->cap_ms ? b : p->cap_ms;
}

uint64_t s3d_retry_backoff_ms(const struct s3d_retry_policy *p, uint32_t retry, uint64_t rnd)
{
    return rnd % (s3d_retry_backoff_cap(p, retry) + 1);
}

int s3d_retry_decide(const struct s3d_retry_policy *p, uint32_t attempts_done, int err,
                     int http_status, const char *s3_code, uint64_t now_ms, uint64_t rnd,
                     uint64_t *delay_ms)
{
    uint64_t d;
    if (!s3d_retry_is_transient(err, http_status, s3_code))
        return 0;
    d = s3d_retry_backoff_ms(p, attempts_done, rnd);
    if (attempts_done >= p->max_attempts) {
        /* Past the tries: only a refused connection or a throttle, within its budget. */
        uint32_t budget = 0;
        uint64_t end;
        if (err == S3D_ECONNECT)
            budget = p->connect_budget_ms;
        else if (s3d_retry_is_throttle(err, http_status, s3_code))
            budget = p->throttle_budget_ms;
        end = p->start_ms + budget;
        if (budget == 0 || p->max_attempts < 2 || now_ms >= end)
            return 0;
        if (now_ms + d > end)
            d = end - now_ms;
    }
    if (p->deadline_ms != 0 && now_ms + d >= p->deadline_ms)
        return 0;
    *delay_ms = d;
    return 1;
}

uint64_t s3d_retry_random(void)
{
    /* splitmix64 over a shared counter seeded by the clock: distinct values across threads
     * without a lock. */
    static _Atomic uint64_t state;
    uint64_t z, s = atomic_load(&state);
    if (s == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t seed = ((uint64_t)ts.tv_sec << 30) ^ (uint64_t)ts.tv_nsec;
        uint64_t zero = 0;
        atomic_compare_exchange_strong(&state, &zero, seed | 1);
    }
    z = atomic_fetch_add(&state, 0x9E3779B97F4A7C15ull) + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t s3d_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}
