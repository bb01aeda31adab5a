/* config.h - resolved client configuration: options, environment, shared files, defaults
 * (internal).
 *
 * s3d_config_resolve() applies the precedence written in include/s3direct/client.h, as the AWS
 * CLI does. It reads the environment and at most two small files once; the result is a plain
 * value the client keeps for its lifetime and reads from any thread without locking.
 *
 * Files: the shared credentials file has sections "[NAME]"; the config file has "[profile
 * NAME]" (and "[default]" / "[profile default]" for the default profile). A key whose value is
 * empty and whose following lines are indented opens a nested sub-section ("s3 =" then
 * "  addressing_style = path"). Comments are whole lines starting with '#' or ';' (after
 * blanks); as in the AWS CLI (Python configparser) there are no inline comments: "k = v # x"
 * has the value "v # x". Keys are case-insensitive (lower-cased), section names are not.
 * "key: value" is accepted like "key = value". The last of repeated keys wins. Multi-line
 * values (an indented line after a key that has a value) are refused. Lines are capped at
 * S3D_CONFIG_MAX_LINE bytes and files at S3D_CONFIG_MAX_FILE (ini.h). A missing file is not an
 * error; an unreadable, oversized or malformed one is S3D_ECONFIG with "FILE:LINE: what" in the
 * message.
 *
 * Endpoint precedence (as botocore, plus the nested profile form): options.endpoint_url,
 * AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the "[services NAME]" section's "s3 =" endpoint_url
 * for the profile's "services = NAME", the profile's nested "s3 =" endpoint_url, the profile's
 * endpoint_url, then https://s3.REGION.amazonaws.com. Environment variables set to "" count as
 * unset. "~/" at the start of AWS_CONFIG_FILE / AWS_SHARED_CREDENTIALS_FILE is expanded from
 * HOME; with HOME unset and no explicit path, the files are skipped.
 *
 * HTTP layer note: key paths may hold "." and ".." segments (they are unreserved, so not
 * encoded); set CURLOPT_PATH_AS_IS so curl sends the path exactly as signed. */
#ifndef S3D_S3_CONFIG_H
#define S3D_S3_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "common/dynbuf.h"
#include "s3direct/client.h"
#include "common/compiler.h"
#include "s3/limits.h"

/* Every char * is owned (malloc'ed) by the struct and freed by s3d_config_free(); the const
 * char * fields point to static strings. */
struct s3d_config {
    /* Endpoint, parsed. */
    char *endpoint_url;      /* normalized: "SCHEME://HOST[:PORT]BASEPATH", no trailing '/'
                                (for display and s3d_client_get_config) */
    int https;               /* 1 for https, 0 for http */
    char *host;              /* host name or IP as it goes in a URL: IPv6 keeps its
                                brackets ("[::1]"); lower-cased */
    uint16_t port;           /* explicit port, else 443 / 80 */
    int port_explicit;       /* 1 when the URL named a port */
    int host_is_ip;          /* 1 for an IPv4 or bracketed IPv6 literal */
    char *base_path;         /* "" or "/some/path" (no trailing '/'), kept as written; it is
                                part of every request path */
    int endpoint_is_default; /* 1: no endpoint was configured, it is https://s3.REGION.
                                amazonaws.com (a bucket in another region is then reached
                                at that region's endpoint, s3ctx.h) */
    /* Region and credentials. */
    char *region;                  /* never NULL */
    char *profile;                 /* the profile used ("default" unless chosen) */
    char *access_key_id;           /* NULL when no credentials were found (or anonymous) */
    char *secret_access_key;       /* NULL exactly when access_key_id is NULL */
    char *session_token;           /* NULL when none */
    const char *credential_source; /* "options", "env", "shared-credentials-file",
                                      "config-file", "none", "anonymous" */
    /* Transport. */
    char *ca_bundle;     /* PEM file; NULL = libcurl's default */
    int no_verify_ssl;   /* options only */
    int anonymous;       /* 1: do not sign; credentials are then NULL */
    int addressing;      /* as configured: S3D_ADDRESSING_AUTO, _PATH or _VIRTUAL */
    int payload_signing; /* SIGNED, UNSIGNED, or AUTO over plain http (s3ctx.h body_crc) */
    /* The profile's s3 transfer settings as the AWS CLI names them (0 = not set):
     * max_concurrent_requests, multipart_chunksize, multipart_threshold. */
    uint32_t max_concurrency;
    uint64_t part_size;
    uint64_t multipart_threshold;
    /* target_throughput of the options, else the profile's s3 target_bandwidth, in bytes
     * per second (0 = none). */
    uint64_t target_throughput;
    /* Where ca_bundle came from (s3/cabundle.h): "configured", "SSL_CERT_FILE",
     * "default_ca_bundle", "system" or "curl-default" (ca_bundle NULL). */
    const char *ca_bundle_source;
    /* Retries (0 / NULL = not set): AWS_MAX_ATTEMPTS or the profile's max_attempts, else 3
     * when retry_mode (AWS_RETRY_MODE or the profile's) is standard or adaptive. */
    uint32_t max_attempts;
    const char *retry_mode; /* "legacy", "standard", "adaptive" (static) or NULL */
};

/* The most tries per request a setting may ask for. */
#define S3D_MAX_ATTEMPTS_LIMIT 100u

/* The most parallel requests a client or one transfer may ask for (more is S3D_EINVAL, or
 * S3D_ECONFIG from the profile); s3d_fd_clamp may lower what is asked further. */
#define S3D_MAX_CONCURRENCY 1024u
/* S3D_MAX_PART_SIZE, S3's largest part, is also the largest part size the options or the
 * profile may ask for: s3/limits.h. */

/* A size as the AWS CLI's s3 section writes it: decimal bytes, optionally followed by KB, MB,
 * GB, TB, KiB, MiB, GiB or TiB in any case (all powers of 1024). Returns 0 or -1. */
S3D_NODISCARD int s3d_config_parse_size(const char *v, uint64_t *out);
/* A rate as the AWS CLI's s3 target_bandwidth writes it (bytes per second, or a number with
 * B/s, KB/s, MB/s, GB/s, TB/s or b/s, Kb/s, Mb/s, Gb/s, Tb/s; powers of 1024). 0 or -1. */
S3D_NODISCARD int s3d_config_parse_rate(const char *v, uint64_t *out);

/* Resolves the configuration for opts (NULL = all defaults) into *out (which it overwrites;
 * on failure *out is left zeroed, so s3d_config_free on it is safe). Reads getenv() and the
 * shared files. Returns 0, S3D_ECONFIG (malformed file, malformed endpoint URL, unknown
 * addressing_style, a malformed s3 transfer setting, an explicitly chosen profile found in
 * neither file, an access key id given in options without its secret or the reverse), or
 * S3D_ENOMEM. Missing credentials are not an error: access_key_id is NULL and
 * credential_source "none". Not thread-safe against concurrent setenv(). */
S3D_NODISCARD int s3d_config_resolve(const struct s3d_client_options *opts, struct s3d_config *out);

/* Frees the strings and zeroes *cfg. NULL ok. */
void s3d_config_free(struct s3d_config *cfg);

/* ---- endpoint and request URLs (endpoint.c) ------------------------------------------- */

#define S3D_HTTPS_PORT 443
#define S3D_HTTP_PORT  80

/* The port a URL of this scheme means when it names none. */
static inline uint16_t s3d_config_default_port(int https)
{
    return https ? S3D_HTTPS_PORT : S3D_HTTP_PORT;
}

/* Parses an endpoint URL "http[s]://host[:port][/base/path][/]" into the endpoint fields of
 * *out (endpoint_url, https, host, port, port_explicit, host_is_ip, base_path; any previous
 * values of those fields are freed). Scheme is case-insensitive; IPv6 hosts in brackets; user
 * info, query and fragment are refused. Returns 0, S3D_ECONFIG naming the URL and the problem,
 * or S3D_ENOMEM. Used by s3d_config_resolve; exposed for tests. */
S3D_NODISCARD int s3d_config_parse_endpoint(const char *url, struct s3d_config *out);

/* 1 when a request for bucket should use virtual-hosted addressing (bucket.host), 0 for
 * path-style (host/bucket). Always 0 for an IP-address endpoint. VIRTUAL: 1 when the bucket is
 * DNS-compatible, else 0 (a bucket with '_' or capitals cannot be a host name); PATH: 0; AUTO: 1
 * when the endpoint host ends in "amazonaws.com", the bucket is DNS-compatible and, over https,
 * contains no '.' (a dotted bucket would not match the wildcard certificate); 0 for custom
 * endpoints and IP addresses. bucket NULL gives 0. */
int s3d_config_virtual_host(const struct s3d_config *cfg, const char *bucket);

/* The addressing mode shown by s3d_client_get_config: S3D_ADDRESSING_VIRTUAL when requests to
 * an ordinary bucket would be virtual-hosted, S3D_ADDRESSING_PATH otherwise. */
int s3d_config_addressing_resolved(const struct s3d_config *cfg);

/* Builds, in one call, what an HTTP request to bucket/key needs:
 *   url            "SCHEME://HOST[:PORT]PATH[?QUERY]"  (for CURLOPT_URL)
 *   host_header    "HOST[:PORT]"  the Host header value, port only when explicit and not the
 *                  scheme's default (what curl sends, and what is signed)
 *   canonical_path the SigV4 canonical URI: base path, then "/bucket" (path-style), then
 *                  "/" + key percent-encoded with '/' kept; "/" when that would be empty.
 * bucket NULL = service-level request (ListBuckets): path "/" (plus base path).
 * key NULL or "" = bucket-level request: path-style "/bucket", virtual-hosted "/".
 * query is appended after '?' as given: it must already be canonical (see
 * s3d_sigv4_canonical_query); NULL or "" = none. The three dynbufs are reset first, not freed;
 * any of host_header and canonical_path may be NULL when not wanted. Returns 0, S3D_ETOOBIG /
 * S3D_ENOMEM from a dynbuf (recorded). */
S3D_NODISCARD int s3d_config_build_url(const struct s3d_config *cfg, const char *bucket,
                                       const char *key, const char *query, struct s3d_dynbuf *url,
                                       struct s3d_dynbuf *host_header,
                                       struct s3d_dynbuf *canonical_path);

#endif
