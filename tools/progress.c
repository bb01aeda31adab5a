/* progress.c - the one-line progress bar on stderr.
 *
 * The library calls the callback every few milliseconds; redrawing that often would cost more
 * than the transfer's own CPU on a fast link, so the line is redrawn at most every 100 ms. The
 * rate is the average since the start: steadier than an instantaneous one, and right for the
 * ETA of a transfer whose speed does not change much. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define REDRAW_S 0.1

double cli_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void cli_progress_init(struct cli_progress *p, const struct cli_opts *o, const char *label)
{
    memset(p, 0, sizeof(*p));
    if (o->quiet || o->only_errors)
        p->enabled = 0;
    else if (o->progress >= 0)
        p->enabled = o->progress;
    else
        p->enabled = isatty(STDERR_FILENO);
    p->start = cli_now();
    snprintf(p->label, sizeof(p->label), "%s", label ? label : "");
}

static void fmt_eta(double s, char *buf, size_t cap)
{
    long t = (long)(s + 0.5);

    if (s < 0 || s > 359999)
        snprintf(buf, cap, "--:--");
    else if (t >= 3600)
        snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
    else
        snprintf(buf, cap, "%ld:%02ld", t / 60, t % 60);
}

static void draw(struct cli_progress *p, uint64_t done, uint64_t total, double now)
{
    char d[16], t[16], r[16], eta[32];
    double el = now - p->start;
    double rate = el > 0 ? (double)done / el : 0;

    cli_human_size(done, d, sizeof(d));
    cli_human_size((uint64_t)rate, r, sizeof(r));
    if (total > 0) {
        cli_human_size(total, t, sizeof(t));
        fmt_eta(rate > 0 && total >= done ? (double)(total - done) / rate : -1, eta, sizeof(eta));
        /* \033[K clears what a longer previous line left behind. */
        fprintf(stderr, "\r%s%s%s / %s (%3d%%)  %s/s  ETA %s\033[K", p->label,
                p->label[0] ? "  " : "", d, t, (int)(done * 100 / total), r, eta);
    } else {
        fprintf(stderr, "\r%s%s%s  %s/s\033[K", p->label, p->label[0] ? "  " : "", d, r);
    }
    fflush(stderr);
    p->drawn = 1;
    p->last_draw = now;
    p->last_done = done;
}

/* The number of the first stop signal that arrived, 0 before. */
static volatile sig_atomic_t interrupted;
/* Every client the CLI makes stops its requests when this is set (s3d_client_set_cancel),
 * whatever call runs them: a transfer, its first GET, a listing, a retry's backoff. */
static struct s3d_cancel *stop_token;

static void on_stop_signal(int sig)
{
    if (interrupted == 0)
        interrupted = sig;
    s3d_cancel_request(stop_token); /* one atomic store: safe in a handler; NULL ok */
}

struct s3d_cancel *cli_stop_token(void)
{
    if (stop_token == NULL && s3d_cancel_new(&stop_token) < 0)
        stop_token = NULL; /* the progress callback still stops transfers */
    return stop_token;
}

void cli_install_sigint(void)
{
    /* SIGTERM (timeout(1), docker stop, systemd) and SIGHUP (the terminal closed) stop a
     * transfer the way Ctrl-C does: otherwise they kill the process mid-transfer and leave
     * the temporary file of a download and the multipart upload of an upload behind. */
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    struct sigaction sa;
    size_t i;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESETHAND; /* a second one of the same signal kills at once */
    sigemptyset(&sa.sa_mask);
    for (i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        sigaction(sigs[i], &sa, NULL);
}

int cli_interrupted(void)
{
    return interrupted != 0;
}

int cli_interrupted_exit(void)
{
    return interrupted ? 128 + interrupted : CLI_EXIT_INTERRUPTED;
}

int cli_progress_cb(void *user, uint64_t done, uint64_t total)
{
    struct cli_progress *p = user;
    double now;

    if (interrupted)
        return 1; /* the library cancels: a multipart upload is aborted, temp files removed */
    if (p != NULL && p->total != NULL) {
        if (done > p->fed) {
            cli_total_add(p->total, done - p->fed, 0);
            p->fed = done;
        }
        return 0;
    }
    if (p == NULL || !p->enabled)
        return 0;
    now = cli_now();
    if (p->drawn && (done == p->last_done || (now - p->last_draw < REDRAW_S && done != total)))
        return 0;
    draw(p, done, total, now);
    return 0;
}

void cli_progress_finish(struct cli_progress *p, int ok)
{
    if (p == NULL || !p->enabled || !p->drawn)
        return;
    if (ok)
        fputc('\n', stderr);
    else
        fputs("\r\033[K", stderr); /* the error line replaces the bar */
    fflush(stderr);
    p->drawn = 0;
}

/* ---- the total line ------------------------------------------------------------------- */

/* The total being shown, for cli_line_begin/end (one recursive run per process). */
static struct cli_total *shown_total;

void cli_total_init(struct cli_total *t, const struct cli_opts *o, uint64_t bytes, size_t files)
{
    struct cli_progress probe;

    memset(t, 0, sizeof(*t));
    cli_progress_init(&probe, o, NULL);
    t->enabled = probe.enabled && !o->dryrun && files > 0;
    pthread_mutex_init(&t->lock, NULL);
    t->bytes = bytes;
    t->files = files;
    t->start = cli_now();
    if (t->enabled)
        shown_total = t;
}

/* Draws the line; lock held. */
static void total_draw(struct cli_total *t, double now)
{
    char d[24], all[24], rate[24];
    double el = now - t->start;
    uint64_t done = t->bytes_done < t->bytes ? t->bytes_done : t->bytes;

    if (t->bytes > 0) {
        cli_aws_size(done, d, sizeof(d));
        cli_aws_size(t->bytes, all, sizeof(all));
        cli_aws_size(el > 0 ? (uint64_t)((double)done / el) : 0, rate, sizeof(rate));
        fprintf(stderr, "\rCompleted %s/%s (%s/s) with %zu file(s) remaining\033[K", d, all, rate,
                t->files - t->files_done);
    } else {
        fprintf(stderr, "\rCompleted %zu file(s) with %zu file(s) remaining\033[K", t->files_done,
                t->files - t->files_done);
    }
    fflush(stderr);
    t->drawn = 1;
    t->last_draw = now;
}

/* Takes the line off the screen; lock held. */
static void total_clear(struct cli_total *t)
{
    if (!t->drawn)
        return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
    t->drawn = 0;
}

void cli_total_add(struct cli_total *t, uint64_t bytes, size_t files)
{
    double now;

    if (t == NULL)
        return;
    pthread_mutex_lock(&t->lock);
    t->bytes_done += bytes;
    t->files_done += files;
    if (t->files_done > t->files)
        t->files_done = t->files;
    now = cli_now();
    if (t->enabled && t->files_done == t->files)
        total_clear(t); /* all done: the lines of the files stay, as aws s3 leaves them */
    else if (t->enabled && (files > 0 || !t->drawn || now - t->last_draw >= REDRAW_S))
        total_draw(t, now);
    pthread_mutex_unlock(&t->lock);
}

void cli_total_finish(struct cli_total *t)
{
    if (t == NULL)
        return;
    pthread_mutex_lock(&t->lock);
    total_clear(t);
    t->enabled = 0;
    pthread_mutex_unlock(&t->lock);
    if (shown_total == t)
        shown_total = NULL;
    pthread_mutex_destroy(&t->lock);
}

void cli_line_begin(void)
{
    struct cli_total *t = shown_total;

    if (t == NULL)
        return;
    pthread_mutex_lock(&t->lock);
    total_clear(t);
}

/* The line is drawn again by the next report: a file's line is followed by its end
 * (cli_total_add with files 1), a byte of any transfer redraws it at once. */
void cli_line_end(void)
{
    struct cli_total *t = shown_total;

    if (t != NULL)
        pthread_mutex_unlock(&t->lock);
}
