/* test_retry.c - the retry policy as a table: which failures are retried, the backoff bounds
 * of full jitter, the attempt budget and the deadline. No server. */
#include "s3/retry.h"
#include "common/compiler.h"
#include "testutil.h"

struct transient_case {
    int err;
    int status;
    const char *code;
    int want;
};

static const struct transient_case transient_cases[] = {
    {S3D_ESERVER, 500, "InternalError", 1},
    {S3D_ESERVER, 502, NULL, 1},
    {S3D_ESERVER, 501, "NotImplemented", 0}, /* an answer: UploadPartCopy not there */
    {S3D_ESERVER, 501, NULL, 0},
    {S3D_ESLOWDOWN, 503, "SlowDown", 1},
    {S3D_ESLOWDOWN, 503, "", 1},
    {S3D_ETIMEDOUT, 400, "RequestTimeout", 1},
    {S3D_ECONNECT, 0, NULL, 1},
    {S3D_ENETWORK, 0, NULL, 1},  /* connection reset mid-body */
    {S3D_ETIMEDOUT, 0, NULL, 1}, /* stall below the low-speed limit */
    {S3D_ENOSUCHKEY, 404, "NoSuchKey", 0},
    {S3D_ENOSUCHBUCKET, 404, "NoSuchBucket", 0},
    {S3D_EACCESS, 403, "AccessDenied", 0},
    {S3D_ESIGNATURE, 403, "SignatureDoesNotMatch", 0},
    {S3D_EKEYID, 403, "InvalidAccessKeyId", 0},
    {S3D_ERANGE, 416, "InvalidRange", 0},
    {S3D_EHTTP, 400, "InvalidArgument", 0},
    {S3D_ECHECKSUM, 400, "BadDigest", 0},
    {S3D_ETLS, 0, NULL, 0},
    {S3D_EPROTO, 206, NULL, 0}, /* more bytes than asked: never resent */
    {S3D_ECANCELED, 0, NULL, 0},
    {S3D_ENOMEM, 0, NULL, 0},
    {S3D_EIO, 0, NULL, 0},
};

int main(void)
{
    struct s3d_retry_policy p = {
        .max_attempts = 5, .base_ms = 100, .cap_ms = 20000, .deadline_ms = 0};
    uint64_t delay = 0, rnd;
    size_t i;
    uint32_t r;

    for (i = 0; i < S3D_ARRAY_LEN(transient_cases); i++) {
        const struct transient_case *t = &transient_cases[i];
        if (s3d_retry_is_transient(t->err, t->status, t->code) != t->want)
            t_fail(__FILE__, __LINE__, "case %zu (%s, %d, %s): want %d", i, s3d_err_name(t->err),
                   t->status, t->code ? t->code : "-", t->want);
    }

    /* The cap doubles from base and stops at cap_ms. */
    CHECK_EQ_U64(s3d_retry_backoff_cap(&p, 1), 100);
    CHECK_EQ_U64(s3d_retry_backoff_cap(&p, 2), 200);
    CHECK_EQ_U64(s3d_retry_backoff_cap(&p, 5), 1600);
    CHECK_EQ_U64(s3d_retry_backoff_cap(&p, 8), 12800);
    CHECK_EQ_U64(s3d_retry_backoff_cap(&p, 9), 20000);
    CHECK_EQ_U64(s3d_retry_backoff_cap(&p, 200), 20000); /* no overflow on huge counts */

    /* Full jitter: every draw within [0, cap]; both ends reachable; the draws spread. */
    for (r = 1; r <= 12; r++) {
        uint64_t cap = s3d_retry_backoff_cap(&p, r), lo = UINT64_MAX, hi = 0;
        CHECK_EQ_U64(s3d_retry_backoff_ms(&p, r, 0), 0);
        CHECK_EQ_U64(s3d_retry_backoff_ms(&p, r, cap), cap);
        for (i = 0; i < 2000; i++) {
            uint64_t d = s3d_retry_backoff_ms(&p, r, s3d_retry_random());
            CHECK(d <= cap);
            lo = d < lo ? d : lo;
            hi = d > hi ? d : hi;
        }
        CHECK(lo < cap / 4);
        CHECK(hi > cap / 4 * 3);
    }

    /* Attempts: after the 5th failed try, no more. */
    for (r = 1; r < 5; r++)
        CHECK(s3d_retry_decide(&p, r, S3D_ESERVER, 500, NULL, 1000, 7, &delay) == 1);
    CHECK(s3d_retry_decide(&p, 5, S3D_ESERVER, 500, NULL, 1000, 7, &delay) == 0);
    /* delay is the jittered value for that retry. */
    CHECK(s3d_retry_decide(&p, 3, S3D_ESERVER, 500, NULL, 1000, 123, &delay) == 1);
    CHECK_EQ_U64(delay, 123 % 401);
    /* Client errors never. */
    CHECK(s3d_retry_decide(&p, 1, S3D_ENOSUCHKEY, 404, "NoSuchKey", 1000, 7, &delay) == 0);
    CHECK(s3d_retry_decide(&p, 1, S3D_ESIGNATURE, 403, "SignatureDoesNotMatch", 1000, 7, &delay) ==
          0);

    /* Deadline: a wait that would end at or past it is refused; one that ends before is ok. */
    p.deadline_ms = 1100;
    rnd = 50; /* retry 1: cap 100, delay 50 */
    CHECK(s3d_retry_decide(&p, 1, S3D_ENETWORK, 0, NULL, 1000, rnd, &delay) == 1);
    CHECK_EQ_U64(delay, 50);
    CHECK(s3d_retry_decide(&p, 1, S3D_ENETWORK, 0, NULL, 1060, rnd, &delay) == 0);
    CHECK(s3d_retry_decide(&p, 1, S3D_ENETWORK, 0, NULL, 1200, 0, &delay) == 0);

    /* A connection that could not be made: retried past max_attempts until connect_budget_ms
     * after start_ms (a server restarting refuses for seconds), the last wait cut to end
     * there; other failures still stop at max_attempts. */
    p.deadline_ms = 0;
    p.start_ms = 1000;
    CHECK(s3d_retry_decide(&p, 5, S3D_ECONNECT, 0, NULL, 2000, 7, &delay) == 0); /* no budget */
    p.connect_budget_ms = 5000;
    CHECK(s3d_retry_decide(&p, 5, S3D_ECONNECT, 0, NULL, 2000, 7, &delay) == 1);
    CHECK_EQ_U64(delay, 7);
    CHECK(s3d_retry_decide(&p, 9, S3D_ECONNECT, 0, NULL, 5900, 1000000, &delay) == 1);
    CHECK_EQ_U64(delay, 100); /* ends at start_ms + budget */
    CHECK(s3d_retry_decide(&p, 9, S3D_ECONNECT, 0, NULL, 6000, 0, &delay) == 0);
    CHECK(s3d_retry_decide(&p, 5, S3D_ESERVER, 500, NULL, 2000, 7, &delay) == 0);
    CHECK(s3d_retry_decide(&p, 5, S3D_ENETWORK, 0, NULL, 2000, 7, &delay) == 0);
    CHECK(s3d_retry_decide(&p, 5, S3D_ETLS, 0, NULL, 2000, 7, &delay) == 0);
    /* Within max_attempts, as any transient failure; the deadline still bounds it. */
    CHECK(s3d_retry_decide(&p, 1, S3D_ECONNECT, 0, NULL, 2000, 50, &delay) == 1);
    CHECK_EQ_U64(delay, 50);
    p.deadline_ms = 2500;
    CHECK(s3d_retry_decide(&p, 6, S3D_ECONNECT, 0, NULL, 2000, 1000, &delay) == 0);
    p.deadline_ms = 0;

    /* A throttle (503 SlowDown, 429, the SDKs' throttling codes): retried past max_attempts
     * until throttle_budget_ms after start_ms; a 10 s spell is outlived; other 5xx stop. */
    CHECK(s3d_retry_is_throttle(S3D_ESLOWDOWN, 503, "SlowDown"));
    CHECK(s3d_retry_is_throttle(S3D_ESERVER, 503, ""));
    CHECK(s3d_retry_is_throttle(S3D_EHTTP, 429, NULL));
    CHECK(s3d_retry_is_throttle(S3D_EHTTP, 400, "ThrottlingException"));
    CHECK(s3d_retry_is_throttle(S3D_ESERVER, 500, "InternalError") == 0);
    CHECK(s3d_retry_is_throttle(S3D_ENETWORK, 0, NULL) == 0);
    CHECK(s3d_retry_decide(&p, 5, S3D_ESLOWDOWN, 503, "SlowDown", 2000, 7, &delay) == 0);
    p.throttle_budget_ms = 30000;
    CHECK(s3d_retry_decide(&p, 5, S3D_ESLOWDOWN, 503, "SlowDown", 2000, 7, &delay) == 1);
    CHECK(s3d_retry_decide(&p, 12, S3D_ESERVER, 503, "", 11000, 7, &delay) == 1);
    CHECK(s3d_retry_decide(&p, 12, S3D_EHTTP, 429, NULL, 30990, 1000000, &delay) == 1);
    CHECK_EQ_U64(delay, 10); /* ends at start_ms + budget */
    CHECK(s3d_retry_decide(&p, 12, S3D_ESLOWDOWN, 503, "SlowDown", 31000, 0, &delay) == 0);
    CHECK(s3d_retry_decide(&p, 5, S3D_ESERVER, 500, "InternalError", 2000, 7, &delay) == 0);
    {
        /* Waits drawn at their mean: the tries of a request throttled from 0 ms still run
         * after 10 s (the spell a default must outlive). */
        uint64_t now = p.start_ms;
        uint32_t n = 1;
        while (s3d_retry_decide(&p, n, S3D_ESLOWDOWN, 503, "SlowDown", now,
                                s3d_retry_backoff_cap(&p, n) / 2, &delay)) {
            now += delay + 20; /* each answer takes 20 ms */
            n++;
        }
        CHECK(now - p.start_ms >= 10000);
        CHECK(now - p.start_ms <= 30000 + 20);
    }
    p.throttle_budget_ms = 0;

    /* max_attempts 1: never retried, refused connections included. */
    p.max_attempts = 1;
    CHECK(s3d_retry_decide(&p, 1, S3D_ESLOWDOWN, 503, "SlowDown", 0, 7, &delay) == 0);
    CHECK(s3d_retry_decide(&p, 1, S3D_ECONNECT, 0, NULL, 1000, 7, &delay) == 0);

    /* The random source gives distinct values. */
    CHECK(s3d_retry_random() != s3d_retry_random());
    return 0;
}
