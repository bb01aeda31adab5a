/* fuzz_index.c - fuzz target for the sharded checkpoint index (src/format/index.c).
 *
 * The input is an index file (NAME.safetensors.index.json). Whatever the bytes, the parser
 * must return 0 or a negative code and leave an empty index on failure. An accepted index
 * must hold its invariants: every tensor points at a shard, the shards are distinct and each
 * passes the shard-name check, and each resolves against an s3:// and a local index location
 * to that location's folder plus the shard name. It is then rebuilt with the builder and
 * parsed again, which must give the same tensors, shards, total size and generation id, in the
 * same order.
 * The input, as a string, is also an index path for s3d_st_shard_name and s3d_st_shard_resolve.
 * Built by tests/fuzz/fuzz.cmake as a plain test (with fuzz_main.c) and, with -DS3D_FUZZ=ON
 * under clang, as a libFuzzer binary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

#include "common/dynbuf.h"
#include "format/index.h"
#include "s3direct/errors.h"

const char *const s3d_fuzz_tokens[] = {"\"",
                                       "{",
                                       "}",
                                       ",",
                                       ":",
                                       "\"weight_map\"",
                                       "\"metadata\"",
                                       "\"total_size\"",
                                       "\"s3direct.generation\"",
                                       "\"a.safetensors\"",
                                       "\"../x\"",
                                       "\"s3://b/k\"",
                                       "/",
                                       "..",
                                       "\\u0000",
                                       "\\\\",
                                       "1.5e10",
                                       "-1",
                                       "null",
                                       "9223372036854775808",
                                       "\xff",
                                       "\xc3"};
const size_t s3d_fuzz_n_tokens = sizeof(s3d_fuzz_tokens) / sizeof(s3d_fuzz_tokens[0]);

void s3d_fuzz_fixup(uint8_t *buf, size_t len, uint64_t r)
{
    (void)buf;
    (void)len;
    (void)r;
}

static int is_zero(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

/* shard resolved against index_uri is the index's folder followed by the shard name. */
static void check_resolve(const char *index_uri, size_t dir_len, const char *shard)
{
    struct s3d_dynbuf b;
    s3d_dynbuf_init(&b, 1u << 20);
    REQUIRE(s3d_st_shard_resolve(index_uri, shard, &b) == 0);
    REQUIRE(b.len == dir_len + strlen(shard));
    REQUIRE(memcmp(b.data, index_uri, dir_len) == 0 && strcmp(b.data + dir_len, shard) == 0);
    s3d_dynbuf_free(&b);
}

static void check_rebuild(const struct s3d_st_index *ix)
{
    const char **names = calloc(ix->n_tensors + 1, sizeof(*names));
    const char **shards = calloc(ix->n_tensors + 1, sizeof(*shards));
    struct s3d_st_index ix2;
    struct s3d_dynbuf b;
    int rc;

    REQUIRE(names != NULL && shards != NULL);
    for (size_t i = 0; i < ix->n_tensors; i++) {
        names[i] = ix->tensors[i].name;
        shards[i] = ix->shards[ix->tensors[i].shard];
    }
    s3d_dynbuf_init(&b, S3D_ST_INDEX_MAX);
    rc = s3d_st_index_build(names, shards, ix->n_tensors, ix->total_size, ix->generation, &b);
    /* Only a total_size over 2^63 (read from a float) may be refused. */
    REQUIRE(rc == 0 || (rc == S3D_EINVAL && ix->total_size > (uint64_t)INT64_MAX));
    if (rc == 0) {
        REQUIRE(s3d_st_index_parse(b.data, b.len, 0, &ix2) == 0);
        REQUIRE(ix2.n_tensors == ix->n_tensors && ix2.n_shards == ix->n_shards);
        REQUIRE(ix2.has_total_size && ix2.total_size == ix->total_size);
        REQUIRE((ix2.generation == NULL) == (ix->generation == NULL));
        REQUIRE(ix->generation == NULL || strcmp(ix2.generation, ix->generation) == 0);
        for (size_t i = 0; i < ix->n_tensors; i++) {
            REQUIRE(strcmp(ix2.tensors[i].name, ix->tensors[i].name) == 0);
            REQUIRE(ix2.tensors[i].shard == ix->tensors[i].shard);
        }
        for (size_t i = 0; i < ix->n_shards; i++)
            REQUIRE(strcmp(ix2.shards[i], ix->shards[i]) == 0);
        s3d_st_index_free(&ix2);
    }
    s3d_dynbuf_free(&b);
    free(names);
    free(shards);
}

/* The input as a path: a shard name derived from it ends in ".safetensors" and has no '/';
 * resolving a fixed shard against it keeps everything up to its last '/'. */
static void check_as_path(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    struct s3d_dynbuf b;
    const char *slash;
    int rc;

    REQUIRE(s != NULL);
    memcpy(s, data, size);
    s[size] = '\0';
    s3d_dynbuf_init(&b, 1u << 20);
    rc = s3d_st_shard_name(s, 2, 3, &b);
    REQUIRE(rc == 0 || rc == S3D_EINVAL);
    if (rc == 0) {
        REQUIRE(b.len > 27 && memchr(b.data, '/', b.len) == NULL);
        REQUIRE(strcmp(b.data + b.len - 27, "-00002-of-00003.safetensors") == 0);
    }
    REQUIRE(s3d_st_shard_name(s, 0, 3, &b) == S3D_EINVAL);
    REQUIRE(s3d_st_shard_name(s, 4, 3, &b) == S3D_EINVAL);
    rc = s3d_st_shard_resolve(s, "m-00001-of-00002.safetensors", &b);
    REQUIRE(rc == 0 || rc == S3D_EURI);
    if (rc == 0) {
        slash = strrchr(s, '/');
        check_resolve(s, slash != NULL ? (size_t)(slash - s) + 1 : 0,
                      "m-00001-of-00002.safetensors");
    } else {
        REQUIRE(strncmp(s, "s3://", 5) == 0);
    }
    /* The input as a shard name: accepted by resolve exactly when the check accepts it. */
    rc = s3d_st_shard_resolve("dir/x.safetensors.index.json", s, &b);
    REQUIRE(rc == (s3d_st_shard_path_check(s, strlen(s)) == 0 ? 0 : S3D_EFMT_SHARD_PATH));
    s3d_dynbuf_free(&b);
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct s3d_st_index ix;
    int rc = s3d_st_index_parse((const char *)data, size, 0, &ix);

    REQUIRE(rc <= 0);
    if (rc == 0) {
        for (size_t i = 0; i < ix.n_tensors; i++)
            REQUIRE(ix.tensors[i].name != NULL && ix.tensors[i].shard < ix.n_shards);
        for (size_t i = 0; i < ix.n_shards; i++) {
            REQUIRE(s3d_st_shard_path_check(ix.shards[i], strlen(ix.shards[i])) == 0);
            for (size_t j = 0; j < i && i < 512; j++) /* quadratic: small indexes only */
                REQUIRE(strcmp(ix.shards[i], ix.shards[j]) != 0);
            check_resolve("s3://bucket/p/model.safetensors.index.json", 14, ix.shards[i]);
            check_resolve("model.safetensors.index.json", 0, ix.shards[i]);
        }
        REQUIRE(ix.has_total_size || ix.total_size == 0);
        check_rebuild(&ix);
    }
    s3d_st_index_free(&ix);
    REQUIRE(is_zero(&ix, sizeof(ix)));
    if (size <= 4096)
        check_as_path(data, size);
    return 0;
}
