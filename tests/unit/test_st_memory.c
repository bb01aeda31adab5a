/* test_st_memory.c - parsing a large safetensors header takes memory in proportion to the
 * header: the parse adds less than 3x the header's size to the peak (so the header and its
 * parse together stay under 4x). jansson's whole-document parse took ~15x (1.62 GB for a
 * 99.6 MB header of 1.45 M tensors); the header is now walked one entry at a time. */
#include <sys/resource.h>

#include "format/safetensors.h"
#include "testutil.h"

#define N 400000 /* tensors: a ~28 MB header */

#if defined(__SANITIZE_ADDRESS__)
#define T_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define T_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define T_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define T_TSAN 1
#endif
#endif

static long maxrss_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static size_t entry(char *out, size_t cap, size_t i)
{
    int n = snprintf(out, cap,
                     "%s\"model.layer.%zu.w\":{\"dtype\":\"U8\",\"shape\":[1],"
                     "\"data_offsets\":[%zu,%zu]}",
                     i == 0 ? "" : ",", i, i, i + 1);
    return (size_t)n;
}

int main(void)
{
    char tmp[160];
    size_t len = 2, pos = 0;
    char *json;
    long before, after;
    struct s3d_st_header h;

#ifdef T_ASAN
    t_skip("AddressSanitizer's shadow memory and quarantine make RSS meaningless");
#endif
#ifdef T_TSAN
    t_skip("ThreadSanitizer's shadow memory and allocator make RSS meaningless");
#endif
    for (size_t i = 0; i < N; i++)
        len += entry(tmp, sizeof(tmp), i);
    /* One exact allocation, touched: the high-water mark is then the header itself. */
    json = malloc(len + 1);
    CHECK(json != NULL);
    json[pos++] = '{';
    for (size_t i = 0; i < N; i++)
        pos += entry(json + pos, len + 1 - pos, i);
    json[pos++] = '}';
    CHECK(pos == len);
    before = maxrss_kb();
    CHECK_OK(s3d_st_parse(json, len, S3D_ST_OBJECT_SIZE_UNKNOWN, &h));
    after = maxrss_kb();
    CHECK(h.n_tensors == N);
    printf("header %zu bytes: the parse added %ld KB to the peak (%.2fx the header)\n", len,
           after - before, (double)(after - before) * 1024.0 / (double)len);
    CHECK((double)(after - before) * 1024.0 < 3.0 * (double)len);
    s3d_st_header_free(&h);
    free(json);
    printf("ok\n");
    return 0;
}
