/* test_xml.c - S3 XML responses (realistic bodies from AWS and Ceph RGW), entities, malformed
 * and hostile documents, and the two request-body builders. */
#include "common/compiler.h"
#include "common/dynbuf.h"
#include "s3/ops.h"
#include "s3/timefmt.h"
#include "s3/s3doc.h"
#include "s3/xml.h"
#include "testutil.h"

#define DECL "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
#define NS   " xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\""
#define T(s) (s), strlen(s)

static void test_error(void)
{
    static const char aws[] =
        DECL "<Error><Code>NoSuchKey</Code><Message>The resource you requested does not "
             "exist</Message><Resource>/mybucket/myfoto.jpg</Resource><RequestId>4442587FB7D0A2F9"
             "</RequestId><Key>myfoto.jpg</Key><BucketName>mybucket</BucketName></Error>";
    /* Ceph RGW: empty Message, extra HostId. */
    static const char rgw[] = DECL "<Error><Code>NoSuchBucket</Code><Message></Message>"
                                   "<BucketName>nope</BucketName><RequestId>tx0000-rgw"
                                   "</RequestId><HostId>abc-default</HostId></Error>";
    struct s3d_xml_error e;
    CHECK(s3d_xml_is_error(T(aws)) == 1);
    CHECK(s3d_xml_is_error(T("\xEF\xBB\xBF  <!-- c --><Error/>")) == 1);
    CHECK(s3d_xml_is_error(T("<s3:Error xmlns:s3=\"x\">")) == 1);
    CHECK(s3d_xml_is_error(T("<ErrorX/>")) == 0);
    CHECK(s3d_xml_is_error(T(DECL "<ListBucketResult/>")) == 0);
    CHECK(s3d_xml_is_error(T("")) == 0);
    CHECK(s3d_xml_is_error(T("<Error")) == 0);
    CHECK(s3d_xml_is_error(NULL, 0) == 0);

    CHECK_OK(s3d_xml_parse_error(T(aws), &e));
    CHECK_STREQ(e.code, "NoSuchKey");
    CHECK_STREQ(e.message, "The resource you requested does not exist");
    CHECK_STREQ(e.request_id, "4442587FB7D0A2F9");
    CHECK_STREQ(e.key, "myfoto.jpg");
    CHECK_STREQ(e.bucket_name, "mybucket");
    CHECK_STREQ(e.resource, "/mybucket/myfoto.jpg");
    s3d_xml_error_free(&e);
    CHECK_OK(s3d_xml_parse_error(T(rgw), &e));
    CHECK_STREQ(e.code, "NoSuchBucket");
    CHECK_STREQ(e.message, "");
    CHECK(e.key == NULL);
    s3d_xml_error_free(&e);
    s3d_xml_error_free(&e); /* twice is fine: freed structs are zeroed */
    s3d_xml_error_free(NULL);
    CHECK_ERR(s3d_xml_parse_error(T(DECL "<ListBucketResult/>"), &e), S3D_EPROTO);
    CHECK_MSG_HAS("expected <Error>");
    CHECK(e.code == NULL);
}

static void test_list(void)
{
    static const char body[] =
        DECL "<ListBucketResult" NS "><Name>bucket</Name><Prefix>photos/</Prefix>"
             "<KeyCount>3</KeyCount><MaxKeys>1000</MaxKeys><Delimiter>/</Delimiter>"
             "<IsTruncated>true</IsTruncated>"
             "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM="
             "</NextContinuationToken>\n"
             "  <Contents>\n    <Key>photos/a &amp; b &lt;1&gt;.jpg</Key>\n"
             "    <LastModified>2026-12-02T16:27:57.000Z</LastModified>\n"
             "    <ETag>&quot;599bab3ed2c697f1d26842727561fd94&quot;</ETag>\n"
             "    <Size>142863</Size><StorageClass>STANDARD</StorageClass>\n"
             "    <Owner><ID>x</ID><DisplayName>y</DisplayName></Owner>\n  </Contents>\n"
             "  <Contents><Key>photos/&#233;t&#xE9; &#x1F600;&apos;&quot;</Key>"
             "<Size>0</Size></Contents>\n"
             "  <CommonPrefixes><Prefix>photos/2006/</Prefix></CommonPrefixes>"
             "<CommonPrefixes><Prefix>photos/2007/</Prefix></CommonPrefixes>"
             "</ListBucketResult>";
    struct s3d_xml_list_result r;
    CHECK_OK(s3d_xml_parse_list_v2(T(body), &r));
    CHECK_EQ_U64(r.n_contents, 2);
    CHECK_STREQ(r.contents[0].key, "photos/a & b <1>.jpg");
    CHECK_EQ_U64(r.contents[0].size, 142863);
    CHECK_EQ_U64(r.contents[0].last_modified, 1796228877);
    CHECK_STREQ(r.contents[0].etag, "\"599bab3ed2c697f1d26842727561fd94\"");
    CHECK_STREQ(r.contents[1].key, "photos/\xc3\xa9t\xc3\xa9 \xf0\x9f\x98\x80'\"");
    CHECK_EQ_U64(r.contents[1].size, 0);
    CHECK(r.contents[1].etag == NULL && r.contents[1].last_modified == 0);
    CHECK_EQ_U64(r.n_prefixes, 2);
    CHECK_STREQ(r.prefixes[0], "photos/2006/");
    CHECK_STREQ(r.prefixes[1], "photos/2007/");
    CHECK(r.is_truncated == 1);
    CHECK_STREQ(r.next_continuation_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
    CHECK_EQ_U64(r.key_count, 3);
    s3d_xml_list_free(&r);
    s3d_xml_list_free(&r);

    /* Empty listing (RGW shape), keys with spaces kept verbatim, CDATA taken as text. */
    CHECK_OK(s3d_xml_parse_list_v2(
        T(DECL "<ListBucketResult" NS "><Name>b</Name><Prefix></Prefix><KeyCount>0</KeyCount>"
               "<MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated></ListBucketResult>"),
        &r));
    CHECK(r.n_contents == 0 && r.n_prefixes == 0 && r.is_truncated == 0 &&
          r.next_continuation_token == NULL);
    s3d_xml_list_free(&r);
    CHECK_OK(s3d_xml_parse_list_v2(
        T("<ListBucketResult><Contents><Key>  two  spaces </Key><Size> 7 </Size></Contents>"
          "<Contents><Key><![CDATA[a<b]]></Key><Size>1</Size></Contents></ListBucketResult>"),
        &r));
    CHECK_STREQ(r.contents[0].key, "  two  spaces ");
    CHECK_EQ_U64(r.contents[0].size, 7);
    CHECK_STREQ(r.contents[1].key, "a<b");
    s3d_xml_list_free(&r);

    /* Field errors. */
    CHECK_ERR(s3d_xml_parse_list_v2(T("<ListBucketResult><Contents><Size>1</Size></Contents>"
                                      "</ListBucketResult>"),
                                    &r),
              S3D_EPROTO);
    CHECK_MSG_HAS("no <Key>");
    CHECK(r.contents == NULL && r.n_contents == 0);
    CHECK_ERR(s3d_xml_parse_list_v2(T("<ListBucketResult><Contents><Key>k</Key><Size>-1</Size>"
                                      "</Contents></ListBucketResult>"),
                                    &r),
              S3D_EPROTO);
    CHECK_MSG_HAS("not a number");
    CHECK_ERR(s3d_xml_parse_list_v2(T("<ListBucketResult><Contents><Key>k</Key><Size>"
                                      "99999999999999999999</Size></Contents>"
                                      "</ListBucketResult>"),
                                    &r),
              S3D_EPROTO);
    CHECK_ERR(s3d_xml_parse_list_v2(T("<ListBucketResult><IsTruncated>yes</IsTruncated>"
                                      "</ListBucketResult>"),
                                    &r),
              S3D_EPROTO);
    CHECK_ERR(s3d_xml_parse_list_v2(T("<ListBucketResult><Contents><Key>k</Key><LastModified>"
                                      "yesterday</LastModified></Contents></ListBucketResult>"),
                                    &r),
              S3D_EPROTO);
    CHECK_ERR(s3d_xml_parse_list_v2(T(DECL "<Error><Code>AccessDenied</Code></Error>"), &r),
              S3D_EPROTO);
}

static void test_list_1000(void)
{
    struct s3d_dynbuf b;
    struct s3d_xml_list_result r;
    size_t i;
    s3d_dynbuf_init(&b, S3D_XML_MAX_BODY);
    CHECK_OK(s3d_dynbuf_appendf(&b, DECL "<ListBucketResult" NS "><Name>b</Name>"
                                         "<KeyCount>1000</KeyCount><IsTruncated>true"
                                         "</IsTruncated><NextContinuationToken>tok"
                                         "</NextContinuationToken>"));
    for (i = 0; i < 1000; i++)
        CHECK_OK(s3d_dynbuf_appendf(&b,
                                    "<Contents><Key>dir/key-%04zu</Key><LastModified>"
                                    "2026-01-01T00:00:%02zu.000Z</LastModified><ETag>&quot;"
                                    "%032zx&quot;</ETag><Size>%zu</Size><StorageClass>"
                                    "STANDARD</StorageClass></Contents>",
                                    i, i % 60, i, i * 1000003));
    CHECK_OK(s3d_dynbuf_appendf(&b, "</ListBucketResult>"));
    CHECK_OK(s3d_xml_parse_list_v2(b.data, b.len, &r));
    CHECK_EQ_U64(r.n_contents, 1000);
    for (i = 0; i < 1000; i++) {
        char k[32];
        snprintf(k, sizeof(k), "dir/key-%04zu", i);
        CHECK_STREQ(r.contents[i].key, k);
        CHECK_EQ_U64(r.contents[i].size, i * 1000003);
        CHECK_EQ_U64(r.contents[i].last_modified, 1767225600 + i % 60);
    }
    s3d_xml_list_free(&r);
    s3d_dynbuf_free(&b);
}

static void test_multipart(void)
{
    char *id = NULL;
    struct s3d_xml_complete c;
    struct s3d_xml_error e = {0};
    struct s3d_xml_uploads_result u;
    CHECK_OK(s3d_xml_parse_initiate(
        T(DECL "<InitiateMultipartUploadResult" NS "><Bucket>b</Bucket><Key>k</Key><UploadId>"
               "2~VNnPu4cBFkRGHOdXvXFVzbNkUIcwnVS</UploadId></InitiateMultipartUploadResult>"),
        &id));
    CHECK_STREQ(id, "2~VNnPu4cBFkRGHOdXvXFVzbNkUIcwnVS");
    free(id);
    CHECK_ERR(s3d_xml_parse_initiate(T("<InitiateMultipartUploadResult><UploadId></UploadId>"
                                       "</InitiateMultipartUploadResult>"),
                                     &id),
              S3D_EPROTO);
    CHECK(id == NULL);
    CHECK_ERR(s3d_xml_parse_initiate(T("<InitiateMultipartUploadResult><Bucket>b</Bucket>"), &id),
              S3D_EPROTO);
    CHECK_MSG_HAS("truncated");

    CHECK(s3d_xml_parse_complete(
              T(DECL "<CompleteMultipartUploadResult" NS "><Location>http://b.s3.amazonaws.com/k"
                     "</Location><Bucket>b</Bucket><Key>k</Key><ETag>&quot;3858f62230ac3c915f300c"
                     "664312c11f-9&quot;</ETag></CompleteMultipartUploadResult>"),
              &c, &e) == 0);
    CHECK_STREQ(c.etag, "\"3858f62230ac3c915f300c664312c11f-9\"");
    CHECK_STREQ(c.location, "http://b.s3.amazonaws.com/k");
    CHECK_STREQ(c.key, "k");
    CHECK(e.code == NULL);
    s3d_xml_complete_free(&c);
    /* RGW's empty ETag. */
    CHECK(s3d_xml_parse_complete(T("<CompleteMultipartUploadResult><Bucket>b</Bucket><Key>k"
                                   "</Key><ETag></ETag></CompleteMultipartUploadResult>"),
                                 &c, &e) == 0);
    CHECK_STREQ(c.etag, "");
    s3d_xml_complete_free(&c);
    /* moto's root element. */
    CHECK(s3d_xml_parse_complete(T(DECL "<CompleteMultipartUploadResponse" NS "><Bucket>b</Bucket>"
                                        "<Key>k</Key><ETag>\"ab-2\"</ETag>"
                                        "</CompleteMultipartUploadResponse>"),
                                 &c, &e) == 0);
    CHECK_STREQ(c.etag, "\"ab-2\"");
    s3d_xml_complete_free(&c);
    CHECK_ERR(s3d_xml_parse_complete(T("<CompleteMultipartUploadResults><ETag>x</ETag>"
                                       "</CompleteMultipartUploadResults>"),
                                     &c, &e),
              S3D_EPROTO);
    s3d_xml_complete_free(&c);
    /* HTTP 200 with an Error body. */
    CHECK(s3d_xml_parse_complete(T(DECL "\n\n<Error><Code>InternalError</Code><Message>We "
                                        "encountered an internal error. Please try again."
                                        "</Message><RequestId>656c76696e6727732072657175657374"
                                        "</RequestId></Error>"),
                                 &c, &e) == 1);
    CHECK_STREQ(e.code, "InternalError");
    CHECK_STREQ(e.request_id, "656c76696e6727732072657175657374");
    CHECK(c.etag == NULL);
    s3d_xml_error_free(&e);
    CHECK_ERR(s3d_xml_parse_complete(T("<Other/>"), &c, &e), S3D_EPROTO);
    CHECK_ERR(s3d_xml_parse_complete(T("<Error><Code>X</Code>"), &c, &e), S3D_EPROTO);
    CHECK(e.code == NULL);

    CHECK_OK(s3d_xml_parse_list_uploads(
        T(DECL "<ListMultipartUploadsResult" NS "><Bucket>b</Bucket><KeyMarker></KeyMarker>"
               "<UploadIdMarker></UploadIdMarker><NextKeyMarker>my-movie.m2ts</NextKeyMarker>"
               "<NextUploadIdMarker>YW55IGlkZWEgd2h5</NextUploadIdMarker><MaxUploads>3"
               "</MaxUploads><IsTruncated>true</IsTruncated>"
               "<Upload><Key>my-divisor</Key><UploadId>XMgbGlrZSBlbHZpbmcncyBub3QgaGF2aW5n"
               "</UploadId><Initiator><ID>x</ID></Initiator><StorageClass>STANDARD"
               "</StorageClass><Initiated>2010-11-10T20:48:33.000Z</Initiated></Upload>"
               "<Upload><Key>my-movie.m2ts</Key><UploadId>VXBsb2FkIElEIGZvciBlbHZpbmcncyBteS"
               "1tb3ZpZS5tMnRzIHVwbG9hZA</UploadId></Upload></ListMultipartUploadsResult>"),
        &u));
    CHECK_EQ_U64(u.n_uploads, 2);
    CHECK_STREQ(u.uploads[0].key, "my-divisor");
    CHECK_STREQ(u.uploads[1].upload_id,
                "VXBsb2FkIElEIGZvciBlbHZpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA");
    CHECK(u.is_truncated == 1);
    CHECK(u.uploads[0].initiated == 1289422113); /* 2010-11-10T20:48:33Z */
    CHECK_STREQ(u.uploads[0].storage_class, "STANDARD");
    CHECK(u.uploads[1].initiated == 0 && u.uploads[1].storage_class == NULL);
    CHECK_STREQ(u.next_key_marker, "my-movie.m2ts");
    CHECK_STREQ(u.next_upload_id_marker, "YW55IGlkZWEgd2h5");
    s3d_xml_uploads_free(&u);
    CHECK_ERR(s3d_xml_parse_list_uploads(T("<ListMultipartUploadsResult><Upload><Key>k</Key>"
                                           "</Upload></ListMultipartUploadsResult>"),
                                         &u),
              S3D_EPROTO);
}

static void test_list_buckets(void)
{
    struct s3d_xml_buckets_result b;
    CHECK_OK(s3d_xml_parse_list_buckets(
        T(DECL "<ListAllMyBucketsResult" NS "><Owner><ID>o</ID><DisplayName>d</DisplayName>"
               "</Owner><Buckets><Bucket><Name>alpha</Name><CreationDate>2026-12-02T16:27:57"
               ".000Z</CreationDate></Bucket><Bucket><Name>b&amp;c</Name></Bucket></Buckets>"
               "<ContinuationToken>tok</ContinuationToken></ListAllMyBucketsResult>"),
        &b));
    CHECK_EQ_U64(b.n_buckets, 2);
    CHECK_STREQ(b.buckets[0].name, "alpha");
    CHECK(b.buckets[0].creation_date == 1796228877);
    CHECK_STREQ(b.buckets[1].name, "b&c");
    CHECK(b.buckets[1].creation_date == 0);
    CHECK_STREQ(b.continuation_token, "tok");
    s3d_xml_buckets_free(&b);
    /* No buckets at all. */
    CHECK_OK(s3d_xml_parse_list_buckets(T("<ListAllMyBucketsResult><Buckets/>"
                                          "</ListAllMyBucketsResult>"),
                                        &b));
    CHECK_EQ_U64(b.n_buckets, 0);
    CHECK(b.continuation_token == NULL);
    s3d_xml_buckets_free(&b);
    CHECK_ERR(s3d_xml_parse_list_buckets(T("<ListAllMyBucketsResult><Buckets><Bucket>"
                                           "<CreationDate>2026-12-02T16:27:57Z</CreationDate>"
                                           "</Bucket></Buckets></ListAllMyBucketsResult>"),
                                         &b),
              S3D_EPROTO);
    CHECK_MSG_HAS("no <Name>");
    CHECK(b.buckets == NULL && b.n_buckets == 0);
    CHECK_ERR(s3d_xml_parse_list_buckets(T("<ListAllMyBucketsResult><Buckets><Bucket><Name>x"
                                           "</Name><CreationDate>yesterday</CreationDate>"
                                           "</Bucket></Buckets></ListAllMyBucketsResult>"),
                                         &b),
              S3D_EPROTO);
    CHECK_ERR(s3d_xml_parse_list_buckets(T("<ListBucketResult/>"), &b), S3D_EPROTO);
}

static void test_delete(void)
{
    struct s3d_xml_delete_result d;
    CHECK_OK(s3d_xml_parse_delete(
        T(DECL "<DeleteResult" NS "><Deleted><Key>sample1.txt</Key></Deleted>"
               "<Error><Key>sample2.txt</Key><Code>AccessDenied</Code><Message>Access Denied"
               "</Message></Error><Deleted><Key>a&amp;b</Key><DeleteMarker>true</DeleteMarker>"
               "</Deleted></DeleteResult>"),
        &d));
    CHECK_EQ_U64(d.n_deleted, 2);
    CHECK_STREQ(d.deleted[0], "sample1.txt");
    CHECK_STREQ(d.deleted[1], "a&b");
    CHECK_EQ_U64(d.n_errors, 1);
    CHECK_STREQ(d.errors[0].key, "sample2.txt");
    CHECK_STREQ(d.errors[0].code, "AccessDenied");
    CHECK_STREQ(d.errors[0].message, "Access Denied");
    s3d_xml_delete_free(&d);
    CHECK_OK(s3d_xml_parse_delete(T("<DeleteResult" NS "/>"), &d));
    CHECK(d.n_deleted == 0 && d.n_errors == 0);
    s3d_xml_delete_free(&d);
    CHECK_ERR(
        s3d_xml_parse_delete(T("<DeleteResult><Error><Key>k</Key></Error></DeleteResult>"), &d),
        S3D_EPROTO);
}

static void test_malformed(void)
{
    static const char *const bad[] = {
        "",
        "   ",
        "not xml",
        "<ListBucketResult>",
        "<ListBucketResult><Name>b</Name>",
        "<ListBucketResult><Name>b</Nam",
        "<ListBucketResult><Name>b</Other></ListBucketResult>",
        "<ListBucketResult></ListBucketResult><ListBucketResult/>",
        "<ListBucketResult></ListBucketResult>trailing",
        "</ListBucketResult>",
        "<ListBucketResult><Name>&bogus;</Name></ListBucketResult>",
        "<ListBucketResult><Name>&amp</Name></ListBucketResult>",
        "<ListBucketResult><Name>&#0;</Name></ListBucketResult>",
        "<ListBucketResult><Name>&#xD800;</Name></ListBucketResult>",
        "<ListBucketResult><Name>&#x110000;</Name></ListBucketResult>",
        "<ListBucketResult><Name>&#;</Name></ListBucketResult>",
        "<ListBucketResult><Name>&#12a;</Name></ListBucketResult>",
        "<!DOCTYPE x [<!ENTITY a \"b\">]><ListBucketResult/>",
        "<ListBucketResult a=b/>",
        "<ListBucketResult a=\"b/>",
        "<ListBucketResult><!-- open",
        "<ListBucketResult><![CDATA[x</ListBucketResult>",
        "<?xml version=\"1.0\"",
        "<>",
        "< ListBucketResult/>",
    };
    size_t i;
    for (i = 0; i < S3D_ARRAY_LEN(bad); i++) {
        struct s3d_xml_list_result r;
        int rc = s3d_xml_parse_list_v2(bad[i], strlen(bad[i]), &r);
        if (rc != S3D_EPROTO)
            t_fail(__FILE__, __LINE__, "malformed case %zu \"%s\": got %s", i, bad[i],
                   s3d_err_name(rc));
        CHECK_MSG_HAS("ListObjectsV2");
        CHECK(r.contents == NULL);
    }
    /* A NUL byte inside the body. */
    {
        struct s3d_xml_list_result r;
        static const char nul[] = "<ListBucketResult><Name>a\0b</Name></ListBucketResult>";
        CHECK_ERR(s3d_xml_parse_list_v2(nul, sizeof(nul) - 1, &r), S3D_EPROTO);
        CHECK_MSG_HAS("NUL");
    }
    /* Truncated at every byte of a real body: always a clean EPROTO, never a crash. */
    {
        static const char full[] = DECL "<ListBucketResult" NS "><Contents><Key>a&amp;b</Key>"
                                        "<Size>1</Size></Contents></ListBucketResult>";
        size_t cut;
        for (cut = 0; cut < sizeof(full) - 1; cut++) {
            struct s3d_xml_list_result r;
            char *copy = malloc(cut + 1);
            memcpy(copy, full, cut);
            CHECK_ERR(s3d_xml_parse_list_v2(copy, cut, &r), S3D_EPROTO);
            free(copy);
        }
    }
}

static void test_limits(void)
{
    struct s3d_dynbuf b;
    struct s3d_xml_list_result r;
    size_t i;
    /* Depth: S3D_XML_MAX_DEPTH levels parse, one more is refused. */
    s3d_dynbuf_init(&b, 1 << 20);
    CHECK_OK(s3d_dynbuf_appendf(&b, "<ListBucketResult>"));
    for (i = 1; i < S3D_XML_MAX_DEPTH; i++)
        CHECK_OK(s3d_dynbuf_appendf(&b, "<a>"));
    for (i = 1; i < S3D_XML_MAX_DEPTH; i++)
        CHECK_OK(s3d_dynbuf_appendf(&b, "</a>"));
    CHECK_OK(s3d_dynbuf_appendf(&b, "</ListBucketResult>"));
    CHECK_OK(s3d_xml_parse_list_v2(b.data, b.len, &r));
    s3d_xml_list_free(&r);
    s3d_dynbuf_reset(&b);
    CHECK_OK(s3d_dynbuf_appendf(&b, "<ListBucketResult>"));
    for (i = 0; i < 100000; i++)
        CHECK_OK(s3d_dynbuf_appendf(&b, "<a>"));
    CHECK_ERR(s3d_xml_parse_list_v2(b.data, b.len, &r), S3D_EPROTO);
    CHECK_MSG_HAS("nested too deep");
    s3d_dynbuf_free(&b);

    /* Element count. */
    s3d_dynbuf_init(&b, S3D_XML_MAX_BODY);
    CHECK_OK(s3d_dynbuf_appendf(&b, "<ListBucketResult>"));
    for (i = 0; i < S3D_XML_MAX_ELEMENTS; i++)
        CHECK_OK(s3d_dynbuf_append(&b, "<a/>", 4));
    CHECK_OK(s3d_dynbuf_appendf(&b, "</ListBucketResult>"));
    CHECK_ERR(s3d_xml_parse_list_v2(b.data, b.len, &r), S3D_EPROTO);
    CHECK_MSG_HAS("too many elements");
    s3d_dynbuf_free(&b);

    /* Oversize body: refused before any parsing (the pointer is never read past). */
    {
        char *big = malloc((size_t)S3D_XML_MAX_BODY + 1);
        CHECK(big != NULL);
        memset(big, ' ', (size_t)S3D_XML_MAX_BODY + 1);
        CHECK_ERR(s3d_xml_parse_list_v2(big, (size_t)S3D_XML_MAX_BODY + 1, &r), S3D_ETOOBIG);
        free(big);
    }
}

static void test_builders(void)
{
    struct s3d_xml_part parts[3] = {
        {1, "\"a54357aff0632cce46d942af68356b38\"", NULL},
        {2, "\"0c78aef83f66abc1fa1e8477f296d394\"", "AAAAAA=="},
        {10000, "\"acbd18db4cc2f85cedef654fccc4a4d8\"", NULL},
    };
    const char *keys[3] = {"sample1.txt", "a&b<c>\"d'\r\te", "\xe6\x97\xa5/x y"};
    const char *ctl_key[1] = {"bad\x01key"};
    struct s3d_dynbuf b;
    struct s3d_xml_delete_result d;
    s3d_dynbuf_init(&b, 1 << 20);
    CHECK_OK(s3d_xml_build_complete(parts, 3, &b));
    CHECK_STREQ(b.data,
                DECL "<CompleteMultipartUpload" NS "><Part><PartNumber>1</PartNumber><ETag>"
                     "\"a54357aff0632cce46d942af68356b38\"</ETag></Part><Part><PartNumber>2"
                     "</PartNumber><ETag>\"0c78aef83f66abc1fa1e8477f296d394\"</ETag>"
                     "<ChecksumCRC32C>AAAAAA==</ChecksumCRC32C></Part><Part><PartNumber>10000"
                     "</PartNumber><ETag>\"acbd18db4cc2f85cedef654fccc4a4d8\"</ETag></Part>"
                     "</CompleteMultipartUpload>");
    CHECK_ERR(s3d_xml_build_complete(parts, 0, &b), S3D_EINVAL);
    parts[1].etag = NULL;
    CHECK_ERR(s3d_xml_build_complete(parts, 3, &b), S3D_EINVAL);

    s3d_dynbuf_reset(&b);
    CHECK_OK(s3d_xml_build_delete(keys, 3, 1, &b));
    CHECK_STREQ(b.data, DECL "<Delete" NS "><Quiet>true</Quiet><Object><Key>sample1.txt</Key>"
                             "</Object><Object><Key>a&amp;b&lt;c&gt;\"d'&#13;\te</Key></Object>"
                             "<Object><Key>\xe6\x97\xa5/x y</Key></Object></Delete>");
    /* Round trip through the reader: the keys come back byte for byte. */
    {
        struct s3d_dynbuf resp;
        size_t i;
        s3d_dynbuf_init(&resp, 1 << 20);
        CHECK_OK(s3d_dynbuf_appendf(&resp, "<DeleteResult>"));
        for (i = 0; i < 3; i++) {
            CHECK_OK(s3d_dynbuf_appendf(&resp, "<Deleted><Key>"));
            CHECK_OK(s3d_xml_escape(&resp, keys[i], strlen(keys[i])));
            CHECK_OK(s3d_dynbuf_appendf(&resp, "</Key></Deleted>"));
        }
        CHECK_OK(s3d_dynbuf_appendf(&resp, "</DeleteResult>"));
        CHECK_OK(s3d_xml_parse_delete(resp.data, resp.len, &d));
        CHECK_EQ_U64(d.n_deleted, 3);
        for (i = 0; i < 3; i++)
            CHECK_STREQ(d.deleted[i], keys[i]);
        s3d_xml_delete_free(&d);
        s3d_dynbuf_free(&resp);
    }
    s3d_dynbuf_reset(&b);
    CHECK_OK(s3d_xml_build_delete(keys, 1, 0, &b));
    CHECK(strstr(b.data, "<Quiet>") == NULL);
    CHECK_ERR(s3d_xml_build_delete(ctl_key, 1, 0, &b), S3D_EINVAL);
    CHECK_MSG_HAS("control character");
    CHECK_ERR(s3d_xml_build_delete(keys, 0, 0, &b), S3D_EINVAL);
    CHECK_ERR(s3d_xml_build_delete(keys, 1001, 0, &b), S3D_EINVAL);
    s3d_dynbuf_free(&b);
    /* The cap holds. */
    s3d_dynbuf_init(&b, 64);
    CHECK_ERR(s3d_xml_build_delete(keys, 3, 0, &b), S3D_ETOOBIG);
    s3d_dynbuf_free(&b);
}

/* The CRC-32C tag of a multipart upload (ops.h): GetObjectTagging as AWS and RGW answer it, the
 * PutObjectTagging body, and the multipart ETag computed from the parts' (RGW sends none). */
static void test_tagging(void)
{
    struct s3d_op_part parts[2];
    struct s3d_dynbuf b;
    char *v = NULL, etag[80];
    CHECK_OK(s3d_xml_parse_tag(T(DECL "<Tagging" NS "><TagSet><Tag><Key>other</Key><Value>x"
                                      "</Value></Tag><Tag><Key>s3direct-crc32c</Key><Value>"
                                      "0a1b2c3d 16cafe8d6b8c1c55c3d339c8d69326c6-2</Value></Tag>"
                                      "</TagSet></Tagging>"),
                               "s3direct-crc32c", &v));
    CHECK_STREQ(v, "0a1b2c3d 16cafe8d6b8c1c55c3d339c8d69326c6-2");
    free(v);
    CHECK_OK(
        s3d_xml_parse_tag(T(DECL "<Tagging" NS "><TagSet/></Tagging>"), "s3direct-crc32c", &v));
    CHECK(v == NULL);
    /* A tag of that name with no value is an empty value, not "none". */
    CHECK_OK(s3d_xml_parse_tag(T("<Tagging><TagSet><Tag><Key>k</Key></Tag></TagSet></Tagging>"),
                               "k", &v));
    CHECK_STREQ(v, "");
    free(v);
    CHECK_ERR(s3d_xml_parse_tag(T("<ListBucketResult/>"), "k", &v), S3D_EPROTO);
    CHECK(v == NULL);
    CHECK_ERR(s3d_xml_parse_tag(T("<Tagging><TagSet><Tag>"), "k", &v), S3D_EPROTO);
    CHECK(v == NULL);

    s3d_dynbuf_init(&b, 1 << 16);
    CHECK_OK(s3d_xml_build_tagging("s3direct-crc32c", "0a1b2c3d a<b", &b));
    CHECK_STREQ(b.data, DECL "<Tagging" NS "><TagSet><Tag><Key>s3direct-crc32c</Key><Value>"
                             "0a1b2c3d a&lt;b</Value></Tag></TagSet></Tagging>");
    s3d_dynbuf_free(&b);

    /* RGW's ETag of parts 'a' x 5 MiB and 'b' x 100 (seen on the server). */
    memset(parts, 0, sizeof(parts));
    snprintf(parts[0].etag, sizeof(parts[0].etag), "\"79b281060d337b9b2b84ccf390adcf74\"");
    snprintf(parts[1].etag, sizeof(parts[1].etag), "\"D84A935724EAC27D7C9676679B6CDBAF\"");
    CHECK(s3d_op_multipart_etag(parts, 2, etag) == 0);
    CHECK_STREQ(etag, "\"16cafe8d6b8c1c55c3d339c8d69326c6-2\"");
    snprintf(parts[1].etag, sizeof(parts[1].etag), "d84a935724eac27d7c9676679b6cdbaf");
    CHECK(s3d_op_multipart_etag(parts, 2, etag) == -1 && etag[0] == '\0');
    snprintf(parts[1].etag, sizeof(parts[1].etag), "\"d84a935724eac27d7c9676679b6cdbag\"");
    CHECK(s3d_op_multipart_etag(parts, 2, etag) == -1);
    CHECK(s3d_op_multipart_etag(parts, 0, etag) == -1);
}

static void test_time(void)
{
    static const struct {
        const char *s;
        int iso; /* 1: ISO-8601, 0: RFC 1123 */
        int ok;
        int64_t want;
    } cases[] = {
        {"2026-12-02T16:27:57.000Z", 1, 1, 1796228877},
        {"2026-12-02T16:27:57Z", 1, 1, 1796228877},
        {"2026-12-02T16:27:57.123456789Z", 1, 1, 1796228877},
        {"2026-12-02T17:27:57+01:00", 1, 1, 1796228877},
        {"2026-12-02T15:27:57-01:00", 1, 1, 1796228877},
        {"1970-01-01T00:00:00Z", 1, 1, 0},
        {"2024-02-29T00:00:00Z", 1, 1, 1709164800},
        {"2023-02-29T00:00:00Z", 1, 0, 0},
        {"2026-12-02T16:27:57", 1, 0, 0},
        {"2026-12-02T16:27:57.Z", 1, 0, 0},
        {"2026-13-02T16:27:57Z", 1, 0, 0},
        {"2026-12-02T24:00:00Z", 1, 0, 0},
        {"2026-12-02T16:27:57Zjunk", 1, 0, 0},
        {"", 1, 0, 0},
        {"Wed, 02 Dec 2026 16:27:57 GMT", 0, 1, 1796228877},
        {"Wed, 02 Dec 2026 16:27:57 UTC", 0, 1, 1796228877},
        {"Wed, 02 Dec 2026 16:27:57 +0000", 0, 1, 1796228877},
        {"Thu, 01 Jan 1970 00:00:00 GMT", 0, 1, 0},
        {"Wed, 02 Dek 2026 16:27:57 GMT", 0, 0, 0},
        {"Xyz, 02 Dec 2026 16:27:57 GMT", 0, 0, 0},
        {"Wed, 2 Dec 2026 16:27:57 GMT", 0, 0, 0},
        {"Wed, 31 Nov 2026 16:27:57 GMT", 0, 0, 0},
        {"Wed, 02 Dec 2026 16:27:57", 0, 0, 0},
        {"Wed, 02 Dec 2026 16:27:57 GMT ", 0, 0, 0},
        {"Wed", 0, 0, 0},
    };
    size_t i;
    for (i = 0; i < S3D_ARRAY_LEN(cases); i++) {
        int64_t t = -1;
        int rc = cases[i].iso ? s3d_time_parse_iso8601(T(cases[i].s), &t)
                              : s3d_time_parse_rfc1123(T(cases[i].s), &t);
        if ((rc == 0) != cases[i].ok)
            t_fail(__FILE__, __LINE__, "time case \"%s\": rc %d", cases[i].s, rc);
        if (rc == 0 && t != cases[i].want)
            t_fail(__FILE__, __LINE__, "time case \"%s\": %lld != %lld", cases[i].s, (long long)t,
                   (long long)cases[i].want);
        if (rc != 0)
            CHECK(rc == S3D_EPROTO);
    }
    CHECK(s3d_time_from_civil(2000, 3, 1, 0, 0, 0) == 951868800);
    CHECK(s3d_time_from_civil(1969, 12, 31, 23, 59, 59) == -1);
}

int main(void)
{
    test_error();
    test_list();
    test_list_1000();
    test_multipart();
    test_list_buckets();
    test_delete();
    test_malformed();
    test_limits();
    test_builders();
    test_tagging();
    test_time();
    printf("ok\n");
    return 0;
}
