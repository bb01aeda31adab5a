/* cmd_ls.c - s3direct ls: objects and common prefixes under s3://bucket/prefix. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: s3direct ls [s3://BUCKET[/PREFIX]] [OPTIONS]\n\n"
    "Lists the objects under PREFIX, one per line: date and time of the last change (UTC),\n"
    "size in bytes, and the key. Without --recursive the listing stops at the next '/':\n"
    "deeper keys are shown once as \"PRE folder/\" and names are shown relative to the\n"
    "PREFIX's folder, as the AWS CLI shows them. Without an argument it lists the buckets\n"
    "of the account: creation date and time (UTC) and name. Control characters in names are\n"
    "shown as \\xNN. As aws s3 ls: each page of the listing shows its PRE lines first, and\n"
    "the exit status is 1 when a PREFIX was given and nothing matches it (0 for an empty\n"
    "bucket).\n\n"
    "Options:\n"
    "  -r, --recursive       list every key under PREFIX, full keys, no PRE lines\n"
    "  --human-readable      sizes as aws s3 ls shows them (10 Bytes, 1.5 MiB), not bytes\n"
    "  --summarize           end with the number of objects and their total size\n\n"
    "Examples:\n"
    "  s3direct ls\n"
    "  s3direct ls s3://bucket/\n"
    "  s3direct ls s3://bucket/models/ --recursive --human-readable --summarize\n";

/* Object lines of the current page, held until its common prefixes are printed: the server
 * sends a page's objects first, aws s3 ls prints its PRE lines first. At most one page (1,000
 * entries). */
struct ls_line {
    char *name;
    uint64_t size;
    int64_t last_modified;
};

struct ls_ctx {
    const struct cli_opts *o;
    size_t strip; /* bytes of each key not shown (the PREFIX's folder part) */
    uint64_t objects, bytes, prefixes;
    struct ls_line *held;
    size_t nheld, cap;
    int oom;
};

static void print_object(const struct ls_ctx *x, const struct ls_line *l)
{
    char when[32], size[24];

    if (x->o->human)
        cli_aws_size(l->size, size, sizeof(size));
    else
        snprintf(size, sizeof(size), "%llu", (unsigned long long)l->size);
    printf("%s %10s ", cli_format_time(l->last_modified, when, sizeof(when)), size);
    cli_put_key(stdout, l->name);
    putchar('\n');
}

/* Prints the held object lines (the page's PRE lines are out) and forgets them. */
static void flush_held(struct ls_ctx *x)
{
    size_t i;

    for (i = 0; i < x->nheld; i++) {
        print_object(x, &x->held[i]);
        free(x->held[i].name);
    }
    x->nheld = 0;
}

static int hold(struct ls_ctx *x, const char *name, const struct s3d_list_entry *e)
{
    if (x->nheld == x->cap) {
        size_t cap = x->cap ? x->cap * 2 : 64;
        struct ls_line *v = realloc(x->held, cap * sizeof(*v));
        if (v == NULL)
            return -1;
        x->held = v;
        x->cap = cap;
    }
    if ((x->held[x->nheld].name = strdup(name)) == NULL)
        return -1;
    x->held[x->nheld].size = e->size;
    x->held[x->nheld].last_modified = e->last_modified;
    x->nheld++;
    return 0;
}

static int entry_cb(void *user, const struct s3d_list_entry *e)
{
    struct ls_ctx *x = user;
    const char *name = e->key;
    struct ls_line now;
    /* A library older than page_last: each object line as it comes (objects before PRE). */
    const int paged =
        e->struct_size >= offsetof(struct s3d_list_entry, page_last) + sizeof(e->page_last);

    if (strlen(name) >= x->strip)
        name += x->strip;
    if (e->is_prefix) {
        x->prefixes++;
        printf("%30s ", "PRE");
        cli_put_key(stdout, name);
        putchar('\n');
    } else {
        x->objects++;
        x->bytes += e->size;
        now.name = (char *)name;
        now.size = e->size;
        now.last_modified = e->last_modified;
        /* A page without common prefixes (every --recursive page) is printed as it comes. */
        if (x->o->recursive || !paged)
            print_object(x, &now);
        else if (hold(x, name, e) != 0) {
            x->oom = 1;
            return 1;
        }
    }
    if (paged && e->page_last)
        flush_held(x);
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
    struct ls_ctx x;
    struct s3d_client *c = NULL;
    const char *slash;
    int rc;

    if (o->nargs == 0)
        return list_buckets(o);
    if (!cli_is_s3(o->args[0]))
        return cli_usage_error("ls", "\"%s\" is not an s3:// URI", o->args[0]);
    if (cli_split_uri(o->args[0], bucket, prefix) < 0)
        return CLI_EXIT_FAIL;
    memset(&x, 0, sizeof(x));
    x.o = o;
    if (!o->recursive) {
        slash = strrchr(prefix, '/');
        x.strip = slash ? (size_t)(slash - prefix) + 1 : 0;
    }
    if (cli_client(o, &c) < 0)
        return CLI_EXIT_FAIL;
    rc = s3d_list_objects(c, bucket, prefix, o->recursive ? NULL : "/", entry_cb, &x);
    flush_held(&x); /* a listing stopped in the middle of a page */
    free(x.held);
    if (rc < 0) {
        fflush(stdout);
        cli_fail(rc);
    }
    s3d_client_free(c);
    if (rc < 0)
        return CLI_EXIT_FAIL;
    if (x.oom) {
        fflush(stdout);
        return cli_error("out of memory holding a page of the listing");
    }
    if (o->summarize) {
        if (o->human)
            cli_aws_size(x.bytes, total, sizeof(total));
        else
            snprintf(total, sizeof(total), "%llu", (unsigned long long)x.bytes);
        printf("\nTotal Objects: %llu\n   Total Size: %s\n", (unsigned long long)x.objects, total);
    }
    if (fflush(stdout) != 0)
        return cli_error("writing the listing failed");
    /* As aws s3 ls: a PREFIX that matches nothing is exit status 1, with no message (an empty
     * bucket, listed without a PREFIX, is 0). */
    return prefix[0] != '\0' && x.objects == 0 && x.prefixes == 0 ? CLI_EXIT_FAIL : 0;
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
