/* fuzz_ini.c - fuzz target for the shared-file INI parser and the endpoint URL parser
 * (src/s3/ini.c, endpoint.c).
 *
 * Whatever the bytes, s3d_ini_parse must return 0 or S3D_ECONFIG, and every pair it reports
 * must be trimmed, with a lower-case key, and lie within the caps. The input, as a string,
 * also goes through s3d_config_parse_endpoint: an accepted URL must have a host and a port,
 * and its normalized form must parse again to the same fields. And through
 * s3d_config_parse_size (the s3 section's sizes): an accepted size is digits, optional blanks
 * and a known suffix, and equals the digits times the suffix's power of 1024.
 * Built by tests/fuzz/fuzz.cmake as a plain test (with fuzz_main.c) and, with -DS3D_FUZZ=ON
 * under clang, as a libFuzzer binary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fuzz.h"

#include "s3/config.h"
#include "s3/ini.h"
#include "s3direct/errors.h"

const char *const s3d_fuzz_tokens[] = {
    "[",         "]",   "=", "\n",    "  ",   "s3 =", "#",   ";", "\"",
    "[profile ", "://", ":", "[::1]", "\xff", "MB",   "kib", "16"};
const size_t s3d_fuzz_n_tokens = sizeof(s3d_fuzz_tokens) / sizeof(s3d_fuzz_tokens[0]);

void s3d_fuzz_fixup(uint8_t *buf, size_t len, uint64_t r)
{
    (void)buf;
    (void)len;
    (void)r;
}

static int blank(char c)
{
    return c == ' ' || c == '\t';
}

static int check_pair(void *user, const char *section, const char *sub, const char *key,
                      const char *value, int line)
{
    size_t kl = strlen(key), vl = strlen(value), i;
    (void)user;
    REQUIRE(line >= 1);
    REQUIRE(section[0] != '\0' && strlen(section) <= S3D_CONFIG_MAX_LINE);
    REQUIRE(sub == NULL || sub[0] != '\0');
    REQUIRE(kl > 0 && kl <= S3D_CONFIG_MAX_LINE && vl <= S3D_CONFIG_MAX_LINE);
    REQUIRE(!blank(key[0]) && !blank(key[kl - 1]));
    REQUIRE(vl == 0 || (!blank(value[0]) && !blank(value[vl - 1]) && value[vl - 1] != '\r'));
    for (i = 0; i < kl; i++)
        REQUIRE(!(key[i] >= 'A' && key[i] <= 'Z') && key[i] != '=' && key[i] != ':');
    return 0;
}

/* The size parser against a second reading: strtoull for the digits, a table for the suffix. */
static void check_size(const char *str)
{
    static const char *const sfx[] = {"", "kb", "mb", "gb", "tb", "", "kib", "mib", "gib", "tib"};
    uint64_t got = 0;
    unsigned long long digits;
    char *end;
    size_t i;
    if (s3d_config_parse_size(str, &got) != 0)
        return;
    REQUIRE(str[0] >= '0' && str[0] <= '9');
    digits = strtoull(str, &end, 10);
    while (*end == ' ' || *end == '\t')
        end++;
    for (i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++) {
        if (strcasecmp(end, sfx[i]) == 0 && (end[0] != '\0' || i == 0))
            break;
    }
    REQUIRE(i < sizeof(sfx) / sizeof(sfx[0]));
    REQUIRE(got == (uint64_t)digits << (10 * (i % 5)));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct s3d_config a, b;
    char *str;
    int rc = s3d_ini_parse((const char *)data, size, "fuzz", check_pair, NULL);
    REQUIRE(rc == 0 || rc == S3D_ECONFIG);

    if (size > 4096)
        return 0;
    str = malloc(size + 1);
    if (str == NULL)
        abort();
    memcpy(str, data, size);
    str[size] = '\0';
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    rc = s3d_config_parse_endpoint(str, &a);
    REQUIRE(rc == 0 || rc == S3D_ECONFIG);
    if (rc == 0) {
        REQUIRE(a.host[0] != '\0' && a.port > 0 && a.endpoint_url != NULL);
        REQUIRE(s3d_config_parse_endpoint(a.endpoint_url, &b) == 0);
        REQUIRE(strcmp(a.endpoint_url, b.endpoint_url) == 0 && strcmp(a.host, b.host) == 0 &&
                strcmp(a.base_path, b.base_path) == 0 && a.port == b.port && a.https == b.https &&
                a.host_is_ip == b.host_is_ip);
    }
    s3d_config_free(&a);
    s3d_config_free(&b);
    check_size(str);
    free(str);
    return 0;
}
