/* test_ckpt_shards_parallel.c - a sharded save to S3 uploads several shards at once: through a
 * relay that counts requests in flight, a save of 4 shards of 2 parts each (5 MiB parts) must
 * have more than 2 requests in flight at some point (one shard at a time, as before, never has
 * more than its 2 parts); with max_concurrency 3, at most 3 shards go at once and their
 * parts share the client's one budget of 3, so the relay sees at most 6 (the budget, plus
 * what it does not hold back: each shard's CreateMultipartUpload and Complete, and each
 * transfer's right to run one request), never the 8 of four shards with a budget each; the
 * checkpoint then loads whole. Counts, not times. */
#include "testutil.h"
#include "ckpt_util.h"
#include "s3direct/object.h"
#include "tproxy.h"

#define MiB   (1024u * 1024u)
#define NT    8
#define ELEMS ((5 * MiB - 8192) / 4) /* 2 tensors and the header: a shard of 2 parts */

struct keys {
    char v[16][256];
    int n;
};

static int collect(void *user, const struct s3d_list_entry *e)
{
    struct keys *k = user;
    if (k->n < 16)
        snprintf(k->v[k->n++], sizeof(k->v[0]), "%s", e->key);
    return 0;
}

/* The OSD keeps data in RAM: remove what the save wrote. */
static void remove_all(struct s3d_client *c, const char *bucket)
{
    struct keys k;
    memset(&k, 0, sizeof(k));
    CHECK_OK(s3d_list_objects(c, bucket, "", NULL, collect, &k));
    for (int i = 0; i < k.n; i++)
        CHECK_OK(s3d_delete_object(c, bucket, k.v[i]));
    CHECK_OK(s3d_delete_bucket(c, bucket));
}

static void save_through(const char *ep, uint32_t conc, const struct t_tensors *ts, int *peak_out,
                         const char *name)
{
    struct s3d_client_options o;
    struct s3d_client *c = NULL;
    struct s3d_write_options wo;
    struct tproxy_opts po;
    struct tproxy *px;
    char host[256], bucket[128], uri[256];
    int port;

    tproxy_parse_endpoint(ep, host, sizeof(host), &port);
    memset(&po, 0, sizeof(po));
    po.cut_s2c_after = po.cut_c2s_after = po.stall_s2c_after = -1;
    px = tproxy_start(host, port, &po);
    memset(&o, 0, sizeof(o));
    o.endpoint_url = tproxy_url(px);
    o.part_size = 5 * MiB;
    o.max_concurrency = conc;
    CHECK_OK(s3d_client_new(&o, &c));
    t_s3_bucket(c, name, bucket, sizeof(bucket));
    snprintf(uri, sizeof(uri), "s3://%s/ckpt/model.safetensors.index.json", bucket);
    memset(&wo, 0, sizeof(wo));
    wo.max_shard_size = 2 * ELEMS * 4;
    CHECK_OK(s3d_checkpoint_write(c, uri, ts->src, ts->n, NULL, 0, &wo));
    *peak_out = tproxy_peak_in_flight(px);
    t_verify_checkpoint(c, uri, ts, -1);
    {
        struct s3d_reader *r = NULL;
        CHECK_OK(s3d_reader_open(c, uri, &r));
        CHECK(s3d_reader_num_shards(r) == NT / 2);
        s3d_reader_close(r);
    }
    remove_all(c, bucket);
    s3d_client_free(c);
    tproxy_stop(px);
}

int main(void)
{
    const char *ep = t_s3_endpoint();
    struct t_tensors ts;
    int peak = 0;

    /* NT tensors of 5 MiB: t_make_tensors makes mixed sizes, so build them here. */
    memset(&ts, 0, sizeof(ts));
    ts.n = NT;
    ts.src = calloc(NT, sizeof(*ts.src));
    ts.shapes = calloc(NT, sizeof(*ts.shapes));
    ts.names = calloc(NT, sizeof(*ts.names));
    ts.data = calloc(NT, sizeof(*ts.data));
    CHECK(ts.src && ts.shapes && ts.names && ts.data);
    for (size_t i = 0; i < NT; i++) {
        ts.names[i] = malloc(32);
        ts.data[i] = malloc((size_t)ELEMS * 4);
        CHECK(ts.names[i] && ts.data[i]);
        snprintf(ts.names[i], 32, "w.%zu", i);
        t_fill_random(ts.data[i], (size_t)ELEMS * 4, 100 + i);
        ts.shapes[i][0] = ELEMS;
        ts.src[i] = (struct s3d_tensor_src){.name = ts.names[i],
                                            .dtype = S3D_DTYPE_F32,
                                            .ndim = 1,
                                            .shape = ts.shapes[i],
                                            .ptr = ts.data[i],
                                            .device = -1,
                                            .nbytes = (uint64_t)ELEMS * 4};
    }

    save_through(ep, 0, &ts, &peak, "shpar");
    printf("default concurrency: peak %d requests in flight\n", peak);
    if (peak <= 2)
        t_fail(__FILE__, __LINE__, "a 4-shard save had at most %d requests in flight", peak);

    save_through(ep, 3, &ts, &peak, "shpar3");
    printf("max_concurrency 3: peak %d requests in flight\n", peak);
    if (peak > 6)
        t_fail(__FILE__, __LINE__, "%d requests in flight with a cap of 3", peak);

    t_free_tensors(&ts);
    printf("ok\n");
    return 0;
}
