/* cmd_bucket.c - s3direct mb and rb: create and remove a bucket. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char mb_usage[] =
    "usage: s3direct mb s3://BUCKET [OPTIONS]\n\n"
    "Creates a bucket in the region of the configuration (--region). A bucket you already\n"
    "own is not an error (exit status 0, the same line), as aws s3 mb finds it on AWS\n"
    "us-east-1 and Ceph RGW; a bucket of another account's is (exit status 1).\n\n"
    "Example:\n"
    "  s3direct mb s3://checkpoints --endpoint-url http://127.0.0.1:8000\n";

static const char rb_usage[] =
    "usage: s3direct rb s3://BUCKET [OPTIONS]\n\n"
    "Removes an empty bucket (empty it first with: s3direct rm s3://BUCKET --recursive).\n\n"
    "Example:\n"
    "  s3direct rb s3://checkpoints\n";

/* After S3D_EBUCKETEXISTS: whether the bucket is the caller's. The library asks HeadBucket
 * first, which answers 200 for a bucket the credentials own (another account's: 403); a
 * CreateBucket that raced another says BucketAlreadyOwnedByYou. */
static int own_bucket(void)
{
    struct s3d_error_info e;

    memset(&e, 0, sizeof(e));
    e.struct_size = sizeof(e);
    s3d_last_error(&e);
    return e.http_status == 200 ||
           (e.s3_code != NULL && strcmp(e.s3_code, "BucketAlreadyOwnedByYou") == 0);
}

static int bucket_op(const struct cli_opts *o, const char *cmd, int create)
{
    char bucket[CLI_BUCKET_CAP], key[CLI_KEY_CAP];
    struct s3d_client *c = NULL;
    int rc;

    if (!cli_is_s3(o->args[0]))
        return cli_usage_error(cmd, "\"%s\" is not an s3:// URI", o->args[0]);
    if (cli_split_uri(o->args[0], bucket, key) < 0)
        return CLI_EXIT_FAIL;
    if (key[0] != '\0')
        return cli_usage_error(cmd, "%s names an object; give s3://BUCKET", o->args[0]);
    if (cli_client(o, &c) < 0)
        return CLI_EXIT_FAIL;
    rc = create ? s3d_create_bucket(c, bucket) : s3d_delete_bucket(c, bucket);
    if (rc == S3D_EBUCKETEXISTS && own_bucket())
        rc = 0;
    if (rc < 0)
        cli_fail(rc);
    s3d_client_free(c);
    if (rc < 0)
        return CLI_EXIT_FAIL;
    if (!o->quiet)
        printf("%s: %s\n", create ? "make_bucket" : "remove_bucket", bucket);
    return 0;
}

static int run_mb(const struct cli_opts *o)
{
    return bucket_op(o, "mb", 1);
}

static int run_rb(const struct cli_opts *o)
{
    return bucket_op(o, "rb", 0);
}

const struct cli_command cli_cmd_mb = {
    .name = "mb",
    .summary = "create a bucket",
    .usage = mb_usage,
    .flags = 0,
    .min_args = 1,
    .max_args = 1,
    .run = run_mb,
};

const struct cli_command cli_cmd_rb = {
    .name = "rb",
    .summary = "remove an empty bucket",
    .usage = rb_usage,
    .flags = 0,
    .min_args = 1,
    .max_args = 1,
    .run = run_rb,
};
