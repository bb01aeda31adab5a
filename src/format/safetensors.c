/* safetensors.c - parsing and validating a safetensors header.
 *
 * Outline, mirroring the reference's read_metadata + Metadata::validate:
 *   1. the length field against the 100 MB cap and the object size;
 *   2. the whole header must be UTF-8 (checked here first, so that the error can say where;
 *      jansson would only say "invalid UTF-8");
 *   3. the top-level object is walked entry by entry ("the top level" below), each value
 *      parsed alone by jansson, refusing repeated keys (its default keeps the last one
 *      silently); repeated tensor names are found by sorting the names;
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
#include "common/crc32c.h"
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

/* ---- the top level, one entry at a time ------------------------------------------------
 * jansson builds a whole document, which for a 100 MB header of ~1.7 M tensors took 1.8 GB.
 * So the top-level object (and the CRC map) is walked here by a small scanner that only finds
 * where each key and value start and end; every value is then parsed alone by jansson (a DOM
 * of a few dozen nodes, freed at once) and checked as before. Peak memory is the results
 * plus one entry. The scanner does not judge the inside of a value: jansson does. */
struct cursor {
    const char *s;
    size_t len, pos;
};

static void skip_ws(struct cursor *c)
{
    while (c->pos < c->len && (c->s[c->pos] == ' ' || c->s[c->pos] == '\t' ||
                               c->s[c->pos] == '\n' || c->s[c->pos] == '\r'))
        c->pos++;
}

/* Just past the closing quote of the JSON string that opens at s[pos]; 0 if it never closes.
 * *plain: no backslash and no control character (the bytes are the string itself). */
static size_t string_end(const char *s, size_t len, size_t pos, int *plain)
{
    *plain = 1;
    for (size_t i = pos + 1; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '\\') {
            *plain = 0;
            i++;
        } else if (ch == '"') {
            return i + 1;
        } else if (ch < 0x20) {
            *plain = 0;
        }
    }
    return 0;
}

/* Just past the JSON value that starts at s[pos] (brackets matched, strings skipped); 0 if it
 * runs off the end. A scalar ends at the next ',', '}', ']' or white space. */
static size_t value_end(const char *s, size_t len, size_t pos)
{
    size_t depth = 0;
    int plain;
    if (pos >= len)
        return 0;
    if (s[pos] == '"')
        return string_end(s, len, pos, &plain);
    if (s[pos] != '{' && s[pos] != '[') {
        size_t i = pos;
        while (i < len && memchr(",}] \t\r\n", s[i], 7) == NULL)
            i++;
        return i;
    }
    for (size_t i = pos; i < len; i++) {
        char ch = s[i];
        if (ch == '"') {
            size_t e = string_end(s, len, i, &plain);
            if (e == 0)
                return 0;
            i = e - 1;
        } else if (ch == '{' || ch == '[') {
            depth++;
        } else if (ch == '}' || ch == ']') {
            if (--depth == 0)
                return i + 1;
        }
    }
    return 0;
}

static int fail_syntax(const struct cursor *c, const char *what)
{
    int line = 1, col = 1;
    for (size_t i = 0; i < c->pos && i < c->len; i++) {
        if (c->s[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    return s3d_fail(S3D_EFMT_JSON, "safetensors header is not valid JSON: %s (line %d, column %d)",
                    what, line, col);
}

/* The key that opens at c->pos, decoded into a malloc'd NUL-terminated string; moves past it
 * and the ':' after it. A plain key is copied; one with escapes is decoded by jansson (which
 * refuses \u0000 and lone surrogates). */
static int read_key(struct cursor *c, char **key, size_t *key_len, int code, const char *where)
{
    int plain;
    size_t end;
    *key = NULL;
    if (c->pos >= c->len || c->s[c->pos] != '"')
        return code == S3D_EFMT_JSON ? fail_syntax(c, "expected a string key")
                                     : s3d_fail(code, "%s is not JSON: expected a key", where);
    end = string_end(c->s, c->len, c->pos, &plain);
    if (end == 0)
        return code == S3D_EFMT_JSON ? fail_syntax(c, "unterminated string")
                                     : s3d_fail(code, "%s is not JSON: unterminated key", where);
    if (plain) {
        *key_len = end - c->pos - 2;
        *key = s3d_strndup(c->s + c->pos + 1, *key_len);
        if (*key == NULL)
            return s3d_fail(S3D_ENOMEM, "out of memory reading a safetensors header");
    } else {
        json_error_t err;
        json_t *j = json_loadb(c->s + c->pos, end - c->pos, JSON_DECODE_ANY, &err);
        if (j == NULL)
            return code == S3D_EFMT_JSON ? fail_load(&err, c->s + c->pos, end - c->pos)
                                         : s3d_fail(code, "%s is not JSON: %s", where, err.text);
        *key_len = json_string_length(j);
        *key = s3d_strndup(json_string_value(j), *key_len);
        json_decref(j);
        if (*key == NULL)
            return s3d_fail(S3D_ENOMEM, "out of memory reading a safetensors header");
    }
    c->pos = end;
    skip_ws(c);
    if (c->pos >= c->len || c->s[c->pos] != ':') {
        free(*key);
        *key = NULL;
        return code == S3D_EFMT_JSON ? fail_syntax(c, "expected ':'")
                                     : s3d_fail(code, "%s is not JSON: expected ':'", where);
    }
    c->pos++;
    skip_ws(c);
    return 0;
}

/* After a value: moves past the ',' (returns 1) or the closing '}' (returns 0); else < 0. */
static int next_member(struct cursor *c, int code, const char *where)
{
    skip_ws(c);
    if (c->pos < c->len && c->s[c->pos] == ',') {
        c->pos++;
        skip_ws(c);
        return 1;
    }
    if (c->pos < c->len && c->s[c->pos] == '}') {
        c->pos++;
        return 0;
    }
    return code == S3D_EFMT_JSON ? fail_syntax(c, "expected ',' or '}'")
                                 : s3d_fail(code, "%s is not JSON: expected ',' or '}'", where);
}

/* Enters the object that should open at c, after blanks: 1 when members follow (c at the
 * first key), 0 when it is empty (c past its '}'), -1 when there is no '{' (c at what is there
 * instead; no error recorded: the caller says what it is). */
static int open_object(struct cursor *c)
{
    skip_ws(c);
    if (c->pos >= c->len || c->s[c->pos] != '{')
        return -1;
    c->pos++;
    skip_ws(c);
    if (c->pos < c->len && c->s[c->pos] == '}') {
        c->pos++;
        return 0;
    }
    return 1;
}

/* After the object: 1 when only blanks are left (c moved past them). */
static int at_end(struct cursor *c)
{
    skip_ws(c);
    return c->pos == c->len;
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
        /* Each entry was checked alone (end >= begin), then sorted by offset. */
        S3D_ASSERT(t->begin <= t->end && (i == 0 || t[-1].begin <= t->begin));
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

/* Step 7: "s3direct.crc32c" is a JSON object (as a string) of name -> 8 lowercase hex.
 * Walked with the scanner (it has one entry per tensor). */
static int read_crc_map(struct s3d_st_header *h, const char *text)
{
    static const char where[] = "safetensors __metadata__ " S3D_ST_META_CRC32C;
    struct cursor c = {.s = text, .len = strlen(text), .pos = 0};
    char *key = NULL;
    size_t klen;
    int more, rc = 0;

    more = open_object(&c);
    if (more < 0) {
        /* Which error: not JSON, or JSON but not an object (asked of jansson only for a
         * short text: a long one would be a whole document again). */
        json_t *j = c.len < 65536 ? json_loads(text, JSON_DECODE_ANY, NULL) : NULL;
        int is_json = j != NULL || c.len >= 65536;
        json_decref(j);
        return s3d_fail(S3D_EFMT_METADATA, "%s is not %s", where,
                        is_json ? "a JSON object" : "JSON");
    }
    while (more) {
        size_t idx, vend;
        uint32_t crc = 0;
        int plain = 0;
        rc = read_key(&c, &key, &klen, S3D_EFMT_METADATA, where);
        if (rc < 0)
            return rc;
        vend = c.pos < c.len && c.s[c.pos] == '"' ? string_end(c.s, c.len, c.pos, &plain) : 0;
        if (vend != c.pos + 10 || !plain) {
            rc = s3d_fail(S3D_EFMT_METADATA, "%s: value for \"%.*s\" is not 8 hex digits",
                          S3D_ST_META_CRC32C, SHOW(key, klen));
            goto out;
        }
        for (int k = 0; k < 8; k++) {
            int d = hexval(c.s[c.pos + 1 + (size_t)k]);
            if (d < 0) {
                rc = s3d_fail(S3D_EFMT_METADATA,
                              "%s: value for \"%.*s\" is not 8 lowercase hex digits",
                              S3D_ST_META_CRC32C, SHOW(key, klen));
                goto out;
            }
            crc = (crc << 4) | (uint32_t)d;
        }
        if (find_index(h, key, klen, &idx) < 0) {
            rc = s3d_fail(S3D_EFMT_METADATA, "%s names \"%.*s\", which is not a tensor here",
                          S3D_ST_META_CRC32C, SHOW(key, klen));
            goto out;
        }
        if (h->tensors[idx].has_crc32c) {
            rc = s3d_fail(S3D_EFMT_METADATA, "%s: duplicate key \"%.*s\"", S3D_ST_META_CRC32C,
                          SHOW(key, klen));
            goto out;
        }
        h->tensors[idx].has_crc32c = 1;
        h->tensors[idx].crc32c = crc;
        free(key);
        key = NULL;
        c.pos = vend;
        more = next_member(&c, S3D_EFMT_METADATA, where);
        if (more < 0)
            return more;
    }
    if (!at_end(&c))
        rc = s3d_fail(S3D_EFMT_METADATA, "%s is not JSON: text after the object", where);
out:
    free(key);
    return rc;
}

/* Grows *p (elements of size sz) to hold at least need; 0 or S3D_ENOMEM. */
static int grow(void **p, size_t *cap, size_t need, size_t sz)
{
    size_t ncap = *cap ? *cap : 64;
    void *q;
    if (need <= *cap)
        return 0;
    while (ncap < need)
        ncap *= 2;
    q = s3d_reallocarray(*p, ncap, sz);
    if (q == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory reading a safetensors header");
    *p = q;
    *cap = ncap;
    return 0;
}

static int cmp_tmp_names(const void *pa, const void *pb, void *ctx)
{
    const struct s3d_st_tensor *t = ctx;
    const struct s3d_st_tensor *a = &t[*(const uint32_t *)pa], *b = &t[*(const uint32_t *)pb];
    int c = memcmp(a->name, b->name, S3D_MIN(a->name_len, b->name_len));
    return c != 0 ? c : (a->name_len > b->name_len) - (a->name_len < b->name_len);
}

/* Steps 3 and 4: walks the top-level object entry by entry (see "the top level" above),
 * reading __metadata__ into out and the tensors into *tmp_out in header order, their names
 * and shapes into out->name_pool and out->shape_pool. A repeated name is refused. */
static int read_entries(const char *json, size_t json_len, struct s3d_st_header *out,
                        struct s3d_st_tensor **tmp_out, size_t *n_out)
{
    struct cursor c = {.s = json, .len = json_len, .pos = 0};
    struct s3d_st_tensor *tmp = NULL;
    size_t *name_off = NULL, *dim_off = NULL;
    size_t cap_t = 0, cap_no = 0, cap_do = 0, cap_names = 0, cap_dims = 0;
    size_t n = 0, names_used = 0, dims_used = 0;
    uint32_t *order = NULL;
    char *key = NULL;
    json_t *v = NULL;
    int more, seen_meta = 0, rc = 0;

    more = open_object(&c);
    if (more < 0) {
        if (c.pos < c.len && c.s[c.pos] == '[' && value_end(c.s, c.len, c.pos) != 0)
            return s3d_fail(S3D_EFMT_JSON, "safetensors header is a JSON array, not an object");
        return fail_syntax(&c, "expected '{'");
    }
    while (more) {
        json_error_t err;
        size_t klen, vend;
        rc = read_key(&c, &key, &klen, S3D_EFMT_JSON, NULL);
        if (rc < 0)
            goto out;
        vend = value_end(c.s, c.len, c.pos);
        if (vend == 0 || vend == c.pos) {
            rc = fail_syntax(&c, vend == 0 ? "the header ends inside a value" : "expected a value");
            goto out;
        }
        v = json_loadb(c.s + c.pos, vend - c.pos, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &err);
        if (v == NULL) {
            rc = fail_load(&err, c.s + c.pos, vend - c.pos);
            goto out;
        }
        if (strcmp(key, "__metadata__") == 0 && klen == strlen(key)) {
            if (seen_meta++) {
                rc = s3d_fail(S3D_EFMT_DUPLICATE, "safetensors header: duplicate object key near "
                                                  "'\"__metadata__\"'");
                goto out;
            }
            rc = read_metadata(v, out);
            if (rc < 0)
                goto out;
        } else {
            struct s3d_st_tensor *t;
            json_t *sh = json_is_object(v) ? json_object_get(v, "shape") : NULL;
            size_t nd = json_is_array(sh) ? json_array_size(sh) : 0;
            if (n >= UINT32_MAX) {
                rc = s3d_fail(S3D_EFMT_HEADER_SIZE, "too many tensors in a safetensors header");
                goto out;
            }
            if ((rc = grow((void **)&tmp, &cap_t, n + 1, sizeof(*tmp))) < 0 ||
                (rc = grow((void **)&name_off, &cap_no, n + 1, sizeof(*name_off))) < 0 ||
                (rc = grow((void **)&dim_off, &cap_do, n + 1, sizeof(*dim_off))) < 0 ||
                (rc = grow((void **)&out->name_pool, &cap_names, names_used + klen + 1, 1)) < 0 ||
                (rc = grow((void **)&out->shape_pool, &cap_dims, dims_used + nd + 1,
                           sizeof(int64_t))) < 0)
                goto out;
            t = &tmp[n];
            memset(t, 0, sizeof(*t));
            memcpy(out->name_pool + names_used, key, klen + 1);
            t->name_len = klen;
            name_off[n] = names_used;
            dim_off[n] = dims_used;
            names_used += klen + 1;
            n++;
            rc = read_tensor(key, klen, v, t, out->shape_pool + dims_used);
            if (rc < 0)
                goto out;
            dims_used += (size_t)t->ndim;
        }
        json_decref(v);
        v = NULL;
        free(key);
        key = NULL;
        c.pos = vend;
        more = next_member(&c, S3D_EFMT_JSON, NULL);
        if (more < 0) {
            rc = more;
            goto out;
        }
    }
    if (!at_end(&c)) {
        rc = fail_syntax(&c, "text after the top-level object");
        goto out;
    }
    /* The pools are final now: point the tensors into them. */
    for (size_t i = 0; i < n; i++) {
        tmp[i].name = out->name_pool + name_off[i];
        tmp[i].shape = tmp[i].ndim > 0 ? out->shape_pool + dim_off[i] : NULL;
    }
    /* A name given twice (jansson refused that while it saw the whole document). */
    order = s3d_calloc(n > 0 ? n : 1, sizeof(*order));
    if (order == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "out of memory reading a safetensors header");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        order[i] = (uint32_t)i;
    qsort_r(order, n, sizeof(*order), cmp_tmp_names, tmp);
    for (size_t i = 1; i < n; i++)
        if (cmp_tmp_names(&order[i - 1], &order[i], tmp) == 0) {
            rc = s3d_fail(S3D_EFMT_DUPLICATE,
                          "safetensors header: duplicate object key near '\"%.*s\"'",
                          SHOW(tmp[order[i]].name, tmp[order[i]].name_len));
            goto out;
        }
out:
    json_decref(v);
    free(key);
    free(order);
    free(name_off);
    free(dim_off);
    if (rc < 0) {
        free(tmp);
        return rc;
    }
    *tmp_out = tmp;
    *n_out = n;
    return 0;
}

/* Steps 1 and 2: the length against the cap and the object size, then UTF-8. */
static int check_length_and_utf8(const char *json, size_t json_len, uint64_t object_size)
{
    size_t bad;
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
    return 0;
}

/* Step 5, first half: the n tensors of tmp (header order; freed here in every case) become
 * out->tensors sorted by (begin, end). */
static int sort_by_offset(struct s3d_st_tensor *tmp, size_t n, struct s3d_st_header *out)
{
    uint32_t *order = s3d_calloc(n, sizeof(*order));
    int rc = 0;
    if (order == NULL && n > 0) {
        rc = s3d_fail(S3D_ENOMEM, "out of memory reading a safetensors header");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        order[i] = (uint32_t)i;
    if (n > 1) /* qsort_r's base is nonnull: no NULL array for a header with no tensor */
        qsort_r(order, n, sizeof(*order), cmp_offsets, tmp);
    out->tensors = s3d_calloc(n, sizeof(*out->tensors));
    if (out->tensors == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "out of memory reading a safetensors header");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        out->tensors[i] = tmp[order[i]];
    out->n_tensors = n;
out:
    free(order);
    free(tmp);
    return rc;
}

/* Step 6: the data region ends exactly at the object's end (when its size is known). */
static int check_object_end(const struct s3d_st_header *h, uint64_t object_size)
{
    uint64_t total;
    if (object_size == S3D_ST_OBJECT_SIZE_UNKNOWN)
        return 0;
    total = h->data_start + h->data_len; /* both < 2^63: no overflow */
    if (total > object_size)
        return s3d_fail(S3D_EFMT_TRUNCATED,
                        "safetensors data region ends at byte %" PRIu64
                        " but the object has %" PRIu64 " bytes",
                        total, object_size);
    if (total < object_size)
        return s3d_fail(S3D_EFMT_HOLE,
                        "the last %" PRIu64 " bytes of the object belong to no tensor",
                        object_size - total);
    return 0;
}

/* The name index for s3d_st_find (step 7 uses it too). */
static int index_names(struct s3d_st_header *h)
{
    h->by_name = s3d_calloc(h->n_tensors, sizeof(*h->by_name));
    if (h->by_name == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory reading a safetensors header");
    for (size_t i = 0; i < h->n_tensors; i++)
        h->by_name[i] = (uint32_t)i;
    qsort_r(h->by_name, h->n_tensors, sizeof(*h->by_name), cmp_names, h->tensors);
    return 0;
}

/* Step 7: the CRC map, when the metadata has one. */
static int read_crcs(struct s3d_st_header *h)
{
    const char *crc_text = s3d_st_meta_get(h, S3D_ST_META_CRC32C);
    return crc_text != NULL ? read_crc_map(h, crc_text) : 0;
}

/* Bits in which the first n bytes of a and b differ. */
static unsigned bit_distance(const char *a, const char *b, size_t n)
{
    unsigned d = 0;
    for (size_t i = 0; i < n; i++)
        d += (unsigned)__builtin_popcount((unsigned char)(a[i] ^ b[i]));
    return d;
}

/* The header's own CRC (safetensors.h): checked when the JSON starts with the prefix s3direct
 * writes; a start a few bits from it is that prefix damaged, not another writer's header. */
#define HEADER_CRC_NEAR_BITS 3
static int check_header_crc(const char *json, size_t json_len)
{
    static const char prefix[] = S3D_ST_HEADER_CRC_PREFIX;
    const size_t plen = sizeof(prefix) - 1;
    uint32_t stored = 0, crc;
    unsigned d;

    if (json_len < plen)
        return 0;
    d = bit_distance(json, prefix, plen);
    if (d > HEADER_CRC_NEAR_BITS)
        return 0; /* not written by s3direct with CRCs: nothing to check */
    if (d > 0)
        return s3d_fail(S3D_ECHECKSUM,
                        "safetensors header damaged: its first %zu bytes are %u bit(s) away from "
                        "the " S3D_ST_META_HEADER_CRC32C " entry s3direct writes there",
                        plen, d);
    if (json_len < plen + 9 || json[plen + 8] != '"')
        return s3d_fail(S3D_ECHECKSUM, "safetensors header damaged: " S3D_ST_META_HEADER_CRC32C
                                       " is not 8 hex digits");
    for (size_t i = 0; i < 8; i++) {
        char ch = json[plen + i];
        int v = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (v < 0)
            return s3d_fail(S3D_ECHECKSUM, "safetensors header damaged: " S3D_ST_META_HEADER_CRC32C
                                           " is not 8 lowercase hex digits");
        stored = stored << 4 | (uint32_t)v;
    }
    crc = s3d_crc32c(0, json, plen);
    crc = s3d_crc32c(crc, "00000000", 8);
    crc = s3d_crc32c(crc, json + plen + 8, json_len - plen - 8);
    if (crc != stored)
        return s3d_fail(S3D_ECHECKSUM,
                        "safetensors header CRC32C mismatch (stored %08x, computed %08x over "
                        "its %zu bytes): the header is damaged",
                        stored, crc, json_len);
    return 0;
}

int s3d_st_parse(const char *json, size_t json_len, uint64_t object_size, struct s3d_st_header *out)
{
    struct s3d_st_tensor *tmp = NULL;
    size_t n_tmp = 0;
    int rc;

    memset(out, 0, sizeof(*out));
    /* First: a damaged header says so, rather than whatever its damage broke. */
    rc = check_header_crc(json, json_len);
    if (rc < 0)
        return rc;
    rc = check_length_and_utf8(json, json_len, object_size);
    if (rc < 0)
        return rc;
    out->json_len = json_len;
    out->data_start = 8 + (uint64_t)json_len;
    rc = read_entries(json, json_len, out, &tmp, &n_tmp);
    if (rc == 0)
        rc = sort_by_offset(tmp, n_tmp, out);
    if (rc == 0)
        rc = check_layout(out);
    if (rc == 0)
        rc = check_object_end(out, object_size);
    if (rc == 0)
        rc = index_names(out);
    if (rc == 0)
        rc = read_crcs(out);
    if (rc < 0)
        s3d_st_header_free(out);
    return rc;
}

/* Binary search of by_name; -1 if absent (records nothing). */
static int find_index(const struct s3d_st_header *h, const char *name, size_t len, size_t *index)
{
    size_t lo = 0, hi = h->n_tensors;
    S3D_ASSERT(h->by_name != NULL || h->n_tensors == 0); /* index_names ran */
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
