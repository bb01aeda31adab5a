/* test_ckpt_gpu_concurrent.c - many threads saving small GPU checkpoints (emulated device) at
 * once through one client whose staging pool has only a few chunks: each save is a single
 * PUT whose device bytes need two chunks. A save that took its chunks one at a time, waiting
 * for the next while holding the first, deadlocked as soon as every thread held one. The
 * alarm turns a hang into a failure before the runner's timeout. */
#include <pthread.h>
#include <unistd.h>

#include "ckpt_util.h"

#define N_THREADS 8
#define N_SAVES   6

static struct s3d_client *g_c;
static char g_bucket[128];
static struct t_tensors g_ts[N_THREADS];

static void *saver(void *arg)
{
    size_t k = (size_t)(uintptr_t)arg;
    char uri[512];
    snprintf(uri, sizeof(uri), "s3://%s/t%zu.safetensors", g_bucket, k);
    for (int i = 0; i < N_SAVES; i++)
        CHECK_OK(s3d_checkpoint_write(g_c, uri, g_ts[k].src, g_ts[k].n, NULL, 0, NULL));
    return NULL;
}

int main(void)
{
    const char *ep = t_s3_endpoint();
    struct s3d_client_options o;
    pthread_t th[N_THREADS];

    setenv("S3D_DEVICE_EMULATE", "1", 1);
    memset(&o, 0, sizeof(o));
    o.endpoint_url = ep;
    o.part_size = 5 << 20;            /* the chunk size */
    o.staging_bytes = 15 << 20;       /* 3 chunks */
    o.multipart_threshold = 1u << 30; /* one PUT each */
    CHECK_OK(s3d_client_new(&o, &g_c));
    t_s3_bucket(g_c, "gpuconc", g_bucket, sizeof(g_bucket));

    for (size_t k = 0; k < N_THREADS; k++) {
        struct t_tensors *ts = &g_ts[k];
        t_make_tensors(ts, 2, 1, 100 + k);
        free(ts->data[1]);
        ts->shapes[1][0] = 6 << 20; /* 6 MiB: two 5 MiB chunks */
        ts->src[1].ndim = 1;
        ts->src[1].dtype = S3D_DTYPE_U8;
        ts->src[1].nbytes = 6 << 20;
        ts->data[1] = malloc(6 << 20);
        CHECK(ts->data[1] != NULL);
        t_fill_random(ts->data[1], 6 << 20, 200 + k);
        ts->src[1].ptr = ts->data[1];
        t_tensor_to_emu(ts, 1);
    }

    alarm(240);
    for (size_t k = 0; k < N_THREADS; k++)
        CHECK(pthread_create(&th[k], NULL, saver, (void *)(uintptr_t)k) == 0);
    for (size_t k = 0; k < N_THREADS; k++)
        CHECK(pthread_join(th[k], NULL) == 0);
    alarm(0);

    for (size_t k = 0; k < N_THREADS; k++) {
        char uri[512];
        snprintf(uri, sizeof(uri), "s3://%s/t%zu.safetensors", g_bucket, k);
        t_verify_checkpoint(g_c, uri, &g_ts[k], 0);
        t_free_tensors(&g_ts[k]);
    }
    s3d_client_free(g_c);
    printf("ok\n");
    return 0;
}
