/* fuzz.h - shared by the fuzz targets (fuzz_*.c: safetensors, xml, ini, index, uri) and their
 * plain driver fuzz_main.c.
 *
 * A target defines LLVMFuzzerTestOneInput, checks its invariants with REQUIRE, and gives the
 * plain driver its mutation vocabulary: s3d_fuzz_tokens (spliced into inputs) and
 * s3d_fuzz_fixup (a format-specific edit, e.g. making a length field agree with the mutated
 * size; may do nothing). The libFuzzer builds ignore both. */
#ifndef S3D_TEST_FUZZ_H
#define S3D_TEST_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

extern const char *const s3d_fuzz_tokens[];
extern const size_t s3d_fuzz_n_tokens;
/* Called by the driver as one of its edits, with a random r. */
void s3d_fuzz_fixup(uint8_t *buf, size_t len, uint64_t r);

#define REQUIRE(c)                                                                                 \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #c);              \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif
