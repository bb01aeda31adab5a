/* cmd_ls.c - s3direct ls: objects and common prefixes under s3://bucket/prefix. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: s3direct ls [s3://BUCKET[/PREFIX]] [OPTIONS]\n\n"
    "Lists the objects under PREFIX, one per line: date and time of the last change (UTC),\n"
    "size in bytes, and the key. Without --recursive the listing stops at the next '/':\n"
    "deeper keys are shown once as \"PRE folder/\" and names are shown relative to the\n"
    "PREFIX's folder, as the AWS CLI shows them. Without an argument it lists the buckets\n"
    "of the account: creation date and time (UTC) and name. Control characters in names are\n"
    "shown as \\xNN.\n\n"
    "Options:\n"
    "  -r, --recursive       list every key under PREFIX, full keys, no PRE lines\n"
    "  --human-readable      sizes as 1.5 MiB instead of bytes\n"
    "  --summarize           end with the number of objects and their total size\n\n"
    "Examples:\n"
    "  s3direct ls\n"
    "  s3direct ls s3://bucket/\n"
    "  s3direct ls s3://bucket/models/ --recursive --human-readable --summarize\n";

struct ls_ctx {
    const struct cli_opts *o;
    size_t strip; /* bytes of each key not shown (the PREFIX's folder part) */
    uint64_t objects, bytes;
};

static int entry_cb(void *user, const struct s3d_list_entry *e)
{
    struct ls_ctx *x = user;
    const char *name = e->key;
    char when[32], size[24];

    if (strlen(name) >= x->strip)
        name += x->strip;
    if (e->is_prefix) {
        printf("%30s ", "PRE");
        cli_put_key(stdout, name);
        putchar('\n');
        return 0;
    }
    x->objects++;
    x->bytes += e->size;
    if (x->o->human)
        cli_human_size(e->size, size, sizeof(size));
    else
        snprintf(size, sizeof(size), "%llu", (unsigned long long)e->size);
    printf("%s %10s ", cli_format_time(e->last_modified, when, sizeof(when)), size);
    cli_put_key(stdout, name);
    putchar('\n');
    return 0;
}

static int bucket_cb(void *user, const struct s3d_bucket_entry *e)
{
    char when[32];

    (void)user;
    printf("%s ", cli_format_time(e->creation_date, when, sizeof(when)));
    cli_put_key(stdout, e->name);
    putchar('\n');
    return 0;
}

/* ls without an argument: ListBuckets, as "aws s3 ls" prints it. */
static int list_buckets(const struct cli_opts *o)
{
    struct s3d_client *c = NULL;
    int rc;

    if (o->recursive || o->summarize)
        return cli_usage_error("ls", "--recursive and --summarize need s3://BUCKET[/PREFIX]");
    if (cli_client(o, &c) < 0)
        return CLI_EXIT_FAIL;
    rc = s3d_list_buckets(c, bucket_cb, NULL);
    if (rc < 0) {
        fflush(stdout);
        cli_fail(rc);
    }
    s3d_client_free(c);
    if (rc < 0)
        return CLI_EXIT_FAIL;
    if (fflush(stdout) != 0)
        return cli_error("writing the listing failed");
    return 0;
}

static int run(const struct cli_opts *o)
{
    char bucket[CLI_BUCKET_CAP], prefix[CLI_KEY_CAP], total[24];
    struct ls_ctx x = {o, 0, 0, 0};
    struct s3d_client *c = NULL;
    const char *slash;
    int rc;

    if (o->nargs == 0)
        return list_buckets(o);
    if (!cli_is_s3(o->args[0]))
        return cli_usage_error("ls", "\"%s\" is not an s3:// URI", o->args[0]);
    if (cli_split_uri(o->args[0], bucket, prefix) < 0)
        return CLI_EXIT_FAIL;
    if (!o->recursive) {
        slash = strrchr(prefix, '/');
        x.strip = slash ? (size_t)(slash - prefix) + 1 : 0;
    }
    if (cli_client(o, &c) < 0)
        return CLI_EXIT_FAIL;
    rc = s3d_list_objects(c, bucket, prefix, o->recursive ? NULL : "/", entry_cb, &x);
    if (rc < 0) {
        fflush(stdout);
        cli_fail(rc);
    }
    s3d_client_free(c);
    if (rc < 0)
        return CLI_EXIT_FAIL;
    if (o->summarize) {
        if (o->human)
            cli_human_size(x.bytes, total, sizeof(total));
        else
            snprintf(total, sizeof(total), "%llu", (unsigned long long)x.bytes);
        printf("\nTotal Objects: %llu\n   Total Size: %s\n", (unsigned long long)x.objects, total);
    }
    if (fflush(stdout) != 0)
        return cli_error("writing the listing failed");
    return 0;
}

const struct cli_command cli_cmd_ls = {
    .name = "ls",
    .summary = "list objects under s3://BUCKET[/PREFIX], or the buckets without an argument",
    .usage = usage,
    .flags = CLI_F_RECURSIVE | CLI_F_HUMAN | CLI_F_SUMMARIZE,
    .min_args = 0,
    .max_args = 1,
    .run = run,
};
