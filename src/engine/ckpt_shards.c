/* ckpt_shards.c - the sharded save: NAME.safetensors.index.json and its shards, written so
 * that a reader always finds one whole checkpoint (docs/internals/checkpoint.md, "Shards").
 *
 * The protocol, for S3 and local folders alike:
 *   1. Draw a generation id (128 random bits) and, from it, the save's token (16 hex digits).
 *   2. Write every shard under a name of this save's own, NAME-TOKEN-0000K-of-0000N
 *      .safetensors, each atomically (ckpt_write.c). Nothing that the index in place, or a
 *      concurrent save, refers to is touched.
 *   3. Read the index in place (if any) and remember the shards it names. In a folder, steps 3
 *      and 4 hold an flock of the folder (lock_folder).
 *   4. Write the new index, atomically (one PutObject; a temporary file renamed over the
 *      path; on S3 conditional on the index read in step 3 being still in place, else the
 *      newer index is read, its shards become old ones, and the write is tried again:
 *      write_index_s3): the moment the new checkpoint replaces the old one, whole. This is
 *      the commit point: a cancel seen before it removes this save's shards (ECANCELED);
 *      the write itself is not cancelled, and a save past it reports success.
 *   5. Remove the shards that the old index named (step 3), then stale shards of saves that
 *      died (a name with a token that no index we saw names, older than the stale age) and,
 *      in a folder, the hidden temporary files of shards whose writer is gone (tmpfile.h's
 *      rule: no lock held). Last, if another save's index has replaced this one's already,
 *      remove this save's shards (remove_if_replaced).
 *
 * A crash before step 4 leaves the old index over its old shards, untouched; after it, the
 * new index over the new shards. Two saves started together each write their own shards,
 * and the index written last names only its own: the last writer wins, whole. A save removes
 * only the shards of an index it read before replacing it, so it never removes those of the
 * index that is in place after it (a later save's); the save whose index was replaced
 * removes its own. Step 5 cannot tell a dead save's shards from those of a save still
 * running, hence the age (S3D_STALE_SHARD_AGE seconds, a day by default): a save that runs
 * longer than that beside another save of the same index may lose its early shards. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/uio.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/compiler.h"
#include "common/dynbuf.h"
#include "common/env.h"
#include "common/error.h"
#include "common/log.h"
#include "engine/ckpt_common.h"
#include "engine/ckpt_delta.h"
#include "engine/ckpt_write.h"
#include "engine/client_impl.h"
#include "engine/conc.h"
#include "engine/fanout.h"
#include "engine/pool.h"
#include "engine/tmpfile.h"
#include "engine/xfer.h"
#include "format/index.h"
#include "format/safetensors.h"
#include "s3/retry.h"
#include "s3direct/object.h"

#define S3D_STALE_SHARD_AGE_DEFAULT (24 * 3600)
/* The most shards of one save uploaded at once. */
#define S3D_SHARD_THREADS_MAX 32

/* A growable list of strings (shard names). */
struct names {
    char **v;
    size_t n, cap;
};

static int names_push(struct names *l, const char *s, size_t len)
{
    char *d;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        char **v = s3d_reallocarray(l->v, cap, sizeof(*v));
        if (v == NULL)
            return s3d_fail(S3D_ENOMEM, "out of memory listing shards");
        l->v = v;
        l->cap = cap;
    }
    d = malloc(len + 1);
    if (d == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory listing shards");
    memcpy(d, s, len);
    d[len] = '\0';
    l->v[l->n++] = d;
    return 0;
}

static int names_has(const struct names *l, const char *s)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->v[i], s) == 0)
            return 1;
    return 0;
}

static void names_free(struct names *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof(*l));
}

/* Logs the calling thread's last error as a warning: cleanup after a save that succeeded
 * never fails it. */
static void warn_last(const char *what, const char *uri)
{
    struct s3d_error_info e;
    memset(&e, 0, sizeof(e));
    e.struct_size = sizeof(e);
    s3d_error_get(&e);
    S3D_WARN("%s: %s: %s", uri, what, e.message != NULL ? e.message : "");
}

/* A fresh id for one sharded save: 128 random bits as 32 hex digits, and the save's token:
 * the two 64-bit halves XORed, as 16 hex digits. Uniqueness is all that matters (it tells
 * this save's shards from another's), so if the kernel has no entropy to give, time, pid and
 * a counter stand in. */
static void new_generation(char gen[33], char token[S3D_ST_SHARD_TOKEN_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    static unsigned counter;
    uint8_t b[16];
    if (getrandom(b, sizeof(b), GRND_NONBLOCK) != (ssize_t)sizeof(b)) {
        struct timespec ts;
        uint64_t x[2];
        clock_gettime(CLOCK_REALTIME, &ts);
        x[0] = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
        x[1] = ((uint64_t)getpid() << 32) ^ __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
        memcpy(b, x, sizeof(b));
    }
    for (int i = 0; i < 16; i++) {
        gen[2 * i] = hex[b[i] >> 4];
        gen[2 * i + 1] = hex[b[i] & 0xF];
    }
    gen[32] = '\0';
    for (int i = 0; i < 8; i++) {
        uint8_t x = b[i] ^ b[i + 8];
        token[2 * i] = hex[x >> 4];
        token[2 * i + 1] = hex[x & 0xF];
    }
    token[S3D_ST_SHARD_TOKEN_LEN] = '\0';
}

/* The index at uri in place now: the shards it names, among the names s3direct (or Hugging
 * Face) gives the shards of this index (the old checkpoint's, removed once the new index is
 * in place), and, when gen is not NULL, its generation (malloc'ed; NULL when it has none).
 * Returns 1 when an index was read and parsed, else 0 (none, or one that cannot be read or
 * does not parse: no shards, so nothing is removed). When ip is not NULL it says what is in
 * place: nothing, an object read (with its ETag: a write over exactly it can be asked for,
 * write_index_s3), or something that could not be read. */
enum { IP_ABSENT, IP_READ, IP_UNKNOWN };
struct in_place {
    int state;
    char etag[80]; /* IP_READ, S3: as the server sent it */
};

static int index_in_place(struct s3d_client *c, const char *uri, struct names *out, char **gen,
                          struct in_place *ip)
{
    struct s3d_st_index ix = {0};
    struct s3d_loc loc;
    char *json = NULL;
    size_t len = 0;
    int rc;

    if (gen != NULL)
        *gen = NULL;
    if (ip != NULL) {
        ip->state = IP_UNKNOWN;
        ip->etag[0] = '\0';
    }
    if (s3d_loc_parse(uri, &loc) < 0)
        return 0;
    rc = s3d_ckpt_read_small(c, &loc, S3D_ST_INDEX_MAX, &json, &len, ip ? ip->etag : NULL);
    if (ip != NULL)
        ip->state = rc == 0                                    ? IP_READ
                    : rc == S3D_ENOSUCHKEY || rc == S3D_ENOENT ? IP_ABSENT
                                                               : IP_UNKNOWN;
    if (rc < 0) {
        if (rc != S3D_ENOSUCHKEY && rc != S3D_ENOENT)
            warn_last("the index in place could not be read; its shards are kept", uri);
        s3d_clear_error();
        return 0;
    }
    if (s3d_st_index_parse(json, len, 0, &ix) < 0) {
        warn_last("the index in place does not parse; its shards are kept", uri);
        s3d_clear_error();
        free(json);
        return 0;
    }
    rc = 1;
    for (size_t i = 0; i < ix.n_shards && rc; i++)
        if (s3d_st_shard_name_match(uri, ix.shards[i], strlen(ix.shards[i])) &&
            names_push(out, ix.shards[i], strlen(ix.shards[i])) < 0)
            rc = 0; /* a partial list: what it lacks is kept */
    if (rc && gen != NULL && ix.generation != NULL && (*gen = s3d_strdup(ix.generation)) == NULL)
        rc = 0;
    s3d_st_index_free(&ix);
    free(json);
    s3d_clear_error();
    return rc;
}

/* Removes the shards l names beside the index at uri (best effort: a failure is logged). */
static void remove_shards(struct s3d_client *c, const char *uri, const struct names *l)
{
    struct s3d_dynbuf path;
    const char **keys = NULL;
    char bucket[S3D_BUCKET_CAP] = "";
    size_t nkeys = 0;
    int is_s3 = strncmp(uri, "s3://", 5) == 0;

    if (l->n == 0)
        return;
    s3d_dynbuf_init(&path, 8192);
    if (is_s3 && (keys = s3d_calloc(l->n, sizeof(*keys))) == NULL) {
        warn_last("old shards kept", uri);
        goto out;
    }
    for (size_t i = 0; i < l->n; i++) {
        struct s3d_loc loc;
        if (s3d_st_shard_resolve(uri, l->v[i], &path) < 0 || s3d_loc_parse(path.data, &loc) < 0) {
            warn_last("an old shard is kept", uri);
            continue;
        }
        if (is_s3) {
            if (nkeys == 0)
                memcpy(bucket, loc.bucket, sizeof(bucket));
            keys[nkeys] = s3d_strdup(loc.key);
            if (keys[nkeys] != NULL)
                nkeys++;
        } else if (unlink(path.data) < 0 && errno != ENOENT) {
            S3D_WARN("%s: removing old shard %s: %s", uri, path.data, strerror(errno));
        } else {
            S3D_DEBUG("%s: removed old shard %s", uri, path.data);
        }
    }
    if (nkeys > 0 && s3d_delete_objects(c, bucket, keys, nkeys) < 0)
        warn_last("removing old shards", uri);
    else if (nkeys > 0)
        S3D_DEBUG("%s: removed %zu old shards", uri, nkeys);
out:
    for (size_t i = 0; i < nkeys; i++)
        free((void *)keys[i]);
    free(keys);
    s3d_dynbuf_free(&path);
    s3d_clear_error();
}

/* Seconds a shard with a token that no index names must be old before a save removes it. */
static int64_t stale_age(void)
{
    int64_t s;
    if (s3d_env_int("S3D_STALE_SHARD_AGE", 0, INT64_MAX, &s) == 1)
        return s;
    return S3D_STALE_SHARD_AGE_DEFAULT;
}

struct sweep {
    const char *uri;
    const struct names *keep;
    size_t dir_len; /* of the key's folder, '/' included */
    int64_t now, age;
    struct names *out;
};

/* A stale shard: a tokened name of this index that keep does not hold, old enough. */
static int is_stale(const struct sweep *s, const char *name, int64_t mtime)
{
    return s3d_st_shard_name_match(s->uri, name, strlen(name)) == 2 && !names_has(s->keep, name) &&
           s->now - mtime >= s->age;
}

static int sweep_s3_entry(void *user, const struct s3d_list_entry *e)
{
    struct sweep *s = user;
    const char *name = e->key + s->dir_len;
    if (e->is_prefix || strlen(e->key) <= s->dir_len)
        return 0;
    if (is_stale(s, name, e->last_modified) && names_push(s->out, name, strlen(name)) < 0)
        return 1;
    return 0;
}

/* s3d_tmpfile_match_fn: the temporary file of a shard of the index at user (a folder's).
 * A shortened name keeps only the head of its target's name: it is taken when that head
 * agrees with "NAME-", which every shard name of the index starts with. */
static int shard_tmp_match(void *user, const char *name, size_t len, int whole)
{
    const char *uri = user, *slash = strrchr(uri, '/');
    const char *base = slash != NULL ? slash + 1 : uri;
    size_t nl = strlen(base) - strlen(S3D_ST_INDEX_SUFFIX);
    if (whole)
        return s3d_st_shard_name_match(uri, name, len) != 0;
    return strncmp(name, base, S3D_MIN(len, nl)) == 0 && (len <= nl || name[nl] == '-');
}

/* Removes the shards of saves that died before their index (see the top). */
static void sweep_stale(struct s3d_client *c, const char *uri, const struct names *keep)
{
    struct names stale = {0};
    struct sweep s = {.uri = uri, .keep = keep, .out = &stale};
    struct s3d_loc loc;
    const char *base, *slash;

    if (s3d_loc_parse(uri, &loc) < 0)
        return;
    s.now = (int64_t)time(NULL);
    s.age = stale_age();
    slash = strrchr(uri, '/');
    base = slash != NULL ? slash + 1 : uri;
    if (loc.is_s3) {
        char prefix[S3D_KEY_CAP];
        const char *kslash = strrchr(loc.key, '/');
        s.dir_len = kslash != NULL ? (size_t)(kslash - loc.key) + 1 : 0;
        /* NAME- in the index's folder: what every shard name of this index starts with. */
        snprintf(prefix, sizeof(prefix), "%.*s%.*s-", (int)s.dir_len, loc.key,
                 (int)(strlen(base) - strlen(S3D_ST_INDEX_SUFFIX)), base);
        if (s3d_list_objects(c, loc.bucket, prefix, "/", sweep_s3_entry, &s) < 0)
            warn_last("listing shards for stale ones", uri);
    } else {
        char *dir = slash != NULL ? s3d_strndup(uri, (size_t)(slash - uri) + 1) : s3d_strdup(".");
        DIR *d = dir != NULL ? opendir(dir) : NULL;
        struct dirent *de;
        while (d != NULL && (de = readdir(d)) != NULL) {
            struct stat st;
            if (s3d_st_shard_name_match(uri, de->d_name, strlen(de->d_name)) != 2 ||
                fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
                continue;
            if (is_stale(&s, de->d_name, (int64_t)st.st_mtime) &&
                names_push(&stale, de->d_name, strlen(de->d_name)) < 0)
                break;
        }
        if (d != NULL)
            closedir(d);
        /* A save killed while writing a shard leaves the shard's hidden temporary file, which
         * no later save writes again (its name is that save's own), so no write's own sweep
         * (tmpfile.c) meets it: removed here once its writer is gone, by the same rule. */
        if (dir != NULL)
            (void)s3d_tmpfile_sweep_dir(dir, shard_tmp_match, (void *)uri);
        free(dir);
    }
    if (stale.n > 0)
        S3D_INFO("%s: removing %zu stale shards of saves that did not finish", uri, stale.n);
    remove_shards(c, uri, &stale);
    names_free(&stale);
    s3d_clear_error();
}

/* A save whose index another save replaced removes its own shards: no index names them
 * any more, and none will (only this save writes its index). The saves that replace an index
 * remove the shards it names (step 5), but one that read the index in place before this save
 * wrote its own does not know them: two saves started together both read the old index. Only
 * on proof: an index in place that parses, carries another generation and names none of
 * them; anything else (no index, an unreadable one) keeps them for the stale sweep. Called
 * last, after this save's own cleanup, so that a save that read the index before this one
 * wrote has most likely written its own by then; in a folder that order is certain (the
 * folder lock, lock_folder). */
static void remove_if_replaced(struct s3d_client *c, const char *uri, const char *generation,
                               const struct names *mine)
{
    struct names now = {0};
    char *gen = NULL;
    int theirs =
        index_in_place(c, uri, &now, &gen, NULL) && (gen == NULL || strcmp(gen, generation));
    for (size_t i = 0; theirs && i < mine->n; i++)
        if (names_has(&now, mine->v[i]))
            theirs = 0;
    if (theirs) {
        S3D_INFO("%s: another save replaced this save's index; removing its %zu shards", uri,
                 mine->n);
        remove_shards(c, uri, mine);
    }
    free(gen);
    names_free(&now);
}

/* In a folder, the read of the index in place and the write of the new index are done under
 * an flock of the folder, so that two saves there (threads or processes) do both in turn: the
 * later then reads the earlier's index and removes its shards as old. Without it, both may
 * read the same old index, and the shards of the one replaced first are named by nothing.
 * Returns the folder's descriptor (locked), or -1 for S3, or when the folder cannot be opened
 * or locked (a file system without flock): the save goes on unlocked and remove_if_replaced
 * covers most of it. */
static int lock_folder(const char *uri)
{
    const char *slash = strrchr(uri, '/');
    char *dir;
    int fd;
    if (strncmp(uri, "s3://", 5) == 0)
        return -1;
    dir = slash != NULL ? s3d_strndup(uri, slash == uri ? 1 : (size_t)(slash - uri))
                        : s3d_strdup(".");
    fd = dir != NULL ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    free(dir);
    if (fd >= 0) {
        int r;
        while ((r = flock(fd, LOCK_EX)) != 0 && errno == EINTR)
            ;
        if (r != 0) {
            S3D_DEBUG("%s: flock of the folder: %s; saving unlocked", uri, strerror(errno));
            close(fd);
            fd = -1;
        }
    }
    return fd;
}

static void unlock_folder(int *fd)
{
    if (*fd >= 0)
        close(*fd); /* drops the lock */
    *fd = -1;
}

/* ---- several shards at once (S3) ------------------------------------------------------ */

/* Shards of one save uploaded side by side (s3d_fanout_run), each job one shard. Their
 * requests all count against the client's one concurrency budget (conc.h), so more shards in
 * flight never means more requests than the engine's level (each transfer may always run
 * one: hence no more threads than the level). The user's progress callback keeps to the
 * calling thread (client.h): jobs only add up bytes; the fan-out's poll reports them there and
 * turns a non-zero answer, or the user's cancel token, into a cancel of every job.
 *
 * Locking: mu guards done_sum and the per-shard counts. */
struct par {
    struct s3d_client *c;
    struct s3d_device *dev;
    struct s3d_pool *pool;
    const char *const *uris; /* per shard */
    const struct s3d_tensor_src *t;
    const size_t *first;
    uint32_t nshards;
    const struct s3d_metadata_entry *meta;
    size_t n_meta;
    const char *generation;
    struct s3d_ckpt_base *base;
    struct s3d_write_options so; /* progress and cancel replaced (below) */
    struct s3d_cancel *cancel;   /* ours: set on the first failure, or the caller's cancel */
    const struct s3d_write_options *user;
    struct s3d_progress_acc *acc;

    pthread_mutex_t mu;
    uint64_t *done; /* per shard: data bytes written */
    uint64_t done_sum, told;
};

struct par_shard {
    struct par *p;
    uint32_t k;
};

static int par_progress(void *user, uint64_t done, uint64_t total)
{
    struct par_shard *ps = user;
    struct par *p = ps->p;
    (void)total;
    pthread_mutex_lock(&p->mu);
    if (done > p->done[ps->k]) {
        p->done_sum += done - p->done[ps->k];
        p->done[ps->k] = done;
    }
    pthread_mutex_unlock(&p->mu);
    return 0;
}

/* One shard (a fan-out job). */
static int par_job(void *ctx, size_t k)
{
    struct par *p = ctx;
    struct par_shard ps = {.p = p, .k = (uint32_t)k};
    struct s3d_write_options so = p->so;
    so.progress = par_progress;
    so.progress_user = &ps;
    so.cancel = p->cancel;
    return s3d_ckpt_write_one(p->c, p->dev, p->pool, p->uris[k], p->t + p->first[k],
                              p->first[k + 1] - p->first[k], p->meta, p->n_meta, p->generation,
                              p->base, &so);
}

/* On the calling thread: the user's cancel, and the bytes written so far to their progress
 * callback; nonzero stops the save. */
static int par_poll(void *ctx)
{
    struct par *p = ctx;
    const struct s3d_write_options *o = p->user;
    uint64_t d;
    if (o->cancel != NULL && s3d_cancel_requested(o->cancel))
        return 1;
    if (o->progress == NULL)
        return 0;
    pthread_mutex_lock(&p->mu);
    d = p->done_sum;
    pthread_mutex_unlock(&p->mu);
    if (d == p->told)
        return 0;
    p->told = d;
    return o->progress(o->progress_user, d, p->acc->total);
}

static void par_stop(void *ctx)
{
    s3d_cancel_request(((struct par *)ctx)->cancel);
}

/* How many shards to upload at once: no more than the shards, the client's concurrency
 * level, and, when device tensors are staged, what the pool holds for every shard's worst
 * case at once (a part held back and two in flight per shard, or one whole small object). */
static uint32_t par_threads(struct s3d_client *c, struct s3d_pool *pool, uint32_t nshards,
                            uint64_t max_shard)
{
    uint32_t k = S3D_MIN(nshards, (uint32_t)S3D_SHARD_THREADS_MAX);
    k = S3D_MIN(k, S3D_MAX(1u, s3d_conc_level(&c->conc)));
    if (pool != NULL) {
        uint64_t cs = s3d_pool_chunk_size(pool);
        uint64_t part = (c->part_size + cs - 1) / cs;
        uint64_t whole = (S3D_MIN(max_shard + (1u << 20), c->multipart_threshold) + cs - 1) / cs;
        uint64_t need = S3D_MAX(2 * part + 1, whole);
        k = (uint32_t)S3D_MIN((uint64_t)k, S3D_MAX(1u, s3d_pool_chunk_count(pool) / need));
    }
    return k;
}

/* Writes shards [0, nshards) to uris with nthreads workers; 0 or the first failing shard's
 * error. Progress (acc, the user's) is reported on this thread. */
static int par_write(struct par *p, uint32_t nthreads, const struct s3d_write_options *o,
                     struct s3d_progress_acc *acc)
{
    struct s3d_fanout f = {.n = p->nshards,
                           .threads = nthreads,
                           .job = par_job,
                           .poll = par_poll,
                           .stop = par_stop,
                           .ctx = p,
                           .what = "save"};
    int rc;

    p->user = o;
    p->acc = acc;
    p->done = s3d_calloc(p->nshards, sizeof(*p->done));
    if (p->done == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory for %u shards", p->nshards);
    rc = s3d_cancel_new(&p->cancel);
    if (rc == 0) {
        pthread_mutex_init(&p->mu, NULL);
        rc = s3d_fanout_run(&f);
        pthread_mutex_destroy(&p->mu);
    }
    /* The last count, which the polls may not have reported; a cancel here still stops the
     * save before its index. */
    if (rc == 0 && o->progress != NULL && o->progress(o->progress_user, p->done_sum, acc->total))
        rc = s3d_fail(S3D_ECANCELED, "save canceled");
    s3d_cancel_free(p->cancel);
    free(p->done);
    return rc;
}

uint32_t s3d_shard_partition(const struct s3d_tensor_src *t, size_t n, uint64_t max_bytes,
                             size_t *first, uint64_t *total)
{
    uint32_t k = 0;
    uint64_t acc = 0;
    *total = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || (acc > 0 && acc + t[i].nbytes > max_bytes)) {
            first[k++] = i;
            acc = 0;
        }
        acc += t[i].nbytes;
        *total += t[i].nbytes;
    }
    if (n == 0)
        first[k++] = 0;
    first[k] = n;
    return k;
}

/* One sharded save: what its steps share. */
struct sharded {
    struct s3d_client *c;
    struct s3d_device *dev;
    struct s3d_pool *pool;
    const char *uri;
    const struct s3d_tensor_src *t;
    size_t n;
    const struct s3d_metadata_entry *meta;
    size_t n_meta;
    struct s3d_ckpt_base *base;
    const struct s3d_write_options *o;
    size_t *first; /* shard k = tensors [first[k], first[k+1]) */
    uint32_t nshards;
    uint64_t total;
    const char **names, **shard_of; /* per tensor, for the index */
    struct names mine;              /* this save's shard names */
    char generation[33];
    struct s3d_progress_acc acc;
    struct s3d_write_options so; /* o with progress through acc */
    struct s3d_dynbuf path;
};

static void sharded_record(struct sharded *s, uint32_t k)
{
    for (size_t i = s->first[k]; i < s->first[k + 1]; i++) {
        s->names[i] = s->t[i].name;
        s->shard_of[i] = s->mine.v[k];
    }
}

/* The shards to S3 side by side, nthreads at once. */
static int shards_parallel(struct sharded *s, uint32_t nthreads)
{
    struct par p = {.c = s->c,
                    .dev = s->dev,
                    .pool = s->pool,
                    .t = s->t,
                    .first = s->first,
                    .nshards = s->nshards,
                    .meta = s->meta,
                    .n_meta = s->n_meta,
                    .generation = s->generation,
                    .base = s->base,
                    .so = *s->o};
    char **uris = s3d_calloc(s->nshards, sizeof(*uris));
    int rc = 0;
    if (uris == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory writing %s", s->uri);
    for (uint32_t k = 0; rc == 0 && k < s->nshards; k++) {
        rc = s3d_st_shard_resolve(s->uri, s->mine.v[k], &s->path);
        if (rc == 0 && (uris[k] = s3d_strdup(s->path.data)) == NULL)
            rc = s3d_fail(S3D_ENOMEM, "out of memory writing %s", s->uri);
    }
    if (rc == 0) {
        p.uris = (const char *const *)uris;
        S3D_DEBUG("%s: %u shards, %u at once", s->uri, s->nshards, nthreads);
        rc = par_write(&p, nthreads, s->o, &s->acc);
    }
    for (uint32_t k = 0; rc == 0 && k < s->nshards; k++)
        sharded_record(s, k);
    for (uint32_t k = 0; k < s->nshards; k++)
        free(uris[k]);
    free(uris);
    return rc;
}

/* The shards one after the other (files, one shard, or a level of one). */
static int shards_in_turn(struct sharded *s)
{
    for (uint32_t k = 0; k < s->nshards; k++) {
        size_t cnt = s->first[k + 1] - s->first[k];
        int rc = s3d_st_shard_resolve(s->uri, s->mine.v[k], &s->path);
        if (rc == 0)
            rc = s3d_ckpt_write_one(s->c, s->dev, s->pool, s->path.data, s->t + s->first[k], cnt,
                                    s->meta, s->n_meta, s->generation, s->base, &s->so);
        if (rc < 0)
            return rc;
        sharded_record(s, k);
        for (size_t i = s->first[k]; i < s->first[k + 1]; i++)
            s->acc.base += s->t[i].nbytes;
    }
    return 0;
}

/* The calling thread's last error is a server saying it does not do conditional writes: 501 or
 * NotImplemented (a server that ignores the headers just writes). */
static int condition_refused(void)
{
    struct s3d_error_info e;
    memset(&e, 0, sizeof(e));
    e.struct_size = sizeof(e);
    s3d_error_get(&e);
    return s3d_retry_is_not_implemented(e.http_status, e.s3_code);
}

/* S3: the index written over exactly the one read (If-Match its ETag; If-None-Match: * when
 * there was none), so that no save's index is replaced unseen. Two saves that read the same
 * index in place cannot both replace it: the later write meets 412, reads the index now in
 * place (the other save's), takes its shards as old ones (removed once this index is in
 * place) and writes again over it. So every index replaced is replaced by a save that read
 * it, and its shards are removed; before, a save whose index another save replaced while
 * both ran kept its shards until the stale sweep whenever its own check (remove_if_replaced)
 * came before the other's write (1 of 8 rounds in a CI run).
 *
 * 412 has three other causes, told apart by what is in place after it: this save's own
 * index (an attempt that landed unanswered, then retried: done); the same index still
 * (Ceph RGW 16 compares If-Match on PUT without the quotes an ETag is sent with: the bare
 * ETag is sent, and the client remembers it; a second refusal means the server cannot do
 * this, and the write goes plain, as after a 501);
 * nothing readable (plain). A plain write is the save's old behaviour, remove_if_replaced the
 * cover. A cancel seen between tries still removes this save's shards (*before_commit). */
static int write_index_s3(struct sharded *s, const struct s3d_dynbuf *index, struct names *old,
                          struct in_place *ip, int *before_commit)
{
    struct s3d_loc loc;
    struct iovec iov = {.iov_base = index->data, .iov_len = index->len};
    char bare[80];
    int rc, plain = 0, unquoted = atomic_load(&s->c->put_if_match_bare);

    rc = s3d_loc_parse(s->uri, &loc);
    for (int tries = 0; rc == 0; tries++) {
        struct s3d_put_options po;
        struct in_place now;
        struct names theirs = {0};
        char *gen = NULL;
        size_t n;
        int same, mine = 0;

        if (s->o->cancel != NULL && s3d_cancel_requested(s->o->cancel))
            return s3d_fail(S3D_ECANCELED, "save of %s canceled before its index", s->uri);
        memset(&po, 0, sizeof(po));
        po.content_type = "application/json";
        if (!plain && ip->state == IP_ABSENT)
            po.if_none_match = 1;
        if (!plain && ip->state == IP_READ) {
            n = strlen(ip->etag);
            if (unquoted && n >= 2 && ip->etag[0] == '"' && ip->etag[n - 1] == '"')
                snprintf(bare, sizeof(bare), "%.*s", (int)(n - 2), ip->etag + 1);
            else
                snprintf(bare, sizeof(bare), "%s", ip->etag);
            po.if_match = bare;
        }
        *before_commit = 0;
        rc = s3d_xfer_put_single(s->c, loc.bucket, loc.key, &iov, 1, &po);
        if (rc < 0 && rc != S3D_ECHANGED && (po.if_match != NULL || po.if_none_match) &&
            condition_refused()) {
            S3D_DEBUG("%s: the server refuses conditional PutObject; the index is written "
                      "without a condition",
                      s->uri);
            s3d_clear_error();
            plain = 1;
            *before_commit = 1;
            rc = 0;
            continue;
        }
        if (rc != S3D_ECHANGED || (po.if_match == NULL && !po.if_none_match))
            return rc;
        s3d_clear_error();
        index_in_place(s->c, s->uri, &theirs, &gen, &now);
        same = now.state == IP_READ && ip->state == IP_READ && strcmp(now.etag, ip->etag) == 0;
        if (now.state == IP_READ && gen != NULL && strcmp(gen, s->generation) == 0) {
            mine = 1; /* this save's own index: an attempt landed unanswered */
        } else if (now.state == IP_UNKNOWN || tries >= 16 || (same && unquoted)) {
            S3D_DEBUG("%s: the index is written without a condition (%s)", s->uri,
                      now.state == IP_UNKNOWN ? "what is in place cannot be read"
                      : tries >= 16           ? "16 other saves came first"
                                              : "the server refuses If-Match on PutObject");
            plain = 1;
        } else if (same) {
            unquoted = 1; /* the same index refused: try the bare ETag (and so from now on) */
            atomic_store(&s->c->put_if_match_bare, 1);
        } else {
            S3D_INFO("%s: another save's index came in place after this save read the index; "
                     "writing over that one instead",
                     s->uri);
            for (size_t i = 0; i < theirs.n; i++)
                if (!names_has(old, theirs.v[i]) &&
                    names_push(old, theirs.v[i], strlen(theirs.v[i])) < 0)
                    break; /* a partial list: what it lacks is kept (the stale sweep's) */
            *ip = now;
        }
        free(gen);
        names_free(&theirs);
        if (mine)
            return 0;
        s3d_clear_error();
        rc = 0;
        *before_commit = 1;
    }
    return rc;
}

/* The index replaces the old checkpoint's, whole; then the old shards go. 1: failed before
 * the commit point (this save's shards are to be removed); 0 or < 0 past it. */
static int index_swap(struct sharded *s, int *before_commit)
{
    struct s3d_dynbuf index;
    struct s3d_write_options so = *s->o;
    struct names old = {0};
    struct in_place ip;
    int rc, folder_fd = -1;

    *before_commit = 1;
    s3d_dynbuf_init(&index, S3D_ST_INDEX_MAX);
    rc = s3d_st_index_build(s->names, s->shard_of, s->n, s->total, s->generation, &index);
    if (rc < 0)
        goto out;
    folder_fd = lock_folder(s->uri);
    index_in_place(s->c, s->uri, &old, NULL, &ip);
    /* The commit point. A cancel up to here removes this save's shards. The index write
     * itself is not cancelled: stopped midway, a PutObject may still land on the server
     * unanswered, and the save could then report neither outcome truly. A failure of it
     * leaves this save's shards (the index may have reached the server although the answer
     * did not: they are not removed); a later save sweeps them when stale. */
    if (strncmp(s->uri, "s3://", 5) == 0) {
        rc = write_index_s3(s, &index, &old, &ip, before_commit);
        if (rc < 0)
            goto out;
    } else {
        if (s->o->cancel != NULL && s3d_cancel_requested(s->o->cancel)) {
            rc = s3d_fail(S3D_ECANCELED, "save of %s canceled before its index", s->uri);
            goto out;
        }
        *before_commit = 0;
        so.cancel = NULL;
        rc = s3d_ckpt_write_small(s->c, s->dev, s->uri, index.data, index.len, &so);
    }
    unlock_folder(&folder_fd);
    if (rc < 0)
        goto out;
    S3D_DELTA_ADD(&s->base->bytes_total, (uint64_t)index.len);
    S3D_DELTA_ADD(&s->base->bytes_sent, (uint64_t)index.len);
    for (size_t i = 0; i < old.n;) {
        if (names_has(&s->mine, old.v[i])) { /* cannot be (the token is new); never remove it */
            free(old.v[i]);
            old.v[i] = old.v[--old.n];
        } else {
            i++;
        }
    }
    remove_shards(s->c, s->uri, &old);
    sweep_stale(s->c, s->uri, &s->mine);
    remove_if_replaced(s->c, s->uri, s->generation, &s->mine);
out:
    unlock_folder(&folder_fd);
    names_free(&old);
    s3d_dynbuf_free(&index);
    return rc;
}

/* After a failure (rc) before the commit point: no index names this save's shards; those
 * written are removed, and rc comes back with its error detail kept. */
static int remove_own_shards(struct sharded *s, int rc)
{
    struct s3d_err_record *err = malloc(sizeof(*err));
    if (err != NULL)
        s3d_err_save(err, rc);
    remove_shards(s->c, s->uri, &s->mine);
    if (err != NULL)
        rc = s3d_err_restore(err);
    free(err);
    return rc;
}

int s3d_ckpt_write_sharded(struct s3d_client *c, struct s3d_device *dev, struct s3d_pool *pool,
                           const char *uri, const struct s3d_tensor_src *t, size_t n,
                           const struct s3d_metadata_entry *meta, size_t n_meta,
                           struct s3d_ckpt_base *base, const struct s3d_write_options *o)
{
    struct sharded s = {.c = c,
                        .dev = dev,
                        .pool = pool,
                        .uri = uri,
                        .t = t,
                        .n = n,
                        .meta = meta,
                        .n_meta = n_meta,
                        .base = base,
                        .o = o,
                        .acc = {.fn = o->progress, .user = o->progress_user}};
    struct s3d_dynbuf name;
    char token[S3D_ST_SHARD_TOKEN_LEN + 1];
    uint32_t nthreads = 0;
    int rc = 0, before_commit = 1;

    new_generation(s.generation, token);
    s3d_dynbuf_init(&name, 4096);
    s3d_dynbuf_init(&s.path, 8192);
    s.first = s3d_calloc(n + 1, sizeof(*s.first));
    s.names = s3d_calloc(n, sizeof(*s.names));
    s.shard_of = s3d_calloc(n, sizeof(*s.shard_of));
    if (s.first == NULL || s.names == NULL || s.shard_of == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "out of memory writing %s", uri);
        goto out;
    }
    s.nshards = s3d_shard_partition(t, n, o->max_shard_size, s.first, &s.total);
    for (uint32_t k = 0; rc == 0 && k < s.nshards; k++) {
        rc = s3d_st_shard_name_tok(uri, token, k + 1, s.nshards, &name);
        if (rc == 0)
            rc = names_push(&s.mine, name.data, name.len);
    }
    if (rc < 0)
        goto out;
    s.acc.total = s.total;
    s.so = *o;
    s.so.progress = o->progress ? s3d_progress_acc_cb : NULL;
    s.so.progress_user = &s.acc;
    if (strncmp(uri, "s3://", 5) == 0 && s.nshards > 1 &&
        (nthreads = par_threads(c, pool, s.nshards, o->max_shard_size)) > 1)
        rc = shards_parallel(&s, nthreads);
    else
        rc = shards_in_turn(&s);
    if (rc == 0)
        rc = index_swap(&s, &before_commit);
    if (rc < 0 && before_commit)
        rc = remove_own_shards(&s, rc);
out:
    names_free(&s.mine);
    free(s.first);
    free(s.names);
    free(s.shard_of);
    s3d_dynbuf_free(&name);
    s3d_dynbuf_free(&s.path);
    return rc;
}
