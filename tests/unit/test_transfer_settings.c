/* test_transfer_settings.c - the precedence of a transfer's settings (issue 38, item 4), as a
 * table: the call's argument (struct s3d_transfer_options), else the client's option, else
 * the profile's s3 section (~/.aws/config), else the default. One function folds the argument
 * over the client (s3d_transfer_settings, api_transfer_int.h); s3d_client_new folds the
 * option over the profile and the default (client.c). Byte transfers and upload streams
 * both resolve them through s3d_topts_resolve, which also bounds them: an argument over a
 * limit is the same S3D_EINVAL for an upload stream as for any other transfer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/compiler.h"
#include "engine/api_transfer_int.h"
#include "engine/client_impl.h"
#include "s3direct/client.h"
#include "s3direct/transfer.h"
#include "testutil.h"

#define MiB (1ull << 20)

/* The profile's values and the client's options: distinct, so a row shows which one won. */
#define PROFILE_CONC 20u
#define PROFILE_PART (16 * MiB)
#define OPTION_CONC  5u
#define OPTION_PART  (6 * MiB)
#define ARG_CONC     3u
#define ARG_PART     (7 * MiB)

struct row {
    int profile, option, arg; /* which sources set max_concurrency and part_size */
    uint32_t conc;
    uint64_t part;
};

static const struct row rows[] = {
    {0, 0, 0, S3D_DEFAULT_CONCURRENCY, S3D_DEFAULT_PART_SIZE},
    {1, 0, 0, PROFILE_CONC, PROFILE_PART},
    {0, 1, 0, OPTION_CONC, OPTION_PART},
    {1, 1, 0, OPTION_CONC, OPTION_PART},
    {0, 0, 1, ARG_CONC, ARG_PART},
    {1, 0, 1, ARG_CONC, ARG_PART},
    {0, 1, 1, ARG_CONC, ARG_PART},
    {1, 1, 1, ARG_CONC, ARG_PART},
};

static char config_path[600];

static void write_config(int with_s3)
{
    FILE *f = fopen(config_path, "w");
    CHECK(f != NULL);
    fputs("[default]\nregion = r1\n", f);
    if (with_s3)
        fprintf(f, "s3 =\n  max_concurrent_requests = %u\n  multipart_chunksize = %lluMiB\n",
                PROFILE_CONC, (unsigned long long)(PROFILE_PART / MiB));
    fclose(f);
}

static void check_row(const struct row *r)
{
    struct s3d_client_options co = {.struct_size = sizeof(co)};
    struct s3d_transfer_options t = {.struct_size = sizeof(t)};
    struct s3d_client *c = NULL;
    struct s3d_settings set;
    struct topts o;
    /* The defaults bow to ulimit -n (s3d_fd_clamp), as every client's level does. */
    uint32_t conc = s3d_fd_clamp(r->conc);

    write_config(r->profile);
    co.endpoint_url = "http://127.0.0.1:9"; /* nothing is sent */
    co.device = -1;
    if (r->option) {
        co.max_concurrency = OPTION_CONC;
        co.part_size = OPTION_PART;
    }
    if (r->arg) {
        t.max_concurrency = ARG_CONC;
        t.part_size = ARG_PART;
    }
    CHECK_OK(s3d_client_new(&co, &c));
    s3d_transfer_settings(c, &t, &set);
    if (set.max_conc != conc || set.part_size != r->part)
        t_fail(__FILE__, __LINE__,
               "profile %d, option %d, argument %d: max_concurrency %u, part_size %llu; "
               "expected %u, %llu",
               r->profile, r->option, r->arg, set.max_conc, (unsigned long long)set.part_size, conc,
               (unsigned long long)r->part);
    /* The byte transfers' options resolve through it (the fd clamp aside: a few
     * descriptors are open here, far below the limit). */
    CHECK_OK(s3d_topts_resolve(c, &t, &o));
    CHECK(o.max_conc == conc);
    CHECK_EQ_U64(o.part_size, r->part);
    /* No options at all (NULL) are the client's settings. */
    if (!r->arg) {
        CHECK_OK(s3d_topts_resolve(c, NULL, &o));
        CHECK(o.max_conc == conc);
        CHECK_EQ_U64(o.part_size, r->part);
    }
    s3d_client_free(c);
}

/* An argument over a limit fails the same way, with the same message, whether the transfer
 * is an upload stream or an upload from a buffer; nothing is sent (port 9). */
static void check_limits(void)
{
    struct s3d_client_options co = {.struct_size = sizeof(co)};
    struct s3d_transfer_options t = {.struct_size = sizeof(t)};
    struct s3d_upload_stream *s = NULL;
    struct s3d_client *c = NULL;
    char msg[256];
    static const char byte = 'x';

    write_config(0);
    co.endpoint_url = "http://127.0.0.1:9";
    co.device = -1;
    CHECK_OK(s3d_client_new(&co, &c));
    t.max_concurrency = 5000;
    CHECK_ERR(s3d_upload_from_buffer(c, "bucket", "key", &byte, 1, &t), S3D_EINVAL);
    snprintf(msg, sizeof(msg), "%s", s3d_last_error_message());
    CHECK_MSG_HAS("max_concurrency 5000 is over 1024");
    CHECK_ERR(s3d_upload_stream_new(c, "bucket", "key", &t, &s), S3D_EINVAL);
    CHECK(s == NULL);
    CHECK(strcmp(s3d_last_error_message(), msg) == 0);
    t.max_concurrency = 0;
    t.part_size = 6ull << 30;
    CHECK_ERR(s3d_upload_stream_new(c, "bucket", "key", &t, &s), S3D_EINVAL);
    CHECK_MSG_HAS("part_size 6442450944 is over 5 GiB");
    CHECK(s == NULL);
    /* At the limit: a stream (nothing sent until its first write). */
    t.part_size = 0;
    t.max_concurrency = 1024;
    CHECK_OK(s3d_upload_stream_new(c, "bucket", "key", &t, &s));
    s3d_upload_stream_free(s);
    s3d_client_free(c);
}

int main(void)
{
    static const char *const env_vars[] = {
        "AWS_PROFILE",         "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3", "AWS_CA_BUNDLE",       "AWS_SHARED_CREDENTIALS_FILE",
    };
    for (size_t i = 0; i < S3D_ARRAY_LEN(env_vars); i++)
        unsetenv(env_vars[i]);
    snprintf(config_path, sizeof(config_path), "%s/config", t_tmpdir());
    setenv("AWS_CONFIG_FILE", config_path, 1);
    for (size_t i = 0; i < S3D_ARRAY_LEN(rows); i++)
        check_row(&rows[i]);
    check_limits();
    printf("ok %zu rows\n", S3D_ARRAY_LEN(rows));
    return 0;
}
