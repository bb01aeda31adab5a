/* pathsim.c - s3d-pathsim, a TCP proxy that makes a loopback S3 server look like a distant one:
 * each connection capped at a rate in each direction, each request held for a delay.
 *
 *   s3d-pathsim --listen ADDR:PORT [--listen ADDR:PORT ...] --upstream HOST:PORT
 *               [--rate R] [--delay-ms D] [--stats FILE] [--max-seconds S]
 *
 *   --listen ADDR:PORT   a loopback address (127.x.y.z, localhost, [::1]) to accept on;
 *                        repeatable (up to 16); PORT 0 picks a free port. On start one line
 *                        per listener goes to stdout: "pathsim: listening on ADDR:PORT".
 *   --upstream HOST:PORT the server (loopback only) every accepted connection is relayed to.
 *   --rate R             bytes/s per connection per direction (token bucket, burst
 *                        max(16 KiB, 2 ms of R)); suffixes K M G (1000) or KiB MiB GiB (1024);
 *                        0 (default) = no cap. A capped direction holds about what a real
 *                        path has in flight, R x (delay + 10 ms), at least 64 KiB (its pipe,
 *                        and the receive buffer of the client's socket): a sender sees its
 *                        bytes acknowledged at the path's rate, not at loopback speed.
 *   --delay-ms D         client-to-server bytes are held D ms (may be fractional) before they
 *                        are forwarded, so that every request reaches the server D ms after
 *                        it was sent. Server-to-client bytes are not delayed.
 *   --stats FILE         JSON counters, rewritten atomically (FILE.tmp + rename) at most every
 *                        100 ms while they change, at once after SIGUSR1, and at exit:
 *                        {"accepted", "open", "peak_open", "bytes_c2s", "bytes_s2c",
 *                         "upstream_failed", "resets", "listeners": [{"addr", "accepted"}]}
 *   --max-seconds S      exit after S seconds (the loop never sleeps past that).
 *
 * SIGUSR1 sets peak_open to the connections open now and the accepted counters to 0 (a
 * benchmark row counts the connections its tool opened) and adds 1 to "resets".
 * SIGTERM and SIGINT exit cleanly (exit status 0). Bad arguments: status 2.
 *
 * Structure: one thread, one epoll set (edge-triggered for the connections), nonblocking
 * sockets. Each direction of a connection owns a pipe that is its buffer (1 MiB where the
 * kernel allows): bytes move socket -> pipe -> socket with splice(2), never through this
 * process's memory, so the proxy costs the kernel's page moves and a few syscalls per 64 KiB.
 * A direction's bytes are counted in (read into the pipe) and out (written from it); the
 * delay queue records, per read, the cumulative count and the time those bytes may leave;
 * the token bucket bounds how many of the ready bytes leave now. When bytes wait for time
 * (the delay or the bucket) the connection gets a wake-up time, and the loop's timeout is the
 * earliest of those (epoll_pwait2, nanoseconds). A peer's EOF is passed on (shutdown) once its
 * direction's pipe is empty; an error on either socket closes both, with a reset.
 *
 * Benchmark tooling, not part of the library: libc only, nothing from src/. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define NS            1000000000LL
#define MAX_LISTENERS 16
#define PIPE_BYTES    (1 << 20)
#define SEGS          1024   /* delay queue entries per connection */
#define SEG_MERGE_NS  100000 /* reads this close together share one entry */
#define STATS_EVERY   (NS / 10)
#define PUMP_ROUNDS   8 /* read/write rounds per connection per wake-up */
#define MAX_EVENTS    256

enum kind { K_LISTENER, K_END, K_SIGNAL };

struct tag {
    enum kind kind;
};

struct listener {
    struct tag tag;
    int fd;
    char addr[64];
    uint64_t accepted;
};

struct seg {
    uint64_t end;  /* cumulative bytes in, up to the end of this read */
    int64_t ready; /* when they may leave */
};

/* One direction: src socket -> pipe -> dst socket. */
struct dir {
    int pipe[2];
    size_t cap;       /* bytes the pipe is asked to hold */
    uint64_t in, out; /* cumulative bytes into and out of the pipe */
    uint64_t ready;   /* of the bytes in, those whose delay has passed */
    struct seg *segs; /* ring, only with a delay (c2s) */
    unsigned seg_head, seg_n;
    double tokens;
    int64_t refill;
    bool eof, shut;
    uint64_t *counter; /* stats bytes_c2s / bytes_s2c */
};

struct conn;
struct end {
    struct tag tag;
    int fd;
    bool readable, writable;
    struct conn *c;
};

struct conn {
    struct end cli, up;
    struct dir c2s, s2c;
    bool connected, dead;
    int64_t wake; /* 0: nothing waits for time */
    struct conn *prev, *next;
};

static struct {
    struct sockaddr_storage up_addr;
    socklen_t up_len;
    double rate; /* bytes/s, 0 = no cap */
    double burst;
    int64_t delay; /* ns */
    size_t hold;   /* bytes a capped path holds per connection and direction (path_hold) */
    const char *stats_path;
    int ep;
    struct listener listeners[MAX_LISTENERS];
    int n_listeners;
    struct conn *conns;
    struct conn *dead;
    uint64_t accepted, open, peak_open, bytes_c2s, bytes_s2c, upstream_failed, resets;
    bool dirty;
    int64_t stats_at;
} g;

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * NS + ts.tv_nsec;
}

static int usage(void)
{
    fprintf(stderr, "usage: s3d-pathsim --listen ADDR:PORT [--listen ...] --upstream HOST:PORT\n"
                    "                   [--rate R] [--delay-ms D] [--stats FILE] "
                    "[--max-seconds S]\n");
    return 2;
}

/* "127.0.0.1:80", "localhost:80", "[::1]:80" -> a loopback address; false otherwise. */
static bool parse_addr(const char *s, struct sockaddr_storage *ss, socklen_t *len)
{
    char host[64];
    const char *colon = strrchr(s, ':');
    char *end;

    if (!colon || colon == s || (size_t)(colon - s) >= sizeof(host))
        return false;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    errno = 0;
    unsigned long port = strtoul(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end || port > 65535)
        return false;
    memset(ss, 0, sizeof(*ss));
    if (strcmp(host, "localhost") == 0)
        strcpy(host, "127.0.0.1");
    size_t hl = strlen(host);
    if (hl > 2 && host[0] == '[' && host[hl - 1] == ']') {
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
        host[hl - 1] = '\0';
        if (inet_pton(AF_INET6, host + 1, &a6->sin6_addr) != 1 ||
            !IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr))
            return false;
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        *len = sizeof(*a6);
        return true;
    }
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    if (inet_pton(AF_INET, host, &a4->sin_addr) != 1 || (ntohl(a4->sin_addr.s_addr) >> 24) != 127)
        return false;
    a4->sin_family = AF_INET;
    a4->sin_port = htons((uint16_t)port);
    *len = sizeof(*a4);
    return true;
}

static unsigned port_of(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
    return ntohs(((const struct sockaddr_in *)ss)->sin_port);
}

static void format_addr(const struct sockaddr_storage *ss, char *out, size_t n)
{
    char host[INET6_ADDRSTRLEN] = "?";

    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &a6->sin6_addr, host, sizeof(host));
        snprintf(out, n, "[%s]:%u", host, port_of(ss));
    } else {
        const struct sockaddr_in *a4 = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &a4->sin_addr, host, sizeof(host));
        snprintf(out, n, "%s:%u", host, port_of(ss));
    }
}

/* "12M" = 12e6, "12MiB" = 12 * 2^20, "0" = no cap; -1 when malformed. */
static double parse_rate(const char *s)
{
    static const struct {
        const char *suffix;
        double mult;
    } units[] = {{"", 1},    {"K", 1e3},      {"k", 1e3},         {"M", 1e6},
                 {"G", 1e9}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}};
    char *end;

    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !(v >= 0) || isinf(v))
        return -1;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (strcmp(end, units[i].suffix) == 0)
            return v * units[i].mult;
    return -1;
}

static bool parse_seconds(const char *s, double max, double *out)
{
    char *end;

    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= 0) || v > max)
        return false;
    *out = v;
    return true;
}

/* ---- stats ---------------------------------------------------------------------------- */

static void stats_write(int64_t now)
{
    char tmp[4096];
    FILE *f;

    g.dirty = false;
    g.stats_at = now;
    if (!g.stats_path)
        return;
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", g.stats_path) >= (int)sizeof(tmp))
        return;
    f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "pathsim: %s: %s\n", tmp, strerror(errno));
        return;
    }
    fprintf(f,
            "{\"accepted\": %" PRIu64 ", \"open\": %" PRIu64 ", \"peak_open\": %" PRIu64
            ", \"bytes_c2s\": %" PRIu64 ", \"bytes_s2c\": %" PRIu64
            ", \"upstream_failed\": %" PRIu64 ", \"resets\": %" PRIu64 ", \"listeners\": [",
            g.accepted, g.open, g.peak_open, g.bytes_c2s, g.bytes_s2c, g.upstream_failed, g.resets);
    for (int i = 0; i < g.n_listeners; i++)
        fprintf(f, "%s{\"addr\": \"%s\", \"accepted\": %" PRIu64 "}", i ? ", " : "",
                g.listeners[i].addr, g.listeners[i].accepted);
    fprintf(f, "]}\n");
    if (fclose(f) != 0 || rename(tmp, g.stats_path) != 0)
        fprintf(stderr, "pathsim: %s: %s\n", g.stats_path, strerror(errno));
}

static void stats_reset(void)
{
    g.accepted = 0;
    for (int i = 0; i < g.n_listeners; i++)
        g.listeners[i].accepted = 0;
    g.peak_open = g.open;
    g.resets++;
}

/* ---- connections ---------------------------------------------------------------------- */

static void set_wake(struct conn *c, int64_t t)
{
    if (!c->wake || t < c->wake)
        c->wake = t;
}

/* What a capped path holds per connection and direction: its bytes in flight, rate x (delay +
 * 10 ms), at least 64 KiB; 0 (no limit) when the rate is not capped. A real path at rate R
 * with round trip T acknowledges a sender's bytes about R x T ahead of the receiver's reading
 * them; without this bound the pipe (1 MiB) and the kernel's autotuned receive buffer (up to
 * 6 MiB) would take most of an 8 MiB part at loopback speed, and an uploader that counts the
 * bytes its peer acknowledged would see a rate the path does not have. */
static size_t path_hold(void)
{
    if (g.rate <= 0)
        return 0;
    double b = g.rate * ((double)g.delay / (double)NS + 0.010);
    return b < 65536 ? 65536 : (size_t)b;
}

static int dir_init(struct dir *d, bool delayed, uint64_t *counter)
{
    d->pipe[0] = d->pipe[1] = -1;
    d->counter = counter;
    d->tokens = g.burst;
    if (pipe2(d->pipe, O_NONBLOCK | O_CLOEXEC) != 0)
        return -1;
    /* a larger pipe moves more per splice; where that is refused (an unprivileged user past
     * fs.pipe-user-pages-soft) it stays at the kernel's 64 KiB */
    (void)fcntl(d->pipe[1], F_SETPIPE_SZ, PIPE_BYTES);
    int sz = fcntl(d->pipe[1], F_GETPIPE_SZ);
    d->cap = sz > 0 ? (size_t)sz : 65536;
    if (g.hold && d->cap > g.hold)
        d->cap = g.hold;
    if (delayed && !(d->segs = calloc(SEGS, sizeof(*d->segs))))
        return -1;
    return 0;
}

static void dir_free(struct dir *d)
{
    for (int i = 0; i < 2; i++) {
        if (d->pipe[i] >= 0)
            close(d->pipe[i]);
        d->pipe[i] = -1;
    }
    free(d->segs);
    d->segs = NULL;
}

static void end_close(struct end *e, bool reset)
{
    if (e->fd < 0)
        return;
    if (reset) {
        struct linger l = {1, 0}; /* close with RST: the peer sees the failure */
        setsockopt(e->fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    }
    close(e->fd);
    e->fd = -1;
}

/* Closes both sockets now (their epoll registrations go with them); the memory is freed
 * after the current batch of events, which may still name this connection. */
static void conn_close(struct conn *c, bool reset)
{
    if (c->dead)
        return;
    c->dead = true;
    end_close(&c->cli, reset);
    end_close(&c->up, reset);
    dir_free(&c->c2s);
    dir_free(&c->s2c);
    if (c->prev)
        c->prev->next = c->next;
    else
        g.conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->next = g.dead;
    g.dead = c;
    g.open--;
    g.dirty = true;
}

static void refill(struct dir *d, int64_t now)
{
    if (now > d->refill) {
        d->tokens += g.rate * (double)(now - d->refill) / (double)NS;
        if (d->tokens > g.burst)
            d->tokens = g.burst;
    }
    d->refill = now;
}

/* Moves what it can of one direction; 1 when something moved, 0 when nothing could, -1 on a
 * socket error (the caller closes the connection). */
static int dir_pump(struct conn *c, struct dir *d, struct end *src, struct end *dst, bool dst_ready,
                    int64_t now)
{
    int progress = 0;

    while (src->readable && !d->eof && d->in - d->out < d->cap && (!d->segs || d->seg_n < SEGS)) {
        ssize_t n = splice(src->fd, NULL, d->pipe[1], NULL, d->cap - (d->in - d->out),
                           SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (n > 0) {
            d->in += (uint64_t)n;
            progress = 1;
            if (d->segs) {
                int64_t ready = now + g.delay;
                struct seg *last = d->seg_n ? &d->segs[(d->seg_head + d->seg_n - 1) % SEGS] : NULL;
                if (last && ready - last->ready < SEG_MERGE_NS) {
                    last->end = d->in;
                } else {
                    d->segs[(d->seg_head + d->seg_n) % SEGS] = (struct seg){d->in, ready};
                    d->seg_n++;
                }
            } else {
                d->ready = d->in;
            }
        } else if (n == 0) {
            d->eof = true;
            progress = 1;
        } else if (errno == EAGAIN) {
            /* the socket is empty, or the pipe has no free slot (a splice can take a whole
             * page slot for a few bytes, so the pipe fills before cap) */
            int queued = 0;
            if (d->in == d->out || (ioctl(src->fd, FIONREAD, &queued) == 0 && queued == 0))
                src->readable = false;
            break;
        } else if (errno != EINTR) {
            return -1;
        }
    }
    while (d->segs && d->seg_n && d->segs[d->seg_head].ready <= now) {
        d->ready = d->segs[d->seg_head].end;
        d->seg_head = (d->seg_head + 1) % SEGS;
        d->seg_n--;
    }
    if (d->segs && d->seg_n)
        set_wake(c, d->segs[d->seg_head].ready);
    while (dst_ready && dst->writable && d->ready > d->out) {
        uint64_t avail = d->ready - d->out;
        if (g.rate > 0) {
            refill(d, now);
            double need = fmin((double)avail, g.burst / 2);
            if (d->tokens < need) {
                set_wake(c, now + (int64_t)ceil((need - d->tokens) / g.rate * (double)NS));
                break;
            }
            if ((double)avail > d->tokens)
                avail = (uint64_t)d->tokens;
        }
        ssize_t n =
            splice(d->pipe[0], NULL, dst->fd, NULL, avail, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (n > 0) {
            d->out += (uint64_t)n;
            d->tokens -= (double)n;
            *d->counter += (uint64_t)n;
            g.dirty = true;
            progress = 1;
        } else if (n < 0 && errno == EAGAIN) {
            dst->writable = false;
        } else if (n == 0 || errno != EINTR) {
            return -1;
        }
    }
    if (d->eof && !d->shut && dst_ready && d->out == d->in) {
        shutdown(dst->fd, SHUT_WR);
        d->shut = true;
        progress = 1;
    }
    return progress;
}

static void conn_pump(struct conn *c, int64_t now)
{
    if (c->dead)
        return;
    if (!c->connected && c->up.writable) {
        int err = 0;
        socklen_t len = sizeof(err);
        if (getsockopt(c->up.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err) {
            g.upstream_failed++;
            conn_close(c, true);
            return;
        }
        c->connected = true;
    }
    c->wake = 0;
    for (int i = 0; i < PUMP_ROUNDS; i++) {
        int a = dir_pump(c, &c->c2s, &c->cli, &c->up, c->connected, now);
        int b = a < 0 ? 0 : dir_pump(c, &c->s2c, &c->up, &c->cli, c->connected, now);
        if (a < 0 || b < 0) {
            conn_close(c, true);
            return;
        }
        if (!a && !b)
            break;
        if (i == PUMP_ROUNDS - 1)
            set_wake(c, now); /* more to move: after the other connections' turn */
    }
    if (c->c2s.shut && c->s2c.shut)
        conn_close(c, false);
}

static int conn_new(struct listener *l, int fd)
{
    struct conn *c = calloc(1, sizeof(*c));
    int one = 1;

    if (!c) {
        close(fd);
        return -1;
    }
    c->cli = (struct end){{K_END}, fd, true, true, c};
    c->up = (struct end){{K_END}, -1, false, false, c};
    c->c2s.pipe[0] = c->c2s.pipe[1] = c->s2c.pipe[0] = c->s2c.pipe[1] = -1;
    if (dir_init(&c->c2s, g.delay > 0, &g.bytes_c2s) != 0 ||
        dir_init(&c->s2c, false, &g.bytes_s2c) != 0)
        goto fail;
    c->up.fd = socket(g.up_addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->up.fd < 0)
        goto fail;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(c->up.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(c->up.fd, (struct sockaddr *)&g.up_addr, g.up_len) == 0) {
        c->connected = true;
        c->up.writable = true;
    } else if (errno != EINPROGRESS) {
        g.upstream_failed++;
        goto fail;
    }
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET};
    ev.data.ptr = &c->cli;
    if (epoll_ctl(g.ep, EPOLL_CTL_ADD, fd, &ev) != 0)
        goto fail;
    ev.data.ptr = &c->up;
    if (epoll_ctl(g.ep, EPOLL_CTL_ADD, c->up.fd, &ev) != 0)
        goto fail;
    c->c2s.refill = c->s2c.refill = now_ns();
    c->next = g.conns;
    if (g.conns)
        g.conns->prev = c;
    g.conns = c;
    g.accepted++;
    l->accepted++;
    if (++g.open > g.peak_open)
        g.peak_open = g.open;
    g.dirty = true;
    return 0;
fail:
    fprintf(stderr, "pathsim: connection not relayed: %s\n", strerror(errno));
    end_close(&c->cli, true);
    end_close(&c->up, false);
    dir_free(&c->c2s);
    dir_free(&c->s2c);
    free(c);
    return -1;
}

static void on_accept(struct listener *l)
{
    for (int i = 0; i < 64; i++) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                fprintf(stderr, "pathsim: accept on %s: %s\n", l->addr, strerror(errno));
            return;
        }
        if (conn_new(l, fd) == 0)
            conn_pump(g.conns, now_ns());
    }
}

static int listen_on(const char *spec)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int one = 1;

    if (g.n_listeners == MAX_LISTENERS) {
        fprintf(stderr, "pathsim: at most %d listeners\n", MAX_LISTENERS);
        return -1;
    }
    if (!parse_addr(spec, &ss, &len)) {
        fprintf(stderr, "pathsim: --listen %s: not a loopback ADDR:PORT\n", spec);
        return -1;
    }
    struct listener *l = &g.listeners[g.n_listeners];
    l->tag.kind = K_LISTENER;
    l->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->fd < 0)
        goto fail;
    setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (g.hold) {
        /* Accepted sockets inherit it, and the window scale is agreed from it at the
         * handshake. The kernel doubles it for its own bookkeeping. */
        int rcv = (int)(g.hold / 2 > 32768 ? g.hold / 2 : 32768);
        setsockopt(l->fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
    }
    if (bind(l->fd, (struct sockaddr *)&ss, len) != 0 || listen(l->fd, 1024) != 0)
        goto fail;
    len = sizeof(ss);
    if (getsockname(l->fd, (struct sockaddr *)&ss, &len) != 0)
        goto fail;
    format_addr(&ss, l->addr, sizeof(l->addr));
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = l};
    if (epoll_ctl(g.ep, EPOLL_CTL_ADD, l->fd, &ev) != 0)
        goto fail;
    g.n_listeners++;
    return 0;
fail:
    fprintf(stderr, "pathsim: --listen %s: %s\n", spec, strerror(errno));
    return -1;
}

/* epoll_pwait2 where the kernel has it (5.11), else epoll_wait rounded up to a millisecond. */
static int wait_events(struct epoll_event *ev, int64_t timeout)
{
    static bool ms_only;

    if (!ms_only) {
        struct timespec ts = {(time_t)(timeout / NS), (long)(timeout % NS)};
        int n = epoll_pwait2(g.ep, ev, MAX_EVENTS, &ts, NULL);
        if (n >= 0 || errno != ENOSYS)
            return n;
        ms_only = true;
    }
    return epoll_wait(g.ep, ev, MAX_EVENTS, (int)((timeout + 999999) / 1000000));
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'}, {"upstream", required_argument, NULL, 'u'},
        {"rate", required_argument, NULL, 'r'},   {"delay-ms", required_argument, NULL, 'd'},
        {"stats", required_argument, NULL, 's'},  {"max-seconds", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0}};
    const char *listens[MAX_LISTENERS];
    int n_listen = 0, opt;
    bool have_up = false;
    double delay_ms = 0, max_s = 0;
    struct epoll_event evs[MAX_EVENTS];
    sigset_t mask;
    struct tag sig_tag = {K_SIGNAL};
    struct rlimit rl;

    g.ep = -1;
    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (opt) {
        case 'l':
            if (n_listen == MAX_LISTENERS) {
                fprintf(stderr, "pathsim: at most %d listeners\n", MAX_LISTENERS);
                return 2;
            }
            listens[n_listen++] = optarg;
            break;
        case 'u':
            if (!parse_addr(optarg, &g.up_addr, &g.up_len) || !port_of(&g.up_addr)) {
                fprintf(stderr, "pathsim: --upstream %s: not a loopback HOST:PORT\n", optarg);
                return 2;
            }
            have_up = true;
            break;
        case 'r':
            if ((g.rate = parse_rate(optarg)) < 0) {
                fprintf(stderr, "pathsim: --rate %s: a number of bytes/s (K M G KiB MiB GiB)\n",
                        optarg);
                return 2;
            }
            break;
        case 'd':
            if (!parse_seconds(optarg, 60000, &delay_ms)) {
                fprintf(stderr, "pathsim: --delay-ms %s: 0 to 60000\n", optarg);
                return 2;
            }
            break;
        case 's':
            g.stats_path = optarg;
            break;
        case 't':
            if (!parse_seconds(optarg, 1e9, &max_s) || max_s == 0) {
                fprintf(stderr, "pathsim: --max-seconds %s: a positive number\n", optarg);
                return 2;
            }
            break;
        default:
            return usage();
        }
    }
    if (optind != argc || !n_listen || !have_up)
        return usage();
    g.delay = (int64_t)llround(delay_ms * 1e6);
    g.burst = fmax(16384.0, g.rate * 0.002);
    g.hold = path_hold();

    /* six descriptors per connection (two sockets, two pipes) */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    signal(SIGPIPE, SIG_IGN);
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGUSR1);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    g.ep = epoll_create1(EPOLL_CLOEXEC);
    if (sfd < 0 || g.ep < 0) {
        fprintf(stderr, "pathsim: %s\n", strerror(errno));
        return 1;
    }
    struct epoll_event sev = {.events = EPOLLIN, .data.ptr = &sig_tag};
    if (epoll_ctl(g.ep, EPOLL_CTL_ADD, sfd, &sev) != 0) {
        fprintf(stderr, "pathsim: %s\n", strerror(errno));
        return 1;
    }
    for (int i = 0; i < n_listen; i++)
        if (listen_on(listens[i]) != 0)
            return 2;
    for (int i = 0; i < g.n_listeners; i++)
        printf("pathsim: listening on %s\n", g.listeners[i].addr);
    fflush(stdout);

    int64_t start = now_ns();
    int64_t stop_at = max_s > 0 ? start + (int64_t)(max_s * (double)NS) : INT64_MAX;
    bool stop = false;
    stats_write(start);
    while (!stop) {
        int64_t now = now_ns();
        int64_t next = now + NS; /* never sleep more than a second */
        if (stop_at < next)
            next = stop_at;
        if (g.dirty && g.stats_at + STATS_EVERY < next)
            next = g.stats_at + STATS_EVERY;
        for (struct conn *c = g.conns; c; c = c->next)
            if (c->wake && c->wake < next)
                next = c->wake;
        int n = wait_events(evs, next > now ? next - now : 0);
        if (n < 0 && errno != EINTR) {
            fprintf(stderr, "pathsim: epoll: %s\n", strerror(errno));
            break;
        }
        now = now_ns();
        for (int i = 0; i < n; i++) {
            struct tag *t = evs[i].data.ptr;
            if (t->kind == K_LISTENER) {
                on_accept((struct listener *)t);
            } else if (t->kind == K_SIGNAL) {
                struct signalfd_siginfo si;
                while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
                    if (si.ssi_signo == SIGUSR1) {
                        stats_reset();
                        stats_write(now);
                    } else {
                        stop = true;
                    }
                }
            } else {
                struct end *e = (struct end *)t;
                uint32_t m = evs[i].events;
                if (e->c->dead)
                    continue;
                if (m & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
                    e->readable = true;
                if (m & (EPOLLOUT | EPOLLHUP | EPOLLERR))
                    e->writable = true;
                conn_pump(e->c, now);
            }
        }
        for (struct conn *c = g.conns, *next_c; c; c = next_c) {
            next_c = c->next;
            if (c->wake && c->wake <= now)
                conn_pump(c, now);
        }
        while (g.dead) {
            struct conn *c = g.dead;
            g.dead = c->next;
            free(c);
        }
        if (g.dirty && now - g.stats_at >= STATS_EVERY)
            stats_write(now);
        if (now >= stop_at)
            stop = true;
    }
    while (g.conns)
        conn_close(g.conns, false);
    while (g.dead) {
        struct conn *c = g.dead;
        g.dead = c->next;
        free(c);
    }
    stats_write(now_ns());
    return 0;
}
