/* safetensors_build.c - building a safetensors header, and patching CRCs into it.
 *
 * The JSON is made by jansson (compact, insertion order), so every name is escaped by the
 * same code that parses it. Layout of what we write:
 *   {"__metadata__":{"s3direct.header_crc32c":"00000000","s3direct.crc32c":"{\"a\":
 *    \"00000000\",...}","s3direct.format":"1",<caller metadata>...},"a":{"dtype":"F32",
 *    "shape":[2],"data_offsets":[0,8]},...}
 * The header's own CRC comes first (readers find it at a fixed place: safetensors.h), then the
 * CRC map, so that its value starts at a fixed offset too; the position of each
 * placeholder inside it is then the sum of the escaped lengths of the text before it, each
 * length measured by jansson's own dumper, and checked against the bytes it produced.
 * Without metadata and CRCs the output is byte for byte what the reference writes for the
 * same tensors in the same order. */
#include <inttypes.h>
#include <jansson.h>
#include <string.h>

#include "common/alloc.h"
#include "common/compiler.h"
#include "common/crc32c.h"
#include "common/error.h"
#include "format/jsonbuf.h"
#include "format/safetensors.h"

#define DUMP_FLAGS      JSON_COMPACT
#define CRC_PLACEHOLDER "00000000"
#define CRC_PREFIX      S3D_ST_HEADER_CRC_PREFIX CRC_PLACEHOLDER "\",\"" S3D_ST_META_CRC32C "\":\""

/* Bytes that s[0..len) takes inside a JSON string as jansson writes it; SIZE_MAX on ENOMEM. */
static size_t escaped_len(const char *s, size_t len)
{
    json_t *j = json_stringn_nocheck(s, len);
    size_t n;
    if (j == NULL)
        return SIZE_MAX;
    n = json_dumpb(j, NULL, 0, DUMP_FLAGS | JSON_ENCODE_ANY);
    json_decref(j);
    return n >= 2 ? n - 2 : SIZE_MAX; /* minus the quotes */
}

static int check_text(const char *what, const char *s, size_t i, const char *name)
{
    size_t bad;
    if (s == NULL)
        return s3d_fail(S3D_EINVAL, "%s %zu is NULL", what, i);
    if (!s3d_utf8_valid(s, strlen(s), &bad))
        return s3d_fail(S3D_EINVAL, "%s %zu (%s) is not valid UTF-8 at byte %zu", what, i, name,
                        bad);
    return 0;
}

static int add_tensor(json_t *root, json_t *crcmap, const struct s3d_tensor_src *t, size_t i,
                      uint64_t begin)
{
    char why[256];
    uint64_t nbytes;
    json_t *shape, *entry;
    int rc;

    if (t->name == NULL || t->name[0] == '\0')
        return s3d_fail(S3D_EINVAL, "tensor %zu has no name", i);
    rc = check_text("name of tensor", t->name, i, "?");
    if (rc < 0)
        return rc;
    if (strcmp(t->name, "__metadata__") == 0)
        return s3d_fail(S3D_EINVAL, "tensor %zu is called __metadata__, a reserved key", i);
    if (json_object_get(root, t->name) != NULL)
        return s3d_fail(S3D_EINVAL, "tensor name \"%s\" is used twice", t->name);
    if (s3d_dtype_name(t->dtype) == NULL)
        return s3d_fail(S3D_EINVAL, "tensor \"%s\": invalid dtype %d", t->name, (int)t->dtype);
    rc = s3d_dtype_nbytes(t->dtype, t->shape, t->ndim, &nbytes);
    if (rc < 0) {
        snprintf(why, sizeof(why), "%s", s3d_last_error_message());
        return s3d_fail(S3D_EINVAL, "tensor \"%s\": %s", t->name, why);
    }
    if (nbytes != t->nbytes)
        return s3d_fail(S3D_EINVAL,
                        "tensor \"%s\": nbytes is %" PRIu64 " but %s of this shape is %" PRIu64,
                        t->name, t->nbytes, s3d_dtype_name(t->dtype), nbytes);
    if (begin > (uint64_t)INT64_MAX - nbytes)
        return s3d_fail(S3D_EINVAL, "tensor \"%s\": data offset over 2^63", t->name);

    shape = json_array();
    if (shape == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory building a safetensors header");
    for (int32_t d = 0; d < t->ndim; d++) {
        if (json_array_append_new(shape, json_integer((json_int_t)t->shape[d])) < 0) {
            json_decref(shape);
            return s3d_fail(S3D_ENOMEM, "out of memory building a safetensors header");
        }
    }
    /* Field order as the reference writes it. */
    entry = json_pack("{s:s,s:o,s:[I,I]}", "dtype", s3d_dtype_name(t->dtype), "shape", shape,
                      "data_offsets", (json_int_t)begin, (json_int_t)(begin + nbytes));
    if (entry == NULL || json_object_set_new(root, t->name, entry) < 0)
        return s3d_fail(S3D_ENOMEM, "out of memory building a safetensors header");
    if (crcmap != NULL && json_object_set_new(crcmap, t->name, json_string(CRC_PLACEHOLDER)) < 0)
        return s3d_fail(S3D_ENOMEM, "out of memory building a safetensors header");
    return 0;
}

/* Where each tensor's placeholder lies in the finished header (see the top of the file). */
static int crc_positions(const struct s3d_tensor_src *t, size_t n, const char *inner,
                         const struct s3d_dynbuf *out, size_t *crc_pos)
{
    size_t cursor = 1, prev = 0, cum = 0;
    const size_t value_start = 8 + strlen(CRC_PREFIX);

    if (out->len < value_start || memcmp(out->data + 8, CRC_PREFIX, strlen(CRC_PREFIX)) != 0)
        goto internal;
    for (size_t i = 0; i < n; i++) {
        size_t e = escaped_len(t[i].name, strlen(t[i].name)), p, seg;
        if (e == SIZE_MAX)
            return s3d_fail(S3D_ENOMEM, "out of memory building a safetensors header");
        cursor += (i > 0) + 1 + e + 3; /* [,]"name":" */
        p = cursor;
        if (memcmp(inner + p, CRC_PLACEHOLDER "\"", 9) != 0 || inner[p - 1] != '"')
            goto internal;
        cursor += 9;
        seg = escaped_len(inner + prev, p - prev);
        if (seg == SIZE_MAX)
            return s3d_fail(S3D_ENOMEM, "out of memory building a safetensors header");
        cum += seg;
        if (value_start + cum + 8 > out->len ||
            memcmp(out->data + value_start + cum, CRC_PLACEHOLDER, 8) != 0)
            goto internal;
        if (crc_pos != NULL)
            crc_pos[i] = value_start + cum;
        cum += 8;
        prev = p + 8;
    }
    return 0;
internal:
    return s3d_fail(S3D_EINVAL, "internal: CRC placeholder not where expected in the header");
}

int s3d_st_build(const struct s3d_tensor_src *t, size_t n, const struct s3d_metadata_entry *meta,
                 size_t n_meta, int with_crc, struct s3d_dynbuf *out, uint64_t *offsets,
                 size_t *crc_pos)
{
    return s3d_st_build_gen(t, n, meta, n_meta, with_crc, NULL, out, offsets, crc_pos);
}

int s3d_st_build_gen(const struct s3d_tensor_src *t, size_t n,
                     const struct s3d_metadata_entry *meta, size_t n_meta, int with_crc,
                     const char *generation, struct s3d_dynbuf *out, uint64_t *offsets,
                     size_t *crc_pos)
{
    json_t *root, *md = NULL, *crcmap = NULL;
    char *inner = NULL;
    uint64_t begin = 0, jlen;
    int rc;

    s3d_dynbuf_reset(out);
    out->max = 8 + (size_t)S3D_ST_MAX_HEADER;
    root = json_object();
    if (root == NULL)
        return s3d_fail(S3D_ENOMEM, "out of memory building a safetensors header");
    if (with_crc || n_meta > 0 || generation != NULL) {
        md = json_object();
        if (md == NULL || json_object_set_new(root, "__metadata__", md) < 0)
            goto nomem;
    }
    if (with_crc) {
        crcmap = json_object();
        /* Placeholder values, replaced in place below: the keys keep their positions. */
        if (crcmap == NULL ||
            json_object_set_new(md, S3D_ST_META_HEADER_CRC32C, json_string(CRC_PLACEHOLDER)) < 0 ||
            json_object_set_new(md, S3D_ST_META_CRC32C, json_null()) < 0 ||
            json_object_set_new(md, S3D_ST_META_FORMAT, json_string("1")) < 0)
            goto nomem;
    }
    if (generation != NULL) {
        size_t bad;
        if (!s3d_utf8_valid(generation, strlen(generation), &bad)) {
            rc = s3d_fail(S3D_EINVAL, "generation id is not valid UTF-8");
            goto fail;
        }
        if (json_object_set_new(md, S3D_ST_META_GENERATION, json_string(generation)) < 0)
            goto nomem;
    }
    for (size_t i = 0; i < n_meta; i++) {
        const char *k = meta[i].key;
        rc = check_text("metadata key", k, i, "?");
        if (rc == 0)
            rc = check_text("metadata value", meta[i].value, i, k);
        if (rc < 0)
            goto fail;
        if (strncmp(k, S3D_ST_RESERVED_PREFIX, strlen(S3D_ST_RESERVED_PREFIX)) == 0) {
            rc = s3d_fail(S3D_EINVAL, "metadata key \"%s\" is reserved for s3direct", k);
            goto fail;
        }
        if (json_object_get(md, k) != NULL) {
            rc = s3d_fail(S3D_EINVAL, "metadata key \"%s\" is given twice", k);
            goto fail;
        }
        if (json_object_set_new(md, k, json_string(meta[i].value)) < 0)
            goto nomem;
    }
    for (size_t i = 0; i < n; i++) {
        rc = add_tensor(root, crcmap, &t[i], i, begin);
        if (rc < 0)
            goto fail;
        if (offsets != NULL)
            offsets[i] = begin;
        begin += t[i].nbytes;
        if (crc_pos != NULL)
            crc_pos[i] = 0;
    }
    if (with_crc) {
        inner = json_dumps(crcmap, DUMP_FLAGS);
        if (inner == NULL || json_object_set_new(md, S3D_ST_META_CRC32C, json_string(inner)) < 0)
            goto nomem;
    }

    rc = s3d_dynbuf_append(out, "\0\0\0\0\0\0\0\0", 8);
    if (rc == 0)
        rc = s3d_json_dump_to(root, DUMP_FLAGS, out);
    if (rc < 0) {
        if (rc == S3D_ETOOBIG)
            rc = s3d_fail(rc, "safetensors header for %zu tensors is over the cap of %u bytes", n,
                          S3D_ST_MAX_HEADER);
        else
            rc = s3d_fail(S3D_ENOMEM, "out of memory building a safetensors header");
        goto fail;
    }
    /* Pad so the data region starts 8-aligned; the cap is a multiple of 8, so this fits. */
    while (out->len % 8 != 0) {
        if (s3d_dynbuf_append(out, " ", 1) < 0)
            goto nomem;
    }
    jlen = out->len - 8;
    for (int i = 0; i < 8; i++)
        out->data[i] = (char)(jlen >> (8 * i));
    if (with_crc) {
        rc = crc_positions(t, n, inner, out, crc_pos);
        if (rc < 0)
            goto fail;
        s3d_st_seal(out->data); /* valid as built; patching CRCs means sealing again */
    }
    rc = 0;
fail:
    free(inner);
    json_decref(crcmap);
    json_decref(root);
    if (rc < 0)
        s3d_dynbuf_free(out);
    return rc;

nomem:
    rc = s3d_fail(S3D_ENOMEM, "out of memory building a safetensors header");
    goto fail;
}

void s3d_st_seal(char *header)
{
    const size_t pos = 8 + strlen(S3D_ST_HEADER_CRC_PREFIX);
    uint64_t n = 0;
    uint32_t crc;
    for (int i = 0; i < 8; i++)
        n |= (uint64_t)(unsigned char)header[i] << (8 * i);
    S3D_ASSERT(n > pos && memcmp(header + 8, S3D_ST_HEADER_CRC_PREFIX, pos - 8) == 0);
    memcpy(header + pos, CRC_PLACEHOLDER, 8);
    crc = s3d_crc32c(0, header + 8, (size_t)n);
    s3d_st_patch_crc(header, pos, crc);
}

void s3d_st_patch_crc(char *header, size_t pos, uint32_t crc)
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 7; i >= 0; i--) {
        header[pos + (size_t)i] = hex[crc & 0xF];
        crc >>= 4;
    }
}
