/* addrs.h - every address of the endpoint: what its name resolves to, and which address the
 * next request connects to.
 *
 * S3 answers a lookup with several addresses; libcurl, left alone, connects every request to
 * the first one that works, so all connections of a client end up on one front-end host. The
 * resolver looks the name up itself (getaddrinfo, every A or AAAA record of one family), keeps
 * the list for S3D_ADDRS_TTL_MS, and gives each request the address with the fewest requests
 * on it now (round-robin among equals); the request then connects there through
 * CURLOPT_CONNECT_TO, which keeps the name in the URL for the Host header, TLS SNI, the
 * certificate check and SigV4. libcurl reuses a kept-alive connection only for a request
 * with the same connect-to address, so connections spread as the requests do, and stay
 * reused.
 *
 * An address a connection could not be made to is skipped for S3D_ADDRS_DOWN_MS (doubling on
 * each further failure, at most S3D_ADDRS_DOWN_MAX_MS), and the name is looked up again soon;
 * any response from it makes it usable again. When every address is skipped, or the name has
 * one address only, a request gets none and libcurl resolves and connects as it always did.
 *
 * Two layers: struct s3d_addrset is the pure list (time passed in, no lock, table-tested),
 * struct s3d_resolver adds the lookups and a lock and is what the S3 context holds. */
#ifndef S3D_S3_ADDRS_H
#define S3D_S3_ADDRS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "common/compiler.h"

#define S3D_ADDRS_MAX          16     /* addresses kept per name; the rest are ignored */
#define S3D_ADDR_TEXT          48     /* a numeric address, IPv6 in brackets, with the NUL */
#define S3D_ADDRS_TTL_MS       30000u /* a list is looked up again after this */
#define S3D_ADDRS_RETRY_MS     5000u  /* after a lookup that failed (the old list is kept) */
#define S3D_ADDRS_MIN_LOOKUP   1000u  /* at most one lookup a second, failures or not */
#define S3D_ADDRS_DOWN_MS      10000u /* an address that refused a connection is skipped */
#define S3D_ADDRS_DOWN_MAX_MS  300000u
#define S3D_RESOLVER_MAX_NAMES 4 /* host names with their own list (virtual-hosted buckets) */

/* ---- the pure list ------------------------------------------------------------------------ */

struct s3d_addr {
    char text[S3D_ADDR_TEXT]; /* "10.0.0.1" or "[2001:db8::1]", as CURLOPT_CONNECT_TO takes */
    uint32_t in_use;          /* requests given this address and not yet done */
    uint32_t fails;           /* connection failures since the last response from it */
    uint64_t down_until;      /* skipped until this time (ms); 0 = usable */
    uint64_t picks;           /* requests given this address, ever */
};

struct s3d_addrset {
    struct s3d_addr a[S3D_ADDRS_MAX];
    size_t n;
    size_t next; /* where the round-robin among equally used addresses starts */
};

/* Replaces the list with texts[0..n) (duplicates dropped, at most S3D_ADDRS_MAX kept). An
 * address that was in the list before keeps its counts and its skip time, so requests in
 * flight are still counted and a dead address stays skipped across lookups. */
void s3d_addrset_update(struct s3d_addrset *s, const char *const *texts, size_t n);

/* The address for the next request at time now_ms: among those not skipped, the one with
 * the fewest requests on it, the tie going round-robin. Counts the request on it and returns
 * its index, or -1 (nothing counted) when the list has fewer than two addresses or every
 * address is skipped: the request then goes without one. */
int s3d_addrset_pick(struct s3d_addrset *s, uint64_t now_ms);

/* A request given the address `text` is done. conn_failed: no connection could be made to it
 * (refused, unreachable, connect timeout): it is skipped for down_ms << (failures - 1), at
 * most max_down_ms; a failure while it is skipped already (a request that was on its way
 * before) changes nothing more. Else, if responded: the server answered, so it is usable
 * again. Neither (the request was dropped, or failed after connecting): only the count
 * changes. Returns 1 when it was marked skipped now, else 0 (also when text is no longer in
 * the list). */
int s3d_addrset_done(struct s3d_addrset *s, const char *text, int conn_failed, int responded,
                     uint64_t now_ms, uint32_t down_ms, uint32_t max_down_ms);

/* Writes a numeric address (struct sockaddr_in / sockaddr_in6) as s3d_addr.text. Returns 0,
 * or -1 for another family or a failure. */
struct sockaddr;
int s3d_addr_format(const struct sockaddr *sa, char out[S3D_ADDR_TEXT]);

/* ---- the resolver -------------------------------------------------------------------------- */

/* One host name's list. Guarded by s3d_resolver.lock. */
struct s3d_resolved_name {
    char name[256];
    struct s3d_addrset set;
    uint64_t expires_ms; /* look up again from this time on; 0 = never looked up */
    uint64_t looked_up_ms;
    int lookup_running; /* a thread is in getaddrinfo for it (outside the lock) */
    size_t logged_n;    /* the count last logged at info, to log changes only */
};

struct s3d_resolver {
    int enabled; /* read-only after init: 0 for an IP literal endpoint or behind a proxy */
    uint16_t port;
    pthread_mutex_t lock; /* guards names[], n_names; no other lock is taken under it */
    struct s3d_resolved_name names[S3D_RESOLVER_MAX_NAMES];
    size_t n_names;
};

/* What a request was given (held by the op until s3d_resolver_done). */
struct s3d_addr_lease {
    int held;
    int name_idx;
    char text[S3D_ADDR_TEXT];
};

/* enabled = 0 makes every pick return 0 at no cost. */
void s3d_resolver_init(struct s3d_resolver *r, int enabled, uint16_t port);
void s3d_resolver_cleanup(struct s3d_resolver *r);

/* The address for the next request to host `name` (name_len bytes, no port). Looks the name
 * up (on the calling thread, outside the lock; other threads go on with the old list) when
 * its list is due. Returns 1 and fills *lease when the request should connect to lease->text,
 * or 0 when it should go without (see s3d_addrset_pick). Thread-safe. */
int s3d_resolver_pick(struct s3d_resolver *r, const char *name, size_t name_len,
                      struct s3d_addr_lease *lease);

/* Gives a lease back (no-op when not held): see s3d_addrset_done. A connection failure also
 * brings the name's next lookup forward. Thread-safe. */
void s3d_resolver_done(struct s3d_resolver *r, struct s3d_addr_lease *lease, int conn_failed,
                       int responded);

/* The lookup itself: the numeric addresses of name:port, of the family of the first answer
 * (getaddrinfo orders them by preference), at most max. Returns how many (>= 1) or -1 when
 * the lookup failed (the reason in *gai_err). Blocking. */
int s3d_resolve_name(const char *name, uint16_t port, char (*out)[S3D_ADDR_TEXT], size_t max,
                     int *gai_err);

#endif
