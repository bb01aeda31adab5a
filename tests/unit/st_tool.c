/* st_tool.c - a small driver of the format module for tests/py/test_format_interop.py.
 *
 *   st_tool parse FILE [--verify]
 *       Parses FILE as a safetensors object and prints JSON lines: first
 *       {"data_start": N, "data_len": N, "metadata": [[key, value], ...]}, then one
 *       {"name", "dtype", "shape", "begin", "end", "crc32c"} per tensor in offset order
 *       (crc32c: 8 hex digits or null). --verify also checks each stored CRC32C against the
 *       data. On a refusal prints "ERROR S3D_EFMT_...: message" on stderr and exits 2.
 *   st_tool write OUT SPEC
 *       SPEC is JSON: {"tensors": [{"name", "dtype", "shape"}...], "metadata": {k: v},
 *       "data_file": PATH, "crc": true|false}. The data file holds the tensors' bytes
 *       back to back in the given order. Writes header + data to OUT, CRCs patched in.
 *   st_tool index FILE
 *       Parses an index; prints {"total_size": N|null, "shards": [...]} then one
 *       {"name", "shard", "uri"} per weight_map entry (uri resolved against FILE).
 *   st_tool shard-name INDEX I N      prints the name of shard I of N.
 * Exit codes: 0 ok, 2 refused by the library, 1 usage or I/O error. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/crc32c.h"
#include "common/dynbuf.h"
#include "format/index.h"
#include "format/safetensors.h"
#include "s3direct/s3direct.h"

static int refused(int rc)
{
    fprintf(stderr, "ERROR %s: %s\n", s3d_err_name(rc), s3d_last_error_message());
    return 2;
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;
    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        if (f)
            fclose(f);
        return NULL;
    }
    rewind(f);
    buf = malloc((size_t)n + 1);
    if (buf == NULL || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "%s: read failed\n", path);
        free(buf);
        fclose(f);
        return NULL;
    }
    buf[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void print_line(json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
    puts(s);
    free(s);
    json_decref(j);
}

static int cmd_parse(const char *path, int verify)
{
    size_t len;
    uint64_t n;
    struct s3d_st_header h;
    char *buf = read_all(path, &len);
    json_t *md;
    int rc;

    if (buf == NULL)
        return 1;
    if (len < 8) {
        uint8_t f8[8] = {0};
        memcpy(f8, buf, len);
        rc = s3d_st_header_len(f8, len, &n);
    } else {
        rc = s3d_st_header_len((const uint8_t *)buf, len, &n);
    }
    if (rc == 0)
        rc = s3d_st_parse(buf + 8, (size_t)n, len, &h);
    if (rc < 0) {
        free(buf);
        return refused(rc);
    }
    md = json_array();
    for (size_t i = 0; i < h.n_metadata; i++)
        json_array_append_new(md, json_pack("[s,s]", h.metadata[i].key, h.metadata[i].value));
    print_line(json_pack("{s:I,s:I,s:o}", "data_start", (json_int_t)h.data_start, "data_len",
                         (json_int_t)h.data_len, "metadata", md));
    for (size_t i = 0; i < h.n_tensors; i++) {
        const struct s3d_st_tensor *t = &h.tensors[i];
        json_t *shape = json_array();
        char hex[9];
        for (int32_t d = 0; d < t->ndim; d++)
            json_array_append_new(shape, json_integer(t->shape[d]));
        snprintf(hex, sizeof(hex), "%08x", t->crc32c);
        if (verify && t->has_crc32c) {
            uint32_t c = s3d_crc32c(0, buf + h.data_start + t->begin, t->end - t->begin);
            if (c != t->crc32c) {
                fprintf(stderr, "ERROR CRC mismatch for %s: stored %08x, data %08x\n", t->name,
                        t->crc32c, c);
                rc = 3;
            }
        }
        print_line(json_pack("{s:s,s:s,s:o,s:I,s:I,s:o}", "name", t->name, "dtype",
                             s3d_dtype_name(t->dtype), "shape", shape, "begin",
                             (json_int_t)t->begin, "end", (json_int_t)t->end, "crc32c",
                             t->has_crc32c ? json_string(hex) : json_null()));
    }
    s3d_st_header_free(&h);
    free(buf);
    return rc;
}

static int cmd_write(const char *out_path, const char *spec_path)
{
    json_error_t err;
    json_t *spec = json_load_file(spec_path, 0, &err), *ts, *md, *v;
    struct s3d_tensor_src *t = NULL;
    struct s3d_metadata_entry *m = NULL;
    int64_t *shapes = NULL;
    size_t n, nm = 0, dlen = 0, shape_total = 0, *crc_pos = NULL, k = 0;
    uint64_t *offsets = NULL, total = 0;
    char *data = NULL;
    const char *key;
    struct s3d_dynbuf b;
    FILE *f;
    int rc = 1, with_crc;

    s3d_dynbuf_init(&b, 0);
    if (spec == NULL) {
        fprintf(stderr, "%s: %s\n", spec_path, err.text);
        return 1;
    }
    ts = json_object_get(spec, "tensors");
    md = json_object_get(spec, "metadata");
    with_crc = json_is_true(json_object_get(spec, "crc"));
    n = json_array_size(ts);
    for (size_t i = 0; i < n; i++)
        shape_total += json_array_size(json_object_get(json_array_get(ts, i), "shape"));
    t = calloc(n + 1, sizeof(*t));
    shapes = calloc(shape_total + 1, sizeof(*shapes));
    offsets = calloc(n + 1, sizeof(*offsets));
    crc_pos = calloc(n + 1, sizeof(*crc_pos));
    m = calloc(json_object_size(md) + 1, sizeof(*m));
    data = read_all(json_string_value(json_object_get(spec, "data_file")), &dlen);
    if (!t || !shapes || !offsets || !crc_pos || !m || !data)
        goto out;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(ts, i), *sh = json_object_get(e, "shape");
        const char *dt = json_string_value(json_object_get(e, "dtype"));
        t[i].name = json_string_value(json_object_get(e, "name"));
        t[i].dtype = dt ? s3d_dtype_from_name(dt, strlen(dt)) : 0;
        t[i].ndim = (int32_t)json_array_size(sh);
        t[i].shape = shapes + k;
        t[i].device = -1;
        for (size_t d = 0; d < json_array_size(sh); d++)
            shapes[k++] = json_integer_value(json_array_get(sh, d));
        if (s3d_dtype_nbytes(t[i].dtype, t[i].shape, t[i].ndim, &t[i].nbytes) < 0)
            t[i].nbytes = 0; /* the builder reports it */
        total += t[i].nbytes;
    }
    json_object_foreach(md, key, v)
    {
        m[nm].key = key;
        m[nm++].value = json_string_value(v);
    }
    rc = s3d_st_build(t, n, m, nm, with_crc, &b, offsets, crc_pos);
    if (rc < 0) {
        rc = refused(rc);
        goto out;
    }
    if (total != dlen) {
        fprintf(stderr, "data file has %zu bytes, tensors need %llu\n", dlen,
                (unsigned long long)total);
        rc = 1;
        goto out;
    }
    if (with_crc) {
        for (size_t i = 0; i < n; i++)
            s3d_st_patch_crc(b.data, crc_pos[i],
                             s3d_crc32c(0, data + offsets[i], (size_t)t[i].nbytes));
        s3d_st_seal(b.data);
    }
    f = fopen(out_path, "wb");
    if (f == NULL || fwrite(b.data, 1, b.len, f) != b.len || fwrite(data, 1, dlen, f) != dlen ||
        fclose(f) != 0) {
        fprintf(stderr, "%s: write failed\n", out_path);
        rc = 1;
        goto out;
    }
    rc = 0;
out:
    s3d_dynbuf_free(&b);
    free(t);
    free(shapes);
    free(offsets);
    free(crc_pos);
    free(m);
    free(data);
    json_decref(spec);
    return rc;
}

static int cmd_index(const char *path)
{
    size_t len;
    struct s3d_st_index ix;
    struct s3d_dynbuf uri;
    char *buf = read_all(path, &len);
    json_t *shards;
    int rc;

    if (buf == NULL)
        return 1;
    rc = s3d_st_index_parse(buf, len, 0, &ix);
    free(buf);
    if (rc < 0)
        return refused(rc);
    shards = json_array();
    for (size_t i = 0; i < ix.n_shards; i++)
        json_array_append_new(shards, json_string(ix.shards[i]));
    print_line(json_pack("{s:o,s:o}", "total_size",
                         ix.has_total_size ? json_integer((json_int_t)ix.total_size) : json_null(),
                         "shards", shards));
    s3d_dynbuf_init(&uri, 1 << 16);
    for (size_t i = 0; i < ix.n_tensors; i++) {
        const char *shard = ix.shards[ix.tensors[i].shard];
        rc = s3d_st_shard_resolve(path, shard, &uri);
        if (rc < 0)
            break;
        print_line(json_pack("{s:s,s:s,s:s}", "name", ix.tensors[i].name, "shard", shard, "uri",
                             uri.data));
    }
    s3d_dynbuf_free(&uri);
    s3d_st_index_free(&ix);
    return rc < 0 ? refused(rc) : 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "parse") == 0)
        return cmd_parse(argv[2], argc > 3 && strcmp(argv[3], "--verify") == 0);
    if (argc == 4 && strcmp(argv[1], "write") == 0)
        return cmd_write(argv[2], argv[3]);
    if (argc == 3 && strcmp(argv[1], "index") == 0)
        return cmd_index(argv[2]);
    if (argc == 5 && strcmp(argv[1], "shard-name") == 0) {
        struct s3d_dynbuf b;
        int rc;
        s3d_dynbuf_init(&b, 4096);
        rc = s3d_st_shard_name(argv[2], (uint32_t)strtoul(argv[3], NULL, 10),
                               (uint32_t)strtoul(argv[4], NULL, 10), &b);
        if (rc < 0)
            return refused(rc);
        puts(b.data);
        s3d_dynbuf_free(&b);
        return 0;
    }
    fprintf(stderr, "usage: st_tool parse FILE [--verify] | write OUT SPEC | index FILE | "
                    "shard-name INDEX I N\n");
    return 1;
}
