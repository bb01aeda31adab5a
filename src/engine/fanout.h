/* fanout.h - n independent jobs over at most t threads (issue 38: one fan-out).
 *
 * Used where the engine runs whole jobs side by side: opening the shards of a checkpoint and
 * writing them. Jobs are handed out in index order; the first error in index order is the
 * result (a job that fails with S3D_ECANCELED after another job failed, or after a stop, does
 * not count: it was stopped, not wrong); after a failure no new job starts and stop() asks the
 * running ones to end. With t <= 1 or n <= 1 the jobs run inline on the calling thread, in
 * order, with no thread made; if no thread can be made the calling thread runs them itself. */
#ifndef S3D_ENGINE_FANOUT_H
#define S3D_ENGINE_FANOUT_H

#include <stddef.h>
#include <stdint.h>

#include "common/compiler.h"

struct s3d_fanout {
    size_t n;         /* jobs 0 .. n-1 */
    uint32_t threads; /* at most this many jobs at once */
    /* Runs job i: 0, or a negative code with the thread's error set (s3d_fail). Called on a
     * worker thread (or the calling one). */
    int (*job)(void *ctx, size_t i);
    /* Optional, on the calling thread while workers run: every poll_ms (default 20) and when a
     * job ends, and once after the last; nonzero stops the run (no new job; stop() called),
     * which then fails with S3D_ECANCELED unless a job failed. Not called inline. */
    int (*poll)(void *ctx);
    uint32_t poll_ms;
    /* Optional: asks running jobs to end soon (a cancel they watch). Called at most once, on
     * whichever thread saw the failure or the poll's stop, with no lock held. */
    void (*stop)(void *ctx);
    void *ctx;
    const char *what; /* names the run in the S3D_ECANCELED message ("save", ...) */
};

/* Runs f's jobs: 0, or the first error in index order (restored on the calling thread), or
 * S3D_ECANCELED when poll stopped it. */
S3D_NODISCARD int s3d_fanout_run(const struct s3d_fanout *f);

#endif
