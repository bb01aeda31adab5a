/* test_reuse.c - connections are kept alive and reused across requests, transfers and
 * threads: counted by a pass-through proxy (tproxy.c) in front of the server. Several threads
 * share one client for concurrent downloads and uploads, and every byte is checked. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tproxy.h"
#include "testutil.h"

#define MiB      (1024ull * 1024ull)
#define NTHREADS 4
#define ROUNDS   6

static struct s3d_client *client;
static char bucket[128];
static char *src;
static const uint64_t n = 6 * MiB + 5;

static void *worker(void *arg)
{
    long t = (long)arg;
    char *dst = malloc(n), key[64];
    uint64_t got;
    int r;
    CHECK(dst != NULL);
    snprintf(key, sizeof(key), "t%ld", t);
    for (r = 0; r < ROUNDS; r++) {
        CHECK_OK(s3d_upload_from_buffer(client, bucket, key, src + t, n - (uint64_t)t, NULL));
        memset(dst, 0, n);
        CHECK_OK(s3d_download_to_buffer(client, bucket, key, 0, UINT64_MAX, dst, n, &got, NULL));
        CHECK_EQ_U64(got, n - (uint64_t)t);
        CHECK(memcmp(dst, src + t, (size_t)got) == 0);
    }
    free(dst);
    return NULL;
}

int main(void)
{
    const char *ep = t_s3_endpoint();
    struct s3d_client_options o;
    struct s3d_object_info info = {.struct_size = sizeof(struct s3d_object_info)};
    struct tproxy_opts po;
    struct tproxy *px;
    pthread_t th[NTHREADS];
    char host[256];
    int port, i, conns;
    long t;

    tproxy_parse_endpoint(ep, host, sizeof(host), &port);
    memset(&po, 0, sizeof(po));
    po.cut_s2c_after = po.cut_c2s_after = po.stall_s2c_after = -1;
    px = tproxy_start(host, port, &po);
    memset(&o, 0, sizeof(o));
    o.endpoint_url = tproxy_url(px);
    o.max_concurrency = 2;
    o.part_size = 5 * MiB;
    CHECK_OK(s3d_client_new(&o, &client));
    t_s3_bucket(client, "reuse", bucket, sizeof(bucket));
    src = malloc(n);
    CHECK(src != NULL);
    t_fill_random(src, n, 3);

    /* 40 sequential single requests from one thread: one connection. */
    CHECK_OK(s3d_upload_from_buffer(client, bucket, "small", "abc", 3, NULL));
    for (i = 0; i < 40; i++)
        CHECK_OK(s3d_head_object(client, bucket, "small", &info));
    conns = tproxy_connections(px);
    fprintf(stderr, "connections after 42 sequential requests: %d\n", conns);
    CHECK(conns == 1);

    /* Threads x rounds of 2-part uploads and downloads, 2 connections each at most: the
     * connections opened by the first round are reused by the next ones. */
    for (t = 0; t < NTHREADS; t++)
        CHECK(pthread_create(&th[t], NULL, worker, (void *)t) == 0);
    for (t = 0; t < NTHREADS; t++)
        pthread_join(th[t], NULL);
    conns = tproxy_connections(px);
    fprintf(stderr, "connections after %d threads x %d rounds: %d\n", NTHREADS, ROUNDS, conns);
    CHECK(conns <= 1 + NTHREADS * 2);

    for (t = 0; t < NTHREADS; t++) {
        char key[64];
        snprintf(key, sizeof(key), "t%ld", t);
        CHECK_OK(s3d_delete_object(client, bucket, key));
    }
    CHECK_OK(s3d_delete_object(client, bucket, "small"));
    CHECK_OK(s3d_delete_bucket(client, bucket));
    s3d_client_free(client);
    tproxy_stop(px);
    free(src);
    return 0;
}
