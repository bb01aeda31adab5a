/* ckpt_read.c - opening a checkpoint (headers only) and reading tensors into host or GPU
 * memory.
 *
 * Open: for each object, HeadObject (its size bounds every offset in the header), then one
 * ranged GET of the first S3D_HEADER_PROBE bytes, and a second GET only when the header is
 * longer. Local files: fstat + pread. A sharded checkpoint reads its index first, then each
 * shard's header. Everything is validated by src/format before any offset is used.
 *
 * Read from S3: the destinations become pieces, planned into ranged GET jobs (ckpt_plan.h):
 * big host pieces are fetched straight into the destination; small or device pieces are
 * coalesced into staging chunks from the client's pool and scattered from there (memcpy to
 * host, async host-to-device copy on a per-device stream). A chunk goes back to the pool when
 * the event recorded after its copies completes; until then no more staged jobs start than
 * the pool has chunks, which bounds host memory. CRC32C is summed over each segment while it
 * sits in host memory, and the segments of a tensor are combined in order at the end.
 *
 * Read from files: the ranges go to s3d_file_read_ranges (fileio.h), which does the same with
 * O_DIRECT or cuFile. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/compiler.h"
#include "common/crc32c.h"
#include "common/dynbuf.h"
#include "common/error.h"
#include "common/opts.h"
#include "device/device.h"
#include "engine/ckpt_common.h"
#include "engine/ckpt_plan.h"
#include "engine/client_impl.h"
#include "engine/fileio.h"
#include "engine/pool.h"
#include "engine/resources.h"
#include "engine/xfer.h"
#include "format/index.h"
#include "s3/ops.h"
#include "format/safetensors.h"
#include "s3direct/checkpoint.h"
#include "s3direct/object.h"
#include "s3direct/transfer.h"

/* First GET of a header: most headers fit, so opening costs one HEAD and one GET. */
#define S3D_HEADER_PROBE (256u << 10)
/* Host pieces at least this big are fetched straight into their destination. */
#define S3D_DIRECT_MIN  (1u << 20)
#define S3D_MAX_DEVICES 64

struct shard {
    char *uri;
    struct s3d_loc loc; /* loc.path points at uri */
    char etag[80];      /* S3: the version opened; every later GET carries If-Match with it */
    uint64_t object_size;
    uint64_t header_bytes; /* 8 + N */
    struct s3d_st_header hdr;
};

struct tref {
    uint32_t shard;
    uint32_t tensor; /* index into shards[shard].hdr.tensors */
};

struct s3d_reader {
    struct s3d_client *client;
    size_t n_shards;
    struct shard *shards;
    size_t n_tensors;
    struct tref *tensors; /* shard order, then data-offset order */
    uint32_t *by_name;    /* indexes into tensors, sorted by name */
};

/* ---- opening --------------------------------------------------------------------------- */

/* Reads [off, off + len) of a local file into buf; S3D_EFMT_TRUNCATED if it ends early. */
static int file_pread_all(int fd, const char *path, void *buf, uint64_t len, uint64_t off)
{
    uint64_t done = 0;
    while (done < len) {
        ssize_t n = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return s3d_fail(s3d_err_from_errno(errno), "read %s at offset %llu: %s", path,
                            (unsigned long long)(off + done), strerror(errno));
        if (n == 0)
            return s3d_fail(S3D_EFMT_TRUNCATED, "%s: ends at offset %llu, expected %llu bytes",
                            path, (unsigned long long)(off + done),
                            (unsigned long long)(off + len));
        done += (uint64_t)n;
    }
    return 0;
}

/* Reads the whole small object or file at loc (at most cap bytes) into *out (malloc'ed,
 * NUL-terminated). Used for index files. */
static int read_small(struct s3d_client *c, const struct s3d_loc *loc, size_t cap, char **out,
                      size_t *out_len)
{
    struct s3d_object_info info;
    uint64_t size, got = 0;
    char *buf = NULL, *bigger;
    int rc, fd = -1;

    *out = NULL;
    if (loc->is_s3) {
        /* One GET usually has it all; its Content-Range gives the size and the ETag pins the
         * rest. */
        buf = malloc(S3D_HEADER_PROBE + 1);
        if (buf == NULL)
            return s3d_fail(S3D_ENOMEM, "out of memory reading %s", loc->path);
        rc = s3d_xfer_get_first(c, loc->bucket, loc->key, 0, S3D_HEADER_PROBE, buf, &got, &info,
                                NULL, NULL);
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
            rc = s3d_xfer_get_buffer(c, loc->bucket, loc->key, info.etag, got, size - got,
                                     buf + got);
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
                                &info, NULL, NULL);
        if (rc < 0)
            goto fail;
        sh->object_size = info.size;
        snprintf(sh->etag, sizeof(sh->etag), "%s", info.etag);
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
            rc = s3d_xfer_get_buffer(c, sh->loc.bucket, sh->loc.key, sh->etag, probe,
                                     sh->header_bytes - probe, buf + probe);
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
    if (fd >= 0)
        close(fd);
    return rc;
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
    sh->uri = s3d_strdup(uri);
    if (sh->uri == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory opening %s", uri);
    r->n_shards++;
    return s3d_loc_parse(sh->uri, &sh->loc);
}

static const struct s3d_st_tensor *tref_tensor(const struct s3d_reader *r, size_t i)
{
    return &r->shards[r->tensors[i].shard].hdr.tensors[r->tensors[i].tensor];
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
    rc = read_small(r->client, loc, S3D_ST_INDEX_MAX, &json, &len);
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
        rc = open_shard(r->client, &r->shards[i]);
        if (rc < 0)
            goto fail;
    }
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
    }
    free(r->shards);
    free(r->tensors);
    free(r->by_name);
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
    if (r == NULL || out == NULL)
        return s3d_fail(S3D_EINVAL, "s3d_reader_tensor: NULL argument");
    if (i >= r->n_tensors)
        return s3d_fail(S3D_ENOTENSOR, "tensor index %zu out of range (%zu tensors)", i,
                        r->n_tensors);
    t = tref_tensor(r, i);
    sh = &r->shards[r->tensors[i].shard];
    out->name = t->name;
    out->dtype = t->dtype;
    out->ndim = t->ndim;
    out->shape = t->shape;
    out->nbytes = t->end - t->begin;
    out->shard = r->tensors[i].shard;
    out->offset = sh->hdr.data_start + t->begin;
    out->has_crc32c = t->has_crc32c;
    out->crc32c = t->crc32c;
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

/* ---- reading --------------------------------------------------------------------------- */

/* One validated destination. */
struct dest {
    size_t tensor;
    uint64_t src_off; /* inside the tensor */
    uint64_t len;
    int verify;   /* whole tensor with a stored CRC, and verification on */
    uint32_t crc; /* computed */
};

static int check_dests(struct s3d_reader *r, struct s3d_device *dev,
                       const struct s3d_tensor_dest *d, size_t n, int no_verify, struct dest *out)
{
    for (size_t i = 0; i < n; i++) {
        const struct s3d_st_tensor *t;
        uint64_t nbytes, len;
        if (d[i].index >= r->n_tensors)
            return s3d_fail(S3D_ENOTENSOR,
                            "destination %zu: tensor index %zu out of range "
                            "(%zu tensors)",
                            i, d[i].index, r->n_tensors);
        t = tref_tensor(r, d[i].index);
        nbytes = t->end - t->begin;
        if (d[i].src_offset > nbytes)
            return s3d_fail(S3D_EDEST, "tensor '%s': offset %llu is past its %llu bytes", t->name,
                            (unsigned long long)d[i].src_offset, (unsigned long long)nbytes);
        len = d[i].length ? d[i].length : nbytes - d[i].src_offset;
        if (len > nbytes - d[i].src_offset)
            return s3d_fail(S3D_EDEST, "tensor '%s': range %llu+%llu is past its %llu bytes",
                            t->name, (unsigned long long)d[i].src_offset, (unsigned long long)len,
                            (unsigned long long)nbytes);
        if (d[i].capacity < len)
            return s3d_fail(S3D_EDEST, "tensor '%s': destination holds %llu bytes, needs %llu",
                            t->name, (unsigned long long)d[i].capacity, (unsigned long long)len);
        if (len > 0 && d[i].ptr == NULL)
            return s3d_fail(S3D_EINVAL, "tensor '%s': destination pointer is NULL", t->name);
        if (d[i].device >= 0 && !s3d_device_has_gpu(dev))
            return s3d_fail(S3D_ENODEVICE,
                            "tensor '%s': destination on cuda:%d, but there is "
                            "no GPU (%s)",
                            t->name, d[i].device, s3d_device_why_host(dev));
        if (d[i].device >= S3D_MAX_DEVICES)
            return s3d_fail(S3D_ENODEVICE, "tensor '%s': device %d out of range", t->name,
                            d[i].device);
        out[i].tensor = d[i].index;
        out[i].src_off = d[i].src_offset;
        out[i].len = len;
        out[i].verify = !no_verify && t->has_crc32c && d[i].src_offset == 0 && len == nbytes;
        out[i].crc = 0;
    }
    return 0;
}

/* State of one S3 read. Only the calling thread touches it (the xfer hooks run there). */
struct s3read {
    struct s3d_reader *r;
    struct dest *dests;
    struct s3d_rpiece *pieces;
    struct s3d_rplan plan;
    struct s3d_get_job *jobs;
    void **chunks; /* per job: its staging chunk, or NULL */
    struct s3d_device *dev;
    struct s3d_pool *pool;
    struct s3d_stream *streams[S3D_MAX_DEVICES];
    const struct s3d_read_options *o;
    /* Chunks whose device copies are queued: released when their event completes. */
    struct inflight {
        void *chunk;
        struct s3d_event *ev;
    } * inflight;
    size_t n_inflight;
};

static int stream_for(struct s3read *s, int ordinal, struct s3d_stream **out)
{
    int rc;
    if (s->streams[ordinal] == NULL) {
        rc = s3d_device_stream_new(s->dev, ordinal, &s->streams[ordinal]);
        if (rc < 0)
            return rc;
        /* The destination may still be read by the caller's kernels (load_into), or be a
         * block the caching allocator recycled from a tensor whose kernels are pending. */
        rc = s3d_device_wait_external(s->dev, s->streams[ordinal],
                                      s3d_caller_stream(s->o->cuda_stream, s->o->cuda_streams,
                                                        s->o->n_cuda_streams, ordinal));
        if (rc < 0)
            return rc;
    }
    *out = s->streams[ordinal];
    return 0;
}

static int read_prepare(void *ctx, struct s3d_get_job *job)
{
    struct s3read *s = ctx;
    size_t j = (size_t)(uintptr_t)job->user;
    const struct s3d_rjob *pj = &s->plan.jobs[j];
    if (pj->direct) {
        const struct s3d_rseg *seg = &s->plan.segs[pj->seg0];
        job->dst = (char *)s->pieces[seg->piece].dst + seg->piece_off;
        return 0;
    }
    s->chunks[j] = s3d_pool_try_get(s->pool);
    if (s->chunks[j] == NULL)
        return 1; /* every chunk is busy: wait for a copy to finish */
    job->dst = s->chunks[j];
    return 0;
}

/* Releases the chunks whose copies are done. Returns 1 while copies are pending. */
static int read_poll(void *ctx)
{
    struct s3read *s = ctx;
    size_t i = 0;
    while (i < s->n_inflight) {
        int rc = s3d_device_event_query(s->dev, s->inflight[i].ev);
        if (rc < 0)
            return rc;
        if (rc == 0) {
            i++;
            continue;
        }
        s3d_pool_put(s->pool, s->inflight[i].chunk);
        s3d_device_event_free(s->dev, s->inflight[i].ev);
        s->inflight[i] = s->inflight[--s->n_inflight];
    }
    return s->n_inflight > 0;
}

static int read_done(void *ctx, struct s3d_get_job *job)
{
    struct s3read *s = ctx;
    size_t j = (size_t)(uintptr_t)job->user;
    const struct s3d_rjob *pj = &s->plan.jobs[j];
    const char *base = job->dst;
    int device_ordinal = -1, rc;

    for (size_t k = pj->seg0; k < pj->seg0 + pj->nseg; k++) {
        struct s3d_rseg *seg = &s->plan.segs[k];
        const struct s3d_rpiece *pc = &s->pieces[seg->piece];
        const char *src = base + seg->job_off;
        if (s->dests[pc->dest].verify)
            seg->crc = s3d_crc32c(0, src, seg->len);
        if (pj->direct)
            continue;
        if (pc->device < 0) {
            memcpy((char *)pc->dst + seg->piece_off, src, seg->len);
        } else {
            struct s3d_stream *st;
            rc = stream_for(s, pc->device, &st);
            if (rc < 0)
                return rc;
            rc = s3d_device_copy_htod(s->dev, st, (uint64_t)(uintptr_t)pc->dst + seg->piece_off,
                                      src, seg->len);
            if (rc < 0)
                return rc;
            /* A chunk holds the bytes of one contiguous object range; in practice one device
             * per job. With several, the event goes on the last stream and the others are
             * synchronized now (rare: keeps one event per chunk). */
            if (device_ordinal >= 0 && device_ordinal != pc->device) {
                rc = s3d_device_stream_sync(s->dev, s->streams[device_ordinal]);
                if (rc < 0)
                    return rc;
            }
            device_ordinal = pc->device;
        }
    }
    if (pj->direct)
        return 0;
    if (device_ordinal < 0) {
        s3d_pool_put(s->pool, s->chunks[j]);
    } else {
        struct s3d_event *ev;
        /* Events are cheap to create (microseconds); one per chunk in flight. */
        rc = s3d_device_event_new(s->dev, device_ordinal, &ev);
        if (rc < 0)
            return rc;
        rc = s3d_device_event_record(s->dev, ev, s->streams[device_ordinal]);
        if (rc < 0) {
            s3d_device_event_free(s->dev, ev);
            return rc;
        }
        s->inflight[s->n_inflight].chunk = s->chunks[j];
        s->inflight[s->n_inflight].ev = ev;
        s->n_inflight++;
    }
    s->chunks[j] = NULL;
    return 0;
}

/* Combines the segment CRCs of each piece (in order) into its destination's CRC. */
static void combine_crcs(struct s3read *s)
{
    for (size_t k = 0; k < s->plan.nsegs; k++) {
        const struct s3d_rseg *seg = &s->plan.segs[k];
        struct dest *d = &s->dests[s->pieces[seg->piece].dest];
        if (d->verify)
            d->crc =
                seg->piece_off == 0 ? seg->crc : s3d_crc32c_combine(d->crc, seg->crc, seg->len);
    }
}

static int read_s3(struct s3d_reader *r, struct dest *dests, const struct s3d_tensor_dest *d,
                   size_t n, const struct s3d_read_options *o)
{
    struct s3read s;
    struct s3d_get_hooks hooks;
    size_t np = 0, chunks_total;
    int first_device = -1, rc;

    memset(&s, 0, sizeof(s));
    s.r = r;
    s.o = o;
    s.dests = dests;
    s.dev = NULL;
    /* Host-only reads use a plain pool and never open the device layer; the first device
     * destination decides the context the pool is pinned in. */
    for (size_t i = 0; i < n && first_device < 0; i++)
        if (dests[i].len > 0 && d[i].device >= 0)
            first_device = d[i].device;
    if (first_device >= 0 && (rc = s3d_client_device(r->client, &s.dev)) < 0)
        return rc;
    rc = s3d_client_pool(r->client, first_device, &s.pool);
    if (rc < 0)
        return rc;
    s.pieces = s3d_calloc(n, sizeof(*s.pieces));
    if (s.pieces == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "out of memory planning %zu reads", n);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const struct s3d_st_tensor *t;
        const struct tref *tr;
        if (dests[i].len == 0)
            continue;
        tr = &r->tensors[dests[i].tensor];
        t = tref_tensor(r, dests[i].tensor);
        s.pieces[np].shard = tr->shard;
        s.pieces[np].obj_off = r->shards[tr->shard].hdr.data_start + t->begin + dests[i].src_off;
        s.pieces[np].len = dests[i].len;
        s.pieces[np].dst = d[i].ptr;
        s.pieces[np].device = d[i].device;
        s.pieces[np].dest = i;
        np++;
    }
    rc = s3d_rplan_build(s.pieces, np, s3d_pool_chunk_size(s.pool), S3D_DIRECT_MIN, &s.plan);
    if (rc < 0)
        goto out;
    chunks_total = s3d_pool_chunk_count(s.pool);
    s.jobs = s3d_calloc(s.plan.njobs, sizeof(*s.jobs));
    s.chunks = s3d_calloc(s.plan.njobs, sizeof(*s.chunks));
    s.inflight = s3d_calloc(chunks_total, sizeof(*s.inflight));
    if (s.jobs == NULL || s.chunks == NULL || s.inflight == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "out of memory planning %zu reads", s.plan.njobs);
        goto out;
    }
    for (size_t j = 0; j < s.plan.njobs; j++) {
        const struct shard *sh = &r->shards[s.plan.jobs[j].shard];
        s.jobs[j].bucket = sh->loc.bucket;
        s.jobs[j].key = sh->loc.key;
        s.jobs[j].if_match = sh->etag;
        s.jobs[j].offset = s.plan.jobs[j].obj_off;
        s.jobs[j].length = s.plan.jobs[j].len;
        s.jobs[j].user = (void *)(uintptr_t)j;
    }
    hooks.prepare = read_prepare;
    hooks.done = read_done;
    hooks.poll = read_poll;
    hooks.ctx = &s;
    rc = s3d_xfer_get(r->client, s.jobs, s.plan.njobs, &hooks, 0, o->progress, o->progress_user,
                      o->cancel);
    /* Whatever happened, every queued copy must finish before its chunk goes back. */
    for (int dv = 0; dv < S3D_MAX_DEVICES; dv++)
        if (s.streams[dv] != NULL) {
            int src = s3d_device_stream_sync(s.dev, s.streams[dv]);
            if (rc == 0 && src < 0)
                rc = src;
        }
    for (size_t i = 0; i < s.n_inflight; i++) {
        s3d_pool_put(s.pool, s.inflight[i].chunk);
        s3d_device_event_free(s.dev, s.inflight[i].ev);
    }
    s.n_inflight = 0;
    if (rc == 0)
        combine_crcs(&s);
out:
    if (s.chunks != NULL)
        for (size_t j = 0; j < s.plan.njobs; j++)
            s3d_pool_put(s.pool, s.chunks[j]);
    for (int dv = 0; dv < S3D_MAX_DEVICES; dv++)
        s3d_device_stream_free(s.dev, s.streams[dv]);
    free(s.inflight);
    free(s.chunks);
    free(s.jobs);
    s3d_rplan_free(&s.plan);
    free(s.pieces);
    return rc;
}

static int read_files(struct s3d_reader *r, struct dest *dests, const struct s3d_tensor_dest *d,
                      size_t n, const struct s3d_read_options *o)
{
    struct s3d_file_range *ranges = s3d_calloc(n, sizeof(*ranges));
    struct s3d_progress_acc acc = {.fn = o->progress, .user = o->progress_user};
    struct s3d_device *dev = NULL;
    struct s3d_pool *pool = NULL;
    int need_pool = o->file_io == S3D_FILE_IO_DIRECT, first_device = -1;
    int rc = 0;

    if (ranges == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory planning %zu reads", n);
    for (size_t i = 0; i < n; i++) {
        acc.total += dests[i].len;
        if (d[i].device >= 0 && first_device < 0) {
            need_pool = 1;
            first_device = d[i].device;
        }
    }
    if (first_device >= 0) /* host-only reads never open the device layer */
        rc = s3d_client_device(r->client, &dev);
    if (rc == 0 && need_pool)
        rc = s3d_client_pool(r->client, first_device, &pool);
    for (size_t sh = 0; rc == 0 && sh < r->n_shards; sh++) {
        struct s3d_file_io_opts fo;
        size_t k = 0;
        uint64_t bytes = 0;
        for (size_t i = 0; i < n; i++) {
            const struct s3d_st_tensor *t;
            if (r->tensors[dests[i].tensor].shard != sh)
                continue;
            t = tref_tensor(r, dests[i].tensor);
            ranges[k].file_offset = r->shards[sh].hdr.data_start + t->begin + dests[i].src_off;
            ranges[k].length = dests[i].len;
            ranges[k].dst = d[i].ptr;
            ranges[k].device = d[i].device;
            ranges[k].crc_out = dests[i].verify ? &dests[i].crc : NULL;
            bytes += dests[i].len;
            k++;
        }
        if (k == 0)
            continue;
        memset(&fo, 0, sizeof(fo));
        fo.mode = o->file_io;
        fo.progress = o->progress ? s3d_progress_acc_cb : NULL;
        fo.progress_user = &acc;
        fo.cancel = o->cancel;
        fo.cuda_stream = o->cuda_stream;
        fo.cuda_streams = o->cuda_streams;
        fo.n_cuda_streams = o->n_cuda_streams;
        rc = s3d_file_read_ranges(dev, pool, r->shards[sh].loc.path, ranges, k, &fo);
        acc.base += bytes;
    }
    free(ranges);
    return rc;
}

int s3d_reader_read(struct s3d_reader *r, const struct s3d_tensor_dest *dests, size_t n,
                    const struct s3d_read_options *opts)
{
    struct s3d_read_options o;
    struct s3d_device *dev = NULL;
    struct dest *dd = NULL;
    int rc;

    if (r == NULL || (dests == NULL && n > 0))
        return s3d_fail(S3D_EINVAL, "s3d_reader_read: NULL argument");
    rc = s3d_client_check(r->client);
    if (rc < 0)
        return rc;
    s3d_opts_copy(&o, sizeof(o), opts);
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (dests[i].device >= 0) { /* host-only reads never open the device layer */
            if ((rc = s3d_client_device(r->client, &dev)) < 0)
                return rc;
            break;
        }
    dd = s3d_calloc(n, sizeof(*dd));
    if (dd == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory for %zu destinations", n);
    rc = check_dests(r, dev, dests, n, o.no_verify, dd);
    if (rc < 0)
        goto out;
    /* All shards of one checkpoint live in one place (the index resolves them beside it). */
    rc = r->shards[0].loc.is_s3 ? read_s3(r, dd, dests, n, &o) : read_files(r, dd, dests, n, &o);
    if (rc < 0)
        goto out;
    for (size_t i = 0; i < n; i++) {
        const struct s3d_st_tensor *t = tref_tensor(r, dd[i].tensor);
        if (dd[i].verify && dd[i].crc != t->crc32c) {
            rc = s3d_fail(S3D_ECHECKSUM,
                          "tensor '%s' in %s: CRC32C mismatch (stored %08x, read %08x)", t->name,
                          r->shards[r->tensors[dd[i].tensor].shard].uri, t->crc32c, dd[i].crc);
            goto out;
        }
    }
out:
    free(dd);
    return rc;
}
