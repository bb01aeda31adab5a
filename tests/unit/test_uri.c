/* test_uri.c - s3:// parsing, bucket name rules and AWS percent-encoding, table-driven. */
#include "common/compiler.h"
#include "common/dynbuf.h"
#include "s3/uri.h"
#include "testutil.h"

static void test_parse(void)
{
    static const struct {
        const char *uri;
        int rc;
        const char *bucket;
        const char *key;
    } cases[] = {
        {"s3://bucket/key", 0, "bucket", "key"},
        {"s3://bucket", 0, "bucket", ""},
        {"s3://bucket/", 0, "bucket", ""},
        {"s3://bucket/dir/", 0, "bucket", "dir/"},
        {"s3://bucket//double", 0, "bucket", "/double"},
        {"s3://my.bucket-1/a b+c%20?x#y", 0, "my.bucket-1", "a b+c%20?x#y"},
        {"s3://bkt/\xe6\x97\xa5\xe6\x9c\xac/\xc3\xa9t\xc3\xa9", 0, "bkt",
         "\xe6\x97\xa5\xe6\x9c\xac/\xc3\xa9t\xc3\xa9"},
        {"s3://Legacy_Bucket/k", 0, "Legacy_Bucket", "k"},
        {"s3:/x", S3D_EURI, NULL, NULL},
        {"S3://bucket/k", S3D_EURI, NULL, NULL},
        {"s3:bucket", S3D_EURI, NULL, NULL},
        {"/local/path", S3D_EURI, NULL, NULL},
        {"", S3D_EURI, NULL, NULL},
        {"s3://", S3D_EURI, NULL, NULL},
        {"s3:///key", S3D_EURI, NULL, NULL},
        {"s3://ab/k", S3D_EURI, NULL, NULL},
        {"s3://abcdefghijklmnopqrstuvwxyz-abcdefghijklmnopqrstuvwxyz-abcdefghij/k", S3D_EURI, NULL,
         NULL}, /* 64 characters */
        {"s3://abcdefghijklmnopqrstuvwxyz-abcdefghijklmnopqrstuvwxyz-abcdefghi/k", 0,
         "abcdefghijklmnopqrstuvwxyz-abcdefghijklmnopqrstuvwxyz-abcdefghi", "k"}, /* 63 */
        {"s3://bad!name/k", S3D_EURI, NULL, NULL},
        {"s3://bucket-/k", S3D_EURI, NULL, NULL},
        {"s3://.bucket/k", S3D_EURI, NULL, NULL},
        {"s3://a..b/k", S3D_EURI, NULL, NULL},
        {"s3://buc ket/k", S3D_EURI, NULL, NULL},
    };
    size_t i;
    for (i = 0; i < S3D_ARRAY_LEN(cases); i++) {
        char bucket[64], key[1025];
        int rc = s3d_uri_parse(cases[i].uri, bucket, sizeof(bucket), key, sizeof(key));
        if (rc != cases[i].rc)
            t_fail(__FILE__, __LINE__, "case %zu \"%s\": got %s, want %s (%s)", i, cases[i].uri,
                   s3d_err_name(rc), s3d_err_name(cases[i].rc), s3d_last_error_message());
        if (rc == 0) {
            CHECK_STREQ(bucket, cases[i].bucket);
            CHECK_STREQ(key, cases[i].key);
        }
    }
}

static void test_parse_limits(void)
{
    char bucket[8], key[8], big_key[1100], uri[1200];
    char b64[64], k2[1100];
    /* Buffers too small. */
    CHECK_ERR(s3d_uri_parse("s3://bucket-name/k", bucket, sizeof(bucket), key, sizeof(key)),
              S3D_ETOOBIG);
    CHECK_MSG_HAS("bucket");
    CHECK_ERR(s3d_uri_parse("s3://bkt/longer-key", bucket, sizeof(bucket), key, sizeof(key)),
              S3D_ETOOBIG);
    CHECK_OK(s3d_uri_parse("s3://bkt/1234567", bucket, sizeof(bucket), key, sizeof(key)));
    CHECK_STREQ(key, "1234567");
    /* The key limit is S3's 1024 bytes. */
    memset(big_key, 'k', 1024);
    big_key[1024] = '\0';
    snprintf(uri, sizeof(uri), "s3://bkt/%s", big_key);
    CHECK_OK(s3d_uri_parse(uri, b64, sizeof(b64), k2, sizeof(k2)));
    CHECK_EQ_U64(strlen(k2), 1024);
    snprintf(uri, sizeof(uri), "s3://bkt/%sk", big_key);
    CHECK_ERR(s3d_uri_parse(uri, b64, sizeof(b64), k2, sizeof(k2)), S3D_EURI);
    CHECK_ERR(s3d_uri_parse(NULL, b64, sizeof(b64), k2, sizeof(k2)), S3D_EINVAL);
}

static void test_dns(void)
{
    static const struct {
        const char *b;
        int want;
    } cases[] = {
        {"examplebucket", 1},
        {"my.bucket.name", 1},
        {"a-b-c", 1},
        {"abc", 1},
        {"Upper", 0},
        {"under_score", 0},
        {"ab", 0},
        {"192.168.1.1", 0},
        {"a.-b", 0},
        {"a-.b", 0},
        {"-ab", 0},
        {"1.2.3.4a", 1},
        {NULL, 0},
    };
    size_t i;
    for (i = 0; i < S3D_ARRAY_LEN(cases); i++)
        if (s3d_bucket_dns_compatible(cases[i].b) != cases[i].want)
            t_fail(__FILE__, __LINE__, "dns_compatible(%s) != %d", cases[i].b ? cases[i].b : "NULL",
                   cases[i].want);
}

static void test_encode(void)
{
    static const struct {
        const char *in;
        int encode_slash;
        const char *want;
    } cases[] = {
        {"", 1, ""},
        {"AZaz09-_.~", 1, "AZaz09-_.~"},
        {"a/b/c", 0, "a/b/c"},
        {"a/b/c", 1, "a%2Fb%2Fc"},
        {"test$file.text", 0, "test%24file.text"},
        {"a b+c=d&e?f#g%h", 0, "a%20b%2Bc%3Dd%26e%3Ff%23g%25h"},
        {"!*'();:@,[]", 1, "%21%2A%27%28%29%3B%3A%40%2C%5B%5D"},
        {"\xe6\x97\xa5", 0, "%E6%97%A5"},
        {"\x01\x7f\xff", 0, "%01%7F%FF"},
        {"../x/./y", 0, "../x/./y"},
    };
    size_t i;
    for (i = 0; i < S3D_ARRAY_LEN(cases); i++) {
        struct s3d_dynbuf b;
        s3d_dynbuf_init(&b, 1024);
        CHECK_OK(s3d_uri_encode(&b, cases[i].in, strlen(cases[i].in), cases[i].encode_slash));
        CHECK_STREQ(b.data ? b.data : "", cases[i].want);
        s3d_dynbuf_free(&b);
    }
    /* Embedded NUL bytes are data, encoded like any other byte. */
    {
        struct s3d_dynbuf b;
        s3d_dynbuf_init(&b, 1024);
        CHECK_OK(s3d_uri_encode(&b, "a\0b", 3, 1));
        CHECK_STREQ(b.data, "a%00b");
        /* The cap holds: 5 bytes of room, "%E6%97" would need 6. */
        s3d_dynbuf_free(&b);
        s3d_dynbuf_init(&b, 5);
        CHECK_ERR(s3d_uri_encode(&b, "\xe6\x97", 2, 1), S3D_ETOOBIG);
        s3d_dynbuf_free(&b);
    }
}

int main(void)
{
    test_parse();
    test_parse_limits();
    test_dns();
    test_encode();
    printf("ok\n");
    return 0;
}
