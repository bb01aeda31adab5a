/* tproxy.c - see tproxy.h. One thread per connection pair, poll() both ways. */
#include "tproxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "testutil.h"

#define MAX_CONNS 256

struct conn {
    struct tproxy *p;
    int cfd, sfd;
    pthread_t th;
    /* Client-side request parsing. */
    char hdr[16384];
    size_t hdr_len;
    uint64_t body_left;
    int kill_response;
    int swallow; /* the current request is answered by the proxy */
    int waiting; /* a request head went to the server and no response byte came back yet */
    /* The request's x-amz-checksum-crc32c (base64), checked against its body's CRC-32C. */
    char want_crc[16];
    uint32_t body_crc;
    uint64_t body_len;
};

struct tproxy {
    struct tproxy_opts o;
    char up_host[256];
    int up_port;
    int lfd;
    int port;
    char url[64];
    pthread_t acc;
    atomic_int stop;
    atomic_int cuts;
    atomic_int stalls;
    atomic_int response_cut_armed;
    atomic_int failed_armed;
    atomic_llong s2c, c2s;
    atomic_int in_flight, peak_in_flight;
    atomic_int crc_checked, crc_bad, crc_probes;
    pthread_mutex_t mu;
    char *log;
    size_t log_len, log_cap;
    char *log_copy;
    struct conn *conns[MAX_CONNS];
    int n_conns;
};

static void log_append(struct tproxy *p, const char *s, size_t n)
{
    pthread_mutex_lock(&p->mu);
    if (p->log_len + n + 1 > p->log_cap) {
        p->log_cap = (p->log_len + n + 1) * 2;
        p->log = realloc(p->log, p->log_cap);
        CHECK(p->log != NULL);
    }
    memcpy(p->log + p->log_len, s, n);
    p->log_len += n;
    p->log[p->log_len] = '\0';
    pthread_mutex_unlock(&p->mu);
}

static const char *find_header(const char *h, const char *name, size_t *len)
{
    size_t nl = strlen(name);
    const char *line = strstr(h, "\r\n");
    while (line != NULL && line[2] != '\r') {
        line += 2;
        if (strncasecmp(line, name, nl) == 0 && line[nl] == ':') {
            const char *v = line + nl + 1, *e;
            while (*v == ' ')
                v++;
            e = strstr(v, "\r\n");
            *len = e ? (size_t)(e - v) : strlen(v);
            return v;
        }
        line = strstr(line, "\r\n");
    }
    return NULL;
}

static void fake_500(struct conn *c)
{
    char resp[512], body[200];
    int status = c->p->o.fail_status ? c->p->o.fail_status : 500;
    size_t off = 0, n;
    snprintf(body, sizeof(body), "<Error><Code>%s</Code></Error>",
             c->p->o.fail_code ? c->p->o.fail_code : "InternalError");
    snprintf(resp, sizeof(resp),
             "HTTP/1.1 %d Injected\r\nContent-Type: application/xml\r\nContent-Length: "
             "%zu\r\n\r\n%s",
             status, strlen(body), body);
    n = strlen(resp);
    while (off < n) {
        ssize_t w = write(c->cfd, resp + off, n - off);
        if (w <= 0)
            return;
        off += (size_t)w;
    }
}

/* At the end of a request's body: its x-amz-checksum-crc32c against the bytes that passed. */
static void check_crc(struct conn *c)
{
    char got[S3D_CRC32C_B64_LEN];
    if (c->want_crc[0] == '\0')
        return;
    s3d_crc32c_base64(c->body_crc, got);
    atomic_fetch_add(&c->p->crc_checked, 1);
    if (strcmp(got, c->want_crc) != 0 && c->body_len == 1) {
        /* The client's one-byte question whether the server checks checksums
         * (s3d_op_probe_body_crc): a wrong CRC-32C on purpose. */
        atomic_fetch_add(&c->p->crc_probes, 1);
    } else if (strcmp(got, c->want_crc) != 0) {
        char line[128];
        atomic_fetch_add(&c->p->crc_bad, 1);
        snprintf(line, sizeof(line), "CRC32C MISMATCH: header %s, body %s\n", c->want_crc, got);
        log_append(c->p, line, strlen(line));
    }
    c->want_crc[0] = '\0';
}

/* Feeds client->server bytes to the request parser, logging each request head, and appends to
 * out what goes on to the server (everything, except a request the proxy answers itself). */
static void parse_c2s(struct conn *c, const char *d, size_t n, char *out, size_t *out_len)
{
    while (n > 0) {
        if (c->body_left > 0) {
            size_t k = n < c->body_left ? n : (size_t)c->body_left;
            if (!c->swallow) {
                memcpy(out + *out_len, d, k);
                *out_len += k;
            }
            c->body_left -= k;
            if (c->want_crc[0] != '\0')
                c->body_crc = s3d_crc32c(c->body_crc, d, k);
            d += k;
            n -= k;
            if (c->body_left == 0)
                check_crc(c);
            if (c->body_left == 0 && c->swallow) {
                c->swallow = 0;
                fake_500(c);
            }
            continue;
        }
        if (c->hdr_len < sizeof(c->hdr) - 1) {
            c->hdr[c->hdr_len++] = *d;
            c->hdr[c->hdr_len] = '\0';
        }
        d++;
        n--;
        if (c->hdr_len >= 4 && memcmp(c->hdr + c->hdr_len - 4, "\r\n\r\n", 4) == 0) {
            char line[4096];
            const char *eol = strstr(c->hdr, "\r\n"), *v;
            size_t vl = 0;
            int k = snprintf(line, sizeof(line), "%.*s", (int)(eol - c->hdr), c->hdr);
            v = find_header(c->hdr, "Range", &vl);
            if (v != NULL)
                k += snprintf(line + k, sizeof(line) - (size_t)k, " Range: %.*s", (int)vl, v);
            snprintf(line + k, sizeof(line) - (size_t)k, "\n");
            log_append(c->p, line, strlen(line));
            if (c->p->o.cut_response_to != NULL && strstr(line, c->p->o.cut_response_to) &&
                atomic_exchange(&c->p->response_cut_armed, 1) == 0)
                c->kill_response = 1;
            if (c->p->o.fail_request != NULL && strstr(line, c->p->o.fail_request) &&
                atomic_exchange(&c->p->failed_armed, 1) == 0)
                c->swallow = 1;
            v = find_header(c->hdr, "x-amz-checksum-crc32c", &vl);
            snprintf(c->want_crc, sizeof(c->want_crc), "%.*s", v ? (int)vl : 0, v ? v : "");
            c->body_crc = 0;
            v = find_header(c->hdr, "Content-Length", &vl);
            c->body_left = v ? strtoull(v, NULL, 10) : 0;
            c->body_len = c->body_left;
            if (c->body_left == 0)
                check_crc(c);
            if (!c->swallow) {
                memcpy(out + *out_len, c->hdr, c->hdr_len);
                *out_len += c->hdr_len;
                if (!c->waiting) {
                    int now = atomic_fetch_add(&c->p->in_flight, 1) + 1, peak;
                    c->waiting = 1;
                    peak = atomic_load(&c->p->peak_in_flight);
                    while (now > peak &&
                           !atomic_compare_exchange_weak(&c->p->peak_in_flight, &peak, now)) {
                    }
                }
            } else if (c->body_left == 0) {
                c->swallow = 0;
                fake_500(c);
            }
            c->hdr_len = 0;
        }
    }
}

static int connect_up(struct tproxy *p)
{
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    CHECK(fd >= 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)p->up_port);
    CHECK(inet_pton(AF_INET, p->up_host, &a.sin_addr) == 1);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        close(fd);
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

/* Decides whether forwarding n more bytes in this direction crosses the cut point (once). */
static int should_cut(struct tproxy *p, atomic_llong *ctr, int64_t limit, size_t n)
{
    long long before = atomic_fetch_add(ctr, (long long)n);
    if (limit < 0 || before + (long long)n <= limit)
        return 0;
    int zero = 0;
    return atomic_compare_exchange_strong(&p->cuts, &zero, 1);
}

static void *conn_main(void *arg)
{
    struct conn *c = arg;
    struct tproxy *p = c->p;
    char *buf = malloc(65536), *out = malloc(65536 + sizeof(c->hdr));
    CHECK(buf != NULL && out != NULL);
    for (;;) {
        struct pollfd fds[2] = {{c->cfd, POLLIN, 0}, {c->sfd, POLLIN, 0}};
        int i, r = poll(fds, 2, 100);
        if (atomic_load(&p->stop))
            break;
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            continue;
        for (i = 0; i < 2; i++) {
            int from = i == 0 ? c->cfd : c->sfd, to = i == 0 ? c->sfd : c->cfd;
            ssize_t n, w, off = 0;
            if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            n = read(from, buf, 65536);
            if (n <= 0)
                goto done;
            if (i == 0) {
                size_t out_len = 0;
                parse_c2s(c, buf, (size_t)n, out, &out_len);
                if (should_cut(p, &p->c2s, p->o.cut_c2s_after, (size_t)n))
                    goto cut;
                while (off < (ssize_t)out_len) {
                    w = write(to, out + off, out_len - (size_t)off);
                    if (w <= 0)
                        goto done;
                    off += w;
                }
                if (p->o.delay_us > 0)
                    usleep((useconds_t)p->o.delay_us);
                continue;
            }
            if (c->waiting) {
                c->waiting = 0;
                atomic_fetch_sub(&p->in_flight, 1);
            }
            if (c->kill_response) {
                /* Let the status line through, then reset: the client has seen a response
                 * start (so libcurl does not resend on its own) but never gets it. */
                c->kill_response = 0;
                atomic_store(&p->cuts, 1);
                {
                    const char *eol = memchr(buf, '\n', (size_t)n);
                    size_t k = eol ? (size_t)(eol - buf) + 1 : (size_t)n;
                    if (write(to, buf, k) < 0)
                        goto done;
                }
                goto cut;
            } else if (p->o.stall_s2c_after >= 0 &&
                       atomic_load(&p->s2c) + n > p->o.stall_s2c_after &&
                       atomic_exchange(&p->stalls, 1) == 0) {
                /* Hold this chunk back: the client sees no byte for stall_ms. */
                usleep((useconds_t)p->o.stall_ms * 1000);
                atomic_fetch_add(&p->s2c, (long long)n);
            } else if (should_cut(p, &p->s2c, p->o.cut_s2c_after, (size_t)n)) {
                /* Send part of this chunk first: the client sees a body that stops short. */
                ssize_t part = n / 2;
                while (off < part && (w = write(to, buf + off, (size_t)(part - off))) > 0)
                    off += w;
                goto cut;
            }
            while (off < n) {
                w = write(to, buf + off, (size_t)(n - off));
                if (w <= 0)
                    goto done;
                off += w;
            }
            if (p->o.delay_us > 0)
                usleep((useconds_t)p->o.delay_us);
        }
    }
cut:
    if (c->waiting) {
        c->waiting = 0;
        atomic_fetch_sub(&p->in_flight, 1);
    }
    /* A hard reset, as a dying server or middlebox would do: close with linger 0 sends RST
     * at once, whichever way the client was sending. */
    {
        struct linger lg = {1, 0};
        setsockopt(c->cfd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        close(c->cfd);
        c->cfd = -1;
        shutdown(c->sfd, SHUT_RDWR);
        free(buf);
        free(out);
        return NULL;
    }
done:
    if (c->waiting) {
        c->waiting = 0;
        atomic_fetch_sub(&p->in_flight, 1);
    }
    shutdown(c->cfd, SHUT_RDWR);
    shutdown(c->sfd, SHUT_RDWR);
    free(buf);
    free(out);
    return NULL;
}

static void *accept_main(void *arg)
{
    struct tproxy *p = arg;
    while (!atomic_load(&p->stop)) {
        struct pollfd pf = {p->lfd, POLLIN, 0};
        struct conn *c;
        int fd, one = 1;
        if (poll(&pf, 1, 100) <= 0)
            continue;
        fd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        c = calloc(1, sizeof(*c));
        CHECK(c != NULL);
        c->p = p;
        c->cfd = fd;
        c->sfd = connect_up(p);
        if (c->sfd < 0 || p->n_conns >= MAX_CONNS) {
            close(fd);
            if (c->sfd >= 0)
                close(c->sfd);
            free(c);
            continue;
        }
        pthread_mutex_lock(&p->mu);
        p->conns[p->n_conns++] = c;
        pthread_mutex_unlock(&p->mu);
        CHECK(pthread_create(&c->th, NULL, conn_main, c) == 0);
    }
    return NULL;
}

void tproxy_parse_endpoint(const char *url, char *host, size_t cap, int *port)
{
    const char *h = strstr(url, "://"), *colon;
    h = h ? h + 3 : url;
    colon = strchr(h, ':');
    CHECK(colon != NULL);
    snprintf(host, cap, "%.*s", (int)(colon - h), h);
    *port = atoi(colon + 1);
}

struct tproxy *tproxy_start(const char *up_host, int up_port, const struct tproxy_opts *o)
{
    struct tproxy *p = calloc(1, sizeof(*p));
    struct sockaddr_in a;
    socklen_t al = sizeof(a);
    int one = 1;
    CHECK(p != NULL);
    p->o = *o;
    snprintf(p->up_host, sizeof(p->up_host), "%s", up_host);
    p->up_port = up_port;
    pthread_mutex_init(&p->mu, NULL);
    p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(p->lfd >= 0);
    setsockopt(p->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(bind(p->lfd, (struct sockaddr *)&a, sizeof(a)) == 0);
    CHECK(listen(p->lfd, 64) == 0);
    CHECK(getsockname(p->lfd, (struct sockaddr *)&a, &al) == 0);
    p->port = ntohs(a.sin_port);
    snprintf(p->url, sizeof(p->url), "http://127.0.0.1:%d", p->port);
    CHECK(pthread_create(&p->acc, NULL, accept_main, p) == 0);
    return p;
}

const char *tproxy_url(const struct tproxy *p)
{
    return p->url;
}

int tproxy_cuts(struct tproxy *p)
{
    return atomic_load(&p->cuts);
}

int tproxy_peak_in_flight(struct tproxy *p)
{
    return atomic_load(&p->peak_in_flight);
}

int tproxy_connections(struct tproxy *p)
{
    int n;
    pthread_mutex_lock(&p->mu);
    n = p->n_conns;
    pthread_mutex_unlock(&p->mu);
    return n;
}

int tproxy_failed_requests(struct tproxy *p)
{
    return atomic_load(&p->failed_armed);
}

int tproxy_stalls(struct tproxy *p)
{
    return atomic_load(&p->stalls);
}

const char *tproxy_log(struct tproxy *p)
{
    pthread_mutex_lock(&p->mu);
    free(p->log_copy);
    p->log_copy = strdup(p->log ? p->log : "");
    pthread_mutex_unlock(&p->mu);
    return p->log_copy;
}

void tproxy_stop(struct tproxy *p)
{
    int i;
    atomic_store(&p->stop, 1);
    pthread_join(p->acc, NULL);
    for (i = 0; i < p->n_conns; i++) {
        pthread_join(p->conns[i]->th, NULL);
        if (p->conns[i]->cfd >= 0)
            close(p->conns[i]->cfd);
        close(p->conns[i]->sfd);
        free(p->conns[i]);
    }
    close(p->lfd);
    free(p->log);
    free(p->log_copy);
    free(p);
}

int tproxy_crc_checked(struct tproxy *p)
{
    return atomic_load(&p->crc_checked);
}

int tproxy_crc_bad(struct tproxy *p)
{
    return atomic_load(&p->crc_bad);
}

int tproxy_crc_probes(struct tproxy *p)
{
    return atomic_load(&p->crc_probes);
}
