/* s3origin_get.c - the read side of tests/gpu/s3origin.py in C, so that the S3 -> GPU rates of
 * scripts/gpu-check.sh measure the library, not a Python origin: HEAD and GET of
 * ROOT/BUCKET/KEY with Range, If-Match and If-None-Match, the body sent by sendfile(2) from the
 * page cache, one thread per connection, HTTP/1.1 keep-alive. The same ETags as s3origin.py
 * (the sidecar ROOT/.meta/BUCKET/KEY, else "SIZE-MTIMENS" in hex), so either origin may serve
 * an object the other wrote. Anything else (PUT, POST, DELETE, listings, ?tagging) answers
 * 501 NotImplemented: writes go to s3origin.py on the same ROOT. Signatures are not checked.
 *
 *     s3origin_get ROOT [PORT]      prints "s3origin_get: http://127.0.0.1:PORT" once listening
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define HDR_MAX 16384

static const char *g_root;

static int send_all(int s, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(s, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int reply_error(int s, int head, int status, const char *reason, const char *code)
{
    char body[512], hdr[512];
    int bn = snprintf(body, sizeof(body),
                      "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>%s</Code>"
                      "<Message></Message><RequestId>s3origin_get</RequestId></Error>",
                      code);
    int hn = snprintf(hdr, sizeof(hdr),
                      "HTTP/1.1 %d %s\r\nContent-Type: application/xml\r\nContent-Length: %d\r\n"
                      "\r\n",
                      status, reason, head ? 0 : bn);
    if (send_all(s, hdr, (size_t)hn) < 0)
        return -1;
    return head ? 0 : send_all(s, body, (size_t)bn);
}

/* A header's value in the request head h (NUL-terminated), trimmed into out; 0 when absent. */
static int header(const char *h, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name);
    for (const char *p = strstr(h, "\r\n"); p != NULL; p = strstr(p + 2, "\r\n")) {
        const char *l = p + 2;
        if (strncasecmp(l, name, nl) == 0 && l[nl] == ':') {
            const char *v = l + nl + 1, *e = strstr(v, "\r\n");
            while (*v == ' ' || *v == '\t')
                v++;
            size_t n = e ? (size_t)(e - v) : strlen(v);
            while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
                n--;
            if (n >= cap)
                n = cap - 1;
            memcpy(out, v, n);
            out[n] = 0;
            return 1;
        }
    }
    return 0;
}

/* %XX decoding of a path in place; -1 on a bad escape or a NUL. */
static int unescape(char *s)
{
    char *o = s;
    for (; *s; s++) {
        if (*s == '%') {
            unsigned v;
            if (!s[1] || !s[2] || sscanf(s + 1, "%2x", &v) != 1 || v == 0)
                return -1;
            *o++ = (char)v;
            s += 2;
        } else {
            *o++ = *s;
        }
    }
    *o = 0;
    return 0;
}

static void etag_of(const char *bucket, const char *key, const struct stat *st, char *out,
                    size_t cap)
{
    char m[8192];
    snprintf(m, sizeof(m), "%s/.meta/%s/%s", g_root, bucket, key);
    FILE *f = fopen(m, "re");
    if (f != NULL) {
        size_t n = fread(out, 1, cap - 1, f);
        fclose(f);
        while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' '))
            n--;
        out[n] = 0;
        if (n > 0)
            return;
    }
    snprintf(out, cap, "\"%jx-%jx\"", (uintmax_t)st->st_size,
             (uintmax_t)st->st_mtim.tv_sec * 1000000000u + (uintmax_t)st->st_mtim.tv_nsec);
}

/* One request whose head is h. 0 to keep the connection, -1 to close it. */
static int serve_one(int s, char *h)
{
    char method[16], target[4096], val[512], path[8192], etag[256];
    if (sscanf(h, "%15s %4095s", method, target) != 2)
        return reply_error(s, 0, 400, "Bad Request", "InvalidRequest"), -1;
    const int head = strcmp(method, "HEAD") == 0;
    if (!head && strcmp(method, "GET") != 0)
        return reply_error(s, 0, 501, "Not Implemented", "NotImplemented") < 0 ? -1 : 0;
    char *q = strchr(target, '?');
    if (q != NULL) {
        if (q[1] != 0) /* ?tagging, ?list-type=2, ?uploads...: the Python origin's */
            return reply_error(s, head, 501, "Not Implemented", "NotImplemented") < 0 ? -1 : 0;
        *q = 0;
    }
    if (target[0] != '/' || unescape(target) < 0 || strstr(target, "/..") != NULL ||
        strstr(target, "/.") == target)
        return reply_error(s, head, 400, "Bad Request", "InvalidRequest") < 0 ? -1 : 0;
    char *bucket = target + 1, *key = strchr(bucket, '/');
    if (key == NULL || key[1] == 0 || bucket[0] == '.') /* buckets: the Python origin's */
        return reply_error(s, head, 501, "Not Implemented", "NotImplemented") < 0 ? -1 : 0;
    *key++ = 0;
    snprintf(path, sizeof(path), "%s/%s/%s", g_root, bucket, key);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        return reply_error(s, head, 404, "Not Found", "NoSuchKey") < 0 ? -1 : 0;
    }
    etag_of(bucket, key, &st, etag, sizeof(etag));
    int rc = 0;
    uint64_t size = (uint64_t)st.st_size, start = 0, end = size ? size - 1 : 0;
    int status = 200;
    if (header(h, "If-Match", val, sizeof(val)) && strcmp(val, etag) != 0 && strcmp(val, "*")) {
        rc = reply_error(s, head, 412, "Precondition Failed", "PreconditionFailed");
        goto out;
    }
    if (header(h, "If-None-Match", val, sizeof(val)) && (!strcmp(val, etag) || !strcmp(val, "*"))) {
        char r[512];
        int n = snprintf(r, sizeof(r),
                         "HTTP/1.1 304 Not Modified\r\nETag: %s\r\n"
                         "Content-Length: 0\r\n\r\n",
                         etag);
        rc = send_all(s, r, (size_t)n);
        goto out;
    }
    if (header(h, "Range", val, sizeof(val))) {
        unsigned long long a = 0, b = 0;
        int n = 0;
        if (sscanf(val, "bytes=%llu-%n", &a, &n) == 1 && n > 0) {
            end = val[n] ? (sscanf(val + n, "%llu", &b) == 1 && b < size - 1 ? b : size - 1)
                         : size - 1;
            start = a;
        } else if (sscanf(val, "bytes=-%llu", &b) == 1 && b > 0) {
            start = b < size ? size - b : 0;
            end = size - 1;
        } else {
            rc = reply_error(s, head, 400, "Bad Request", "InvalidRange");
            goto out;
        }
        if (size == 0 || start >= size || start > end) {
            rc = reply_error(s, head, 416, "Range Not Satisfiable", "InvalidRange");
            goto out;
        }
        status = 206;
    }
    const uint64_t len = size ? end - start + 1 : 0;
    char lm[64], r[1024];
    struct tm tm;
    gmtime_r(&st.st_mtim.tv_sec, &tm);
    strftime(lm, sizeof(lm), "%a, %d %b %Y %H:%M:%S GMT", &tm);
    int n = snprintf(r, sizeof(r),
                     "HTTP/1.1 %d %s\r\nContent-Length: %" PRIu64 "\r\nETag: %s\r\n"
                     "Last-Modified: %s\r\nAccept-Ranges: bytes\r\n"
                     "Content-Type: application/octet-stream\r\n",
                     status, status == 206 ? "Partial Content" : "OK", len, etag, lm);
    if (status == 206)
        n += snprintf(r + n, sizeof(r) - (size_t)n,
                      "Content-Range: bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64 "\r\n", start, end,
                      size);
    n += snprintf(r + n, sizeof(r) - (size_t)n, "\r\n");
    if ((rc = send_all(s, r, (size_t)n)) < 0 || head)
        goto out;
    off_t off = (off_t)start;
    uint64_t left = len;
    while (left > 0) {
        ssize_t w = sendfile(s, fd, &off, left > (1u << 30) ? 1u << 30 : (size_t)left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            rc = -1;
            break;
        }
        left -= (uint64_t)w;
    }
out:
    close(fd);
    return rc;
}

/* Reads request heads (bodies are never expected: only GET and HEAD are served, and a
 * request with a body is answered and the connection closed). */
static void *conn_main(void *arg)
{
    int s = (int)(intptr_t)arg;
    char buf[HDR_MAX + 1];
    size_t have = 0;
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    for (;;) {
        char *e;
        buf[have] = 0;
        while ((e = strstr(buf, "\r\n\r\n")) == NULL) {
            if (have == HDR_MAX)
                goto done;
            ssize_t r = recv(s, buf + have, HDR_MAX - have, 0);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                goto done;
            have += (size_t)r;
            buf[have] = 0;
        }
        e[2] = 0; /* the head, with its last CRLF */
        char v[64];
        int has_body = (header(buf, "Content-Length", v, sizeof(v)) && strcmp(v, "0") != 0) ||
                       header(buf, "Transfer-Encoding", v, sizeof(v));
        int close_after = header(buf, "Connection", v, sizeof(v)) && !strcasecmp(v, "close");
        if (serve_one(s, buf) < 0 || has_body || close_after)
            goto done;
        size_t used = (size_t)(e + 4 - buf);
        memmove(buf, buf + used, have - used);
        have -= used;
    }
done:
    close(s);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: s3origin_get ROOT [PORT]\n");
        return 2;
    }
    g_root = argv[1];
    signal(SIGPIPE, SIG_IGN);
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(argc > 2 ? atoi(argv[2]) : 0)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof(a);
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(ls, 256) != 0 ||
        getsockname(ls, (struct sockaddr *)&a, &al) != 0) {
        perror("s3origin_get");
        return 1;
    }
    printf("s3origin_get: http://127.0.0.1:%d\n", ntohs(a.sin_port));
    fflush(stdout);
    for (;;) {
        int s = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
        if (s < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE)
                continue;
            perror("accept");
            return 1;
        }
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &at, conn_main, (void *)(intptr_t)s) != 0)
            close(s);
        pthread_attr_destroy(&at);
    }
}
