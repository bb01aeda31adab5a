/* cmd_info.c - s3direct info: the header of a safetensors checkpoint, without its data. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: s3direct info URI [OPTIONS]\n\n"
    "Prints the header of a safetensors checkpoint: shards, every tensor (name, dtype, shape,\n"
    "size in bytes, and its shard when there are several), the totals, the __metadata__\n"
    "entries, and whether per-tensor CRC32C checksums are stored. Only header bytes are read:\n"
    "one ranged GET per shard (plus the index), however large the checkpoint.\n"
    "URI is s3://BUCKET/KEY or a local path, of a .safetensors file, a sharded checkpoint's\n"
    ".safetensors.index.json, or a model folder (s3://BUCKET/PREFIX/ or a local folder) as\n"
    "Hugging Face writes it: its model.safetensors, else its model.safetensors.index.json, as\n"
    "Python's s3direct.load() reads a folder (s3://BUCKET/PREFIX without the slash too, when\n"
    "no object has that name). The first line printed is the file read.\n\n"
    "Examples:\n"
    "  s3direct info s3://bucket/models/model.safetensors\n"
    "  s3direct info s3://bucket/llm/model.safetensors.index.json\n"
    "  s3direct info s3://bucket/llm/\n"
    "  s3direct info ./model.safetensors\n";

/* "[4096, 11008]" into buf; "[]" for a scalar. */
static const char *shape_str(const struct s3d_tensor_info *t, char *buf, size_t cap)
{
    size_t len = 0;
    int32_t i;

    len += (size_t)snprintf(buf, cap, "[");
    for (i = 0; i < t->ndim && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%" PRId64, i ? ", " : "", t->shape[i]);
    if (len < cap)
        snprintf(buf + len, cap - len, "]");
    return buf;
}

static int run(const struct cli_opts *o)
{
    struct s3d_client *c = NULL;
    struct s3d_reader *r = NULL;
    struct s3d_tensor_info t = {.struct_size = sizeof(struct s3d_tensor_info)};
    const char *uri, *k, *v;
    char shape[512], human[24], opened[CLI_BUCKET_CAP + CLI_KEY_CAP + 64];
    uint64_t total = 0, hdr, obj;
    size_t i, n, nshards, with_crc = 0;
    int rc, ret = CLI_EXIT_FAIL;

    if (cli_client(o, &c) < 0)
        return CLI_EXIT_FAIL;
    if ((ret = cli_reader_open(c, o->args[0], opened, sizeof(opened), &r)) != 0)
        goto out;
    ret = CLI_EXIT_FAIL;
    n = s3d_reader_num_tensors(r);
    nshards = s3d_reader_num_shards(r);
    printf("%s\n", opened);
    for (i = 0; i < nshards; i++) {
        if ((rc = s3d_reader_shard(r, i, &uri, &hdr, &obj)) < 0) {
            cli_fail(rc);
            goto out;
        }
        printf("shard %zu: %s  header %" PRIu64 " bytes, %" PRIu64 " bytes in all\n", i, uri, hdr,
               obj);
    }
    printf("\n%-48s %-8s %-24s %14s%s\n", "tensor", "dtype", "shape", "bytes",
           nshards > 1 ? "  shard" : "");
    for (i = 0; i < n; i++) {
        if ((rc = s3d_reader_tensor(r, i, &t)) < 0) {
            cli_fail(rc);
            goto out;
        }
        total += t.nbytes;
        with_crc += t.has_crc32c ? 1 : 0;
        printf("%-48s %-8s %-24s %14" PRIu64, t.name,
               s3d_dtype_name(t.dtype) ? s3d_dtype_name(t.dtype) : "?",
               shape_str(&t, shape, sizeof(shape)), t.nbytes);
        if (nshards > 1)
            printf("  %5u", t.shard);
        printf("\n");
    }
    printf("\ntensors: %zu, data: %" PRIu64 " bytes (%s), shards: %zu\n", n, total,
           cli_human_size(total, human, sizeof(human)), nshards);
    printf("checksums: %s (%zu of %zu tensors have a CRC32C)\n",
           with_crc == n ? (n ? "all" : "none") : (with_crc ? "some" : "none"), with_crc, n);
    n = s3d_reader_num_metadata(r);
    printf("metadata: %zu entr%s\n", n, n == 1 ? "y" : "ies");
    for (i = 0; i < n; i++)
        if (s3d_reader_metadata(r, i, &k, &v) == 0)
            printf("  %s: %s\n", k, v);
    ret = fflush(stdout) == 0 ? 0 : cli_error("writing the output failed");
out:
    s3d_reader_close(r);
    s3d_client_free(c);
    return ret;
}

const struct cli_command cli_cmd_info = {
    .name = "info",
    .summary = "print a safetensors checkpoint's header (tensors, metadata, checksums)",
    .usage = usage,
    .flags = 0,
    .min_args = 1,
    .max_args = 1,
    .run = run,
};
