/* test_s3_op_build.c - a request that could not take every header or query parameter it was
 * given is never sent: the first failed addition is kept in the op and s3d_s3_op_prepare
 * (so s3d_s3_op_run too) returns it, which is why ops.c need not check each addition. */
#include <curl/curl.h>

#include <stdlib.h>

#include "s3/s3ctx.h"
#include "testutil.h"

/* The error a wrong-region answer was judged as (the retry decision does not look at it). */
#define S3D_EREDIRECT_TEST S3D_EPROTO

/* A GET of bucket "b" (and key, if not NULL) with n query parameters. */
static void op_start(struct s3d_s3_op *op, const char *operation, const char *key, size_t n)
{
    memset(op, 0, sizeof(*op));
    op->operation = operation;
    op->method = "GET";
    op->bucket = "b";
    op->key = key;
    for (size_t i = 0; i < n; i++)
        CHECK_OK(s3d_s3_op_add_query(op, "k", "v"));
}

/* A bucket S3 says is in another region: after s3d_s3_op_region_retry, the op is signed for
 * that region and, on the default AWS endpoint, sent to that region's endpoint; other buckets
 * keep the client's region; a second wrong-region answer is not followed again. */
static void test_region_redirect(void)
{
    struct s3d_client_options o;
    struct s3d_s3ctx ctx;
    struct s3d_s3_op op;
    CURL *e = curl_easy_init();

    CHECK(e != NULL);
    unsetenv("AWS_ENDPOINT_URL");
    unsetenv("AWS_ENDPOINT_URL_S3");
    setenv("AWS_CONFIG_FILE", "/nonexistent/s3d-test-config", 1);
    setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/s3d-test-credentials", 1);
    memset(&o, 0, sizeof(o));
    o.region = "us-east-1";
    o.access_key_id = "AKIDEXAMPLE";
    o.secret_access_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
    CHECK_OK(s3d_s3ctx_init(&ctx, &o, 1));
    CHECK(ctx.cfg.endpoint_is_default);

    memset(&op, 0, sizeof(op));
    op.operation = "GetObject";
    op.method = "GET";
    op.bucket = "my-bucket";
    op.key = "k";
    CHECK_OK(s3d_s3_op_prepare(&ctx, &op, e));
    CHECK(strstr(op.url.data, "https://my-bucket.s3.us-east-1.amazonaws.com/k") == op.url.data);
    CHECK(strstr(op.sig.data, "/us-east-1/s3/aws4_request") != NULL);
    /* S3's answer: 301 with x-amz-bucket-region. */
    op.req.resp.status = 301;
    snprintf(op.req.resp.bucket_region, sizeof(op.req.resp.bucket_region), "eu-west-2");
    CHECK(s3d_s3_op_region_retry(&ctx, &op, S3D_EREDIRECT_TEST) == 1);
    CHECK_OK(s3d_s3_op_prepare(&ctx, &op, e));
    CHECK(strstr(op.url.data, "https://my-bucket.s3.eu-west-2.amazonaws.com/k") == op.url.data);
    CHECK(strstr(op.sig.data, "/eu-west-2/s3/aws4_request") != NULL);
    CHECK(strcmp(op.region, "eu-west-2") == 0);
    op.req.resp.status = 301;
    snprintf(op.req.resp.bucket_region, sizeof(op.req.resp.bucket_region), "ap-south-1");
    CHECK(s3d_s3_op_region_retry(&ctx, &op, S3D_EREDIRECT_TEST) == 0); /* once per op */
    s3d_s3_op_cleanup(&op);

    /* Another bucket keeps the client's region; a malformed region is not followed. */
    memset(&op, 0, sizeof(op));
    op.operation = "GetObject";
    op.method = "GET";
    op.bucket = "other-bucket";
    op.key = "k";
    CHECK_OK(s3d_s3_op_prepare(&ctx, &op, e));
    CHECK(strstr(op.sig.data, "/us-east-1/s3/aws4_request") != NULL);
    op.req.resp.status = 301;
    snprintf(op.req.resp.bucket_region, sizeof(op.req.resp.bucket_region), "eu west/2");
    CHECK(s3d_s3_op_region_retry(&ctx, &op, S3D_EREDIRECT_TEST) == 0);
    op.req.resp.status = 404;
    snprintf(op.req.resp.bucket_region, sizeof(op.req.resp.bucket_region), "eu-west-1");
    CHECK(s3d_s3_op_region_retry(&ctx, &op, S3D_EREDIRECT_TEST) == 0); /* not a redirect */
    s3d_s3_op_cleanup(&op);
    curl_easy_cleanup(e);
    s3d_s3ctx_cleanup(&ctx);
}

int main(void)
{
    struct s3d_client_options o;
    struct s3d_s3ctx ctx;
    struct s3d_s3_op op;
    CURL *e;
    size_t i;

    memset(&o, 0, sizeof(o));
    o.endpoint_url = "http://127.0.0.1:9";
    o.anonymous = 1;
    CHECK_OK(s3d_s3ctx_init(&ctx, &o, 1));
    e = curl_easy_init();
    CHECK(e != NULL);

    /* Within the limit: prepared. */
    op_start(&op, "ListObjectsV2", NULL, S3D_OP_MAX_QUERY);
    CHECK_OK(s3d_s3_op_prepare(&ctx, &op, e));
    s3d_s3_op_cleanup(&op);

    /* One parameter too many, then a header that fits: the request is refused. */
    op_start(&op, "ListObjectsV2", NULL, S3D_OP_MAX_QUERY);
    CHECK_ERR(s3d_s3_op_add_query(&op, "dropped", "v"), S3D_EINVAL);
    CHECK_OK(s3d_s3_op_add_header(&op, "x-amz-test", "1"));
    CHECK_ERR(s3d_s3_op_prepare(&ctx, &op, e), S3D_EINVAL);
    CHECK_MSG_HAS("ListObjectsV2: too many query parameters");
    s3d_s3_op_cleanup(&op);

    /* The same for headers, set_range included. */
    op_start(&op, "GetObject", "k", 0);
    for (i = 0; i < S3D_OP_MAX_HEADERS; i++)
        CHECK_OK(s3d_s3_op_add_header(&op, "x-amz-meta-n", "v"));
    CHECK_ERR(s3d_s3_op_set_range(&op, 0, 9), S3D_EINVAL);
    CHECK_ERR(s3d_s3_op_run(&ctx, &op), S3D_EINVAL);
    CHECK_MSG_HAS("GetObject: too many headers");
    s3d_s3_op_cleanup(&op);

    curl_easy_cleanup(e);
    s3d_s3ctx_cleanup(&ctx);
    test_region_redirect();
    printf("ok\n");
    return 0;
}
