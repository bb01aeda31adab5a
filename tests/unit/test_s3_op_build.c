/* test_s3_op_build.c - a request that could not take every header or query parameter it was
 * given is never sent: the first failed addition is kept in the op and s3d_s3_op_prepare
 * (so s3d_s3_op_run too) returns it, which is why ops.c need not check each addition. */
#include <curl/curl.h>

#include "s3/s3ctx.h"
#include "testutil.h"

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
    printf("ok\n");
    return 0;
}
