/* fuzz_safetensors.c - fuzz target for the safetensors header parser and the index parser.
 *
 * The input is a whole object: the 8-byte length, the header, the data. Whatever the bytes,
 * the parsers must return (no crash, no leak under ASan) and, when they accept, what they
 * return must hold the format's invariants; an accepted header is then rebuilt with the
 * builder and parsed again, which must give the same tensors at the same offsets.
 *
 * Built two ways (tests/fuzz/fuzz.cmake): with -DS3D_FUZZ=ON under clang as a libFuzzer
 * binary, and with the plain driver fuzz_main.c as an ordinary test (every corpus file, every
 * prefix of it, a few hundred seeded mutations of it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dynbuf.h"
#include "fuzz.h"
#include "format/index.h"
#include "format/safetensors.h"

static void check_accepted(const struct s3d_st_header *h, size_t size)
{
    uint64_t pos = 0;
    for (size_t i = 0; i < h->n_tensors; i++) {
        const struct s3d_st_tensor *t = &h->tensors[i];
        uint64_t nbytes;
        size_t idx;
        REQUIRE(t->begin == pos && t->end >= t->begin);
        REQUIRE(s3d_dtype_nbytes(t->dtype, t->shape, t->ndim, &nbytes) == 0);
        REQUIRE(t->end - t->begin == nbytes);
        REQUIRE(strlen(t->name) == t->name_len);
        REQUIRE(s3d_st_find(h, t->name, t->name_len, &idx) == 0 && idx == i);
        pos = t->end;
    }
    REQUIRE(pos == h->data_len);
    REQUIRE(h->data_start + h->data_len == size);
}

/* Rebuild from the parsed header; parse again; same tensors, same offsets. */
static void check_rebuild(const struct s3d_st_header *h)
{
    struct s3d_tensor_src *t = calloc(h->n_tensors + 1, sizeof(*t));
    struct s3d_metadata_entry *m = calloc(h->n_metadata + 1, sizeof(*m));
    size_t nm = 0;
    struct s3d_dynbuf b;
    struct s3d_st_header h2;
    uint64_t n;

    REQUIRE(t != NULL && m != NULL);
    for (size_t i = 0; i < h->n_tensors; i++) {
        if (h->tensors[i].name_len == 0)
            goto out; /* legal to read, refused to write */
        t[i].name = h->tensors[i].name;
        t[i].dtype = h->tensors[i].dtype;
        t[i].ndim = h->tensors[i].ndim;
        t[i].shape = h->tensors[i].shape;
        t[i].nbytes = h->tensors[i].end - h->tensors[i].begin;
        t[i].device = -1;
    }
    for (size_t i = 0; i < h->n_metadata; i++) {
        if (strncmp(h->metadata[i].key, S3D_ST_RESERVED_PREFIX, 9) != 0)
            m[nm++] = (struct s3d_metadata_entry){h->metadata[i].key, h->metadata[i].value};
    }
    s3d_dynbuf_init(&b, 0);
    if (s3d_st_build(t, h->n_tensors, m, nm, 1, &b, NULL, NULL) != 0) {
        /* Only a header near the cap may fail to rebuild (ours has a CRC map too). */
        REQUIRE(h->json_len > S3D_ST_MAX_HEADER / 4);
        goto out;
    }
    REQUIRE(s3d_st_header_len((const uint8_t *)b.data, b.len + h->data_len, &n) == 0);
    REQUIRE(s3d_st_parse(b.data + 8, (size_t)n, b.len + h->data_len, &h2) == 0);
    REQUIRE(h2.n_tensors == h->n_tensors);
    for (size_t i = 0; i < h->n_tensors; i++) {
        REQUIRE(strcmp(h2.tensors[i].name, h->tensors[i].name) == 0);
        REQUIRE(h2.tensors[i].begin == h->tensors[i].begin);
        REQUIRE(h2.tensors[i].end == h->tensors[i].end);
        REQUIRE(h2.tensors[i].dtype == h->tensors[i].dtype);
        REQUIRE(h2.tensors[i].ndim == h->tensors[i].ndim);
        REQUIRE(h2.tensors[i].has_crc32c && h2.tensors[i].crc32c == 0);
    }
    REQUIRE(h2.n_metadata == nm + 3);
    s3d_st_header_free(&h2);
    s3d_dynbuf_free(&b);
out:
    free(t);
    free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t first8[8] = {0};
    uint64_t n;
    struct s3d_st_header h;
    struct s3d_st_index ix;

    memcpy(first8, data, size < 8 ? size : 8);
    if (s3d_st_header_len(first8, size, &n) == 0) {
        int rc = s3d_st_parse((const char *)data + 8, (size_t)n, size, &h);
        if (rc == 0) {
            check_accepted(&h, size);
            check_rebuild(&h);
        } else {
            REQUIRE(rc < 0 && h.n_tensors == 0 && h.tensors == NULL);
        }
        s3d_st_header_free(&h);
    }
    /* The same bytes as an index file. */
    if (s3d_st_index_parse((const char *)data, size, 0, &ix) == 0) {
        for (size_t i = 0; i < ix.n_tensors; i++)
            REQUIRE(ix.tensors[i].shard < ix.n_shards);
        for (size_t i = 0; i < ix.n_shards; i++)
            REQUIRE(s3d_st_shard_path_check(ix.shards[i], strlen(ix.shards[i])) == 0);
    }
    s3d_st_index_free(&ix);
    return 0;
}

/* For the plain driver: JSON and safetensors tokens, and an edit that makes the length field
 * agree with the mutated size, so mutations reach the JSON parser instead of dying at the
 * length check. */
const char *const s3d_fuzz_tokens[] = {"\"",
                                       "{",
                                       "}",
                                       "[",
                                       "]",
                                       ",",
                                       ":",
                                       "0",
                                       "-1",
                                       "1e5",
                                       "null",
                                       "\"F4\"",
                                       "\"U8\"",
                                       "\"shape\"",
                                       "\"dtype\"",
                                       "\"data_offsets\"",
                                       "\"__metadata__\"",
                                       "\"s3direct.crc32c\"",
                                       "\\u0000",
                                       "\\\"",
                                       "18446744073709551616",
                                       "\xff",
                                       "\xc3",
                                       "99999999999"};
const size_t s3d_fuzz_n_tokens = sizeof(s3d_fuzz_tokens) / sizeof(s3d_fuzz_tokens[0]);

void s3d_fuzz_fixup(uint8_t *buf, size_t len, uint64_t r)
{
    if (len > 8) {
        uint64_t nn = len - 8 - r % 4;
        for (int i = 0; i < 8; i++)
            buf[i] = (uint8_t)(nn >> (8 * i));
    }
}
