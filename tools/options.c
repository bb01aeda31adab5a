/* options.c - command-line parsing shared by every command.
 *
 * Flags are spelled as the AWS CLI spells them and may come before or after the command name
 * and between positional arguments; "--flag value" and "--flag=value" are both accepted;
 * "--" ends the flags; a lone "-" is a positional argument (standard input or output). */
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

enum opt_id {
    O_ENDPOINT,
    O_PROFILE,
    O_REGION,
    O_NO_SIGN,
    O_CA_BUNDLE,
    O_NO_VERIFY_SSL,
    O_CONCURRENCY,
    O_MAX_CONCURRENCY,
    O_TARGET_THROUGHPUT,
    O_PART_SIZE,
    O_MAX_ATTEMPTS,
    O_PROGRESS,
    O_NO_PROGRESS,
    O_QUIET,
    O_DEBUG,
    O_RECURSIVE,
    O_EXPIRES,
    O_CONTENT_TYPE,
    O_HUMAN,
    O_SUMMARIZE,
    O_METHOD,
    O_DRYRUN,
    O_NO_VERIFY,
    O_BATCH,
    O_BUCKET,
    O_KEY,
    O_UPLOAD_ID,
    O_PREFIX,
    O_OLDER_THAN,
    O_EXCLUDE,
    O_INCLUDE,
    O_DELETE,
    O_EXACT_TIMESTAMPS,
    O_SIZE_ONLY,
    O_BASE,
    O_FOLLOW_SYMLINKS,
    O_NO_FOLLOW_SYMLINKS,
    O_ONLY_ERRORS,
};

struct opt_def {
    const char *name;
    char short_name; /* 0 = none */
    int has_arg;
    unsigned flag; /* 0 = common to every command, else the CLI_F_* bit */
    enum opt_id id;
};

static const struct opt_def opt_defs[] = {
    {"--endpoint-url", 0, 1, 0, O_ENDPOINT},
    {"--profile", 0, 1, 0, O_PROFILE},
    {"--region", 0, 1, 0, O_REGION},
    {"--no-sign-request", 0, 0, 0, O_NO_SIGN},
    {"--ca-bundle", 0, 1, 0, O_CA_BUNDLE},
    {"--no-verify-ssl", 0, 0, 0, O_NO_VERIFY_SSL},
    {"--concurrency", 0, 1, 0, O_CONCURRENCY},
    {"--max-concurrency", 0, 1, 0, O_MAX_CONCURRENCY},
    {"--target-throughput", 0, 1, 0, O_TARGET_THROUGHPUT},
    {"--part-size", 0, 1, 0, O_PART_SIZE},
    {"--max-attempts", 0, 1, 0, O_MAX_ATTEMPTS},
    {"--progress", 0, 0, 0, O_PROGRESS},
    {"--no-progress", 0, 0, 0, O_NO_PROGRESS},
    {"--quiet", 'q', 0, 0, O_QUIET},
    {"--debug", 0, 0, 0, O_DEBUG},
    {"--recursive", 'r', 0, CLI_F_RECURSIVE, O_RECURSIVE},
    {"--expires-in", 0, 1, CLI_F_EXPIRES, O_EXPIRES},
    {"--content-type", 0, 1, CLI_F_CONTENT_TYPE, O_CONTENT_TYPE},
    {"--human-readable", 0, 0, CLI_F_HUMAN, O_HUMAN},
    {"--summarize", 0, 0, CLI_F_SUMMARIZE, O_SUMMARIZE},
    {"--method", 0, 1, CLI_F_METHOD, O_METHOD},
    {"--dryrun", 0, 0, CLI_F_DRYRUN, O_DRYRUN},
    {"--no-verify", 0, 0, CLI_F_NO_VERIFY, O_NO_VERIFY},
    {"--batch-size", 0, 1, CLI_F_BATCH, O_BATCH},
    {"--bucket", 0, 1, CLI_F_S3API, O_BUCKET},
    {"--key", 0, 1, CLI_F_S3API, O_KEY},
    {"--upload-id", 0, 1, CLI_F_S3API, O_UPLOAD_ID},
    {"--prefix", 0, 1, CLI_F_S3API, O_PREFIX},
    {"--older-than", 0, 1, CLI_F_OLDER_THAN, O_OLDER_THAN},
    {"--exclude", 0, 1, CLI_F_FILTER, O_EXCLUDE},
    {"--include", 0, 1, CLI_F_FILTER, O_INCLUDE},
    {"--delete", 0, 0, CLI_F_SYNC, O_DELETE},
    {"--exact-timestamps", 0, 0, CLI_F_SYNC, O_EXACT_TIMESTAMPS},
    {"--size-only", 0, 0, CLI_F_SYNC, O_SIZE_ONLY},
    {"--base", 0, 1, CLI_F_BASE, O_BASE},
    {"--follow-symlinks", 0, 0, CLI_F_SYMLINKS, O_FOLLOW_SYMLINKS},
    {"--no-follow-symlinks", 0, 0, CLI_F_SYMLINKS, O_NO_FOLLOW_SYMLINKS},
    {"--only-show-errors", 0, 0, CLI_F_ONLY_ERRORS, O_ONLY_ERRORS},
};

const char cli_common_help[] =
    "Common options (before or after the command):\n"
    "  --endpoint-url URL   S3 endpoint, e.g. http://127.0.0.1:8000 (default:\n"
    "                       AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile, else AWS)\n"
    "  --profile NAME       profile in ~/.aws/credentials and ~/.aws/config\n"
    "                       (default: AWS_PROFILE, else \"default\")\n"
    "  --region NAME        signing region (default: AWS_REGION, AWS_DEFAULT_REGION, the profile,\n"
    "                       else us-east-1)\n"
    "  --no-sign-request    send requests unsigned (public buckets); no credentials are read\n"
    "  --ca-bundle FILE     PEM file of CA certificates to trust (default: AWS_CA_BUNDLE, system)\n"
    "  --no-verify-ssl      do not verify TLS certificates (unsafe; says so on stderr)\n"
    "  --concurrency N      exactly N parallel requests, 1..1024 (default: adaptive, the\n"
    "                       number of requests follows the path, see --max-concurrency)\n"
    "  --max-concurrency N  the most parallel requests the adaptive level may reach, 1..1024\n"
    "                       (default: the profile's s3 max_concurrent_requests, else 512)\n"
    "  --target-throughput RATE  what the network allows, as the AWS CLI's s3\n"
    "                       target_bandwidth: 10Gb/s, 1.5GB/s, 500MB/s, or bytes per second\n"
    "                       (the level starts at RATE / 50 MB/s and stops growing there)\n"
    "  --part-size SIZE     bytes per ranged GET / uploaded part: 8M, 64MiB, 1G, 5242880\n"
    "                       (default: the profile's s3 multipart_chunksize, else 8 MiB)\n"
    "  --max-attempts N     tries per request, the first included, 1..100 (default:\n"
    "                       AWS_MAX_ATTEMPTS, the profile's max_attempts, else 5); a throttle\n"
    "                       (503 SlowDown, 429) is retried past them for up to 30 s\n"
    "  --progress           show the progress bar even when stderr is not a terminal\n"
    "  --no-progress        never show the progress bar (default: shown on a terminal)\n"
    "  -q, --quiet          print nothing but errors and warnings (not even --dryrun's\n"
    "                       lines; see --only-show-errors on cp, mv, rm and sync)\n"
    "  --debug              print the resolved configuration to stderr first\n"
    "  -h, --help           this help\n";

void cli_opts_init(struct cli_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->progress = -1;
    o->expires_in = 3600;
    o->method = "GET";
    o->older_than = -1;
}

int cli_parse_duration(const char *s, int64_t *out)
{
    int64_t total = 0;

    if (s == NULL || *s == '\0')
        return -1;
    if (strcmp(s, "0") == 0) {
        *out = 0;
        return 0;
    }
    while (*s) {
        char *end;
        unsigned long long v;
        int64_t mult;

        if (*s < '0' || *s > '9')
            return -1;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno != 0 || v > (1ull << 40))
            return -1;
        switch (*end) {
        case 's':
            mult = 1;
            break;
        case 'm':
            mult = 60;
            break;
        case 'h':
            mult = 3600;
            break;
        case 'd':
            mult = 86400;
            break;
        case 'w':
            mult = 7 * 86400;
            break;
        default:
            return -1; /* a unit is required: "10" could mean seconds or days */
        }
        total += (int64_t)v * mult;
        if (total > ((int64_t)1 << 50))
            return -1;
        s = end + 1;
    }
    *out = total;
    return 0;
}

int cli_parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
    char *end;
    unsigned long long v;

    if (s == NULL || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

int cli_parse_size(const char *s, uint64_t *out)
{
    static const char *const units[] = {"", "k", "m", "g", "t"};
    char *end;
    double v, mult = 1;
    size_t i, ulen;

    if (s == NULL || ((*s < '0' || *s > '9') && *s != '.'))
        return -1;
    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || end == s || v < 0)
        return -1;
    /* Accept "", "k", "K", "KB", "KiB" and so on: all powers of 1024, as the AWS CLI does. */
    ulen = strlen(end);
    if (ulen > 0) {
        int found = 0;
        for (i = 1; i < sizeof(units) / sizeof(units[0]); i++) {
            if ((end[0] | 0x20) == units[i][0]) {
                found = 1;
                mult = (double)(1ull << (10 * i));
                break;
            }
        }
        if (!found)
            return -1;
        if (!(ulen == 1 || (ulen == 2 && (end[1] | 0x20) == 'b') ||
              (ulen == 3 && (end[1] | 0x20) == 'i' && (end[2] | 0x20) == 'b')))
            return -1;
    } else if (end[-1] == '.') {
        return -1;
    }
    v *= mult;
    if (v >= 18446744073709551615.0)
        return -1;
    if (v != (double)(uint64_t)v)
        return -1; /* fractional bytes */
    *out = (uint64_t)v;
    return 0;
}

static const struct opt_def *find_long(const char *word, size_t len)
{
    size_t i;

    for (i = 0; i < sizeof(opt_defs) / sizeof(opt_defs[0]); i++)
        if (strlen(opt_defs[i].name) == len && memcmp(opt_defs[i].name, word, len) == 0)
            return &opt_defs[i];
    return NULL;
}

static const struct opt_def *find_short(char c)
{
    size_t i;

    for (i = 0; i < sizeof(opt_defs) / sizeof(opt_defs[0]); i++)
        if (opt_defs[i].short_name == c)
            return &opt_defs[i];
    return NULL;
}

/* The flags whose values are checked (numbers, sizes, choices, filters, durations). */
static int apply_checked(const struct opt_def *d, const char *val, struct cli_opts *o, char *err,
                         size_t cap)
{
    switch (d->id) {
    case O_CONCURRENCY:
        if (cli_parse_u32(val, 1, 1024, &o->concurrency) != 0)
            goto bad;
        break;
    case O_MAX_CONCURRENCY:
        if (cli_parse_u32(val, 1, 1024, &o->max_concurrency) != 0)
            goto bad;
        break;
    case O_PART_SIZE:
        if (cli_parse_size(val, &o->part_size) != 0 || o->part_size == 0)
            goto bad;
        break;
    case O_MAX_ATTEMPTS:
        if (cli_parse_u32(val, 1, 100, &o->max_attempts) != 0) {
            snprintf(err, cap, "--max-attempts: \"%s\" is not a count (1..100)", val);
            return -1;
        }
        break;
    case O_EXPIRES:
        if (cli_parse_u32(val, 1, 604800, &o->expires_in) != 0) {
            snprintf(err, cap, "--expires-in: \"%s\" is not a number of seconds in 1..604800", val);
            return -1;
        }
        break;
    case O_METHOD:
        /* --method has has_arg set in opt_defs, so parse_flag gives it a value. (assert, not
         * S3D_ASSERT: the CLI uses only the public headers; off where NDEBUG is.) */
        assert(val != NULL);
        if (strcmp(val, "GET") && strcmp(val, "PUT") && strcmp(val, "HEAD") &&
            strcmp(val, "DELETE")) {
            snprintf(err, cap, "--method: \"%s\" is not one of GET, PUT, HEAD, DELETE", val);
            return -1;
        }
        o->method = val;
        break;
    case O_BATCH:
        if (cli_parse_size(val, &o->batch_bytes) != 0 || o->batch_bytes == 0)
            goto bad;
        break;
    case O_EXCLUDE:
    case O_INCLUDE:
        if (o->nfilters >= CLI_MAX_FILTERS) {
            snprintf(err, cap, "more than %d --exclude/--include filters", CLI_MAX_FILTERS);
            return -1;
        }
        o->filters[o->nfilters].include = d->id == O_INCLUDE;
        o->filters[o->nfilters++].pattern = val;
        break;
    case O_BASE:
        assert(val != NULL); /* has_arg, as --method */
        if (val[0] == '\0') {
            snprintf(err, cap, "--base needs a checkpoint URI");
            return -1;
        }
        o->base = val;
        break;
    case O_OLDER_THAN:
        if (cli_parse_duration(val, &o->older_than) != 0) {
            snprintf(err, cap,
                     "--older-than: \"%s\" is not a duration (e.g. 90s, 30m, 24h, 7d, 2w, 0)", val);
            return -1;
        }
        break;
    default:
        break;
    }
    return 0;
bad:
    snprintf(err, cap, "%s: \"%s\" is not a valid %s", d->name, val,
             d->id == O_CONCURRENCY || d->id == O_MAX_CONCURRENCY ? "count (1..1024)"
                                                                  : "size (e.g. 8M, 64MiB, 1G)");
    return -1;
}

/* Stores one flag's value (val NULL for a flag without one). Returns 0, or -1 with the
 * message in err. */
static int apply(const struct opt_def *d, const char *val, struct cli_opts *o, char *err,
                 size_t cap)
{
    switch (d->id) {
    case O_ENDPOINT:
        o->endpoint_url = val;
        break;
    case O_PROFILE:
        o->profile = val;
        break;
    case O_REGION:
        o->region = val;
        break;
    case O_NO_SIGN:
        o->no_sign_request = 1;
        break;
    case O_CA_BUNDLE:
        o->ca_bundle = val;
        break;
    case O_NO_VERIFY_SSL:
        o->no_verify_ssl = 1;
        break;
    case O_TARGET_THROUGHPUT:
        o->target_throughput = val; /* checked by the library, with the message it gives */
        break;
    case O_PROGRESS:
        o->progress = 1;
        break;
    case O_NO_PROGRESS:
        o->progress = 0;
        break;
    case O_QUIET:
        o->quiet = 1;
        break;
    case O_ONLY_ERRORS:
        o->only_errors = 1;
        break;
    case O_DEBUG:
        o->debug = 1;
        break;
    case O_RECURSIVE:
        o->recursive = 1;
        break;
    case O_CONTENT_TYPE:
        o->content_type = val;
        break;
    case O_HUMAN:
        o->human = 1;
        break;
    case O_SUMMARIZE:
        o->summarize = 1;
        break;
    case O_DRYRUN:
        o->dryrun = 1;
        break;
    case O_NO_VERIFY:
        o->no_verify = 1;
        break;
    case O_BUCKET:
        o->bucket = val;
        break;
    case O_KEY:
        o->key = val;
        break;
    case O_UPLOAD_ID:
        o->upload_id = val;
        break;
    case O_PREFIX:
        o->prefix = val;
        break;
    case O_DELETE:
        o->delete_extra = 1;
        break;
    case O_EXACT_TIMESTAMPS:
        o->exact_timestamps = 1;
        break;
    case O_SIZE_ONLY:
        o->size_only = 1;
        break;
    case O_FOLLOW_SYMLINKS: /* the last of the two given wins, as in the AWS CLI */
    case O_NO_FOLLOW_SYMLINKS:
        o->no_follow_symlinks = d->id == O_NO_FOLLOW_SYMLINKS;
        break;
    default:
        return apply_checked(d, val, o, err, cap);
    }
    return 0;
}

/* Parses one flag at argv[*i] (advancing *i past its value). Returns 0 on success, 1 for
 * --help, 2 when the word is not a known flag, -1 with the message in err otherwise. */
static int parse_flag(int argc, char **argv, int *i, unsigned allowed, struct cli_opts *o,
                      char *err, size_t cap)
{
    const char *w = argv[*i], *val = NULL, *eq;
    const struct opt_def *d;

    if (strcmp(w, "-h") == 0 || strcmp(w, "--help") == 0)
        return 1;
    if (w[0] == '-' && w[1] == '-') {
        eq = strchr(w, '=');
        d = find_long(w, eq ? (size_t)(eq - w) : strlen(w));
        if (d && eq)
            val = eq + 1;
    } else if (w[0] == '-' && w[1] != '\0' && w[2] == '\0') {
        d = find_short(w[1]);
    } else {
        return 2;
    }
    if (d == NULL || (d->flag != 0 && !(d->flag & allowed))) {
        snprintf(err, cap, "unknown option %s", w);
        return -1;
    }
    if (d->has_arg && val == NULL) {
        if (*i + 1 >= argc) {
            snprintf(err, cap, "%s needs a value", d->name);
            return -1;
        }
        val = argv[++*i];
    } else if (!d->has_arg && val != NULL) {
        snprintf(err, cap, "%s takes no value", d->name);
        return -1;
    }
    return apply(d, val, o, err, cap);
}

int cli_parse_common(int argc, char **argv, struct cli_opts *o)
{
    char err[256];
    int i, r;

    for (i = 0; i < argc; i++) {
        const char *w = argv[i];
        if (w[0] != '-' || strcmp(w, "-h") == 0 || strcmp(w, "--help") == 0 ||
            strcmp(w, "--version") == 0)
            break;
        r = parse_flag(argc, argv, &i, 0, o, err, sizeof(err));
        if (r != 0) {
            if (r == -1)
                fprintf(stderr, "s3direct: %s\n", err);
            else
                fprintf(stderr, "s3direct: unexpected %s\n", w);
            return -1;
        }
    }
    return i;
}

int cli_parse(const struct cli_command *cmd, int argc, char **argv, struct cli_opts *o)
{
    char err[256];
    int i, r, only_args = 0;

    for (i = 0; i < argc; i++) {
        const char *w = argv[i];
        if (!only_args && strcmp(w, "--") == 0) {
            only_args = 1;
            continue;
        }
        if (!only_args && w[0] == '-' && w[1] != '\0') {
            r = parse_flag(argc, argv, &i, cmd->flags, o, err, sizeof(err));
            if (r == 1) {
                cli_print_command_help(cmd, stdout);
                return -1;
            }
            if (r != 0)
                return cli_usage_error(cmd->name, "%s", err);
            continue;
        }
        if (o->nargs >= CLI_MAX_ARGS || o->nargs >= cmd->max_args)
            return cli_usage_error(cmd->name, "unexpected argument \"%s\"", w);
        o->args[o->nargs++] = w;
    }
    if (o->nargs < cmd->min_args)
        return cli_usage_error(cmd->name, "missing argument%s", cmd->min_args > 1 ? "s" : "");
    return 0;
}

void cli_print_command_help(const struct cli_command *cmd, FILE *f)
{
    fprintf(f, "%s\n%s", cmd->usage, cli_common_help);
}
