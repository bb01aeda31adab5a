/* cmd_stat.c - s3direct stat: HeadObject, printed. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: s3direct stat s3://BUCKET/KEY [OPTIONS]\n\n"
    "Prints what HeadObject returns: size, ETag, last modified time (UTC), content type, and\n"
    "the CRC32C checksum when the server stored one. Nothing is downloaded.\n\n"
    "Example:\n"
    "  s3direct stat s3://bucket/models/model.safetensors\n";

static int run(const struct cli_opts *o)
{
    char bucket[CLI_BUCKET_CAP], key[CLI_KEY_CAP], when[32], human[24];
    struct s3d_object_info info = {.struct_size = sizeof(struct s3d_object_info)};
    struct s3d_client *c = NULL;
    int rc;

    if (!cli_is_s3(o->args[0]))
        return cli_usage_error("stat", "\"%s\" is not an s3:// URI", o->args[0]);
    if (cli_split_uri(o->args[0], bucket, key) < 0)
        return CLI_EXIT_FAIL;
    if (key[0] == '\0')
        return cli_usage_error("stat", "%s names a bucket, not an object", o->args[0]);
    if (cli_client(o, &c) < 0)
        return CLI_EXIT_FAIL;
    memset(&info, 0, sizeof(info));
    rc = s3d_head_object(c, bucket, key, &info);
    if (rc < 0)
        cli_fail(rc);
    s3d_client_free(c);
    if (rc < 0)
        return CLI_EXIT_FAIL;
    printf("URI:           s3://%s/%s\n", bucket, key);
    printf("Size:          %llu (%s)\n", (unsigned long long)info.size,
           cli_human_size(info.size, human, sizeof(human)));
    printf("ETag:          %s\n", info.etag[0] ? info.etag : "-");
    printf("Last-Modified: %s%s\n", cli_format_time(info.last_modified, when, sizeof(when)),
           info.last_modified ? " UTC" : "");
    printf("Content-Type:  %s\n", info.content_type[0] ? info.content_type : "-");
    if (info.checksum_crc32c[0])
        printf("CRC32C:        %s\n", info.checksum_crc32c);
    return 0;
}

const struct cli_command cli_cmd_stat = {
    .name = "stat",
    .summary = "show an object's size, ETag, last modified time and content type",
    .usage = usage,
    .flags = 0,
    .min_args = 1,
    .max_args = 1,
    .run = run,
};
