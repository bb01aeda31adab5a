/* test_ckpt_s3.c - checkpoints in S3 (the local RGW): single PUT and multipart, every dtype,
 * shards, the emulated GPU, subset loads that fetch only their bytes, corruption found by
 * the per-tensor CRC, and a save interrupted midway that leaves the previous object and no
 * open multipart upload. */
#include <unistd.h>

#include "ckpt_util.h"

static struct s3d_client *client_at(const char *endpoint)
{
    struct s3d_client *c = NULL;
    struct s3d_client_options o;
    memset(&o, 0, sizeof(o));
    o.endpoint_url = endpoint;
    o.part_size = 5 << 20;      /* many parts for a few tens of MiB */
    o.staging_bytes = 24 << 20; /* a small pool that must be recycled */
    CHECK_OK(s3d_client_new(&o, &c));
    return c;
}

static int cancel_after(void *user, uint64_t done, uint64_t total)
{
    (void)total;
    return done >= *(uint64_t *)user;
}

static int count_upload(void *user, const struct s3d_upload_entry *e)
{
    (*(int *)user)++;
    return 0;
}

int main(void)
{
    const char *ep = t_s3_endpoint();
    const char *proxy = t_proxy_start();
    struct s3d_client *c = client_at(ep);
    struct t_tensors big, small;
    char bucket[128], uri[512];
    struct s3d_reader *r = NULL;

    t_s3_bucket(c, "ckpt", bucket, sizeof(bucket));
    t_make_tensors(&big, 40, 1500000, 11); /* ~30 MB: multipart */
    t_make_tensors(&small, 25, 2000, 12);  /* ~30 KB: one PUT */

    snprintf(uri, sizeof(uri), "s3://%s/small.safetensors", bucket);
    CHECK_OK(s3d_checkpoint_write(c, uri, small.src, small.n, NULL, 0, NULL));
    t_verify_checkpoint(c, uri, &small, -1);

    snprintf(uri, sizeof(uri), "s3://%s/dir/big.safetensors", bucket);
    CHECK_OK(s3d_checkpoint_write(c, uri, big.src, big.n, NULL, 0, NULL));
    t_verify_checkpoint(c, uri, &big, -1);
    {
        struct s3d_object_info info = {.struct_size = sizeof(struct s3d_object_info)};
        CHECK_OK(s3d_head_object(c, bucket, "dir/big.safetensors", &info));
        CHECK(info.size > 20 << 20);
    }

    /* A subset fetches only its bytes: count what the server sends through a relay. */
    {
        struct s3d_client *pc = client_at(proxy);
        struct s3d_tensor_dest d[2];
        struct s3d_tensor_info ti[2] = {{.struct_size = sizeof(ti[0])},
                                        {.struct_size = sizeof(ti[0])}};
        size_t which[2] = {5, 17};
        void *buf[2];
        uint64_t need = 0, got;
        CHECK_OK(s3d_reader_open(pc, uri, &r));
        memset(d, 0, sizeof(d));
        for (int k = 0; k < 2; k++) {
            size_t i;
            CHECK_OK(s3d_reader_find(r, big.src[which[k]].name, &i));
            CHECK_OK(s3d_reader_tensor(r, i, &ti[k]));
            buf[k] = malloc(ti[k].nbytes);
            d[k].index = i;
            d[k].ptr = buf[k];
            d[k].device = -1;
            d[k].capacity = ti[k].nbytes;
            need += ti[k].nbytes;
        }
        t_proxy_reset();
        CHECK_OK(s3d_reader_read(r, d, 2, NULL));
        got = t_proxy_bytes();
        for (int k = 0; k < 2; k++) {
            CHECK(memcmp(buf[k], big.data[which[k]], ti[k].nbytes) == 0);
            free(buf[k]);
        }
        /* the tensors' bytes plus response headers (well under 2 KiB per request); on a
         * loaded machine a timed-out range may be fetched again, so allow up to 10 % more
         * (the bound issue 13 sets for subset reads): a whole-object read is far above it */
        printf("subset: needed %llu bytes, server sent %llu\n", (unsigned long long)need,
               (unsigned long long)got);
        CHECK(got >= need);
        CHECK(got <= need + need / 10 + 16 * 2048);
        s3d_reader_close(r);
        r = NULL;
        s3d_client_free(pc);
    }

    /* Corruption in the stored object is found and named. */
    {
        struct s3d_object_info info = {.struct_size = sizeof(struct s3d_object_info)};
        unsigned char *obj;
        uint64_t n;
        struct s3d_tensor_info ti = {.struct_size = sizeof(struct s3d_tensor_info)};
        size_t i;
        char cuk[64] = "corrupt.safetensors";
        CHECK_OK(s3d_head_object(c, bucket, "small.safetensors", &info));
        obj = malloc(info.size);
        CHECK_OK(s3d_download_to_buffer(c, bucket, "small.safetensors", 0, UINT64_MAX, obj,
                                        info.size, &n, NULL));
        CHECK_EQ_U64(n, info.size);
        snprintf(uri, sizeof(uri), "s3://%s/small.safetensors", bucket);
        CHECK_OK(s3d_reader_open(c, uri, &r));
        CHECK_OK(s3d_reader_find(r, small.src[7].name, &i));
        CHECK_OK(s3d_reader_tensor(r, i, &ti));
        s3d_reader_close(r);
        obj[ti.offset + 1] ^= 1;
        CHECK_OK(s3d_upload_from_buffer(c, bucket, cuk, obj, info.size, NULL));
        free(obj);
        snprintf(uri, sizeof(uri), "s3://%s/%s", bucket, cuk);
        {
            void *b = malloc(ti.nbytes);
            struct s3d_tensor_dest d = {.index = i, .ptr = b, .device = -1, .capacity = ti.nbytes};
            CHECK_OK(s3d_reader_open(c, uri, &r));
            CHECK_ERR(s3d_reader_read(r, &d, 1, NULL), S3D_ECHECKSUM);
            CHECK_MSG_HAS(small.src[7].name);
            CHECK_MSG_HAS(cuk);
            s3d_reader_close(r);
            r = NULL;
            free(b);
        }
    }

    /* Interrupted save: the previous object stays, no upload is left open. */
    {
        uint64_t limit = 12 << 20;
        struct s3d_write_options wo;
        int uploads = 0;
        snprintf(uri, sizeof(uri), "s3://%s/dir/big.safetensors", bucket);
        memset(&wo, 0, sizeof(wo));
        wo.progress = cancel_after;
        wo.progress_user = &limit;
        big.src[0].name = "changed";
        CHECK_ERR(s3d_checkpoint_write(c, uri, big.src, big.n, NULL, 0, &wo), S3D_ECANCELED);
        big.src[0].name = big.names[0];
        t_verify_checkpoint(c, uri, &big, -1);
        CHECK_OK(s3d_list_uploads(c, bucket, NULL, count_upload, &uploads));
        CHECK(uploads == 0);
    }

    /* Shards in S3. */
    {
        struct s3d_write_options wo;
        memset(&wo, 0, sizeof(wo));
        wo.max_shard_size = 8 << 20;
        snprintf(uri, sizeof(uri), "s3://%s/sharded/model.safetensors.index.json", bucket);
        CHECK_OK(s3d_checkpoint_write(c, uri, big.src, big.n, NULL, 0, &wo));
        t_verify_checkpoint(c, uri, &big, -1);
        CHECK_OK(s3d_reader_open(c, uri, &r));
        CHECK(s3d_reader_num_shards(r) >= 3);
        s3d_reader_close(r);
        r = NULL;
    }

    /* Many shards: their headers are fetched on several threads at once (ckpt_open.c); the
     * error of a missing shard is that of the first in index order, whichever thread met it. */
    {
        struct s3d_write_options wo;
        const char *suri = NULL;
        char first[96], last[96];
        size_t ns;
        memset(&wo, 0, sizeof(wo));
        wo.max_shard_size = 1 << 20;
        snprintf(uri, sizeof(uri), "s3://%s/many/model.safetensors.index.json", bucket);
        CHECK_OK(s3d_checkpoint_write(c, uri, big.src, big.n, NULL, 0, &wo));
        t_verify_checkpoint(c, uri, &big, -1);
        CHECK_OK(s3d_reader_open(c, uri, &r));
        ns = s3d_reader_num_shards(r);
        CHECK(ns >= 20);
        for (size_t i = 0; i < ns; i++) {
            CHECK_OK(s3d_reader_shard(r, i, &suri, NULL, NULL));
            CHECK(strstr(suri, "many/model-") != NULL);
            /* The keys of shards 4 and N (the names carry the save's token). */
            if (i == 3 || i == ns - 1)
                snprintf(i == 3 ? first : last, sizeof(first), "%s",
                         suri + strlen("s3://") + strlen(bucket) + 1);
        }
        s3d_reader_close(r);
        r = NULL;
        CHECK_OK(s3d_delete_object(c, bucket, last));
        CHECK_OK(s3d_delete_object(c, bucket, first));
        for (int k = 0; k < 5; k++) {
            CHECK_ERR(s3d_reader_open(c, uri, &r), S3D_ENOSUCHKEY);
            CHECK_MSG_HAS(first + 5);
        }
    }

    /* Missing objects. */
    snprintf(uri, sizeof(uri), "s3://%s/none.safetensors", bucket);
    CHECK_ERR(s3d_reader_open(c, uri, &r), S3D_ENOSUCHKEY);
    CHECK_MSG_HAS("none.safetensors");
    s3d_client_free(c);

    /* The emulated GPU, through S3 both ways. */
    setenv("S3D_DEVICE_EMULATE", "1", 1);
    c = client_at(ep);
    for (size_t i = 0; i < big.n; i++)
        if (i % 4 != 1)
            t_tensor_to_emu(&big, i);
    snprintf(uri, sizeof(uri), "s3://%s/gpu.safetensors", bucket);
    CHECK_OK(s3d_checkpoint_write(c, uri, big.src, big.n, NULL, 0, NULL));
    t_verify_checkpoint(c, uri, &big, 0);
    t_verify_checkpoint(c, uri, &big, -1);
    s3d_client_free(c);

    /* A device tensor larger than the staging pool, below multipart_threshold: it goes as a
     * multipart upload instead of waiting for more chunks than the pool has (a hang). */
    {
        struct s3d_client_options o;
        struct s3d_client *pc = NULL;
        struct t_tensors one;
        memset(&o, 0, sizeof(o));
        o.endpoint_url = ep;
        o.part_size = 8 << 20;
        o.staging_bytes = 32 << 20; /* 4 x 8 MiB */
        o.multipart_threshold = 1ull << 30;
        CHECK_OK(s3d_client_new(&o, &pc));
        t_make_tensors(&one, 4, 1, 3);
        free(one.data[3]);
        one.shapes[3][0] = 64 << 20;
        one.src[3].ndim = 1;
        one.src[3].dtype = S3D_DTYPE_U8;
        one.src[3].nbytes = 64 << 20;
        one.data[3] = malloc(64 << 20);
        CHECK(one.data[3] != NULL);
        t_fill_random(one.data[3], 64 << 20, 77);
        one.src[3].ptr = one.data[3];
        t_tensor_to_emu(&one, 3);
        snprintf(uri, sizeof(uri), "s3://%s/big-single.safetensors", bucket);
        alarm(300); /* a hang fails here instead of at the runner's timeout */
        CHECK_OK(s3d_checkpoint_write(pc, uri, one.src, one.n, NULL, 0, NULL));
        alarm(0);
        t_verify_checkpoint(pc, uri, &one, 0);
        t_free_tensors(&one);
        s3d_client_free(pc);
    }

    /* Stream order through S3: the caller's queued kernels are waited for, per device. */
    setenv("S3D_DEVICE_EMULATE_COUNT", "2", 1);
    c = client_at(ep);
    snprintf(uri, sizeof(uri), "s3://%s/order.safetensors", bucket);
    t_check_stream_order(c, uri, 2, 0);
    snprintf(uri, sizeof(uri), "s3://%s/events.safetensors", bucket);
    t_check_event_order(c, uri, 2, 0, 0);
    snprintf(uri, sizeof(uri), "s3://%s/events.safetensors.index.json", bucket);
    t_check_event_order(c, uri, 2, 0, 1 << 20);
    s3d_client_free(c);
    unsetenv("S3D_DEVICE_EMULATE_COUNT");

    t_free_tensors(&big);
    t_free_tensors(&small);
    printf("ok\n");
    return 0;
}
