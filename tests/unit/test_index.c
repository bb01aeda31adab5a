/* test_index.c - the sharded checkpoint index: parse (shards in first-appearance order,
 * tensor -> shard), shard names that would escape the checkpoint's folder or bucket prefix,
 * build -> parse round trip, shard naming and resolving. */
#include "common/dynbuf.h"
#include "format/index.h"
#include "testutil.h"

static int parse(const char *json, struct s3d_st_index *ix)
{
    return s3d_st_index_parse(json, strlen(json), 0, ix);
}

static void test_parse(void)
{
    /* As huggingface_hub writes it, plus extra metadata keys it may carry. */
    const char *j =
        "{\n  \"metadata\": {\n    \"total_size\": 123456789012,\n    \"format\": \"pt\"\n  },\n"
        "  \"weight_map\": {\n"
        "    \"lm_head.weight\": \"model-00002-of-00003.safetensors\",\n"
        "    \"model.embed.weight\": \"model-00001-of-00003.safetensors\",\n"
        "    \"model.layers.0.w\": \"model-00002-of-00003.safetensors\",\n"
        "    \"model.norm.weight\": \"sub/dir/model-00003-of-00003.safetensors\",\n"
        "    \"caf\\u00e9\": \"model-00001-of-00003.safetensors\"\n"
        "  }\n}\n";
    struct s3d_st_index ix;

    CHECK_OK(parse(j, &ix));
    CHECK(ix.has_total_size && ix.total_size == 123456789012ull);
    CHECK_EQ_U64(ix.n_tensors, 5);
    CHECK_EQ_U64(ix.n_shards, 3);
    CHECK_STREQ(ix.shards[0], "model-00002-of-00003.safetensors");
    CHECK_STREQ(ix.shards[1], "model-00001-of-00003.safetensors");
    CHECK_STREQ(ix.shards[2], "sub/dir/model-00003-of-00003.safetensors");
    CHECK_STREQ(ix.tensors[0].name, "lm_head.weight");
    CHECK(ix.tensors[0].shard == 0);
    CHECK(ix.tensors[1].shard == 1);
    CHECK(ix.tensors[2].shard == 0);
    CHECK(ix.tensors[3].shard == 2);
    CHECK_STREQ(ix.tensors[4].name, "caf\xc3\xa9");
    CHECK(ix.tensors[4].shard == 1);
    s3d_st_index_free(&ix);
    s3d_st_index_free(&ix);
    s3d_st_index_free(NULL);

    /* No metadata, empty weight map, total_size written as a float by some tools. */
    CHECK_OK(parse("{\"weight_map\":{}}", &ix));
    CHECK(ix.n_tensors == 0 && ix.n_shards == 0 && !ix.has_total_size);
    s3d_st_index_free(&ix);
    CHECK_OK(parse("{\"metadata\":{\"total_size\":1.5e10},\"weight_map\":{\"a\":\"x.st\"}}", &ix));
    CHECK(ix.has_total_size && ix.total_size == 15000000000ull);
    s3d_st_index_free(&ix);
    CHECK_OK(parse("{\"metadata\":null,\"weight_map\":{\"a\":\"x.st\"}}", &ix));
    s3d_st_index_free(&ix);
}

static void test_parse_rejects(void)
{
    static const struct {
        const char *json;
        int code;
        const char *needle;
    } bad[] = {
        {"", S3D_EFMT_INDEX, "not valid JSON"},
        {"[]", S3D_EFMT_INDEX, "not a JSON object"},
        {"{}", S3D_EFMT_INDEX, "no \"weight_map\""},
        {"{\"weight_map\":[]}", S3D_EFMT_INDEX, "no \"weight_map\""},
        {"{\"weight_map\":{\"a\":1}}", S3D_EFMT_INDEX, "weight_map[\"a\"] is not a string"},
        {"{\"weight_map\":{\"a\":\"x\",\"a\":\"y\"}}", S3D_EFMT_INDEX, "duplicate"},
        {"{\"metadata\":5,\"weight_map\":{}}", S3D_EFMT_INDEX, "not an object"},
        {"{\"metadata\":{\"total_size\":-1},\"weight_map\":{}}", S3D_EFMT_INDEX, "total_size"},
        {"{\"metadata\":{\"total_size\":\"12\"},\"weight_map\":{}}", S3D_EFMT_INDEX, "total_size"},
        {"{\"metadata\":{\"total_size\":1.5},\"weight_map\":{}}", S3D_EFMT_INDEX, "total_size"},
        {"{\"metadata\":{\"s3direct.generation\":7},\"weight_map\":{}}", S3D_EFMT_INDEX,
         "s3direct.generation is not a string"},
        {"{\"metadata\":{\"s3direct.generation\":\"a\\u0000b\"},\"weight_map\":{}}", S3D_EFMT_INDEX,
         "NUL"},
        {"{\"weight_map\":{\"a\":\"x\xff\"}}", S3D_EFMT_INDEX, "UTF-8"},
        /* Shard names that would leave the checkpoint's folder or prefix. */
        {"{\"weight_map\":{\"w\":\"../secret.safetensors\"}}", S3D_EFMT_SHARD_PATH,
         "weight_map[\"w\"] = \"../secret.safetensors\" is refused: it has a \".\" or \"..\""},
        {"{\"weight_map\":{\"w\":\"a/../../b\"}}", S3D_EFMT_SHARD_PATH, "\"..\""},
        {"{\"weight_map\":{\"w\":\"a/..\"}}", S3D_EFMT_SHARD_PATH, "\"..\""},
        {"{\"weight_map\":{\"w\":\"./a\"}}", S3D_EFMT_SHARD_PATH, "\".\""},
        {"{\"weight_map\":{\"w\":\"/etc/passwd\"}}", S3D_EFMT_SHARD_PATH, "absolute"},
        {"{\"weight_map\":{\"w\":\"s3://other-bucket/x.safetensors\"}}", S3D_EFMT_SHARD_PATH,
         "scheme"},
        {"{\"weight_map\":{\"w\":\"file:///etc/passwd\"}}", S3D_EFMT_SHARD_PATH, "scheme"},
        {"{\"weight_map\":{\"w\":\"file:x\"}}", S3D_EFMT_SHARD_PATH, "scheme"},
        {"{\"weight_map\":{\"w\":\"C:x.st\"}}", S3D_EFMT_SHARD_PATH, "scheme or drive"},
        {"{\"weight_map\":{\"w\":\"a\\\\..\\\\b\"}}", S3D_EFMT_SHARD_PATH, "backslash"},
        {"{\"weight_map\":{\"w\":\"a//b\"}}", S3D_EFMT_SHARD_PATH, "empty path component"},
        {"{\"weight_map\":{\"w\":\"a/\"}}", S3D_EFMT_SHARD_PATH, "empty path component"},
        {"{\"weight_map\":{\"w\":\"\"}}", S3D_EFMT_SHARD_PATH, "empty"},
        {"{\"weight_map\":{\"w\":\"a\\nb\"}}", S3D_EFMT_SHARD_PATH, "control character"},
        {"{\"weight_map\":{\"ok\":\"x.st\",\"w\":\"..\"}}", S3D_EFMT_SHARD_PATH,
         "weight_map[\"w\"]"},
    };
    struct s3d_st_index ix;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = parse(bad[i].json, &ix);
        if (rc != bad[i].code)
            t_fail(__FILE__, __LINE__, "case %zu (%s): got %s, expected %s (%s)", i, bad[i].json,
                   s3d_err_name(rc), s3d_err_name(bad[i].code), s3d_last_error_message());
        CHECK_MSG_HAS(bad[i].needle);
        CHECK(ix.n_tensors == 0 && ix.tensors == NULL && ix.shards == NULL &&
              ix.generation == NULL);
    }
    /* Names that are fine: a colon after the first path character class, dots inside. */
    CHECK_OK(s3d_st_shard_path_check("a/b..c/x:y.st", 13));
    CHECK_OK(s3d_st_shard_path_check("..hidden", 8));
    CHECK_OK(s3d_st_shard_path_check("model-00001-of-00002.safetensors", 32));
    /* The cap. */
    CHECK_ERR(s3d_st_index_parse("{\"weight_map\":{}}", 17, 16, &ix), S3D_EFMT_INDEX);
    CHECK_MSG_HAS("over the cap");
    CHECK_OK(s3d_st_index_parse("{\"weight_map\":{}}", 17, 17, &ix));
    s3d_st_index_free(&ix);
}

static void test_build(void)
{
    const char *tensors[] = {"b.weight", "a.weight", "quote\"d", "c"};
    const char *shards[] = {"m-00001-of-00002.safetensors", "m-00002-of-00002.safetensors",
                            "m-00001-of-00002.safetensors", "m-00002-of-00002.safetensors"};
    const char *bad_shard[] = {"x", "../y"};
    const char *dup[] = {"x", "x"};
    struct s3d_dynbuf b;
    struct s3d_st_index ix;

    s3d_dynbuf_init(&b, 1 << 20);
    CHECK_OK(s3d_st_index_build(tensors, shards, 4, 987654321, NULL, &b));
    CHECK(strstr(b.data, "\"total_size\": 987654321") != NULL);
    CHECK(b.data[b.len - 1] == '\n');
    CHECK_OK(s3d_st_index_parse(b.data, b.len, 0, &ix));
    CHECK(ix.total_size == 987654321 && ix.n_tensors == 4 && ix.n_shards == 2);
    for (int i = 0; i < 4; i++) {
        CHECK_STREQ(ix.tensors[i].name, tensors[i]);
        CHECK_STREQ(ix.shards[ix.tensors[i].shard], shards[i]);
    }
    CHECK(ix.generation == NULL);
    s3d_st_index_free(&ix);

    /* The generation id of a sharded save round trips through the metadata. */
    CHECK_OK(s3d_st_index_build(tensors, shards, 4, 1, "0123abcd", &b));
    CHECK(strstr(b.data, "\"s3direct.generation\": \"0123abcd\"") != NULL);
    CHECK_OK(s3d_st_index_parse(b.data, b.len, 0, &ix));
    CHECK_STREQ(ix.generation, "0123abcd");
    CHECK(ix.total_size == 1 && ix.n_tensors == 4);
    s3d_st_index_free(&ix);
    CHECK(ix.generation == NULL);

    CHECK_ERR(s3d_st_index_build(tensors, bad_shard, 2, 0, NULL, &b), S3D_EINVAL);
    CHECK_MSG_HAS("index entry \"a.weight\"");
    CHECK_MSG_HAS("../y");
    CHECK(b.len == 0);
    CHECK_ERR(s3d_st_index_build(dup, shards, 2, 0, NULL, &b), S3D_EINVAL);
    CHECK_MSG_HAS("\"x\" is in the index twice");
    /* The caller's cap holds. */
    b.max = 10;
    CHECK_ERR(s3d_st_index_build(tensors, shards, 4, 0, NULL, &b), S3D_ETOOBIG);
    s3d_dynbuf_free(&b);
}

static void test_names(void)
{
    struct s3d_dynbuf b;
    s3d_dynbuf_init(&b, 4096);

    CHECK_OK(s3d_st_shard_name("s3://b/p/model.safetensors.index.json", 2, 3, &b));
    CHECK_STREQ(b.data, "model-00002-of-00003.safetensors");
    CHECK_OK(s3d_st_shard_name("model.safetensors.index.json", 1, 1, &b));
    CHECK_STREQ(b.data, "model-00001-of-00001.safetensors");
    CHECK_OK(
        s3d_st_shard_name("/x/y/diffusion_pytorch_model.safetensors.index.json", 12, 123456, &b));
    CHECK_STREQ(b.data, "diffusion_pytorch_model-00012-of-123456.safetensors");
    CHECK_ERR(s3d_st_shard_name("model.json", 1, 2, &b), S3D_EINVAL);
    CHECK_ERR(s3d_st_shard_name("dir/.safetensors.index.json", 1, 2, &b), S3D_EINVAL);
    CHECK_ERR(s3d_st_shard_name("m.safetensors.index.json", 0, 2, &b), S3D_EINVAL);
    CHECK_ERR(s3d_st_shard_name("m.safetensors.index.json", 3, 2, &b), S3D_EINVAL);

    /* A save's own names: the token between NAME and the numbers. */
    CHECK_OK(s3d_st_shard_name_tok("s3://b/p/model.safetensors.index.json", "0123456789abcdef", 2,
                                   3, &b));
    CHECK_STREQ(b.data, "model-0123456789abcdef-00002-of-00003.safetensors");
    CHECK_ERR(s3d_st_shard_name_tok("m.safetensors.index.json", "0123456789ABCDEF", 1, 2, &b),
              S3D_EINVAL);
    CHECK_ERR(s3d_st_shard_name_tok("m.safetensors.index.json", "0123", 1, 2, &b), S3D_EINVAL);

    /* Which names are this index's shards (the ones a save may remove), table-driven. */
    {
        static const struct {
            const char *name;
            int want;
        } t[] = {
            {"model-00001-of-00002.safetensors", 1},
            {"model-0123456789abcdef-00001-of-00002.safetensors", 2},
            {"model-0123456789abcdef-00012-of-123456.safetensors", 2},
            {"model-1234567890123456-00001-of-00002.safetensors", 2},
            {"model-00001-of-00002.safetensors.tmp", 0},
            {"model-0001-of-00002.safetensors", 0},
            {"model-0123456789abcdeF-00001-of-00002.safetensors", 0},
            {"model-0123456789abcde-00001-of-00002.safetensors", 0},
            {"model-0123456789abcdef-00001-of-00002", 0},
            {"model.fp16-00001-of-00002.safetensors", 0},
            {"other-00001-of-00002.safetensors", 0},
            {"sub/model-00001-of-00002.safetensors", 0},
            {"model-00001-of-00002.bin", 0},
            {"model-", 0},
            {"", 0},
        };
        for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
            int got = s3d_st_shard_name_match("s3://b/p/model.safetensors.index.json", t[i].name,
                                              strlen(t[i].name));
            if (got != t[i].want)
                t_fail(__FILE__, __LINE__, "%s: %d, expected %d", t[i].name, got, t[i].want);
        }
        CHECK(s3d_st_shard_name_match("model.json", "model-00001-of-00002.safetensors", 32) == 0);
    }

    CHECK_OK(s3d_st_shard_resolve("s3://bucket/ckpt/step-10/model.safetensors.index.json",
                                  "model-00001-of-00002.safetensors", &b));
    CHECK_STREQ(b.data, "s3://bucket/ckpt/step-10/model-00001-of-00002.safetensors");
    CHECK_OK(s3d_st_shard_resolve("s3://bucket/m.safetensors.index.json", "sub/s.st", &b));
    CHECK_STREQ(b.data, "s3://bucket/sub/s.st");
    CHECK_OK(s3d_st_shard_resolve("/data/ckpt/m.safetensors.index.json", "s.st", &b));
    CHECK_STREQ(b.data, "/data/ckpt/s.st");
    CHECK_OK(s3d_st_shard_resolve("m.safetensors.index.json", "s.st", &b));
    CHECK_STREQ(b.data, "s.st");
    CHECK_ERR(s3d_st_shard_resolve("/data/m.index.json", "../../etc/passwd", &b),
              S3D_EFMT_SHARD_PATH);
    CHECK_ERR(s3d_st_shard_resolve("s3://bucket/m.index.json", "s3://evil/x", &b),
              S3D_EFMT_SHARD_PATH);
    CHECK_ERR(s3d_st_shard_resolve("s3://bucket", "s.st", &b), S3D_EURI);
    CHECK_ERR(s3d_st_shard_resolve("s3:///key.json", "s.st", &b), S3D_EURI);
    s3d_dynbuf_free(&b);
}

/* Many entries, every one with its own shard: the shard set must stay a hash, not a list. */
static void test_many_shards(void)
{
    enum { N = 200000 };
    struct s3d_dynbuf b;
    struct s3d_st_index ix;
    s3d_dynbuf_init(&b, 64u << 20);
    CHECK_OK(s3d_dynbuf_append(&b, "{\"weight_map\":{", 15));
    for (int i = 0; i < N; i++)
        CHECK_OK(s3d_dynbuf_appendf(&b, "%s\"t%d\":\"s%d.st\"", i ? "," : "", i, i % (N / 2)));
    CHECK_OK(s3d_dynbuf_append(&b, "}}", 2));
    CHECK_OK(s3d_st_index_parse(b.data, b.len, 0, &ix));
    CHECK_EQ_U64(ix.n_tensors, N);
    CHECK_EQ_U64(ix.n_shards, N / 2);
    CHECK(ix.tensors[N / 2 + 7].shard == 7);
    CHECK_STREQ(ix.shards[N / 2 - 1], "s99999.st");
    s3d_st_index_free(&ix);
    s3d_dynbuf_free(&b);
}

int main(void)
{
    test_many_shards();
    test_parse();
    test_parse_rejects();
    test_build();
    test_names();
    printf("ok\n");
    return 0;
}
