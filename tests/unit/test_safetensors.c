/* test_safetensors.c - build -> parse round trips of safetensors headers: every dtype
 * (sub-byte ones included), scalars, empty tensors, metadata, names that need escaping, CRC
 * placeholders patched in place; the reference's own byte-exact vectors; what the reference
 * accepts that a naive parser would not; builder argument checks; 100,000 tensors. */
#include <time.h>

#include "common/dynbuf.h"
#include "format/safetensors.h"
#include "testutil.h"

/* Parses a built header as the whole object: header + data_len bytes of data. */
static int parse_built(const struct s3d_dynbuf *b, uint64_t data_len, struct s3d_st_header *h)
{
    uint64_t n;
    int rc = s3d_st_header_len((const uint8_t *)b->data, b->len + data_len, &n);
    if (rc < 0)
        return rc;
    CHECK_EQ_U64(n + 8, b->len);
    return s3d_st_parse(b->data + 8, (size_t)n, b->len + data_len, h);
}

/* A header from raw JSON, parsed against an object of 8 + len + data_len bytes. */
static int parse_json(const char *json, uint64_t data_len, struct s3d_st_header *h)
{
    return s3d_st_parse(json, strlen(json), 8 + strlen(json) + data_len, h);
}

static void test_every_dtype(void)
{
    static const int64_t s_plain[] = {2, 3};
    static const int64_t s_f4[] = {2, 4}; /* 8 x 4 bits = 4 bytes */
    static const int64_t s_f6[] = {4};    /* 4 x 6 bits = 3 bytes */
    static const int64_t s_empty[] = {3, 0};
    struct s3d_tensor_src t[S3D_DTYPE_COUNT_ + 2];
    char names[S3D_DTYPE_COUNT_][32];
    const struct s3d_metadata_entry meta[] = {
        {"framework", "pt"}, {"format", "pt"}, {"note", "caf\xc3\xa9 \"quoted\" \\ \n"}};
    uint64_t offsets[S3D_DTYPE_COUNT_ + 2], expect_off = 0;
    size_t crc_pos[S3D_DTYPE_COUNT_ + 2], n = 0, len_before;
    struct s3d_dynbuf b;
    struct s3d_st_header h;

    memset(t, 0, sizeof(t));
    for (int d = 1; d < S3D_DTYPE_COUNT_; d++, n++) {
        snprintf(names[d], sizeof(names[d]), "t.%s", s3d_dtype_name(d));
        t[n].name = names[d];
        t[n].dtype = d;
        t[n].ndim = d == S3D_DTYPE_F6_E2M3 || d == S3D_DTYPE_F6_E3M2 ? 1 : 2;
        t[n].shape = d == S3D_DTYPE_F4                                    ? s_f4
                     : (d == S3D_DTYPE_F6_E2M3 || d == S3D_DTYPE_F6_E3M2) ? s_f6
                                                                          : s_plain;
        CHECK_OK(s3d_dtype_nbytes(d, t[n].shape, t[n].ndim, &t[n].nbytes));
        t[n].device = -1;
    }
    t[n++] = (struct s3d_tensor_src){"scalar", S3D_DTYPE_F32, 0, NULL, NULL, -1, 4};
    t[n++] = (struct s3d_tensor_src){"empty", S3D_DTYPE_BF16, 2, s_empty, NULL, -1, 0};

    s3d_dynbuf_init(&b, 0);
    CHECK_OK(s3d_st_build(t, n, meta, 3, 1, &b, offsets, crc_pos));
    CHECK(b.len % 8 == 0);
    for (size_t i = 0; i < n; i++) {
        CHECK_EQ_U64(offsets[i], expect_off);
        expect_off += t[i].nbytes;
        CHECK(memcmp(b.data + crc_pos[i], "00000000", 8) == 0);
    }

    CHECK_OK(parse_built(&b, expect_off, &h));
    CHECK_EQ_U64(h.data_start, b.len);
    CHECK_EQ_U64(h.data_len, expect_off);
    CHECK_EQ_U64(h.n_tensors, n);
    for (size_t i = 0; i < n; i++) {
        const struct s3d_st_tensor *p = &h.tensors[i];
        size_t idx;
        /* Written in the given order, so offset order is the same order. */
        CHECK_STREQ(p->name, t[i].name);
        CHECK_EQ_U64(p->name_len, strlen(t[i].name));
        CHECK(p->dtype == t[i].dtype);
        CHECK(p->ndim == t[i].ndim);
        for (int32_t d = 0; d < p->ndim; d++)
            CHECK(p->shape[d] == t[i].shape[d]);
        CHECK(p->ndim > 0 || p->shape == NULL);
        CHECK_EQ_U64(p->begin, offsets[i]);
        CHECK_EQ_U64(p->end - p->begin, t[i].nbytes);
        CHECK(p->has_crc32c == 1 && p->crc32c == 0);
        CHECK_OK(s3d_st_find(&h, t[i].name, strlen(t[i].name), &idx));
        CHECK_EQ_U64(idx, i);
    }
    /* Metadata: the library's keys first, then the caller's, in order, values verbatim. */
    CHECK_EQ_U64(h.n_metadata, 6);
    CHECK_STREQ(h.metadata[0].key, "s3direct.header_crc32c");
    CHECK(strlen(h.metadata[0].value) == 8);
    CHECK(memcmp(b.data + 8, S3D_ST_HEADER_CRC_PREFIX, strlen(S3D_ST_HEADER_CRC_PREFIX)) == 0);
    CHECK_STREQ(h.metadata[1].key, "s3direct.crc32c");
    CHECK(h.metadata[1].value[0] == '{');
    CHECK_STREQ(h.metadata[2].key, "s3direct.format");
    CHECK_STREQ(h.metadata[2].value, "1");
    for (int i = 0; i < 3; i++) {
        CHECK_STREQ(h.metadata[3 + i].key, meta[i].key);
        CHECK_STREQ(h.metadata[3 + i].value, meta[i].value);
    }
    CHECK_STREQ(s3d_st_meta_get(&h, "note"), meta[2].value);
    CHECK(s3d_st_meta_get(&h, "absent") == NULL);
    CHECK_ERR(s3d_st_find(&h, "t.F3", 4, &n), S3D_ENOTENSOR);
    CHECK_MSG_HAS("t.F3");
    s3d_st_header_free(&h);

    /* Patch every CRC in place: the length never changes and the parser reads them back. */
    len_before = b.len;
    for (size_t i = 0; i < n; i++)
        s3d_st_patch_crc(b.data, crc_pos[i], 0xdeadbeefu ^ (uint32_t)(i * 0x01010101u));
    /* Until sealed again, the header's own CRC no longer matches. */
    CHECK_ERR(parse_built(&b, expect_off, &h), S3D_ECHECKSUM);
    CHECK_MSG_HAS("header CRC32C mismatch");
    s3d_st_seal(b.data);
    CHECK_EQ_U64(b.len, len_before);
    CHECK_OK(parse_built(&b, expect_off, &h));
    for (size_t i = 0; i < n; i++) {
        CHECK(h.tensors[i].has_crc32c == 1);
        CHECK(h.tensors[i].crc32c == (0xdeadbeefu ^ (uint32_t)(i * 0x01010101u)));
    }
    s3d_st_header_free(&h);
    s3d_st_header_free(&h); /* freeing twice is harmless: it left h empty */
    s3d_st_header_free(NULL);
    s3d_dynbuf_free(&b);
}

/* Names that JSON must escape, at both levels of the CRC map (a JSON text inside a JSON
 * string): the placeholder positions must still be exact. */
static void test_escaped_names(void)
{
    static const int64_t s1[] = {1};
    const char *names[] = {"q\"uote", "back\\slash", "new\nline\ttab\x01",
                           /* one name, split so that "de" does not extend \xb6 */
                           ("\xc3\xbcnic\xc3\xb6"
                            "de \xe2\x82\xac \xf0\x9f\x98\x80"),
                           "slash/and.dots", "\x7f", "00000000", "\":\"00000000\"", "a"};
    struct s3d_tensor_src t[9];
    size_t crc_pos[9];
    struct s3d_dynbuf b;
    struct s3d_st_header h;

    for (int i = 0; i < 9; i++)
        t[i] = (struct s3d_tensor_src){names[i], S3D_DTYPE_U8, 1, s1, NULL, -1, 1};
    s3d_dynbuf_init(&b, 0);
    CHECK_OK(s3d_st_build(t, 9, NULL, 0, 1, &b, NULL, crc_pos));
    for (int i = 0; i < 9; i++)
        s3d_st_patch_crc(b.data, crc_pos[i], 0x01234567u * (uint32_t)(i + 1));
    s3d_st_seal(b.data);
    CHECK_OK(parse_built(&b, 9, &h));
    CHECK_EQ_U64(h.n_tensors, 9);
    for (int i = 0; i < 9; i++) {
        size_t idx;
        CHECK_OK(s3d_st_find(&h, names[i], strlen(names[i]), &idx));
        CHECK_EQ_U64(h.tensors[idx].begin, (uint64_t)i);
        CHECK(h.tensors[idx].has_crc32c);
        CHECK(h.tensors[idx].crc32c == 0x01234567u * (uint32_t)(i + 1));
    }
    s3d_st_header_free(&h);
    s3d_dynbuf_free(&b);
}

/* What the reference writes for the same input, byte for byte (its test_empty and
 * test_serialization vectors, confirmed with safetensors 0.8). */
static void test_reference_bytes(void)
{
    const struct s3d_metadata_entry fw = {"framework", "pt"};
    static const int64_t s123[] = {1, 2, 3};
    const struct s3d_tensor_src attn = {"attn.0", S3D_DTYPE_F32, 3, s123, NULL, -1, 24};
    static const char empty[] = "\x08\0\0\0\0\0\0\0{}      ";
    static const char with_md[] =
        "\x28\0\0\0\0\0\0\0{\"__metadata__\":{\"framework\":\"pt\"}}     ";
    static const char one[] =
        "\x40\0\0\0\0\0\0\0{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,"
        "24]}}";
    struct s3d_dynbuf b;
    struct s3d_st_header h;

    s3d_dynbuf_init(&b, 0);
    CHECK_OK(s3d_st_build(NULL, 0, NULL, 0, 0, &b, NULL, NULL));
    CHECK_EQ_U64(b.len, sizeof(empty) - 1);
    CHECK(memcmp(b.data, empty, b.len) == 0);
    CHECK_OK(parse_built(&b, 0, &h));
    CHECK(h.n_tensors == 0 && h.n_metadata == 0 && h.data_len == 0);
    s3d_st_header_free(&h);

    CHECK_OK(s3d_st_build(NULL, 0, &fw, 1, 0, &b, NULL, NULL));
    CHECK_EQ_U64(b.len, sizeof(with_md) - 1);
    CHECK(memcmp(b.data, with_md, b.len) == 0);

    CHECK_OK(s3d_st_build(&attn, 1, NULL, 0, 0, &b, NULL, NULL));
    CHECK_EQ_U64(b.len, sizeof(one) - 1);
    CHECK(memcmp(b.data, one, b.len) == 0);
    s3d_dynbuf_free(&b);
}

/* Inputs the reference (safetensors 0.8) accepts; checked against it by hand and in
 * tests/py/test_format_interop.py. */
static void test_reference_accepts(void)
{
    struct s3d_st_header h;

    /* Header order is not offset order: tensors come back sorted by offset. */
    CHECK_OK(parse_json("{\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]},"
                        "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
                        2, &h));
    CHECK_STREQ(h.tensors[0].name, "a");
    CHECK_STREQ(h.tensors[1].name, "b");
    s3d_st_header_free(&h);
    /* A zero-length tensor at the same offset as a non-empty one, listed after it: sorted by
     * (begin, end) it comes first, so the layout is valid. */
    CHECK_OK(parse_json("{\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                        "\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}",
                        1, &h));
    CHECK_STREQ(h.tensors[0].name, "a");
    s3d_st_header_free(&h);
    /* Two empty tensors at the same offset keep header order. */
    CHECK_OK(parse_json("{\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},"
                        "\"y\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[0,0]}}",
                        0, &h));
    CHECK_STREQ(h.tensors[0].name, "z");
    CHECK_STREQ(h.tensors[1].name, "y");
    s3d_st_header_free(&h);
    /* Leading whitespace (the reference does not require '{' first), trailing padding,
     * "__metadata__": null, unknown fields in an entry, an empty name. */
    CHECK_OK(parse_json(" \n{\"__metadata__\":null,\"\":{\"dtype\":\"U8\",\"shape\":[1],"
                        "\"data_offsets\":[0,1],\"extra\":[1,2]}}   ",
                        1, &h));
    CHECK_EQ_U64(h.n_tensors, 1);
    CHECK_EQ_U64(h.n_metadata, 0);
    CHECK_STREQ(h.tensors[0].name, "");
    s3d_st_header_free(&h);
    /* A shape whose dimension 0 comes first never overflows. */
    CHECK_OK(parse_json("{\"a\":{\"dtype\":\"U8\",\"shape\":[0,9223372036854775807,2],"
                        "\"data_offsets\":[0,0]}}",
                        0, &h));
    s3d_st_header_free(&h);
    /* Unknown object size: no check against it. */
    CHECK_OK(s3d_st_parse("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 53,
                          S3D_ST_OBJECT_SIZE_UNKNOWN, &h));
    CHECK_EQ_U64(h.data_len, 1);
    CHECK_EQ_U64(h.data_start, 8 + 53);
    s3d_st_header_free(&h);
    /* A crc map may leave tensors out; s3direct.crc32c is kept in the metadata verbatim. */
    CHECK_OK(parse_json("{\"__metadata__\":{\"s3direct.crc32c\":\"{\\\"a\\\":\\\"0000ffff\\\"}\"},"
                        "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                        "\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
                        2, &h));
    CHECK(h.tensors[0].has_crc32c && h.tensors[0].crc32c == 0xffff);
    CHECK(!h.tensors[1].has_crc32c);
    CHECK_STREQ(s3d_st_meta_get(&h, "s3direct.crc32c"), "{\"a\":\"0000ffff\"}");
    s3d_st_header_free(&h);
}

static void test_header_len(void)
{
    uint8_t f[8] = {0x10, 0, 0, 0, 0, 0, 0, 0};
    uint64_t n;
    CHECK_OK(s3d_st_header_len(f, 24, &n));
    CHECK_EQ_U64(n, 16);
    CHECK_OK(s3d_st_header_len(f, S3D_ST_OBJECT_SIZE_UNKNOWN, &n));
    CHECK_ERR(s3d_st_header_len(f, 23, &n), S3D_EFMT_HEADER_SIZE);
    CHECK_ERR(s3d_st_header_len(f, 7, &n), S3D_EFMT_HEADER_SIZE);
    /* 100,000,000 exactly is allowed, one more is not. */
    f[0] = 0x00;
    f[1] = 0xe1;
    f[2] = 0xf5;
    f[3] = 0x05;
    CHECK_OK(s3d_st_header_len(f, S3D_ST_OBJECT_SIZE_UNKNOWN, &n));
    CHECK_EQ_U64(n, 100000000);
    f[0] = 0x01;
    CHECK_ERR(s3d_st_header_len(f, S3D_ST_OBJECT_SIZE_UNKNOWN, &n), S3D_EFMT_HEADER_SIZE);
    CHECK_MSG_HAS("100000001");
    memset(f, 0xff, sizeof(f));
    CHECK_ERR(s3d_st_header_len(f, S3D_ST_OBJECT_SIZE_UNKNOWN, &n), S3D_EFMT_HEADER_SIZE);
}

static void test_build_rejects(void)
{
    static const int64_t s2[] = {2}, s3[] = {3}, neg[] = {-2};
    struct s3d_tensor_src ok = {"w", S3D_DTYPE_F16, 1, s2, NULL, -1, 4};
    struct s3d_tensor_src t[2];
    struct s3d_metadata_entry m[2];
    struct s3d_dynbuf b;

    s3d_dynbuf_init(&b, 0);
#define REJECT(T0, T1, NT, M0, M1, NM, needle)                                                     \
    do {                                                                                           \
        t[0] = (T0);                                                                               \
        t[1] = (T1);                                                                               \
        m[0] = (M0);                                                                               \
        m[1] = (M1);                                                                               \
        CHECK_ERR(s3d_st_build(t, NT, m, NM, 1, &b, NULL, NULL), S3D_EINVAL);                      \
        CHECK_MSG_HAS(needle);                                                                     \
        CHECK(b.len == 0);                                                                         \
    } while (0)
    struct s3d_metadata_entry nom = {"k", "v"};
    struct s3d_tensor_src x = ok;
    REJECT(ok, ok, 2, nom, nom, 0, "\"w\" is used twice");
    x.name = "";
    REJECT(x, ok, 1, nom, nom, 0, "tensor 0 has no name");
    x.name = NULL;
    REJECT(ok, x, 2, nom, nom, 0, "tensor 1 has no name");
    x.name = "bad\xff";
    REJECT(x, ok, 1, nom, nom, 0, "not valid UTF-8");
    x.name = "__metadata__";
    REJECT(x, ok, 1, nom, nom, 0, "reserved");
    x = ok;
    x.dtype = 0;
    REJECT(x, ok, 1, nom, nom, 0, "\"w\": invalid dtype");
    x = ok;
    x.nbytes = 5;
    REJECT(x, ok, 1, nom, nom, 0, "\"w\": nbytes is 5");
    x = (struct s3d_tensor_src){"f4", S3D_DTYPE_F4, 1, s3, NULL, -1, 2};
    REJECT(x, ok, 1, nom, nom, 0, "\"f4\": 3 elements of F4");
    x = (struct s3d_tensor_src){"neg", S3D_DTYPE_U8, 1, neg, NULL, -1, 0};
    REJECT(x, ok, 1, nom, nom, 0, "\"neg\": dimension 0 is negative");
    REJECT(ok, ok, 1, ((struct s3d_metadata_entry){"s3direct.crc32c", "{}"}), nom, 1,
           "\"s3direct.crc32c\" is reserved");
    REJECT(ok, ok, 1, ((struct s3d_metadata_entry){"s3direct.x", "1"}), nom, 1, "reserved");
    REJECT(ok, ok, 1, nom, nom, 2, "\"k\" is given twice");
    REJECT(ok, ok, 1, ((struct s3d_metadata_entry){NULL, "v"}), nom, 1, "metadata key 0 is NULL");
    REJECT(ok, ok, 1, nom, ((struct s3d_metadata_entry){"k2", NULL}), 2, "value 1 is NULL");
    REJECT(ok, ok, 1, ((struct s3d_metadata_entry){"k", "\xc0\x80"}), nom, 1, "UTF-8");
#undef REJECT
    /* A header over the reference's 100 MB cap is refused, not written. */
    {
        char *big = malloc(S3D_ST_MAX_HEADER);
        CHECK(big != NULL);
        memset(big, 'x', S3D_ST_MAX_HEADER - 1);
        big[S3D_ST_MAX_HEADER - 1] = '\0';
        m[0] = (struct s3d_metadata_entry){"big", big};
        CHECK_ERR(s3d_st_build(&ok, 1, m, 1, 0, &b, NULL, NULL), S3D_ETOOBIG);
        CHECK_MSG_HAS("over the cap");
        CHECK(b.len == 0);
        free(big);
    }
    /* Without CRCs no s3direct.* key is written. */
    CHECK_OK(s3d_st_build(&ok, 1, NULL, 0, 0, &b, NULL, NULL));
    CHECK(strstr(b.data + 8, "s3direct") == NULL);
    s3d_dynbuf_free(&b);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts); /* CPU time: the machine is shared */
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* 100,000 tensors: a header of a few MB, as big models have; build, patch, parse, find. */
static void test_many(void)
{
    enum { N = 100000 };
    static const int64_t shape[] = {16, 8};
    struct s3d_tensor_src *t = calloc(N, sizeof(*t));
    char(*names)[40] = calloc(N, sizeof(*names));
    size_t *crc_pos = calloc(N, sizeof(*crc_pos));
    struct s3d_dynbuf b;
    struct s3d_st_header h;
    double t0, t1, t2;

    CHECK(t != NULL && names != NULL && crc_pos != NULL);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "model.layers.%d.mlp.weight", N - 1 - i);
        t[i] = (struct s3d_tensor_src){names[i], S3D_DTYPE_BF16, 2, shape, NULL, -1, 256};
    }
    s3d_dynbuf_init(&b, 0);
    t0 = now_s();
    CHECK_OK(s3d_st_build(t, N, NULL, 0, 1, &b, NULL, crc_pos));
    for (int i = 0; i < N; i++)
        s3d_st_patch_crc(b.data, crc_pos[i], (uint32_t)i * 2654435761u);
    s3d_st_seal(b.data);
    t1 = now_s();
    CHECK_OK(parse_built(&b, (uint64_t)N * 256, &h));
    t2 = now_s();
    CHECK_EQ_U64(h.n_tensors, N);
    for (int i = 0; i < N; i += 997) {
        size_t idx;
        CHECK_OK(s3d_st_find(&h, names[i], strlen(names[i]), &idx));
        CHECK_EQ_U64(idx, (uint64_t)i);
        CHECK(h.tensors[idx].crc32c == (uint32_t)i * 2654435761u);
        CHECK_EQ_U64(h.tensors[idx].begin, (uint64_t)i * 256);
    }
    printf("100000 tensors: header %zu bytes, build+patch %.3f s, parse %.3f s (CPU)\n", b.len,
           t1 - t0, t2 - t1);
    s3d_st_header_free(&h);
    s3d_dynbuf_free(&b);
    free(t);
    free(names);
    free(crc_pos);
}

int main(void)
{
    test_every_dtype();
    test_escaped_names();
    test_reference_bytes();
    test_reference_accepts();
    test_header_len();
    test_build_rejects();
    test_many();
    printf("ok\n");
    return 0;
}
