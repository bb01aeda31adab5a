/* creds.h - the AWS credential chain, with a cache that refreshes temporary credentials
 * (internal). docs/internals/credentials.md describes the order and the refresh rule.
 *
 * Order, as botocore's default resolver:
 *   options (access_key_id + secret in struct s3d_client_options)
 *   env            AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN (skipped when
 *                  options.profile names a profile, as botocore skips it for an explicit one)
 *   assume-role    the profile has role_arn (and no web_identity_token_file): STS AssumeRole
 *                  with the credentials of source_profile or credential_source
 *   assume-role-with-web-identity   AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN, or the
 *                  profile's web_identity_token_file + role_arn
 *   sso            the profile has sso_session or sso_start_url (+ account id, role name)
 *   shared-credentials-file         keys in the credentials file
 *   custom-process the profile's credential_process
 *   config-file    keys in the config file
 *   container-role AWS_CONTAINER_CREDENTIALS_RELATIVE_URI / _FULL_URI
 *   iam-role       EC2 instance metadata (IMDSv2), unless AWS_EC2_METADATA_DISABLED=true
 * The names are botocore's Credentials.method values.
 *
 * The chain runs once, at the first request that needs credentials (so a client that never
 * signs, or an anonymous one, never touches the network for them). The provider it finds is
 * kept: temporary credentials are refreshed from that same provider.
 *
 * Threads: every function is thread-safe. Credentials are handed out as reference-counted
 * immutable snapshots, so a signer keeps using the snapshot it took while another thread
 * installs fresh ones. */
#ifndef S3D_S3_CREDS_H
#define S3D_S3_CREDS_H

#include <stdatomic.h>
#include <stdint.h>

#include "s3/config.h"
#include "s3/http.h"
#include "s3direct/client.h"
#include "common/compiler.h"

/* One set of credentials. Immutable once published; freed when the last reference goes. */
struct s3d_creds {
    atomic_int refs;
    char *access_key_id;
    char *secret_access_key;
    char *session_token;  /* NULL when none */
    int64_t expiration;   /* seconds since the epoch; 0 = does not expire */
    const char *provider; /* static: "env", "assume-role", ... (never the secret) */
};

struct s3d_credcache;

/* Creates the cache for a resolved configuration. cfg and http must outlive the cache (the
 * s3ctx owns all three). opts_profile: options.profile as the caller gave it (NULL or "" =
 * none), which decides whether env keys are skipped. Returns 0 or S3D_ENOMEM. */
S3D_NODISCARD int s3d_credcache_new(const struct s3d_config *cfg, const struct s3d_http_conf *http,
                                    const char *opts_profile, struct s3d_credcache **out);
void s3d_credcache_free(struct s3d_credcache *c); /* NULL ok */

/* Current credentials, a new reference in *out (release with s3d_creds_release). Runs the
 * chain the first time; refreshes when the credentials are due (s3d_creds_refresh_due): one
 * thread fetches while the others wait for it. A failed refresh keeps the old credentials
 * while they are still valid (logged), and fails once they have expired. Returns 0,
 * S3D_ENOCREDS (no provider has credentials; the message lists where it looked), S3D_ECREDS
 * (a provider is configured but failed: the message says which and why) or S3D_ENOMEM. */
S3D_NODISCARD int s3d_credcache_get(struct s3d_credcache *c, struct s3d_creds **out);

/* The server said the credentials in seen have expired (ExpiredToken): the next get fetches
 * new ones, unless another thread already replaced seen. Returns 1 when a retry with fresh
 * credentials makes sense (the provider refreshes), 0 for static credentials. */
int s3d_credcache_expired(struct s3d_credcache *c, const struct s3d_creds *seen);

/* The provider name and access key id of the first credentials resolved, for display (""
 * before the chain ran or when it found nothing). Valid until the cache is freed. Resolves
 * the chain if it has not run yet (errors are then left for the first request). */
void s3d_credcache_describe(struct s3d_credcache *c, const char **provider,
                            const char **access_key_id);

void s3d_creds_release(struct s3d_creds *cr); /* NULL ok */

/* Refresh rule, pure: 1 when credentials obtained at obtained (seconds since the epoch) that
 * expire at expiration should be refreshed at now. Due when now >= expiration - margin,
 * margin = min(S3D_CREDS_REFRESH_MARGIN_S, half the lifetime). expiration 0 never is. */
#define S3D_CREDS_REFRESH_MARGIN_S 300
int s3d_creds_refresh_due(int64_t now, int64_t obtained, int64_t expiration);

#endif
