/* index.h - the index of a sharded safetensors checkpoint, as Hugging Face writes it:
 *   NAME.safetensors.index.json =
 *     {"metadata": {"total_size": N, ...}, "weight_map": {"tensor": "shard file", ...}}
 * beside shards NAME-00001-of-0000K.safetensors (s3direct: NAME-TOKEN-00001-of-0000K, a token
 * per save, so that a save never overwrites the shards of the index in place).
 *
 * Pure (no I/O), no global state, any thread. Depends only on src/common.
 *
 * s3direct adds "s3direct.generation": "<id>" to the index metadata, and the same id to the
 * __metadata__ of every shard it writes with that index (a fresh id per save). The index is
 * written last, so a save that dies after replacing some shards leaves an index whose id the
 * new shards do not carry: the reader refuses that mix (ckpt_open.c). Other readers ignore the
 * key (Hugging Face reads only weight_map and total_size).
 *
 * Shard names come from an untrusted file and are joined to the index's location, so they
 * are checked: relative, no "." or ".." component, no empty component (leading, trailing or
 * doubled '/'), no backslash, no scheme ("s3://", "file:", "C:"), no control character. */
#ifndef S3D_FORMAT_INDEX_H
#define S3D_FORMAT_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "common/dynbuf.h"
#include "common/compiler.h"

#define S3D_ST_INDEX_MAX    (64u << 20) /* default cap on an index file: 64 MiB */
#define S3D_ST_INDEX_SUFFIX ".safetensors.index.json"

struct s3d_st_index_entry {
    char *name;     /* tensor name, NUL-terminated UTF-8 */
    uint32_t shard; /* index into s3d_st_index.shards */
};

/* A parsed index. Everything in it is owned by it. */
struct s3d_st_index {
    size_t n_tensors;
    struct s3d_st_index_entry *tensors; /* weight_map in file order */
    size_t n_shards;
    char **shards; /* distinct shard names, in order of first appearance */
    int32_t has_total_size;
    uint64_t total_size; /* metadata.total_size when present */
    char *generation;    /* metadata["s3direct.generation"], NUL-terminated; NULL if absent */
};

/* Parses an index file's bytes json[0..len). max_len: cap on len (0 = S3D_ST_INDEX_MAX).
 * Returns 0 and fills *out (free with s3d_st_index_free), or on failure leaves *out empty:
 *   S3D_EFMT_INDEX       over the cap, not JSON, not valid UTF-8, no weight_map object, a
 *                        weight_map value that is not a string, a duplicate key, metadata not
 *                        an object, total_size not a non-negative integer, a
 *                        metadata["s3direct.generation"] that is not a string
 *   S3D_EFMT_SHARD_PATH  a shard name that fails the checks above (message names the tensor
 *                        and the shard)
 *   S3D_ENOMEM
 * An empty weight_map is valid (0 tensors, 0 shards). */
S3D_NODISCARD int s3d_st_index_parse(const char *json, size_t len, size_t max_len,
                                     struct s3d_st_index *out);

/* Frees everything in ix and leaves it empty. Accepts NULL and a zeroed index. */
void s3d_st_index_free(struct s3d_st_index *ix);

/* 0 if shard[0..len) is an acceptable shard name (see top), else S3D_EFMT_SHARD_PATH with a
 * message naming it. */
S3D_NODISCARD int s3d_st_shard_path_check(const char *shard, size_t len);

/* Builds an index JSON {"metadata": {"total_size": total_size}, "weight_map": {...}} from
 * n pairs (tensors[i] -> shards[i]), in the given order, indented as Hugging Face writes it,
 * with "s3direct.generation": generation in the metadata when generation is not NULL,
 * into out (reset first; out's max is left as the caller set it, so S3D_ETOOBIG is possible).
 * Returns 0, S3D_EINVAL (NULL or non-UTF-8 name, duplicate tensor, bad shard name - message
 * names it), S3D_ETOOBIG, S3D_ENOMEM. */
S3D_NODISCARD int s3d_st_index_build(const char *const *tensors, const char *const *shards,
                                     size_t n, uint64_t total_size, const char *generation,
                                     struct s3d_dynbuf *out);

/* The name of shard i (1-based) of n for the index at index_path (a path, URI or bare file
 * name ending in ".safetensors.index.json"): the last component with that suffix removed,
 * then "-%05u-of-%05u.safetensors" (HF's padding; wider numbers when n > 99999).
 * "s3://b/p/model.safetensors.index.json", 2, 3 -> "model-00002-of-00003.safetensors".
 * Writes the bare file name (no folder) into out (reset first). Returns 0, or S3D_EINVAL
 * (no such suffix, empty NAME, i == 0, i > n), S3D_ENOMEM. */
S3D_NODISCARD int s3d_st_shard_name(const char *index_path, uint32_t i, uint32_t n,
                                    struct s3d_dynbuf *out);

/* Hex digits of the per-save token in the shard names s3direct writes. */
#define S3D_ST_SHARD_TOKEN_LEN 16

/* As s3d_st_shard_name, with the save's token (S3D_ST_SHARD_TOKEN_LEN lowercase hex digits)
 * between NAME and the numbers: "model-0123456789abcdef-00002-of-00003.safetensors". Each
 * save writes its shards under names of its own, so it never overwrites the shards that the
 * index in place (or a concurrent save) refers to. token NULL: the plain name. S3D_EINVAL
 * also for a token of the wrong form. */
S3D_NODISCARD int s3d_st_shard_name_tok(const char *index_path, const char *token, uint32_t i,
                                        uint32_t n, struct s3d_dynbuf *out);

/* Whether name[0..len) (a bare file name) is a shard name of the index at index_path, as
 * s3d_st_shard_name(_tok) forms them (numbers of 5 or more digits, not checked against each
 * other): 2 with a token, 1 without, 0 if not. */
int s3d_st_shard_name_match(const char *index_path, const char *name, size_t len);

/* Resolves shard (a name from the index) against the index's location: everything up to and
 * including the last '/' of index_uri, then shard. "s3://b/p/x.index.json" + "s-1.st" ->
 * "s3://b/p/s-1.st"; "dir/x.index.json" -> "dir/s-1.st"; "x.index.json" -> "s-1.st".
 * The shard name is checked first (S3D_EFMT_SHARD_PATH). An "s3://" index_uri must name a
 * key ("s3://bucket/key": S3D_EURI otherwise). Writes into out (reset first). Returns 0,
 * S3D_EFMT_SHARD_PATH, S3D_EURI, S3D_ENOMEM. */
S3D_NODISCARD int s3d_st_shard_resolve(const char *index_uri, const char *shard,
                                       struct s3d_dynbuf *out);

#endif
