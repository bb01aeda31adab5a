/* env.h - the one reader of the process environment (issue 38: one name per knob).
 *
 * Every variable the library reads goes through these two calls (tests/py/test_rules.py
 * keeps getenv() out of the rest of src/), and each is listed in
 * docs/internals/environment.md. Not thread-safe against a concurrent setenv(), as getenv()
 * is not; the library reads the environment when a client is made, when the credential chain
 * runs and once per process for the log level, never per request. */
#ifndef S3D_COMMON_ENV_H
#define S3D_COMMON_ENV_H

#include <stdint.h>

/* The value of the variable name, or NULL when it is unset or empty (an empty AWS_* or S3D_*
 * variable counts as unset, as in the AWS CLI). */
const char *s3d_env(const char *name);

/* The variable name as a decimal integer in [lo, hi]: 1 with *out set; 0 when it is unset or
 * empty (*out untouched); -1 when it is set to anything else (*out untouched): the caller
 * decides whether that falls back to its default or fails. */
int s3d_env_int(const char *name, int64_t lo, int64_t hi, int64_t *out);

/* Test hooks: the S3D_TEST_* variables (docs/internals/environment.md), read as s3d_env and
 * s3d_env_int in a build with the CMake option S3D_TEST_HOOKS (on wherever the tests are
 * built, S3D_TESTS); elsewhere (the wheel) always unset, and their names are not even in the
 * library (tests/wheel/check-file.sh looks). */
#ifdef S3D_TEST_HOOKS
#define S3D_TEST_HOOK(name)                  s3d_env(name)
#define S3D_TEST_HOOK_INT(name, lo, hi, out) s3d_env_int((name), (lo), (hi), (out))
#else
#define S3D_TEST_HOOK(name)                  ((const char *)0)
#define S3D_TEST_HOOK_INT(name, lo, hi, out) ((void)(out), 0)
#endif

#endif
