/* test_ckpt_concurrent.c - two sharded saves of different checkpoints to one index, started
 * together (a barrier), 20 rounds: both succeed, and a load afterwards gives exactly one of
 * the two checkpoints, whole (every tensor of the same writer, bytes compared), never an
 * error. Before, both saves wrote the same shard names: the index of one pointed at shards
 * of the other and 9 of 16 loads failed on the generation check. Local folder always; S3 when
 * a test server is configured. */
#include <pthread.h>

#include "testutil.h"

#define NT     8
#define ELEMS  (64 * 1024)  /* 256 KiB of F32 per tensor */
#define SHARD  (512u << 10) /* two tensors per shard: 4 shards */
#define ROUNDS 20

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
            k->data[i][j] = base + (float)i + (float)(j % 7) / 8.0f;
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

struct writer {
    struct s3d_client *c;
    const char *uri;
    struct ckpt *k;
    pthread_barrier_t *start;
    int rc;
    char msg[512];
};

static void *save(void *arg)
{
    struct writer *w = arg;
    struct s3d_write_options wo;
    memset(&wo, 0, sizeof(wo));
    wo.max_shard_size = SHARD;
    pthread_barrier_wait(w->start);
    w->rc = s3d_checkpoint_write(w->c, w->uri, w->k->src, NT, NULL, 0, &wo);
    if (w->rc < 0)
        snprintf(w->msg, sizeof(w->msg), "%s", s3d_last_error_message());
    return NULL;
}

/* Loads uri whole; returns which of a (0) and b (1) it is, failing the test on a mix. */
static int load_which(struct s3d_client *c, const char *uri, struct ckpt *a, struct ckpt *b)
{
    struct s3d_reader *r = NULL;
    struct s3d_tensor_dest d[NT];
    float *buf = malloc((size_t)NT * ELEMS * sizeof(float));
    int which = -1;
    CHECK(buf != NULL);
    CHECK_OK(s3d_reader_open(c, uri, &r));
    CHECK(s3d_reader_num_tensors(r) == NT);
    for (int i = 0; i < NT; i++) {
        size_t idx;
        CHECK_OK(s3d_reader_find(r, a->names[i], &idx));
        d[i] = (struct s3d_tensor_dest){.index = idx,
                                        .ptr = buf + (size_t)i * ELEMS,
                                        .device = -1,
                                        .capacity = ELEMS * sizeof(float)};
    }
    CHECK_OK(s3d_reader_read(r, d, NT, NULL));
    for (int i = 0; i < NT; i++) {
        const float *got = buf + (size_t)i * ELEMS;
        int w = memcmp(got, a->data[i], ELEMS * sizeof(float)) == 0   ? 0
                : memcmp(got, b->data[i], ELEMS * sizeof(float)) == 0 ? 1
                                                                      : 2;
        if (w == 2)
            t_fail(__FILE__, __LINE__, "%s: tensor %d is neither writer's", uri, i);
        if (which >= 0 && w != which)
            t_fail(__FILE__, __LINE__, "%s: tensor %d is writer %d's, tensor 0 writer %d's", uri, i,
                   w, which);
        which = w;
    }
    s3d_reader_close(r);
    free(buf);
    return which;
}

static void run(struct s3d_client *c1, struct s3d_client *c2, const char *uri)
{
    struct ckpt a, b;
    int wins[2] = {0, 0};
    make(&a, 100.0f);
    make(&b, 200.0f);
    for (int round = 0; round < ROUNDS; round++) {
        pthread_barrier_t start;
        pthread_t t1, t2;
        struct writer w1 = {.c = c1, .uri = uri, .k = &a, .start = &start};
        struct writer w2 = {.c = c2, .uri = uri, .k = &b, .start = &start};
        CHECK(pthread_barrier_init(&start, NULL, 2) == 0);
        CHECK(pthread_create(&t1, NULL, save, &w1) == 0);
        CHECK(pthread_create(&t2, NULL, save, &w2) == 0);
        pthread_join(t1, NULL);
        pthread_join(t2, NULL);
        pthread_barrier_destroy(&start);
        if (w1.rc < 0 || w2.rc < 0)
            t_fail(__FILE__, __LINE__, "round %d: a save failed: %s / %s", round, w1.msg, w2.msg);
        wins[load_which(c1, uri, &a, &b)]++;
    }
    printf("%s: %d rounds, a won %d, b won %d\n", uri, ROUNDS, wins[0], wins[1]);
    unmake(&a);
    unmake(&b);
}

int main(void)
{
    struct s3d_client_options o;
    struct s3d_client *c1 = NULL, *c2 = NULL;
    char uri[512];
    const char *ep = getenv("AWS_ENDPOINT_URL");

    memset(&o, 0, sizeof(o));
    CHECK_OK(s3d_client_new(&o, &c1));
    CHECK_OK(s3d_client_new(&o, &c2));
    snprintf(uri, sizeof(uri), "%s/model.safetensors.index.json", t_tmpdir());
    run(c1, c2, uri);
    s3d_client_free(c1);
    s3d_client_free(c2);

    if (ep != NULL && *ep != '\0') {
        char bucket[128];
        c1 = t_s3_client();
        c2 = t_s3_client();
        t_s3_bucket(c1, "concurrent", bucket, sizeof(bucket));
        snprintf(uri, sizeof(uri), "s3://%s/ckpt/model.safetensors.index.json", bucket);
        run(c1, c2, uri);
        s3d_client_free(c1);
        s3d_client_free(c2);
    } else {
        printf("S3 part skipped: AWS_ENDPOINT_URL unset\n");
    }
    printf("ok\n");
    return 0;
}
