/* test_ckpt_many.c - a checkpoint of 100,000 tensors (a 10 MB header) round trips through a
 * local file and through S3, and a few of them can be read alone. */
#include <time.h>

#include "ckpt_util.h"

#define N 100000

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void round_trip(struct s3d_client *c, const char *uri, struct s3d_tensor_src *src,
                       const uint32_t *vals)
{
    struct s3d_reader *r = NULL;
    struct s3d_tensor_dest *d = calloc(N, sizeof(*d));
    uint32_t *out = calloc(N, sizeof(*out));
    double t0 = now(), t1, t2;
    CHECK(d && out);
    CHECK_OK(s3d_checkpoint_write(c, uri, src, N, NULL, 0, NULL));
    t1 = now();
    CHECK_OK(s3d_reader_open(c, uri, &r));
    CHECK_EQ_U64(s3d_reader_num_tensors(r), N);
    for (size_t i = 0; i < N; i++) {
        size_t idx;
        CHECK_OK(s3d_reader_find(r, src[i].name, &idx));
        d[i] = (struct s3d_tensor_dest){.index = idx, .ptr = &out[i], .device = -1, .capacity = 4};
    }
    CHECK_OK(s3d_reader_read(r, d, N, NULL));
    t2 = now();
    CHECK(memcmp(out, vals, N * sizeof(*out)) == 0);
    /* three tensors alone */
    memset(out, 0, N * sizeof(*out));
    d[0] = d[99999];
    d[1] = d[12345];
    d[2] = d[5];
    CHECK_OK(s3d_reader_read(r, d, 3, NULL));
    CHECK(out[99999] == vals[99999] && out[12345] == vals[12345] && out[5] == vals[5]);
    CHECK(out[6] == 0);
    printf("%s: 100,000 tensors written in %.2f s, opened and read in %.2f s\n", uri, t1 - t0,
           t2 - t1);
    s3d_reader_close(r);
    free(d);
    free(out);
}

int main(void)
{
    struct s3d_tensor_src *src = calloc(N, sizeof(*src));
    char(*names)[24] = calloc(N, sizeof(*names));
    uint32_t *vals = calloc(N, sizeof(*vals));
    int64_t one = 1;
    struct s3d_client *c = NULL;
    char uri[512];
    CHECK(src && names && vals);
    for (size_t i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "blocks.%zu.scale", i);
        vals[i] = (uint32_t)(i * 2654435761u);
        src[i] = (struct s3d_tensor_src){.name = names[i],
                                         .dtype = S3D_DTYPE_U32,
                                         .ndim = 1,
                                         .shape = &one,
                                         .ptr = &vals[i],
                                         .device = -1,
                                         .nbytes = 4};
    }
    CHECK_OK(s3d_client_new(NULL, &c));
    snprintf(uri, sizeof(uri), "%s/many.safetensors", t_tmpdir());
    round_trip(c, uri, src, vals);
    s3d_client_free(c);

    if (getenv("AWS_ENDPOINT_URL") != NULL) {
        char bucket[128];
        c = t_s3_client();
        t_s3_bucket(c, "many", bucket, sizeof(bucket));
        snprintf(uri, sizeof(uri), "s3://%s/many.safetensors", bucket);
        round_trip(c, uri, src, vals);
        CHECK_OK(s3d_delete_object(c, bucket, "many.safetensors"));
        s3d_client_free(c);
    }
    free(src);
    free(names);
    free(vals);
    printf("ok\n");
    return 0;
}
