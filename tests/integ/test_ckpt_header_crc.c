/* test_ckpt_header_crc.c - the header's own CRC-32C (s3direct.header_crc32c): one bit flipped
 * anywhere in the header of a checkpoint s3direct wrote (a metadata value: "step" 7 -> 6, a
 * tensor's stored CRC, a name, an offset, the padding, the key itself) fails the open with a
 * clear error instead of changing what the reader reports; S3D_ECHECKSUM naming the file for
 * the flip that would otherwise pass. A file without the key (no_checksum; other writers)
 * opens as before, and the files s3direct writes still open in the safetensors library
 * (tests/py/test_format_interop.py). */
#include <fcntl.h>
#include <unistd.h>

#include "ckpt_util.h"

static void flip_bit(const char *path, uint64_t off, int bit)
{
    int fd = open(path, O_RDWR);
    unsigned char b;
    CHECK(fd >= 0);
    CHECK(pread(fd, &b, 1, (off_t)off) == 1);
    b ^= (unsigned char)(1u << bit);
    CHECK(pwrite(fd, &b, 1, (off_t)off) == 1);
    close(fd);
}

static char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    char *p;
    long len;
    CHECK(f != NULL);
    CHECK(fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0);
    p = malloc((size_t)len);
    CHECK(p != NULL && fread(p, 1, (size_t)len, f) == (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return p;
}

static void write_all(const char *path, const char *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL && fwrite(p, 1, n, f) == n && fclose(f) == 0);
}

int main(void)
{
    struct s3d_client *c = NULL;
    struct s3d_client_options o;
    struct t_tensors ts;
    struct s3d_write_options wo;
    struct s3d_reader *r = NULL;
    const struct s3d_metadata_entry meta[] = {{"step", "7"}, {"note", "hello"}};
    char path[512];
    char *orig, *hit;
    size_t size, json_len, opened = 0;
    int rc;

    memset(&o, 0, sizeof(o));
    CHECK_OK(s3d_client_new(&o, &c));
    t_make_tensors(&ts, 5, 1000, 3);
    snprintf(path, sizeof(path), "%s/hdr.safetensors", t_tmpdir());
    memset(&wo, 0, sizeof(wo));
    CHECK_OK(s3d_checkpoint_write(c, path, ts.src, ts.n, meta, 2, &wo));
    t_verify_checkpoint(c, path, &ts, -1);
    orig = read_all(path, &size);
    memcpy(&json_len, orig, 8);
    CHECK(8 + json_len <= size);

    /* The flip of the report: "step": "7" -> "6" (0x37 -> 0x36). */
    hit = memmem(orig + 8, json_len, "\"step\":\"7\"", 10);
    CHECK(hit != NULL);
    flip_bit(path, (uint64_t)(hit - orig) + 8, 0);
    CHECK_ERR(s3d_reader_open(c, path, &r), S3D_ECHECKSUM);
    CHECK_MSG_HAS(path);
    CHECK_MSG_HAS("header CRC32C mismatch");

    /* Every single-bit flip of the header (length field and JSON, padding included) fails
     * the open; none opens with other content. */
    for (size_t off = 0; off < 8 + json_len; off++) {
        for (int bit = 0; bit < 8; bit++) {
            write_all(path, orig, size);
            flip_bit(path, off, bit);
            rc = s3d_reader_open(c, path, &r);
            if (rc == 0) {
                opened++;
                fprintf(stderr, "a flip of bit %d of byte %zu still opens\n", bit, off);
                s3d_reader_close(r);
                r = NULL;
            } else if (off >= 8) {
                /* In the JSON: the header CRC speaks first. */
                CHECK(rc == S3D_ECHECKSUM);
            }
        }
    }
    CHECK(opened == 0);
    write_all(path, orig, size);
    t_verify_checkpoint(c, path, &ts, -1);

    /* Without CRCs (the reference's exact bytes) there is no key: nothing to check, and a
     * flipped metadata value goes unnoticed as in any safetensors file. */
    wo.no_checksum = 1;
    CHECK_OK(s3d_checkpoint_write(c, path, ts.src, ts.n, meta, 2, &wo));
    free(orig);
    orig = read_all(path, &size);
    CHECK(memmem(orig, size, "s3direct.header_crc32c", 22) == NULL);
    t_verify_checkpoint(c, path, &ts, -1);

    free(orig);
    t_free_tensors(&ts);
    s3d_client_free(c);
    return 0;
}
