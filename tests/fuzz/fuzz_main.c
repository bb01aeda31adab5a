/* fuzz_main.c - a plain driver for the libFuzzer-style targets (fuzz_*.c), so they build with
 * gcc and run as ordinary tests: every file of the corpus folders (S3D_FUZZ_CORPUS, one or
 * more folders separated by ':', or the folders given as arguments) goes through
 * LLVMFuzzerTestOneInput, then every prefix of it (truncation), then a fixed number of seeded
 * mutations (byte flips, insertions of the target's tokens, deletions and duplications of
 * short runs, the target's own fix-up), all as exact-size heap copies so that ASan sees any
 * read past the end. Deterministic: the same corpus gives the same inputs on every run. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

/* Per corpus file; S3D_FUZZ_MUTATIONS overrides it for a longer local soak. */
#define MUTATIONS_PER_FILE 300
static long mutations = MUTATIONS_PER_FILE;

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void run_copy(const uint8_t *data, size_t len)
{
    uint8_t *copy = malloc(len ? len : 1);
    if (copy == NULL)
        abort();
    memcpy(copy, data, len);
    LLVMFuzzerTestOneInput(copy, len);
    free(copy);
}

static void mutate_and_run(const uint8_t *data, size_t len)
{
    size_t cap = len + 64, n = len, pos, k;
    uint8_t *buf = malloc(cap);
    long m;
    int edits;
    if (buf == NULL)
        abort();
    for (m = 0; m < mutations; m++) {
        memcpy(buf, data, len);
        n = len;
        edits = 1 + (int)(rnd() % 4);
        for (k = 0; k < (size_t)edits; k++) {
            pos = n ? (size_t)(rnd() % n) : 0;
            switch (rnd() % 5) {
            case 0: /* flip a byte */
                if (n)
                    buf[pos] ^= (uint8_t)(1u << (rnd() % 8));
                break;
            case 1: { /* insert a token */
                const char *t = s3d_fuzz_tokens[rnd() % s3d_fuzz_n_tokens];
                size_t tl = strlen(t);
                if (n + tl <= cap) {
                    memmove(buf + pos + tl, buf + pos, n - pos);
                    memcpy(buf + pos, t, tl);
                    n += tl;
                }
                break;
            }
            case 2: { /* delete a short run */
                size_t d = (size_t)(rnd() % 8);
                if (pos + d <= n) {
                    memmove(buf + pos, buf + pos + d, n - pos - d);
                    n -= d;
                }
                break;
            }
            case 3: /* the target's own edit */
                s3d_fuzz_fixup(buf, n, rnd());
                break;
            default: /* duplicate a short run */
                if (n && n + 8 <= cap) {
                    size_t d = (size_t)(rnd() % 8);
                    if (pos + d <= n) {
                        memmove(buf + pos + d, buf + pos, n - pos);
                        n += d;
                    }
                }
                break;
            }
        }
        run_copy(buf, n);
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
        size_t cut;
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
        buf = malloc(len > 0 ? (size_t)len : 1);
        if (buf == NULL || fread(buf, 1, (size_t)len, f) != (size_t)len) {
            perror(path);
            closedir(d);
            return -1;
        }
        fclose(f);
        run_copy(buf, (size_t)len);
        for (cut = 0; cut < (size_t)len && cut < 2048; cut++)
            run_copy(buf, cut);
        mutate_and_run(buf, (size_t)len);
        free(buf);
        (*count)++;
    }
    closedir(d);
    return 0;
}

int main(int argc, char **argv)
{
    int count = 0, i;
    if (getenv("S3D_FUZZ_MUTATIONS") != NULL)
        mutations = atol(getenv("S3D_FUZZ_MUTATIONS"));
    if (argc > 1) {
        for (i = 1; i < argc; i++)
            if (run_dir(argv[i], &count) < 0)
                return 1;
    } else {
        /* S3D_FUZZ_CORPUS: one folder, or several separated by ':'. */
        char dirs[] = S3D_FUZZ_CORPUS, *save = NULL, *dir;
        for (dir = strtok_r(dirs, ":", &save); dir != NULL; dir = strtok_r(NULL, ":", &save))
            if (run_dir(dir, &count) < 0)
                return 1;
    }
    if (count == 0) {
        fprintf(stderr, "empty corpus\n");
        return 1;
    }
    printf("ok: %d corpus files\n", count);
    return 0;
}
