/* safetensors.c - parsing and validating a safetensors header.
 *
 * Outline, mirroring the reference's read_metadata + Metadata::validate:
 *   1. the length field against the 100 MB cap and the object size;
 *   2. the whole header must be UTF-8 (checked here first, so that the error can say where;
 *      jansson would only say "invalid UTF-8");
 *   3. jansson parses it, refusing repeated keys (its default keeps the last one silently);
 *   4. each entry is read into a tensor (field types, dtype, shape, offsets);
 *   5. tensors are sorted by (begin, end) - the reference sorts the same way, so a
 *      zero-length tensor listed after a non-empty one at the same offset is fine - and must
 *      then tile the data region exactly; each tensor's byte length must equal shape x dtype;
 *   6. the data region must end exactly at the object's end (when the size is known);
 *   7. the s3direct.crc32c map, if any, is decoded onto the tensors. */
#include "format/safetensors.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/compiler.h"
#include "common/error.h"

/* Longest piece of a name put in an error message. */
#define NAME_SHOWN      160
#define SHOW(name, len) (int)S3D_MIN((len), (size_t)NAME_SHOWN), (name)

int s3d_st_header_len(const uint8_t first8[8], uint64_t object_size, uint64_t *json_len)
{
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | first8[i];
    if (n > S3D_ST_MAX_HEADER)
        return s3d_fail(S3D_EFMT_HEADER_SIZE,
                        "safetensors header length %" PRIu64 " is over the cap of %u bytes", n,
                        S3D_ST_MAX_HEADER);
    if (object_size != S3D_ST_OBJECT_SIZE_UNKNOWN) {
        if (object_size < 8)
            return s3d_fail(S3D_EFMT_HEADER_SIZE,
                            "object of %" PRIu64 " bytes is too small for a safetensors header",
                            object_size);
        if (n > object_size - 8)
            return s3d_fail(S3D_EFMT_HEADER_SIZE,
                            "safetensors header length %" PRIu64
                            " runs past the end of the %" PRIu64 "-byte object",
                            n, object_size);
    }
    *json_len = n;
    return 0;
}

int s3d_utf8_valid(const char *str, size_t len, size_t *bad_at)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;

    while (i < len) {
        unsigned c = s[i];
        size_t need;
        unsigned lo = 0x80, hi = 0xBF;

        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0)
                lo = 0xA0; /* overlong */
            else if (c == 0xED)
                hi = 0x9F; /* UTF-16 surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0)
                lo = 0x90; /* overlong */
            else if (c == 0xF4)
                hi = 0x8F; /* above U+10FFFF */
        } else {
            goto bad;
        }
        if (len - i - 1 < need)
            goto bad;
        if (s[i + 1] < lo || s[i + 1] > hi)
            goto bad;
        for (size_t k = 2; k <= need; k++) {
            if (s[i + k] < 0x80 || s[i + k] > 0xBF)
                goto bad;
        }
        i += need + 1;
    }
    return 1;
bad:
    if (bad_at != NULL)
        *bad_at = i;
    return 0;
}

void s3d_st_header_free(struct s3d_st_header *h)
{
    if (h == NULL)
        return;
    free(h->tensors);
    free(h->name_pool);
    free(h->shape_pool);
    for (size_t i = 0; i < h->n_metadata; i++) {
        free(h->metadata[i].key);
        free(h->metadata[i].value);
    }
    free(h->metadata);
    free(h->by_name);
    memset(h, 0, sizeof(*h));
}

/* Printable context for an error at json[pos]: up to 40 bytes before it, non-printable
 * bytes as '?'. */
static void context_before(const char *json, size_t pos, char *out, size_t cap)
{
    size_t from = pos > 40 ? pos - 40 : 0, k = 0;
    for (size_t i = from; i < pos && k + 1 < cap; i++) {
        unsigned char c = (unsigned char)json[i];
        out[k++] = (c >= 0x20 && c < 0x7F) ? (char)c : '?';
    }
    out[k] = '\0';
}

/* For an integer jansson could not hold (over int64): which array it sits in, found by
 * walking back from the error position to the array's '[' and the key before it. */
static int overflow_code(const char *json, size_t len, size_t pos)
{
    size_t i = S3D_MIN(pos, len);
    while (i > 0 && json[i - 1] != '[') {
        char c = json[i - 1];
        if (c != ',' && c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '-' && c != '+' &&
            c != '.' && c != 'e' && c != 'E' && (c < '0' || c > '9'))
            return S3D_EFMT_JSON;
        i--;
    }
    if (i == 0)
        return S3D_EFMT_JSON;
    i--; /* at '[' */
    while (i > 0 && strchr(" \t\r\n", json[i - 1]) != NULL)
        i--;
    if (i == 0 || json[i - 1] != ':')
        return S3D_EFMT_JSON;
    i--;
    while (i > 0 && strchr(" \t\r\n", json[i - 1]) != NULL)
        i--;
    if (i >= 7 && memcmp(json + i - 7, "\"shape\"", 7) == 0)
        return S3D_EFMT_SHAPE;
    if (i >= 14 && memcmp(json + i - 14, "\"data_offsets\"", 14) == 0)
        return S3D_EFMT_OFFSETS;
    return S3D_EFMT_JSON;
}

static int fail_load(const json_error_t *err, const char *json, size_t len)
{
    switch (json_error_code(err)) {
    case json_error_out_of_memory:
        return s3d_fail(S3D_ENOMEM, "out of memory parsing a safetensors header");
    case json_error_duplicate_key:
        /* jansson's text names the key: "duplicate object key near '"a"'". */
        return s3d_fail(S3D_EFMT_DUPLICATE, "safetensors header: %s (line %d, column %d)",
                        err->text, err->line, err->column);
    case json_error_invalid_utf8:
        return s3d_fail(S3D_EFMT_UTF8, "safetensors header: %s", err->text);
    case json_error_numeric_overflow: {
        int code = overflow_code(json, len, (size_t)err->position);
        return s3d_fail(code, "safetensors header: %s at line %d, column %d (%s must fit in int64)",
                        err->text, err->line, err->column,
                        code == S3D_EFMT_SHAPE     ? "a dimension"
                        : code == S3D_EFMT_OFFSETS ? "a data offset"
                                                   : "a number");
    }
    default:
        return s3d_fail(S3D_EFMT_JSON,
                        "safetensors header is not valid JSON: %s (line %d, "
                        "column %d)",
                        err->text, err->line, err->column);
    }
}

static int read_metadata(json_t *m, struct s3d_st_header *out)
{
    const char *key;
    json_t *v;

    if (json_is_null(m))
        return 0; /* the reference's Option: null means none */
    if (!json_is_object(m))
        return s3d_fail(S3D_EFMT_METADATA, "safetensors __metadata__ is not an object");
    out->metadata = s3d_calloc(json_object_size(m), sizeof(*out->metadata));
    if (out->metadata == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory reading __metadata__");
    json_object_foreach(m, key, v)
    {
        struct s3d_st_meta *e = &out->metadata[out->n_metadata];
        if (!json_is_string(v))
            return s3d_fail(S3D_EFMT_METADATA,
                            "safetensors __metadata__ value of \"%.*s\" is not a string",
                            SHOW(key, strlen(key)));
        e->key = s3d_strdup(key);
        e->value = s3d_strndup(json_string_value(v), json_string_length(v));
        if (e->key == NULL || e->value == NULL) {
            free(e->key);
            free(e->value);
            return s3d_fail(S3D_ENOMEM, "out of memory reading __metadata__");
        }
        out->n_metadata++;
    }
    return 0;
}

/* One non-negative integer of an array, for shape (code SHAPE) or data_offsets (OFFSETS). */
static int array_uint(json_t *a, size_t i, int code, const char *field, const char *name,
                      size_t name_len, int64_t *out)
{
    json_t *v = json_array_get(a, i);
    if (!json_is_integer(v))
        return s3d_fail(code, "tensor \"%.*s\": %s[%zu] is not an integer", SHOW(name, name_len),
                        field, i);
    if (json_integer_value(v) < 0)
        return s3d_fail(code, "tensor \"%.*s\": %s[%zu] is negative (%" JSON_INTEGER_FORMAT ")",
                        SHOW(name, name_len), field, i, json_integer_value(v));
    *out = (int64_t)json_integer_value(v);
    return 0;
}

/* Reads entry v into t; shape_store has room for its dimensions (sized by the first pass). */
static int read_tensor(const char *name, size_t name_len, json_t *v, struct s3d_st_tensor *t,
                       int64_t *shape_store)
{
    json_t *dt, *sh, *off;
    int64_t b, e;
    int rc;

    if (!json_is_object(v))
        return s3d_fail(S3D_EFMT_FIELD, "tensor \"%.*s\": entry is not a JSON object",
                        SHOW(name, name_len));
    dt = json_object_get(v, "dtype");
    sh = json_object_get(v, "shape");
    off = json_object_get(v, "data_offsets");
    if (dt == NULL || sh == NULL || off == NULL)
        return s3d_fail(S3D_EFMT_FIELD, "tensor \"%.*s\": missing \"%s\"", SHOW(name, name_len),
                        dt == NULL   ? "dtype"
                        : sh == NULL ? "shape"
                                     : "data_offsets");
    if (!json_is_string(dt))
        return s3d_fail(S3D_EFMT_FIELD, "tensor \"%.*s\": dtype is not a string",
                        SHOW(name, name_len));
    t->dtype = s3d_dtype_from_name(json_string_value(dt), json_string_length(dt));
    if (t->dtype == S3D_DTYPE_INVALID)
        return s3d_fail(S3D_EFMT_DTYPE, "tensor \"%.*s\": unknown dtype \"%.*s\"",
                        SHOW(name, name_len), SHOW(json_string_value(dt), json_string_length(dt)));
    if (!json_is_array(sh))
        return s3d_fail(S3D_EFMT_FIELD, "tensor \"%.*s\": shape is not an array",
                        SHOW(name, name_len));
    if (json_array_size(sh) > INT32_MAX)
        return s3d_fail(S3D_EFMT_SHAPE, "tensor \"%.*s\": too many dimensions",
                        SHOW(name, name_len));
    t->ndim = (int32_t)json_array_size(sh);
    t->shape = t->ndim > 0 ? shape_store : NULL;
    for (int32_t i = 0; i < t->ndim; i++) {
        rc = array_uint(sh, (size_t)i, S3D_EFMT_SHAPE, "shape", name, name_len, &t->shape[i]);
        if (rc < 0)
            return rc;
    }
    if (!json_is_array(off))
        return s3d_fail(S3D_EFMT_FIELD, "tensor \"%.*s\": data_offsets is not an array",
                        SHOW(name, name_len));
    if (json_array_size(off) != 2)
        return s3d_fail(S3D_EFMT_OFFSETS, "tensor \"%.*s\": data_offsets has %zu entries, not 2",
                        SHOW(name, name_len), json_array_size(off));
    rc = array_uint(off, 0, S3D_EFMT_OFFSETS, "data_offsets", name, name_len, &b);
    if (rc == 0)
        rc = array_uint(off, 1, S3D_EFMT_OFFSETS, "data_offsets", name, name_len, &e);
    if (rc < 0)
        return rc;
    if (e < b)
        return s3d_fail(S3D_EFMT_OFFSETS,
                        "tensor \"%.*s\": data_offsets end %" PRId64 " is before begin %" PRId64,
                        SHOW(name, name_len), e, b);
    t->begin = (uint64_t)b;
    t->end = (uint64_t)e;
    return 0;
}

/* qsort_r comparators; ctx is the tensor array. */
static int cmp_offsets(const void *pa, const void *pb, void *ctx)
{
    const struct s3d_st_tensor *t = ctx;
    uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
    if (t[a].begin != t[b].begin)
        return t[a].begin < t[b].begin ? -1 : 1;
    if (t[a].end != t[b].end)
        return t[a].end < t[b].end ? -1 : 1;
    return a < b ? -1 : a > b; /* header order */
}

static int cmp_names(const void *pa, const void *pb, void *ctx)
{
    const struct s3d_st_tensor *t = ctx;
    return strcmp(t[*(const uint32_t *)pa].name, t[*(const uint32_t *)pb].name);
}

/* Step 5: the sorted tensors tile [0, data_len) exactly, each as long as its shape says. */
static int check_layout(struct s3d_st_header *h)
{
    uint64_t pos = 0;
    for (size_t i = 0; i < h->n_tensors; i++) {
        const struct s3d_st_tensor *t = &h->tensors[i];
        uint64_t nbytes;
        int rc;
        if (t->begin < pos)
            return s3d_fail(S3D_EFMT_OVERLAP,
                            "tensor \"%.*s\" [%" PRIu64 ", %" PRIu64 ") overlaps tensor \"%.*s\" "
                            "[%" PRIu64 ", %" PRIu64 ")",
                            SHOW(t->name, t->name_len), t->begin, t->end,
                            SHOW(t[-1].name, t[-1].name_len), t[-1].begin, t[-1].end);
        if (t->begin > pos)
            return s3d_fail(S3D_EFMT_HOLE,
                            "%" PRIu64 " bytes at data offset %" PRIu64
                            " belong to no tensor (before \"%.*s\")",
                            t->begin - pos, pos, SHOW(t->name, t->name_len));
        rc = s3d_dtype_nbytes(t->dtype, t->shape, t->ndim, &nbytes);
        if (rc < 0)
            return s3d_fail_prefix(rc, "tensor \"%.*s\"", SHOW(t->name, t->name_len));
        if (t->end - t->begin != nbytes)
            return s3d_fail(S3D_EFMT_SIZE_MISMATCH,
                            "tensor \"%.*s\": data_offsets span %" PRIu64
                            " bytes but its shape and dtype %s need %" PRIu64,
                            SHOW(t->name, t->name_len), t->end - t->begin, s3d_dtype_name(t->dtype),
                            nbytes);
        pos = t->end;
    }
    h->data_len = pos;
    return 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

static int find_index(const struct s3d_st_header *h, const char *name, size_t len, size_t *index);

/* Step 7: "s3direct.crc32c" is a JSON object (as a string) of name -> 8 lowercase hex. */
static int read_crc_map(struct s3d_st_header *h, const char *text)
{
    json_error_t err;
    json_t *m = json_loads(text, JSON_REJECT_DUPLICATES, &err);
    const char *key;
    json_t *v;
    int rc = 0;

    if (m == NULL)
        return s3d_fail(S3D_EFMT_METADATA, "safetensors __metadata__ %s is not JSON: %s",
                        S3D_ST_META_CRC32C, err.text);
    if (!json_is_object(m)) {
        rc = s3d_fail(S3D_EFMT_METADATA, "safetensors __metadata__ %s is not a JSON object",
                      S3D_ST_META_CRC32C);
        goto out;
    }
    json_object_foreach(m, key, v)
    {
        size_t idx;
        const char *s = json_string_value(v);
        uint32_t crc = 0;
        if (s == NULL || json_string_length(v) != 8) {
            rc = s3d_fail(S3D_EFMT_METADATA, "%s: value for \"%.*s\" is not 8 hex digits",
                          S3D_ST_META_CRC32C, SHOW(key, strlen(key)));
            goto out;
        }
        for (int k = 0; k < 8; k++) {
            int d = hexval(s[k]);
            if (d < 0) {
                rc = s3d_fail(S3D_EFMT_METADATA,
                              "%s: value for \"%.*s\" is not 8 lowercase hex digits",
                              S3D_ST_META_CRC32C, SHOW(key, strlen(key)));
                goto out;
            }
            crc = (crc << 4) | (uint32_t)d;
        }
        if (find_index(h, key, strlen(key), &idx) < 0) {
            rc = s3d_fail(S3D_EFMT_METADATA, "%s names \"%.*s\", which is not a tensor here",
                          S3D_ST_META_CRC32C, SHOW(key, strlen(key)));
            goto out;
        }
        h->tensors[idx].has_crc32c = 1;
        h->tensors[idx].crc32c = crc;
    }
out:
    json_decref(m);
    return rc;
}

int s3d_st_parse(const char *json, size_t json_len, uint64_t object_size, struct s3d_st_header *out)
{
    json_error_t err;
    json_t *root = NULL, *v;
    const char *key;
    struct s3d_st_tensor *tmp = NULL;
    uint32_t *order = NULL;
    size_t n_keys, n_tmp = 0, bad, names_total = 0, dims_total = 0, names_used = 0, dims_used = 0;
    uint64_t total;
    const char *crc_text;
    int rc;

    memset(out, 0, sizeof(*out));
    if (json_len > S3D_ST_MAX_HEADER)
        return s3d_fail(S3D_EFMT_HEADER_SIZE,
                        "safetensors header length %zu is over the cap of %u bytes", json_len,
                        S3D_ST_MAX_HEADER);
    if (object_size != S3D_ST_OBJECT_SIZE_UNKNOWN &&
        (object_size < 8 || json_len > object_size - 8))
        return s3d_fail(S3D_EFMT_HEADER_SIZE,
                        "safetensors header length %zu runs past the end of the %" PRIu64
                        "-byte object",
                        json_len, object_size);
    if (!s3d_utf8_valid(json, json_len, &bad)) {
        char ctx[48];
        context_before(json, bad, ctx, sizeof(ctx));
        return s3d_fail(S3D_EFMT_UTF8,
                        "safetensors header is not valid UTF-8 at byte %zu, after \"%s\"", bad,
                        ctx);
    }
    root = json_loadb(json, json_len, JSON_REJECT_DUPLICATES, &err);
    if (root == NULL)
        return fail_load(&err, json, json_len);
    if (!json_is_object(root)) {
        rc = s3d_fail(S3D_EFMT_JSON, "safetensors header is a JSON %s, not an object",
                      json_is_array(root) ? "array" : "scalar");
        goto fail;
    }
    out->json_len = json_len;
    out->data_start = 8 + (uint64_t)json_len;

    /* First pass: sizes, so that names and shapes go into two blocks rather than 2n small
     * allocations (which, with jansson's own, made a 100,000-tensor header slow to free). */
    n_keys = json_object_size(root);
    json_object_foreach(root, key, v)
    {
        if (strcmp(key, "__metadata__") == 0)
            continue;
        names_total += strlen(key) + 1;
        dims_total += json_array_size(json_object_get(v, "shape"));
    }
    tmp = s3d_calloc(n_keys, sizeof(*tmp));
    order = s3d_calloc(n_keys, sizeof(*order));
    out->name_pool = s3d_calloc(names_total, 1);
    out->shape_pool = s3d_calloc(dims_total, sizeof(int64_t));
    if (tmp == NULL || order == NULL || out->name_pool == NULL || out->shape_pool == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "out of memory reading a safetensors header");
        goto fail;
    }
    /* Step 4, in header order (jansson keeps insertion order). */
    json_object_foreach(root, key, v)
    {
        struct s3d_st_tensor *t = &tmp[n_tmp];
        size_t klen = strlen(key);
        if (strcmp(key, "__metadata__") == 0) {
            rc = read_metadata(v, out);
            if (rc < 0)
                goto fail;
            continue;
        }
        if (n_tmp >= UINT32_MAX) {
            rc = s3d_fail(S3D_EFMT_HEADER_SIZE, "too many tensors in a safetensors header");
            goto fail;
        }
        t->name = out->name_pool + names_used;
        memcpy(t->name, key, klen + 1);
        t->name_len = klen;
        names_used += klen + 1;
        n_tmp++;
        rc = read_tensor(key, klen, v, t, out->shape_pool + dims_used);
        if (rc < 0)
            goto fail;
        dims_used += (size_t)t->ndim;
    }
    json_decref(root);
    root = NULL;

    /* Step 5. */
    for (size_t i = 0; i < n_tmp; i++)
        order[i] = (uint32_t)i;
    qsort_r(order, n_tmp, sizeof(*order), cmp_offsets, tmp);
    out->tensors = s3d_calloc(n_tmp, sizeof(*out->tensors));
    if (out->tensors == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "out of memory reading a safetensors header");
        goto fail;
    }
    for (size_t i = 0; i < n_tmp; i++)
        out->tensors[i] = tmp[order[i]];
    out->n_tensors = n_tmp;
    free(tmp);
    tmp = NULL;
    rc = check_layout(out);
    if (rc < 0)
        goto fail;

    /* Step 6. */
    if (object_size != S3D_ST_OBJECT_SIZE_UNKNOWN) {
        total = out->data_start + out->data_len; /* both < 2^63: no overflow */
        if (total > object_size) {
            rc = s3d_fail(S3D_EFMT_TRUNCATED,
                          "safetensors data region ends at byte %" PRIu64
                          " but the object has %" PRIu64 " bytes",
                          total, object_size);
            goto fail;
        }
        if (total < object_size) {
            rc = s3d_fail(S3D_EFMT_HOLE,
                          "the last %" PRIu64 " bytes of the object belong to no tensor",
                          object_size - total);
            goto fail;
        }
    }

    /* Name index for s3d_st_find (used by step 7 too). */
    out->by_name = s3d_calloc(out->n_tensors, sizeof(*out->by_name));
    if (out->by_name == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "out of memory reading a safetensors header");
        goto fail;
    }
    for (size_t i = 0; i < out->n_tensors; i++)
        out->by_name[i] = (uint32_t)i;
    qsort_r(out->by_name, out->n_tensors, sizeof(*out->by_name), cmp_names, out->tensors);

    /* Step 7. */
    crc_text = s3d_st_meta_get(out, S3D_ST_META_CRC32C);
    if (crc_text != NULL) {
        rc = read_crc_map(out, crc_text);
        if (rc < 0)
            goto fail;
    }
    free(order);
    return 0;

fail:
    json_decref(root);
    free(tmp);
    free(order);
    s3d_st_header_free(out);
    return rc;
}

/* Binary search of by_name; -1 if absent (records nothing). */
static int find_index(const struct s3d_st_header *h, const char *name, size_t len, size_t *index)
{
    size_t lo = 0, hi = h->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct s3d_st_tensor *t = &h->tensors[h->by_name[mid]];
        /* strcmp order, for strings without NUL: bytes, then the shorter first. */
        int c = memcmp(t->name, name, S3D_MIN(t->name_len, len));
        if (c == 0)
            c = t->name_len < len ? -1 : t->name_len > len;
        if (c == 0) {
            *index = h->by_name[mid];
            return 0;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

int s3d_st_find(const struct s3d_st_header *h, const char *name, size_t len, size_t *index)
{
    if (find_index(h, name, len, index) < 0)
        return s3d_fail(S3D_ENOTENSOR, "no tensor \"%.*s\" in the safetensors header",
                        SHOW(name, len));
    return 0;
}

const char *s3d_st_meta_get(const struct s3d_st_header *h, const char *key)
{
    for (size_t i = 0; i < h->n_metadata; i++) {
        if (strcmp(h->metadata[i].key, key) == 0)
            return h->metadata[i].value;
    }
    return NULL;
}
