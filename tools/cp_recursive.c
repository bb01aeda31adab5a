/* cp_recursive.c - many files at once: cp/mv --recursive and sync.
 *
 * Both sides are listed first into a table of relative paths (a local folder walked following
 * its links, as the AWS CLI does; an S3 prefix listed recursively), filtered
 * (--exclude/--include), sorted by path with "*.index.json" files last, and only then transferred
 * with the single-object calls of cmd_cp.c, up to CLI_FILES_AT_ONCE files at once on as many
 * threads (they share the client's request budget, so a folder of small files keeps many requests
 * in flight, and a large file still gets the level the path allows). Sorting first makes the start
 * order independent of the file system's; an index starts only after every other file is done, so
 * a reader that finds a Hugging Face index finds its shards. sync compares the two tables as
 * "aws s3 sync" does (size, then modification time; see sync_needed). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* ---- path helpers --------------------------------------------------------------------- */

const char *cli_base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

int cli_ends_with_slash(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && s[n - 1] == '/';
}

int cli_join(char *out, size_t cap, const char *dir, const char *name)
{
    int n =
        snprintf(out, cap, "%s%s%s", dir, (dir[0] && !cli_ends_with_slash(dir)) ? "/" : "", name);
    if (n < 0 || (size_t)n >= cap) {
        cli_error("path too long: %s/%s", dir, name);
        return -1;
    }
    return 0;
}

int cli_make_parents(const char *path)
{
    char buf[PATH_MAX];
    char *s;

    snprintf(buf, sizeof(buf), "%s", path);
    for (s = buf + 1; (s = strchr(s, '/')) != NULL; s++) {
        *s = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return cli_error("cannot create folder %s: %s", buf, strerror(errno));
        *s = '/';
    }
    return 0;
}

/* A key under the listed prefix, made relative, must stay inside the destination folder. */
static int safe_relative(const char *rel)
{
    const char *s = rel;

    if (rel[0] == '\0' || rel[0] == '/')
        return 0;
    while (*s) {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if ((n == 2 && s[0] == '.' && s[1] == '.') || (n == 1 && s[0] == '.') || n == 0)
            return 0;
        s += n + (e ? 1 : 0);
    }
    return 1;
}

/* key with a trailing '/' (unless empty) into out. */
static int folder_prefix(const char *key, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s%s", key, (key[0] && !cli_ends_with_slash(key)) ? "/" : "");
    if (n < 0 || (size_t)n >= cap)
        return cli_error("key too long: %s", key);
    return 0;
}

/* ---- the tables ----------------------------------------------------------------------- */

struct item {
    char *rel;
    uint64_t size;
    int64_t mtime; /* seconds since the epoch */
};

struct items {
    struct item *v;
    size_t n, cap;
    size_t skipped; /* local files left out with a warning (dangling link, FIFO, unreadable) */
};

static int items_add(struct items *t, const char *rel, uint64_t size, int64_t mtime)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        struct item *v = realloc(t->v, cap * sizeof(*v));
        if (v == NULL)
            return cli_error("out of memory listing files");
        t->v = v;
        t->cap = cap;
    }
    t->v[t->n].rel = strdup(rel);
    if (t->v[t->n].rel == NULL)
        return cli_error("out of memory listing files");
    t->v[t->n].size = size;
    t->v[t->n].mtime = mtime;
    t->n++;
    return 0;
}

static void items_free(struct items *t)
{
    size_t i;

    for (i = 0; i < t->n; i++)
        free(t->v[i].rel);
    free(t->v);
    memset(t, 0, sizeof(*t));
}

static int is_index(const char *rel)
{
    static const char suffix[] = ".index.json";
    size_t n = strlen(rel);
    return n >= sizeof(suffix) - 1 && strcmp(rel + n - (sizeof(suffix) - 1), suffix) == 0;
}

static int item_cmp(const void *a, const void *b)
{
    const struct item *x = a, *y = b;
    int ix = is_index(x->rel), iy = is_index(y->rel);
    if (ix != iy)
        return ix - iy;
    return strcmp(x->rel, y->rel);
}

static const struct item *items_find(const struct items *t, const char *rel)
{
    struct item key = {(char *)rel, 0, 0};
    if (t->n == 0) /* bsearch's base is nonnull: an empty list has no array */
        return NULL;
    return bsearch(&key, t->v, t->n, sizeof(*t->v), item_cmp);
}

/* The walk of one local folder. */
struct walk {
    const struct cli_opts *o;
    size_t root_len;
    struct items *out;
    char path[PATH_MAX]; /* the entry being looked at; the folders above it are its prefix */
};

/* One folder on the path from the root down to the folder being read, to tell a link that
 * names a folder above it (which would list the tree again and again). */
struct walk_up {
    dev_t dev;
    ino_t ino;
    const struct walk_up *up;
};

/* The AWS CLI's warning for a file it cannot copy; such a run ends with exit status 2. */
static void skip_warning(struct walk *w, const char *why)
{
    fputs("warning: Skipping file ", stderr);
    cli_put_key(stderr, w->path);
    fprintf(stderr, ". %s\n", why);
    w->out->skipped++;
}

static int walk_folder(struct walk *w, size_t len, const struct walk_up *up);

/* Looks at w->path (len bytes), one entry of a folder being walked. As the AWS CLI's file
 * generator: links (to files and to folders) are followed, unless --no-follow-symlinks, which
 * leaves every link out without a word; folders are always entered, the filters apply to
 * files; what cannot be read is skipped with a warning. 0, or an error status. */
static int walk_entry(struct walk *w, size_t len, const struct walk_up *up)
{
    struct stat st;
    const char *rel = w->path + w->root_len;
    const struct walk_up *a;

    while (*rel == '/')
        rel++;
    if (lstat(w->path, &st) != 0) {
        if (cli_filter_included(w->o, rel))
            skip_warning(w, "File/Directory is not readable.");
        return 0;
    }
    if (S_ISLNK(st.st_mode)) {
        if (w->o->no_follow_symlinks)
            return 0;
        if (stat(w->path, &st) != 0) {
            if (cli_filter_included(w->o, rel))
                skip_warning(w, "File does not exist.");
            return 0;
        }
    }
    if (S_ISDIR(st.st_mode)) {
        struct walk_up here = {st.st_dev, st.st_ino, up};
        for (a = up; a != NULL; a = a->up)
            if (a->dev == st.st_dev && a->ino == st.st_ino) {
                skip_warning(w, "File system loop: a link to a folder above it.");
                return 0;
            }
        return walk_folder(w, len, &here);
    }
    if (!cli_filter_included(w->o, rel))
        return 0;
    if (!S_ISREG(st.st_mode)) {
        skip_warning(w, "File is character special device, block special device, FIFO, or "
                        "socket.");
        return 0;
    }
    if (access(w->path, R_OK) != 0) {
        skip_warning(w, "File/Directory is not readable.");
        return 0;
    }
    return items_add(w->out, rel, (uint64_t)st.st_size, (int64_t)st.st_mtime);
}

/* Walks the folder w->path (len bytes; up is that folder itself). Its names are read and the
 * folder closed before any is looked at, so a deep tree holds no more than one open folder. */
static int walk_folder(struct walk *w, size_t len, const struct walk_up *up)
{
    DIR *d;
    struct dirent *e;
    char **names = NULL;
    size_t n = 0, cap = 0, i;
    int rc = 0;

    d = opendir(w->path);
    if (d == NULL && up->up == NULL) /* the root: never an empty list (sync --delete) */
        return cli_error("cannot read folder %s: %s", w->path, strerror(errno));
    if (d == NULL) {
        skip_warning(w, "File/Directory is not readable.");
        return 0;
    }
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (n == cap) {
            char **v = realloc(names, (cap = cap ? cap * 2 : 64) * sizeof(*v));
            if (v == NULL) {
                rc = cli_error("out of memory listing files");
                break;
            }
            names = v;
        }
        if ((names[n] = strdup(e->d_name)) == NULL) {
            rc = cli_error("out of memory listing files");
            break;
        }
        n++;
    }
    closedir(d);
    for (i = 0; i < n && rc == 0; i++) {
        size_t nlen = strlen(names[i]);
        int slash = len > 0 && w->path[len - 1] != '/';
        if (len + slash + nlen >= sizeof(w->path)) {
            w->path[len] = '\0';
            rc = cli_error("path too long: %s/%s", w->path, names[i]);
            break;
        }
        if (slash)
            w->path[len] = '/';
        memcpy(w->path + len + slash, names[i], nlen + 1);
        rc = walk_entry(w, len + slash + nlen, up);
    }
    w->path[len] = '\0';
    for (i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

/* Every regular file under root (filtered) into *out, sorted. Missing root: empty table when
 * missing_ok, else an error. The root itself is followed when it is a link, even with
 * --no-follow-symlinks (the AWS CLI would list nothing, and a sync --delete then empty DEST). */
static int list_local(const struct cli_opts *o, const char *root, int missing_ok, struct items *out)
{
    struct stat st;
    struct walk_up top;
    struct walk *w;
    int rc;

    memset(out, 0, sizeof(*out));
    if (stat(root, &st) != 0) {
        if (errno == ENOENT && missing_ok)
            return 0;
        return cli_error("cannot read %s: %s", root, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode))
        return cli_error("%s is not a folder", root);
    if (strlen(root) >= PATH_MAX)
        return cli_error("path too long: %s", root);
    if ((w = calloc(1, sizeof(*w))) == NULL)
        return cli_error("out of memory listing files");
    w->o = o;
    w->root_len = strlen(root);
    w->out = out;
    memcpy(w->path, root, w->root_len + 1);
    top.dev = st.st_dev;
    top.ino = st.st_ino;
    top.up = NULL;
    rc = walk_folder(w, w->root_len, &top);
    free(w);
    if (rc != 0) {
        items_free(out);
        return CLI_EXIT_FAIL;
    }
    if (out->n > 1) /* qsort's base is nonnull: an empty list has no array */
        qsort(out->v, out->n, sizeof(*out->v), item_cmp);
    return 0;
}

struct s3_walk {
    const struct cli_opts *o;
    size_t strip;
    struct items *out;
    int failed;
};

static int s3_cb(void *user, const struct s3d_list_entry *e)
{
    struct s3_walk *w = user;
    const char *rel = e->key + w->strip;

    if (strlen(e->key) <= w->strip || cli_ends_with_slash(e->key))
        return 0; /* the prefix itself, or a folder marker: nothing to copy */
    if (!cli_filter_included(w->o, rel))
        return 0;
    if (items_add(w->out, rel, e->size, e->last_modified) != 0) {
        w->failed = 1;
        return 1;
    }
    return 0;
}

/* Every object under bucket/prefix (prefix ends in '/' or is empty), filtered, sorted. */
static int list_s3(struct cp_ctx *x, const char *bucket, const char *prefix, struct items *out)
{
    struct s3_walk w = {x->o, strlen(prefix), out, 0};
    int rc;

    memset(out, 0, sizeof(*out));
    rc = s3d_list_objects(x->c, bucket, prefix, NULL, s3_cb, &w);
    if (rc < 0 || w.failed) {
        items_free(out);
        return rc < 0 ? cli_fail(rc) : CLI_EXIT_FAIL;
    }
    if (out->n > 1) /* qsort's base is nonnull: an empty list has no array */
        qsort(out->v, out->n, sizeof(*out->v), item_cmp);
    return 0;
}

/* ---- one side of a transfer ----------------------------------------------------------- */

/* A folder or a prefix: local path, or bucket + prefix (ending in '/' unless empty). */
struct side {
    int s3;
    const char *path; /* as given */
    char bucket[CLI_BUCKET_CAP];
    char prefix[CLI_KEY_CAP];
};

static int side_init(struct side *s, const char *arg)
{
    char key[CLI_KEY_CAP];

    memset(s, 0, sizeof(*s));
    s->path = arg;
    s->s3 = cli_is_s3(arg);
    if (!s->s3)
        return 0;
    if (cli_split_uri(arg, s->bucket, key) < 0 ||
        folder_prefix(key, s->prefix, sizeof(s->prefix)) != 0)
        return CLI_EXIT_FAIL;
    return 0;
}

static int side_list(struct cp_ctx *x, const struct side *s, int missing_ok, struct items *out)
{
    return s->s3 ? list_s3(x, s->bucket, s->prefix, out)
                 : list_local(x->o, s->path, missing_ok, out);
}

/* Transfers src/rel to dst/rel. */
static int transfer(struct cp_ctx *x, const struct side *src, const struct side *dst,
                    const char *rel, int64_t mtime)
{
    char spath[PATH_MAX], dpath[PATH_MAX], skey[CLI_KEY_CAP], dkey[CLI_KEY_CAP];
    int n, rc;

    if (src->s3) {
        n = snprintf(skey, sizeof(skey), "%s%s", src->prefix, rel);
        if (n < 0 || (size_t)n >= sizeof(skey))
            return cli_error("key too long: %s%s", src->prefix, rel);
    } else if (cli_join(spath, sizeof(spath), src->path, rel) != 0) {
        return CLI_EXIT_FAIL;
    }
    if (dst->s3) {
        n = snprintf(dkey, sizeof(dkey), "%s%s", dst->prefix, rel);
        if (n < 0 || (size_t)n >= sizeof(dkey))
            return cli_error("key too long: %s%s", dst->prefix, rel);
        rc = src->s3 ? cli_copy(x, src->bucket, skey, dst->bucket, dkey)
                     : cli_upload(x, spath, dst->bucket, dkey);
    } else {
        if (!safe_relative(rel))
            return cli_error("refusing key s3://%s/%s: it would be written outside %s", src->bucket,
                             skey, dst->path);
        if (cli_join(dpath, sizeof(dpath), dst->path, rel) != 0)
            return CLI_EXIT_FAIL;
        if (!x->o->dryrun && (rc = cli_make_parents(dpath)) != 0)
            return rc;
        rc = cli_download(x, src->bucket, skey, dpath);
        /* As the AWS CLI: a downloaded file takes the object's time, so that a later sync
         * sees the two as the same. */
        if (rc == 0 && !x->o->dryrun && mtime > 0) {
            struct timespec ts[2] = {{(time_t)mtime, 0}, {(time_t)mtime, 0}};
            if (utimensat(AT_FDCWD, dpath, ts, 0) != 0)
                return cli_error("cannot set the time of %s: %s", dpath, strerror(errno));
        }
    }
    if (rc == 0 && x->o->move) {
        char uri[CLI_BUCKET_CAP + CLI_KEY_CAP + 8];
        if (src->s3)
            snprintf(uri, sizeof(uri), "s3://%s/%s", src->bucket, skey);
        rc = cli_delete_source(x, src->s3 ? uri : spath);
    }
    return rc;
}

static int stop_status(int rc)
{
    if (cli_interrupted()) {
        if (rc == 0)
            cli_error("interrupted");
        return cli_interrupted_exit();
    }
    return rc;
}

/* ---- cp / mv --recursive -------------------------------------------------------------- */

/* Whether src must be copied over an existing dst, as "aws s3 sync" decides: sizes differ;
 * else (unless --size-only) for a download, the local file is newer than the object (or, with
 * --exact-timestamps, the times differ at all); for an upload or a copy, the source is newer
 * than the destination. */
static int sync_needed(const struct cli_opts *o, int download, const struct item *s,
                       const struct item *d)
{
    if (s->size != d->size)
        return 1;
    if (o->size_only)
        return 0;
    if (download)
        return o->exact_timestamps ? s->mtime != d->mtime : d->mtime > s->mtime;
    return s->mtime > d->mtime;
}

/* Files transferred at once by cp/mv --recursive and sync (as the AWS CLI, whose 10
 * requests in flight are spread over files). Each file transfer holds its own buffers, taken as
 * its requests need them: up to this many times one transfer's (staging_bytes). */
#define CLI_FILES_AT_ONCE 8

/* The transfers of one run, handed out to the workers in table order. */
struct run {
    const struct cp_ctx *x;
    const struct side *s, *d;
    const struct items *t;
    const size_t *todo; /* indices into t->v */
    size_t n_todo;
    atomic_size_t next;
    atomic_size_t failed;
    atomic_int fatal; /* the first status that stops the run (interrupted, usage), else 0 */
};

/* One transfer thread: its own context, so that the bytes its last transfer reported
 * (x.fed) are its own. */
struct worker {
    struct run *r;
    struct cp_ctx x;
};

/* Counts a file as done in the total: the bytes of its listing that its transfer did not
 * report (all of them when it failed before starting). */
static void file_done(struct cp_ctx *x, const struct item *it)
{
    if (x->total != NULL)
        cli_total_add(x->total, it->size > x->fed ? it->size - x->fed : 0, 1);
}

static void *run_worker(void *arg)
{
    struct worker *w = arg;
    struct run *r = w->r;
    while (!cli_interrupted() && atomic_load(&r->fatal) == 0) {
        size_t k = atomic_fetch_add(&r->next, 1);
        const struct item *it;
        int rc, none = 0;
        if (k >= r->n_todo)
            break;
        it = &r->t->v[r->todo[k]];
        w->x.fed = 0;
        rc = transfer(&w->x, r->s, r->d, it->rel, it->mtime);
        file_done(&w->x, it);
        if (rc != 0 && rc != CLI_EXIT_FAIL) {
            atomic_compare_exchange_strong(&r->fatal, &none, rc);
            break;
        }
        if (rc != 0)
            atomic_fetch_add(&r->failed, 1);
    }
    return NULL;
}

/* Runs r's transfers on up to CLI_FILES_AT_ONCE threads (one, in order, for --dryrun, whose
 * lines are the plan). Progress is the run's total line (r->x->total), never a bar per file:
 * several at once would overwrite each other. 0, or the status that stopped the run. */
static int run_parallel(struct run *r)
{
    pthread_t th[CLI_FILES_AT_ONCE];
    struct worker w[CLI_FILES_AT_ONCE];
    struct cli_opts no_bars;
    size_t n = r->n_todo < CLI_FILES_AT_ONCE ? r->n_todo : CLI_FILES_AT_ONCE, i, started = 0;

    no_bars = *r->x->o;
    no_bars.progress = 0;
    for (i = 0; i < CLI_FILES_AT_ONCE; i++) {
        w[i].r = r;
        w[i].x = *r->x;
        w[i].x.o = &no_bars;
    }
    if (r->x->o->dryrun || n <= 1) {
        run_worker(&w[0]);
        return atomic_load(&r->fatal);
    }
    for (i = 0; i < n; i++) {
        if (pthread_create(&th[i], NULL, run_worker, &w[i]) != 0)
            break; /* the threads already started do the rest */
        started++;
    }
    if (started == 0)
        run_worker(&w[0]);
    for (i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    return atomic_load(&r->fatal);
}

/* Runs the transfers of table t as aws s3 does: a failed file does not stop the others (exit
 * status 1 at the end), a skipped one gives 2. Every file but the indexes first, several at
 * once (run_parallel); then the indexes (*.index.json, sorted last), each only when nothing
 * failed or was skipped: it would name shards that are not there. A stop signal ends the run
 * at once. *copied is set to 1 when every file that was not skipped was copied (the run was
 * neither stopped nor failed anywhere). */
static int run_all(struct cp_ctx *x, const struct side *s, const struct side *d,
                   const struct items *t, const struct items *dt, int *copied)
{
    struct run r;
    struct cli_total total;
    struct cp_ctx xt = *x;
    size_t *todo, n_todo = 0, i, failed, files = 0;
    uint64_t bytes = 0;
    int rc;

    todo = t->n ? calloc(t->n, sizeof(*todo)) : NULL;
    if (t->n && todo == NULL)
        return cli_error("out of memory");
    for (i = 0; i < t->n; i++) {
        const struct item *o = dt ? items_find(dt, t->v[i].rel) : NULL;
        if (o != NULL && !sync_needed(x->o, !d->s3, &t->v[i], o))
            continue;
        files++; /* the total counts the indexes too */
        bytes += t->v[i].size;
        if (!is_index(t->v[i].rel))
            todo[n_todo++] = i;
    }
    cli_total_init(&total, x->o, bytes, files);
    xt.total = total.enabled ? &total : NULL;
    memset(&r, 0, sizeof(r));
    r.x = &xt;
    r.s = s;
    r.d = d;
    r.t = t;
    r.todo = todo;
    r.n_todo = n_todo;
    atomic_init(&r.next, 0);
    atomic_init(&r.failed, 0);
    atomic_init(&r.fatal, 0);
    rc = run_parallel(&r);
    free(todo);
    if (rc != 0)
        goto out; /* interrupted, or the command line was wrong */
    failed = atomic_load(&r.failed);
    for (i = 0; i < t->n && !cli_interrupted(); i++) {
        const struct item *o = dt ? items_find(dt, t->v[i].rel) : NULL;
        if (!is_index(t->v[i].rel))
            continue;
        if (o != NULL && !sync_needed(x->o, !d->s3, &t->v[i], o))
            continue;
        xt.fed = 0;
        if (failed > 0 || t->skipped > 0) {
            cli_error("not copying %s: %zu file%s before it failed or %s skipped", t->v[i].rel,
                      failed + t->skipped, failed + t->skipped == 1 ? "" : "s",
                      failed + t->skipped == 1 ? "was" : "were");
            file_done(&xt, &t->v[i]);
            failed++;
            continue;
        }
        rc = transfer(&xt, s, d, t->v[i].rel, t->v[i].mtime);
        file_done(&xt, &t->v[i]);
        if (rc != 0 && rc != CLI_EXIT_FAIL)
            goto out;
        if (rc != 0)
            failed++;
    }
    *copied = failed == 0 && !cli_interrupted();
    rc = failed ? CLI_EXIT_FAIL : t->skipped ? CLI_EXIT_USAGE : 0;
out:
    cli_total_finish(&total);
    return rc;
}

int cli_cp_recursive(struct cp_ctx *x, const char *src, const char *dst)
{
    struct side s, d;
    struct items t;
    int rc, copied = 0;

    if (strcmp(src, "-") == 0 || strcmp(dst, "-") == 0)
        return cli_usage_error(x->o->move ? "mv" : "cp",
                               "--recursive cannot read standard input or write standard "
                               "output");
    if (side_init(&s, src) != 0 || side_init(&d, dst) != 0)
        return CLI_EXIT_FAIL;
    if ((rc = side_list(x, &s, 0, &t)) != 0)
        return rc;
    rc = run_all(x, &s, &d, &t, NULL, &copied);
    items_free(&t);
    return stop_status(rc);
}

/* ---- sync ----------------------------------------------------------------------------- */

static int delete_extra(struct cp_ctx *x, const struct side *d, const char *rel)
{
    char path[PATH_MAX], key[CLI_KEY_CAP];
    int n, rc = 0;
    FILE *f = stdout;

    if (d->s3) {
        n = snprintf(key, sizeof(key), "%s%s", d->prefix, rel);
        if (n < 0 || (size_t)n >= sizeof(key))
            return cli_error("key too long: %s%s", d->prefix, rel);
        if (!x->o->dryrun && (rc = s3d_delete_object(x->c, d->bucket, key)) < 0)
            return cli_fail(rc);
        if (cli_says(x->o)) {
            fprintf(f, "%sdelete: s3://%s/", x->o->dryrun ? "(dryrun) " : "", d->bucket);
            cli_put_key(f, key);
            fputc('\n', f);
        }
        return 0;
    }
    if (cli_join(path, sizeof(path), d->path, rel) != 0)
        return CLI_EXIT_FAIL;
    if (!x->o->dryrun && unlink(path) != 0)
        return cli_error("cannot delete %s: %s", path, strerror(errno));
    if (cli_says(x->o)) {
        fprintf(f, "%sdelete: ", x->o->dryrun ? "(dryrun) " : "");
        cli_put_key(f, path);
        fputc('\n', f);
    }
    return 0;
}

int cli_sync(struct cp_ctx *x, const char *src, const char *dst)
{
    struct side s, d;
    struct items st, dt;
    size_t i;
    int rc, copied = 0;

    if (side_init(&s, src) != 0 || side_init(&d, dst) != 0)
        return CLI_EXIT_FAIL;
    if ((rc = side_list(x, &s, 0, &st)) != 0)
        return rc;
    if ((rc = side_list(x, &d, 1, &dt)) != 0) {
        items_free(&st);
        return rc;
    }
    rc = run_all(x, &s, &d, &st, &dt, &copied);
    /* --delete: what the destination has and the source does not (excluded paths are in
     * neither table, so they are kept). Only after every copy succeeded, so a sync that
     * failed or was stopped never leaves the destination with less than it had. Source
     * files skipped with a warning (a dangling link) do not stop it, as in aws s3 sync; the
     * exit status stays 2. */
    for (i = 0; x->o->delete_extra && copied && i < dt.n && (rc == 0 || rc == CLI_EXIT_USAGE) &&
                !cli_interrupted();
         i++)
        if (items_find(&st, dt.v[i].rel) == NULL) {
            int drc = delete_extra(x, &d, dt.v[i].rel);
            if (drc != 0)
                rc = drc;
        }
    if (rc == 0 && fflush(stdout) != 0)
        rc = cli_error("writing the output failed");
    items_free(&st);
    items_free(&dt);
    return stop_status(rc);
}
