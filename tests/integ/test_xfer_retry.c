/* test_xfer_retry.c - real failed requests, retried: a ranged GET whose connection is cut
 * mid-body resumes from the byte after the last one received (checked in the Range header the
 * server saw), and a multipart part whose upload connection is cut is sent again alone. The
 * failures come from a local TCP proxy (tproxy.c) between the client and the server. */
#include <stdlib.h>
#include <string.h>

#include "tproxied.h"
#include "tproxy.h"
#include "testutil.h"

static int count_lines(const char *log, const char *a, const char *b)
{
    int n = 0;
    const char *line = log;
    while (line != NULL && *line != '\0') {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        char buf[4096];
        snprintf(buf, sizeof(buf), "%.*s", (int)len, line);
        if (strstr(buf, a) != NULL && (b == NULL || strstr(buf, b) != NULL))
            n++;
        line = nl ? nl + 1 : NULL;
    }
    return n;
}

static int no_upload(void *user, const struct s3d_upload_entry *e)
{
    (*(int *)user)++;
    return 0;
}

int main(void)
{
    char want_range[128];
    int uploads = 0;
    struct t_proxied t;
    struct s3d_client *via;
    struct tproxy *px;
    struct tproxy_opts po;
    const uint64_t n = 24u << 20;
    uint64_t got = 0, first;
    char *src = malloc(n), *dst = malloc(n);
    const char *log, *r2;

    CHECK(src != NULL && dst != NULL);
    t_proxied_setup(&t, "retry", src, n, 42);

    /* 1. GET cut after 10 MiB of response: one 24 MiB range, resumed. */
    px = t_proxied_cut_response(&t, 10 << 20, 32u << 20, &via);
    memset(dst, 0, n);
    CHECK_OK(s3d_download_to_buffer(via, t.bucket, "obj", 0, UINT64_MAX, dst, n, &got, NULL));
    CHECK_EQ_U64(got, n);
    CHECK(memcmp(src, dst, n) == 0);
    CHECK(tproxy_cuts(px) == 1);
    log = tproxy_log(px);
    fprintf(stderr, "proxy log (GET):\n%s", log);
    snprintf(want_range, sizeof(want_range), "Range: bytes=0-%llu", (unsigned long long)n - 1);
    CHECK(count_lines(log, "GET /", want_range) == 1);
    /* The second GET asks for the rest: from a byte > 0 that the cut left, to the end. */
    CHECK(count_lines(log, "GET /", "Range: bytes=") == 2);
    r2 = strstr(strstr(log, want_range) + 1, "Range: bytes=");
    CHECK(r2 != NULL);
    first = strtoull(r2 + strlen("Range: bytes="), NULL, 10);
    /* The proxy reset the connection inside the chunk that crossed 10 MiB (chunks are
     * <= 64 KiB): the resume point is past 0 and not past what went through (a reset drops
     * what the client had not read yet, so it may be less); the bytes compare equal. */
    CHECK(first > 0 && first <= (10u << 20) + (64u << 10));
    snprintf(want_range, sizeof(want_range), "-%llu", (unsigned long long)n - 1);
    CHECK(strncmp(strchr(r2, '-'), want_range, strlen(want_range)) == 0);
    s3d_client_free(via);
    tproxy_stop(px);

    /* 2. Multipart of 4 x 6 MiB, cut 8 MiB into the request bytes (inside part 2): part 2 is
     * sent again, alone; the object is right and no upload stays open. */
    memset(&po, 0, sizeof(po));
    po.cut_s2c_after = -1;
    po.cut_c2s_after = 8 << 20;
    po.stall_s2c_after = -1;
    px = tproxy_start(t.host, t.port, &po);
    via = t_s3_client_at(tproxy_url(px), 6u << 20, 1);
    t_fill_random(src, n, 43);
    CHECK_OK(s3d_upload_from_buffer(via, t.bucket, "mp", src, n, NULL));
    CHECK(tproxy_cuts(px) == 1);
    log = tproxy_log(px);
    fprintf(stderr, "proxy log (multipart):\n%s", log);
    /* 4 parts, part 2 twice, and the client's one-byte checksum probe (as part 1, before the
     * upload's own part 1 replaces it). */
    CHECK(tproxy_crc_probes(px) == 1);
    CHECK(count_lines(log, "PUT /", "partNumber=") == 6);
    CHECK(count_lines(log, "PUT /", "partNumber=2&") == 2);
    CHECK(count_lines(log, "PUT /", "partNumber=1&") == 2);
    memset(dst, 0, n);
    CHECK_OK(s3d_download_to_buffer(t.direct, t.bucket, "mp", 0, UINT64_MAX, dst, n, &got, NULL));
    CHECK(memcmp(src, dst, n) == 0);
    CHECK_OK(s3d_list_uploads(t.direct, t.bucket, NULL, no_upload, &uploads));
    CHECK(uploads == 0);
    s3d_client_free(via);
    tproxy_stop(px);

    /* 2b. Part 2 answered with HTTP 500 InternalError (by the proxy, the server never sees
     * it): the engine retries that part alone after its backoff. */
    memset(&po, 0, sizeof(po));
    po.cut_s2c_after = po.cut_c2s_after = po.stall_s2c_after = -1;
    po.fail_request = "partNumber=2&";
    px = tproxy_start(t.host, t.port, &po);
    via = t_s3_client_at(tproxy_url(px), 6u << 20, 2);
    t_fill_random(src, n, 45);
    CHECK_OK(s3d_upload_from_buffer(via, t.bucket, "mp", src, n, NULL));
    CHECK(tproxy_failed_requests(px) == 1);
    log = tproxy_log(px);
    fprintf(stderr, "proxy log (500 on part 2):\n%s", log);
    CHECK(count_lines(log, "PUT /", "partNumber=2&") == 2);
    CHECK(count_lines(log, "PUT /", "partNumber=") == 6); /* with the probe */
    memset(dst, 0, n);
    CHECK_OK(s3d_download_to_buffer(t.direct, t.bucket, "mp", 0, UINT64_MAX, dst, n, &got, NULL));
    CHECK(memcmp(src, dst, n) == 0);
    uploads = 0;
    CHECK_OK(s3d_list_uploads(t.direct, t.bucket, NULL, no_upload, &uploads));
    CHECK(uploads == 0);
    s3d_client_free(via);
    tproxy_stop(px);

    /* 3. A stall: the response stops for 5 s after 1 MiB; below 1 MB/s for 1 s, the request
     * is given up as stalled and resumed on a new connection. */
    memset(&po, 0, sizeof(po));
    po.cut_s2c_after = -1;
    po.cut_c2s_after = -1;
    po.stall_s2c_after = 1 << 20;
    po.stall_ms = 5000;
    px = tproxy_start(t.host, t.port, &po);
    {
        struct s3d_client_options o;
        memset(&o, 0, sizeof(o));
        o.endpoint_url = tproxy_url(px);
        o.part_size = 32u << 20;
        o.max_concurrency = 1;
        o.low_speed_time_s = 1;
        o.low_speed_limit = 1000000;
        CHECK_OK(s3d_client_new(&o, &via));
    }
    memset(dst, 0, n);
    CHECK_OK(s3d_download_to_buffer(via, t.bucket, "mp", 0, UINT64_MAX, dst, n, &got, NULL));
    CHECK(memcmp(src, dst, n) == 0);
    CHECK(tproxy_stalls(px) == 1);
    log = tproxy_log(px);
    fprintf(stderr, "proxy log (stall):\n%s", log);
    CHECK(count_lines(log, "GET /", "Range: bytes=") == 2);
    s3d_client_free(via);

    /* 4. A deadline shorter than the stall: the request times out and no retry can start
     * before the deadline: S3D_ETIMEDOUT. */
    tproxy_stop(px);
    po.stall_s2c_after = 1 << 20;
    po.stall_ms = 2500;
    px = tproxy_start(t.host, t.port, &po);
    {
        struct s3d_client_options o;
        memset(&o, 0, sizeof(o));
        o.endpoint_url = tproxy_url(px);
        o.deadline_ms = 1500;
        o.low_speed_time_s = 10;
        CHECK_OK(s3d_client_new(&o, &via));
    }
    CHECK_ERR(s3d_download_to_buffer(via, t.bucket, "mp", 0, UINT64_MAX, dst, n, &got, NULL),
              S3D_ETIMEDOUT);
    s3d_client_free(via);
    tproxy_stop(px);

    /* 5. The response to CompleteMultipartUpload is lost (connection reset after the server
     * finished): the resent Complete gets NoSuchUpload, and the upload is recognized as done
     * (the object is a multipart object with the right number of parts). */
    memset(&po, 0, sizeof(po));
    po.cut_s2c_after = po.cut_c2s_after = po.stall_s2c_after = -1;
    po.cut_response_to = "mp?uploadId="; /* Complete (POST), not Create (?uploads) */
    px = tproxy_start(t.host, t.port, &po);
    via = t_s3_client_at(tproxy_url(px), 6u << 20, 2);
    t_fill_random(src, n, 44);
    CHECK_OK(s3d_upload_from_buffer(via, t.bucket, "mp", src, n, NULL));
    log = tproxy_log(px);
    fprintf(stderr, "proxy log (lost Complete):\n%s", log);
    CHECK(tproxy_cuts(px) == 1);
    memset(dst, 0, n);
    CHECK_OK(s3d_download_to_buffer(t.direct, t.bucket, "mp", 0, UINT64_MAX, dst, n, &got, NULL));
    CHECK(memcmp(src, dst, n) == 0);
    s3d_client_free(via);
    tproxy_stop(px);

    {
        const char *keys[] = {"obj", "mp"};
        CHECK_OK(s3d_delete_objects(t.direct, t.bucket, keys, 2));
    }
    CHECK_OK(s3d_delete_bucket(t.direct, t.bucket));
    s3d_client_free(t.direct);
    free(src);
    free(dst);
    return 0;
}
