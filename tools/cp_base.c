/* cp_base.c - s3direct cp --base URI SOURCE DEST: a safetensors file written by another tool
 * (the safetensors library, Hugging Face) saved as an incremental checkpoint.
 *
 * SOURCE is opened with s3d_reader_open (its header, validated); a local file is mapped
 * read-only and each tensor given to s3d_checkpoint_write where it lies in the map, an
 * s3:// object is read whole into host memory first. The write, with opts.base = URI,
 * copies the tensors the base holds unchanged (same name, dtype, shape and CRC-32C) instead
 * of sending them, and its stats give the summary line. DEST is a new safetensors file with
 * the same tensors, in the same order, and the same __metadata__ (less the keys s3direct
 * reserves), under a header s3direct writes with a CRC-32C per tensor: unlike a plain cp, the
 * bytes are not SOURCE's. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define URI_CAP  (CLI_BUCKET_CAP + CLI_KEY_CAP + 8)
#define RESERVED "s3direct."

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), t = strlen(tail);
    return n >= t && strcmp(s + n - t, tail) == 0;
}

/* ---- why the base was not used ----------------------------------------------------------
 * The library never fails a save for its base; it says in one info line why it made a full
 * save: "base URI: not used, a full save: WHY" (missing, elsewhere, unreadable) or
 * "DEST: WHY: a full save" (nothing unchanged, or too little to copy). While the write runs,
 * library lines come here: those are kept for the summary, and every line is still printed as
 * the library's own sink would print it when S3D_LOG asks for its level. Lines may come from
 * the library's threads. */
struct base_note {
    pthread_mutex_t mu;
    const char *base, *dst;
    char why_base[512], why_dst[512];
    int have_base, have_dst;
};
/* Static: a line logged while the callback is being removed may still arrive (log.h). */
static struct base_note note = {.mu = PTHREAD_MUTEX_INITIALIZER};

#define NOT_USED ": not used, a full save: "
#define FULL     ": a full save"

static void keep(char *out, size_t cap, int *have, const char *s, size_t len)
{
    if (!*have)
        snprintf(out, cap, "%.*s", (int)len, s);
    *have = 1;
}

static void on_log(void *user, int level, const char *line, size_t len)
{
    static const char *const names[] = {"off", "error", "warn", "info", "debug"};
    struct base_note *b = user;
    size_t bl = strlen(b->base), dl = strlen(b->dst), nl = strlen(NOT_USED), fl = strlen(FULL);

    pthread_mutex_lock(&b->mu);
    if (level == S3D_LOG_INFO && len > 5 + bl + nl && memcmp(line, "base ", 5) == 0 &&
        memcmp(line + 5, b->base, bl) == 0 && memcmp(line + 5 + bl, NOT_USED, nl) == 0)
        keep(b->why_base, sizeof(b->why_base), &b->have_base, line + 5 + bl + nl,
             len - 5 - bl - nl);
    else if (level == S3D_LOG_INFO && len > dl + 2 + fl && memcmp(line, b->dst, dl) == 0 &&
             memcmp(line + dl, ": ", 2) == 0 && memcmp(line + len - fl, FULL, fl) == 0)
        keep(b->why_dst, sizeof(b->why_dst), &b->have_dst, line + dl + 2, len - dl - 2 - fl);
    pthread_mutex_unlock(&b->mu);
    if (level <= s3d_log_env_level()) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        fprintf(stderr, "[s3direct %ld.%03ld %s] %.*s\n", (long)ts.tv_sec, ts.tv_nsec / 1000000,
                names[level < 0 || level > 4 ? 0 : level], (int)len, line);
    }
}

/* Why a save that succeeded sent everything, for the summary: what the library said of the
 * base itself; else, when no tensor matched, a base that stores no CRC-32C (not written by
 * s3direct, or copied by a plain cp), which the library only reports as nothing unchanged;
 * else what the library said of the save; else a copy refused. Called with note.mu held. */
static const char *why_not_used(struct s3d_client *c, const char *base,
                                const struct s3d_write_stats *st)
{
    struct s3d_tensor_info t = {.struct_size = sizeof(struct s3d_tensor_info)};
    struct s3d_reader *r = NULL;
    size_t i, n = 0, with_crc = 0;

    if (note.have_base)
        return note.why_base;
    if (st->tensors_reused == 0 && s3d_reader_open(c, base, &r) == 0) {
        n = s3d_reader_num_tensors(r);
        for (i = 0; i < n; i++)
            if (s3d_reader_tensor(r, i, &t) == 0 && t.has_crc32c)
                with_crc++;
        s3d_reader_close(r);
        if (n > 0 && with_crc == 0)
            return "it stores no CRC-32C per tensor (it was not written by s3direct, or was "
                   "copied by a plain cp)";
    }
    if (note.have_dst)
        return note.why_dst;
    if (st->copies_refused > 0)
        return "the server refused the copies";
    return "no tensor of it has the same name, dtype, shape and CRC-32C";
}

/* ---- the summary line ------------------------------------------------------------------- */

static void summary(const struct cli_opts *o, const char *verb, const char *src, const char *dst,
                    const struct s3d_write_stats *st, const char *why)
{
    char total[24], copied[24], sent[24];

    if (!cli_says(o))
        return;
    cli_human_size(st->bytes_total, total, sizeof(total));
    cli_human_size(st->bytes_copied, copied, sizeof(copied));
    cli_human_size(st->bytes_sent, sent, sizeof(sent));
    printf("%s: ", verb);
    cli_put_key(stdout, src);
    fputs(" to ", stdout);
    cli_put_key(stdout, dst);
    if (st->base_used) {
        printf(" (%s, %s copied from ", total, copied);
        cli_put_key(stdout, o->base);
        printf(", %s sent", sent);
        if (st->copies_refused > 0)
            printf(", %u copies refused by the server and sent instead", st->copies_refused);
        fputs(")\n", stdout);
    } else {
        printf(" (%s, all sent: the base ", total);
        cli_put_key(stdout, o->base);
        fputs(" was not used: ", stdout);
        cli_put_key(stdout, why);
        fputs(")\n", stdout);
    }
}

/* ---- the tensors' bytes ----------------------------------------------------------------- */

struct src_bytes {
    unsigned char *map; /* a local SOURCE mapped (munmap), or NULL */
    size_t map_len;
    unsigned char *buf; /* an s3:// SOURCE read into host memory (free), or NULL */
};

/* Maps the local file path, checked against the size its reader saw. Returns the base of the
 * tensors' offsets, or NULL after printing the error. */
static unsigned char *map_file(const char *path, uint64_t size, struct src_bytes *b)
{
    struct stat st;
    void *m;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0) {
        cli_error("cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != size) {
        cli_error("%s: not the regular file of %llu bytes just opened (changed while read?)", path,
                  (unsigned long long)size);
        close(fd);
        return NULL;
    }
    m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        cli_error("cannot map %s: %s", path, strerror(errno));
        return NULL;
    }
    madvise(m, (size_t)size, MADV_SEQUENTIAL);
    b->map = m;
    b->map_len = (size_t)size;
    return b->map;
}

/* Reads every tensor of r into one host buffer; sets ts[i].ptr. 0, or the exit status after
 * printing the error. */
static int read_all(const struct cli_opts *o, struct s3d_reader *r, struct s3d_tensor_src *ts,
                    size_t n, uint64_t total, const char *label, struct src_bytes *b)
{
    struct s3d_tensor_dest *dests = calloc(n ? n : 1, sizeof(*dests));
    struct s3d_read_options ro;
    struct cli_progress p;
    uint64_t at = 0;
    size_t i, nd = 0;
    int rc;

    b->buf = total < SIZE_MAX ? malloc(total ? (size_t)total : 1) : NULL;
    if (b->buf == NULL || dests == NULL) {
        free(dests);
        return cli_error("out of memory reading %llu bytes of tensors into host memory",
                         (unsigned long long)total);
    }
    for (i = 0; i < n; i++) {
        ts[i].ptr = b->buf + at;
        if (ts[i].nbytes == 0)
            continue;
        dests[nd].index = i;
        dests[nd].ptr = b->buf + at;
        dests[nd].device = -1;
        dests[nd].capacity = ts[i].nbytes;
        nd++;
        at += ts[i].nbytes;
    }
    memset(&ro, 0, sizeof(ro));
    ro.struct_size = sizeof(ro);
    cli_progress_init(&p, o, label);
    ro.progress = cli_progress_cb;
    ro.progress_user = &p;
    rc = nd > 0 ? s3d_reader_read(r, dests, nd, &ro) : 0;
    cli_progress_finish(&p, rc == 0);
    free(dests);
    return rc < 0 ? cli_fail(rc) : 0;
}

/* ---- cp --base -------------------------------------------------------------------------- */

/* DEST as the URI or path to write: a key or folder ending in '/' (or an existing local
 * folder) receives SOURCE's base name, as in a plain cp. 0, or the exit status. */
static int resolve_dest(const struct cli_opts *o, const char *src, const char *dst, char *out,
                        size_t cap)
{
    char db[CLI_BUCKET_CAP], dk[CLI_KEY_CAP];
    const char *name = cli_base_name(src);
    struct stat st;
    int n;

    if (cli_is_s3(dst)) {
        if (cli_split_uri(dst, db, dk) < 0)
            return CLI_EXIT_FAIL;
        if (dk[0] != '\0' && !cli_ends_with_slash(dk))
            name = "";
        n = snprintf(out, cap, "s3://%s/%s%s", db, dk, name);
        if (n < 0 || (size_t)n >= cap || strlen(dk) + strlen(name) >= CLI_KEY_CAP)
            return cli_error("key too long: %s%s", dst, name);
        return 0;
    }
    if (cli_ends_with_slash(dst) || (stat(dst, &st) == 0 && S_ISDIR(st.st_mode))) {
        if (cli_join(out, cap, dst, name) != 0)
            return CLI_EXIT_FAIL;
        /* "DIR/" names a folder, created if missing, as a plain cp's download does. */
        return o->dryrun ? 0 : cli_make_parents(out);
    }
    n = snprintf(out, cap, "%s", dst);
    if (n < 0 || (size_t)n >= cap)
        return cli_error("path too long: %s", dst);
    return 0;
}

/* The run, once the command line is known good and the client made. */
static int cp_base(struct cp_ctx *x, const char *src, const char *dst, const char *verb)
{
    const struct cli_opts *o = x->o;
    struct s3d_tensor_info ti = {.struct_size = sizeof(struct s3d_tensor_info)};
    struct s3d_write_stats st = {.struct_size = sizeof(struct s3d_write_stats)};
    struct s3d_write_options wo;
    struct s3d_reader *r = NULL;
    struct s3d_tensor_src *ts = NULL;
    struct s3d_metadata_entry *md = NULL;
    struct src_bytes b = {NULL, 0, NULL};
    struct cli_progress p;
    const unsigned char *data = NULL;
    const char *shard_uri, *k, *v;
    uint64_t hdr, obj, total = 0;
    size_t i, n, nm, nmd = 0;
    int rc, ret = CLI_EXIT_FAIL;

    rc = s3d_reader_open(x->c, src, &r);
    if (rc <= S3D_EFMT_HEADER_SIZE && rc >= S3D_EFMT_FIELD) {
        cli_error("%s is not a valid safetensors file: %s", src, s3d_last_error_message());
        goto out;
    }
    if (rc < 0) {
        ret = cli_fail(rc);
        goto out;
    }
    if (s3d_reader_num_shards(r) != 1) {
        cli_error("%s is a sharded checkpoint: --base copies one .safetensors file", src);
        goto out;
    }
    if ((rc = s3d_reader_shard(r, 0, &shard_uri, &hdr, &obj)) < 0) {
        ret = cli_fail(rc);
        goto out;
    }
    /* The reader checked that every tensor lies inside the obj bytes of the file. */
    if (!cli_is_s3(src) && (data = map_file(src, obj, &b)) == NULL)
        goto out;
    n = s3d_reader_num_tensors(r);
    nm = s3d_reader_num_metadata(r);
    ts = calloc(n ? n : 1, sizeof(*ts));
    md = calloc(nm ? nm : 1, sizeof(*md));
    if (ts == NULL || md == NULL) {
        cli_error("out of memory for the header of %s", src);
        goto out;
    }
    for (i = 0; i < n; i++) {
        if ((rc = s3d_reader_tensor(r, i, &ti)) < 0) {
            ret = cli_fail(rc);
            goto out;
        }
        ts[i].name = ti.name;
        ts[i].dtype = ti.dtype;
        ts[i].ndim = ti.ndim;
        ts[i].shape = ti.shape;
        ts[i].device = -1;
        ts[i].nbytes = ti.nbytes;
        if (data != NULL) /* a local file: the tensor where it lies in the map */
            ts[i].ptr = data + ti.offset;
        total += ti.nbytes;
    }
    /* The keys s3direct writes itself (its CRCs of SOURCE, when SOURCE came from s3direct)
     * are reserved: the write sets its own. */
    for (i = 0; i < nm; i++) {
        if ((rc = s3d_reader_metadata(r, i, &k, &v)) < 0) {
            ret = cli_fail(rc);
            goto out;
        }
        if (strncmp(k, RESERVED, strlen(RESERVED)) == 0)
            continue;
        md[nmd].key = k;
        md[nmd++].value = v;
    }
    if (data == NULL && (rc = read_all(o, r, ts, n, total, "read", &b)) != 0) {
        ret = rc; /* an s3:// SOURCE, not read */
        goto out;
    }

    memset(&wo, 0, sizeof(wo));
    wo.struct_size = sizeof(wo);
    cli_progress_init(&p, o, cli_base_name(dst));
    wo.progress = cli_progress_cb;
    wo.progress_user = &p;
    wo.base = o->base;
    wo.stats = &st;
    note.base = o->base;
    note.dst = dst;
    s3d_log_set_callback(on_log, &note, S3D_LOG_INFO);
    rc = s3d_checkpoint_write(x->c, dst, ts, n, md, nmd, &wo);
    s3d_log_set_callback(NULL, NULL, S3D_LOG_OFF);
    cli_progress_finish(&p, rc == 0);
    if (rc < 0) {
        ret = cli_fail(rc);
        goto out;
    }
    pthread_mutex_lock(&note.mu);
    summary(o, verb, src, dst, &st, st.base_used ? NULL : why_not_used(x->c, o->base, &st));
    pthread_mutex_unlock(&note.mu);
    ret = CLI_EXIT_OK;
out:
    if (b.map != NULL)
        munmap(b.map, b.map_len);
    free(b.buf);
    free(md);
    free(ts);
    s3d_reader_close(r);
    return ret;
}

int cli_cp_base(const struct cli_opts *o)
{
    const char *src = o->args[0], *dst = o->args[1];
    char sb[CLI_BUCKET_CAP], sk[CLI_KEY_CAP], out[PATH_MAX > URI_CAP ? PATH_MAX : URI_CAP];
    const char *verb;
    struct cp_ctx x = {o, NULL, NULL, 0};
    struct stat st;
    int rc;

    /* What the command line alone rules out: exit status 2. */
    if (o->recursive)
        return cli_usage_error("cp", "--base copies one safetensors file: not with --recursive");
    if (strcmp(src, "-") == 0 || strcmp(dst, "-") == 0)
        return cli_usage_error("cp", "--base needs a file or object as SOURCE and DEST, not - "
                                     "(standard input or output)");
    if (o->content_type != NULL)
        return cli_usage_error("cp", "--content-type does not apply to --base");
    if (ends_with(src, ".index.json"))
        return cli_usage_error("cp",
                               "%s is a sharded checkpoint's index: --base copies one "
                               ".safetensors file (copy each shard with --base, then the index "
                               "without)",
                               src);
    if (ends_with(dst, ".index.json"))
        return cli_usage_error("cp",
                               "%s names a sharded index: --base writes one .safetensors "
                               "file",
                               dst);
    if (cli_is_s3(src)) {
        if (cli_split_uri(src, sb, sk) < 0)
            return CLI_EXIT_FAIL;
        if (sk[0] == '\0' || cli_ends_with_slash(sk))
            return cli_error("%s names a prefix, not an object (--base copies one safetensors "
                             "file)",
                             src);
    } else if (stat(src, &st) == 0 && S_ISDIR(st.st_mode)) {
        return cli_error("%s is a folder (--base copies one safetensors file)", src);
    }
    if ((rc = resolve_dest(o, src, dst, out, sizeof(out))) != 0)
        return rc;
    if (!cli_is_s3(src) && cli_is_s3(out))
        verb = "upload";
    else if (cli_is_s3(src) && !cli_is_s3(out))
        verb = "download";
    else
        verb = "copy";
    if (o->dryrun) {
        if (cli_says(o)) {
            printf("(dryrun) %s: ", verb);
            cli_put_key(stdout, src);
            fputs(" to ", stdout);
            cli_put_key(stdout, out);
            fputs(" (base ", stdout);
            cli_put_key(stdout, o->base);
            fputs(")\n", stdout);
        }
        return 0;
    }
    if (cli_client(o, &x.c) < 0)
        return CLI_EXIT_FAIL;
    cli_install_sigint();
    rc = cp_base(&x, src, out, verb);
    s3d_client_free(x.c);
    return rc;
}
