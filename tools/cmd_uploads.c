/* cmd_uploads.c - incomplete multipart uploads: "s3direct s3api list-multipart-uploads" and
 * "s3direct s3api abort-multipart-upload" (the AWS CLI's spelling and JSON output), and
 * "s3direct abort-uploads" (every upload under a prefix older than an age).
 *
 * An upload that was neither completed nor aborted (a SIGKILLed client, a server that went
 * away during the abort) keeps its parts stored and billed until someone aborts it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static const char s3api_usage[] =
    "usage: s3direct s3api list-multipart-uploads --bucket BUCKET [--prefix PREFIX]\n"
    "       s3direct s3api abort-multipart-upload --bucket BUCKET --key KEY --upload-id ID\n\n"
    "The two S3 API calls as \"aws s3api\" spells them. list-multipart-uploads prints the\n"
    "uploads in progress as JSON ({\"Uploads\": [{\"UploadId\", \"Key\", \"Initiated\",\n"
    "\"StorageClass\"}]}, all pages); abort-multipart-upload aborts one upload (its parts are\n"
    "deleted) and prints nothing.\n\n"
    "Options:\n"
    "  --bucket BUCKET       the bucket\n"
    "  --prefix PREFIX       only uploads whose key starts with PREFIX\n"
    "  --key KEY             the upload's key\n"
    "  --upload-id ID        the upload's id (from list-multipart-uploads)\n\n"
    "Examples:\n"
    "  s3direct s3api list-multipart-uploads --bucket bucket --prefix ckpt/\n"
    "  s3direct s3api abort-multipart-upload --bucket bucket --key ckpt/a.bin --upload-id 2~x\n";

static const char abort_usage[] =
    "usage: s3direct abort-uploads s3://BUCKET[/PREFIX] --older-than DURATION [--dryrun]\n\n"
    "Aborts every incomplete multipart upload whose key starts with PREFIX and that was\n"
    "started more than DURATION ago (by the server's clock against this machine's), printing\n"
    "one \"abort: s3://BUCKET/KEY (upload ID, started TIME UTC)\" line each. It cleans up after\n"
    "clients that were killed or lost the server during an upload. An upload still in\n"
    "progress elsewhere is aborted too if it is old enough: pick DURATION longer than your\n"
    "longest upload. Uploads the server gives no start time for are kept.\n\n"
    "Options:\n"
    "  --older-than DURATION  required: 90s, 30m, 24h, 7d, 2w, 1d12h, or 0 for every upload\n"
    "  --dryrun               print what would be aborted, abort nothing\n\n"
    "Examples:\n"
    "  s3direct abort-uploads s3://bucket/checkpoints/ --older-than 1d --dryrun\n"
    "  s3direct abort-uploads s3://bucket --older-than 0\n";

static const char *iso_time(int64_t epoch_s, char *buf, size_t cap)
{
    time_t t = (time_t)epoch_s;
    struct tm tm;

    if (epoch_s == 0 || gmtime_r(&t, &tm) == NULL)
        return NULL;
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%S+00:00", &tm);
    return buf;
}

/* ---- s3api list-multipart-uploads ----------------------------------------------------- */

struct list_json {
    size_t n;
};

static int list_json_cb(void *user, const struct s3d_upload_entry *e)
{
    struct list_json *x = user;
    char when[40];

    printf("%s\n        {\n            \"UploadId\": ", x->n ? "," : "");
    cli_json_string(stdout, e->upload_id);
    printf(",\n            \"Key\": ");
    cli_json_string(stdout, e->key);
    if (iso_time(e->initiated, when, sizeof(when)) != NULL)
        printf(",\n            \"Initiated\": \"%s\"", when);
    if (e->storage_class != NULL) {
        printf(",\n            \"StorageClass\": ");
        cli_json_string(stdout, e->storage_class);
    }
    printf("\n        }");
    x->n++;
    return 0;
}

static int list_uploads_json(const struct cli_opts *o, struct s3d_client *c)
{
    struct list_json x = {0};
    int rc;

    /* The document is printed as the pages arrive; on a failure it is left unfinished (and
     * the exit status says so), as a truncated listing must not look complete. */
    printf("{\n    \"Bucket\": ");
    cli_json_string(stdout, o->bucket);
    if (o->prefix != NULL) {
        printf(",\n    \"Prefix\": ");
        cli_json_string(stdout, o->prefix);
    }
    printf(",\n    \"Uploads\": [");
    rc = s3d_list_uploads(c, o->bucket, o->prefix, list_json_cb, &x);
    if (rc < 0) {
        printf("\n");
        fflush(stdout);
        return cli_fail(rc);
    }
    printf("%s]\n}\n", x.n ? "\n    " : "");
    if (fflush(stdout) != 0)
        return cli_error("writing the listing failed");
    return 0;
}

static int s3api_run(const struct cli_opts *o)
{
    const char *sub = o->args[0];
    struct s3d_client *c = NULL;
    int rc, list;

    list = strcmp(sub, "list-multipart-uploads") == 0;
    if (!list && strcmp(sub, "abort-multipart-upload") != 0)
        return cli_usage_error("s3api",
                               "unknown operation \"%s\" (known: list-multipart-uploads, "
                               "abort-multipart-upload)",
                               sub);
    if (o->bucket == NULL)
        return cli_usage_error("s3api", "%s needs --bucket", sub);
    if (list && (o->key != NULL || o->upload_id != NULL))
        return cli_usage_error("s3api", "list-multipart-uploads takes --prefix, not --key or "
                                        "--upload-id");
    if (!list && (o->key == NULL || o->upload_id == NULL))
        return cli_usage_error("s3api", "abort-multipart-upload needs --key and --upload-id");
    if (!list && o->prefix != NULL)
        return cli_usage_error("s3api", "abort-multipart-upload takes no --prefix");
    if (cli_client(o, &c) < 0)
        return CLI_EXIT_FAIL;
    if (list) {
        rc = list_uploads_json(o, c);
    } else {
        rc = s3d_abort_multipart_upload(c, o->bucket, o->key, o->upload_id);
        rc = rc < 0 ? cli_fail(rc) : 0;
    }
    s3d_client_free(c);
    return rc;
}

const struct cli_command cli_cmd_s3api = {
    .name = "s3api",
    .summary = "list-multipart-uploads, abort-multipart-upload (as aws s3api)",
    .usage = s3api_usage,
    .flags = CLI_F_S3API,
    .min_args = 1,
    .max_args = 1,
    .run = s3api_run,
};

/* ---- abort-uploads -------------------------------------------------------------------- */

struct upload {
    char *key;
    char *id;
    int64_t initiated;
};

struct uploads {
    struct upload *v;
    size_t n, cap;
    int oom;
};

static int gather_cb(void *user, const struct s3d_upload_entry *e)
{
    struct uploads *u = user;

    if (u->n == u->cap) {
        size_t cap = u->cap ? u->cap * 2 : 64;
        struct upload *v = realloc(u->v, cap * sizeof(*v));
        if (v == NULL)
            goto oom;
        u->v = v;
        u->cap = cap;
    }
    u->v[u->n].key = strdup(e->key);
    u->v[u->n].id = strdup(e->upload_id);
    u->v[u->n].initiated = e->initiated;
    if (u->v[u->n].key == NULL || u->v[u->n].id == NULL) {
        free(u->v[u->n].key);
        free(u->v[u->n].id);
        goto oom;
    }
    u->n++;
    return 0;
oom:
    u->oom = 1;
    return 1;
}

static void uploads_free(struct uploads *u)
{
    size_t i;

    for (i = 0; i < u->n; i++) {
        free(u->v[i].key);
        free(u->v[i].id);
    }
    free(u->v);
}

static int abort_run(const struct cli_opts *o)
{
    char bucket[CLI_BUCKET_CAP], prefix[CLI_KEY_CAP], when[32];
    struct uploads u = {NULL, 0, 0, 0};
    struct s3d_client *c = NULL;
    int64_t now = (int64_t)time(NULL);
    size_t i, failed = 0, unknown = 0;
    int rc;

    if (!cli_is_s3(o->args[0]))
        return cli_usage_error("abort-uploads", "\"%s\" is not an s3:// URI", o->args[0]);
    if (o->older_than < 0)
        return cli_usage_error("abort-uploads",
                               "--older-than is required (e.g. 1d; 0 aborts every upload)");
    if (cli_split_uri(o->args[0], bucket, prefix) < 0)
        return CLI_EXIT_FAIL;
    if (cli_client(o, &c) < 0)
        return CLI_EXIT_FAIL;
    /* The whole list first, then the aborts: aborting while paging through the markers could
     * make a server skip entries. */
    rc = s3d_list_uploads(c, bucket, prefix, gather_cb, &u);
    if (rc < 0) {
        rc = cli_fail(rc);
        goto out;
    }
    if (u.oom) {
        rc = cli_error("out of memory listing the uploads of s3://%s/%s", bucket, prefix);
        goto out;
    }
    for (i = 0; i < u.n; i++) {
        const struct upload *e = &u.v[i];
        if (e->initiated == 0) {
            unknown++;
            continue;
        }
        if (now - e->initiated < o->older_than)
            continue;
        if (!o->dryrun) {
            int arc = s3d_abort_multipart_upload(c, bucket, e->key, e->id);
            /* Completed or aborted by someone else since the listing: nothing left to do. */
            if (arc == S3D_ENOUPLOAD)
                continue;
            if (arc < 0) {
                cli_fail(arc);
                failed++;
                continue;
            }
        }
        if (!o->quiet) {
            printf("%sabort: s3://%s/", o->dryrun ? "(dryrun) " : "", bucket);
            cli_put_key(stdout, e->key);
            printf(" (upload %s, started %s UTC)\n", e->id,
                   cli_format_time(e->initiated, when, sizeof(when)));
        }
    }
    if (unknown > 0 && !o->quiet)
        fprintf(stderr, "s3direct: kept %zu upload%s the server gave no start time for\n", unknown,
                unknown == 1 ? "" : "s");
    if (fflush(stdout) != 0)
        rc = cli_error("writing the output failed");
    else
        rc = failed ? CLI_EXIT_FAIL : 0;
out:
    uploads_free(&u);
    s3d_client_free(c);
    return rc;
}

const struct cli_command cli_cmd_abort_uploads = {
    .name = "abort-uploads",
    .summary = "abort incomplete multipart uploads under a prefix older than an age",
    .usage = abort_usage,
    .flags = CLI_F_OLDER_THAN | CLI_F_DRYRUN,
    .min_args = 1,
    .max_args = 1,
    .run = abort_run,
};
