/* test_client_cancel.c - s3d_client_set_cancel: a request of any kind on the client (a HEAD,
 * which has no transfer options; a download's first GET, which runs no progress callback)
 * stops with S3D_ECANCELED soon after the token is requested, against a server that accepts
 * connections and never answers (where it would otherwise wait out the stall timeout, 30 s,
 * on every attempt). The wait is bounded generously: the old behaviour is minutes. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "s3direct/s3direct.h"
#include "testutil.h"

/* A listening socket that is never accept()ed: the kernel completes the handshakes and the
 * requests are never answered. Returns its port. */
static int mute_server(int *fd)
{
    struct sockaddr_in a;
    socklen_t n = sizeof(a);
    *fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(*fd >= 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(bind(*fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    CHECK(listen(*fd, 64) == 0);
    CHECK(getsockname(*fd, (struct sockaddr *)&a, &n) == 0);
    return ntohs(a.sin_port);
}

struct later {
    struct s3d_cancel *token;
    unsigned ms;
};

static void *request_later(void *arg)
{
    struct later *l = arg;
    usleep(l->ms * 1000u);
    s3d_cancel_request(l->token);
    return NULL;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void one(int port, int which)
{
    struct s3d_client_options o;
    struct s3d_client *c;
    struct s3d_cancel *tok;
    struct later l;
    pthread_t th;
    char url[64], path[512];
    uint64_t t0;
    int rc;

    snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
    memset(&o, 0, sizeof(o));
    o.struct_size = sizeof(o);
    o.endpoint_url = url;
    o.access_key_id = "AKIDEXAMPLE";
    o.secret_access_key = "secret";
    CHECK_OK(s3d_client_new(&o, &c));
    CHECK_OK(s3d_cancel_new(&tok));
    CHECK_OK(s3d_client_set_cancel(c, tok));
    l.token = tok;
    l.ms = 300;
    CHECK(pthread_create(&th, NULL, request_later, &l) == 0);
    t0 = now_ms();
    if (which == 0) {
        struct s3d_object_info info;
        memset(&info, 0, sizeof(info));
        info.struct_size = sizeof(info);
        rc = s3d_head_object(c, "bucket", "key", &info);
    } else {
        snprintf(path, sizeof(path), "%s/out.bin", t_tmpdir());
        rc = s3d_download_to_file(c, "bucket", "key", path, NULL);
        CHECK(access(path, F_OK) != 0); /* nothing left behind */
    }
    CHECK(pthread_join(th, NULL) == 0);
    printf("%s: %s after %llu ms\n", which == 0 ? "head" : "download", s3d_err_name(rc),
           (unsigned long long)(now_ms() - t0));
    CHECK(rc == S3D_ECANCELED);
    CHECK(now_ms() - t0 < 20000); /* the stall timeout alone is 30 s per attempt */
    CHECK_OK(s3d_client_set_cancel(c, NULL));
    s3d_client_free(c);
    s3d_cancel_free(tok);
}

int main(void)
{
    int fd, port = mute_server(&fd);
    setenv("S3D_TEST_RETRY_BASE_MS", "1", 1);
    CHECK_ERR(s3d_client_set_cancel(NULL, NULL), S3D_EINVAL);
    one(port, 0);
    one(port, 1);
    close(fd);
    printf("ok\n");
    return 0;
}
