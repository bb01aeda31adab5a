/* fuzz_xml.c - fuzz target for the S3 XML reader and documents (src/s3/xml.c,
 * s3doc.c).
 *
 * Every parser runs on the input. Whatever the bytes, each must return (no crash, no leak
 * under ASan) with 0 or a negative code, leave a zeroed result on failure, and on success hand
 * back entries whose required fields are set. Then the escaping round trip: the input, as key
 * text, escaped into a DeleteResult and read back, must come back byte for byte. The input is
 * also a time in both formats S3 sends (src/s3/timefmt.c: XML LastModified/Initiated/
 * CreationDate, HTTP Last-Modified/Date): an accepted one, printed back, parses to the same
 * second.
 * Built by tests/fuzz/fuzz.cmake as a plain test (with fuzz_main.c) and, with -DS3D_FUZZ=ON
 * under clang, as a libFuzzer binary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

#include <time.h>

#include "common/dynbuf.h"
#include "s3/timefmt.h"
#include "s3/s3doc.h"
#include "s3/xml.h"

const char *const s3d_fuzz_tokens[] = {"<",   ">",         "</",   "/>", "&",   "&amp;",
                                       "&#x", ";",         "[",    "]",  "=",   "\n",
                                       "  ",  "<![CDATA[", "<!--", "\"", "\xff"};
const size_t s3d_fuzz_n_tokens = sizeof(s3d_fuzz_tokens) / sizeof(s3d_fuzz_tokens[0]);

void s3d_fuzz_fixup(uint8_t *buf, size_t len, uint64_t r)
{
    (void)buf;
    (void)len;
    (void)r;
}

static int is_zero(const void *p, size_t n)
{
    const unsigned char *b = p;
    size_t i;
    for (i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

static void roundtrip(const char *s, size_t n)
{
    struct s3d_dynbuf b;
    struct s3d_xml_delete_result d;
    if (memchr(s, '\0', n) != NULL || n == 0)
        return;
    s3d_dynbuf_init(&b, S3D_XML_MAX_BODY);
    REQUIRE(s3d_dynbuf_append(&b, "<DeleteResult><Deleted><Key>", 28) == 0);
    REQUIRE(s3d_xml_escape(&b, s, n) == 0);
    REQUIRE(s3d_dynbuf_append(&b, "</Key></Deleted></DeleteResult>", 31) == 0);
    REQUIRE(s3d_xml_parse_delete(b.data, b.len, &d) == 0);
    REQUIRE(d.n_deleted == 1 && strlen(d.deleted[0]) == n && memcmp(d.deleted[0], s, n) == 0);
    s3d_xml_delete_free(&d);
    s3d_dynbuf_free(&b);
}

/* An accepted time, printed back in both formats (years 1970..9999, which %Y prints as four
 * digits), parses to the same second. */
static void check_time(int64_t t)
{
    const char *fmt[2] = {"%Y-%m-%dT%H:%M:%SZ", "%a, %d %b %Y %H:%M:%S GMT"};
    time_t tt = (time_t)t;
    struct tm tm;
    char buf[64];
    int64_t back;
    size_t n;
    if (t < 0 || t >= 253402300800) /* 10000-01-01 */
        return;
    REQUIRE(gmtime_r(&tt, &tm) != NULL);
    n = strftime(buf, sizeof(buf), fmt[0], &tm);
    REQUIRE(n > 0 && s3d_time_parse_iso8601(buf, n, &back) == 0 && back == t);
    n = strftime(buf, sizeof(buf), fmt[1], &tm);
    REQUIRE(n > 0 && s3d_time_parse_rfc1123(buf, n, &back) == 0 && back == t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int64_t t;
    const char *s = (const char *)data;
    struct s3d_xml_error e;
    struct s3d_xml_list_result l;
    struct s3d_xml_complete c;
    struct s3d_xml_uploads_result u;
    struct s3d_xml_delete_result d;
    struct s3d_xml_buckets_result b;
    char *id = NULL;
    size_t i;
    int rc;

    (void)s3d_xml_is_error(s, size);
    if (s3d_xml_parse_error(s, size, &e) == 0)
        s3d_xml_error_free(&e);
    else
        REQUIRE(is_zero(&e, sizeof(e)));

    rc = s3d_xml_parse_list_v2(s, size, &l);
    REQUIRE(rc <= 0);
    if (rc == 0) {
        for (i = 0; i < l.n_contents; i++)
            REQUIRE(l.contents[i].key != NULL);
        for (i = 0; i < l.n_prefixes; i++)
            REQUIRE(l.prefixes[i] != NULL);
        s3d_xml_list_free(&l);
    }
    REQUIRE(is_zero(&l, sizeof(l)));

    rc = s3d_xml_parse_initiate(s, size, &id);
    REQUIRE(rc <= 0 && (rc == 0) == (id != NULL));
    REQUIRE(id == NULL || id[0] != '\0');
    free(id);

    memset(&e, 0, sizeof(e));
    rc = s3d_xml_parse_complete(s, size, &c, &e);
    REQUIRE(rc <= 1);
    if (rc == 1) {
        REQUIRE(is_zero(&c, sizeof(c)));
        s3d_xml_error_free(&e);
    } else {
        REQUIRE(is_zero(&e, sizeof(e)));
        s3d_xml_complete_free(&c);
    }

    rc = s3d_xml_parse_list_uploads(s, size, &u);
    REQUIRE(rc <= 0);
    if (rc == 0) {
        for (i = 0; i < u.n_uploads; i++)
            REQUIRE(u.uploads[i].key != NULL && u.uploads[i].upload_id != NULL);
        s3d_xml_uploads_free(&u);
    }
    REQUIRE(is_zero(&u, sizeof(u)));
    rc = s3d_xml_parse_list_buckets(s, size, &b);
    REQUIRE(rc <= 0);
    if (rc == 0) {
        for (i = 0; i < b.n_buckets; i++)
            REQUIRE(b.buckets[i].name != NULL && b.buckets[i].name[0] != '\0');
        s3d_xml_buckets_free(&b);
    }
    REQUIRE(is_zero(&b, sizeof(b)));
    if (s3d_xml_parse_delete(s, size, &d) == 0) {
        for (i = 0; i < d.n_errors; i++)
            REQUIRE(d.errors[i].key != NULL && d.errors[i].code != NULL);
        s3d_xml_delete_free(&d);
    }
    {
        char *tag = NULL;
        rc = s3d_xml_parse_tag(s, size, "s3direct-crc32c", &tag);
        REQUIRE(rc <= 0 && (rc == 0 || tag == NULL));
        free(tag);
    }
    roundtrip(s, size < 4096 ? size : 4096);

    rc = s3d_time_parse_iso8601(s, size, &t);
    REQUIRE(rc <= 0);
    if (rc == 0)
        check_time(t);
    rc = s3d_time_parse_rfc1123(s, size, &t);
    REQUIRE(rc <= 0);
    if (rc == 0)
        check_time(t);
    return 0;
}
