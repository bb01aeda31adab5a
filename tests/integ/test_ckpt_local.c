/* test_ckpt_local.c - checkpoints on local files: every dtype, metadata, CRC detection,
 * subsets, shards, the emulated GPU, atomic replacement, and bad input. */
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_util.h"

static struct s3d_client *new_client(void)
{
    struct s3d_client *c = NULL;
    struct s3d_client_options o;
    memset(&o, 0, sizeof(o));
    o.staging_bytes = 16 << 20; /* small pool: several refills per checkpoint */
    o.part_size = 5 << 20;
    CHECK_OK(s3d_client_new(&o, &c));
    return c;
}

static int cancel_after(void *user, uint64_t done, uint64_t total)
{
    (void)total;
    return done >= *(uint64_t *)user;
}

static size_t count_tmp_files(const char *dir)
{
    size_t n = 0;
    struct dirent *e;
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    while ((e = readdir(d)) != NULL)
        if (strstr(e->d_name, ".tmp") != NULL || strstr(e->d_name, ".s3d-tmp-") != NULL)
            n++;
    closedir(d);
    return n;
}

static void flip_byte(const char *path, uint64_t off)
{
    int fd = open(path, O_RDWR);
    unsigned char b;
    CHECK(fd >= 0);
    CHECK(pread(fd, &b, 1, (off_t)off) == 1);
    b ^= 0x40;
    CHECK(pwrite(fd, &b, 1, (off_t)off) == 1);
    close(fd);
}

int main(void)
{
    struct s3d_client *c = new_client();
    struct t_tensors ts;
    struct s3d_reader *r = NULL;
    char path[512], idx[512];
    struct s3d_metadata_entry meta[2] = {{"format", "pt"}, {"note", "héllo \"quoted\""}};
    struct s3d_write_options wo;

    snprintf(path, sizeof(path), "%s/model.safetensors", t_tmpdir());
    t_make_tensors(&ts, 60, 300000, 7);

    /* Every dtype, with metadata. */
    CHECK_OK(s3d_checkpoint_write(c, path, ts.src, ts.n, meta, 2, NULL));
    t_verify_checkpoint(c, path, &ts, -1);
    CHECK_OK(s3d_reader_open(c, path, &r));
    CHECK_STREQ(s3d_reader_metadata_get(r, "format"), "pt");
    CHECK_STREQ(s3d_reader_metadata_get(r, "note"), "héllo \"quoted\"");
    CHECK(s3d_reader_metadata_get(r, "s3direct.crc32c") != NULL);
    for (size_t i = 0; i < s3d_reader_num_tensors(r); i++) {
        struct s3d_tensor_info info = {.struct_size = sizeof(struct s3d_tensor_info)};
        CHECK_OK(s3d_reader_tensor(r, i, &info));
        CHECK(info.has_crc32c == 1);
        CHECK(info.offset % 8 == 0 || i > 0); /* the data region starts 8-byte aligned */
    }
    CHECK_ERR(s3d_reader_find(r, "nope", &(size_t){0}), S3D_ENOTENSOR);

    /* A subset: a byte range of one tensor, and a destination too small. */
    {
        struct s3d_tensor_info info = {.struct_size = sizeof(struct s3d_tensor_info)};
        size_t i;
        unsigned char buf[100];
        struct s3d_tensor_dest d = {0};
        CHECK_OK(s3d_reader_find(r, ts.src[10].name, &i));
        CHECK_OK(s3d_reader_tensor(r, i, &info));
        CHECK(info.nbytes > 200);
        d.index = i;
        d.ptr = buf;
        d.device = -1;
        d.capacity = sizeof(buf);
        d.src_offset = 50;
        d.length = 100;
        CHECK_OK(s3d_reader_read(r, &d, 1, NULL));
        CHECK(memcmp(buf, (char *)ts.data[10] + 50, 100) == 0);
        d.length = 0; /* whole rest: does not fit */
        CHECK_ERR(s3d_reader_read(r, &d, 1, NULL), S3D_EDEST);
        CHECK_MSG_HAS(ts.src[10].name);
        d.src_offset = info.nbytes + 1;
        d.length = 1;
        CHECK_ERR(s3d_reader_read(r, &d, 1, NULL), S3D_EDEST);
        d.src_offset = 0;
        d.device = 0; /* no GPU here (unless emulated, which this client is not) */
        CHECK_ERR(s3d_reader_read(r, &d, 1, NULL), S3D_ENODEVICE);
    }

    /* A flipped byte in the data is found and named. */
    {
        struct s3d_tensor_info info = {.struct_size = sizeof(struct s3d_tensor_info)};
        size_t i;
        void *buf;
        struct s3d_tensor_dest d = {0};
        struct s3d_read_options ro = {0};
        CHECK_OK(s3d_reader_find(r, ts.src[20].name, &i));
        CHECK_OK(s3d_reader_tensor(r, i, &info));
        s3d_reader_close(r);
        r = NULL;
        flip_byte(path, info.offset + info.nbytes / 2);
        CHECK_OK(s3d_reader_open(c, path, &r));
        buf = malloc(info.nbytes);
        d.index = i;
        d.ptr = buf;
        d.device = -1;
        d.capacity = info.nbytes;
        CHECK_ERR(s3d_reader_read(r, &d, 1, NULL), S3D_ECHECKSUM);
        CHECK_MSG_HAS(ts.src[20].name);
        CHECK_MSG_HAS("model.safetensors");
        ro.no_verify = 1;
        CHECK_OK(s3d_reader_read(r, &d, 1, &ro));
        free(buf);
        s3d_reader_close(r);
        r = NULL;
    }

    /* Atomic replacement: a canceled save leaves the previous file and no temp file. */
    {
        uint64_t limit = 1 << 20;
        CHECK_OK(s3d_checkpoint_write(c, path, ts.src, ts.n, meta, 2, NULL));
        memset(&wo, 0, sizeof(wo));
        wo.progress = cancel_after;
        wo.progress_user = &limit;
        ts.src[0].name = "renamed"; /* the new version would differ */
        CHECK_ERR(s3d_checkpoint_write(c, path, ts.src, ts.n, NULL, 0, &wo), S3D_ECANCELED);
        ts.src[0].name = ts.names[0];
        t_verify_checkpoint(c, path, &ts, -1);
        CHECK_EQ_U64(count_tmp_files(t_tmpdir()), 0);
    }

    /* Bad input. */
    {
        struct s3d_metadata_entry bad = {"s3direct.crc32c", "x"};
        CHECK_ERR(s3d_checkpoint_write(c, path, ts.src, ts.n, &bad, 1, NULL), S3D_EINVAL);
        ts.src[5].nbytes += 1;
        CHECK_ERR(s3d_checkpoint_write(c, path, ts.src, ts.n, NULL, 0, NULL), S3D_EINVAL);
        CHECK_MSG_HAS(ts.src[5].name);
        ts.src[5].nbytes -= 1;
        t_verify_checkpoint(c, path, &ts, -1); /* untouched by the refused saves */
        CHECK_ERR(s3d_reader_open(c, "/nonexistent/x.safetensors", &r), S3D_ENOENT);
        /* A truncated copy: the header promises more data than the file has. */
        {
            char cut[512];
            struct stat st;
            int in, out;
            char *buf;
            snprintf(cut, sizeof(cut), "%s/cut.safetensors", t_tmpdir());
            CHECK(stat(path, &st) == 0);
            buf = malloc((size_t)st.st_size);
            in = open(path, O_RDONLY);
            CHECK(read(in, buf, (size_t)st.st_size) == st.st_size);
            close(in);
            out = open(cut, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            CHECK(write(out, buf, (size_t)st.st_size - 1000) == st.st_size - 1000);
            close(out);
            free(buf);
            CHECK_ERR(s3d_reader_open(c, cut, &r), S3D_EFMT_TRUNCATED);
            CHECK_MSG_HAS("cut.safetensors");
        }
    }

    /* Shards: at most 2 MB of data per shard, an index written last. */
    {
        struct s3d_tensor_info info = {.struct_size = sizeof(struct s3d_tensor_info)};
        const char *uri;
        snprintf(idx, sizeof(idx), "%s/sharded.safetensors.index.json", t_tmpdir());
        memset(&wo, 0, sizeof(wo));
        wo.max_shard_size = 2000000;
        CHECK_ERR(s3d_checkpoint_write(c, path, ts.src, ts.n, NULL, 0, &wo), S3D_EINVAL);
        CHECK_OK(s3d_checkpoint_write(c, idx, ts.src, ts.n, meta, 2, &wo));
        t_verify_checkpoint(c, idx, &ts, -1);
        CHECK_OK(s3d_reader_open(c, idx, &r));
        CHECK(s3d_reader_num_shards(r) > 3);
        CHECK_OK(s3d_reader_shard(r, 0, &uri, NULL, NULL));
        CHECK(strstr(uri, "/sharded-") != NULL && strstr(uri, "-00001-of-") != NULL);
        CHECK_OK(s3d_reader_tensor(r, s3d_reader_num_tensors(r) - 1, &info));
        CHECK(info.shard == s3d_reader_num_shards(r) - 1);
        CHECK_STREQ(s3d_reader_metadata_get(r, "format"), "pt");
        s3d_reader_close(r);
        r = NULL;
    }

    /* Versions: two opens of one file agree; the same bytes saved again (a rename over the
     * path) are another version; an index out of range has none. */
    {
        struct s3d_reader *r2 = NULL;
        char v1[96];
        CHECK_OK(s3d_checkpoint_write(c, path, ts.src, ts.n, NULL, 0, NULL));
        CHECK_OK(s3d_reader_open(c, path, &r));
        CHECK_OK(s3d_reader_open(c, path, &r2));
        CHECK(s3d_reader_shard_version(r, 0) != NULL);
        CHECK(strncmp(s3d_reader_shard_version(r, 0), "file:", 5) == 0);
        CHECK_STREQ(s3d_reader_shard_version(r, 0), s3d_reader_shard_version(r2, 0));
        CHECK(s3d_reader_shard_version(r, 1) == NULL && s3d_reader_shard_version(NULL, 0) == NULL);
        snprintf(v1, sizeof(v1), "%s", s3d_reader_shard_version(r, 0));
        s3d_reader_close(r2);
        r2 = NULL;
        CHECK_OK(s3d_checkpoint_write(c, path, ts.src, ts.n, NULL, 0, NULL));
        CHECK_OK(s3d_reader_open(c, path, &r2));
        CHECK(strcmp(v1, s3d_reader_shard_version(r2, 0)) != 0);
        CHECK_STREQ(s3d_reader_shard_version(r, 0), v1); /* the first reader's own version */
        s3d_reader_close(r2);
        s3d_reader_close(r);
        r = NULL;
    }

    /* No checksum requested: none stored, reads still work. */
    {
        memset(&wo, 0, sizeof(wo));
        wo.no_checksum = 1;
        CHECK_OK(s3d_checkpoint_write(c, path, ts.src, ts.n, NULL, 0, &wo));
        CHECK_OK(s3d_reader_open(c, path, &r));
        CHECK(s3d_reader_metadata_get(r, "s3direct.crc32c") == NULL);
        s3d_reader_close(r);
        r = NULL;
        t_verify_checkpoint(c, path, &ts, -1);
    }
    s3d_client_free(c);

    /* The emulated GPU: device pointers go through the staging pool and async copies whose
     * completion is only known through events. */
    setenv("S3D_DEVICE_EMULATE", "1", 1);
    c = new_client();
    for (size_t i = 0; i < ts.n; i++)
        if (i % 3 != 0)
            t_tensor_to_emu(&ts, i);
    snprintf(path, sizeof(path), "%s/gpu.safetensors", t_tmpdir());
    CHECK_OK(s3d_checkpoint_write(c, path, ts.src, ts.n, NULL, 0, NULL));
    t_verify_checkpoint(c, path, &ts, 0);
    t_verify_checkpoint(c, path, &ts, -1);
    s3d_client_free(c);

    t_free_tensors(&ts);
    printf("ok\n");
    return 0;
}
