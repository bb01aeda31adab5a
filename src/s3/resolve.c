/* resolve.c - the resolver of the S3 context (see addrs.h): each host name's address list,
 * looked up with getaddrinfo when due, under one lock.
 *
 * A lookup blocks, so it runs outside the lock: the thread that finds a list due marks it
 * (lookup_running), unlocks, resolves, and locks again to merge the answer; the other threads
 * meanwhile pick from the old list (or, before the first answer, go without an address as
 * if there were one only). */
#include "s3/addrs.h"

#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "common/log.h"
#include "s3/retry.h"

int s3d_resolve_name(const char *name, uint16_t port, char (*out)[S3D_ADDR_TEXT], size_t max,
                     int *gai_err)
{
    struct addrinfo hints, *res = NULL, *ai;
    char service[8];
    size_t n = 0;
    int family = AF_UNSPEC, rc;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_protocol = IPPROTO_TCP;
    snprintf(service, sizeof(service), "%u", (unsigned)port);
    rc = getaddrinfo(name, service, &hints, &res);
    *gai_err = rc;
    if (rc != 0)
        return -1;
    /* One family: the first answer's, which getaddrinfo ranked first for this host (RFC 6724
     * destination selection). Mixing in the other would send some requests down a family the
     * path may not carry. */
    for (ai = res; ai != NULL && n < max; ai = ai->ai_next) {
        size_t i;
        int dup = 0;
        if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6)
            continue;
        if (family == AF_UNSPEC)
            family = ai->ai_family;
        if (ai->ai_family != family || s3d_addr_format(ai->ai_addr, out[n]) != 0)
            continue;
        for (i = 0; i < n && !dup; i++)
            dup = strcmp(out[i], out[n]) == 0;
        if (!dup)
            n++;
    }
    freeaddrinfo(res);
    if (n == 0) {
        *gai_err = EAI_NONAME;
        return -1;
    }
    return (int)n;
}

void s3d_resolver_init(struct s3d_resolver *r, int enabled, uint16_t port)
{
    memset(r, 0, sizeof(*r));
    r->enabled = enabled;
    r->port = port;
    pthread_mutex_init(&r->lock, NULL);
}

void s3d_resolver_cleanup(struct s3d_resolver *r)
{
    if (r == NULL)
        return;
    pthread_mutex_destroy(&r->lock);
    memset(r, 0, sizeof(*r));
}

/* The entry for name, added if there is room; -1 when the table is full. Under the lock. */
static int name_entry(struct s3d_resolver *r, const char *name, size_t len)
{
    size_t i;
    for (i = 0; i < r->n_names; i++)
        if (strlen(r->names[i].name) == len && memcmp(r->names[i].name, name, len) == 0)
            return (int)i;
    if (r->n_names == S3D_RESOLVER_MAX_NAMES || len >= sizeof(r->names[0].name))
        return -1;
    memset(&r->names[r->n_names], 0, sizeof(r->names[0]));
    memcpy(r->names[r->n_names].name, name, len);
    r->names[r->n_names].name[len] = '\0';
    return (int)r->n_names++;
}

static void log_list(const struct s3d_resolved_name *e, int first)
{
    char list[S3D_ADDRS_MAX * (S3D_ADDR_TEXT + 2)];
    size_t i, at = 0;
    list[0] = '\0';
    for (i = 0; i < e->set.n; i++)
        at +=
            (size_t)snprintf(list + at, sizeof(list) - at, "%s%s", i ? ", " : "", e->set.a[i].text);
    if (e->set.n > 1)
        S3D_INFO("endpoint %s resolves to %zu addresses (%s): spreading connections over them",
                 e->name, e->set.n, list);
    else if (first)
        S3D_INFO("endpoint %s resolves to 1 address (%s)", e->name, list);
    else
        S3D_INFO("endpoint %s now resolves to 1 address (%s): connections no longer spread",
                 e->name, list);
}

/* Looks e's name up and merges the answer. Called with the lock held and e->lookup_running
 * set; drops the lock around getaddrinfo. */
static void lookup(struct s3d_resolver *r, struct s3d_resolved_name *e, uint64_t now)
{
    char found[S3D_ADDRS_MAX][S3D_ADDR_TEXT];
    const char *texts[S3D_ADDRS_MAX];
    char name[sizeof(e->name)];
    int n, gai_err = 0, first = e->looked_up_ms == 0;
    size_t i;

    memcpy(name, e->name, sizeof(name));
    pthread_mutex_unlock(&r->lock);
    n = s3d_resolve_name(name, r->port, found, S3D_ADDRS_MAX, &gai_err);
    now = s3d_now_ms();
    pthread_mutex_lock(&r->lock);
    e->lookup_running = 0;
    e->looked_up_ms = now;
    if (n < 0) {
        /* libcurl resolves on its own and reports the failure the usual way. */
        S3D_DEBUG("resolving %s failed (%s); keeping %zu known addresses", name,
                  gai_strerror(gai_err), e->set.n);
        e->expires_ms = now + S3D_ADDRS_RETRY_MS;
        return;
    }
    for (i = 0; i < (size_t)n; i++)
        texts[i] = found[i];
    s3d_addrset_update(&e->set, texts, (size_t)n);
    e->expires_ms = now + S3D_ADDRS_TTL_MS;
    if (first || e->set.n != e->logged_n)
        log_list(e, first);
    e->logged_n = e->set.n;
}

int s3d_resolver_pick(struct s3d_resolver *r, const char *name, size_t name_len,
                      struct s3d_addr_lease *lease)
{
    struct s3d_resolved_name *e;
    uint64_t now;
    int k, idx;

    lease->held = 0;
    if (!r->enabled)
        return 0;
    now = s3d_now_ms();
    pthread_mutex_lock(&r->lock);
    k = name_entry(r, name, name_len);
    if (k < 0) {
        pthread_mutex_unlock(&r->lock);
        return 0;
    }
    e = &r->names[k];
    if (now >= e->expires_ms && !e->lookup_running) {
        e->lookup_running = 1;
        lookup(r, e, now);
        now = s3d_now_ms();
    }
    idx = s3d_addrset_pick(&e->set, now);
    if (idx >= 0) {
        lease->held = 1;
        lease->name_idx = k;
        memcpy(lease->text, e->set.a[idx].text, sizeof(lease->text));
    }
    pthread_mutex_unlock(&r->lock);
    return lease->held;
}

void s3d_resolver_done(struct s3d_resolver *r, struct s3d_addr_lease *lease, int conn_failed,
                       int responded)
{
    struct s3d_resolved_name *e;
    uint64_t now;
    if (!lease->held)
        return;
    lease->held = 0;
    now = s3d_now_ms();
    pthread_mutex_lock(&r->lock);
    e = &r->names[lease->name_idx];
    if (s3d_addrset_done(&e->set, lease->text, conn_failed, responded, now, S3D_ADDRS_DOWN_MS,
                         S3D_ADDRS_DOWN_MAX_MS)) {
        S3D_INFO("endpoint %s: could not connect to %s; skipping it for a while", e->name,
                 lease->text);
        /* The name may have moved: look it up again soon. */
        if (e->expires_ms > e->looked_up_ms + S3D_ADDRS_MIN_LOOKUP)
            e->expires_ms = e->looked_up_ms + S3D_ADDRS_MIN_LOOKUP;
    }
    pthread_mutex_unlock(&r->lock);
}
