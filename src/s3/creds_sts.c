/* creds_sts.c - temporary credentials from AWS STS (AssumeRole, AssumeRoleWithWebIdentity)
 * and from the AWS SSO portal (GetRoleCredentials with the token `aws sso login` cached).
 *
 * STS is the query protocol: a form-encoded POST to "/" of the STS endpoint, an XML answer.
 * AssumeRole is signed with SigV4 for service "sts" with the source credentials;
 * AssumeRoleWithWebIdentity is sent unsigned (the token is the proof), as botocore does.
 * Endpoint: AWS_ENDPOINT_URL_STS, AWS_ENDPOINT_URL, else by AWS_STS_REGIONAL_ENDPOINTS (or
 * the profile's sts_regional_endpoints): "regional" (the default, as botocore >= 1.3x) uses
 * https://sts.REGION.amazonaws.com, "legacy" the global https://sts.amazonaws.com for the
 * regions that had it.
 *
 * SSO: the token file is ~/.aws/sso/cache/SHA1(key).json, key the sso_session name (or the
 * legacy sso_start_url); its accessToken is sent to
 * https://portal.sso.REGION.amazonaws.com/federation/credentials (or AWS_ENDPOINT_URL_SSO /
 * AWS_ENDPOINT_URL). An expired token is an error that tells the user to run `aws sso login`:
 * s3direct does not run the browser flow nor refresh the token through SSO-OIDC. */
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <jansson.h>

#include "common/env.h"
#include "common/error.h"
#include "s3/config.h"
#include "s3/creds_int.h"
#include "s3/sigv4.h"
#include "s3/timefmt.h"
#include "s3/uri.h"

/* The longest SSO access token taken from the cache file (they are about 1-2 KB), and the
 * header line that carries it. */
#define SSO_TOKEN_MAX  8192
#define SSO_HEADER_MAX (SSO_TOKEN_MAX + 64)

int s3d_sts_endpoint(const char *region, const char *regional, struct s3d_dynbuf *out,
                     const char **sign_region)
{
    static const char *const legacy_regions[] = {
        "ap-northeast-1", "ap-south-1",   "ap-southeast-1", "ap-southeast-2",
        "aws-global",     "ca-central-1", "eu-central-1",   "eu-north-1",
        "eu-west-1",      "eu-west-2",    "eu-west-3",      "sa-east-1",
        "us-east-1",      "us-east-2",    "us-west-1",      "us-west-2"};
    const char *e = s3d_env("AWS_ENDPOINT_URL_STS");
    const char *mode = s3d_env("AWS_STS_REGIONAL_ENDPOINTS");
    *sign_region = region;
    s3d_dynbuf_reset(out);
    if (e == NULL)
        e = s3d_env("AWS_ENDPOINT_URL");
    if (e != NULL)
        return s3d_dynbuf_appendf(out, "%s", e);
    if (mode == NULL)
        mode = regional;
    if (mode != NULL && strcmp(mode, "legacy") == 0) {
        for (size_t i = 0; i < sizeof(legacy_regions) / sizeof(legacy_regions[0]); i++)
            if (strcmp(region, legacy_regions[i]) == 0) {
                *sign_region = "us-east-1";
                return s3d_dynbuf_appendf(out, "https://sts.amazonaws.com");
            }
    } else if (mode != NULL && strcmp(mode, "regional") != 0) {
        return s3d_fail(S3D_ECONFIG, "sts_regional_endpoints \"%.32s\" is not regional or legacy",
                        mode);
    }
    return s3d_dynbuf_appendf(out, "https://sts.%s.amazonaws.com", region);
}

/* The text of the first <tag>...</tag> in xml, with the five XML entities decoded, into a
 * malloc'ed string; NULL when absent. */
static char *xml_text(const char *xml, const char *tag)
{
    char open[64], close[64];
    const char *b, *e;
    char *s, *o;
    snprintf(open, sizeof(open), "<%s>", tag);
    snprintf(close, sizeof(close), "</%s>", tag);
    if ((b = strstr(xml, open)) == NULL)
        return NULL;
    b += strlen(open);
    if ((e = strstr(b, close)) == NULL)
        return NULL;
    if ((s = malloc((size_t)(e - b) + 1)) == NULL)
        return NULL;
    for (o = s; b < e; b++) {
        static const struct {
            const char *ent;
            char ch;
        } ents[] = {
            {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
        size_t i;
        if (*b == '&')
            for (i = 0; i < 5; i++)
                if (strncmp(b, ents[i].ent, strlen(ents[i].ent)) == 0) {
                    *o++ = ents[i].ch;
                    b += strlen(ents[i].ent) - 1;
                    goto next;
                }
        *o++ = *b;
    next:;
    }
    *o = '\0';
    return s;
}

static int form_add(struct s3d_dynbuf *b, const char *name, const char *value)
{
    int rc;
    if (value == NULL)
        return 0;
    if ((rc = s3d_dynbuf_appendf(b, "%s%s=", b->len ? "&" : "", name)) < 0 ||
        (rc = s3d_uri_encode(b, value, strlen(value), 1)) < 0)
        return s3d_fail(rc, "STS request over its size limit");
    return 0;
}

/* Sends an STS action (body already form-encoded) and parses the credentials. creds NULL =
 * unsigned. */
static int sts_call(const struct s3d_http_conf *http, const struct s3d_sts_args *a,
                    const char *action, const char *provider, const struct s3d_creds *creds,
                    const struct s3d_dynbuf *form, struct s3d_creds **out)
{
    struct s3d_config ep;
    struct s3d_dynbuf url, host, sig, resp;
    struct curl_slist *hdrs = NULL, *n;
    const char *sign_region;
    char what[256], hash[65], *id = NULL, *secret = NULL, *token = NULL, *exp = NULL;
    int64_t expiration = 0;
    long status = 0;
    int rc;

    memset(&ep, 0, sizeof(ep));
    s3d_dynbuf_init(&url, 4096);
    s3d_dynbuf_init(&host, 1024);
    s3d_dynbuf_init(&sig, 8192);
    s3d_dynbuf_init(&resp, S3D_CREDS_MAX_BODY);
    snprintf(what, sizeof(what), "%s (STS %s, profile \"%s\")", provider, action,
             a->profile ? a->profile : "default");
    if ((rc = s3d_sts_endpoint(a->region, a->regional, &url, &sign_region)) < 0 ||
        (rc = s3d_config_parse_endpoint(url.data, &ep)) < 0)
        goto out;
    s3d_dynbuf_reset(&url);
    if (s3d_dynbuf_appendf(&url, "%s/", ep.endpoint_url) < 0 ||
        s3d_dynbuf_appendf(&host, "%s", ep.host) < 0 ||
        (ep.port_explicit && ep.port != s3d_config_default_port(ep.https) &&
         s3d_dynbuf_appendf(&host, ":%u", (unsigned)ep.port) < 0)) {
        rc = s3d_fail(S3D_ETOOBIG, "%s: endpoint URL too long", what);
        goto out;
    }
    if (creds != NULL) {
        struct s3d_sigv4_request sr;
        struct s3d_sigv4_creds sc = {creds->access_key_id, creds->secret_access_key,
                                     creds->session_token};
        struct s3d_kv ct = {"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"};
        char path[1024];
        char *line, *nl;
        snprintf(path, sizeof(path), "%s/", ep.base_path);
        if ((rc = s3d_sha256_hex(form->data, form->len, hash)) < 0)
            goto out;
        memset(&sr, 0, sizeof(sr));
        sr.method = "POST";
        sr.host = host.data;
        sr.canonical_path = path;
        sr.headers = &ct;
        sr.n_headers = 1;
        sr.payload_hash = hash;
        sr.region = sign_region;
        sr.now = time(NULL);
        sr.service = "sts";
        if ((rc = s3d_sigv4_sign(&sr, &sc, &sig, NULL)) < 0)
            goto out;
        for (line = sig.data; line != NULL && *line != '\0'; line = nl + 1) {
            nl = strchr(line, '\n');
            if (nl != NULL)
                *nl = '\0';
            n = curl_slist_append(hdrs, line);
            if (n == NULL) {
                rc = s3d_fail(S3D_ENOMEM, "out of memory");
                goto out;
            }
            hdrs = n;
            if (nl == NULL)
                break;
        }
    }
    if ((n = curl_slist_append(hdrs, "Content-Type: application/x-www-form-urlencoded; "
                                     "charset=utf-8")) == NULL ||
        (hdrs = n, n = curl_slist_append(hdrs, "Expect:")) == NULL) {
        rc = s3d_fail(S3D_ENOMEM, "out of memory");
        goto out;
    }
    hdrs = n;
    if ((rc = s3d_creds_http(http, S3D_CREDS_HTTP_MS, what, "POST", url.data, hdrs, form->data,
                             &status, &resp)) < 0)
        goto out;
    if (status != 200) {
        char *code = resp.len ? xml_text(resp.data, "Code") : NULL;
        char *msg = resp.len ? xml_text(resp.data, "Message") : NULL;
        rc = s3d_fail(S3D_ECREDS, "%s: %s answered HTTP %ld %s: %s", what, ep.endpoint_url, status,
                      code ? code : "", msg ? msg : "");
        free(code);
        free(msg);
        goto out;
    }
    id = xml_text(resp.data, "AccessKeyId");
    secret = xml_text(resp.data, "SecretAccessKey");
    token = xml_text(resp.data, "SessionToken");
    exp = xml_text(resp.data, "Expiration");
    if (id == NULL || secret == NULL || token == NULL || exp == NULL) {
        rc = s3d_fail(S3D_ECREDS, "%s: the response has no complete <Credentials>", what);
        goto out;
    }
    if (s3d_time_parse_iso8601(exp, strlen(exp), &expiration) < 0) {
        rc = s3d_fail(S3D_ECREDS, "%s: <Expiration> \"%.40s\" is not a time", what, exp);
        goto out;
    }
    rc = s3d_creds_make(id, secret, token, expiration, provider, out);
out:
    if (secret != NULL)
        memset(secret, 0, strlen(secret));
    free(id);
    free(secret);
    free(token);
    free(exp);
    curl_slist_free_all(hdrs);
    s3d_config_free(&ep);
    s3d_dynbuf_free(&url);
    s3d_dynbuf_free(&host);
    s3d_dynbuf_free(&sig);
    s3d_dynbuf_free(&resp);
    return rc;
}

static int common_form(const struct s3d_sts_args *a, const char *action, struct s3d_dynbuf *f,
                       char session[64])
{
    int rc;
    if (a->session_name != NULL)
        snprintf(session, 64, "%.63s", a->session_name);
    else
        snprintf(session, 64, "s3direct-session-%lld", (long long)time(NULL));
    if ((rc = form_add(f, "Action", action)) < 0 ||
        (rc = form_add(f, "Version", "2011-06-15")) < 0 ||
        (rc = form_add(f, "RoleArn", a->role_arn)) < 0 ||
        (rc = form_add(f, "RoleSessionName", session)) < 0)
        return rc;
    if (a->duration_s > 0) {
        char d[16];
        snprintf(d, sizeof(d), "%d", a->duration_s);
        if ((rc = form_add(f, "DurationSeconds", d)) < 0)
            return rc;
    }
    return 0;
}

int s3d_creds_assume_role(const struct s3d_http_conf *http, const struct s3d_sts_args *a,
                          const struct s3d_creds *source, struct s3d_creds **out)
{
    struct s3d_dynbuf f;
    char session[64];
    int rc;
    s3d_dynbuf_init(&f, S3D_CREDS_MAX_BODY);
    if ((rc = common_form(a, "AssumeRole", &f, session)) == 0 &&
        (rc = form_add(&f, "ExternalId", a->external_id)) == 0)
        rc = sts_call(http, a, "AssumeRole", "assume-role", source, &f, out);
    s3d_dynbuf_free(&f);
    return rc;
}

int s3d_creds_web_identity(const struct s3d_http_conf *http, const struct s3d_sts_args *a,
                           const char *token_file, struct s3d_creds **out)
{
    struct s3d_dynbuf f;
    char session[64], *token = NULL;
    int rc;
    s3d_dynbuf_init(&f, 2 * S3D_CREDS_MAX_TOKEN);
    if ((rc = s3d_creds_read_file(token_file, "assume-role-with-web-identity: token file",
                                  &token)) < 0)
        goto out;
    if (token[0] == '\0') {
        rc = s3d_fail(S3D_ECREDS, "assume-role-with-web-identity: token file %s is empty",
                      token_file);
        goto out;
    }
    if ((rc = common_form(a, "AssumeRoleWithWebIdentity", &f, session)) == 0 &&
        (rc = form_add(&f, "WebIdentityToken", token)) == 0)
        rc = sts_call(http, a, "AssumeRoleWithWebIdentity", "assume-role-with-web-identity", NULL,
                      &f, out);
out:
    if (token != NULL)
        memset(token, 0, strlen(token));
    free(token);
    s3d_dynbuf_free(&f);
    return rc;
}

/* ---- SSO ---------------------------------------------------------------------------------- */

static int sha1_hex(const char *s, char out[41])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (EVP_Digest(s, strlen(s), md, &n, EVP_sha1(), NULL) != 1 || n != 20)
        return s3d_fail(S3D_ENOMEM, "SHA-1 failed");
    for (unsigned i = 0; i < 20; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
    return 0;
}

int s3d_creds_sso(const struct s3d_http_conf *http, const struct s3d_sso_args *a,
                  struct s3d_creds **out)
{
    const char *home = s3d_env("HOME"), *e;
    char hex[41], path[4096], *text = NULL;
    struct s3d_dynbuf url, resp;
    struct curl_slist *hdrs = NULL;
    json_t *root = NULL, *rc_obj;
    json_error_t jerr;
    const char *tok, *exp_s;
    int64_t exp = 0;
    long status = 0;
    int rc;
    *out = NULL;
    s3d_dynbuf_init(&url, 4096);
    s3d_dynbuf_init(&resp, S3D_CREDS_MAX_BODY);
    if (home == NULL) {
        rc = s3d_fail(S3D_ECREDS, "sso: HOME is not set, so ~/.aws/sso/cache cannot be found");
        goto out;
    }
    if ((rc = sha1_hex(a->cache_key, hex)) < 0)
        goto out;
    snprintf(path, sizeof(path), "%s/.aws/sso/cache/%s.json", home, hex);
    if (s3d_creds_read_file(path, "sso: cached token", &text) < 0) {
        rc = s3d_fail(S3D_ECREDS,
                      "sso (profile \"%s\"): no cached SSO token (%s); run `aws sso login "
                      "--profile %s` first",
                      a->profile, path, a->profile);
        goto out;
    }
    root = json_loads(text, 0, &jerr);
    tok = root ? json_string_value(json_object_get(root, "accessToken")) : NULL;
    exp_s = root ? json_string_value(json_object_get(root, "expiresAt")) : NULL;
    if (tok == NULL || exp_s == NULL || tok[0] == '\0') {
        rc = s3d_fail(S3D_ECREDS, "sso: %s has no accessToken / expiresAt", path);
        goto out;
    }
    if (s3d_time_parse_iso8601(exp_s, strlen(exp_s), &exp) < 0) {
        rc = s3d_fail(S3D_ECREDS, "sso: %s: expiresAt \"%.40s\" is not a time", path, exp_s);
        goto out;
    }
    if (exp <= (int64_t)time(NULL)) {
        rc = s3d_fail(S3D_ECREDS,
                      "sso (profile \"%s\"): the SSO token expired at %s; run `aws sso login "
                      "--profile %s` to renew it",
                      a->profile, exp_s, a->profile);
        goto out;
    }
    if (strpbrk(tok, "\r\n") != NULL || strlen(tok) > SSO_TOKEN_MAX) {
        rc = s3d_fail(S3D_ECREDS, "sso: malformed accessToken in %s", path);
        goto out;
    }
    e = s3d_env("AWS_ENDPOINT_URL_SSO");
    if (e == NULL)
        e = s3d_env("AWS_ENDPOINT_URL");
    if (e != NULL)
        rc = s3d_dynbuf_appendf(&url, "%s", e);
    else
        rc = s3d_dynbuf_appendf(&url, "https://portal.sso.%s.amazonaws.com", a->sso_region);
    while (rc == 0 && url.len > 0 && url.data[url.len - 1] == '/')
        url.data[--url.len] = '\0';
    if (rc == 0)
        rc = s3d_dynbuf_appendf(&url, "/federation/credentials?account_id=");
    if (rc == 0)
        rc = s3d_uri_encode(&url, a->account_id, strlen(a->account_id), 1);
    if (rc == 0)
        rc = s3d_dynbuf_appendf(&url, "&role_name=");
    if (rc == 0)
        rc = s3d_uri_encode(&url, a->role_name, strlen(a->role_name), 1);
    if (rc < 0) {
        rc = s3d_fail(rc, "sso: request URL too long");
        goto out;
    }
    {
        char line[SSO_HEADER_MAX];
        snprintf(line, sizeof(line), "x-amz-sso_bearer_token: %s", tok);
        if ((hdrs = curl_slist_append(NULL, line)) == NULL) {
            rc = s3d_fail(S3D_ENOMEM, "out of memory");
            goto out;
        }
        memset(line, 0, sizeof(line));
    }
    if ((rc = s3d_creds_http(http, S3D_CREDS_HTTP_MS, "sso (GetRoleCredentials)", "GET", url.data,
                             hdrs, NULL, &status, &resp)) < 0)
        goto out;
    if (status != 200) {
        rc = s3d_fail(
            S3D_ECREDS, "sso (profile \"%s\"): GetRoleCredentials answered HTTP %ld: %.200s%s",
            a->profile, status, resp.len ? resp.data : "",
            status == 401 || status == 403 ? "; run `aws sso login` to renew the token" : "");
        goto out;
    }
    json_decref(root);
    root = json_loadb(resp.data, resp.len, 0, &jerr);
    rc_obj = root ? json_object_get(root, "roleCredentials") : NULL;
    if (!json_is_object(rc_obj) || !json_is_string(json_object_get(rc_obj, "accessKeyId")) ||
        !json_is_string(json_object_get(rc_obj, "secretAccessKey")) ||
        !json_is_integer(json_object_get(rc_obj, "expiration"))) {
        rc = s3d_fail(S3D_ECREDS, "sso: GetRoleCredentials response has no roleCredentials");
        goto out;
    }
    rc = s3d_creds_make(json_string_value(json_object_get(rc_obj, "accessKeyId")),
                        json_string_value(json_object_get(rc_obj, "secretAccessKey")),
                        json_string_value(json_object_get(rc_obj, "sessionToken")),
                        (int64_t)(json_integer_value(json_object_get(rc_obj, "expiration")) / 1000),
                        "sso", out);
out:
    json_decref(root);
    if (text != NULL)
        memset(text, 0, strlen(text));
    free(text);
    curl_slist_free_all(hdrs);
    s3d_dynbuf_free(&url);
    s3d_dynbuf_free(&resp);
    return rc;
}
