/* test_out_structs.c - output structs that can grow (version.h): the library writes only the
 * prefix the caller's struct_size covers, never struct_size itself, and struct_size 0 means
 * the first version's layout. Every size from 1 to past sizeof is tried on a buffer whose
 * bytes past that size are a canary. HeadObject and the listing entries need the test S3
 * server; the rest runs without one (s3d_write_stats and s3d_read_stats of a local file). */
#include <stdlib.h>
#include <unistd.h>

#include "common/opts.h"
#include "testutil.h"

#define CANARY 0xA5
#define SLACK  64

/* Fills the struct at out (its struct_size already set) from ctx. */
typedef void (*fill_fn)(void *out, void *ctx);

static void check_prefixes(const char *what, size_t full, size_t v1, fill_fn fill, void *ctx)
{
    unsigned char ref[1024], buf[1024 + SLACK];
    uint32_t ss;
    size_t n, k, nonzero = 0;

    CHECK(full + SLACK <= sizeof(ref));
    /* struct_size 0: the whole first-version struct is written, nothing past it (v1 is
     * today's sizeof for a struct that has not grown). */
    memset(ref, 0, sizeof(ref));
    fill(ref, ctx);
    memcpy(&ss, ref, sizeof(ss));
    CHECK(ss == 0);
    for (k = sizeof(ss); k < v1; k++)
        nonzero += ref[k] != 0;
    CHECK(nonzero > 0);
    for (k = v1; k < sizeof(ref); k++)
        CHECK(ref[k] == 0);
    /* The reference for the prefixes: the whole of today's struct. */
    memset(ref, 0, sizeof(ref));
    ss = (uint32_t)full;
    memcpy(ref, &ss, sizeof(ss));
    fill(ref, ctx);
    memset(ref, 0, sizeof(ss));

    /* Every struct_size from 1 to past sizeof: exactly the first min(size, sizeof) bytes
     * change, with the same content as the full fill; struct_size stays as set. */
    for (n = 1; n <= full + SLACK / 2; n++) {
        size_t written = n < full ? n : full;
        memset(buf, CANARY, sizeof(buf));
        ss = (uint32_t)n;
        memcpy(buf, &ss, sizeof(ss));
        fill(buf, ctx);
        if (memcmp(buf, &ss, sizeof(ss)) != 0)
            t_fail(__FILE__, __LINE__, "%s: struct_size %zu was changed", what, n);
        for (k = sizeof(ss); k < written; k++)
            if (buf[k] != ref[k])
                t_fail(__FILE__, __LINE__, "%s: struct_size %zu: byte %zu not filled", what, n, k);
        for (k = written > sizeof(ss) ? written : sizeof(ss); k < sizeof(buf); k++)
            if (buf[k] != CANARY)
                t_fail(__FILE__, __LINE__, "%s: struct_size %zu: byte %zu written", what, n, k);
    }
    printf("%s: sizes 0 and 1..%zu ok\n", what, full + SLACK / 2);
}

static void fill_error(void *out, void *ctx)
{
    (void)ctx;
    s3d_last_error(out);
}

static void fill_config(void *out, void *ctx)
{
    CHECK_OK(s3d_client_get_config(ctx, out));
}

struct tensor_ctx {
    struct s3d_reader *r;
    size_t i;
};

static void fill_tensor(void *out, void *ctx)
{
    struct tensor_ctx *t = ctx;
    CHECK_OK(s3d_reader_tensor(t->r, t->i, out));
}

/* A save of one host tensor to a file: s3d_write_stats (bytes_buffered appended after v1). */
struct save_ctx {
    struct s3d_client *c;
    const char *path;
    const struct s3d_tensor_src *src;
};

static void fill_write_stats(void *out, void *ctx)
{
    struct save_ctx *sv = ctx;
    struct s3d_write_options wo;
    memset(&wo, 0, sizeof(wo));
    wo.stats = out;
    CHECK_OK(s3d_checkpoint_write(sv->c, sv->path, sv->src, 1, NULL, 0, &wo));
}

/* A read of tensor 0 into host memory: s3d_read_stats (bytes_buffered). */
static void fill_read_stats(void *out, void *ctx)
{
    struct tensor_ctx *t = ctx;
    static float dst[12];
    struct s3d_tensor_dest d = {0, dst, -1, sizeof(dst), 0, 0};
    struct s3d_read_options ro;
    memset(&ro, 0, sizeof(ro));
    ro.stats = out;
    CHECK_OK(s3d_reader_read(t->r, &d, 1, &ro));
}

struct head_ctx {
    struct s3d_client *c;
    const char *bucket;
};

static void fill_head(void *out, void *ctx)
{
    struct head_ctx *h = ctx;
    CHECK_OK(s3d_head_object(h->c, h->bucket, "obj", out));
}

static size_t n_entries;

static int on_entry(void *user, const struct s3d_list_entry *e)
{
    (void)user;
    CHECK(e->struct_size == sizeof(*e));
    n_entries++;
    return 0;
}

static int on_bucket(void *user, const struct s3d_bucket_entry *e)
{
    (void)user;
    CHECK(e->struct_size == sizeof(*e));
    n_entries++;
    return 0;
}

static int on_upload(void *user, const struct s3d_upload_entry *e)
{
    (void)user;
    CHECK(e->struct_size == sizeof(*e));
    n_entries++;
    return 0;
}

static void check_s3(void)
{
    struct head_ctx h;
    char bucket[128];
    struct s3d_upload_stream *s = NULL;
    static char part[5 << 20];
    struct s3d_transfer_options to = {.struct_size = sizeof(to), .part_size = 5 << 20};

    h.c = t_s3_client();
    t_s3_bucket(h.c, "outstructs", bucket, sizeof(bucket));
    h.bucket = bucket;
    CHECK_OK(s3d_upload_from_buffer(h.c, bucket, "obj", "hello", 5, NULL));
    check_prefixes("s3d_object_info", sizeof(struct s3d_object_info),
                   sizeof(struct s3d_object_info), fill_head, &h);

    n_entries = 0;
    CHECK_OK(s3d_list_objects(h.c, bucket, NULL, NULL, on_entry, NULL));
    CHECK(n_entries == 1);
    n_entries = 0;
    CHECK_OK(s3d_list_buckets(h.c, on_bucket, NULL));
    CHECK(n_entries >= 1);
    /* An upload in progress: a stream with full parts written (its worker creates the upload
     * in the background: listed until it shows, 20 s at most), then freed (which aborts it). */
    CHECK_OK(s3d_upload_stream_new(h.c, bucket, "pending", &to, &s));
    memset(part, 'x', sizeof(part));
    CHECK_OK(s3d_upload_stream_write(s, part, sizeof(part)));
    CHECK_OK(s3d_upload_stream_write(s, part, sizeof(part)));
    for (int tries = 0; tries < 200; tries++) {
        n_entries = 0;
        CHECK_OK(s3d_list_uploads(h.c, bucket, NULL, on_upload, NULL));
        if (n_entries > 0)
            break;
        usleep(100 * 1000);
    }
    CHECK(n_entries == 1);
    s3d_upload_stream_free(s);
    printf("list entries: struct_size set by the library\n");
    s3d_client_free(h.c);
}

int main(void)
{
    struct s3d_client *c = NULL;
    struct s3d_client_options o;
    struct tensor_ctx t;
    char path[512];
    int64_t shape[2] = {3, 4};
    static float data[12];
    struct s3d_tensor_src src = {"w", S3D_DTYPE_F32, 2, shape, data, -1, sizeof(data)};

    /* The first-version layouts are today's sizes (struct_size 0 means them). */
    char b[8], k[8];
    CHECK_ERR(s3d_uri_parse("http://not-s3", b, sizeof(b), k, sizeof(k)), S3D_EURI);
    check_prefixes("s3d_error_info", sizeof(struct s3d_error_info), sizeof(struct s3d_error_info),
                   fill_error, NULL);

    memset(&o, 0, sizeof(o));
    o.endpoint_url = "http://127.0.0.1:9";
    o.region = "eu-west-3";
    CHECK_OK(s3d_client_new(&o, &c));
    check_prefixes("s3d_client_config", sizeof(struct s3d_client_config),
                   S3D_SIZE_THROUGH(struct s3d_client_config, gpu_available), fill_config, c);

    snprintf(path, sizeof(path), "%s/one.safetensors", t_tmpdir());
    struct save_ctx sv = {c, path, &src};
    check_prefixes("s3d_write_stats", sizeof(struct s3d_write_stats), S3D_WRITE_STATS_SIZE_V1,
                   fill_write_stats, &sv);
    CHECK(S3D_WRITE_STATS_SIZE_V1 < sizeof(struct s3d_write_stats));
    CHECK_OK(s3d_reader_open(c, path, &t.r));
    t.i = 0;
    check_prefixes("s3d_tensor_info", sizeof(struct s3d_tensor_info),
                   sizeof(struct s3d_tensor_info), fill_tensor, &t);
    check_prefixes("s3d_read_stats", sizeof(struct s3d_read_stats), S3D_READ_STATS_SIZE_V1,
                   fill_read_stats, &t);
    s3d_reader_close(t.r);
    unlink(path);
    s3d_client_free(c);

    if (getenv("AWS_ENDPOINT_URL") != NULL)
        check_s3();
    else
        printf("no test S3 server: HeadObject and listing entries not checked\n");
    printf("ok\n");
    return 0;
}
