/* test_malformed.c - malformed safetensors objects, each refused with its own S3D_EFMT_*
 * code and a message that says where.
 *
 * The table is the source of truth. tests/data/malformed/ holds the same objects as files
 * (plus valid seeds) so that the fuzz target runs over them too; this test checks that the
 * folder matches the table. After changing the table, regenerate the folder with
 *   build-dir/tests/bin/test_malformed --write tests/data/malformed */
#include <errno.h>
#include <sys/stat.h>

#include "common/compiler.h"
#include "common/dynbuf.h"
#include "format/safetensors.h"
#include "testutil.h"

#define U8_1(name) "\"" name "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}"
#define T(name, dtype, shape, b, e)                                                                \
    "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

struct mcase {
    const char *name;
    const char *json;
    size_t json_len;   /* 0: strlen(json) */
    uint64_t data_len; /* bytes of data after the header */
    uint64_t n_field;  /* 0: json_len; else the value written in the length field */
    size_t file_len;   /* 0: whole; else the file is cut to this many bytes */
    int code;
    const char *needle; /* must appear in the message */
};

static const struct mcase cases[] = {
    /* The length field and the header size. */
    {"len_truncated", "{}", 0, 0, 0, 5, S3D_EFMT_HEADER_SIZE, "too small"},
    {"len_over_cap", "{}", 0, 0, 100000001, 0, S3D_EFMT_HEADER_SIZE, "over the cap"},
    {"len_huge", "{}", 0, 0, UINT64_MAX, 0, S3D_EFMT_HEADER_SIZE, "over the cap"},
    {"len_past_object", "{}", 0, 0, 1000, 0, S3D_EFMT_HEADER_SIZE, "past the end"},
    /* Not JSON, or not an object. */
    {"not_json", "hello, world", 0, 0, 0, 0, S3D_EFMT_JSON, "not valid JSON"},
    {"json_array", "[]", 0, 0, 0, 0, S3D_EFMT_JSON, "array"},
    {"json_scalar", "42", 0, 0, 0, 0, S3D_EFMT_JSON, "not valid JSON"},
    {"empty_header", "", 0, 0, 0, 0, S3D_EFMT_JSON, "not valid JSON"},
    {"json_truncated", "{\"a\":{\"dtype\":", 0, 0, 0, 0, S3D_EFMT_JSON, "line 1"},
    {"trailing_garbage", "{} x", 0, 0, 0, 0, S3D_EFMT_JSON, "not valid JSON"},
    {"nul_padding", "{}\0\0\0\0\0\0", 8, 0, 0, 0, S3D_EFMT_JSON, "not valid JSON"},
    {"bom", "\xef\xbb\xbf{}", 0, 0, 0, 0, S3D_EFMT_JSON, "not valid JSON"},
    {"lone_surrogate_escape", "{\"a\\ud800\":{}}", 0, 0, 0, 0, S3D_EFMT_JSON, "not valid JSON"},
    {"nul_escape_in_name", "{\"a\\u0000b\":{}}", 0, 0, 0, 0, S3D_EFMT_JSON, "not valid JSON"},
    {"deep_nesting", "", 0, 0, 0, 0, 0, NULL}, /* built in get_case */
    /* Entries and their fields. */
    {"entry_not_object", "{\"a\":\"x\"}", 0, 0, 0, 0, S3D_EFMT_FIELD, "\"a\": entry is not"},
    {"missing_dtype", "{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 0, 1, 0, 0, S3D_EFMT_FIELD,
     "\"a\": missing \"dtype\""},
    {"missing_shape", "{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 0, 1, 0, 0,
     S3D_EFMT_FIELD, "\"a\": missing \"shape\""},
    {"missing_offsets", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", 0, 1, 0, 0, S3D_EFMT_FIELD,
     "\"a\": missing \"data_offsets\""},
    {"dtype_not_string", "{\"a\":{\"dtype\":5,\"shape\":[1],\"data_offsets\":[0,1]}}", 0, 1, 0, 0,
     S3D_EFMT_FIELD, "dtype is not a string"},
    {"shape_not_array", "{\"a\":{\"dtype\":\"U8\",\"shape\":1,\"data_offsets\":[0,1]}}", 0, 1, 0, 0,
     S3D_EFMT_FIELD, "shape is not an array"},
    {"shape_null", "{\"a\":{\"dtype\":\"U8\",\"shape\":null,\"data_offsets\":[0,1]}}", 0, 1, 0, 0,
     S3D_EFMT_FIELD, "shape is not an array"},
    {"offsets_object", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":{\"0\":0}}}", 0, 1,
     0, 0, S3D_EFMT_FIELD, "data_offsets is not an array"},
    /* Shapes. */
    {"shape_negative", "{" T("w", "U8", "[2,-1]", 0, 2) "}", 0, 2, 0, 0, S3D_EFMT_SHAPE,
     "\"w\": shape[1] is negative"},
    {"shape_float", "{" T("w", "U8", "[1.0]", 0, 1) "}", 0, 1, 0, 0, S3D_EFMT_SHAPE,
     "\"w\": shape[0] is not an integer"},
    {"shape_exponent", "{" T("w", "U8", "[1e0]", 0, 1) "}", 0, 1, 0, 0, S3D_EFMT_SHAPE,
     "not an integer"},
    {"shape_bool", "{" T("w", "U8", "[true]", 0, 1) "}", 0, 1, 0, 0, S3D_EFMT_SHAPE,
     "not an integer"},
    {"shape_string", "{" T("w", "U8", "[\"1\"]", 0, 1) "}", 0, 1, 0, 0, S3D_EFMT_SHAPE,
     "not an integer"},
    {"shape_overflow", "{" T("w", "U8", "[4294967296,4294967296,2]", 0, 0) "}", 0, 0, 0, 0,
     S3D_EFMT_SHAPE, "\"w\": element count overflows"},
    {"shape_overflow_before_zero", "{" T("w", "U8", "[4294967296,4294967296,0]", 0, 0) "}", 0, 0, 0,
     0, S3D_EFMT_SHAPE, "overflows"},
    {"shape_bits_overflow", "{" T("w", "F64", "[2305843009213693952]", 0, 0) "}", 0, 0, 0, 0,
     S3D_EFMT_SHAPE, "overflow a byte count"},
    {"shape_above_int64", "{" T("w", "U8", "[18446744073709551615]", 0, 0) "}", 0, 0, 0, 0,
     S3D_EFMT_SHAPE, "a dimension must fit in int64"},
    /* Offsets. */
    {"offsets_three", "{" T("w", "U8", "[1]", 0, 1) "}", 0, 1, 0, 0, 0, NULL}, /* patched */
    {"offsets_one", "{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0]}}", 0, 0, 0, 0,
     S3D_EFMT_OFFSETS, "\"w\": data_offsets has 1 entries, not 2"},
    {"offsets_reversed", "{" T("w", "U8", "[4]", 4, 0) "}", 0, 4, 0, 0, S3D_EFMT_OFFSETS,
     "\"w\": data_offsets end 0 is before begin 4"},
    {"offsets_float", "{" T("w", "U8", "[1]", 0, 1.0) "}", 0, 1, 0, 0, S3D_EFMT_OFFSETS,
     "\"w\": data_offsets[1] is not an integer"},
    {"offsets_negative", "{" T("w", "U8", "[1]", -1, 0) "}", 0, 1, 0, 0, S3D_EFMT_OFFSETS,
     "data_offsets[0] is negative"},
    {"offsets_string", "{" T("w", "U8", "[1]", "0", "1") "}", 0, 1, 0, 0, S3D_EFMT_OFFSETS,
     "not an integer"},
    {"offsets_above_int64", "{" T("w", "U8", "[1]", 0, 99999999999999999999) "}", 0, 1, 0, 0,
     S3D_EFMT_OFFSETS, "a data offset must fit in int64"},
    {"offsets_past_end", "{" T("w", "U8", "[4]", 0, 4) "}", 0, 2, 0, 0, S3D_EFMT_TRUNCATED,
     "but the object has"},
    {"offsets_far_past_end", "{" T("w", "U8", "[1000000000000]", 0, 1000000000000) "}", 0, 2, 0, 0,
     S3D_EFMT_TRUNCATED, "but the object has"},
    /* Layout. */
    {"overlap", "{" T("a", "U8", "[4]", 0, 4) "," T("b", "U8", "[4]", 2, 6) "}", 0, 6, 0, 0,
     S3D_EFMT_OVERLAP, "\"b\" [2, 6) overlaps tensor \"a\" [0, 4)"},
    {"same_offsets", "{" T("a", "U8", "[4]", 0, 4) "," T("b", "U8", "[4]", 0, 4) "}", 0, 4, 0, 0,
     S3D_EFMT_OVERLAP, "overlaps"},
    {"hole", "{" T("a", "U8", "[4]", 0, 4) "," T("b", "U8", "[4]", 8, 12) "}", 0, 12, 0, 0,
     S3D_EFMT_HOLE, "4 bytes at data offset 4 belong to no tensor (before \"b\")"},
    {"hole_at_start", "{" T("a", "U8", "[4]", 4, 8) "}", 0, 8, 0, 0, S3D_EFMT_HOLE,
     "at data offset 0"},
    {"trailing_data", "{" T("a", "U8", "[4]", 0, 4) "}", 0, 6, 0, 0, S3D_EFMT_HOLE,
     "last 2 bytes of the object belong to no tensor"},
    {"data_without_tensors", "{}", 0, 3, 0, 0, S3D_EFMT_HOLE, "last 3 bytes"},
    /* Duplicates. */
    {"duplicate_name", "{" T("a", "U8", "[1]", 0, 1) "," T("a", "U8", "[1]", 1, 2) "}", 0, 2, 0, 0,
     S3D_EFMT_DUPLICATE, "'\"a\"'"},
    {"duplicate_field",
     "{\"a\":{\"dtype\":\"U8\",\"dtype\":\"I8\",\"shape\":[1],"
     "\"data_offsets\":[0,1]}}",
     0, 1, 0, 0, S3D_EFMT_DUPLICATE, "dtype"},
    {"duplicate_metadata_key", "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, 0, 0, 0,
     S3D_EFMT_DUPLICATE, "duplicate"},
    {"metadata_twice", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, 0, 0, 0, S3D_EFMT_DUPLICATE,
     "__metadata__"},
    /* UTF-8. */
    {"utf8_bad_byte_in_name", "{" U8_1("a\xff") "}", 0, 1, 0, 0, S3D_EFMT_UTF8,
     "at byte 3, after \"{\"a\""},
    {"utf8_bad_in_metadata", "{\"__metadata__\":{\"k\":\"\xc3(\"}}", 0, 0, 0, 0, S3D_EFMT_UTF8,
     "at byte 22"},
    {"utf8_overlong", "{" U8_1("\xc0\xaf") "}", 0, 1, 0, 0, S3D_EFMT_UTF8, "at byte 2"},
    {"utf8_surrogate", "{" U8_1("\xed\xa0\x80") "}", 0, 1, 0, 0, S3D_EFMT_UTF8, "at byte 2"},
    {"utf8_above_max", "{" U8_1("\xf4\x90\x80\x80") "}", 0, 1, 0, 0, S3D_EFMT_UTF8, "byte 2"},
    {"utf8_cut_sequence", "{" U8_1("\xe2\x82") "}", 0, 1, 0, 0, S3D_EFMT_UTF8, "byte 2"},
    /* Dtypes and sizes. */
    {"unknown_dtype", "{" T("w", "F128", "[1]", 0, 16) "}", 0, 16, 0, 0, S3D_EFMT_DTYPE,
     "\"w\": unknown dtype \"F128\""},
    {"lowercase_dtype", "{" T("w", "f32", "[1]", 0, 4) "}", 0, 4, 0, 0, S3D_EFMT_DTYPE, "f32"},
    {"size_mismatch", "{" T("w", "F32", "[2]", 0, 4) "}", 0, 4, 0, 0, S3D_EFMT_SIZE_MISMATCH,
     "\"w\": data_offsets span 4 bytes but its shape and dtype F32 need 8"},
    {"size_mismatch_scalar", "{" T("s", "F64", "[]", 0, 4) "}", 0, 4, 0, 0, S3D_EFMT_SIZE_MISMATCH,
     "need 8"},
    {"f4_odd_count", "{" T("q", "F4", "[3]", 0, 2) "}", 0, 2, 0, 0, S3D_EFMT_SIZE_MISMATCH,
     "tensor \"q\": 3 elements of F4 are 12 bits"},
    {"f6_one_element", "{" T("q", "F6_E2M3", "[1]", 0, 1) "}", 0, 1, 0, 0, S3D_EFMT_SIZE_MISMATCH,
     "not whole bytes"},
    /* __metadata__ and the CRC map. */
    {"metadata_int_value", "{\"__metadata__\":{\"k\":1}}", 0, 0, 0, 0, S3D_EFMT_METADATA,
     "value of \"k\" is not a string"},
    {"metadata_null_value", "{\"__metadata__\":{\"k\":null}}", 0, 0, 0, 0, S3D_EFMT_METADATA,
     "\"k\""},
    {"metadata_array", "{\"__metadata__\":[]}", 0, 0, 0, 0, S3D_EFMT_METADATA,
     "__metadata__ is not an object"},
    {"metadata_string", "{\"__metadata__\":\"x\"}", 0, 0, 0, 0, S3D_EFMT_METADATA, "not an object"},
    {"crc_not_json", "{\"__metadata__\":{\"s3direct.crc32c\":\"nope\"}," U8_1("a") "}", 0, 1, 0, 0,
     S3D_EFMT_METADATA, "s3direct.crc32c is not JSON"},
    {"crc_not_object", "{\"__metadata__\":{\"s3direct.crc32c\":\"[]\"}," U8_1("a") "}", 0, 1, 0, 0,
     S3D_EFMT_METADATA, "not a JSON object"},
    {"crc_short",
     "{\"__metadata__\":{\"s3direct.crc32c\":\"{\\\"a\\\":\\\"1234567\\\"}\"}," U8_1("a") "}", 0, 1,
     0, 0, S3D_EFMT_METADATA, "value for \"a\" is not 8 hex digits"},
    {"crc_uppercase",
     "{\"__metadata__\":{\"s3direct.crc32c\":\"{\\\"a\\\":\\\"ABCDEF01\\\"}\"}," U8_1("a") "}", 0,
     1, 0, 0, S3D_EFMT_METADATA, "lowercase hex"},
    {"crc_number",
     "{\"__metadata__\":{\"s3direct.crc32c\":\"{\\\"a\\\":12345678}\"}," U8_1("a") "}", 0, 1, 0, 0,
     S3D_EFMT_METADATA, "\"a\""},
    {"crc_unknown_tensor",
     "{\"__metadata__\":{\"s3direct.crc32c\":\"{\\\"b\\\":\\\"00000000\\\"}\""
     "}," U8_1("a") "}",
     0, 1, 0, 0, S3D_EFMT_METADATA, "names \"b\", which is not a tensor"},
    {"crc_duplicate",
     "{\"__metadata__\":{\"s3direct.crc32c\":\"{\\\"a\\\":\\\"00000000\\\","
     "\\\"a\\\":\\\"00000001\\\"}\"}," U8_1("a") "}",
     0, 1, 0, 0, S3D_EFMT_METADATA, "duplicate"},
};

/* offsets_three needs a 3-entry data_offsets: written out here (T() takes two). */
static const char offsets_three[] =
    "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}";

/* deep_nesting: past jansson's depth limit (2048), which must stop it without a crash. */
static char deep[8 + 5000 + 1];

static struct mcase get_case(size_t i)
{
    struct mcase c = cases[i];
    if (strcmp(c.name, "deep_nesting") == 0) {
        memcpy(deep, "{\"a\":", 5);
        memset(deep + 5, '[', 5000);
        c.json = deep;
        c.code = S3D_EFMT_JSON;
        c.needle = "not valid JSON";
    }
    if (strcmp(c.name, "offsets_three") == 0) {
        c.json = offsets_three;
        c.code = S3D_EFMT_OFFSETS;
        c.needle = "\"w\": data_offsets has 3 entries, not 2";
    }
    return c;
}

/* The whole object for a case, malloc'ed. */
static uint8_t *make_object(const struct mcase *c, size_t *size)
{
    size_t jl = c->json_len ? c->json_len : strlen(c->json);
    uint64_t nf = c->n_field ? c->n_field : jl;
    size_t total = 8 + jl + (size_t)c->data_len;
    uint8_t *p = malloc(total);
    CHECK(p != NULL);
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(nf >> (8 * i));
    memcpy(p + 8, c->json, jl);
    memset(p + 8 + jl, 0xab, (size_t)c->data_len);
    *size = c->file_len ? c->file_len : total;
    return p;
}

/* The path a reader takes: the length field, then the header. */
static int parse_object(const uint8_t *p, size_t size, struct s3d_st_header *h)
{
    uint8_t first8[8] = {0};
    uint64_t n;
    int rc;
    memset(h, 0, sizeof(*h));
    memcpy(first8, p, size < 8 ? size : 8);
    rc = s3d_st_header_len(first8, size, &n);
    if (rc < 0)
        return rc;
    return s3d_st_parse((const char *)p + 8, (size_t)n, size, h);
}

static void write_file(const char *dir, const char *name, const void *p, size_t size)
{
    char path[1024];
    FILE *f;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(fwrite(p, 1, size, f) == size);
    CHECK(fclose(f) == 0);
}

/* Valid seeds for the fuzzer: what our builder writes, with and without CRCs. */
static void valid_seed(int which, struct s3d_dynbuf *b, size_t *size)
{
    static const int64_t s2[] = {2, 2}, s4[] = {4}, s0[] = {0, 3};
    const struct s3d_tensor_src t[] = {
        {"w.\"q\"", S3D_DTYPE_BF16, 2, s2, NULL, -1, 8},
        {"f4", S3D_DTYPE_F4, 1, s4, NULL, -1, 2},
        {"scalar", S3D_DTYPE_I64, 0, NULL, NULL, -1, 8},
        {"empty", S3D_DTYPE_F32, 2, s0, NULL, -1, 0},
    };
    const struct s3d_metadata_entry m[] = {{"format", "pt"}};
    size_t crc_pos[4];
    s3d_dynbuf_init(b, 0);
    CHECK_OK(
        s3d_st_build(t, which == 2 ? 0 : 4, m, which == 1 ? 1 : 0, which == 0, b, NULL, crc_pos));
    if (which == 0) {
        s3d_st_patch_crc(b->data, crc_pos[1], 0x12ab34cdu);
        s3d_st_seal(b->data);
    }
    *size = b->len + (which == 2 ? 0 : 18);
    CHECK(s3d_dynbuf_append(b, "0123456789abcdefgh", *size - b->len) == 0);
}

static const char *index_seed =
    "{\"metadata\":{\"total_size\":26},\"weight_map\":{\"a\":\"m-00001-of-00002.safetensors\","
    "\"b\":\"m-00002-of-00002.safetensors\",\"c\":\"m-00001-of-00002.safetensors\"}}\n";

static void write_corpus(const char *dir)
{
    char name[256];
    struct s3d_dynbuf b;
    size_t size;
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        t_fail(__FILE__, __LINE__, "mkdir %s", dir);
    for (size_t i = 0; i < S3D_ARRAY_LEN(cases); i++) {
        struct mcase c = get_case(i);
        uint8_t *p = make_object(&c, &size);
        snprintf(name, sizeof(name), "%s.st", c.name);
        write_file(dir, name, p, size);
        free(p);
    }
    for (int w = 0; w < 3; w++) {
        valid_seed(w, &b, &size);
        snprintf(name, sizeof(name), "valid_%d.st", w);
        write_file(dir, name, b.data, size);
        s3d_dynbuf_free(&b);
    }
    write_file(dir, "valid_index.json", index_seed, strlen(index_seed));
}

/* The committed corpus holds exactly the table's bytes. */
static void check_corpus_file(const char *name, const void *p, size_t size)
{
    char path[1024];
    FILE *f;
    uint8_t *buf = malloc(size + 1);
    snprintf(path, sizeof(path), "%s/%s", S3D_MALFORMED_DIR, name);
    f = fopen(path, "rb");
    if (f == NULL)
        t_fail(__FILE__, __LINE__, "%s is missing: regenerate the corpus (see top of file)", path);
    CHECK(buf != NULL);
    if (fread(buf, 1, size + 1, f) != size || memcmp(buf, p, size) != 0)
        t_fail(__FILE__, __LINE__, "%s differs from the table: regenerate the corpus", path);
    fclose(f);
    free(buf);
}

int main(int argc, char **argv)
{
    char name[256];
    struct s3d_dynbuf b;
    size_t size;

    if (argc == 3 && strcmp(argv[1], "--write") == 0) {
        write_corpus(argv[2]);
        printf("wrote %zu cases and 4 seeds to %s\n", S3D_ARRAY_LEN(cases), argv[2]);
        return 0;
    }
    CHECK(S3D_ARRAY_LEN(cases) >= 20);
    for (size_t i = 0; i < S3D_ARRAY_LEN(cases); i++) {
        struct mcase c = get_case(i);
        struct s3d_st_header h;
        uint8_t *p = make_object(&c, &size);
        int rc = parse_object(p, size, &h);
        if (rc != c.code)
            t_fail(__FILE__, __LINE__, "case %s: got %s, expected %s (%s)", c.name,
                   s3d_err_name(rc), s3d_err_name(c.code), s3d_last_error_message());
        if (strstr(s3d_last_error_message(), c.needle) == NULL)
            t_fail(__FILE__, __LINE__, "case %s: message \"%s\" lacks \"%s\"", c.name,
                   s3d_last_error_message(), c.needle);
        /* Refused means nothing handed out. */
        CHECK(h.n_tensors == 0 && h.tensors == NULL && h.metadata == NULL);
        printf("%-28s %-22s %s\n", c.name, s3d_err_name(rc), s3d_last_error_message());
        snprintf(name, sizeof(name), "%s.st", c.name);
        check_corpus_file(name, p, size);
        free(p);
    }
    /* The seeds parse. */
    for (int w = 0; w < 3; w++) {
        struct s3d_st_header h;
        valid_seed(w, &b, &size);
        CHECK_OK(parse_object((const uint8_t *)b.data, size, &h));
        CHECK(h.n_tensors == (w == 2 ? 0u : 4u));
        CHECK(w != 0 || (h.tensors[1].has_crc32c && h.tensors[1].crc32c == 0x12ab34cdu));
        s3d_st_header_free(&h);
        snprintf(name, sizeof(name), "valid_%d.st", w);
        check_corpus_file(name, b.data, size);
        s3d_dynbuf_free(&b);
    }
    check_corpus_file("valid_index.json", index_seed, strlen(index_seed));
    printf("ok: %zu malformed cases\n", S3D_ARRAY_LEN(cases));
    return 0;
}
