/* conc.c - the adaptive concurrency controller and the client's shared request budget
 * (contract in conc.h). */
#include "engine/conc.h"

#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/compiler.h"
#include "common/error.h"
#include "common/log.h"
#include "s3/retry.h"

/* The time to first byte assumed before any GET has told it (ms). */
#define TTFB_GUESS_MS 20u
/* A window lasts five first-byte times, within these bounds (ms). */
#define WIN_MIN_MS 150u
#define WIN_MAX_MS 1000u
/* After a change, the new requests need a connection and a first byte before the rate shows
 * them: a first-byte time plus a margin, within these bounds (ms). */
#define SETTLE_MIN_MS 30u
#define SETTLE_MAX_MS 300u
/* A window during which nothing was in flight longer than this (no transfer ran) starts
 * again (ms). */
#define IDLE_MAX_MS 10u
/* A window with more than a quarter of its samples below the level decides nothing. */
#define UNDER_SHARE 4u
/* Of the proportional gain a step up must bring: to quadruple (the rate still grows with the
 * requests, the path's limit is far), to double again, to grow by a quarter. */
#define GAIN_QUAD 0.75
#define GAIN_FAST 0.5
#define GAIN_SOME 0.15
/* A probe is kept when it brings this share of the proportional gain. */
#define GAIN_PROBE 0.3
/* Probes: the first this long after settling, the wait doubling after each failed one, at
 * most this many times (2 s up to 16 s). */
#define PROBE_FIRST_MS     2000u
#define PROBE_MAX_DOUBLING 3u
/* The rate below this share of the held rate for two windows: probe at once. */
#define SLOW_SHARE 0.6
/* The process's CPU at this share of its cores: growing only adds overhead. */
#define CPU_BOUND_SHARE 0.9
/* A target counts as reached at this share of it. */
#define TARGET_SHARE 0.95

static uint32_t clamp_level(const struct s3d_conc_ctl *c, uint64_t n)
{
    if (n < c->p.min)
        return c->p.min;
    if (n > c->p.max)
        return c->p.max;
    return (uint32_t)n;
}

static uint32_t ttfb_of(const struct s3d_conc_sample *s)
{
    return s->ttfb_ms ? s->ttfb_ms : TTFB_GUESS_MS;
}

static void window_start(struct s3d_conc_ctl *c, const struct s3d_conc_sample *s)
{
    c->win_t0 = s->now_ms;
    c->win_b0 = s->bytes;
    c->win_cpu0 = s->cpu_us;
    c->win_idle0 = s->idle_ms;
    c->samples = c->under = 0;
    c->have_window = 1;
}

/* Uploads: the controller's own part of a measurement (its time, CPU and in-flight samples)
 * starts now; the budget's counts of answered uploads go on. */
static void up_reset(struct s3d_conc_ctl *c, const struct s3d_conc_sample *s)
{
    c->up_epoch_ms = s->now_ms;
    c->up_idle0 = s->idle_ms;
    c->up_cpu_ms0 = 0; /* at the next sample (a throttle's has no CPU time) */
    c->up_samples = c->up_under = 0;
    c->up_lsum = 0;
}

/* Uploads: a new measurement starts now, the budget's counts too (it counts only the uploads
 * started from here when it sees up_epoch change, s3d_conc_tick). */
static void up_epoch(struct s3d_conc_ctl *c, const struct s3d_conc_sample *s)
{
    up_reset(c, s);
    c->up_epoch++;
}

/* Moves to level n (clamped) with the reason fmt; 1 when the level changed. */
__attribute__((format(printf, 4, 5))) static int
set_level(struct s3d_conc_ctl *c, uint64_t n, const struct s3d_conc_sample *s, const char *fmt, ...)
{
    uint32_t to = clamp_level(c, n), settle = ttfb_of(s) + 20;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why, sizeof(c->why), fmt, ap);
    va_end(ap);
    settle = S3D_MAX(SETTLE_MIN_MS, S3D_MIN(SETTLE_MAX_MS, settle));
    c->settle_until = s->now_ms + settle;
    c->have_window = 0;
    up_epoch(c, s);
    c->news = 1;
    if (to == c->cur)
        return 0;
    c->cur = to;
    return 1;
}

void s3d_conc_init(struct s3d_conc_ctl *c, const struct s3d_conc_params *p, uint64_t now_ms)
{
    uint64_t init;
    memset(c, 0, sizeof(*c));
    c->p = *p;
    if (c->p.min < 1)
        c->p.min = 1;
    if (c->p.max < c->p.min)
        c->p.max = c->p.min;
    if (c->p.ncpu < 1)
        c->p.ncpu = 1;
    init = c->p.initial;
    if (init == 0)
        init = c->p.target_bps
                   ? (c->p.target_bps + S3D_CONC_PER_CONN_GUESS - 1) / S3D_CONC_PER_CONN_GUESS
                   : S3D_CONC_INITIAL;
    c->cur = clamp_level(c, init);
    c->phase = c->p.min == c->p.max ? S3D_CONC_FIXED : S3D_CONC_GROW;
    c->settle_until = now_ms;
    if (c->phase == S3D_CONC_FIXED)
        snprintf(c->why, sizeof(c->why), "fixed at %u", c->cur);
    else if (c->p.target_bps)
        snprintf(c->why, sizeof(c->why), "start at %u for a target of %.0f MB/s", c->cur,
                 (double)c->p.target_bps / 1e6);
    else
        snprintf(c->why, sizeof(c->why), "start at %u", c->cur);
}

static void hold(struct s3d_conc_ctl *c, double rate, uint64_t now_ms)
{
    c->phase = S3D_CONC_HOLD;
    c->hold_conc = c->cur;
    c->hold_rate = rate;
    c->slow_windows = 0;
    c->next_probe_ms =
        now_ms + ((uint64_t)PROBE_FIRST_MS << S3D_MIN(c->probe_fails, PROBE_MAX_DOUBLING));
}

/* The share of the proportional gain that going from level a (rate ra) to b (rate rb)
 * brought: 1 when the rate grew with the requests, 0 when it did not grow. */
static double gain_share(uint32_t a, double ra, uint32_t b, double rb)
{
    double f = (double)b / (double)a;
    if (a == 0 || ra <= 0 || f <= 1.0)
        return 0;
    return (rb / ra - 1.0) / (f - 1.0);
}

static int decide_grow(struct s3d_conc_ctl *c, const struct s3d_conc_sample *s, double rate,
                       int cpu_bound, int target_met)
{
    double e;
    uint32_t from = c->cur;
    if (c->prev_conc == 0) {
        /* The first window: the rate at the initial level; the first step up is a double,
         * since nothing says yet how the rate follows the requests. */
        c->prev_conc = c->cur;
        c->prev_rate = rate;
        e = GAIN_FAST;
    } else {
        e = gain_share(c->prev_conc, c->prev_rate, c->cur, rate);
    }
    if (c->prev_conc != c->cur && e < GAIN_SOME) {
        /* No gain from the last step: the level before was as good, with fewer requests. After
         * a quadrupling the limit may lie between the two: hold at the double of the level
         * before, which costs no rate (the step above it brought nothing more). */
        uint32_t back = c->prev_conc;
        double back_rate = c->prev_rate;
        int ch;
        if ((uint64_t)from >= 4ull * back) {
            uint32_t mid = clamp_level(c, 2ull * back);
            ch = set_level(c, mid, s,
                           "%u -> %u: %u requests moved %.1f MB/s, little more than %u did "
                           "(%.1f MB/s): the path's limit is near, held between them",
                           from, mid, from, rate / 1e6, back, back_rate / 1e6);
        } else {
            ch = set_level(c, back, s,
                           "%u -> %u: %u requests moved %.1f MB/s, no more than %u did (%.1f "
                           "MB/s): the path's limit",
                           from, back, from, rate / 1e6, back, back_rate / 1e6);
        }
        hold(c, S3D_MAX(rate, back_rate), s->now_ms);
        return ch;
    }
    if (cpu_bound || target_met || c->cur >= c->p.max) {
        if (cpu_bound)
            snprintf(c->why, sizeof(c->why),
                     "hold at %u: %.1f MB/s with this process using %.1f of %u cores (the "
                     "client's CPU is the limit)",
                     c->cur, rate / 1e6, c->last_cpu, c->p.ncpu);
        else if (target_met)
            snprintf(c->why, sizeof(c->why), "hold at %u: %.1f MB/s reaches the target", c->cur,
                     rate / 1e6);
        else
            snprintf(c->why, sizeof(c->why), "hold at %u (max_concurrency): %.1f MB/s", c->cur,
                     rate / 1e6);
        c->news = 1;
        hold(c, rate, s->now_ms);
        return 0;
    }
    if (c->prev_conc != c->cur) {
        c->prev_conc = c->cur;
        c->prev_rate = rate;
    }
    if (e >= GAIN_QUAD)
        return set_level(c, (uint64_t)from * 4, s,
                         "%u -> %u: %.1f MB/s at %u, rising in proportion to the requests", from,
                         clamp_level(c, (uint64_t)from * 4), rate / 1e6, from);
    if (e >= GAIN_FAST)
        return set_level(c, (uint64_t)from * 2, s,
                         "%u -> %u: %.1f MB/s at %u, still rising with the requests", from,
                         clamp_level(c, (uint64_t)from * 2), rate / 1e6, from);
    return set_level(c, from + S3D_MAX(1u, from / 4), s, "%u -> %u: %.1f MB/s at %u, rising slowly",
                     from, clamp_level(c, from + S3D_MAX(1u, from / 4)), rate / 1e6, from);
}

static int decide_hold(struct s3d_conc_ctl *c, const struct s3d_conc_sample *s, double rate,
                       int cpu_bound, int target_met)
{
    uint32_t from = c->cur;
    if (c->hold_rate <= 0)
        c->hold_rate = rate;
    if (rate < SLOW_SHARE * c->hold_rate) {
        /* The path got slower: more requests may be what it needs now. */
        if (++c->slow_windows >= 2)
            c->next_probe_ms = s->now_ms;
    } else {
        c->slow_windows = 0;
        c->hold_rate = 0.5 * c->hold_rate + 0.5 * rate;
    }
    if (cpu_bound || target_met || c->cur >= c->p.max || s->now_ms < c->next_probe_ms)
        return 0;
    c->phase = S3D_CONC_PROBE;
    c->hold_conc = from;
    if (c->slow_windows >= 2)
        c->hold_rate = rate; /* the slower path is the baseline now */
    return set_level(c, from + S3D_MAX(2u, from / 4), s, "%u -> %u: probing (%.1f MB/s at %u)",
                     from, clamp_level(c, from + S3D_MAX(2u, from / 4)), rate / 1e6, from);
}

static int decide_probe(struct s3d_conc_ctl *c, const struct s3d_conc_sample *s, double rate)
{
    uint32_t from = c->cur;
    double e = gain_share(c->hold_conc, c->hold_rate, c->cur, rate);
    if (e >= GAIN_PROBE) {
        /* The path takes more: grow again from here. */
        c->phase = S3D_CONC_GROW;
        c->probe_fails = 0;
        c->prev_conc = c->cur;
        c->prev_rate = rate;
        return set_level(c, (uint64_t)from * 2, s,
                         "%u -> %u: the probe at %u moved %.1f MB/s, up from %.1f at %u", from,
                         clamp_level(c, (uint64_t)from * 2), from, rate / 1e6, c->hold_rate / 1e6,
                         c->hold_conc);
    }
    c->probe_fails++;
    {
        uint32_t back = c->hold_conc;
        double held = c->hold_rate;
        int ch = set_level(c, back, s, "%u -> %u: the probe moved %.1f MB/s, no more than %.1f",
                           from, back, rate / 1e6, held / 1e6);
        hold(c, held, s->now_ms);
        return ch;
    }
}

static int update_uploads(struct s3d_conc_ctl *c, const struct s3d_conc_sample *s);
static int decide(struct s3d_conc_ctl *c, const struct s3d_conc_sample *s, double rate, double cpu);

int s3d_conc_update(struct s3d_conc_ctl *c, const struct s3d_conc_sample *s)
{
    uint32_t ttfb = ttfb_of(s), win;
    uint64_t dt;
    double rate, cpu;
    int under;

    if (c->phase == S3D_CONC_FIXED)
        return 0;
    if (s->uploads > 0 || (c->up_mode && s->in_flight == 0)) {
        if (!c->up_mode) {
            /* The uploads since the last decision count (the first ones started just
             * before this sample). */
            c->up_mode = 1;
            up_reset(c, s);
        }
        return update_uploads(c, s);
    }
    if (c->up_mode) {
        c->up_mode = 0;
        c->have_window = 0;
    }
    win = S3D_MAX(WIN_MIN_MS, S3D_MIN(WIN_MAX_MS, 5 * ttfb));
    if (!c->have_window || s->now_ms < c->settle_until || s->now_ms < c->win_t0 ||
        s->bytes < c->win_b0 || s->idle_ms < c->win_idle0 ||
        s->idle_ms - c->win_idle0 > IDLE_MAX_MS) {
        window_start(c, s);
        return 0;
    }
    dt = s->now_ms - c->win_t0;
    if (dt > 4 * (uint64_t)win) {
        /* Nobody sampled for a long time (no transfer running): that gap is not a rate. */
        window_start(c, s);
        return 0;
    }
    c->samples++;
    if (s->in_flight < c->cur)
        c->under++;
    if (dt < win)
        return 0;
    rate = (double)(s->bytes - c->win_b0) * 1000.0 / (double)dt;
    cpu = s->cpu_us >= c->win_cpu0 ? (double)(s->cpu_us - c->win_cpu0) / (1000.0 * (double)dt) : 0;
    under = c->under * UNDER_SHARE > c->samples;

    window_start(c, s);
    if (under)
        return 0; /* fewer requests than the level were running: says nothing of the level */
    return decide(c, s, rate, cpu);
}

/* Uploads, measured by whole answered parts (Little's law): with L requests in flight on
 * average, each taking W from its start to its answer and carrying B bytes, the path moves
 * L x B / W. What the path acknowledges while a part is sent is no measure: a new
 * connection's first megabytes fill the buffers on the way at once, and the server takes a
 * part in spurts, so windows of acknowledged bytes read 0 or twice the rate when parts run in
 * step (as a save's first parts do: they start together). Only uploads started since the
 * last decision count, so W is the time of a part at this level. A decision waits for a
 * quarter of the level's parts (at most 16) and for as long as they took on average. */
static int update_uploads(struct s3d_conc_ctl *c, const struct s3d_conc_sample *s)
{
    uint32_t need = S3D_MAX(1u, S3D_MIN(c->cur / 4, 16u));
    double rate, cpu, load;
    uint64_t dt;
    int under;
    if (s->now_ms < c->up_epoch_ms)
        up_epoch(c, s);
    if (s->idle_ms < c->up_idle0 || s->idle_ms - c->up_idle0 > IDLE_MAX_MS) {
        /* A spell with nothing in flight: what was counted before it belongs to another
         * transfer (the last save), and is no measure of this one. The uploads started since
         * the last sample count: this transfer's first. */
        uint64_t from = S3D_MIN(c->up_last_ms, s->now_ms);
        up_epoch(c, s);
        c->up_epoch_ms = from;
        c->up_last_ms = s->now_ms;
        return 0; /* this sample still carries the old counts */
    }
    c->up_last_ms = s->now_ms;
    if (c->up_cpu_ms0 == 0) {
        c->up_cpu0 = s->cpu_us;
        c->up_cpu_ms0 = S3D_MAX(s->now_ms, 1u);
    }
    if (s->uploads > 0) {
        c->up_samples++;
        c->up_lsum += s->in_flight;
        c->up_under += s->in_flight < c->cur;
    }
    if (s->up_n < need || s->up_ms == 0 || c->up_samples == 0)
        return 0;
    /* Each answered upload adds at least 1 ms to up_ms, so dt > 0 past this. */
    dt = s->now_ms - c->up_epoch_ms;
    if (dt < s->up_ms / s->up_n)
        return 0; /* only the fastest parts have been answered yet */
    load = (double)c->up_lsum / (double)c->up_samples;
    rate = load * (double)s->up_bytes * 1000.0 / (double)s->up_ms;
    cpu = s->cpu_us >= c->up_cpu0 && s->now_ms > c->up_cpu_ms0
              ? (double)(s->cpu_us - c->up_cpu0) / (1000.0 * (double)(s->now_ms - c->up_cpu_ms0))
              : 0;
    under = c->up_under * UNDER_SHARE > c->up_samples;
    up_epoch(c, s);
    if (under)
        return 0; /* fewer requests than the level were running */
    return decide(c, s, rate, cpu);
}

static int decide(struct s3d_conc_ctl *c, const struct s3d_conc_sample *s, double rate, double cpu)
{
    int cpu_bound, target_met;
    c->last_rate = rate;
    c->last_cpu = cpu;
    c->decisions++;
    cpu_bound = cpu >= CPU_BOUND_SHARE * (double)c->p.ncpu;
    target_met = c->p.target_bps != 0 && rate >= TARGET_SHARE * (double)c->p.target_bps;
    switch (c->phase) {
    case S3D_CONC_GROW:
        return decide_grow(c, s, rate, cpu_bound, target_met);
    case S3D_CONC_HOLD:
        return decide_hold(c, s, rate, cpu_bound, target_met);
    case S3D_CONC_PROBE:
        return decide_probe(c, s, rate);
    default:
        return 0;
    }
}

int s3d_conc_throttled(struct s3d_conc_ctl *c, uint64_t now_ms)
{
    struct s3d_conc_sample s;
    uint32_t from = c->cur;
    int ch;
    if (c->phase == S3D_CONC_FIXED)
        return 0;
    /* Halved, as TCP and botocore's adaptive mode back off multiplicatively; at most once per
     * S3D_CONC_THROTTLE_MS, since one spell answers every request in flight with a throttle.
     * Dropping a quarter a second took 8 s to come down from 512. */
    if (c->last_throttle_ms != 0 && now_ms < c->last_throttle_ms + S3D_CONC_THROTTLE_MS)
        return 0;
    c->last_throttle_ms = now_ms;
    memset(&s, 0, sizeof(s));
    s.now_ms = now_ms;
    ch = set_level(c, from - S3D_MAX(1u, from / 2), &s,
                   "%u -> %u: the server asked to slow down (503 SlowDown)", from,
                   clamp_level(c, from - S3D_MAX(1u, from / 2)));
    c->probe_fails = 2; /* the next probe comes later */
    c->prev_conc = 0;
    hold(c, 0, now_ms);
    return ch;
}

/* ---- the shared budget ------------------------------------------------------------------- */

/* The controller is fed at most this often (ms). */
#define TICK_MS 5u

static uint32_t cpus_usable(void)
{
    cpu_set_t set;
    long n;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        int k = CPU_COUNT(&set);
        if (k > 0)
            return (uint32_t)k;
    }
    n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (uint32_t)n : 1u;
}

static uint64_t cpu_now_us(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (uint64_t)ru.ru_utime.tv_sec * 1000000u + (uint64_t)ru.ru_utime.tv_usec +
           (uint64_t)ru.ru_stime.tv_sec * 1000000u + (uint64_t)ru.ru_stime.tv_usec;
}

void s3d_conc_shared_init(struct s3d_conc *s, uint32_t min, uint32_t max, uint64_t target_bps)
{
    struct s3d_conc_params p = {
        .min = min, .max = max, .target_bps = target_bps, .ncpu = cpus_usable()};
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->mu, NULL);
    s3d_conc_init(&s->ctl, &p, s3d_now_ms());
    s->fixed = s->ctl.phase == S3D_CONC_FIXED;
    atomic_init(&s->cur, s->ctl.cur);
    atomic_init(&s->in_flight, 0);
    atomic_init(&s->draining, 0);
    atomic_init(&s->bytes, 0);
    atomic_init(&s->ttfb_ms, 0);
    atomic_init(&s->uploads, 0);
    atomic_init(&s->up_epoch_ms, 0);
    atomic_init(&s->up_n, 0);
    atomic_init(&s->up_bytes, 0);
    atomic_init(&s->up_ms, 0);
    s->up_epoch_seen = s->ctl.up_epoch;
    atomic_init(&s->idle_since, s3d_now_ms());
    atomic_init(&s->idle_ms, 0);
    atomic_init(&s->throttled, 0);
    atomic_init(&s->pause_until_ms, 0);
    S3D_DEBUG("concurrency: %s (between %u and %u)", s->ctl.why, s->ctl.p.min, s->ctl.p.max);
}

void s3d_conc_shared_cleanup(struct s3d_conc *s)
{
    pthread_mutex_destroy(&s->mu);
}

int s3d_conc_may_start(struct s3d_conc *s)
{
    uint64_t pause = atomic_load_explicit(&s->pause_until_ms, memory_order_relaxed);
    if (pause != 0 && s3d_now_ms() < pause)
        return 0;
    return atomic_load_explicit(&s->in_flight, memory_order_relaxed) <
           atomic_load_explicit(&s->cur, memory_order_relaxed);
}

void s3d_conc_started(struct s3d_conc *s, int upload)
{
    if (atomic_fetch_add_explicit(&s->in_flight, 1, memory_order_relaxed) == 0) {
        /* The end of an idle spell (two threads racing here may lose one: a sample at worst). */
        uint64_t since = atomic_exchange_explicit(&s->idle_since, 0, memory_order_relaxed);
        uint64_t now = s3d_now_ms();
        if (since != 0 && now > since)
            atomic_fetch_add_explicit(&s->idle_ms, now - since, memory_order_relaxed);
    }
    if (upload)
        atomic_fetch_add_explicit(&s->uploads, 1, memory_order_relaxed);
}

void s3d_conc_finished(struct s3d_conc *s, int upload)
{
    if (atomic_fetch_sub_explicit(&s->in_flight, 1, memory_order_relaxed) == 1)
        atomic_store_explicit(&s->idle_since, s3d_now_ms(), memory_order_relaxed);
    if (upload)
        atomic_fetch_sub_explicit(&s->uploads, 1, memory_order_relaxed);
}

void s3d_conc_draining(struct s3d_conc *s, int delta)
{
    if (delta != 0)
        atomic_fetch_add_explicit(&s->draining, delta, memory_order_relaxed);
}

void s3d_conc_add_bytes(struct s3d_conc *s, uint64_t n)
{
    if (n != 0)
        atomic_fetch_add_explicit(&s->bytes, n, memory_order_relaxed);
}

/* A smoothed time (7/8 old, 1/8 new; 0 = none yet, so a stored value is at least 1); races
 * between threads lose a sample at worst. */
static void smooth_ms(atomic_uint *slot, uint32_t ms)
{
    uint32_t old = atomic_load_explicit(slot, memory_order_relaxed);
    uint32_t v = old == 0 ? ms : (uint32_t)(((uint64_t)old * 7 + ms) / 8);
    atomic_store_explicit(slot, v ? v : 1, memory_order_relaxed);
}

void s3d_conc_ttfb(struct s3d_conc *s, uint32_t ms)
{
    smooth_ms(&s->ttfb_ms, ms);
}

void s3d_conc_upload_done(struct s3d_conc *s, uint64_t started_ms, uint64_t bytes)
{
    uint64_t now = s3d_now_ms();
    /* One that started before the controller's last decision ran partly at another level (a
     * race with a decision in progress counts one upload at worst). */
    if (started_ms < atomic_load_explicit(&s->up_epoch_ms, memory_order_relaxed) ||
        now < started_ms)
        return;
    atomic_fetch_add_explicit(&s->up_bytes, bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->up_ms, S3D_MAX(now - started_ms, 1u), memory_order_relaxed);
    atomic_fetch_add_explicit(&s->up_n, 1, memory_order_relaxed);
}

void s3d_conc_note_throttle(struct s3d_conc *s)
{
    atomic_store_explicit(&s->throttled, 1, memory_order_relaxed);
    /* Fixed levels too: no new request starts for a while (a transfer with nothing in flight
     * still runs one, which finds out when the spell is over). */
    atomic_store_explicit(&s->pause_until_ms, s3d_now_ms() + S3D_CONC_THROTTLE_PAUSE_MS,
                          memory_order_relaxed);
}

void s3d_conc_tick(struct s3d_conc *s)
{
    struct s3d_conc_sample smp;
    uint64_t now;
    int changed = 0;

    /* Not s->ctl.phase: the thread that holds mu may be writing it (HOLD, PROBE, GROW). */
    if (s->fixed)
        return;
    if (pthread_mutex_trylock(&s->mu) != 0)
        return;
    now = s3d_now_ms();
    if (now < s->last_tick_ms + TICK_MS) {
        pthread_mutex_unlock(&s->mu);
        return;
    }
    s->last_tick_ms = now;
    if (atomic_exchange_explicit(&s->throttled, 0, memory_order_relaxed))
        changed = s3d_conc_throttled(&s->ctl, now);
    smp.now_ms = now;
    smp.bytes = atomic_load_explicit(&s->bytes, memory_order_relaxed);
    smp.cpu_us = cpu_now_us();
    {
        unsigned inf = atomic_load_explicit(&s->in_flight, memory_order_relaxed);
        int dr = atomic_load_explicit(&s->draining, memory_order_relaxed);
        smp.in_flight = dr <= 0 ? inf : (unsigned)dr >= inf ? 0 : inf - (unsigned)dr;
    }
    smp.ttfb_ms = atomic_load_explicit(&s->ttfb_ms, memory_order_relaxed);
    smp.uploads = atomic_load_explicit(&s->uploads, memory_order_relaxed);
    smp.up_n = atomic_load_explicit(&s->up_n, memory_order_relaxed);
    smp.up_bytes = atomic_load_explicit(&s->up_bytes, memory_order_relaxed);
    smp.up_ms = atomic_load_explicit(&s->up_ms, memory_order_relaxed);
    smp.idle_ms = atomic_load_explicit(&s->idle_ms, memory_order_relaxed);
    changed |= s3d_conc_update(&s->ctl, &smp);
    if (s->ctl.up_epoch != s->up_epoch_seen) {
        /* A decision, or a new transfer after a pause: the uploads that count start again
         * (from now, or from the sample before the pause ended). */
        s->up_epoch_seen = s->ctl.up_epoch;
        atomic_store_explicit(&s->up_epoch_ms, s->ctl.up_epoch_ms, memory_order_relaxed);
        atomic_store_explicit(&s->up_n, 0, memory_order_relaxed);
        atomic_store_explicit(&s->up_bytes, 0, memory_order_relaxed);
        atomic_store_explicit(&s->up_ms, 0, memory_order_relaxed);
    }
    if (changed)
        atomic_store_explicit(&s->cur, s->ctl.cur, memory_order_relaxed);
    if (s->ctl.news) {
        S3D_INFO("concurrency %s", s->ctl.why);
        s->ctl.news = 0;
    }
    pthread_mutex_unlock(&s->mu);
}

uint32_t s3d_conc_level(struct s3d_conc *s)
{
    return atomic_load_explicit(&s->cur, memory_order_relaxed);
}
