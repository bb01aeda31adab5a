/* testutil.h - tiny assertion helpers for the C tests.
 *
 * A failed CHECK prints file:line and the expression and exits 1 at once: each test is its own
 * process, so the runner sees one clear failure. skip() exits 77. */
#ifndef S3D_TESTUTIL_H
#define S3D_TESTUTIL_H

#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s3direct/s3direct.h"

#define T_EXIT_SKIP 77

void t_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
void t_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            t_fail(__FILE__, __LINE__, "CHECK(%s) failed", #cond);                                 \
    } while (0)

/* An s3direct call that must succeed; prints the library's message otherwise. */
#define CHECK_OK(expr)                                                                             \
    do {                                                                                           \
        int t_rc_ = (expr);                                                                        \
        if (t_rc_ != 0)                                                                            \
            t_fail(__FILE__, __LINE__, "%s returned %s: %s", #expr, s3d_err_name(t_rc_),           \
                   s3d_last_error_message());                                                      \
    } while (0)

/* An s3direct call that must fail with exactly code. */
#define CHECK_ERR(expr, code)                                                                      \
    do {                                                                                           \
        int t_rc_ = (expr);                                                                        \
        if (t_rc_ != (code))                                                                       \
            t_fail(__FILE__, __LINE__, "%s returned %s, expected %s (%s)", #expr,                  \
                   s3d_err_name(t_rc_), s3d_err_name(code), s3d_last_error_message());             \
    } while (0)

#define CHECK_EQ_U64(a, b)                                                                         \
    do {                                                                                           \
        uint64_t t_a_ = (uint64_t)(a), t_b_ = (uint64_t)(b);                                       \
        if (t_a_ != t_b_)                                                                          \
            t_fail(__FILE__, __LINE__, "%s == %s failed: %" PRIu64 " != %" PRIu64, #a, #b, t_a_,   \
                   t_b_);                                                                          \
    } while (0)

#define CHECK_STREQ(a, b)                                                                          \
    do {                                                                                           \
        const char *t_a_ = (a), *t_b_ = (b);                                                       \
        if (t_a_ == NULL || t_b_ == NULL || strcmp(t_a_, t_b_) != 0)                               \
            t_fail(__FILE__, __LINE__, "%s == %s failed: \"%s\" != \"%s\"", #a, #b,                \
                   t_a_ ? t_a_ : "(null)", t_b_ ? t_b_ : "(null)");                                \
    } while (0)

/* The message of the last error must contain needle. */
#define CHECK_MSG_HAS(needle)                                                                      \
    do {                                                                                           \
        const char *t_m_ = s3d_last_error_message();                                               \
        if (strstr(t_m_, (needle)) == NULL)                                                        \
            t_fail(__FILE__, __LINE__, "error message \"%s\" lacks \"%s\"", t_m_, (needle));       \
    } while (0)

/* Test S3 server: AWS_ENDPOINT_URL (+ keys) from the environment, as scripts/start-rgw.sh
 * exports them. Skips the test (exit 77) when no endpoint is configured. */
const char *t_s3_endpoint(void);
/* A client for the test server with default options (skips without a server). */
struct s3d_client *t_s3_client(void);
/* A client for URL (a proxy in front of the server, say) with this part size and concurrency. */
struct s3d_client *t_s3_client_at(const char *url, uint64_t part_size, uint32_t conc);
/* Creates a fresh bucket named "PREFIX-<pid>-<counter>" and stores its name in out. */
void t_s3_bucket(struct s3d_client *c, const char *prefix, char *out, size_t cap);
/* Fills buf with deterministic pseudo-random bytes from seed. */
void t_fill_random(void *buf, size_t len, uint64_t seed);
/* A scratch directory created for this process under $TMPDIR; removed by nothing. */
const char *t_tmpdir(void);
/* How many entries dir holds other than "." and ".." (fails the test if it cannot be read). */
size_t t_dir_entries(const char *dir);

/* Reads one byte at addr in a forked child with SIGSEGV at its default action (ASan's handler,
 * in make sanitize, would report and exit 1 instead); returns the child's wait status, e.g.
 * WIFSIGNALED && WTERMSIG == SIGSEGV when the address is not readable in the child. */
int t_child_read_status(const volatile void *addr);

#endif
