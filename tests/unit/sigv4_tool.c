/* sigv4_tool.c - signs request descriptions read from stdin, for the botocore cross-check
 * (tests/py/test_sigv4_botocore.py). Not a test by itself.
 *
 * Input: one JSON object per line:
 *   {"mode": "header" | "presign", "method": "GET", "endpoint": "http://host:port",
 *    "addressing": "auto" | "path" | "virtual", "bucket": "b" (or null), "key": "k",
 *    "query": [["name", "value"], ...], "headers": [["Name", "value"], ...],
 *    "body": "text" (hashed with SHA-256) | "payload": "UNSIGNED-PAYLOAD",
 *    "access_key": "...", "secret_key": "...", "token": "..." | null,
 *    "region": "us-east-1", "time": 1369353600, "expires": 3600,
 *    "service": "sts" (optional; default "s3")}
 * Output: one JSON object per line: {"url", "host", "canonical_request", "string_to_sign",
 *   "signature", "headers": {"Name": "value", ...}} or {"error": "message"}. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dynbuf.h"
#include "s3/config.h"
#include "s3/sigv4.h"
#include "s3direct/errors.h"

static const char *str(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* [["n","v"], ...] into a freshly allocated s3d_kv array (strings stay owned by j). */
static struct s3d_kv *pairs(json_t *arr, size_t *n)
{
    struct s3d_kv *kv;
    size_t i;
    *n = json_is_array(arr) ? json_array_size(arr) : 0;
    kv = calloc(*n ? *n : 1, sizeof(*kv));
    for (i = 0; i < *n; i++) {
        json_t *p = json_array_get(arr, i);
        kv[i].name = json_string_value(json_array_get(p, 0));
        kv[i].value = json_string_value(json_array_get(p, 1));
    }
    return kv;
}

static json_t *sign_one(json_t *in)
{
    struct s3d_config cfg;
    struct s3d_dynbuf url, host, path, query, hdrs;
    struct s3d_sigv4_trace tr;
    struct s3d_sigv4_request req;
    struct s3d_sigv4_creds creds;
    struct s3d_kv *q = NULL, *h = NULL;
    size_t nq, nh;
    char payload[65];
    const char *mode = str(in, "mode"), *addr = str(in, "addressing"), *body = str(in, "body");
    json_t *out = NULL;
    int rc;

    memset(&cfg, 0, sizeof(cfg));
    memset(&req, 0, sizeof(req));
    s3d_dynbuf_init(&url, 1 << 20);
    s3d_dynbuf_init(&host, 1 << 20);
    s3d_dynbuf_init(&path, 1 << 20);
    s3d_dynbuf_init(&query, 1 << 20);
    s3d_dynbuf_init(&hdrs, 1 << 20);
    s3d_dynbuf_init(&tr.canonical_request, 1 << 20);
    s3d_dynbuf_init(&tr.string_to_sign, 1 << 20);
    if ((rc = s3d_config_parse_endpoint(str(in, "endpoint"), &cfg)) < 0)
        goto fail;
    cfg.addressing = addr && strcmp(addr, "path") == 0      ? S3D_ADDRESSING_PATH
                     : addr && strcmp(addr, "virtual") == 0 ? S3D_ADDRESSING_VIRTUAL
                                                            : S3D_ADDRESSING_AUTO;
    q = pairs(json_object_get(in, "query"), &nq);
    h = pairs(json_object_get(in, "headers"), &nh);
    if ((rc = s3d_sigv4_canonical_query(q, nq, &query)) < 0)
        goto fail;
    if ((rc = s3d_config_build_url(&cfg, str(in, "bucket"), str(in, "key"),
                                   mode && strcmp(mode, "presign") == 0 ? NULL : query.data, &url,
                                   &host, &path)) < 0)
        goto fail;
    if (body != NULL) {
        if ((rc = s3d_sha256_hex(body, strlen(body), payload)) < 0)
            goto fail;
    } else {
        snprintf(payload, sizeof(payload), "%s",
                 str(in, "payload") ? str(in, "payload") : S3D_UNSIGNED_PAYLOAD);
    }
    req.method = str(in, "method");
    req.host = host.data;
    req.canonical_path = path.data;
    req.query = q;
    req.n_query = nq;
    req.headers = h;
    req.n_headers = nh;
    req.payload_hash = payload;
    req.region = str(in, "region");
    req.now = (time_t)json_integer_value(json_object_get(in, "time"));
    req.service = str(in, "service"); /* NULL = "s3" */
    creds.access_key_id = str(in, "access_key");
    creds.secret_access_key = str(in, "secret_key");
    creds.session_token = str(in, "token");
    out = json_object();
    if (mode && strcmp(mode, "presign") == 0) {
        struct s3d_dynbuf purl;
        s3d_dynbuf_init(&purl, 1 << 20);
        rc = s3d_sigv4_presign(&req, &creds,
                               (uint32_t)json_integer_value(json_object_get(in, "expires")),
                               url.data, &purl, &tr);
        if (rc == 0)
            json_object_set_new(out, "url", json_string(purl.data));
        s3d_dynbuf_free(&purl);
        if (rc < 0)
            goto fail;
    } else {
        json_t *hj = json_object();
        char *line, *save = NULL;
        if ((rc = s3d_sigv4_sign(&req, &creds, &hdrs, &tr)) < 0) {
            json_decref(hj);
            goto fail;
        }
        for (line = strtok_r(hdrs.data, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
            char *colon = strchr(line, ':');
            *colon = '\0';
            json_object_set_new(hj, line, json_string(colon + 2));
        }
        json_object_set_new(out, "headers", hj);
        json_object_set_new(out, "url", json_string(url.data));
    }
    json_object_set_new(out, "host", json_string(host.data));
    json_object_set_new(out, "canonical_request", json_string(tr.canonical_request.data));
    json_object_set_new(out, "string_to_sign", json_string(tr.string_to_sign.data));
    json_object_set_new(out, "signature", json_string(tr.signature));
    goto done;
fail:
    json_decref(out);
    out = json_pack("{s:s, s:s}", "error", s3d_last_error_message(), "code", s3d_err_name(rc));
done:
    free(q);
    free(h);
    s3d_config_free(&cfg);
    s3d_dynbuf_free(&url);
    s3d_dynbuf_free(&host);
    s3d_dynbuf_free(&path);
    s3d_dynbuf_free(&query);
    s3d_dynbuf_free(&hdrs);
    s3d_dynbuf_free(&tr.canonical_request);
    s3d_dynbuf_free(&tr.string_to_sign);
    return out;
}

int main(void)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, stdin)) > 0) {
        json_error_t err;
        json_t *in = json_loadb(line, (size_t)n, 0, &err), *out;
        char *text;
        if (in == NULL) {
            fprintf(stderr, "bad input line: %s\n", err.text);
            return 2;
        }
        out = sign_one(in);
        text = json_dumps(out, JSON_COMPACT | JSON_ENSURE_ASCII);
        puts(text);
        free(text);
        json_decref(out);
        json_decref(in);
    }
    free(line);
    return 0;
}
