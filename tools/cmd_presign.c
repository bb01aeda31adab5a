/* cmd_presign.c - s3direct presign: a SigV4 query-string URL anyone can use until it expires. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: s3direct presign s3://BUCKET/KEY [OPTIONS]\n\n"
    "Prints a presigned URL (SigV4, query-string form) that lets whoever holds it perform one\n"
    "request on the object without credentials, until it expires. Signing is local: nothing\n"
    "is sent to the server.\n\n"
    "Options:\n"
    "  --expires-in SECONDS  validity, 1..604800 (7 days); default 3600\n"
    "  --method METHOD       GET (default), PUT, HEAD or DELETE\n\n"
    "Examples:\n"
    "  curl -o model.bin \"$(s3direct presign s3://bucket/model.bin --expires-in 600)\"\n"
    "  curl -T model.bin \"$(s3direct presign s3://bucket/model.bin --method PUT)\"\n";

static int run(const struct cli_opts *o)
{
    char bucket[CLI_BUCKET_CAP], key[CLI_KEY_CAP], url[8192];
    struct s3d_client *c = NULL;
    int rc;

    if (!cli_is_s3(o->args[0]))
        return cli_usage_error("presign", "\"%s\" is not an s3:// URI", o->args[0]);
    if (cli_split_uri(o->args[0], bucket, key) < 0)
        return CLI_EXIT_FAIL;
    if (key[0] == '\0')
        return cli_usage_error("presign", "%s names a bucket, not an object", o->args[0]);
    if (cli_client(o, &c) < 0)
        return CLI_EXIT_FAIL;
    rc = s3d_presign(c, o->method, bucket, key, o->expires_in, url, sizeof(url));
    if (rc < 0)
        cli_fail(rc);
    s3d_client_free(c);
    if (rc < 0)
        return CLI_EXIT_FAIL;
    printf("%s\n", url);
    return 0;
}

const struct cli_command cli_cmd_presign = {
    .name = "presign",
    .summary = "print a presigned URL for an object (--expires-in, default 3600 s)",
    .usage = usage,
    .flags = CLI_F_EXPIRES | CLI_F_METHOD,
    .min_args = 1,
    .max_args = 1,
    .run = run,
};
