/* cmd_verify.c - s3direct verify: read every tensor and check its stored CRC32C.
 *
 * Tensors are read into one host buffer in batches (the library checks each whole tensor it
 * reads against its stored CRC32C). When a batch fails with a checksum mismatch, its tensors
 * are read again one by one so that every bad tensor is named, and the check goes on: the
 * summary counts them all. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define DEFAULT_BATCH (256ull << 20)

static const char usage[] =
    "usage: s3direct verify URI [OPTIONS]\n\n"
    "Reads every tensor of a safetensors checkpoint into host memory and checks it against the\n"
    "CRC32C stored by the writer; prints each mismatch and a summary. Exit status 1 when any\n"
    "tensor does not match (or cannot be read). Host memory used: the batch size, or the\n"
    "largest tensor when that is larger. Tensors without a stored checksum are read (which\n"
    "proves they are complete) and counted as unchecked.\n"
    "URI is s3://BUCKET/KEY or a local path, of a .safetensors file, a .safetensors.index.json,\n"
    "or a model folder, found as \"s3direct info\" finds it (see its --help).\n\n"
    "Options:\n"
    "  --batch-size SIZE     host memory per batch (default 256M)\n"
    "  --no-verify           read only, skip the CRC32C comparison (to time the reads)\n\n"
    "Examples:\n"
    "  s3direct verify s3://bucket/models/model.safetensors\n"
    "  s3direct verify s3://bucket/llm/model.safetensors.index.json --concurrency 16\n"
    "  s3direct verify ./llm/\n";

struct batch_progress {
    struct cli_progress bar;
    uint64_t base, total;
};

static int batch_cb(void *user, uint64_t done, uint64_t total)
{
    struct batch_progress *b = user;

    (void)total;
    return cli_progress_cb(&b->bar, b->base + done, b->total);
}

/* Reads dests[0..n); on a checksum mismatch reads them one by one, printing each bad one.
 * Adds to *bad; returns 0 or, for any other failure, the negative code (message printed). */
static int read_batch(struct s3d_reader *r, struct s3d_tensor_dest *dests, size_t n,
                      struct s3d_read_options *ro, struct batch_progress *bp, size_t *bad)
{
    struct s3d_tensor_info t = {.struct_size = sizeof(struct s3d_tensor_info)};
    size_t i;
    int rc;

    rc = s3d_reader_read(r, dests, n, ro);
    if (rc != S3D_ECHECKSUM) {
        if (rc < 0) {
            cli_progress_finish(&bp->bar, 0);
            cli_fail(rc);
        }
        return rc;
    }
    for (i = 0; i < n; i++) {
        rc = s3d_reader_read(r, &dests[i], 1, ro);
        if (rc == S3D_ECHECKSUM) {
            cli_progress_finish(&bp->bar, 0);
            s3d_reader_tensor(r, dests[i].index, &t);
            printf("MISMATCH  %s: %s\n", t.name, s3d_last_error_message());
            (*bad)++;
        } else if (rc < 0) {
            cli_progress_finish(&bp->bar, 0);
            cli_fail(rc);
            return rc;
        }
    }
    return 0;
}

static int run(const struct cli_opts *o)
{
    struct s3d_client *c = NULL;
    struct s3d_reader *r = NULL;
    struct s3d_tensor_dest *dests = NULL;
    struct s3d_read_options ro;
    struct s3d_tensor_info t = {.struct_size = sizeof(struct s3d_tensor_info)};
    struct batch_progress bp;
    uint64_t batch = o->batch_bytes ? o->batch_bytes : DEFAULT_BATCH, total = 0, used = 0;
    size_t i, n, nd = 0, bad = 0, checked = 0, unchecked = 0;
    unsigned char *buf = NULL;
    char human[24], rate[24], opened[CLI_BUCKET_CAP + CLI_KEY_CAP + 64];
    double t0;
    int ret = CLI_EXIT_FAIL;

    if (cli_client(o, &c) < 0)
        return CLI_EXIT_FAIL;
    if ((ret = cli_reader_open(c, o->args[0], opened, sizeof(opened), &r)) != 0)
        goto out;
    ret = CLI_EXIT_FAIL;
    n = s3d_reader_num_tensors(r);
    for (i = 0; i < n; i++) {
        s3d_reader_tensor(r, i, &t);
        total += t.nbytes;
        if (t.nbytes > batch)
            batch = t.nbytes;
        if (t.has_crc32c)
            checked++;
        else
            unchecked++;
    }
    if (batch > total)
        batch = total ? total : 1;
    buf = malloc((size_t)batch);
    dests = calloc(n ? n : 1, sizeof(*dests));
    if (buf == NULL || dests == NULL) {
        cli_error("out of memory for a %" PRIu64 "-byte batch (try --batch-size)", batch);
        goto out;
    }
    memset(&ro, 0, sizeof(ro));
    ro.struct_size = sizeof(ro);
    ro.progress = batch_cb;
    ro.progress_user = &bp;
    ro.no_verify = o->no_verify;
    memset(&bp, 0, sizeof(bp));
    cli_progress_init(&bp.bar, o, "verify");
    bp.total = total;
    cli_install_sigint();
    t0 = cli_now();
    for (i = 0; i <= n; i++) {
        if (i < n) {
            s3d_reader_tensor(r, i, &t);
            if (t.nbytes == 0)
                continue;
        }
        /* Flush the batch when the next tensor does not fit, or at the end. */
        if (nd > 0 && (i == n || used + t.nbytes > batch)) {
            if (read_batch(r, dests, nd, &ro, &bp, &bad) < 0)
                goto out;
            bp.base += used;
            nd = 0;
            used = 0;
        }
        if (i == n)
            break;
        dests[nd].index = i;
        dests[nd].ptr = buf + used;
        dests[nd].device = -1;
        dests[nd].capacity = t.nbytes;
        nd++;
        used += t.nbytes;
    }
    cli_progress_finish(&bp.bar, 1);
    t0 = cli_now() - t0;
    cli_human_size(total, human, sizeof(human));
    cli_human_size(t0 > 0 ? (uint64_t)((double)total / t0) : 0, rate, sizeof(rate));
    if (!o->quiet || bad)
        printf("%s: %zu tensors, %s read in %.2f s (%s/s); checksums: %zu %s, %zu not stored, "
               "%zu mismatch%s\n",
               opened, n, human, t0, rate, checked - bad,
               o->no_verify ? "not compared (--no-verify)" : "ok", unchecked, bad,
               bad == 1 ? "" : "es");
    if (bad) {
        fflush(stdout);
        cli_error("%zu tensor%s of %s failed the CRC32C check", bad, bad == 1 ? "" : "s", opened);
        goto out;
    }
    ret = fflush(stdout) == 0 ? 0 : cli_error("writing the output failed");
out:
    free(dests);
    free(buf);
    s3d_reader_close(r);
    s3d_client_free(c);
    return ret;
}

const struct cli_command cli_cmd_verify = {
    .name = "verify",
    .summary = "read every tensor of a checkpoint and check its CRC32C",
    .usage = usage,
    .flags = CLI_F_NO_VERIFY | CLI_F_BATCH,
    .min_args = 1,
    .max_args = 1,
    .run = run,
};
