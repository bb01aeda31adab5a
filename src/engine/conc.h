/* conc.h - how many requests a client keeps in flight: the adaptive concurrency controller
 * (internal).
 *
 * Two layers. The controller (struct s3d_conc_ctl) is a pure function of its samples: time,
 * bytes moved, CPU used and requests in flight go in, a concurrency and the reason for it come
 * out; nothing in it reads a clock or touches a socket, so tests drive it with simulated rate
 * curves (tests/unit/test_conc.c). The shared budget (struct s3d_conc) wraps one controller per
 * client: every transfer on the client, on any thread, starts a request only while the
 * client's requests in flight are below the controller's level, adds the bytes it moves, and
 * feeds the controller at most every few milliseconds. So many objects (shards, a folder)
 * share one budget, and what one transfer learned about the path holds for the next.
 *
 * The rule (docs/internals/engine.md, "Concurrency that follows the path"): start at the
 * initial level; after each measurement window at a level, compare the rate with the rate
 * at the level before (the first step up is a double). While the last step brought at least
 * three quarters of the proportional gain, quadruple; at least half, double; some (15 %),
 * grow by a quarter; with none, go back to the level before and hold (after a quadrupling,
 * hold at twice the level before: the limit may lie between them). While holding, probe a
 * quarter more now and then (paths change during a long transfer) and keep it only if the
 * rate rises. Windows in which fewer
 * requests were in flight than the level (the transfer is ending, staging buffers are full)
 * decide nothing. Uploads are measured by whole answered parts (Little's law: requests in
 * flight x bytes per part / a part's time, over the uploads started since the last decision),
 * not by the bytes the path acknowledges, which run ahead of the server while buffers on the
 * way fill and stop while a save's parts, started together, wait for their answers. A window that
 * spans a spell with nothing in flight (a checkpoint parsing a header between its header's GET and
 * its data's) starts again after it: the pause is not a rate. The client's own CPU near all its
 * cores stops growth; a throttling answer (503 SlowDown) takes a quarter off. A target throughput,
 * when given, starts at target / 50 MB/s (aws-c-s3's 0.4 Gbit/s per connection) and stops growth
 * once reached. */
#ifndef S3D_ENGINE_CONC_H
#define S3D_ENGINE_CONC_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* The level when nothing is known of the path. Measured (docs/internals/performance.md,
 * "Where the controller starts"): starting at 24 rather than 8 costs nothing on loopback RGW
 * and saves the ramp on slow paths, where a transfer of a few seconds spent much of its time
 * below the level it needed; aws-c-s3 starts at 25 for its default 10 Gbit/s. */
#define S3D_CONC_INITIAL 24u
/* What a target throughput assumes one connection carries, bytes/s (0.4 Gbit/s). */
#define S3D_CONC_PER_CONN_GUESS 50000000ull

enum s3d_conc_phase {
    S3D_CONC_FIXED = 0, /* min == max: never changes */
    S3D_CONC_GROW = 1,  /* growing while the rate follows */
    S3D_CONC_HOLD = 2,  /* holding the best level found */
    S3D_CONC_PROBE = 3, /* trying a quarter more than the held level */
};

struct s3d_conc_params {
    uint32_t min, max;   /* bounds, 1 <= min <= max */
    uint32_t initial;    /* 0 = S3D_CONC_INITIAL (or from target_bps), clamped to the bounds */
    uint64_t target_bps; /* 0 = none */
    uint32_t ncpu;       /* cores this process may use; 0 = 1 */
};

/* One observation. bytes and cpu_us are running totals (they only grow). */
struct s3d_conc_sample {
    uint64_t now_ms;
    uint64_t bytes;     /* moved by every transfer so far */
    uint64_t cpu_us;    /* this process's CPU time so far */
    uint32_t in_flight; /* requests in flight now */
    uint32_t ttfb_ms;   /* typical time to a response's first byte; 0 = unknown */
    uint32_t uploads;   /* of in_flight, the uploads (PUT, UploadPart) */
    /* Uploads answered that started at or after the controller's last decision
     * (s3d_conc_ctl.up_epoch): how many, their bytes, and their times from start to answer
     * summed (ms). */
    uint32_t up_n;
    uint64_t up_bytes;
    uint64_t up_ms;
    uint64_t idle_ms; /* running total of the time nothing was in flight (between transfers) */
};

struct s3d_conc_ctl {
    struct s3d_conc_params p;
    uint32_t cur;
    int phase;
    /* The window being measured at cur: its start, and how full it has been. */
    uint64_t win_t0, win_b0, win_cpu0, win_idle0;
    uint64_t settle_until; /* a level just changed: the window starts after this */
    uint32_t samples, under;
    int have_window;
    /* The level before cur and its rate (bytes/s); 0 = none yet. */
    uint32_t prev_conc;
    double prev_rate;
    /* Holding: the rate at the held level (smoothed), when to probe, failed probes in a row. */
    double hold_rate;
    uint32_t hold_conc;
    uint64_t next_probe_ms;
    uint32_t probe_fails;
    uint32_t slow_windows;
    uint64_t last_throttle_ms;
    double last_rate;   /* of the last window that decided, bytes/s */
    double last_cpu;    /* cores used in that window */
    uint32_t decisions; /* windows that decided something (for tests and logs) */
    /* Uploads (measured by whole parts, conc.c update_uploads): in that mode; the decision
     * count whose uploads the samples' up_* fields count (the budget starts them again when
     * it changes), when it began, and the in-flight samples since. */
    int up_mode;
    uint32_t up_epoch;
    uint64_t up_epoch_ms, up_cpu0, up_cpu_ms0;
    uint64_t up_idle0, up_last_ms; /* the samples' idle_ms at the epoch; the last sample */
    uint32_t up_samples, up_under;
    uint64_t up_lsum;
    char why[160]; /* the reason of the last decision */
    int news;      /* why is new (a change, or the reason for holding): log it */
};

/* Starts a controller at its initial level (phase FIXED when min == max). */
void s3d_conc_init(struct s3d_conc_ctl *c, const struct s3d_conc_params *p, uint64_t now_ms);
/* Feeds one sample; returns 1 when cur changed, else 0; c->news is set when c->why holds a
 * new decision (a change, or why growth stopped). Cheap between window ends. */
int s3d_conc_update(struct s3d_conc_ctl *c, const struct s3d_conc_sample *s);
/* The server answered "slow down" (503 SlowDown, 429): takes a quarter off, at most once a
 * second, and holds. Returns 1 when cur changed. */
int s3d_conc_throttled(struct s3d_conc_ctl *c, uint64_t now_ms);

/* ---- the client's shared budget ------------------------------------------------------------ */

struct s3d_conc {
    pthread_mutex_t mu;
    int fixed;                  /* min == max (ctl.phase FIXED): written once at init, read
                                   without the lock */
    struct s3d_conc_ctl ctl;    /* under mu */
    uint64_t last_tick_ms;      /* under mu */
    atomic_uint cur;            /* ctl.cur, read without the lock */
    atomic_uint in_flight;      /* requests in flight, every transfer of the client */
    atomic_int draining;        /* of those, the ones of transfers with nothing left to start:
                                   they cannot use a higher level, so they do not count as
                                   filling it */
    atomic_uint_fast64_t bytes; /* moved by every transfer */
    atomic_uint ttfb_ms;        /* smoothed time to first byte of ranged GETs */
    atomic_uint uploads;        /* of in_flight, the uploads */
    /* Uploads answered that started at or after up_epoch_ms (the controller's last decision):
     * the samples' up_n, up_bytes, up_ms. */
    atomic_uint_fast64_t up_epoch_ms;
    atomic_uint up_n;
    atomic_uint_fast64_t up_bytes, up_ms;
    uint32_t up_epoch_seen;              /* ctl.up_epoch when up_epoch_ms was set; under mu */
    atomic_uint_fast64_t idle_since;     /* when in_flight last fell to 0 (ms); 0 = busy */
    atomic_uint_fast64_t idle_ms;        /* the total of those idle spells, for the samples */
    atomic_int throttled;                /* a throttling answer not yet told to the controller */
    atomic_uint_fast64_t pause_until_ms; /* after a throttling answer: no request starts
                                            before (ms; 0 = none) */
};

/* min/max/target as the client resolved them. */
void s3d_conc_shared_init(struct s3d_conc *s, uint32_t min, uint32_t max, uint64_t target_bps);
void s3d_conc_shared_cleanup(struct s3d_conc *s);
/* 1 when one more request may start now (in flight below the level). */
int s3d_conc_may_start(struct s3d_conc *s);
/* upload: the request sends a body (PUT, UploadPart), whose bytes the controller sees as they
 * are acknowledged. */
void s3d_conc_started(struct s3d_conc *s, int upload);
void s3d_conc_finished(struct s3d_conc *s, int upload);
/* A transfer's requests that count as draining changed by delta (engine/xfer.c). */
void s3d_conc_draining(struct s3d_conc *s, int delta);
/* Bytes moved since the caller's last report. */
void s3d_conc_add_bytes(struct s3d_conc *s, uint64_t n);
/* A GET's time to first byte, for the window lengths. */
void s3d_conc_ttfb(struct s3d_conc *s, uint32_t ms);
/* An upload request that started at started_ms (s3d_now_ms) was answered now, having sent
 * bytes: the measure of uploads. */
void s3d_conc_upload_done(struct s3d_conc *s, uint64_t started_ms, uint64_t bytes);
/* A throttle halves the adaptive level at most this often (ms). */
#define S3D_CONC_THROTTLE_MS 500u
/* After a throttling answer no new request starts for this long (ms), whatever the level. */
#define S3D_CONC_THROTTLE_PAUSE_MS 500u

/* A throttling answer (503 SlowDown, 429): the adaptive level is halved at the next tick, and
 * new requests pause for S3D_CONC_THROTTLE_PAUSE_MS. */
void s3d_conc_note_throttle(struct s3d_conc *s);
/* Feeds the controller when its last sample is older than a few milliseconds and nobody else
 * is feeding it (trylock); logs a change at info level. Any thread. */
void s3d_conc_tick(struct s3d_conc *s);
/* The level now. */
uint32_t s3d_conc_level(struct s3d_conc *s);

#endif
