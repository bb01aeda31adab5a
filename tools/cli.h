/* cli.h - what the s3direct command files share: parsed options, the client built from them,
 * error reporting, size and time formatting, and the progress bar.
 *
 * The CLI uses only the public API (include/s3direct/). Everything here runs on the main
 * thread; nothing is thread-safe. */
#ifndef S3D_CLI_H
#define S3D_CLI_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "s3direct/s3direct.h"

/* Exit codes: 0 success, 1 the operation failed, 2 the command line was wrong. */
#define CLI_EXIT_OK          0
#define CLI_EXIT_FAIL        1
#define CLI_EXIT_USAGE       2
#define CLI_EXIT_INTERRUPTED 130 /* 128 + SIGINT (see cli_interrupted_exit) */

/* Flags a command accepts beyond the common ones (bit mask, see struct cli_command). */
enum {
    CLI_F_RECURSIVE = 1 << 0,
    CLI_F_EXPIRES = 1 << 1,
    CLI_F_CONTENT_TYPE = 1 << 2,
    CLI_F_HUMAN = 1 << 3,
    CLI_F_SUMMARIZE = 1 << 4,
    CLI_F_METHOD = 1 << 5,
    CLI_F_DRYRUN = 1 << 6,
    CLI_F_NO_VERIFY = 1 << 7,
    CLI_F_BATCH = 1 << 8,
    CLI_F_S3API = 1 << 9,        /* --bucket --key --upload-id --prefix */
    CLI_F_OLDER_THAN = 1 << 10,  /* --older-than */
    CLI_F_FILTER = 1 << 11,      /* --exclude --include */
    CLI_F_SYNC = 1 << 12,        /* --delete --exact-timestamps --size-only */
    CLI_F_BASE = 1 << 13,        /* --base URI (cp) */
    CLI_F_SYMLINKS = 1 << 14,    /* --follow-symlinks --no-follow-symlinks */
    CLI_F_ONLY_ERRORS = 1 << 15, /* --only-show-errors */
};

#define CLI_MAX_ARGS    8
#define CLI_MAX_FILTERS 64

/* One --exclude or --include, in command-line order. */
struct cli_filter {
    int include; /* 1 --include, 0 --exclude */
    const char *pattern;
};

struct cli_progress;

/* Everything the command line said. Strings point into argv. */
struct cli_opts {
    /* common (every command) */
    const char *endpoint_url;
    const char *profile;
    const char *region;
    const char *ca_bundle;
    int no_sign_request;
    int no_verify_ssl;
    uint32_t concurrency;     /* --concurrency: fixed; 0 = adaptive */
    uint32_t max_concurrency; /* --max-concurrency: the adaptive cap; 0 = library default */
    const char *target_throughput;
    uint64_t part_size;    /* 0 = library default */
    uint32_t max_attempts; /* --max-attempts: 0 = library default */
    int progress;          /* -1 auto (TTY), 0 off, 1 on */
    int quiet;
    int only_errors; /* --only-show-errors (cp, mv, rm, sync): no progress, no done lines */
    int debug;
    /* per command */
    int recursive;
    uint32_t expires_in;      /* presign; 3600 unless given */
    const char *content_type; /* cp uploads */
    const char *method;       /* presign; "GET" unless given */
    int human;                /* ls */
    int summarize;            /* ls */
    int dryrun;               /* cp, rm */
    int no_verify;            /* verify: only read, skip the CRC32C check (for timing) */
    uint64_t batch_bytes;     /* verify: host memory per batch; 0 = default */
    const char *bucket;       /* s3api */
    const char *key;          /* s3api */
    const char *upload_id;    /* s3api */
    const char *prefix;       /* s3api */
    int64_t older_than;       /* abort-uploads: seconds; -1 = not given */
    struct cli_filter filters[CLI_MAX_FILTERS]; /* cp -r, rm -r, mv -r, sync */
    int nfilters;
    int delete_extra;       /* sync --delete */
    int exact_timestamps;   /* sync */
    int size_only;          /* sync */
    int move;               /* mv: sources are deleted after each copy; lines say "move" */
    int no_follow_symlinks; /* cp, mv, sync: leave local links out (default: follow them) */
    const char *base;       /* cp --base: an earlier checkpoint; NULL = not given */
    /* positional arguments */
    const char *args[CLI_MAX_ARGS];
    int nargs;
};

struct cli_command {
    const char *name;
    const char *summary; /* one line for "s3direct --help" */
    const char *usage;   /* the command's own help text (without the common flags) */
    unsigned flags;      /* CLI_F_* it accepts */
    int min_args, max_args;
    int (*run)(const struct cli_opts *o);
};

/* The commands, defined in their cmd_*.c files. */
extern const struct cli_command cli_cmd_cp, cli_cmd_ls, cli_cmd_rm, cli_cmd_stat, cli_cmd_mb,
    cli_cmd_rb, cli_cmd_presign, cli_cmd_info, cli_cmd_verify, cli_cmd_s3api, cli_cmd_abort_uploads,
    cli_cmd_mv, cli_cmd_sync;

/* ---- options.c ------------------------------------------------------------------------ */

/* Parses argv[0..argc) (the words after the command name) into *o for command cmd. Prints
 * one "s3direct CMD: ..." line to stderr and returns CLI_EXIT_USAGE on a bad command line;
 * returns -1 after printing the help when --help/-h was given; 0 otherwise. o must have been
 * set by cli_opts_init (common flags given before the command are kept). */
int cli_parse(const struct cli_command *cmd, int argc, char **argv, struct cli_opts *o);
/* Parses the common flags that precede the command name; returns how many words it took, or
 * -1 (message printed) on a bad flag. Stops at the first word that is not a common flag. */
int cli_parse_common(int argc, char **argv, struct cli_opts *o);
void cli_opts_init(struct cli_opts *o);
/* Prints the help of cmd (usage, its flags, the common flags) to f. */
void cli_print_command_help(const struct cli_command *cmd, FILE *f);
/* The help paragraph of the common flags, shared by every command and the main help. */
extern const char cli_common_help[];

/* "64MiB", "8M", "1.5G", "4096", "512k" -> bytes. k/M/G/T (also KB/KiB...) are powers of
 * 1024, as the AWS CLI reads them. 0 on success, -1 for anything else or overflow. */
int cli_parse_size(const char *s, uint64_t *out);
/* "90s", "30m", "24h", "7d", "2w", "1d12h", "0" -> seconds. 0 on success, -1 otherwise. */
int cli_parse_duration(const char *s, int64_t *out);
/* Decimal unsigned integer in [lo, hi]; 0 on success, -1 otherwise. */
int cli_parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out);

/* ---- common.c ------------------------------------------------------------------------- */

/* Creates the client the options describe. On failure prints the error line and returns the
 * negative S3D_E* code (*out NULL). */
int cli_client(const struct cli_opts *o, struct s3d_client **out);
/* Prints "s3direct: <library message>" (or the code's description when the library left
 * none) to stderr and returns CLI_EXIT_FAIL (128 + the signal for a transfer canceled by
 * Ctrl-C, SIGTERM or SIGHUP). rc is the negative code returned. */
int cli_fail(int rc);
/* Whether to print the line of an operation ("upload: A to B", "delete: K"): never with
 * --quiet; with --only-show-errors only --dryrun's lines, as aws s3 prints them. Errors and
 * warnings are printed whatever this says. */
int cli_says(const struct cli_opts *o);
/* Prints "s3direct: <printf message>" to stderr and returns CLI_EXIT_FAIL. */
int cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "s3direct CMD: <message>" and "see s3direct CMD --help" to stderr; CLI_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Every object under a prefix, from a recursive listing (folder markers ending in '/' are
 * kept; callers decide). Owned arrays; free with cli_keys_free. */
struct cli_keys {
    char **keys;
    uint64_t *sizes;
    size_t n, cap;
    int oom;
};
/* Lists bucket/prefix recursively into *out (zeroed first). On failure prints the error line,
 * frees what was gathered and returns the negative code. */
int cli_list_keys(struct s3d_client *c, const char *bucket, const char *prefix,
                  struct cli_keys *out);
void cli_keys_free(struct cli_keys *k);
/* The transfer options every command uses: progress (and Ctrl-C) through p. */
void cli_transfer_opts(const struct cli_opts *o, struct cli_progress *p,
                       struct s3d_transfer_options *t);

/* 1 if s starts with "s3://". */
int cli_is_s3(const char *s);
/* Splits an s3:// URI into the caller's buffers (bucket: 64 bytes, key: 1025 bytes). Prints the
 * error on failure and returns the negative code. */
#define CLI_BUCKET_CAP 64
#define CLI_KEY_CAP    1025
int cli_split_uri(const char *uri, char *bucket, char *key);

/* Writes a key (or any name from outside) for a terminal: control bytes (below 0x20, 0x7f, and
 * the UTF-8 C1 controls U+0080..U+009F) as \xNN, so a key cannot move the cursor, clear the
 * screen or fake a line of output. Other bytes as they are. */
void cli_put_key(FILE *f, const char *s);

/* Writes s as a JSON string (quotes included): ", \\ and control bytes escaped, other bytes
 * (UTF-8) as they are, as the AWS CLI's JSON output shows keys. */
void cli_json_string(FILE *f, const char *s);

/* "1.5 GiB" style into buf (cap >= 16). */
const char *cli_human_size(uint64_t bytes, char *buf, size_t cap);
/* A size as the AWS CLI's s3 commands print it (ls --human-readable, the progress line):
 * "1 Byte", "10 Bytes", "1.0 KiB", "2.5 MiB" (cap >= 16). */
const char *cli_aws_size(uint64_t bytes, char *buf, size_t cap);
/* "2026-12-02 16:38:24" (UTC) into buf (cap >= 24); "-" for 0. */
const char *cli_format_time(int64_t epoch_s, char *buf, size_t cap);

/* ---- model_path.c --------------------------------------------------------------------- */

/* Opens the checkpoint that info and verify were given, as Python's load() resolves it: a
 * .safetensors file or object, a .safetensors.index.json, or a model folder (s3://b/m/, a local
 * folder, or s3://b/m when there is no such object but a folder m/): its model.safetensors,
 * else its model.safetensors.index.json. The URI opened goes into uri (cap bytes). 0, or the
 * exit status after printing the error (*out NULL). */
int cli_reader_open(struct s3d_client *c, const char *arg, char *uri, size_t cap,
                    struct s3d_reader **out);

/* ---- filter.c ------------------------------------------------------------------------- */

/* 1 when rel (a path relative to the source folder or prefix) passes o's --exclude/--include
 * filters, applied in order, the last match deciding (the AWS CLI's rule); 1 without filters. */
int cli_filter_included(const struct cli_opts *o, const char *rel);

/* ---- cmd_cp.c / cp_recursive.c: copying --------------------------------------------------- */

/* What one cp, mv or sync run works with (one per transfer thread of a recursive run). */
struct cp_ctx {
    const struct cli_opts *o;
    struct s3d_client *c;
    struct cli_total *total; /* recursive runs: the total progress line, else NULL */
    uint64_t fed;            /* bytes the last transfer reported to total */
};
/* One transfer each, printing the "upload: SRC to DST" line (aws s3's) when done, or only the
 * line with --dryrun. 0, or the exit status after printing the error. (cmd_cp.c) */
int cli_upload(struct cp_ctx *x, const char *path, const char *bucket, const char *key);
int cli_download(struct cp_ctx *x, const char *bucket, const char *key, const char *path);
int cli_copy(struct cp_ctx *x, const char *sb, const char *sk, const char *db, const char *dk);
/* Copies SRC to DST for cp/mv: one object or file. (cmd_cp.c) */
int cli_cp_one(struct cp_ctx *x, const char *src, const char *dst);
/* --recursive copies for cp and mv: everything under a folder or prefix that passes the
 * filters, in path order, with "*.index.json" files last (a Hugging Face index only after
 * the shards it names). With o->move, each source is deleted once its copy succeeded. */
int cli_cp_recursive(struct cp_ctx *x, const char *src, const char *dst);
/* cp --base URI SOURCE DEST (o->args): SOURCE, one safetensors file or object, written to DEST
 * as a checkpoint with o->base as its base (tensors unchanged there are copied, not sent),
 * then a summary line. Checks the command line, makes its client. 0, or the exit status after
 * printing the error. (cp_base.c) */
int cli_cp_base(const struct cli_opts *o);
/* Deletes the source of a finished move (a no-op with --dryrun). (cmd_cp.c) */
int cli_delete_source(struct cp_ctx *x, const char *src);
/* sync SRC DST (cp_recursive.c). */
int cli_sync(struct cp_ctx *x, const char *src, const char *dst);

/* Path helpers (cp_recursive.c). */
const char *cli_base_name(const char *path);
int cli_ends_with_slash(const char *s);
/* "dir" + "/" + "name" into out; -1 when too long (error printed). */
int cli_join(char *out, size_t cap, const char *dir, const char *name);
/* mkdir -p of the folder that will hold path; 0 or the exit status after printing. */
int cli_make_parents(const char *path);

/* ---- progress.c ----------------------------------------------------------------------- */

/* A progress bar on stderr: one line redrawn with \r, at most every 100 ms, with bytes done
 * and total, percentage, rate and ETA. Shown when o->progress is 1, or -1 and stderr is a
 * TTY; never with --quiet. */
struct cli_progress {
    int enabled;
    struct cli_total *total; /* set: progress goes to this total instead of a bar */
    uint64_t fed;            /* bytes of this transfer added to total so far */
    int drawn;               /* a line is on screen and needs ending */
    double start;            /* monotonic seconds */
    double last_draw;
    uint64_t last_done;
    char label[64];
};
void cli_progress_init(struct cli_progress *p, const struct cli_opts *o, const char *label);
/* The s3d_progress_fn: user is a struct cli_progress * (may be disabled). Returns non-zero,
 * which cancels the transfer, once Ctrl-C was pressed (see cli_install_sigint). */
int cli_progress_cb(void *user, uint64_t done, uint64_t total);
/* Ends the line (draws the final state once when something was drawn). */
void cli_progress_finish(struct cli_progress *p, int ok);
/* The total progress of cp/mv --recursive and sync, as aws s3 shows it: one line on stderr,
 * "Completed 1.2 MiB/3.4 MiB (56.7 MiB/s) with 3 file(s) remaining", redrawn at most every
 * 100 ms by whichever transfer thread reports (the rate is the average since the start).
 * Shown as the bar is (cli_progress_init's rule), never with --dryrun. The totals are known
 * before the first transfer: everything is listed first. lock guards every field below it;
 * while the line is shown, cli_line_begin/cli_line_end around any other line printed (a file
 * done, an error) take it off the screen (the next report draws it again, below). */
struct cli_total {
    int enabled;
    pthread_mutex_t lock;
    uint64_t bytes, bytes_done; /* done: finished files, and what running ones reported */
    size_t files, files_done;   /* done: finished, failed or given up */
    double start, last_draw;
    int drawn;
};
/* Starts the line for files files of bytes bytes (draws nothing yet). */
void cli_total_init(struct cli_total *t, const struct cli_opts *o, uint64_t bytes, size_t files);
/* Adds bytes done and files finished (any thread); redraws when due or when a file ended. */
void cli_total_add(struct cli_total *t, uint64_t bytes, size_t files);
/* Takes the line off the screen for good; t may be NULL or disabled. */
void cli_total_finish(struct cli_total *t);
/* Around every other line printed while a total may be shown (any thread): begin takes the
 * total line off the screen and holds it off until end. No-ops when none is shown. */
void cli_line_begin(void);
void cli_line_end(void);
/* Makes the first SIGINT, SIGTERM or SIGHUP cancel the running transfer cleanly (the progress
 * callback returns non-zero: temporary files are removed, a multipart upload is aborted); a
 * second one of the same signal kills the process. */
void cli_install_sigint(void);
/* 1 once one of those signals arrived. */
int cli_interrupted(void);
/* The token the stop signals set (created on first use; lives as long as the process):
 * cli_client gives it to every client, so a request stops within about 100 ms of Ctrl-C or
 * SIGTERM even where no progress callback runs (a server that stopped answering). */
struct s3d_cancel *cli_stop_token(void);
/* The exit status after a stop signal: 128 + its number, as shells report a signal's death
 * (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP). */
int cli_interrupted_exit(void);
/* Monotonic seconds. */
double cli_now(void);

#endif
