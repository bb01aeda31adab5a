/* test_env.c - the one reader of the environment (common/env.h): empty counts as unset, and
 * s3d_env_int takes only a whole decimal number inside its bounds (anything else is -1 and
 * leaves the output alone, so a malformed value never becomes 0 or a truncated prefix). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/env.h"
#include "testutil.h"

static int env_int(const char *value, int64_t lo, int64_t hi, int64_t *out)
{
    CHECK(setenv("S3D_TEST_ENV_INT", value, 1) == 0);
    return s3d_env_int("S3D_TEST_ENV_INT", lo, hi, out);
}

int main(void)
{
    int64_t v = 77;
    CHECK(unsetenv("S3D_TEST_ENV") == 0);
    CHECK(s3d_env("S3D_TEST_ENV") == NULL);
    CHECK(setenv("S3D_TEST_ENV", "", 1) == 0);
    CHECK(s3d_env("S3D_TEST_ENV") == NULL); /* empty: unset */
    CHECK(setenv("S3D_TEST_ENV", "x y", 1) == 0);
    CHECK(s3d_env("S3D_TEST_ENV") != NULL && s3d_env("S3D_TEST_ENV")[2] == 'y');

    CHECK(unsetenv("S3D_TEST_ENV_INT") == 0);
    CHECK(s3d_env_int("S3D_TEST_ENV_INT", 0, 10, &v) == 0 && v == 77);
    CHECK(env_int("", 0, 10, &v) == 0 && v == 77);
    CHECK(env_int("7", 0, 10, &v) == 1 && v == 7);
    CHECK(env_int("0", 0, 10, &v) == 1 && v == 0);
    CHECK(env_int("-3", -5, 10, &v) == 1 && v == -3);
    v = 77;
    CHECK(env_int("11", 0, 10, &v) == -1 && v == 77);     /* above hi */
    CHECK(env_int("-1", 0, 10, &v) == -1 && v == 77);     /* below lo */
    CHECK(env_int("12abc", 0, 100, &v) == -1 && v == 77); /* atol() would have said 12 */
    CHECK(env_int("abc", 0, 100, &v) == -1 && v == 77);
    CHECK(env_int(" ", 0, 100, &v) == -1 && v == 77);
    CHECK(env_int("99999999999999999999", 0, INT64_MAX, &v) == -1 && v == 77); /* overflow */
    CHECK(env_int("9223372036854775807", 0, INT64_MAX, &v) == 1 && v == INT64_MAX);
    printf("ok\n");
    return 0;
}
