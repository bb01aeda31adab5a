/* test_dynbuf.c - the capped buffer refuses to grow past its cap and keeps its content. */
#include "common/dynbuf.h"
#include "testutil.h"

int main(void)
{
    struct s3d_dynbuf b;
    char big[1000];
    size_t len;
    char *p;

    s3d_dynbuf_init(&b, 10);
    CHECK_OK(s3d_dynbuf_append(&b, "hello", 5));
    CHECK_OK(s3d_dynbuf_appendf(&b, "%d", 12345));
    CHECK_EQ_U64(b.len, 10);
    CHECK_STREQ(b.data, "hello12345");
    CHECK_ERR(s3d_dynbuf_append(&b, "x", 1), S3D_ETOOBIG);
    CHECK_STREQ(b.data, "hello12345");
    s3d_dynbuf_reset(&b);
    CHECK_EQ_U64(b.len, 0);
    CHECK_STREQ(b.data, "");
    memset(big, 'a', sizeof(big));
    CHECK_ERR(s3d_dynbuf_append(&b, big, sizeof(big)), S3D_ETOOBIG);
    CHECK_ERR(s3d_dynbuf_appendf(&b, "%.*s", 11, big), S3D_ETOOBIG);
    CHECK_OK(s3d_dynbuf_append(&b, big, 10));
    p = s3d_dynbuf_take(&b, &len);
    CHECK(p != NULL && len == 10 && p[10] == '\0');
    free(p);
    CHECK(b.data == NULL && b.len == 0);

    /* Growth across many appends keeps every byte. */
    s3d_dynbuf_init(&b, 1 << 20);
    for (int i = 0; i < 10000; i++)
        CHECK_OK(s3d_dynbuf_appendf(&b, "%04d", i % 10000));
    CHECK_EQ_U64(b.len, 40000);
    CHECK(memcmp(b.data + 4 * 9999, "9999", 4) == 0);
    s3d_dynbuf_free(&b);
    printf("ok\n");
    return 0;
}
