/* test_ckpt_overwrite.c - a sharded checkpoint is one unit: a save that dies after replacing
 * some shards must not load as a mix of the old and the new checkpoint (each shard passes its
 * own CRCs, so only the index's generation id can tell). Local folder always; S3 when a test
 * server is configured. */
#include <unistd.h>

#include "testutil.h"

#define NT    8
#define ELEMS (256 * 1024) /* 1 MiB of F32 per tensor */
#define SHARD (2u << 20)   /* two tensors per shard: 4 shards */

struct ckpt {
    struct s3d_tensor_src src[NT];
    int64_t shape[NT][1];
    char names[NT][32];
    float *data[NT];
};

static void make(struct ckpt *k, float base)
{
    for (int i = 0; i < NT; i++) {
        snprintf(k->names[i], sizeof(k->names[i]), "layer.%d.weight", i);
        k->shape[i][0] = ELEMS;
        k->data[i] = malloc(ELEMS * sizeof(float));
        CHECK(k->data[i] != NULL);
        for (int j = 0; j < ELEMS; j++)
            k->data[i][j] = base + (float)i;
        k->src[i] = (struct s3d_tensor_src){.name = k->names[i],
                                            .dtype = S3D_DTYPE_F32,
                                            .ndim = 1,
                                            .shape = k->shape[i],
                                            .ptr = k->data[i],
                                            .device = -1,
                                            .nbytes = ELEMS * sizeof(float)};
    }
}

static void unmake(struct ckpt *k)
{
    for (int i = 0; i < NT; i++)
        free(k->data[i]);
}

/* Cancels once the save has passed the first shard and part of the second. */
static int die_in_shard_2(void *user, uint64_t done, uint64_t total)
{
    (void)user;
    (void)total;
    return done > SHARD + SHARD / 2;
}

/* Loads every tensor of uri and checks that each holds base + i throughout. */
static void check_whole(struct s3d_client *c, const char *uri, float base)
{
    struct s3d_reader *r = NULL;
    struct s3d_tensor_dest d[NT];
    float *buf = malloc((size_t)NT * ELEMS * sizeof(float));
    CHECK(buf != NULL);
    CHECK_OK(s3d_reader_open(c, uri, &r));
    CHECK(s3d_reader_num_tensors(r) == NT);
    CHECK(s3d_reader_num_shards(r) == NT * ELEMS * sizeof(float) / SHARD);
    for (int i = 0; i < NT; i++) {
        size_t idx;
        char name[32];
        snprintf(name, sizeof(name), "layer.%d.weight", i);
        CHECK_OK(s3d_reader_find(r, name, &idx));
        d[i] = (struct s3d_tensor_dest){.index = idx,
                                        .ptr = buf + (size_t)i * ELEMS,
                                        .device = -1,
                                        .capacity = ELEMS * sizeof(float)};
    }
    CHECK_OK(s3d_reader_read(r, d, NT, NULL));
    for (int i = 0; i < NT; i++)
        for (int j = 0; j < ELEMS; j += 4099)
            if (buf[(size_t)i * ELEMS + j] != base + (float)i)
                t_fail(__FILE__, __LINE__, "%s: tensor %d holds %g, expected %g", uri, i,
                       buf[(size_t)i * ELEMS + j], base + (float)i);
    s3d_reader_close(r);
    free(buf);
}

static void run(struct s3d_client *c, const char *uri)
{
    struct ckpt a, b;
    struct s3d_write_options wo;
    struct s3d_reader *r = NULL;

    make(&a, 100.0f);
    make(&b, 200.0f);
    memset(&wo, 0, sizeof(wo));
    wo.max_shard_size = SHARD;
    CHECK_OK(s3d_checkpoint_write(c, uri, a.src, NT, NULL, 0, &wo));
    check_whole(c, uri, 100.0f);

    /* A save of b dies in its second shard: shard 1 is b's, shards 2-4 and the index a's. */
    wo.progress = die_in_shard_2;
    CHECK_ERR(s3d_checkpoint_write(c, uri, b.src, NT, NULL, 0, &wo), S3D_ECANCELED);
    CHECK_ERR(s3d_reader_open(c, uri, &r), S3D_EFMT_INDEX);
    CHECK_MSG_HAS("-00001-of-00004.safetensors was written by another save");
    CHECK_MSG_HAS("partly overwritten");
    CHECK(r == NULL);

    /* The next whole save makes it one checkpoint again. */
    wo.progress = NULL;
    CHECK_OK(s3d_checkpoint_write(c, uri, b.src, NT, NULL, 0, &wo));
    check_whole(c, uri, 200.0f);
    unmake(&a);
    unmake(&b);
}

int main(void)
{
    struct s3d_client_options o;
    struct s3d_client *c = NULL;
    char uri[512];
    const char *ep = getenv("AWS_ENDPOINT_URL");

    memset(&o, 0, sizeof(o));
    CHECK_OK(s3d_client_new(&o, &c));
    snprintf(uri, sizeof(uri), "%s/model.safetensors.index.json", t_tmpdir());
    run(c, uri);
    s3d_client_free(c);

    if (ep != NULL && *ep != '\0') {
        char bucket[128];
        c = t_s3_client();
        t_s3_bucket(c, "overwrite", bucket, sizeof(bucket));
        snprintf(uri, sizeof(uri), "s3://%s/ckpt/model.safetensors.index.json", bucket);
        run(c, uri);
        s3d_client_free(c);
    } else {
        printf("S3 part skipped: AWS_ENDPOINT_URL unset\n");
    }
    printf("ok\n");
    return 0;
}
