/* creds_int.h - what the credential providers share inside src/s3 (internal to creds*.c).
 *
 * Each provider fetches one set of credentials: it returns 0 with a new reference in *out, or
 * S3D_ECREDS (configured but failed; recorded with the provider's name and the reason), or
 * S3D_ENOMEM. Providers that may simply be absent (IMDS) say so with S3D_ENOCREDS. */
#ifndef S3D_S3_CREDS_INT_H
#define S3D_S3_CREDS_INT_H

#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "common/dynbuf.h"
#include "s3/creds.h"
#include "s3/http.h"
#include "common/compiler.h"

/* Caps on what a credential endpoint, a token file or a credential_process may send. */
#define S3D_CREDS_MAX_BODY  (64u * 1024u)
#define S3D_CREDS_MAX_TOKEN (64u * 1024u)
#define S3D_CREDS_HTTP_MS   5000L /* STS, SSO, container endpoint: whole request */
#define S3D_CREDS_IMDS_MS   1000L /* IMDS: connect and whole request (one attempt) */
#define S3D_CREDS_PROCESS_MS                                                                       \
    60000 /* credential_process, overridable: S3D_TEST_CREDENTIAL_PROCESS_TIMEOUT_MS */

/* One config-file section's top-level keys: "[profile NAME]" (with the credentials file's
 * "[NAME]" merged over it, as botocore merges them) or "[sso-session NAME]". */
struct s3d_profile {
    int found;
    size_t n, cap;
    struct {
        char *key;
        char *value;
    } * kv;
};

/* kind: "profile" or "sso-session". Reads AWS_CONFIG_FILE / AWS_SHARED_CREDENTIALS_FILE (the
 * credentials file only for "profile"). Returns 0 (found may be 0), S3D_ECONFIG, S3D_ENOMEM. */
S3D_NODISCARD int s3d_profile_load(const char *kind, const char *name, struct s3d_profile *out);
/* The value of key ("" counts as absent), or NULL. */
const char *s3d_profile_get(const struct s3d_profile *p, const char *key);
void s3d_profile_free(struct s3d_profile *p);

/* A new snapshot with one reference. token may be NULL or "" (= none). Returns 0 or
 * S3D_ENOMEM. */
S3D_NODISCARD int s3d_creds_make(const char *id, const char *secret, const char *token,
                                 int64_t expiration, const char *provider, struct s3d_creds **out);

/* Takes the credentials out of a JSON object: id_key / secret_key / token_key / exp_key name
 * its string fields (token and expiration optional: NULL key = not looked for). Expiration is
 * ISO 8601. what names the source in messages. Returns 0, S3D_ECREDS, S3D_ENOMEM. */
S3D_NODISCARD int s3d_creds_from_json(const char *text, size_t len, const char *what,
                                      const char *provider, const char *id_key,
                                      const char *secret_key, const char *token_key,
                                      const char *exp_key, struct s3d_creds **out);

/* One small HTTP request for a provider: the response body (capped at S3D_CREDS_MAX_BODY)
 * into body, the status into *status. timeout_ms bounds connect and the whole request.
 * Network failures are S3D_ECREDS naming what (e.g. "container credentials"). */
S3D_NODISCARD int s3d_creds_http(const struct s3d_http_conf *http, long timeout_ms,
                                 const char *what, const char *method, const char *url,
                                 struct curl_slist *headers, const char *body, long *status,
                                 struct s3d_dynbuf *resp);

/* Reads a small file (a web identity token, a container authorization token, an SSO cache
 * entry) into *out (malloc'ed, NUL-terminated, trailing blanks and newlines dropped). */
S3D_NODISCARD int s3d_creds_read_file(const char *path, const char *what, char **out);

/* ---- providers ---------------------------------------------------------------------------- */

/* credential_process: runs command with /bin/sh -c, stdout parsed as the JSON v1 format,
 * stderr passed through, killed after the timeout. */
S3D_NODISCARD int s3d_creds_process(const char *command, const char *profile,
                                    struct s3d_creds **out);

/* Container credentials; 1 in *configured when the environment names an endpoint. */
S3D_NODISCARD int s3d_creds_container(const struct s3d_http_conf *http, struct s3d_creds **out);
int s3d_creds_container_configured(void);

/* EC2 instance metadata, IMDSv2. S3D_ENOCREDS when disabled or unreachable (not an error). */
S3D_NODISCARD int s3d_creds_imds(const struct s3d_http_conf *http, struct s3d_creds **out);

/* STS. region: the client's region (regional endpoint). */
struct s3d_sts_args {
    const char *region;
    const char *regional; /* "regional" (default) or "legacy"; NULL = environment/default */
    const char *role_arn;
    const char *session_name; /* NULL = "s3direct-session-<time>" */
    const char *external_id;  /* NULL = none */
    int duration_s;           /* 0 = STS default */
    const char *profile;      /* for messages */
};
S3D_NODISCARD int s3d_creds_assume_role(const struct s3d_http_conf *http,
                                        const struct s3d_sts_args *a,
                                        const struct s3d_creds *source, struct s3d_creds **out);
S3D_NODISCARD int s3d_creds_web_identity(const struct s3d_http_conf *http,
                                         const struct s3d_sts_args *a, const char *token_file,
                                         struct s3d_creds **out);

/* SSO: the token cached by `aws sso login` and GetRoleCredentials. cache_key is the
 * sso_session name (or the legacy sso_start_url). */
struct s3d_sso_args {
    const char *cache_key;
    const char *sso_region;
    const char *account_id;
    const char *role_name;
    const char *profile;
};
S3D_NODISCARD int s3d_creds_sso(const struct s3d_http_conf *http, const struct s3d_sso_args *a,
                                struct s3d_creds **out);

/* STS endpoint URL for region (into out): AWS_ENDPOINT_URL_STS, AWS_ENDPOINT_URL, the global
 * endpoint for "legacy" in a legacy region, else https://sts.REGION.amazonaws.com. Also the
 * region to sign with. Exposed for tests. */
S3D_NODISCARD int s3d_sts_endpoint(const char *region, const char *regional, struct s3d_dynbuf *out,
                                   const char **sign_region);

#endif
