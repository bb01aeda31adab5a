/* test_consistency.c - an object replaced by another writer during a download. The first
 * response's ETag goes as If-Match on every later range (and on a resumed first range), so the
 * download fails with S3D_ECHANGED instead of handing back the start of one version and the
 * rest of the other: into memory, into a file (nothing left at the path), a first range
 * resumed after a broken connection, and a checkpoint read after its open. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_util.h"
#include "testutil.h"
#include "tproxy.h"

#define N (24u << 20)

/* Overwrites the object from a progress callback once `at` bytes have arrived. */
struct overwrite {
    struct s3d_client *c;
    const char *bucket, *key;
    const char *data;
    uint64_t at;
    int done;
};

static int overwrite_cb(void *user, uint64_t done, uint64_t total)
{
    struct overwrite *w = user;
    (void)total;
    if (!w->done && done >= w->at) {
        w->done = 1;
        CHECK_OK(s3d_upload_from_buffer(w->c, w->bucket, w->key, w->data, N, NULL));
    }
    return 0;
}

struct stalled {
    struct tproxy *px;
    struct overwrite *w;
};

/* Waits for the proxy to stall the download, then replaces the object. */
static void *overwrite_when_stalled(void *arg)
{
    struct stalled *s = arg;
    while (tproxy_stalls(s->px) == 0)
        usleep(1000);
    CHECK_OK(s3d_upload_from_buffer(s->w->c, s->w->bucket, s->w->key, s->w->data, N, NULL));
    s->w->done = 1;
    return NULL;
}

/* Resizes a file from an upload's progress callback once `at` bytes went out. */
struct resize {
    const char *path;
    uint64_t at, new_size;
    int done;
};

static int resize_cb(void *user, uint64_t done, uint64_t total)
{
    struct resize *r = user;
    (void)total;
    if (!r->done && done >= r->at) {
        r->done = 1;
        CHECK(truncate(r->path, (off_t)r->new_size) == 0);
    }
    return 0;
}

static void write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(fwrite(p, 1, n, f) == n);
    CHECK(fclose(f) == 0);
}

static int count_upload(void *user, const struct s3d_upload_entry *e)
{
    (*(int *)user)++;
    return 0;
}

static void checkpoint_case(struct s3d_client *direct, const char *bucket)
{
    struct t_tensors a, b;
    struct s3d_write_options wo;
    struct s3d_reader *r = NULL;
    struct s3d_tensor_dest *d;
    char uri[256];
    size_t i, n;

    /* Same names, shapes and layout, other bytes; no stored CRCs, so only the version check
     * can tell the two apart. */
    t_make_tensors(&a, 12, 300000, 1);
    t_make_tensors(&b, 12, 300000, 2);
    memset(&wo, 0, sizeof(wo));
    wo.no_checksum = 1;
    snprintf(uri, sizeof(uri), "s3://%s/ck.safetensors", bucket);
    CHECK_OK(s3d_checkpoint_write(direct, uri, a.src, a.n, NULL, 0, &wo));
    CHECK_OK(s3d_reader_open(direct, uri, &r));
    CHECK_OK(s3d_checkpoint_write(direct, uri, b.src, b.n, NULL, 0, &wo));
    n = s3d_reader_num_tensors(r);
    d = calloc(n, sizeof(*d));
    CHECK(d != NULL);
    for (i = 0; i < n; i++) {
        struct s3d_tensor_info ti = {.struct_size = sizeof(struct s3d_tensor_info)};
        CHECK_OK(s3d_reader_tensor(r, i, &ti));
        d[i].index = i;
        d[i].device = -1;
        d[i].capacity = ti.nbytes;
        d[i].ptr = malloc(ti.nbytes ? ti.nbytes : 1);
        CHECK(d[i].ptr != NULL);
    }
    CHECK_ERR(s3d_reader_read(r, d, n, NULL), S3D_ECHANGED);
    CHECK_MSG_HAS("changed during the download");
    for (i = 0; i < n; i++)
        free(d[i].ptr);
    free(d);
    s3d_reader_close(r);
    /* Opened again, the new version reads whole. */
    t_verify_checkpoint(direct, uri, &b, -1);
    t_free_tensors(&a);
    t_free_tensors(&b);
}

int main(void)
{
    const char *ep = t_s3_endpoint();
    char host[256], bucket[128], dir[512], path[600];
    int port;
    struct s3d_client *direct, *small;
    struct overwrite w;
    struct s3d_transfer_options to;
    struct stat st;
    uint64_t got = 0;
    char *v1 = malloc(N), *v2 = malloc(N), *dst = malloc(N);

    CHECK(v1 != NULL && v2 != NULL && dst != NULL);
    setenv("S3D_TEST_RETRY_BASE_MS", "20", 1);
    tproxy_parse_endpoint(ep, host, sizeof(host), &port);
    direct = t_s3_client();
    t_s3_bucket(direct, "consist", bucket, sizeof(bucket));
    t_fill_random(v1, N, 1);
    t_fill_random(v2, N, 2);
    /* 5 MiB ranges, one at a time: the callback runs between two ranges. */
    small = t_s3_client_at(ep, 5u << 20, 1);

    /* 1. Into memory: replaced after the first range. */
    CHECK_OK(s3d_upload_from_buffer(direct, bucket, "obj", v1, N, NULL));
    memset(&w, 0, sizeof(w));
    w.c = direct;
    w.bucket = bucket;
    w.key = "obj";
    w.data = v2;
    w.at = 5u << 20;
    memset(&to, 0, sizeof(to));
    to.progress = overwrite_cb;
    to.progress_user = &w;
    CHECK_ERR(s3d_download_to_buffer(small, bucket, "obj", 0, UINT64_MAX, dst, N, &got, &to),
              S3D_ECHANGED);
    CHECK(w.done);
    CHECK_MSG_HAS("changed during the download");
    CHECK_MSG_HAS("412");
    /* Again: the new version, whole. */
    CHECK_OK(s3d_download_to_buffer(small, bucket, "obj", 0, UINT64_MAX, dst, N, &got, NULL));
    CHECK_EQ_U64(got, N);
    CHECK(memcmp(dst, v2, N) == 0);

    /* 2. Into a file: nothing appears at the path, no temporary file stays. */
    snprintf(dir, sizeof(dir), "%s/dl", t_tmpdir());
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(path, sizeof(path), "%s/obj.bin", dir);
    w.done = 0;
    w.data = v1;
    CHECK_ERR(s3d_download_to_file(small, bucket, "obj", path, &to), S3D_ECHANGED);
    CHECK(w.done);
    CHECK(stat(path, &st) != 0);
    CHECK(t_dir_entries(dir) == 0);
    /* A new file follows the umask (not a fixed 0644); an overwritten one keeps its mode. */
    umask(077);
    CHECK_OK(s3d_download_to_file(small, bucket, "obj", path, NULL));
    CHECK(stat(path, &st) == 0 && (uint64_t)st.st_size == N);
    CHECK((st.st_mode & 0777) == 0600);
    umask(022);
    CHECK(chmod(path, 0640) == 0);
    CHECK_OK(s3d_download_to_file(small, bucket, "obj", path, NULL));
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0640);
    CHECK(t_dir_entries(dir) == 1);

    /* 3. A first range resumed after a broken connection asks for the version it started on:
     * the proxy stalls the one 24 MiB range after 2 MiB, the object is replaced meanwhile, and
     * the connection is cut at 4 MiB. */
    {
        struct tproxy_opts po;
        struct tproxy *px;
        struct s3d_client *via;
        struct stalled s;
        pthread_t th;
        memset(&po, 0, sizeof(po));
        po.cut_s2c_after = 4 << 20;
        po.cut_c2s_after = -1;
        po.stall_s2c_after = 2 << 20;
        po.stall_ms = 1500;
        px = tproxy_start(host, port, &po);
        via = t_s3_client_at(tproxy_url(px), 32u << 20, 1);
        w.done = 0;
        w.data = v2;
        s.px = px;
        s.w = &w;
        CHECK(pthread_create(&th, NULL, overwrite_when_stalled, &s) == 0);
        CHECK_ERR(s3d_download_to_buffer(via, bucket, "obj", 0, UINT64_MAX, dst, N, &got, NULL),
                  S3D_ECHANGED);
        CHECK(pthread_join(th, NULL) == 0);
        CHECK(w.done);
        CHECK(tproxy_cuts(px) == 1);
        fprintf(stderr, "proxy log (resumed first range):\n%s", tproxy_log(px));
        s3d_client_free(via);
        tproxy_stop(px);
    }

    /* 4. A source file that shrinks or grows during its upload fails it ("file changed
     * while reading"); the key keeps its previous object and no upload stays open. */
    {
        struct resize rz;
        int uploads = 0;
        snprintf(path, sizeof(path), "%s/src.bin", dir);
        write_file(path, v1, N);
        memset(&rz, 0, sizeof(rz));
        rz.path = path;
        rz.at = 5u << 20;
        rz.new_size = 10u << 20;
        memset(&to, 0, sizeof(to));
        to.progress = resize_cb;
        to.progress_user = &rz;
        CHECK_ERR(s3d_upload_from_file(small, bucket, "obj", path, &to), S3D_EIO);
        CHECK_MSG_HAS("file changed while reading");
        CHECK(rz.done);
        write_file(path, v1, N);
        rz.done = 0;
        rz.new_size = N + 1000;
        CHECK_ERR(s3d_upload_from_file(small, bucket, "obj", path, &to), S3D_EIO);
        CHECK_MSG_HAS("file changed while reading");
        CHECK_OK(s3d_download_to_buffer(small, bucket, "obj", 0, UINT64_MAX, dst, N, &got, NULL));
        CHECK_EQ_U64(got, N);
        CHECK(memcmp(dst, v2, N) == 0);
        CHECK_OK(s3d_list_uploads(direct, bucket, NULL, count_upload, &uploads));
        CHECK(uploads == 0);
    }

    /* 5. A checkpoint replaced between open and read. */
    checkpoint_case(direct, bucket);

    s3d_client_free(small);
    s3d_client_free(direct);
    free(v1);
    free(v2);
    free(dst);
    return 0;
}
