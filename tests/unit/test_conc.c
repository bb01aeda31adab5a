/* test_conc.c - the adaptive concurrency controller (engine/conc.h) as a pure function:
 * simulated paths (a rate for each number of requests in flight, over time) in, levels out.
 *
 * The simulation steps 5 ms at a time. Requests in flight follow the level at once, but a new
 * request moves bytes only one first-byte time after it started, as on a real path; the
 * bytes of a step are the path's rate for the requests moving bytes. */
#include <math.h>

#include "engine/conc.h"
#include "testutil.h"

#define MB 1e6

struct path {
    /* Bytes/s for n requests moving bytes at time t (ms). */
    double (*rate)(const struct path *p, uint32_t n, uint64_t t);
    double per_conn, ceiling;   /* for the capped paths */
    double per_conn2, t_change; /* from t_change on: per_conn2 (0 = no change) */
    double noise;               /* relative, deterministic */
    uint32_t demand;            /* requests the transfer can run at most (0 = any) */
    double cpu_cores;           /* CPU the process uses while moving bytes */
    uint32_t ttfb_ms;
};

static double capped(const struct path *p, uint32_t n, uint64_t t)
{
    double pc = p->per_conn2 > 0 && (double)t >= p->t_change ? p->per_conn2 : p->per_conn;
    return fmin((double)n * pc, p->ceiling);
}

/* Loopback RGW on two cores, as measured on 2026-12-06 (docs/internals/performance.md, "Where
 * the controller starts"): the rate rises with the requests to 8, a little more to 24 (loads
 * 0.55 GB/s at 8, 0.60 at 16, 0.62 at 32; saves flat), and more requests only add overhead. */
static double flat(const struct path *p, uint32_t n, uint64_t t)
{
    (void)p;
    (void)t;
    if (n <= 8)
        return (double)n * 100 * MB;
    if (n <= 24)
        return 800 * MB + (double)(n - 8) * 5 * MB;
    return fmax(880 * MB - (double)(n - 24) * 3 * MB, 100 * MB);
}

struct run {
    uint32_t level;     /* at the end */
    uint32_t max_level; /* the highest reached */
    double bytes_late;  /* bytes moved in the last quarter of the run */
    double ideal_late;  /* what the ceiling would have moved then */
    uint32_t changes;
    uint64_t t90;       /* simulated ms until a step first ran at 0.9 of the ceiling (0 = never) */
    uint64_t t_dec[2];  /* simulated ms of the controller's first two decisions (0 = none) */
    double rate_dec[2]; /* the rates they read, bytes/s */
    uint64_t t_first_put; /* uploads: when the first part was answered (0 = none) */
};

static uint32_t rnd_state = 12345;
static double noise01(void)
{
    rnd_state = rnd_state * 1103515245u + 12345u;
    return (double)((rnd_state >> 8) & 0xffff) / 65535.0;
}

/* One sample to the controller, and what the run records of it. */
static void feed(struct s3d_conc_ctl *c, const struct s3d_conc_sample *s, struct run *r)
{
    if (s3d_conc_update(c, s)) {
        r->changes++;
        if (getenv("S3D_TEST_CONC_LOG")) /* each change and why, for a failing case */
            printf("  %llu ms: %s\n", (unsigned long long)s->now_ms, c->why);
    }
    if (c->cur > r->max_level)
        r->max_level = c->cur;
    if (c->decisions >= 1 && c->decisions <= 2 && r->t_dec[c->decisions - 1] == 0) {
        r->t_dec[c->decisions - 1] = s->now_ms;
        r->rate_dec[c->decisions - 1] = c->last_rate;
    }
}

/* Runs the controller over the path for ms milliseconds. */
static struct run simulate(const struct path *p, struct s3d_conc_params prm, uint64_t ms)
{
    struct s3d_conc_ctl c;
    struct s3d_conc_sample s;
    struct run r;
    double bytes = 0, cpu_us = 0;
    uint64_t started[1024]; /* start times of the requests in flight */
    uint32_t inf = 0, i;
    memset(&r, 0, sizeof(r));
    memset(&s, 0, sizeof(s));
    s3d_conc_init(&c, &prm, 0);
    for (uint64_t t = 0; t <= ms; t += 5) {
        uint32_t want = c.cur, moving = 0;
        double rate, step;
        if (p->demand != 0 && want > p->demand)
            want = p->demand;
        while (inf < want && inf < 1024)
            started[inf++] = t;
        if (inf > want)
            inf = want; /* the newest go first: they moved the least */
        for (i = 0; i < inf; i++)
            moving += t >= started[i] + p->ttfb_ms;
        rate = moving ? p->rate(p, moving, t) : 0;
        if (p->noise > 0)
            rate *= 1.0 + p->noise * (2 * noise01() - 1);
        step = rate * 0.005;
        bytes += step;
        if (r.t90 == 0 && p->ceiling > 0 && rate >= 0.9 * p->ceiling)
            r.t90 = t;
        cpu_us += moving ? p->cpu_cores * 5000 : 0;
        if (t >= ms * 3 / 4) {
            r.bytes_late += step;
            r.ideal_late += p->ceiling * 0.005;
        }
        s.now_ms = t;
        s.bytes = (uint64_t)bytes;
        s.cpu_us = (uint64_t)cpu_us;
        s.in_flight = inf;
        s.ttfb_ms = p->ttfb_ms;
        feed(&c, &s, &r);
    }
    r.level = c.cur;
    return r;
}

static struct s3d_conc_params params(uint32_t min, uint32_t max, uint64_t target)
{
    struct s3d_conc_params p = {.min = min, .max = max, .target_bps = target, .ncpu = 2};
    return p;
}

/* A path that caps each connection (S3: 12 MB/s per request, 15 ms to first byte): the
 * level grows to the path's ceiling and the late rate is within 10 % of it. */
static void test_capped_path(double noise)
{
    struct path p = {.rate = capped,
                     .per_conn = 12 * MB,
                     .ceiling = 350 * MB,
                     .noise = noise,
                     .cpu_cores = 0.3,
                     .ttfb_ms = 15};
    struct run r = simulate(&p, params(1, 512, 0), 8000);
    printf("capped 12 MB/s (noise %.0f%%): level %u (max %u), late rate %.2f of the ceiling, "
           "%u changes\n",
           noise * 100, r.level, r.max_level, r.bytes_late / r.ideal_late, r.changes);
    CHECK(r.level >= 30); /* 350 / 12 = 29.2 requests fill it */
    CHECK(r.level <= 96); /* not far past the plateau */
    CHECK(r.bytes_late >= 0.9 * r.ideal_late);
}

/* A large node on S3: 12 MB/s per request, 15 ms, 3 GB/s: 250 requests fill it; the level
 * grows from the start to there and the late rate is within 10 % of the ceiling. */
static void test_big_node(void)
{
    struct path p = {.rate = capped,
                     .per_conn = 12 * MB,
                     .ceiling = 3000 * MB,
                     .noise = 0.05,
                     .cpu_cores = 0.6,
                     .ttfb_ms = 15};
    struct run r = simulate(&p, params(1, 512, 0), 8000);
    printf("capped 12 MB/s, 3 GB/s node: level %u (max %u), late rate %.2f of the ceiling, "
           "0.9 of it after %llu ms\n",
           r.level, r.max_level, r.bytes_late / r.ideal_late, (unsigned long long)r.t90);
    CHECK(r.level >= 250 && r.level <= 512);
    CHECK(r.bytes_late >= 0.9 * r.ideal_late);
    /* Simulated time: from 24 to 250 takes two steps (48 blind, then x4 while the rate grows
     * in proportion), each a settle and a window (185 ms here); from 8 it took three, and
     * doubling alone five. */
    CHECK(r.t90 > 0 && r.t90 <= 700);
}

/* 40 MB/s per connection, 5 ms. */
static void test_faster_path(void)
{
    struct path p = {.rate = capped,
                     .per_conn = 40 * MB,
                     .ceiling = 590 * MB,
                     .noise = 0.05,
                     .cpu_cores = 0.5,
                     .ttfb_ms = 5};
    struct run r = simulate(&p, params(1, 512, 0), 6000);
    printf("capped 40 MB/s: level %u (max %u), late rate %.2f of the ceiling\n", r.level,
           r.max_level, r.bytes_late / r.ideal_late);
    CHECK(r.level >= 15 && r.level <= 64);
    CHECK(r.bytes_late >= 0.9 * r.ideal_late);
}

/* Loopback: the rate is flat from the start on (a little lower with more): one blind double,
 * back to the start, and the rate near the best. */
static void test_flat_path(double noise)
{
    struct path p = {
        .rate = flat, .ceiling = 880 * MB, .noise = noise, .cpu_cores = 0.8, .ttfb_ms = 20};
    struct run r = simulate(&p, params(1, 512, 0), 20000);
    printf("flat (noise %.0f%%): level %u (max %u), late rate %.2f of the best\n", noise * 100,
           r.level, r.max_level, r.bytes_late / r.ideal_late);
    CHECK(r.level >= 8 && r.level <= 32);
    CHECK(r.max_level <= 2 * S3D_CONC_INITIAL);
    CHECK(r.bytes_late >= 0.95 * r.ideal_late);
}

/* The process uses both cores: no growth past the first window's level. */
static void test_cpu_bound(void)
{
    struct path p = {
        .rate = capped, .per_conn = 12 * MB, .ceiling = 350 * MB, .cpu_cores = 1.95, .ttfb_ms = 15};
    struct run r = simulate(&p, params(1, 512, 0), 5000);
    printf("cpu-bound: level %u (max %u)\n", r.level, r.max_level);
    CHECK(r.max_level == S3D_CONC_INITIAL);
}

/* A transfer that never runs as many requests as the level (its buffers are the limit): the
 * windows decide nothing, the level stays. */
static void test_demand_limited(void)
{
    struct path p = {.rate = capped,
                     .per_conn = 12 * MB,
                     .ceiling = 350 * MB,
                     .demand = 5,
                     .cpu_cores = 0.2,
                     .ttfb_ms = 15};
    struct run r = simulate(&p, params(1, 512, 0), 5000);
    printf("demand-limited: level %u, %u changes\n", r.level, r.changes);
    CHECK(r.changes == 0 && r.level == S3D_CONC_INITIAL);
}

/* A target: the level starts at target / 50 MB/s and stops growing once it is reached. */
static void test_target(void)
{
    struct path p = {
        .rate = capped, .per_conn = 12 * MB, .ceiling = 350 * MB, .cpu_cores = 0.2, .ttfb_ms = 15};
    struct s3d_conc_ctl c;
    struct s3d_conc_params prm = params(1, 512, 100000000);
    struct run r;
    s3d_conc_init(&c, &prm, 0);
    CHECK(c.cur == 2); /* 100 MB/s / 50 MB/s */
    r = simulate(&p, prm, 6000);
    printf("target 100 MB/s: level %u (max %u)\n", r.level, r.max_level);
    /* 8 requests move 96 MB/s, 0.96 of the target: enough (TARGET_SHARE); no more. */
    CHECK(r.level >= 8 && r.level <= 20);
    CHECK(r.bytes_late >= 0.95 * 100 * MB * (r.ideal_late / (350 * MB)));
    prm = params(1, 512, 10000000000ull);
    s3d_conc_init(&c, &prm, 0);
    CHECK(c.cur == 200); /* 10 GB/s at 50 MB/s per connection */
}

/* The path gets slower per connection half-way (another tenant, a farther region): probes
 * find the larger level it now needs. */
static void test_path_change(void)
{
    struct path p = {.rate = capped,
                     .per_conn = 12 * MB,
                     .ceiling = 350 * MB,
                     .per_conn2 = 4 * MB,
                     .t_change = 6000,
                     .noise = 0.05,
                     .cpu_cores = 0.3,
                     .ttfb_ms = 15};
    struct run r = simulate(&p, params(1, 512, 0), 40000);
    printf("path change 12 -> 4 MB/s per connection: level %u, late rate %.2f of the "
           "ceiling\n",
           r.level, r.bytes_late / r.ideal_late);
    CHECK(r.level >= 88); /* 350 / 4 */
    CHECK(r.bytes_late >= 0.85 * r.ideal_late);
}

/* An upload through a server that is the limit, as measured through s3d-pathsim at 40 MB/s +
 * 5 ms in front of RGW on two cores (docs/internals/performance.md): each connection sends
 * at the path's rate into buffers on the way (BUF bytes each: the proxy's pipe, the server's
 * socket) that the path acknowledges at once; the server takes the buffered bytes at a rate
 * that grows with the parts it works on, up to its ceiling, and a part is answered when the
 * server has taken all of it. Acknowledged bytes run far ahead of the server while buffers
 * fill: a controller that trusts its first window at 8 (fill included) sees no gain at 16
 * and holds at 8, at about two thirds of what the server takes. */
struct upath {
    double per_conn; /* the path's rate per connection, bytes/s */
    double per_part; /* what the server takes per part it works on, bytes/s */
    double ceiling;  /* the server's total, bytes/s */
    double buf;      /* bytes buffered on the way per connection */
    double part;     /* bytes per part */
};

static struct run simulate_upload(const struct upath *p, struct s3d_conc_params prm, uint64_t ms)
{
    struct s3d_conc_ctl c;
    struct s3d_conc_sample s;
    struct run r;
    double sent[1024], taken[1024], acked = 0;
    uint64_t started[1024], epoch_t = 0, up_bytes = 0, up_ms = 0;
    uint32_t inf = 0, i, up_n = 0, epoch_seen;
    memset(&r, 0, sizeof(r));
    memset(&s, 0, sizeof(s));
    s3d_conc_init(&c, &prm, 0);
    epoch_seen = c.up_epoch;
    for (uint64_t t = 0; t <= ms; t += 5) {
        uint32_t busy = 0;
        double take, before = 0, after = 0;
        while (inf < c.cur && inf < 1024) {
            sent[inf] = taken[inf] = 0;
            started[inf++] = t;
        }
        for (i = 0; i < inf; i++) {
            double room = p->buf - (sent[i] - taken[i]), left = p->part - sent[i];
            double push = fmin(p->per_conn * 0.005, fmin(room, left));
            if (push > 0) {
                sent[i] += push;
                acked += push;
            }
            busy += sent[i] > taken[i];
            before += taken[i];
        }
        take = busy ? fmin((double)busy * p->per_part, p->ceiling) * 0.005 / busy : 0;
        for (i = 0; i < inf;) {
            taken[i] = fmin(sent[i], taken[i] + take);
            after += taken[i];
            if (taken[i] >= p->part) {
                if (r.t_first_put == 0)
                    r.t_first_put = t + 5;
                if (started[i] >= epoch_t) { /* as the budget counts them */
                    up_n++;
                    up_bytes += (uint64_t)p->part;
                    up_ms += t + 5 - started[i];
                }
                /* Answered: the slot goes to a new part while the level allows. */
                sent[i] = sent[inf - 1];
                taken[i] = taken[inf - 1];
                started[i] = started[inf - 1];
                inf--;
                continue;
            }
            i++;
        }
        if (t >= ms * 3 / 4) {
            r.bytes_late += after - before;
            r.ideal_late += p->ceiling * 0.005;
        }
        s.now_ms = t;
        s.bytes = (uint64_t)acked;
        s.cpu_us = t * 300; /* 0.3 cores */
        s.in_flight = inf;
        s.uploads = inf;
        s.up_n = up_n;
        s.up_bytes = up_bytes;
        s.up_ms = up_ms;
        s.ttfb_ms = 0; /* no GET has told it */
        feed(&c, &s, &r);
        if (c.up_epoch != epoch_seen) {
            epoch_seen = c.up_epoch;
            epoch_t = t;
            up_n = 0;
            up_bytes = up_ms = 0;
        }
    }
    r.level = c.cur;
    return r;
}

static void upload_case(double ceiling, uint32_t initial, uint32_t lo, uint32_t hi)
{
    /* Each part the server works on takes 20 MB/s (8 parts moved 160 MB/s in the measured
     * run); each connection could send 40 MB/s. */
    struct upath p = {.per_conn = 40 * MB,
                      .per_part = 20 * MB,
                      .ceiling = ceiling,
                      .buf = 3 * MB,
                      .part = 8 * 1048576.0};
    struct s3d_conc_params prm = params(1, 512, 0);
    struct run r;
    prm.initial = initial;
    r = simulate_upload(&p, prm, 8000);
    printf("upload, server-bound at %.0f MB/s from %u: level %u (max %u), late rate %.2f of the "
           "server's ceiling\n",
           ceiling / MB, initial ? initial : S3D_CONC_INITIAL, r.level, r.max_level,
           r.bytes_late / r.ideal_late);
    CHECK(r.level >= lo);
    CHECK(r.level <= hi);
    CHECK(r.bytes_late >= 0.9 * r.ideal_late);
}

static void test_upload_server_bound(void)
{
    upload_case(260 * MB, 8, 13, 64);  /* 13 parts fill it */
    upload_case(900 * MB, 0, 45, 180); /* 45 parts fill it */
}

/* A save through 12 MB/s per connection + 15 ms in front of RGW, as measured on 2026-12-06
 * (docs/internals/performance.md, "The 12 MB/s save"): at 24 parts in flight the server takes
 * about 200 MB/s, so each 8 MiB part takes a second; a 0.5 GiB checkpoint is 64 parts, under
 * three seconds in all, and its parts run in step (they start together). The first decision
 * (a blind double) comes when the first parts are answered, and each decision reads the
 * server's rate: a window one part long after the first answer left that save at 24 for 2.3
 * of its 3.4 s (0.154 GB/s; 0.188 deciding at the first answer), and windows of acknowledged
 * bytes read 0 or twice the rate while parts run in step (in a real 2 GiB save: "48 requests
 * moved 103.6 MB/s", then 114 at 24, with the server taking about 200). */
static void test_short_save(void)
{
    struct upath p = {.per_conn = 12 * MB,
                      .per_part = 8.4 * MB,
                      .ceiling = 220 * MB,
                      .buf = 3 * MB,
                      .part = 8 * 1048576.0};
    struct s3d_conc_params prm = params(1, 512, 0);
    struct run r = simulate_upload(&p, prm, 4000);
    printf("save in step at 12 MB/s per connection: first part answered at %llu ms; decisions "
           "at %llu ms (%.1f MB/s at 24), %llu ms (%.1f MB/s at 48)\n",
           (unsigned long long)r.t_first_put, (unsigned long long)r.t_dec[0], r.rate_dec[0] / MB,
           (unsigned long long)r.t_dec[1], r.rate_dec[1] / MB);
    CHECK(r.t_first_put > 0 && r.t_dec[0] > 0 && r.t_dec[1] > 0);
    CHECK(r.t_dec[0] + 5 >= r.t_first_put); /* the sample of the step that answered it */
    CHECK(r.t_dec[0] <= r.t_first_put + 50);
    /* What the server took: 24 parts at 8.4 MB/s each; 48 parts share its 220 MB/s. */
    CHECK(r.rate_dec[0] >= 0.9 * 24 * 8.4 * MB && r.rate_dec[0] <= 1.1 * 24 * 8.4 * MB);
    CHECK(r.rate_dec[1] >= 0.9 * 220 * MB && r.rate_dec[1] <= 1.1 * 220 * MB);
}

/* Two saves on one client with a pause between them: the parts the first one had answered
 * since the controller's last decision are no measure of the second. The samples carry what
 * the budget counts; after the pause the controller starts its count again (up_epoch moves,
 * from the last sample before the pause, so the second save's first parts count) and decides
 * nothing until the second save's own parts are answered. */
static void test_uploads_after_pause(void)
{
    struct s3d_conc_ctl c;
    struct s3d_conc_params prm = params(1, 512, 0);
    struct s3d_conc_sample s;
    uint32_t epoch;
    uint64_t t;
    memset(&s, 0, sizeof(s));
    s3d_conc_init(&c, &prm, 0);
    /* The first save: 24 parts of 8 MiB answered after a second: 24 -> 48. */
    for (t = 0; t <= 1000; t += 5) {
        s.now_ms = t;
        s.in_flight = s.uploads = c.cur;
        if (t == 1000) {
            s.up_n = 24;
            s.up_bytes = 24ull << 23;
            s.up_ms = 24 * 1000;
        }
        s3d_conc_update(&c, &s);
    }
    CHECK(c.decisions == 1 && c.cur == 48);
    /* At 48 until the save ends at 1500 ms; 13 parts started at 48 answered (2 s each, as
     * the budget counts them after the decision). */
    s.up_n = 0;
    s.up_bytes = s.up_ms = 0;
    for (t = 1005; t < 1500; t += 5) {
        s.now_ms = t;
        s.in_flight = s.uploads = 48;
        if (t == 1400) {
            s.up_n = 13;
            s.up_bytes = 13ull << 23;
            s.up_ms = 13 * 2000;
        }
        CHECK(s3d_conc_update(&c, &s) == 0);
    }
    s.now_ms = 1500;
    s.in_flight = s.uploads = 0;
    s3d_conc_update(&c, &s);
    CHECK(c.decisions == 1);
    /* 7.5 s later the second save starts its 48 parts; the budget still holds the first
     * save's 13 until the controller tells it otherwise. */
    epoch = c.up_epoch;
    s.now_ms = 9000;
    s.idle_ms = 7500;
    s.in_flight = s.uploads = 48;
    CHECK(s3d_conc_update(&c, &s) == 0);
    CHECK(c.decisions == 1);
    CHECK(c.up_epoch != epoch && c.up_epoch_ms == 1500);
}

/* Bounds: min == max is fixed; the cap holds; the floor holds under throttling. */
static void test_bounds_and_throttle(void)
{
    struct path p = {
        .rate = capped, .per_conn = 1 * MB, .ceiling = 900 * MB, .cpu_cores = 0.1, .ttfb_ms = 15};
    struct s3d_conc_ctl c;
    struct s3d_conc_params prm = params(16, 16, 0);
    struct run r = simulate(&p, prm, 3000);
    CHECK(r.changes == 0 && r.level == 16);
    r = simulate(&p, params(1, 48, 0), 8000);
    CHECK(r.level == 48 && r.max_level == 48);
    prm = params(4, 512, 0);
    s3d_conc_init(&c, &prm, 0);
    CHECK(c.cur == S3D_CONC_INITIAL); /* nothing given: the default start */
    prm.initial = 32;
    s3d_conc_init(&c, &prm, 0);
    CHECK(c.cur == 32);
    CHECK(s3d_conc_throttled(&c, 1000) == 1 && c.cur == 16); /* halved */
    CHECK(strstr(c.why, "SlowDown") != NULL);
    CHECK(s3d_conc_throttled(&c, 1300) == 0 && c.cur == 16); /* once per 500 ms at most */
    CHECK(s3d_conc_throttled(&c, 1600) == 1 && c.cur == 8);
    CHECK(s3d_conc_throttled(&c, 2200) == 1 && c.cur == 4);
    CHECK(s3d_conc_throttled(&c, 2800) == 0 && c.cur == 4); /* the floor */
    CHECK(c.phase == S3D_CONC_HOLD);
}

/* Nobody sampled for ten seconds (no transfer): the gap is not read as a slow rate. */
static void test_idle_gap(void)
{
    struct s3d_conc_ctl c;
    struct s3d_conc_params prm = params(1, 512, 0);
    struct s3d_conc_sample s = {.ttfb_ms = 15, .in_flight = 8};
    uint64_t t;
    s3d_conc_init(&c, &prm, 0);
    for (t = 0; t <= 2000; t += 5) {
        s.now_ms = t;
        s.bytes = t * 100000; /* 100 MB/s */
        s.in_flight = c.cur;
        s3d_conc_update(&c, &s);
    }
    uint32_t before = c.cur, decisions = c.decisions;
    s.now_ms = 12000;
    s.in_flight = c.cur;
    CHECK(s3d_conc_update(&c, &s) == 0);
    s.now_ms = 12005;
    CHECK(s3d_conc_update(&c, &s) == 0);
    CHECK(c.cur == before && c.decisions == decisions);
}

/* A checkpoint load, as logged in a real one through s3d-pathsim: one request reads the
 * header (two samples, 15 ms), nothing is in flight for 95 ms while the header is parsed and
 * the reads planned, then the level's requests start and, after 30 ms to their first bytes,
 * move 480 MB/s. The first window must measure the data, not the header and the pause: a
 * window across them read 6.7 MB/s at 24 in that load, and the next window's rise then looked
 * like a path far from its limit. */
static void test_pause_between_transfers(void)
{
    struct s3d_conc_ctl c;
    struct s3d_conc_params prm = params(1, 512, 0);
    struct s3d_conc_sample s = {.ttfb_ms = 10, .in_flight = 1};
    uint64_t t;
    double bytes = 0;
    s3d_conc_init(&c, &prm, 0);
    s.now_ms = 0;
    s3d_conc_update(&c, &s);
    s.now_ms = 15;
    s.bytes = 262144;
    s3d_conc_update(&c, &s);
    bytes = 262144;
    s.idle_ms = 95;
    for (t = 110; t <= 700 && c.decisions == 0; t += 5) {
        s.now_ms = t;
        s.in_flight = c.cur;
        if (t >= 140)
            bytes += 480 * MB * 0.005;
        s.bytes = (uint64_t)bytes;
        s3d_conc_update(&c, &s);
    }
    printf("pause between transfers: first decision at %llu ms, %.1f MB/s\n", (unsigned long long)t,
           c.last_rate / MB);
    CHECK(c.decisions == 1);
    /* The window opens with the data requests: their first 30 ms without bytes are in it,
     * as in any transfer's first window, but not the header or the pause. */
    CHECK(c.last_rate >= 0.75 * 480 * MB && c.last_rate <= 1.05 * 480 * MB);
}

int main(void)
{
    test_capped_path(0);
    test_capped_path(0.1);
    test_big_node();
    test_faster_path();
    test_flat_path(0);
    test_flat_path(0.1);
    test_cpu_bound();
    test_demand_limited();
    test_target();
    test_path_change();
    test_bounds_and_throttle();
    test_idle_gap();
    test_upload_server_bound();
    test_short_save();
    test_uploads_after_pause();
    test_pause_between_transfers();
    printf("test_conc: ok\n");
    return 0;
}
