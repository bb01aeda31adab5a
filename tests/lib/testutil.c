/* testutil.c - helpers shared by the C tests. */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

void t_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    exit(1);
}

void t_skip(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "SKIP: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    exit(T_EXIT_SKIP);
}

void t_fill_random(void *buf, size_t len, uint64_t seed)
{
    /* xorshift64*: fast, deterministic, good enough to catch misplaced bytes. */
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    unsigned char *p = buf;
    size_t i = 0;
    while (i + 8 <= len) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        uint64_t v = x * 0x2545F4914F6CDD1Dull;
        memcpy(p + i, &v, 8);
        i += 8;
    }
    while (i < len) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        p[i++] = (unsigned char)(x * 0x2545F4914F6CDD1Dull >> 56);
    }
}

const char *t_tmpdir(void)
{
    static char dir[512];
    if (dir[0] == '\0') {
        const char *base = getenv("TMPDIR");
        /* A fresh directory each run: a name from the PID alone met a directory left by an
         * earlier process with the same PID, and tests that mkdir inside it failed. */
        snprintf(dir, sizeof(dir), "%s/s3d-test-%ld-XXXXXX", base && *base ? base : "/tmp",
                 (long)getpid());
        if (mkdtemp(dir) == NULL) {
            fprintf(stderr, "t_tmpdir: mkdtemp %s: %s\n", dir, strerror(errno));
            exit(1);
        }
    }
    return dir;
}

size_t t_dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    size_t n = 0;
    CHECK(d != NULL);
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

int t_child_read_status(const volatile void *addr)
{
    int st = 0;
    pid_t pid = fork();
    if (pid < 0)
        t_fail(__FILE__, __LINE__, "fork: %s", strerror(errno));
    if (pid == 0) {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof(dfl));
        dfl.sa_handler = SIG_DFL;
        sigaction(SIGSEGV, &dfl, NULL);
        unsigned char x = *(const volatile unsigned char *)addr;
        _exit(x == 0 ? 0 : 1);
    }
    if (waitpid(pid, &st, 0) != pid)
        t_fail(__FILE__, __LINE__, "waitpid: %s", strerror(errno));
    return st;
}
