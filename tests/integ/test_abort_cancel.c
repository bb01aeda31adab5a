/* test_abort_cancel.c - a multipart upload that fails (a producer error) or is canceled from
 * another thread leaves the previous object at the key untouched and no upload open; a
 * download canceled from another thread, or by its progress callback, returns S3D_ECANCELED.
 * A slow local proxy (tproxy.c) keeps the transfers running long enough to be canceled. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "engine/xfer.h"
#include "tproxy.h"
#include "testutil.h"

#define MiB (1024ull * 1024ull)

static char bucket[128];
static char *big;

static int count_uploads(void *user, const struct s3d_upload_entry *e)
{
    (*(int *)user)++;
    return 0;
}

/* A producer that hands out 5 MiB parts and fails at part 3. */
struct failing {
    uint32_t next;
    struct iovec iov[8];
};

static int failing_next(void *ctx, struct s3d_put_part *p)
{
    struct failing *f = ctx;
    if (f->next == 3)
        return s3d_fail(S3D_EIO, "producer failed at part 3");
    f->iov[f->next].iov_base = big + (f->next - 1) * 5 * MiB;
    f->iov[f->next].iov_len = 5 * MiB;
    p->part_number = f->next;
    p->iov = &f->iov[f->next];
    p->iovcnt = 1;
    p->length = 5 * MiB;
    f->next++;
    return 0;
}

/* Records the id of the (one) open upload. */
static int get_upload_id(void *user, const struct s3d_upload_entry *e)
{
    snprintf(user, 256, "%s", e->upload_id);
    return 0;
}

static void check_previous(struct s3d_client *c, const char *key, const char *want)
{
    char buf[64];
    uint64_t got = 0;
    int uploads = 0;
    CHECK_OK(s3d_download_to_buffer(c, bucket, key, 0, UINT64_MAX, buf, sizeof(buf), &got, NULL));
    CHECK_EQ_U64(got, strlen(want));
    CHECK(memcmp(buf, want, got) == 0);
    CHECK_OK(s3d_list_uploads(c, bucket, NULL, count_uploads, &uploads));
    CHECK(uploads == 0);
}

struct canceler {
    struct s3d_cancel *tok;
    int delay_ms;
};

static void *cancel_later(void *arg)
{
    struct canceler *k = arg;
    usleep((useconds_t)k->delay_ms * 1000);
    s3d_cancel_request(k->tok);
    return NULL;
}

struct prog {
    uint64_t last;
    int stop_at_calls, calls;
};

static int on_progress(void *user, uint64_t done, uint64_t total)
{
    struct prog *p = user;
    p->last = done;
    return ++p->calls >= p->stop_at_calls;
}

int main(void)
{
    const char *ep = t_s3_endpoint();
    struct s3d_client *c = t_s3_client(), *slow;
    struct s3d_client_options o;
    struct s3d_transfer_options to;
    struct tproxy_opts po;
    struct tproxy *px;
    struct s3d_put_hooks h;
    struct s3d_put_options pop;
    struct failing f;
    struct canceler k;
    struct prog pr;
    pthread_t th;
    char host[256];
    int port;
    const uint64_t n = 40 * MiB;
    char *dst = malloc(n);

    big = malloc(n);
    CHECK(big != NULL && dst != NULL);
    t_fill_random(big, n, 5);
    t_s3_bucket(c, "abort", bucket, sizeof(bucket));
    CHECK_OK(s3d_upload_from_buffer(c, bucket, "k", "previous", 8, NULL));

    /* 1. The producer fails at part 3: the error is the producer's, the upload is aborted. */
    memset(&f, 0, sizeof(f));
    f.next = 1;
    memset(&h, 0, sizeof(h));
    h.next = failing_next;
    h.ctx = &f;
    memset(&pop, 0, sizeof(pop));
    pop.max_concurrency = 2;
    CHECK_ERR(s3d_xfer_put_multipart(c, bucket, "k", &h, &pop), S3D_EIO);
    CHECK_MSG_HAS("producer failed at part 3");
    check_previous(c, "k", "previous");

    /* 2. Canceled from another thread while parts are on the wire (slow proxy). */
    tproxy_parse_endpoint(ep, host, sizeof(host), &port);
    memset(&po, 0, sizeof(po));
    po.cut_s2c_after = -1;
    po.stall_s2c_after = -1;
    po.cut_c2s_after = -1;
    po.delay_us = 20000; /* ~3 MB/s per connection: 40 MiB would take several seconds */
    px = tproxy_start(host, port, &po);
    memset(&o, 0, sizeof(o));
    o.endpoint_url = tproxy_url(px);
    o.part_size = 5 * MiB;
    o.max_concurrency = 2;
    CHECK_OK(s3d_client_new(&o, &slow));
    memset(&to, 0, sizeof(to));
    CHECK_OK(s3d_cancel_new(&k.tok));
    k.delay_ms = 300;
    to.cancel = k.tok;
    CHECK(pthread_create(&th, NULL, cancel_later, &k) == 0);
    CHECK_ERR(s3d_upload_from_buffer(slow, bucket, "k", big, n, &to), S3D_ECANCELED);
    pthread_join(th, NULL);
    CHECK(s3d_cancel_requested(k.tok));
    check_previous(c, "k", "previous");

    /* 3. A download canceled from another thread. */
    CHECK_OK(s3d_upload_from_buffer(c, bucket, "big", big, n, NULL));
    s3d_cancel_free(k.tok);
    CHECK_OK(s3d_cancel_new(&k.tok));
    to.cancel = k.tok;
    memset(&pr, 0, sizeof(pr));
    pr.stop_at_calls = 1 << 30;
    to.progress = on_progress;
    to.progress_user = &pr;
    CHECK(pthread_create(&th, NULL, cancel_later, &k) == 0);
    CHECK_ERR(s3d_download_to_buffer(slow, bucket, "big", 0, UINT64_MAX, dst, n, NULL, &to),
              S3D_ECANCELED);
    pthread_join(th, NULL);
    CHECK(pr.last < n); /* it stopped before the end */

    /* 4. Canceled by the progress callback. */
    to.cancel = NULL;
    memset(&pr, 0, sizeof(pr));
    pr.stop_at_calls = 3;
    CHECK_ERR(s3d_download_to_buffer(slow, bucket, "big", 0, UINT64_MAX, dst, n, NULL, &to),
              S3D_ECANCELED);
    CHECK_MSG_HAS("progress callback");
    CHECK(pr.last < n);
    s3d_client_free(slow);
    tproxy_stop(px);

    /* 5. The upload fails and so does its abort (the proxy answers the DELETE with a 500, and
     * one try per request): the error says the upload is left open and how to remove it. */
    memset(&po, 0, sizeof(po));
    po.cut_s2c_after = -1;
    po.stall_s2c_after = -1;
    po.cut_c2s_after = -1;
    po.fail_request = "DELETE ";
    px = tproxy_start(host, port, &po);
    memset(&o, 0, sizeof(o));
    o.endpoint_url = tproxy_url(px);
    o.max_attempts = 1;
    CHECK_OK(s3d_client_new(&o, &slow));
    memset(&f, 0, sizeof(f));
    f.next = 1;
    h.ctx = &f;
    CHECK_ERR(s3d_xfer_put_multipart(slow, bucket, "k 'q'", &h, &pop), S3D_EIO);
    CHECK(tproxy_failed_requests(px) == 1);
    {
        char msg[2048], id[256] = "", want[600];
        int uploads = 0;
        snprintf(msg, sizeof(msg), "%s", s3d_last_error_message());
        CHECK_MSG_HAS("producer failed at part 3");
        CHECK_MSG_HAS("could not be aborted, so it is left open");
        CHECK_MSG_HAS("aws s3api abort-multipart-upload");
        CHECK_OK(s3d_list_uploads(c, bucket, NULL, count_uploads, &uploads));
        CHECK(uploads == 1);
        CHECK_OK(s3d_list_uploads(c, bucket, NULL, get_upload_id, id));
        /* The key is one shell word: 'k '\''q'\''' */
        snprintf(want, sizeof(want),
                 "`s3direct s3api abort-multipart-upload --bucket '%s' --key 'k '\\''q'\\''' "
                 "--upload-id '%s'`",
                 bucket, id);
        if (strstr(msg, want) == NULL)
            t_fail(__FILE__, __LINE__, "\"%s\" lacks \"%s\"", msg, want);
        CHECK_OK(s3d_abort_multipart_upload(c, bucket, "k 'q'", id));
        uploads = 0;
        CHECK_OK(s3d_list_uploads(c, bucket, NULL, count_uploads, &uploads));
        CHECK(uploads == 0);
    }
    s3d_client_free(slow);
    tproxy_stop(px);

    CHECK_OK(s3d_delete_object(c, bucket, "k"));
    CHECK_OK(s3d_delete_object(c, bucket, "big"));
    CHECK_OK(s3d_delete_bucket(c, bucket));
    s3d_cancel_free(k.tok);
    s3d_client_free(c);
    free(big);
    free(dst);
    return 0;
}
