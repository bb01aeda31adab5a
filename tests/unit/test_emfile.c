/* test_emfile.c - running out of file descriptors: a request that cannot open a socket fails
 * at once with S3D_EMFILE and a message that says what to do ("too many open files; lower
 * --concurrency or raise ulimit -n"), not as "could not connect" after retries; and a
 * concurrency the descriptor limit cannot hold is lowered when the client is made, and when an
 * upload stream asks for its own. No server needed: the socket is refused before any
 * connection. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static struct s3d_client *client(uint32_t conc)
{
    struct s3d_client_options o;
    struct s3d_client *c = NULL;
    memset(&o, 0, sizeof(o));
    o.endpoint_url = "http://127.0.0.1:1";
    o.access_key_id = "AKIDTEST";
    o.secret_access_key = "secret";
    o.max_attempts = 5;
    o.max_concurrency = conc;
    o.device = -1;
    CHECK_OK(s3d_client_new(&o, &c));
    return c;
}

static char lowered[256]; /* the last "concurrency ... lowered" info line */

static void on_log(void *user, int level, const char *line, size_t len)
{
    (void)user;
    if (level == S3D_LOG_INFO && strstr(line, "lowered to") != NULL)
        snprintf(lowered, sizeof(lowered), "%.*s", (int)len, line);
}

/* A transfer's own max_concurrency is held to the descriptor limit as the client's is: an
 * upload stream's too (s3d_topts_resolve). */
static void check_stream_clamped(struct s3d_client *c)
{
    struct s3d_transfer_options t = {.struct_size = sizeof(t), .max_concurrency = 100};
    struct s3d_upload_stream *s = NULL;
    lowered[0] = '\0';
    s3d_log_set_callback(on_log, NULL, S3D_LOG_INFO);
    CHECK_OK(s3d_upload_stream_new(c, "bucket", "key", &t, &s));
    s3d_log_set_callback(NULL, NULL, 0);
    s3d_upload_stream_free(s);
    if (strstr(lowered, "concurrency 100 lowered to ") == NULL)
        t_fail(__FILE__, __LINE__, "upload stream: max_concurrency 100 not lowered (\"%s\")",
               lowered);
}

int main(void)
{
    struct s3d_client_config cfg = {.struct_size = sizeof(struct s3d_client_config)};
    struct s3d_object_info info = {.struct_size = sizeof(struct s3d_object_info)};
    struct s3d_client *c;
    struct rlimit rl;
    int fds[4096], n = 0, i, rc;
    double t0;
    char buf[16];

    /* Retries, were they made, would take seconds. */
    setenv("S3D_TEST_RETRY_BASE_MS", "1000", 1);
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    rl.rlim_cur = 64;
    CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);

    /* 1. Concurrency 100 does not fit in 64 descriptors: lowered. */
    c = client(100);
    CHECK_OK(s3d_client_get_config(c, &cfg));
    CHECK(cfg.max_concurrency >= 1 && cfg.max_concurrency < 100);
    s3d_client_free(c);
    c = client(4);
    CHECK_OK(s3d_client_get_config(c, &cfg));
    CHECK(cfg.max_concurrency == 4);
    check_stream_clamped(c);

    /* 2. Every descriptor taken: the request fails at once, named as such. */
    while (n < (int)(sizeof(fds) / sizeof(fds[0]))) {
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            CHECK(errno == EMFILE);
            break;
        }
        fds[n++] = fd;
    }
    t0 = now_s();
    rc = s3d_head_object(c, "bucket", "key", &info);
    CHECK_ERR(rc, S3D_EMFILE);
    CHECK_MSG_HAS("too many open files; lower --concurrency or raise ulimit -n");
    CHECK(now_s() - t0 < 0.9); /* not retried */
    rc = s3d_download_to_buffer(c, "bucket", "key", 0, sizeof(buf), buf, sizeof(buf), NULL, NULL);
    CHECK_ERR(rc, S3D_EMFILE);
    CHECK_MSG_HAS("too many open files");
    for (i = 0; i < n; i++)
        close(fds[i]);

    s3d_client_free(c);

    /* 3. With descriptors back, the real cause again (quick retries this time). */
    setenv("S3D_TEST_RETRY_BASE_MS", "1", 1);
    c = client(4);
    CHECK_ERR(s3d_head_object(c, "bucket", "key", &info), S3D_ECONNECT);
    s3d_client_free(c);
    return 0;
}
