/* ckpt_open.c - opening a checkpoint (headers only) and the queries on an open reader.
 *
 * Open: for each object, one ranged GET of the first S3D_HEADER_PROBE bytes (its
 * Content-Range gives the object size, which bounds every offset in the header; its ETag pins
 * the version every later read asks for), and a second GET only when the header is longer. Local
 * files: open once, fstat + pread, and the descriptor kept for the data reads (ckpt_read.c):
 * a file replaced or removed after the open is still read whole, never mixed with its
 * replacement. A sharded checkpoint reads its index first, then each shard's header; the
 * headers of shards in S3 are fetched by up to S3D_OPEN_THREADS threads at once (each a
 * request that waits a round trip: 32 shards one after the other cost 32 round trips before
 * the first tensor byte moves), and the error of the first failing shard in index order is
 * the one reported.
 * Everything is validated by src/format before any offset is used. Reading the tensors is
 * ckpt_read.c. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/compiler.h"
#include "common/dynbuf.h"
#include "common/error.h"
#include "common/fdio.h"
#include "common/opts.h"
#include "engine/ckpt_common.h"
#include "engine/ckpt_reader.h"
#include "engine/client_impl.h"
#include "engine/fanout.h"
#include "engine/xfer.h"
#include "format/index.h"
#include "format/safetensors.h"
#include "s3direct/checkpoint.h"
#include "s3direct/object.h"

/* First GET of a header: most headers fit, so opening costs one HEAD and one GET. */
#define S3D_HEADER_PROBE (256u << 10)

/* ---- opening --------------------------------------------------------------------------- */

/* Reads [off, off + len) of a local file into buf; S3D_EFMT_TRUNCATED if it ends early. */
static int file_pread_all(int fd, const char *path, void *buf, uint64_t len, uint64_t off)
{
    uint64_t done;
    int rc = s3d_pread_full(fd, buf, len, off, &done);
    if (rc < 0)
        return s3d_fail(s3d_err_from_errno(-rc), "read %s at offset %llu: %s", path,
                        (unsigned long long)(off + done), strerror(-rc));
    if (done < len)
        return s3d_fail(S3D_EFMT_TRUNCATED, "%s: ends at offset %llu, expected %llu bytes", path,
                        (unsigned long long)(off + done), (unsigned long long)(off + len));
    return 0;
}

int s3d_ckpt_read_small(struct s3d_client *c, const struct s3d_loc *loc, size_t cap, char **out,
                        size_t *out_len, char *etag)
{
    struct s3d_object_info info;
    uint64_t size, got = 0;
    char *buf = NULL, *bigger;
    int rc, fd = -1;

    *out = NULL;
    if (etag != NULL)
        etag[0] = '\0';
    if (loc->is_s3) {
        /* One GET usually has it all; its Content-Range gives the size and the ETag pins the
         * rest. */
        buf = malloc(S3D_HEADER_PROBE + 1);
        if (buf == NULL)
            return s3d_fail(S3D_ENOMEM, "out of memory reading %s", loc->path);
        rc = s3d_xfer_get_first(c, loc->bucket, loc->key, 0, S3D_HEADER_PROBE, buf, &got, &info,
                                NULL, NULL, NULL);
        if (rc < 0)
            goto fail;
        size = info.size;
    } else {
        struct stat st;
        fd = open(loc->path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || fstat(fd, &st) < 0) {
            rc = s3d_fail(s3d_err_from_errno(errno), "open %s: %s", loc->path, strerror(errno));
            goto fail;
        }
        size = (uint64_t)st.st_size;
    }
    if (size > cap) {
        rc = s3d_fail(S3D_EFMT_INDEX, "%s: %llu bytes, over the %zu-byte cap for an index",
                      loc->path, (unsigned long long)size, cap);
        goto fail;
    }
    bigger = realloc(buf, size + 1);
    if (bigger == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "out of memory reading %s", loc->path);
        goto fail;
    }
    buf = bigger;
    if (size > got) {
        if (loc->is_s3)
            rc = s3d_xfer_get_buffer(c, loc->bucket, loc->key, info.etag, info.size, got,
                                     size - got, buf + got);
        else
            rc = file_pread_all(fd, loc->path, buf, size, 0);
        if (rc < 0)
            goto fail;
    }
    buf[size] = '\0';
    if (fd >= 0)
        close(fd);
    *out = buf;
    *out_len = (size_t)size;
    if (etag != NULL && loc->is_s3)
        snprintf(etag, 80, "%s", info.etag);
    return 0;
fail:
    free(buf);
    if (fd >= 0)
        close(fd);
    return rc;
}

/* Reads and validates the header of one safetensors object or file. */
static int open_shard(struct s3d_client *c, struct shard *sh)
{
    uint8_t *buf = NULL;
    uint64_t json_len, probe, got = 0;
    int rc, fd = -1;

    if (sh->loc.is_s3) {
        /* One GET of the first bytes: its Content-Range gives the size, its ETag pins the
         * version for every later read, and a refusal names its S3 code. */
        struct s3d_object_info info;
        buf = malloc(S3D_HEADER_PROBE);
        if (buf == NULL)
            return s3d_fail(S3D_ENOMEM, "out of memory reading the header of %s", sh->uri);
        rc = s3d_xfer_get_first(c, sh->loc.bucket, sh->loc.key, 0, S3D_HEADER_PROBE, buf, &got,
                                &info, NULL, NULL, NULL);
        if (rc < 0)
            goto fail;
        sh->object_size = info.size;
        snprintf(sh->etag, sizeof(sh->etag), "%s", info.etag);
        snprintf(sh->version, sizeof(sh->version), "etag:%s", info.etag);
    } else {
        struct stat st;
        fd = open(sh->loc.path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || fstat(fd, &st) < 0) {
            rc = s3d_fail(s3d_err_from_errno(errno), "open %s: %s", sh->loc.path, strerror(errno));
            goto fail;
        }
        if (!S_ISREG(st.st_mode)) {
            rc = s3d_fail(S3D_EINVAL, "%s: not a regular file", sh->loc.path);
            goto fail;
        }
        sh->object_size = (uint64_t)st.st_size;
        sh->fd = fd; /* kept: the data is read from this file, not from the path again */
        /* No st_dev: one file on a shared filesystem has another device number on each node;
         * its inode number and times are the server's. A rename over the path gives another
         * inode, a write in place another mtime. */
        snprintf(sh->version, sizeof(sh->version), "file:%llu:%llu:%lld.%09ld",
                 (unsigned long long)st.st_ino, (unsigned long long)st.st_size,
                 (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec);
    }
    if (sh->object_size < 8) {
        rc = s3d_fail(S3D_EFMT_HEADER_SIZE,
                      "%s: %llu bytes, too short for a safetensors header (8-byte length)", sh->uri,
                      (unsigned long long)sh->object_size);
        goto fail;
    }
    probe = S3D_MIN(sh->object_size, (uint64_t)S3D_HEADER_PROBE);
    if (!sh->loc.is_s3) {
        buf = malloc(probe);
        if (buf == NULL) {
            rc = s3d_fail(S3D_ENOMEM, "out of memory reading the header of %s", sh->uri);
            goto fail;
        }
        rc = file_pread_all(fd, sh->loc.path, buf, probe, 0);
        if (rc < 0)
            goto fail;
    } else if (got != probe) {
        rc = s3d_fail(S3D_EPROTO, "%s: %llu bytes received of the first %llu", sh->uri,
                      (unsigned long long)got, (unsigned long long)probe);
        goto fail;
    }
    rc = s3d_st_header_len(buf, sh->object_size, &json_len);
    if (rc < 0) {
        s3d_fail_prefix(rc, "%s", sh->uri);
        goto fail;
    }
    sh->header_bytes = 8 + json_len;
    if (sh->header_bytes > probe) {
        /* The length was checked against the cap and the object size: safe to allocate. */
        uint8_t *bigger = realloc(buf, sh->header_bytes);
        if (bigger == NULL) {
            rc = s3d_fail(S3D_ENOMEM, "out of memory for the %llu-byte header of %s",
                          (unsigned long long)sh->header_bytes, sh->uri);
            goto fail;
        }
        buf = bigger;
        if (sh->loc.is_s3)
            rc = s3d_xfer_get_buffer(c, sh->loc.bucket, sh->loc.key, sh->etag, sh->object_size,
                                     probe, sh->header_bytes - probe, buf + probe);
        else
            rc = file_pread_all(fd, sh->loc.path, buf + probe, sh->header_bytes - probe, probe);
        if (rc < 0)
            goto fail;
    }
    rc = s3d_st_parse((const char *)buf + 8, json_len, sh->object_size, &sh->hdr);
    if (rc < 0) {
        s3d_fail_prefix(rc, "%s", sh->uri);
        goto fail;
    }
    rc = 0;
fail:
    free(buf);
    if (rc < 0 && fd >= 0) {
        close(fd);
        sh->fd = -1;
    }
    return rc;
}

/* Shard headers fetched at once when a sharded checkpoint in S3 is opened. */
#define S3D_OPEN_THREADS 16

struct open_all {
    struct s3d_client *c;
    struct shard *shards;
};

static int open_job(void *ctx, size_t i)
{
    struct open_all *a = ctx;
    return open_shard(a->c, &a->shards[i]);
}

/* Opens shards[0..n): in S3 on up to S3D_OPEN_THREADS threads, local files here. On failure
 * the calling thread's error is that of the first failing shard in index order. */
static int open_shards(struct s3d_client *c, struct shard *shards, size_t n)
{
    struct open_all a = {.c = c, .shards = shards};
    struct s3d_fanout f = {.n = n,
                           .threads = n > 0 && shards[0].loc.is_s3 ? S3D_OPEN_THREADS : 1,
                           .job = open_job,
                           .ctx = &a,
                           .what = "open"};
    return s3d_fanout_run(&f);
}

static int add_shard(struct s3d_reader *r, const char *uri)
{
    struct shard *sh;
    struct shard *grown = s3d_reallocarray(r->shards, r->n_shards + 1, sizeof(*r->shards));
    if (grown == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory opening %s", uri);
    r->shards = grown;
    sh = &r->shards[r->n_shards];
    memset(sh, 0, sizeof(*sh));
    sh->fd = -1;
    sh->uri = s3d_strdup(uri);
    if (sh->uri == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory opening %s", uri);
    r->n_shards++;
    return s3d_loc_parse(sh->uri, &sh->loc);
}

static int by_name_cmp(const void *a, const void *b, void *reader)
{
    const struct s3d_st_tensor *x = tref_tensor(reader, *(const uint32_t *)a);
    const struct s3d_st_tensor *y = tref_tensor(reader, *(const uint32_t *)b);
    return strcmp(x->name, y->name);
}

/* Lists every tensor of every shard and the name index; a name in two shards is an error. */
static int index_tensors(struct s3d_reader *r)
{
    size_t n = 0, k = 0;
    for (size_t s = 0; s < r->n_shards; s++)
        n += r->shards[s].hdr.n_tensors;
    if (n > UINT32_MAX)
        return s3d_fail(S3D_ETOOBIG, "%zu tensors: too many", n);
    r->tensors = s3d_calloc(n, sizeof(*r->tensors));
    r->by_name = s3d_calloc(n, sizeof(*r->by_name));
    if (r->tensors == NULL || r->by_name == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory listing %zu tensors", n);
    for (size_t s = 0; s < r->n_shards; s++)
        for (size_t t = 0; t < r->shards[s].hdr.n_tensors; t++) {
            r->tensors[k].shard = (uint32_t)s;
            r->tensors[k].tensor = (uint32_t)t;
            r->by_name[k] = (uint32_t)k;
            k++;
        }
    r->n_tensors = n;
    qsort_r(r->by_name, n, sizeof(*r->by_name), by_name_cmp, r);
    for (size_t i = 1; i < n; i++) {
        const struct s3d_st_tensor *a = tref_tensor(r, r->by_name[i - 1]);
        const struct s3d_st_tensor *b = tref_tensor(r, r->by_name[i]);
        if (strcmp(a->name, b->name) == 0)
            return s3d_fail(S3D_EFMT_DUPLICATE, "tensor '%s' is in both %s and %s", a->name,
                            r->shards[r->tensors[r->by_name[i - 1]].shard].uri,
                            r->shards[r->tensors[r->by_name[i]].shard].uri);
    }
    return 0;
}

/* Every shard must come from the save that wrote the index (index.h): a save that died after
 * replacing some shards leaves the old index over new shards, each of which passes its own
 * CRCs, so without this check a load would return a mix of two checkpoints. An index without
 * an id (Hugging Face, or s3direct before ids) vouches only for shards without one. */
static int check_generation(const struct s3d_reader *r, const struct s3d_st_index *ix,
                            const char *index_path)
{
    for (size_t i = 0; i < r->n_shards; i++) {
        const char *g = s3d_st_meta_get(&r->shards[i].hdr, S3D_ST_META_GENERATION);
        if (ix->generation == NULL && g == NULL)
            continue;
        if (ix->generation != NULL && g != NULL && strcmp(ix->generation, g) == 0)
            continue;
        return s3d_fail(S3D_EFMT_INDEX,
                        "%s: shard %s was written by another save (generation %.40s) than the "
                        "index (generation %.40s): the checkpoint was partly overwritten, by a "
                        "save that did not finish or by two saves at once; save it again",
                        index_path, r->shards[i].uri, g != NULL ? g : "none",
                        ix->generation != NULL ? ix->generation : "none");
    }
    return 0;
}

/* Opens the shards named by an index file and checks that the index tells the truth. */
static int open_index(struct s3d_reader *r, const struct s3d_loc *loc)
{
    struct s3d_st_index ix = {0};
    struct s3d_dynbuf path;
    char *json = NULL;
    size_t len = 0;
    int rc;

    s3d_dynbuf_init(&path, 8192);
    rc = s3d_ckpt_read_small(r->client, loc, S3D_ST_INDEX_MAX, &json, &len, NULL);
    if (rc < 0)
        goto fail;
    rc = s3d_st_index_parse(json, len, 0, &ix);
    if (rc < 0) {
        s3d_fail_prefix(rc, "%s", loc->path);
        goto fail;
    }
    for (size_t i = 0; i < ix.n_shards; i++) {
        rc = s3d_st_shard_resolve(loc->path, ix.shards[i], &path);
        if (rc < 0)
            goto fail;
        rc = add_shard(r, path.data);
        if (rc < 0)
            goto fail;
    }
    rc = open_shards(r->client, r->shards, r->n_shards);
    if (rc < 0)
        goto fail;
    rc = check_generation(r, &ix, loc->path);
    if (rc < 0)
        goto fail;
    rc = index_tensors(r);
    if (rc < 0)
        goto fail;
    /* Every tensor of the weight map must be in the shard it names. */
    for (size_t i = 0; i < ix.n_tensors; i++) {
        size_t t;
        const struct shard *sh = &r->shards[ix.tensors[i].shard];
        if (s3d_st_find(&sh->hdr, ix.tensors[i].name, strlen(ix.tensors[i].name), &t) < 0) {
            rc = s3d_fail(S3D_EFMT_INDEX, "%s: tensor '%s' is listed in shard %s but not in it",
                          loc->path, ix.tensors[i].name, sh->uri);
            goto fail;
        }
    }
    if (ix.n_tensors != r->n_tensors) {
        rc = s3d_fail(S3D_EFMT_INDEX, "%s: the weight map lists %zu tensors, the shards hold %zu",
                      loc->path, ix.n_tensors, r->n_tensors);
        goto fail;
    }
    rc = 0;
fail:
    s3d_st_index_free(&ix);
    s3d_dynbuf_free(&path);
    free(json);
    return rc;
}

int s3d_reader_open(struct s3d_client *c, const char *uri, struct s3d_reader **out)
{
    struct s3d_reader *r = NULL;
    struct s3d_loc loc;
    int rc;

    if (out == NULL)
        return s3d_fail(S3D_EINVAL, "s3d_reader_open: out is NULL");
    *out = NULL;
    rc = s3d_client_check(c);
    if (rc < 0)
        return rc;
    rc = s3d_loc_parse(uri, &loc);
    if (rc < 0)
        return rc;
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory opening %s", uri);
    r->client = c;
    s3d_client_ref(c); /* dropped by s3d_reader_close: the reader outlives s3d_client_free */
    if (s3d_str_ends_with(uri, ".index.json")) {
        rc = open_index(r, &loc);
    } else {
        rc = add_shard(r, uri);
        if (rc == 0)
            rc = open_shard(c, &r->shards[0]);
        if (rc == 0)
            rc = index_tensors(r);
    }
    if (rc < 0) {
        s3d_reader_close(r);
        return rc;
    }
    *out = r;
    return 0;
}

void s3d_reader_close(struct s3d_reader *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->n_shards; i++) {
        s3d_st_header_free(&r->shards[i].hdr);
        free(r->shards[i].uri);
        if (r->shards[i].fd >= 0)
            close(r->shards[i].fd);
    }
    free(r->shards);
    free(r->tensors);
    free(r->by_name);
    s3d_client_unref(r->client);
    free(r);
}

/* ---- queries --------------------------------------------------------------------------- */

size_t s3d_reader_num_tensors(const struct s3d_reader *r)
{
    return r == NULL ? 0 : r->n_tensors;
}

int s3d_reader_tensor(const struct s3d_reader *r, size_t i, struct s3d_tensor_info *out)
{
    const struct s3d_st_tensor *t;
    const struct shard *sh;
    struct s3d_tensor_info full;
    if (r == NULL || out == NULL)
        return s3d_fail(S3D_EINVAL, "s3d_reader_tensor: NULL argument");
    if (i >= r->n_tensors)
        return s3d_fail(S3D_ENOTENSOR, "tensor index %zu out of range (%zu tensors)", i,
                        r->n_tensors);
    t = tref_tensor(r, i);
    sh = &r->shards[r->tensors[i].shard];
    memset(&full, 0, sizeof(full));
    full.name = t->name;
    full.dtype = t->dtype;
    full.ndim = t->ndim;
    full.shape = t->shape;
    full.nbytes = t->end - t->begin;
    full.shard = r->tensors[i].shard;
    full.offset = sh->hdr.data_start + t->begin;
    full.has_crc32c = t->has_crc32c;
    full.crc32c = t->crc32c;
    s3d_out_copy(out, &full, sizeof(full), S3D_TENSOR_INFO_SIZE_V1);
    return 0;
}

int s3d_reader_find(const struct s3d_reader *r, const char *name, size_t *out_index)
{
    size_t lo = 0, hi;
    if (r == NULL || name == NULL || out_index == NULL)
        return s3d_fail(S3D_EINVAL, "s3d_reader_find: NULL argument");
    hi = r->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int cmp = strcmp(tref_tensor(r, r->by_name[mid])->name, name);
        if (cmp == 0) {
            *out_index = r->by_name[mid];
            return 0;
        }
        if (cmp < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return s3d_fail(S3D_ENOTENSOR, "no tensor '%s' in %s", name,
                    r->n_shards ? r->shards[0].uri : "the checkpoint");
}

size_t s3d_reader_num_metadata(const struct s3d_reader *r)
{
    return r == NULL || r->n_shards == 0 ? 0 : r->shards[0].hdr.n_metadata;
}

int s3d_reader_metadata(const struct s3d_reader *r, size_t i, const char **key, const char **value)
{
    if (r == NULL || key == NULL || value == NULL)
        return s3d_fail(S3D_EINVAL, "s3d_reader_metadata: NULL argument");
    if (i >= s3d_reader_num_metadata(r))
        return s3d_fail(S3D_EINVAL, "metadata index %zu out of range", i);
    *key = r->shards[0].hdr.metadata[i].key;
    *value = r->shards[0].hdr.metadata[i].value;
    return 0;
}

const char *s3d_reader_metadata_get(const struct s3d_reader *r, const char *key)
{
    if (r == NULL || key == NULL || r->n_shards == 0)
        return NULL;
    return s3d_st_meta_get(&r->shards[0].hdr, key);
}

size_t s3d_reader_num_shards(const struct s3d_reader *r)
{
    return r == NULL ? 0 : r->n_shards;
}

int s3d_reader_shard(const struct s3d_reader *r, size_t i, const char **uri, uint64_t *header_bytes,
                     uint64_t *object_bytes)
{
    if (r == NULL)
        return s3d_fail(S3D_EINVAL, "s3d_reader_shard: reader is NULL");
    if (i >= r->n_shards)
        return s3d_fail(S3D_EINVAL, "shard index %zu out of range (%zu shards)", i, r->n_shards);
    if (uri != NULL)
        *uri = r->shards[i].uri;
    if (header_bytes != NULL)
        *header_bytes = r->shards[i].header_bytes;
    if (object_bytes != NULL)
        *object_bytes = r->shards[i].object_size;
    return 0;
}

const char *s3d_reader_shard_version(const struct s3d_reader *r, size_t i)
{
    if (r == NULL || i >= r->n_shards)
        return NULL;
    return r->shards[i].version;
}
