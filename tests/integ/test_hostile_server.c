/* test_hostile_server.c - a fake S3 server in this process answers with canned responses: a
 * body longer than the range asked (S3D_EPROTO, nothing written past the destination), a
 * shorter one, a 200 to a range from byte > 0 (Range ignored), response headers over the cap,
 * a 500 with a 1 MiB error body (capped, retried, S3D_ESERVER), 503 SlowDown (retried,
 * S3D_ESLOWDOWN), a 400 RequestTimeout that succeeds on the second try, and an object
 * replaced mid-download by a server that ignores If-Match (S3D_ECHANGED on every download
 * path, from the ETag or the Content-Range size). No S3 server needed: signatures are not
 * checked here. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_util.h"
#include "common/crc32c.h"
#include "engine/client_impl.h"
#include "engine/xfer.h"
#include "s3/ops.h"
#include "testutil.h"

enum mode {
    M_MORE,
    M_LESS,
    M_IGNORE_RANGE,
    M_BIG_HEADERS,
    M_500_BIG,
    M_SLOWDOWN,
    M_TIMEOUT_ONCE,
    M_COMPLETE_LOST,
    M_CHECKSUM,
    M_RANGES,
    M_VERSIONS
};

/* M_VERSIONS: an object served by range (and HEAD) that ignores If-Match, as some relays and
 * caches do: requests numbered from switch_at on get vers[1], the object that replaced
 * vers[0]. */
struct version {
    const char *data;
    size_t size;
    const char *etag;
};
static struct version vers[2];
static atomic_int switch_at;

/* M_RANGES: a 10,000-byte object of 'B's served by range, with byte 5000 flipped on the
 * wire when flip is set; HEAD announces the true CRC32C. The request head being answered: */
static char cur_req[65536];
static atomic_int flip;

/* M_CHECKSUM: the GET announces this x-amz-checksum-crc32c for a 1000-byte object of 'B's. */
static char announced_crc[16];

static const char *complete_etag = "\"abc-3\"";

static atomic_int mode;
static atomic_int requests;
static int lfd;

static void send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

static void respond(int fd)
{
    char head[512], *body = NULL;
    size_t body_len = 0;
    int n = atomic_fetch_add(&requests, 1);
    switch (atomic_load(&mode)) {
    case M_MORE:
        body_len = 2000;
        snprintf(head, sizeof(head),
                 "HTTP/1.1 206 Partial Content\r\nContent-Length: %zu\r\n"
                 "Content-Range: bytes 0-999/5000\r\nConnection: close\r\n\r\n",
                 body_len);
        break;
    case M_LESS:
        body_len = 500;
        snprintf(head, sizeof(head),
                 "HTTP/1.1 206 Partial Content\r\nContent-Length: %zu\r\n"
                 "Connection: close\r\n\r\n",
                 body_len);
        break;
    case M_IGNORE_RANGE:
        body_len = 1000;
        snprintf(head, sizeof(head),
                 "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n"
                 "Connection: close\r\n\r\n",
                 body_len);
        break;
    case M_BIG_HEADERS: {
        size_t i;
        snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n");
        send_all(fd, head, strlen(head));
        for (i = 0; i < 1000; i++) {
            char line[128];
            snprintf(line, sizeof(line), "X-Junk-%zu: %0100zu\r\n", i, i);
            send_all(fd, line, strlen(line));
        }
        snprintf(head, sizeof(head), "Connection: close\r\n\r\n");
        break;
    }
    case M_500_BIG:
        body_len = 1u << 20;
        body = malloc(body_len);
        CHECK(body != NULL);
        memset(body, 'j', body_len);
        memcpy(body, "<Error><Code>InternalError</Code><Message>boom</Message></Error>", 64);
        snprintf(head, sizeof(head),
                 "HTTP/1.1 500 Internal Server Error\r\nContent-Length: %zu"
                 "\r\nx-amz-request-id: RID500\r\nConnection: close\r\n\r\n",
                 body_len);
        break;
    case M_SLOWDOWN:
        body = strdup("<Error><Code>SlowDown</Code><Message></Message></Error>");
        body_len = strlen(body);
        snprintf(head, sizeof(head),
                 "HTTP/1.1 503 Slow Down\r\nContent-Length: %zu\r\n"
                 "Connection: close\r\n\r\n",
                 body_len);
        break;
    case M_TIMEOUT_ONCE:
        if (n == 0) {
            body = strdup("<Error><Code>RequestTimeout</Code></Error>");
            body_len = strlen(body);
            snprintf(head, sizeof(head),
                     "HTTP/1.1 400 Bad Request\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     body_len);
        } else {
            body_len = 1000;
            snprintf(head, sizeof(head),
                     "HTTP/1.1 206 Partial Content\r\nContent-Length: %zu"
                     "\r\nConnection: close\r\n\r\n",
                     body_len);
        }
        break;
    case M_COMPLETE_LOST:
        /* The first Complete's response dies after its status line; the resent one finds
         * the upload gone; HEAD shows the object the first one made. */
        if (n == 0) {
            snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\n");
        } else if (n == 1) {
            body = strdup("<Error><Code>NoSuchUpload</Code></Error>");
            body_len = strlen(body);
            snprintf(head, sizeof(head),
                     "HTTP/1.1 404 Not Found\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     body_len);
        } else {
            snprintf(head, sizeof(head),
                     "HTTP/1.1 200 OK\r\nContent-Length: 123\r\n"
                     "ETag: %s\r\nConnection: close\r\n\r\n",
                     complete_etag);
        }
        break;
    case M_CHECKSUM:
        /* The first (and only) ranged GET covers the whole object: the checksum comes with
         * it. */
        body_len = 1000;
        snprintf(head, sizeof(head),
                 "HTTP/1.1 206 Partial Content\r\nContent-Length: %zu\r\n"
                 "Content-Range: bytes 0-999/1000\r\nx-amz-checksum-crc32c: %s\r\n"
                 "Connection: close\r\n\r\n",
                 body_len, announced_crc);
        break;
    case M_RANGES: {
        const char *r = strstr(cur_req, "Range: bytes=");
        unsigned long long a = 0, z = 9999;
        if (strncmp(cur_req, "HEAD ", 5) == 0) {
            snprintf(head, sizeof(head),
                     "HTTP/1.1 200 OK\r\nContent-Length: 10000\r\nETag: \"v1\"\r\n"
                     "x-amz-checksum-crc32c: %s\r\nConnection: close\r\n\r\n",
                     announced_crc);
            break;
        }
        if (r != NULL)
            sscanf(r, "Range: bytes=%llu-%llu", &a, &z);
        if (z > 9999)
            z = 9999;
        body_len = (size_t)(z - a + 1);
        body = malloc(body_len);
        CHECK(body != NULL);
        memset(body, 'B', body_len);
        if (atomic_load(&flip) && a <= 5000 && 5000 <= z)
            body[5000 - a] ^= 1;
        snprintf(head, sizeof(head),
                 "HTTP/1.1 206 Partial Content\r\nContent-Length: %zu\r\n"
                 "Content-Range: bytes %llu-%llu/10000\r\nETag: \"v1\"\r\n"
                 "Connection: close\r\n\r\n",
                 body_len, a, z);
        break;
    }
    case M_VERSIONS: {
        const struct version *v = &vers[n >= atomic_load(&switch_at)];
        const char *r = strstr(cur_req, "Range: bytes=");
        unsigned long long a = 0, z = v->size - 1;
        if (strncmp(cur_req, "HEAD ", 5) == 0) {
            snprintf(head, sizeof(head),
                     "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nETag: %s\r\n"
                     "Connection: close\r\n\r\n",
                     v->size, v->etag);
            break;
        }
        if (r != NULL)
            sscanf(r, "Range: bytes=%llu-%llu", &a, &z);
        if (z >= v->size)
            z = v->size - 1;
        body_len = (size_t)(z - a + 1);
        body = malloc(body_len);
        CHECK(body != NULL);
        memcpy(body, v->data + a, body_len);
        snprintf(head, sizeof(head),
                 "HTTP/1.1 206 Partial Content\r\nContent-Length: %zu\r\n"
                 "Content-Range: bytes %llu-%llu/%zu\r\nETag: %s\r\n"
                 "Connection: close\r\n\r\n",
                 body_len, a, z, v->size, v->etag);
        break;
    }
    }
    send_all(fd, head, strlen(head));
    if (body_len > 0) {
        if (body == NULL) {
            body = malloc(body_len);
            CHECK(body != NULL);
            memset(body, 'B', body_len);
        }
        send_all(fd, body, body_len);
    }
    free(body);
}

static void *server(void *arg)
{
    for (;;) {
        char req[65536];
        size_t len = 0;
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0)
            return NULL;
        /* Read the request head (our requests here have no body). */
        while (len < sizeof(req) - 1) {
            ssize_t r = read(fd, req + len, sizeof(req) - 1 - len);
            if (r <= 0)
                break;
            len += (size_t)r;
            req[len] = '\0';
            if (strstr(req, "\r\n\r\n") != NULL)
                break;
        }
        memcpy(cur_req, req, len + 1);
        respond(fd);
        if (atomic_load(&mode) == M_COMPLETE_LOST && atomic_load(&requests) == 1) {
            /* The first Complete: reset after the status line, as a dying link would. */
            struct linger lg = {1, 0};
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
            close(fd);
            continue;
        }
        shutdown(fd, SHUT_WR);
        while (read(fd, req, sizeof(req)) > 0) {
        }
        close(fd);
    }
    return NULL;
}

/* Serves v0 until request switch_from, then v1 (M_VERSIONS), counting from 0 again. */
static void serve_versions(const struct version *v0, const struct version *v1, int switch_from)
{
    vers[0] = *v0;
    vers[1] = *v1;
    atomic_store(&switch_at, switch_from);
    atomic_store(&requests, 0);
    atomic_store(&mode, M_VERSIONS);
}

static void *read_file_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    char *p;
    long len;
    CHECK(f != NULL);
    CHECK(fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0);
    p = malloc((size_t)len);
    CHECK(p != NULL && fread(p, 1, (size_t)len, f) == (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return p;
}

/* A checkpoint replaced between open and read by a server that ignores If-Match: the data
 * GETs answer with the new version's ETag, so the read fails instead of returning the new
 * bytes under the old header. Both versions have the same layout and no stored CRCs, so only
 * the version check can tell them apart. */
static void checkpoint_replaced(struct s3d_client *c)
{
    struct t_tensors a, b;
    struct s3d_write_options wo;
    struct s3d_reader *r = NULL;
    struct s3d_tensor_dest *d;
    struct version v0, v1;
    char path[512];
    size_t i, n;

    t_make_tensors(&a, 6, 3000, 1);
    t_make_tensors(&b, 6, 3000, 1);
    for (i = 0; i < b.n; i++)
        t_fill_random(b.data[i], (size_t)b.src[i].nbytes, 100 + i);
    memset(&wo, 0, sizeof(wo));
    wo.no_checksum = 1;
    snprintf(path, sizeof(path), "%s/ck.safetensors", t_tmpdir());
    CHECK_OK(s3d_checkpoint_write(c, path, a.src, a.n, NULL, 0, &wo));
    v0.data = read_file_all(path, &v0.size);
    v0.etag = "\"ck1\"";
    CHECK_OK(s3d_checkpoint_write(c, path, b.src, b.n, NULL, 0, &wo));
    v1.data = read_file_all(path, &v1.size);
    v1.etag = "\"ck2\"";
    CHECK(v0.size == v1.size && memcmp(v0.data, v1.data, 8) == 0);
    CHECK(memcmp(v0.data, v1.data, 8 + (size_t)(*(const uint64_t *)(const void *)v0.data)) == 0);
    serve_versions(&v0, &v1, 1); /* the open's one GET sees v0, the read's see v1 */
    CHECK_OK(s3d_reader_open(c, "s3://bucket/ck.safetensors", &r));
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
    free((void *)v0.data);
    free((void *)v1.data);
    t_free_tensors(&a);
    t_free_tensors(&b);
}

/* Every download path against an object replaced mid-download by a server that ignores
 * If-Match: each ranged response's ETag and Content-Range size must be the first one's. */
static void replaced_ignoring_if_match(struct s3d_client *c)
{
    enum { SZ = 10000 };
    struct s3d_transfer_options to;
    struct version v0, v1, grown;
    char *d0 = malloc(SZ), *d1 = malloc(SZ + 2000), *dst = malloc(SZ + 2000), path[512];
    uint64_t got = 0;
    struct stat st;

    CHECK(d0 != NULL && d1 != NULL && dst != NULL);
    t_fill_random(d0, SZ, 1);
    t_fill_random(d1, SZ + 2000, 2);
    v0 = (struct version){d0, SZ, "\"v1\""};
    v1 = (struct version){d1, SZ, "\"v2\""};
    /* The same ETag (a relay that rewrites it, or a server with weak ETags) over an object of
     * another size: only Content-Range tells. */
    grown = (struct version){d1, SZ + 2000, "\"v1\""};
    memset(&to, 0, sizeof(to));
    to.part_size = 1000;
    to.max_concurrency = 1;

    /* Sanity: with no replacement, the ranges assemble v0. */
    serve_versions(&v0, &v1, 1000);
    CHECK_OK(s3d_download_to_buffer(c, "bucket", "key", 0, 5000, dst, SZ, &got, &to));
    CHECK_EQ_U64(got, 5000);
    CHECK(memcmp(dst, d0, 5000) == 0);

    /* Into memory, a part of the object (no whole-object HEAD at the end to notice): the
     * fifth range onwards comes from v1. */
    serve_versions(&v0, &v1, 4);
    CHECK_ERR(s3d_download_to_buffer(c, "bucket", "key", 0, 8000, dst, SZ, &got, &to),
              S3D_ECHANGED);
    CHECK_MSG_HAS("changed during the download");
    CHECK_MSG_HAS("\"v2\"");
    serve_versions(&v0, &grown, 4);
    CHECK_ERR(s3d_download_to_buffer(c, "bucket", "key", 0, 8000, dst, SZ, &got, &to),
              S3D_ECHANGED);
    CHECK_MSG_HAS("12000");

    /* Into a file (s3direct cp): the HEAD for the checksum comes right after the first range,
     * before the replacement; the file must not appear. */
    snprintf(path, sizeof(path), "%s/replaced.bin", t_tmpdir());
    serve_versions(&v0, &v1, 5);
    CHECK_ERR(s3d_download_to_file(c, "bucket", "key", path, &to), S3D_ECHANGED);
    CHECK(stat(path, &st) != 0);
    serve_versions(&v0, &grown, 5);
    CHECK_ERR(s3d_download_to_file(c, "bucket", "key", path, &to), S3D_ECHANGED);
    CHECK(stat(path, &st) != 0);

    /* One GET pinned to a version (a small copy's source read). */
    serve_versions(&v0, &v1, 0);
    CHECK_ERR(s3d_op_get_range(&c->s3, "bucket", "key", 0, SZ, dst, "\"v1\"", SZ), S3D_ECHANGED);
    serve_versions(&v0, &grown, 0);
    CHECK_ERR(s3d_op_get_range(&c->s3, "bucket", "key", 0, SZ, dst, "\"v1\"", SZ), S3D_ECHANGED);
    serve_versions(&v0, &v1, 1000);
    CHECK_OK(s3d_op_get_range(&c->s3, "bucket", "key", 0, SZ, dst, "\"v1\"", SZ));
    CHECK(memcmp(dst, d0, SZ) == 0);

    checkpoint_replaced(c);
    free(d0);
    free(d1);
    free(dst);
}

static int get(struct s3d_client *c, uint64_t offset, char *dst)
{
    struct s3d_get_job job;
    memset(&job, 0, sizeof(job));
    job.bucket = "bucket";
    job.key = "key";
    job.offset = offset;
    job.length = 1000;
    job.dst = dst;
    return s3d_xfer_get(c, &job, 1, NULL, 1, NULL, NULL, NULL);
}

int main(void)
{
    struct sockaddr_in a;
    socklen_t al = sizeof(a);
    struct s3d_client_options o;
    struct s3d_client *c;
    struct s3d_object_info info = {.struct_size = sizeof(struct s3d_object_info)};
    struct s3d_error_info ei = {.struct_size = sizeof(struct s3d_error_info)};
    pthread_t th;
    char url[64], *buf = malloc(4096);
    size_t i;

    CHECK(buf != NULL);
    signal(SIGPIPE, SIG_IGN); /* the fake server writes to clients that gave up */
    setenv("S3D_TEST_RETRY_BASE_MS", "5", 1);
    lfd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(lfd >= 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(bind(lfd, (struct sockaddr *)&a, sizeof(a)) == 0);
    CHECK(listen(lfd, 16) == 0);
    CHECK(getsockname(lfd, (struct sockaddr *)&a, &al) == 0);
    CHECK(pthread_create(&th, NULL, server, NULL) == 0);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", ntohs(a.sin_port));
    memset(&o, 0, sizeof(o));
    o.endpoint_url = url;
    o.access_key_id = "AKIDFAKE";
    o.secret_access_key = "secretfake";
    o.max_attempts = 3;
    CHECK_OK(s3d_client_new(&o, &c));

    /* More than asked: refused, and nothing written past the 1000 bytes. */
    atomic_store(&mode, M_MORE);
    memset(buf, 'G', 4096);
    CHECK_ERR(get(c, 0, buf), S3D_EPROTO);
    CHECK_MSG_HAS("more than the 1000 bytes asked");
    for (i = 1000; i < 4096; i++)
        CHECK(buf[i] == 'G');

    /* Less than asked (a complete response): refused. */
    atomic_store(&mode, M_LESS);
    CHECK_ERR(get(c, 0, buf), S3D_EPROTO);
    CHECK_MSG_HAS("500 bytes, 1000 expected");

    /* Range ignored: 200 for a range from byte 4000. */
    atomic_store(&mode, M_IGNORE_RANGE);
    CHECK_ERR(get(c, 4000, buf), S3D_EPROTO);
    CHECK_MSG_HAS("ignored the Range header");

    /* A full-object CRC32C from the GET is checked on a whole-object download; a composite
     * one ("-N") is not. */
    {
        char b[1000];
        uint64_t got = 0;
        memset(b, 'B', sizeof(b));
        atomic_store(&mode, M_CHECKSUM);
        s3d_crc32c_base64(s3d_crc32c(0, b, sizeof(b)), announced_crc);
        atomic_store(&requests, 0);
        CHECK_OK(s3d_download_to_buffer(c, "bucket", "key", 0, UINT64_MAX, buf, 4096, &got, NULL));
        CHECK_EQ_U64(got, 1000);
        s3d_crc32c_base64(s3d_crc32c(0, b, sizeof(b) - 1), announced_crc);
        atomic_store(&requests, 0);
        CHECK_ERR(s3d_download_to_buffer(c, "bucket", "key", 0, UINT64_MAX, buf, 4096, &got, NULL),
                  S3D_ECHECKSUM);
        CHECK_MSG_HAS("CRC32C mismatch");
        /* Into a file too: the file is not created; into a pipe (standard output is not
         * used here: a FIFO-like special file, /dev/null) the error still comes. */
        {
            char path[512];
            struct stat st;
            snprintf(path, sizeof(path), "%s/crc.bin", t_tmpdir());
            CHECK_ERR(s3d_download_to_file(c, "bucket", "key", path, NULL), S3D_ECHECKSUM);
            CHECK(stat(path, &st) != 0);
            CHECK_ERR(s3d_download_to_file(c, "bucket", "key", "/dev/null", NULL), S3D_ECHECKSUM);
            s3d_crc32c_base64(s3d_crc32c(0, b, sizeof(b)), announced_crc);
            CHECK_OK(s3d_download_to_file(c, "bucket", "key", path, NULL));
            CHECK(stat(path, &st) == 0 && st.st_size == 1000);
            s3d_crc32c_base64(s3d_crc32c(0, b, sizeof(b) - 1), announced_crc);
        }
        snprintf(announced_crc, sizeof(announced_crc), "AAAAAA==-3");
        atomic_store(&requests, 0);
        CHECK_OK(s3d_download_to_buffer(c, "bucket", "key", 0, UINT64_MAX, buf, 4096, &got, NULL));
    }

    /* A byte flipped on the wire in one of ten ranges: the object's CRC32C (from HEAD, as S3
     * returns it only for whole-object GETs) catches it, into memory and into a file, whose
     * path then stays empty. */
    {
        struct s3d_transfer_options to;
        char b[10000], path[512];
        struct stat st;
        uint64_t got = 0;
        char *big = malloc(10000);
        CHECK(big != NULL);
        memset(b, 'B', sizeof(b));
        memset(&to, 0, sizeof(to));
        to.part_size = 1000;
        to.max_concurrency = 3;
        s3d_crc32c_base64(s3d_crc32c(0, b, sizeof(b)), announced_crc);
        atomic_store(&mode, M_RANGES);
        snprintf(path, sizeof(path), "%s/flip.bin", t_tmpdir());
        atomic_store(&flip, 0);
        CHECK_OK(s3d_download_to_buffer(c, "bucket", "key", 0, UINT64_MAX, big, 10000, &got, &to));
        CHECK_EQ_U64(got, 10000);
        CHECK_OK(s3d_download_to_file(c, "bucket", "key", path, &to));
        CHECK(stat(path, &st) == 0 && st.st_size == 10000);
        CHECK(unlink(path) == 0);
        atomic_store(&flip, 1);
        CHECK_ERR(s3d_download_to_buffer(c, "bucket", "key", 0, UINT64_MAX, big, 10000, &got, &to),
                  S3D_ECHECKSUM);
        CHECK_ERR(s3d_download_to_file(c, "bucket", "key", path, &to), S3D_ECHECKSUM);
        CHECK_MSG_HAS("CRC32C mismatch");
        CHECK(stat(path, &st) != 0);
        atomic_store(&flip, 0);
        free(big);
    }

    /* Headers over the cap. */
    atomic_store(&mode, M_BIG_HEADERS);
    CHECK_ERR(s3d_head_object(c, "bucket", "key", &info), S3D_EPROTO);
    CHECK_MSG_HAS("response headers over");

    /* 500 with a 1 MiB body: the code is read from the capped body; retried 3 times. */
    atomic_store(&mode, M_500_BIG);
    atomic_store(&requests, 0);
    CHECK_ERR(get(c, 0, buf), S3D_ESERVER);
    CHECK(atomic_load(&requests) == 3);
    CHECK_MSG_HAS("InternalError");
    CHECK_MSG_HAS("after 3 attempts");
    s3d_last_error(&ei);
    CHECK(ei.http_status == 500);
    CHECK_STREQ(ei.s3_code, "InternalError");
    CHECK_STREQ(ei.request_id, "RID500");

    /* 503 SlowDown: a throttle is retried past max_attempts (for 30 s after the first try,
     * retry.h), here until a client's 1.5 s deadline, then S3D_ESLOWDOWN. */
    {
        struct s3d_client_options o2 = o;
        struct s3d_client *c2 = NULL;
        o2.deadline_ms = 1500;
        CHECK_OK(s3d_client_new(&o2, &c2));
        atomic_store(&mode, M_SLOWDOWN);
        atomic_store(&requests, 0);
        CHECK_ERR(get(c2, 0, buf), S3D_ESLOWDOWN);
        CHECK(atomic_load(&requests) > 3);
        s3d_client_free(c2);
    }

    /* 400 RequestTimeout once, then the data. */
    atomic_store(&mode, M_TIMEOUT_ONCE);
    atomic_store(&requests, 0);
    CHECK_OK(get(c, 0, buf));
    CHECK(atomic_load(&requests) == 2);
    CHECK(buf[0] == 'B' && buf[999] == 'B');

    /* A lost CompleteMultipartUpload response: done when the object has that many parts. */
    {
        struct s3d_op_part parts[3];
        memset(parts, 0, sizeof(parts));
        for (i = 0; i < 3; i++) {
            parts[i].part_number = (uint32_t)i + 1;
            snprintf(parts[i].etag, sizeof(parts[i].etag), "\"e%zu\"", i);
        }
        atomic_store(&mode, M_COMPLETE_LOST);
        atomic_store(&requests, 0);
        CHECK_OK(s3d_op_complete_multipart(&c->s3, "bucket", "key", "upid", parts, 3, NULL));
        CHECK(atomic_load(&requests) == 3);
        /* Another object (2 parts) at the key: the NoSuchUpload stands. */
        complete_etag = "\"abc-2\"";
        atomic_store(&requests, 0);
        CHECK_ERR(s3d_op_complete_multipart(&c->s3, "bucket", "key", "upid", parts, 3, NULL),
                  S3D_ENOUPLOAD);
        CHECK_MSG_HAS("NoSuchUpload");
    }

    replaced_ignoring_if_match(c);

    s3d_client_free(c);
    free(buf);
    return 0;
}
