/* index.c - the sharded checkpoint index (NAME.safetensors.index.json): parse, build, and
 * the shard names derived from and resolved against it. */
#include "format/index.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/compiler.h"
#include "common/error.h"
#include "format/jsonbuf.h"
#include "format/safetensors.h"

#define SHOWN   160
#define SHOW(s) (int)S3D_MIN(strlen(s), (size_t)SHOWN), (s)

void s3d_st_index_free(struct s3d_st_index *ix)
{
    if (ix == NULL)
        return;
    for (size_t i = 0; i < ix->n_tensors; i++)
        free(ix->tensors[i].name);
    free(ix->tensors);
    for (size_t i = 0; i < ix->n_shards; i++)
        free(ix->shards[i]);
    free(ix->shards);
    free(ix->generation);
    memset(ix, 0, sizeof(*ix));
}

/* Why shard[0..len) may not be joined to a folder or key prefix; NULL if it may. */
static const char *shard_path_problem(const char *s, size_t len)
{
    size_t start = 0;
    if (len == 0)
        return "it is empty";
    if (s[0] == '/')
        return "it is absolute";
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\\')
            return "it contains a backslash";
        if (c < 0x20 || c == 0x7F)
            return "it contains a control character";
        if (c == ':') {
            /* A scheme ("s3:", "file:") or a drive ("C:") if everything before the colon
             * could be one; a colon later in a file name is harmless. */
            size_t k = 0;
            while (k < i &&
                   (s[k] == '+' || s[k] == '-' || s[k] == '.' || (s[k] >= '0' && s[k] <= '9') ||
                    (s[k] >= 'a' && s[k] <= 'z') || (s[k] >= 'A' && s[k] <= 'Z')))
                k++;
            if (k == i)
                return "it starts with a URI scheme or drive";
        }
    }
    for (size_t i = 0; i <= len; i++) {
        if (i == len || s[i] == '/') {
            size_t n = i - start;
            if (n == 0)
                return "it has an empty path component";
            if ((n == 1 && s[start] == '.') || (n == 2 && s[start] == '.' && s[start + 1] == '.'))
                return "it has a \".\" or \"..\" component";
            start = i + 1;
        }
    }
    return NULL;
}

int s3d_st_shard_path_check(const char *shard, size_t len)
{
    const char *why = shard_path_problem(shard, len);
    if (why != NULL)
        return s3d_fail(S3D_EFMT_SHARD_PATH, "shard name \"%.*s\" is refused: %s",
                        (int)S3D_MIN(len, (size_t)SHOWN), shard, why);
    return 0;
}

/* Index of shard in ix->shards, adding it if new; -1 on ENOMEM. seen maps each shard name to
 * its index (a jansson object as a hash table), so a hostile index with a million distinct
 * shards stays linear. */
static long shard_slot(struct s3d_st_index *ix, json_t *seen, const char *shard, size_t *cap)
{
    json_t *hit = json_object_get(seen, shard);
    char **grown;
    if (hit != NULL)
        return (long)json_integer_value(hit);
    if (ix->n_shards == *cap) {
        size_t ncap = *cap ? *cap * 2 : 8;
        grown = s3d_reallocarray(ix->shards, ncap, sizeof(*ix->shards));
        if (grown == NULL)
            return -1;
        ix->shards = grown;
        *cap = ncap;
    }
    ix->shards[ix->n_shards] = s3d_strdup(shard);
    if (ix->shards[ix->n_shards] == NULL ||
        json_object_set_new(seen, shard, json_integer((json_int_t)ix->n_shards)) < 0) {
        free(ix->shards[ix->n_shards]);
        return -1;
    }
    return (long)ix->n_shards++;
}

static int read_metadata(json_t *md, struct s3d_st_index *out)
{
    json_t *ts, *gen;
    size_t bad;
    if (md == NULL || json_is_null(md))
        return 0;
    if (!json_is_object(md))
        return s3d_fail(S3D_EFMT_INDEX, "index \"metadata\" is not an object");
    gen = json_object_get(md, S3D_ST_META_GENERATION);
    if (gen != NULL) {
        if (!json_is_string(gen))
            return s3d_fail(S3D_EFMT_INDEX, "index metadata.%s is not a string",
                            S3D_ST_META_GENERATION);
        /* A NUL inside would make the C string shorter than the JSON one. */
        if (strlen(json_string_value(gen)) != json_string_length(gen) ||
            !s3d_utf8_valid(json_string_value(gen), json_string_length(gen), &bad))
            return s3d_fail(S3D_EFMT_INDEX, "index metadata.%s holds a NUL character",
                            S3D_ST_META_GENERATION);
        out->generation = s3d_strdup(json_string_value(gen));
        if (out->generation == NULL)
            return s3d_fail(S3D_ENOMEM, "out of memory parsing an index");
    }
    ts = json_object_get(md, "total_size");
    if (ts == NULL || json_is_null(ts))
        return 0;
    if (json_is_integer(ts) && json_integer_value(ts) >= 0) {
        out->total_size = (uint64_t)json_integer_value(ts);
    } else if (json_is_real(ts) && json_real_value(ts) >= 0 && json_real_value(ts) < 0x1p63 &&
               json_real_value(ts) == (double)(uint64_t)json_real_value(ts)) {
        /* Some writers emit 1.5e10; accept a whole number in any JSON spelling. */
        out->total_size = (uint64_t)json_real_value(ts);
    } else {
        return s3d_fail(S3D_EFMT_INDEX, "index metadata.total_size is not a non-negative "
                                        "integer");
    }
    out->has_total_size = 1;
    return 0;
}

int s3d_st_index_parse(const char *json, size_t len, size_t max_len, struct s3d_st_index *out)
{
    json_error_t err;
    json_t *root = NULL, *wm, *v, *seen = NULL;
    const char *key;
    size_t bad, shard_cap = 0;
    int rc;

    memset(out, 0, sizeof(*out));
    if (max_len == 0)
        max_len = S3D_ST_INDEX_MAX;
    if (len > max_len)
        return s3d_fail(S3D_EFMT_INDEX, "index of %zu bytes is over the cap of %zu", len, max_len);
    if (!s3d_utf8_valid(json, len, &bad))
        return s3d_fail(S3D_EFMT_INDEX, "index is not valid UTF-8 at byte %zu", bad);
    root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &err);
    if (root == NULL) {
        if (json_error_code(&err) == json_error_out_of_memory)
            return s3d_fail(S3D_ENOMEM, "out of memory parsing an index");
        return s3d_fail(S3D_EFMT_INDEX, "index is not valid JSON: %s (line %d, column %d)",
                        err.text, err.line, err.column);
    }
    if (!json_is_object(root)) {
        rc = s3d_fail(S3D_EFMT_INDEX, "index is not a JSON object");
        goto fail;
    }
    rc = read_metadata(json_object_get(root, "metadata"), out);
    if (rc < 0)
        goto fail;
    wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm)) {
        rc = s3d_fail(S3D_EFMT_INDEX, "index has no \"weight_map\" object");
        goto fail;
    }
    out->tensors = s3d_calloc(json_object_size(wm), sizeof(*out->tensors));
    seen = json_object();
    if (out->tensors == NULL || seen == NULL)
        goto nomem;
    json_object_foreach(wm, key, v)
    {
        struct s3d_st_index_entry *e = &out->tensors[out->n_tensors];
        const char *why;
        long slot;
        if (!json_is_string(v)) {
            rc = s3d_fail(S3D_EFMT_INDEX, "index weight_map[\"%.*s\"] is not a string", SHOW(key));
            goto fail;
        }
        why = shard_path_problem(json_string_value(v), json_string_length(v));
        if (why != NULL) {
            rc = s3d_fail(S3D_EFMT_SHARD_PATH,
                          "index weight_map[\"%.*s\"] = \"%.*s\" is refused: %s", SHOW(key),
                          (int)S3D_MIN(json_string_length(v), (size_t)SHOWN), json_string_value(v),
                          why);
            goto fail;
        }
        slot = shard_slot(out, seen, json_string_value(v), &shard_cap);
        e->name = s3d_strdup(key);
        if (slot < 0 || e->name == NULL) {
            free(e->name);
            goto nomem;
        }
        e->shard = (uint32_t)slot;
        out->n_tensors++;
    }
    rc = 0;
fail:
    json_decref(seen);
    json_decref(root);
    if (rc < 0)
        s3d_st_index_free(out);
    return rc;

nomem:
    rc = s3d_fail(S3D_ENOMEM, "out of memory parsing an index");
    goto fail;
}

int s3d_st_index_build(const char *const *tensors, const char *const *shards, size_t n,
                       uint64_t total_size, const char *generation, struct s3d_dynbuf *out)
{
    json_t *root = NULL, *wm, *md;
    size_t bad;
    int rc;

    s3d_dynbuf_reset(out);
    if (total_size > (uint64_t)INT64_MAX)
        return s3d_fail(S3D_EINVAL, "index total_size %" PRIu64 " is over 2^63", total_size);
    wm = json_object();
    root = json_pack("{s:{s:I},s:o}", "metadata", "total_size", (json_int_t)total_size,
                     "weight_map", wm);
    if (root == NULL)
        goto nomem;
    if (generation != NULL) {
        if (!s3d_utf8_valid(generation, strlen(generation), &bad)) {
            rc = s3d_fail(S3D_EINVAL, "index generation id is not valid UTF-8");
            goto fail;
        }
        md = json_object_get(root, "metadata");
        if (json_object_set_new(md, S3D_ST_META_GENERATION, json_string(generation)) < 0)
            goto nomem;
    }
    for (size_t i = 0; i < n; i++) {
        if (tensors[i] == NULL || shards[i] == NULL) {
            rc = s3d_fail(S3D_EINVAL, "index entry %zu has a NULL name", i);
            goto fail;
        }
        if (!s3d_utf8_valid(tensors[i], strlen(tensors[i]), &bad) ||
            !s3d_utf8_valid(shards[i], strlen(shards[i]), &bad)) {
            rc = s3d_fail(S3D_EINVAL, "index entry %zu is not valid UTF-8", i);
            goto fail;
        }
        if (shard_path_problem(shards[i], strlen(shards[i])) != NULL) {
            /* Fails (the problem is known): called for its message, which gets the prefix. */
            s3d_ignore_rc(s3d_st_shard_path_check(shards[i], strlen(shards[i])));
            rc = s3d_fail_prefix(S3D_EINVAL, "index entry \"%.*s\"", SHOW(tensors[i]));
            goto fail;
        }
        if (json_object_get(wm, tensors[i]) != NULL) {
            rc = s3d_fail(S3D_EINVAL, "tensor \"%.*s\" is in the index twice", SHOW(tensors[i]));
            goto fail;
        }
        if (json_object_set_new(wm, tensors[i], json_string(shards[i])) < 0)
            goto nomem;
    }
    /* Indented as huggingface_hub writes it (json.dumps(indent=2)). */
    rc = s3d_json_dump_to(root, JSON_INDENT(2), out);
    if (rc == 0)
        rc = s3d_dynbuf_append(out, "\n", 1);
    if (rc < 0) {
        if (rc == S3D_ETOOBIG) {
            rc = s3d_fail(S3D_ETOOBIG, "index for %zu tensors is over %zu bytes", n, out->max);
            goto fail;
        }
        goto nomem;
    }
    rc = 0;
fail:
    json_decref(root);
    if (rc < 0)
        s3d_dynbuf_free(out);
    return rc;

nomem:
    rc = s3d_fail(S3D_ENOMEM, "out of memory building an index");
    goto fail;
}

/* The NAME of an index path: its last component without the suffix; 0 if it has none. */
static int index_base(const char *index_path, const char **base, size_t *len)
{
    const char *slash = strrchr(index_path, '/');
    size_t blen, slen = strlen(S3D_ST_INDEX_SUFFIX);
    *base = slash != NULL ? slash + 1 : index_path;
    blen = strlen(*base);
    if (blen <= slen || strcmp(*base + blen - slen, S3D_ST_INDEX_SUFFIX) != 0)
        return 0;
    *len = blen - slen;
    return 1;
}

int s3d_st_shard_name(const char *index_path, uint32_t i, uint32_t n, struct s3d_dynbuf *out)
{
    return s3d_st_shard_name_tok(index_path, NULL, i, n, out);
}

int s3d_st_shard_name_tok(const char *index_path, const char *token, uint32_t i, uint32_t n,
                          struct s3d_dynbuf *out)
{
    const char *base;
    size_t blen;
    int rc;

    s3d_dynbuf_reset(out);
    if (index_path == NULL)
        return s3d_fail(S3D_EINVAL, "index path is NULL");
    if (i == 0 || i > n)
        return s3d_fail(S3D_EINVAL, "shard number %" PRIu32 " is not in 1..%" PRIu32, i, n);
    if (!index_base(index_path, &base, &blen))
        return s3d_fail(S3D_EINVAL, "\"%.*s\" is not NAME%s", SHOW(index_path),
                        S3D_ST_INDEX_SUFFIX);
    if (token != NULL) {
        size_t tl = strlen(token);
        if (tl != S3D_ST_SHARD_TOKEN_LEN || strspn(token, "0123456789abcdef") != tl)
            return s3d_fail(S3D_EINVAL, "shard token \"%.*s\" is not %d lowercase hex digits",
                            SHOW(token), S3D_ST_SHARD_TOKEN_LEN);
        rc = s3d_dynbuf_appendf(out, "%.*s-%s-%05" PRIu32 "-of-%05" PRIu32 ".safetensors",
                                (int)blen, base, token, i, n);
    } else {
        rc = s3d_dynbuf_appendf(out, "%.*s-%05" PRIu32 "-of-%05" PRIu32 ".safetensors", (int)blen,
                                base, i, n);
    }
    if (rc < 0)
        return s3d_fail(rc, "shard name for \"%.*s\": %s", SHOW(index_path), s3d_strerror(rc));
    return 0;
}

/* Length of the run of decimal digits at s (at most max). */
static size_t digits(const char *s, size_t max)
{
    size_t k = 0;
    while (k < max && s[k] >= '0' && s[k] <= '9')
        k++;
    return k;
}

int s3d_st_shard_name_match(const char *index_path, const char *name, size_t len)
{
    static const char ext[] = ".safetensors";
    const char *base, *p, *end = name + len;
    size_t blen, k;
    int tokened = 0;

    if (index_path == NULL || name == NULL || !index_base(index_path, &base, &blen))
        return 0;
    if (len < blen + 1 || memcmp(name, base, blen) != 0 || name[blen] != '-')
        return 0;
    p = name + blen + 1;
    /* NAME-TOKEN-: 16 hex digits then '-', unless these are the shard number's digits. */
    if ((size_t)(end - p) > S3D_ST_SHARD_TOKEN_LEN && p[S3D_ST_SHARD_TOKEN_LEN] == '-') {
        size_t h = 0;
        while (h < S3D_ST_SHARD_TOKEN_LEN &&
               ((p[h] >= '0' && p[h] <= '9') || (p[h] >= 'a' && p[h] <= 'f')))
            h++;
        if (h == S3D_ST_SHARD_TOKEN_LEN) {
            p += S3D_ST_SHARD_TOKEN_LEN + 1;
            tokened = 1;
        }
    }
    k = digits(p, (size_t)(end - p));
    if (k < 5)
        return 0;
    p += k;
    if ((size_t)(end - p) < 4 || memcmp(p, "-of-", 4) != 0)
        return 0;
    p += 4;
    k = digits(p, (size_t)(end - p));
    if (k < 5)
        return 0;
    p += k;
    if ((size_t)(end - p) != sizeof(ext) - 1 || memcmp(p, ext, sizeof(ext) - 1) != 0)
        return 0;
    return tokened ? 2 : 1;
}

int s3d_st_shard_resolve(const char *index_uri, const char *shard, struct s3d_dynbuf *out)
{
    const char *slash;
    size_t dir_len;
    int rc;

    s3d_dynbuf_reset(out);
    if (index_uri == NULL || shard == NULL)
        return s3d_fail(S3D_EINVAL, "index URI or shard name is NULL");
    rc = s3d_st_shard_path_check(shard, strlen(shard));
    if (rc < 0)
        return rc;
    if (strncmp(index_uri, "s3://", 5) == 0) {
        const char *key = strchr(index_uri + 5, '/');
        if (key == NULL || key == index_uri + 5 || key[1] == '\0')
            return s3d_fail(S3D_EURI, "\"%.*s\" does not name an object (s3://bucket/key)",
                            SHOW(index_uri));
    }
    slash = strrchr(index_uri, '/');
    dir_len = slash != NULL ? (size_t)(slash - index_uri) + 1 : 0;
    rc = s3d_dynbuf_append(out, index_uri, dir_len);
    if (rc == 0)
        rc = s3d_dynbuf_append(out, shard, strlen(shard));
    if (rc < 0)
        return s3d_fail(rc, "resolving shard \"%.*s\": %s", SHOW(shard), s3d_strerror(rc));
    return 0;
}
