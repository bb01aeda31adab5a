/* test_addrs.c - the endpoint's address list (s3/addrs.h) as pure functions, time passed in:
 * least-used pick with round-robin among equals, the skip after a failed connection and its
 * backoff, merging a new lookup, and the cases where a request gets no address. Plus the
 * lookup of numeric names (no DNS). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "s3/addrs.h"
#include "testutil.h"

static struct s3d_addrset set_of(const char *const *texts, size_t n)
{
    struct s3d_addrset s;
    memset(&s, 0, sizeof(s));
    s3d_addrset_update(&s, texts, n);
    return s;
}

int main(void)
{
    static const char *const two[] = {"127.0.0.1", "127.0.0.2"};
    static const char *const three[] = {"10.0.0.1", "10.0.0.2", "10.0.0.3"};
    static const char *const one[] = {"10.0.0.9"};
    struct s3d_addrset s;
    int counts[3] = {0, 0, 0}, i, k;

    /* One address (or none): requests go without, nothing counted. */
    s = set_of(one, 1);
    CHECK(s3d_addrset_pick(&s, 0) == -1);
    CHECK(s.a[0].in_use == 0);
    s = set_of(NULL, 0);
    CHECK(s3d_addrset_pick(&s, 0) == -1);

    /* Requests that stay in flight spread evenly: 16 over two addresses = 8 + 8. */
    s = set_of(two, 2);
    for (i = 0; i < 16; i++) {
        k = s3d_addrset_pick(&s, 0);
        CHECK(k == 0 || k == 1);
        counts[k]++;
    }
    CHECK(counts[0] == 8 && counts[1] == 8);
    CHECK(s.a[0].in_use == 8 && s.a[1].in_use == 8);

    /* Least used wins: free three on address 1, the next three go there. */
    for (i = 0; i < 3; i++)
        CHECK(s3d_addrset_done(&s, "127.0.0.2", 0, 1, 0, 1000, 8000) == 0);
    for (i = 0; i < 3; i++)
        CHECK(s3d_addrset_pick(&s, 0) == 1);
    CHECK(s.a[1].in_use == 8);

    /* One request at a time still goes round every address. */
    s = set_of(three, 3);
    for (i = 0; i < 9; i++) {
        k = s3d_addrset_pick(&s, 0);
        CHECK(k == i % 3);
        CHECK(s3d_addrset_done(&s, three[k], 0, 1, 0, 1000, 8000) == 0);
    }
    CHECK(s.a[0].picks == 3 && s.a[1].picks == 3 && s.a[2].picks == 3);

    /* A refused connection: skipped until now + down, the others take the load. */
    s = set_of(two, 2);
    CHECK(s3d_addrset_pick(&s, 100) == 0);
    CHECK(s3d_addrset_pick(&s, 100) == 1);
    CHECK(s3d_addrset_pick(&s, 100) == 0);
    CHECK(s3d_addrset_done(&s, "127.0.0.1", 1, 0, 100, 1000, 8000) == 1);
    CHECK_EQ_U64(s.a[0].down_until, 1100);
    /* The other request that was on its way there fails too: no longer skip. */
    CHECK(s3d_addrset_done(&s, "127.0.0.1", 1, 0, 120, 1000, 8000) == 0);
    CHECK_EQ_U64(s.a[0].down_until, 1100);
    CHECK(s.a[0].in_use == 0 && s.a[0].fails == 1);
    for (i = 0; i < 5; i++)
        CHECK(s3d_addrset_pick(&s, 500) == 1);
    /* After the skip it is tried again (least used); failing again doubles the skip. */
    CHECK(s3d_addrset_pick(&s, 1100) == 0);
    CHECK(s3d_addrset_done(&s, "127.0.0.1", 1, 0, 1100, 1000, 8000) == 1);
    CHECK_EQ_U64(s.a[0].down_until, 3100);
    CHECK(s3d_addrset_pick(&s, 3100) == 0);
    CHECK(s3d_addrset_done(&s, "127.0.0.1", 1, 0, 3100, 1000, 8000) == 1);
    CHECK_EQ_U64(s.a[0].down_until, 7100);
    CHECK(s3d_addrset_pick(&s, 7100) == 0);
    CHECK(s3d_addrset_done(&s, "127.0.0.1", 1, 0, 7100, 1000, 8000) == 1);
    CHECK_EQ_U64(s.a[0].down_until, 15100); /* capped at max_down_ms */
    /* A response clears it. */
    CHECK(s3d_addrset_pick(&s, 15100) == 0);
    CHECK(s3d_addrset_done(&s, "127.0.0.1", 0, 1, 15100, 1000, 8000) == 0);
    CHECK(s.a[0].fails == 0 && s.a[0].down_until == 0);
    /* A request that failed after connecting (reset mid-body) does not skip the address. */
    CHECK(s3d_addrset_pick(&s, 15100) == 0);
    CHECK(s3d_addrset_done(&s, "127.0.0.1", 0, 0, 15100, 1000, 8000) == 0);
    CHECK(s.a[0].down_until == 0);

    /* Every address skipped: requests go without one (libcurl's own resolve and errors). */
    s = set_of(two, 2);
    CHECK(s3d_addrset_pick(&s, 0) == 0);
    CHECK(s3d_addrset_pick(&s, 0) == 1);
    CHECK(s3d_addrset_done(&s, "127.0.0.1", 1, 0, 0, 1000, 8000) == 1);
    CHECK(s3d_addrset_done(&s, "127.0.0.2", 1, 0, 0, 1000, 8000) == 1);
    CHECK(s3d_addrset_pick(&s, 999) == -1);
    CHECK(s.a[0].in_use == 0 && s.a[1].in_use == 0);
    CHECK(s3d_addrset_pick(&s, 1000) >= 0);

    /* A new lookup keeps the counts and skips of addresses still there, drops the rest,
     * and drops duplicates; a lease on a dropped address is given back harmlessly. */
    {
        static const char *const moved[] = {"10.0.0.3", "10.0.0.4", "10.0.0.3", "", NULL};
        s = set_of(three, 3);
        CHECK(s3d_addrset_pick(&s, 0) == 0);
        CHECK(s3d_addrset_pick(&s, 0) == 1);
        CHECK(s3d_addrset_pick(&s, 0) == 2);
        CHECK(s3d_addrset_done(&s, "10.0.0.3", 1, 0, 0, 1000, 8000) == 1);
        s3d_addrset_update(&s, moved, 5);
        CHECK(s.n == 2);
        CHECK_STREQ(s.a[0].text, "10.0.0.3");
        CHECK_STREQ(s.a[1].text, "10.0.0.4");
        CHECK_EQ_U64(s.a[0].down_until, 1000);
        CHECK(s.a[1].in_use == 0 && s.a[1].down_until == 0);
        CHECK(s3d_addrset_done(&s, "10.0.0.1", 1, 0, 0, 1000, 8000) == 0);
        CHECK(s3d_addrset_pick(&s, 10) == 1);
    }

    /* More addresses than kept: the first S3D_ADDRS_MAX. */
    {
        char buf[S3D_ADDRS_MAX + 4][S3D_ADDR_TEXT];
        const char *many[S3D_ADDRS_MAX + 4];
        for (i = 0; i < S3D_ADDRS_MAX + 4; i++) {
            snprintf(buf[i], sizeof(buf[i]), "10.1.0.%d", i + 1);
            many[i] = buf[i];
        }
        s = set_of(many, S3D_ADDRS_MAX + 4);
        CHECK(s.n == S3D_ADDRS_MAX);
    }

    /* Formatting: IPv6 in brackets (CURLOPT_CONNECT_TO's form), link-local left out. */
    {
        struct sockaddr_in a4;
        struct sockaddr_in6 a6;
        char t[S3D_ADDR_TEXT];
        memset(&a4, 0, sizeof(a4));
        a4.sin_family = AF_INET;
        CHECK(inet_pton(AF_INET, "192.0.2.7", &a4.sin_addr) == 1);
        CHECK(s3d_addr_format((const struct sockaddr *)&a4, t) == 0);
        CHECK_STREQ(t, "192.0.2.7");
        memset(&a6, 0, sizeof(a6));
        a6.sin6_family = AF_INET6;
        CHECK(inet_pton(AF_INET6, "2001:db8::1", &a6.sin6_addr) == 1);
        CHECK(s3d_addr_format((const struct sockaddr *)&a6, t) == 0);
        CHECK_STREQ(t, "[2001:db8::1]");
        CHECK(inet_pton(AF_INET6, "fe80::1", &a6.sin6_addr) == 1);
        CHECK(s3d_addr_format((const struct sockaddr *)&a6, t) == -1);
    }

    /* The lookup of a numeric name needs no DNS: one address. */
    {
        char out[S3D_ADDRS_MAX][S3D_ADDR_TEXT];
        int gai = 0;
        CHECK(s3d_resolve_name("127.0.0.1", 80, out, S3D_ADDRS_MAX, &gai) == 1);
        CHECK_STREQ(out[0], "127.0.0.1");
        CHECK(s3d_resolve_name("::1", 80, out, S3D_ADDRS_MAX, &gai) == 1);
        CHECK_STREQ(out[0], "[::1]");
    }
    return 0;
}
