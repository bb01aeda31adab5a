/* common.c - the client built from the options, error lines, URIs and formatting. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static const char *u64_str(uint64_t v, char buf[24])
{
    snprintf(buf, 24, "%llu", (unsigned long long)v);
    return buf;
}

int cli_client(const struct cli_opts *o, struct s3d_client **out)
{
    struct s3d_client_options co;
    struct s3d_client_config cfg = {.struct_size = sizeof(struct s3d_client_config)};
    char tbuf[24];
    int rc;

    /* --debug also turns on the library's debug log (retries, unverified downloads), unless
     * S3D_LOG already says otherwise. Before the client: the level is read once. */
    if (o->debug)
        setenv("S3D_LOG", "debug", 0);
    memset(&co, 0, sizeof(co));
    co.struct_size = sizeof(co);
    co.endpoint_url = o->endpoint_url;
    co.region = o->region;
    co.profile = o->profile;
    co.ca_bundle = o->ca_bundle;
    /* Set by the `s3direct` console script of a pip install to certifi's file (the wheel's
     * bundled libcurl has Debian's CA path compiled in): used as the Python layer uses it, after
     * any configured bundle and SSL_CERT_FILE (src/s3/cabundle.h). */
    co.default_ca_bundle = getenv("S3D_DEFAULT_CA_BUNDLE");
    co.anonymous = o->no_sign_request;
    co.no_verify_ssl = o->no_verify_ssl;
    /* --concurrency N is exactly N (as the AWS CLI's max_concurrent_requests threads);
     * without it the level adapts, up to --max-concurrency. */
    co.max_concurrency = o->concurrency ? o->concurrency : o->max_concurrency;
    co.min_concurrency = o->concurrency;
    co.target_throughput = o->target_throughput;
    co.part_size = o->part_size;
    co.max_attempts = o->max_attempts;
    /* The CLI moves bytes between S3 and files or memory only: no GPU context is needed, and
     * skipping the driver probe keeps start-up quick on GPU machines. */
    co.device = -1;
    /* As the AWS CLI (urllib3's InsecureRequestWarning), on every run and even with --quiet:
     * a setting that lets anyone on the path read and change the data must not go unseen in
     * a script's log. */
    if (o->no_verify_ssl)
        fprintf(stderr, "s3direct: warning: --no-verify-ssl: TLS certificates are not verified; "
                        "anyone on the network path can read and change the data\n");
    rc = s3d_client_new(&co, out);
    if (rc < 0) {
        *out = NULL;
        return cli_fail(rc), rc;
    }
    if ((rc = s3d_client_set_cancel(*out, cli_stop_token())) < 0) {
        s3d_client_free(*out);
        *out = NULL;
        return cli_fail(rc), rc;
    }
    if (o->debug && s3d_client_get_config(*out, &cfg) == 0) {
        fprintf(stderr,
                "s3direct: endpoint %s, region %s, credentials from %s%s%s, %s-style, "
                "concurrency %s%u%s%s, part size %llu, multipart threshold %llu\n",
                cfg.endpoint_url, cfg.region, cfg.credential_source,
                cfg.access_key_id[0] ? " key " : "", cfg.access_key_id,
                cfg.addressing == S3D_ADDRESSING_VIRTUAL ? "virtual-host" : "path",
                cfg.min_concurrency == cfg.max_concurrency ? "fixed at " : "adaptive up to ",
                cfg.max_concurrency, cfg.target_throughput ? ", target bytes/s " : "",
                cfg.target_throughput ? u64_str(cfg.target_throughput, tbuf) : "",
                (unsigned long long)cfg.part_size, (unsigned long long)cfg.multipart_threshold);
    }
    return 0;
}

int cli_fail(int rc)
{
    const char *m = s3d_last_error_message();

    if (m == NULL || m[0] == '\0')
        m = s3d_strerror(rc);
    cli_line_begin();
    if (rc == S3D_ECANCELED && cli_interrupted()) {
        fprintf(stderr, "s3direct: interrupted (%s)\n", m);
        cli_line_end();
        return cli_interrupted_exit();
    }
    fprintf(stderr, "s3direct: %s\n", m);
    cli_line_end();
    return CLI_EXIT_FAIL;
}

int cli_says(const struct cli_opts *o)
{
    return !o->quiet && (o->dryrun || !o->only_errors);
}

int cli_error(const char *fmt, ...)
{
    va_list ap;

    cli_line_begin();  /* a total progress line makes room */
    flockfile(stderr); /* one line, whole, when several files run at once */
    fputs("s3direct: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    funlockfile(stderr);
    cli_line_end();
    return CLI_EXIT_FAIL;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "s3direct %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see: s3direct %s --help)\n", cmd);
    return CLI_EXIT_USAGE;
}

int cli_is_s3(const char *s)
{
    return strncmp(s, "s3://", 5) == 0;
}

int cli_split_uri(const char *uri, char *bucket, char *key)
{
    int rc = s3d_uri_parse(uri, bucket, CLI_BUCKET_CAP, key, CLI_KEY_CAP);

    if (rc < 0)
        cli_fail(rc);
    return rc;
}

void cli_put_key(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;

    for (; *p; p++) {
        if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\x%02x", *p);
        else if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
            fprintf(f, "\\xc2\\x%02x", p[1]);
            p++;
        } else
            fputc(*p, f);
    }
}

void cli_json_string(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;

    fputc('"', f);
    for (; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

const char *cli_human_size(uint64_t bytes, char *buf, size_t cap)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    int u = 0;

    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, cap, "%.1f %s", v, units[u]);
    return buf;
}

const char *cli_aws_size(uint64_t bytes, char *buf, size_t cap)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = (double)bytes, unit = 1024;
    size_t i;

    if (bytes < 1024) {
        snprintf(buf, cap, "%llu Byte%s", (unsigned long long)bytes, bytes == 1 ? "" : "s");
        return buf;
    }
    /* awscli's human_readable_size: the first unit under which the value rounds (half to
     * even, as Python's round) below 1024. */
    for (i = 0; i + 1 < sizeof(units) / sizeof(units[0]); i++, unit *= 1024)
        if (nearbyint(v / unit) < 1024)
            break;
    snprintf(buf, cap, "%.1f %s", v / unit, units[i]);
    return buf;
}

const char *cli_format_time(int64_t epoch_s, char *buf, size_t cap)
{
    time_t t = (time_t)epoch_s;
    struct tm tm;

    if (epoch_s == 0 || gmtime_r(&t, &tm) == NULL) {
        snprintf(buf, cap, "-");
        return buf;
    }
    strftime(buf, cap, "%Y-%m-%d %H:%M:%S", &tm);
    return buf;
}

static int keys_cb(void *user, const struct s3d_list_entry *e)
{
    struct cli_keys *k = user;

    if (k->n == k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 256;
        char **keys = realloc(k->keys, cap * sizeof(*keys));
        uint64_t *sizes;
        if (keys == NULL)
            goto oom;
        k->keys = keys;
        sizes = realloc(k->sizes, cap * sizeof(*sizes));
        if (sizes == NULL)
            goto oom;
        k->sizes = sizes;
        k->cap = cap;
    }
    k->keys[k->n] = strdup(e->key);
    if (k->keys[k->n] == NULL)
        goto oom;
    k->sizes[k->n++] = e->size;
    return 0;
oom:
    k->oom = 1;
    return 1; /* stops the listing */
}

int cli_list_keys(struct s3d_client *c, const char *bucket, const char *prefix,
                  struct cli_keys *out)
{
    int rc;

    memset(out, 0, sizeof(*out));
    rc = s3d_list_objects(c, bucket, prefix, NULL, keys_cb, out);
    if (rc < 0) {
        cli_fail(rc);
        cli_keys_free(out);
        return rc;
    }
    /* keys_cb stops the listing (a success for the library) only when memory ran out. */
    if (out->oom) {
        cli_keys_free(out);
        cli_error("out of memory listing s3://%s/%s", bucket, prefix);
        return S3D_ENOMEM;
    }
    return 0;
}

void cli_keys_free(struct cli_keys *k)
{
    size_t i;

    if (k == NULL)
        return;
    for (i = 0; i < k->n; i++)
        free(k->keys[i]);
    free(k->keys);
    free(k->sizes);
    memset(k, 0, sizeof(*k));
}

void cli_transfer_opts(const struct cli_opts *o, struct cli_progress *p,
                       struct s3d_transfer_options *t)
{
    memset(t, 0, sizeof(*t));
    t->struct_size = sizeof(*t);
    t->progress = cli_progress_cb;
    t->progress_user = p;
    t->max_concurrency = 0; /* the client's (fixed or adaptive, cli_client) */
    t->part_size = o->part_size;
    t->content_type = o->content_type;
}
