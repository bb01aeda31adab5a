/* fuzz_safetensors.c - fuzz target for the safetensors header parser and the index parser.
 *
 * The input is a whole object: the 8-byte length, the header, the data. Whatever the bytes,
 * the parsers must return (no crash, no leak under ASan) and, when they accept, what they
 * return must hold the format's invariants; an accepted header is then rebuilt with the
 * builder and parsed again, which must give the same tensors at the same offsets.
 *
 * Built two ways: with clang -fsanitize=fuzzer as a libFuzzer binary (tests/unit/format
 * .cmake), and with S3D_FUZZ_DRIVER as an ordinary test whose main() runs every file of the
 * corpus folder (S3D_FUZZ_CORPUS, or the folders given as arguments) through the target,
 * with every prefix of it and a few hundred seeded mutations of it. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dynbuf.h"
#include "format/index.h"
#include "format/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(c)                                                                                 \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #c);              \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

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
    REQUIRE(h2.n_metadata == nm + 2);
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

#ifdef S3D_FUZZ_DRIVER
/* Seeded mutations (a fixed xorshift, so a failure reproduces): flip a byte, cut a run,
 * splice in a JSON token, or make the length field agree with the mutated size. */
#define MUTATIONS_PER_INPUT 300
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void mutate_and_run(const uint8_t *seed, size_t seed_len)
{
    static const char *const toks[] = {"\"",
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
    enum { CAP = 1 << 16 };
    uint8_t *buf = malloc(CAP);
    REQUIRE(buf != NULL);
    for (int it = 0; it < MUTATIONS_PER_INPUT; it++) {
        size_t len = seed_len < CAP / 2 ? seed_len : CAP / 2;
        int n = 1 + (int)(rnd() % 4);
        uint8_t *x;
        memcpy(buf, seed, len);
        for (int m = 0; m < n; m++) {
            size_t pos = len ? (size_t)(rnd() % len) : 0;
            switch (rnd() % 4) {
            case 0:
                if (len)
                    buf[pos] = (uint8_t)rnd();
                break;
            case 1: {
                size_t cut = 1 + (size_t)(rnd() % 8);
                if (pos + cut > len)
                    cut = len - pos;
                memmove(buf + pos, buf + pos + cut, len - pos - cut);
                len -= cut;
                break;
            }
            case 2: {
                const char *t = toks[rnd() % (sizeof(toks) / sizeof(toks[0]))];
                size_t tl = strlen(t);
                if (len + tl < CAP) {
                    memmove(buf + pos + tl, buf + pos, len - pos);
                    memcpy(buf + pos, t, tl);
                    len += tl;
                }
                break;
            }
            default:
                if (len > 8) {
                    uint64_t nn = len - 8 - rnd() % 4;
                    for (int i = 0; i < 8; i++)
                        buf[i] = (uint8_t)(nn >> (8 * i));
                }
            }
        }
        x = malloc(len ? len : 1); /* exact size, for ASan */
        REQUIRE(x != NULL);
        memcpy(x, buf, len);
        LLVMFuzzerTestOneInput(x, len);
        free(x);
    }
    free(buf);
}

static int run_dir(const char *dir, int *count)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    if (d == NULL) {
        perror(dir);
        return -1;
    }
    while ((e = readdir(d)) != NULL) {
        char path[4096];
        FILE *f;
        long len;
        uint8_t *buf;
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        f = fopen(path, "rb");
        if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0) {
            perror(path);
            closedir(d);
            return -1;
        }
        rewind(f);
        /* An exact-size heap copy, so that ASan sees any read past the end. */
        buf = malloc(len > 0 ? (size_t)len : 1);
        if (buf == NULL || fread(buf, 1, (size_t)len, f) != (size_t)len) {
            perror(path);
            closedir(d);
            return -1;
        }
        fclose(f);
        LLVMFuzzerTestOneInput(buf, (size_t)len);
        /* Every prefix too: a header cut anywhere must be refused cleanly. */
        for (long cut = 0; cut < len && cut < 512; cut++)
            LLVMFuzzerTestOneInput(buf, (size_t)cut);
        mutate_and_run(buf, (size_t)len);
        free(buf);
        (*count)++;
    }
    closedir(d);
    return 0;
}

int main(int argc, char **argv)
{
    int count = 0;
    if (argc > 1) {
        for (int i = 1; i < argc; i++)
            if (run_dir(argv[i], &count) < 0)
                return 1;
    } else if (run_dir(S3D_FUZZ_CORPUS, &count) < 0) {
        return 1;
    }
    if (count == 0) {
        fprintf(stderr, "empty corpus\n");
        return 1;
    }
    printf("ok: %d inputs\n", count);
    return 0;
}
#endif
