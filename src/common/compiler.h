/* compiler.h - small portability macros, and the contracts the compiler and debug builds
 * check. */
#ifndef S3D_COMMON_COMPILER_H
#define S3D_COMMON_COMPILER_H

#define S3D_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define S3D_MIN(a, b)    ((a) < (b) ? (a) : (b))
#define S3D_MAX(a, b)    ((a) > (b) ? (a) : (b))

/* On a function returning an S3D_E* code (or another result that must be looked at): a caller
 * that drops the result gets a warning, an error with -Werror (curl's WARN_UNUSED_RESULT on
 * Curl_dyn_*). A caller with a reason to ignore one says so with s3d_ignore_rc(call) and a
 * comment why: GCC does not take a (void) cast as using the result. */
#if defined(__GNUC__)
#define S3D_NODISCARD __attribute__((warn_unused_result))
#else
#define S3D_NODISCARD
#endif

static inline void s3d_ignore_rc(int rc)
{
    (void)rc;
}

/* S3D_ASSERT(cond): a precondition or invariant (aws-c-s3's AWS_PRECONDITION). Checked in
 * debug and sanitizer builds (S3D_ASSERTS, set by CMake for CMAKE_BUILD_TYPE=Debug,
 * S3D_SANITIZE and S3D_FUZZ): a false one prints the condition and where, then aborts.
 * Compiled out elsewhere (cond is then not evaluated, only type-checked), so it is never the
 * way to handle bad input: input from outside gets an S3D_E* code. */
void s3d_assert_fail(const char *cond, const char *file, int line, const char *func)
    __attribute__((noreturn));
#ifdef S3D_ASSERTS
#define S3D_ASSERT(cond) ((cond) ? (void)0 : s3d_assert_fail(#cond, __FILE__, __LINE__, __func__))
#else
#define S3D_ASSERT(cond) ((void)sizeof((cond) ? 1 : 0))
#endif

#endif
