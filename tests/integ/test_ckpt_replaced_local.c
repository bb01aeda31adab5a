/* test_ckpt_replaced_local.c - a local checkpoint replaced (atomic rename, as every writer of
 * safetensors files does) or removed between s3d_reader_open and s3d_reader_read. The reader
 * keeps the descriptor each file was opened with, so the data read is the version whose
 * header was parsed: never the new file's bytes under the old header. Single files and
 * shards, host and (emulated) device destinations, every file I/O mode; with and without
 * stored CRCs (without them nothing else could notice a mix). */
#include <stdio.h>
#include <unistd.h>

#include "ckpt_util.h"
#include "device/device.h"

/* Reads every tensor of the open reader r into fresh host (device < 0) or emulated device
 * memory and checks each is exactly the bytes of ts. */
static void read_all_equal(struct s3d_reader *r, const struct t_tensors *ts, int device,
                           int32_t file_io, const char *what)
{
    struct s3d_tensor_dest *d = calloc(ts->n, sizeof(*d));
    void **out = calloc(ts->n, sizeof(*out));
    struct s3d_read_options ro;
    CHECK(d != NULL && out != NULL);
    CHECK_EQ_U64(s3d_reader_num_tensors(r), ts->n);
    for (size_t i = 0; i < ts->n; i++) {
        const struct s3d_tensor_src *t = &ts->src[i];
        size_t idx;
        CHECK_OK(s3d_reader_find(r, t->name, &idx));
        out[i] = malloc(t->nbytes ? t->nbytes : 1);
        CHECK(out[i] != NULL);
        memset(out[i], 0xA5, t->nbytes);
        if (device >= 0) {
            uint64_t dp = t_emu_copy(out[i], t->nbytes);
            free(out[i]);
            out[i] = (void *)(uintptr_t)dp;
        }
        d[i].index = idx;
        d[i].ptr = out[i];
        d[i].device = device;
        d[i].capacity = t->nbytes;
    }
    memset(&ro, 0, sizeof(ro));
    ro.file_io = file_io;
    CHECK_OK(s3d_reader_read(r, d, ts->n, &ro));
    for (size_t i = 0; i < ts->n; i++) {
        const void *got = device >= 0 ? s3d_device_emu_view((uint64_t)(uintptr_t)out[i]) : out[i];
        if (memcmp(got, ts->data[i], ts->src[i].nbytes) != 0)
            t_fail(__FILE__, __LINE__, "%s: tensor %s is not the version that was opened", what,
                   ts->src[i].name);
        if (device >= 0)
            t_emu_free((uint64_t)(uintptr_t)out[i]);
        else
            free(out[i]);
    }
    free(out);
    free(d);
}

/* Two versions of the same tensors: same names, shapes and offsets (so the old header lays
 * the new file out "validly"), other bytes. */
static void two_versions(struct t_tensors *a, struct t_tensors *b)
{
    t_make_tensors(a, 10, 200000, 1);
    t_make_tensors(b, 10, 200000, 1);
    for (size_t i = 0; i < b->n; i++)
        t_fill_random(b->data[i], (size_t)b->src[i].nbytes, 1000 + i);
}

int main(void)
{
    struct s3d_client *c = NULL;
    struct s3d_client_options o;
    struct t_tensors a, b;
    struct s3d_write_options wo;
    struct s3d_reader *r = NULL;
    char path[512], idx[512], what[128];
    static const int32_t modes[] = {S3D_FILE_IO_AUTO, S3D_FILE_IO_BUFFERED, S3D_FILE_IO_DIRECT};

    setenv("S3D_DEVICE_EMULATE", "1", 1);
    memset(&o, 0, sizeof(o));
    o.staging_bytes = 16 << 20;
    o.part_size = 1 << 20;
    CHECK_OK(s3d_client_new(&o, &c));
    two_versions(&a, &b);
    snprintf(path, sizeof(path), "%s/replaced.safetensors", t_tmpdir());

    for (int crc = 0; crc < 2; crc++) {
        memset(&wo, 0, sizeof(wo));
        wo.no_checksum = !crc;
        for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
            for (int device = -1; device <= 0; device++) {
                snprintf(what, sizeof(what), "single file, crc %d, file_io %d, device %d", crc,
                         (int)modes[m], device);
                CHECK_OK(s3d_checkpoint_write(c, path, a.src, a.n, NULL, 0, &wo));
                CHECK_OK(s3d_reader_open(c, path, &r));
                /* Replaced by rename: the path now names another file. */
                CHECK_OK(s3d_checkpoint_write(c, path, b.src, b.n, NULL, 0, &wo));
                read_all_equal(r, &a, device, modes[m], what);
                /* Twice: the reader may be read again, still the version it opened. */
                read_all_equal(r, &a, device, modes[m], what);
                s3d_reader_close(r);
                t_verify_checkpoint(c, path, &b, -1);
            }
        }
        /* Removed after the open. */
        CHECK_OK(s3d_checkpoint_write(c, path, a.src, a.n, NULL, 0, &wo));
        CHECK_OK(s3d_reader_open(c, path, &r));
        CHECK(unlink(path) == 0);
        read_all_equal(r, &a, -1, S3D_FILE_IO_AUTO, "removed file");
        s3d_reader_close(r);

        /* Shards: every shard (and the index) replaced after the open. */
        snprintf(idx, sizeof(idx), "%s/replaced.safetensors.index.json", t_tmpdir());
        wo.max_shard_size = 600000;
        CHECK_OK(s3d_checkpoint_write(c, idx, a.src, a.n, NULL, 0, &wo));
        CHECK_OK(s3d_reader_open(c, idx, &r));
        CHECK(s3d_reader_num_shards(r) > 2);
        CHECK_OK(s3d_checkpoint_write(c, idx, b.src, b.n, NULL, 0, &wo));
        for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
            read_all_equal(r, &a, -1, modes[m], "shards, host");
            read_all_equal(r, &a, 0, modes[m], "shards, device");
        }
        s3d_reader_close(r);
        t_verify_checkpoint(c, idx, &b, -1);
    }

    t_free_tensors(&a);
    t_free_tensors(&b);
    s3d_client_free(c);
    return 0;
}
