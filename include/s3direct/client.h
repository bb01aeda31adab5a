/* s3direct/client.h - the client: configuration, connections, staging pool, GPU context.
 *
 * A client is created once per process (per fork: see s3d_client_new) and shared by threads.
 * It owns the libcurl connection cache (keep-alive connections are reused by every transfer),
 * the resolved configuration and credentials, and the staging pool of pinned buffers that
 * bounds host memory for tensor loads and saves.
 *
 * Configuration is resolved as the AWS CLI does; for each setting the first source that has it
 * wins:
 *   1. the field in struct s3d_client_options (NULL / 0 = not set);
 *   2. environment: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN (used as a
 *      set, only when both key id and secret are present), AWS_REGION then
 *      AWS_DEFAULT_REGION, AWS_ENDPOINT_URL_S3 then AWS_ENDPOINT_URL, AWS_CA_BUNDLE (then,
 *      after the profile's ca_bundle: SSL_CERT_FILE, default_ca_bundle, the system's CA
 *      files);
 *   3. the profile (options.profile, else AWS_PROFILE, else "default") in the shared
 *      credentials file (AWS_SHARED_CREDENTIALS_FILE, default ~/.aws/credentials) and then
 *      the config file (AWS_CONFIG_FILE, default ~/.aws/config, section "[profile NAME]" or
 *      "[default]"): aws_access_key_id, aws_secret_access_key, aws_session_token, region,
 *      endpoint_url, ca_bundle, and "s3 =" sub-section keys endpoint_url / addressing_style
 *      / payload_signing_enabled. Credentials count only as a key id + secret pair, from
 *      one source. Endpoint order in the file: the "[services NAME]" section named by the
 *      profile's "services = NAME" (its "s3 =" endpoint_url, as botocore), then the
 *      profile's own "s3 =" endpoint_url (an s3direct extension), then its endpoint_url;
 *   4. defaults: region "us-east-1", endpoint https://s3.REGION.amazonaws.com.
 * Environment variables set to "" count as unset. A profile chosen explicitly (options or
 * AWS_PROFILE) that neither file has is an error (S3D_ECONFIG), as in the AWS CLI.
 * Credentials go further than the keys above, in botocore's order: env, assume-role
 * (role_arn), web identity, SSO, the credentials file's keys, credential_process, the config
 * file's keys, the container endpoint, EC2 instance metadata; temporary ones are refreshed
 * before they expire. A profile named in options (not AWS_PROFILE) skips the env keys. The
 * chain runs at the first signed request (README "Credentials", docs/internals/credentials.md).
 * Without credentials from any source, requests fail with S3D_ENOCREDS unless anonymous; a
 * configured provider that fails gives S3D_ECREDS. */
#ifndef S3DIRECT_CLIENT_H
#define S3DIRECT_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include "s3direct/version.h"

#ifdef __cplusplus
extern "C" {
#endif

struct s3d_client;

enum s3d_addressing {
    S3D_ADDRESSING_AUTO = 0,    /* virtual-hosted for AWS endpoints, path-style otherwise */
    S3D_ADDRESSING_PATH = 1,    /* http://endpoint/bucket/key */
    S3D_ADDRESSING_VIRTUAL = 2, /* http://bucket.endpoint/key */
};

enum s3d_payload_signing {
    /* UNSIGNED-PAYLOAD over https; over plain http the SHA-256 of every body until the server
     * has shown, once per client, that it refuses a body whose x-amz-checksum-crc32c is wrong
     * (one 1-byte probe part, replaced by the upload's own part 1, at the first multipart upload);
     * then the bodies that carry a CRC-32C (every part and PutObject of a transfer) go as
     * UNSIGNED-PAYLOAD. */
    S3D_PAYLOAD_AUTO = 0,
    S3D_PAYLOAD_SIGNED = 1,   /* always hash the body into the signature */
    S3D_PAYLOAD_UNSIGNED = 2, /* always UNSIGNED-PAYLOAD */
};

/* Zero or NULL in any field means "default"; the default is given beside each field.
 * Strings are NUL-terminated and copied by s3d_client_new. New fields are added at the end:
 * set struct_size to sizeof(struct s3d_client_options) so older libraries can tell. */
struct s3d_client_options {
    uint32_t struct_size;      /* sizeof(struct s3d_client_options); 0 = current size */
    const char *endpoint_url;  /* "http://127.0.0.1:8000"; default: resolved as above */
    const char *region;        /* default: resolved as above, else "us-east-1" */
    const char *profile;       /* default: AWS_PROFILE, else "default" */
    const char *access_key_id; /* with secret_access_key: overrides every other source */
    const char *secret_access_key;
    const char *session_token;
    const char *ca_bundle;   /* PEM file of trusted CAs; default: AWS_CA_BUNDLE, system */
    int32_t addressing;      /* enum s3d_addressing; default AUTO */
    int32_t anonymous;       /* 1: send requests unsigned (public buckets) */
    int32_t no_verify_ssl;   /* 1: do not verify TLS certificates (explicit only) */
    int32_t payload_signing; /* enum s3d_payload_signing; default AUTO */
    /* The next three default to the profile's "s3 =" settings as the AWS CLI names them
     * (max_concurrent_requests, multipart_chunksize, multipart_threshold), else: */
    uint32_t max_concurrency;     /* the most requests in flight, over every transfer of the
                                     client: the cap of the adaptive concurrency (the
                                     client finds the level that fills the path itself,
                                     README "Concurrency"); default 512 */
    uint64_t part_size;           /* bytes per ranged GET / uploaded part; default 8 MiB */
    uint64_t multipart_threshold; /* uploads of at least this size use multipart; default
                                     part_size */
    uint64_t staging_bytes;       /* total size of the staging pool; default 256 MiB */
    uint32_t max_attempts;        /* tries per request, first included; default 5. Above 1,
                                     a refused connection is retried past it for 5 s */
    uint32_t deadline_ms;         /* per request, retries included; default 0 = none */
    uint32_t connect_timeout_ms;  /* default 10000 */
    uint32_t low_speed_time_s;    /* a transfer below low_speed_limit for this long is a
                                     stall, retried; default 30 */
    uint32_t low_speed_limit;     /* bytes per second; default 1024 */
    int32_t device;               /* -1 = never use a GPU; default 0 = find one at run time.
                                     The staging pool is pinned in the primary context of
                                     the device of the first device tensor a transfer
                                     moves (so a rank on GPU 3 makes no context on GPU 0);
                                     other values are reserved: s3d_client_new fails
                                     with S3D_EINVAL */
    /* PEM file of trusted CAs used when none is configured (ca_bundle, AWS_CA_BUNDLE, the
     * profile's ca_bundle, SSL_CERT_FILE), if it exists; tried before the system's files
     * (the Debian, Red Hat, SUSE and Alpine paths), then libcurl's compiled-in path. The
     * Python layer passes certifi's, as botocore uses certifi. Default: none. */
    const char *default_ca_bundle;
    /* The fewest requests the adaptive concurrency keeps in flight; equal to max_concurrency
     * it fixes the level (no adaptation). Default 1. */
    uint32_t min_concurrency;
    /* The throughput the network allows, as the AWS CLI's s3 target_bandwidth writes it:
     * "10Gb/s", "1.5GB/s", or bytes per second ("1250000000"); prefixes are powers of 1024,
     * b is bits, B bytes. The level starts at target / 50 MB/s (aws-c-s3's 0.4 Gbit/s per
     * connection) and stops growing once the target is reached. Default: the profile's s3
     * target_bandwidth, else none (the level starts at 24 and follows the path). */
    const char *target_throughput;
};

/* Creates a client. opts may be NULL (all defaults). On success stores it in *out and returns
 * 0; on failure returns a negative S3D_E* code and *out is NULL. Configuration problems
 * (unreadable config file, malformed endpoint URL) fail here; missing credentials do not
 * (anonymous use stays possible) and fail the first signed request with S3D_ENOCREDS.
 * A client must not be used in a child process after fork(): create a new one there. */
S3D_API int s3d_client_new(const struct s3d_client_options *opts, struct s3d_client **out);
/* Releases the client. Readers (s3d_reader_open) and upload streams (s3d_upload_stream_new)
 * made from it hold a reference and stay usable: the connections, the pool and the GPU
 * context are freed when the last of them is closed, else here. It waits for nothing:
 * it must not be called while another thread is inside a call that takes this client (the
 * caller waits for those calls first, as the Python layer's Client.close() does; debug
 * builds abort when a request is still in flight), and the client must not be used after
 * it. NULL ok; in a forked child it frees nothing (the parent's connections). */
S3D_API void s3d_client_free(struct s3d_client *client);

/* What the client resolved, for display ("s3direct --debug", tests). NUL-terminated strings
 * owned by the client. Thread-safe. An output struct that can grow (version.h): set
 * struct_size, or zero the struct; only its first struct_size bytes are written. */
struct s3d_client_config {
    uint32_t struct_size; /* sizeof(struct s3d_client_config); 0 = the first version's size */
    const char *endpoint_url;
    const char *region;
    const char *access_key_id;     /* "" when none; the first key the chain found */
    const char *credential_source; /* "options", "env", "assume-role",
                                      "assume-role-with-web-identity", "sso",
                                      "shared-credentials-file", "custom-process",
                                      "config-file", "container-role", "iam-role", "none",
                                      "anonymous"; resolving it may run the chain */
    int32_t addressing;            /* the resolved mode: PATH or VIRTUAL */
    uint32_t max_concurrency;
    uint64_t part_size;
    uint64_t multipart_threshold;
    uint64_t staging_bytes;
    int32_t gpu_available; /* 1 when libcuda loaded and a device was found, 0 when not (or
                              the option device is -1), -1 when not known yet: the client
                              opens the driver (cuInit) on its first GPU transfer, never here,
                              so that a process may fork after this call */
    uint32_t min_concurrency;
    uint32_t concurrency;       /* the level the adaptive concurrency is at now */
    uint64_t target_throughput; /* bytes per second; 0 = none */
};
S3D_API int s3d_client_get_config(const struct s3d_client *client, struct s3d_client_config *out);

/* A cancellation token. s3d_cancel_request may be called from any thread; every transfer
 * given the token stops at its next check and returns S3D_ECANCELED. */
struct s3d_cancel;
S3D_API int s3d_cancel_new(struct s3d_cancel **out);
S3D_API void s3d_cancel_request(struct s3d_cancel *cancel);
S3D_API int s3d_cancel_requested(const struct s3d_cancel *cancel);
/* Frees the token; no transfer given it may still be running. NULL ok. */
S3D_API void s3d_cancel_free(struct s3d_cancel *cancel);
/* Makes every request of the client, whatever call runs it (a transfer, a HEAD, a listing,
 * their retries and backoffs), also stop once cancel is requested: the call returns
 * S3D_ECANCELED within about 100 ms, a multipart upload it started is aborted, a download's
 * temporary file removed. For a process-wide stop: s3d_cancel_request only stores an atomic
 * flag, so a signal handler may call it (the s3direct CLI does this for SIGINT, SIGTERM and
 * SIGHUP). NULL removes it. The token must stay allocated while the client may use it.
 * Returns 0, or S3D_EINVAL for a client that is NULL or from another process. */
S3D_API int s3d_client_set_cancel(struct s3d_client *client, struct s3d_cancel *cancel);

/* Progress: called with bytes done so far and the total (0 when unknown). Runs on the thread
 * that called the transfer function, between I/O steps, at most every few milliseconds.
 * Return non-zero to cancel the transfer (it then returns S3D_ECANCELED). */
typedef int (*s3d_progress_fn)(void *user, uint64_t done, uint64_t total);

#ifdef __cplusplus
}
#endif
#endif
