/* cmd_rm.c - s3direct rm: one object, or every object under a prefix (list + DeleteObjects). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: s3direct rm s3://BUCKET/KEY [OPTIONS]\n"
    "       s3direct rm s3://BUCKET[/PREFIX] --recursive [OPTIONS]\n\n"
    "Deletes one object (deleting a key that does not exist succeeds, as on S3), or with\n"
    "--recursive every object under PREFIX, 1000 keys per DeleteObjects request. A PREFIX is\n"
    "taken as a folder: s3://b/data deletes s3://b/data/..., not s3://b/database.\n\n"
    "Options:\n"
    "  -r, --recursive       delete every object under the prefix\n"
    "  --exclude PATTERN     with --recursive: do not delete keys matching PATTERN (relative\n"
    "                        to the prefix; * ? [..] as the AWS CLI reads them)\n"
    "  --include PATTERN     delete keys matching PATTERN after all; the last matching\n"
    "                        filter wins, as in the AWS CLI\n"
    "  --dryrun              print what would be deleted, delete nothing\n"
    "  --only-show-errors    print only errors: no line per deleted key (--dryrun's lines\n"
    "                        are still printed), as aws s3\n\n"
    "Examples:\n"
    "  s3direct rm s3://bucket/old.bin\n"
    "  s3direct rm s3://bucket/checkpoints/step-100 --recursive\n";

static int rm_recursive(const struct cli_opts *o, struct s3d_client *c, const char *bucket,
                        const char *key)
{
    char prefix[CLI_KEY_CAP];
    struct cli_keys keys;
    size_t i;
    int rc, n;

    n = snprintf(prefix, sizeof(prefix), "%s%s", key,
                 (key[0] && key[strlen(key) - 1] != '/') ? "/" : "");
    if (n < 0 || (size_t)n >= sizeof(prefix))
        return cli_error("key too long: %s", key);
    if (cli_list_keys(c, bucket, prefix, &keys) < 0)
        return CLI_EXIT_FAIL;
    /* --exclude/--include: keep the keys the filters pass, matched relative to the prefix. */
    for (i = 0, n = 0; i < keys.n; i++) {
        if (cli_filter_included(o, keys.keys[i] + strlen(prefix)))
            keys.keys[n++] = keys.keys[i];
        else
            free(keys.keys[i]);
    }
    keys.n = (size_t)n;
    rc = 0;
    if (!o->dryrun && keys.n > 0) {
        rc = s3d_delete_objects(c, bucket, (const char *const *)keys.keys, keys.n);
        if (rc < 0)
            cli_fail(rc);
    }
    if (rc == 0 && cli_says(o))
        for (i = 0; i < keys.n; i++) {
            printf("%sdelete: s3://%s/", o->dryrun ? "(dryrun) " : "", bucket);
            cli_put_key(stdout, keys.keys[i]);
            putchar('\n');
        }
    cli_keys_free(&keys);
    return rc < 0 ? CLI_EXIT_FAIL : 0;
}

static int run(const struct cli_opts *o)
{
    char bucket[CLI_BUCKET_CAP], key[CLI_KEY_CAP];
    struct s3d_client *c = NULL;
    int rc;

    if (!cli_is_s3(o->args[0]))
        return cli_usage_error("rm", "\"%s\" is not an s3:// URI", o->args[0]);
    if (cli_split_uri(o->args[0], bucket, key) < 0)
        return CLI_EXIT_FAIL;
    if (!o->recursive && (key[0] == '\0' || key[strlen(key) - 1] == '/'))
        return cli_usage_error("rm", "%s names a prefix, not an object (use --recursive)",
                               o->args[0]);
    if (o->nfilters > 0 && !o->recursive)
        return cli_usage_error("rm", "--exclude and --include need --recursive");
    if (cli_client(o, &c) < 0)
        return CLI_EXIT_FAIL;
    if (o->recursive) {
        rc = rm_recursive(o, c, bucket, key);
    } else if (o->dryrun) {
        rc = 0;
        if (cli_says(o)) {
            printf("(dryrun) delete: s3://%s/", bucket);
            cli_put_key(stdout, key);
            putchar('\n');
        }
    } else {
        rc = s3d_delete_object(c, bucket, key);
        if (rc < 0)
            rc = cli_fail(rc);
        else if (cli_says(o)) {
            printf("delete: s3://%s/", bucket);
            cli_put_key(stdout, key);
            putchar('\n');
        }
    }
    s3d_client_free(c);
    return rc;
}

const struct cli_command cli_cmd_rm = {
    .name = "rm",
    .summary = "delete an object, or everything under a prefix with --recursive",
    .usage = usage,
    .flags = CLI_F_RECURSIVE | CLI_F_DRYRUN | CLI_F_FILTER | CLI_F_ONLY_ERRORS,
    .min_args = 1,
    .max_args = 1,
    .run = run,
};
