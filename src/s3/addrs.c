/* addrs.c - the pure address list of one name (see addrs.h): least-used pick with
 * round-robin among equals, skip after a failed connection. No lock, no clock, no I/O. */
#include "s3/addrs.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

static int find(const struct s3d_addrset *s, const char *text)
{
    size_t i;
    for (i = 0; i < s->n; i++)
        if (strcmp(s->a[i].text, text) == 0)
            return (int)i;
    return -1;
}

void s3d_addrset_update(struct s3d_addrset *s, const char *const *texts, size_t n)
{
    struct s3d_addrset old = *s;
    size_t i;

    s->n = 0;
    for (i = 0; i < n && s->n < S3D_ADDRS_MAX; i++) {
        struct s3d_addr *a;
        int prev;
        if (texts[i] == NULL || texts[i][0] == '\0' || strlen(texts[i]) >= S3D_ADDR_TEXT ||
            find(s, texts[i]) >= 0)
            continue;
        a = &s->a[s->n++];
        prev = find(&old, texts[i]);
        if (prev >= 0) {
            *a = old.a[prev];
        } else {
            memset(a, 0, sizeof(*a));
            memcpy(a->text, texts[i], strlen(texts[i]) + 1);
        }
    }
    if (s->next >= s->n)
        s->next = 0;
}

int s3d_addrset_pick(struct s3d_addrset *s, uint64_t now_ms)
{
    size_t i;
    int best = -1;

    if (s->n < 2)
        return -1;
    /* Scanning from the cursor makes the first of several equally used addresses the next in
     * turn, so a client that runs one request at a time still goes round them all. */
    for (i = 0; i < s->n; i++) {
        size_t k = (s->next + i) % s->n;
        const struct s3d_addr *a = &s->a[k];
        if (a->down_until > now_ms)
            continue;
        if (best < 0 || a->in_use < s->a[best].in_use)
            best = (int)k;
    }
    if (best < 0)
        return -1;
    s->a[best].in_use++;
    s->a[best].picks++;
    s->next = ((size_t)best + 1) % s->n;
    return best;
}

int s3d_addrset_done(struct s3d_addrset *s, const char *text, int conn_failed, int responded,
                     uint64_t now_ms, uint32_t down_ms, uint32_t max_down_ms)
{
    struct s3d_addr *a;
    uint64_t d;
    int k = find(s, text);

    if (k < 0)
        return 0;
    a = &s->a[k];
    if (a->in_use > 0)
        a->in_use--;
    if (responded) {
        a->fails = 0;
        a->down_until = 0;
        return 0;
    }
    /* The other requests that were already on their way to it fail too: one failure, not
     * one per request, so the skip does not grow with the concurrency. */
    if (!conn_failed || a->down_until > now_ms)
        return 0;
    if (a->fails < 31)
        a->fails++;
    d = (uint64_t)down_ms << (a->fails - 1);
    if (d > max_down_ms)
        d = max_down_ms;
    a->down_until = now_ms + d;
    return 1;
}

int s3d_addr_format(const struct sockaddr *sa, char out[S3D_ADDR_TEXT])
{
    char buf[INET6_ADDRSTRLEN];
    if (sa->sa_family == AF_INET) {
        if (inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, buf,
                      sizeof(buf)) == NULL)
            return -1;
        snprintf(out, S3D_ADDR_TEXT, "%s", buf);
        return 0;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)(const void *)sa;
        /* A link-local address needs its zone, which a connect-to literal cannot carry
         * portably: leave such names to libcurl. */
        if (IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr) ||
            inet_ntop(AF_INET6, &s6->sin6_addr, buf, sizeof(buf)) == NULL)
            return -1;
        snprintf(out, S3D_ADDR_TEXT, "[%s]", buf);
        return 0;
    }
    return -1;
}
