/* test_fdio.c - the whole-read and whole-write loops (common/fdio.h): they continue after
 * short transfers (a pipe fed in small pieces) and after EINTR (a signal handler installed
 * without SA_RESTART interrupts a blocked read and a blocked write), reads stop only at end of
 * input and say how far they got, writes fail with -errno (EPIPE, EBADF) and never claim more
 * than they wrote. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/fdio.h"
#include "testutil.h"

#define BIG (3u << 20) /* more than a pipe holds (64 KiB), so writes block and are cut short */

static void on_alarm(int sig)
{
    (void)sig;
}

/* Writes BIG bytes into fd in pieces of 1000, sleeping now and then (short reads). */
static void *slow_writer(void *arg)
{
    int fd = *(int *)arg;
    unsigned char piece[1000];
    for (size_t off = 0; off < BIG; off += sizeof(piece)) {
        size_t n = BIG - off < sizeof(piece) ? BIG - off : sizeof(piece);
        for (size_t i = 0; i < n; i++)
            piece[i] = (unsigned char)((off + i) * 7);
        CHECK(s3d_write_full(fd, piece, n) == 0);
        if (off % (256u << 10) == 0)
            usleep(20000);
    }
    close(fd);
    return NULL;
}

/* Reads fd to its end and checks the pattern of slow_writer / the main thread. */
static void *drain(void *arg)
{
    int fd = *(int *)arg;
    unsigned char *b = malloc(BIG + 10);
    uint64_t got = 0;
    CHECK(b != NULL);
    usleep(100000); /* the writer blocks on a full pipe first */
    CHECK(s3d_read_full(fd, b, BIG + 10, &got) == 0);
    CHECK_EQ_U64(got, BIG);
    for (size_t i = 0; i < BIG; i++)
        CHECK(b[i] == (unsigned char)(i * 7));
    free(b);
    close(fd);
    return NULL;
}

int main(void)
{
    struct sigaction sa = {0};
    struct itimerval tick = {{0, 5000}, {0, 5000}}, stop = {{0, 0}, {0, 0}};
    unsigned char *buf = malloc(BIG + 10);
    char tmpl[] = "/tmp/test_fdio_XXXXXX";
    pthread_t th;
    uint64_t got = 1;
    int p[2], fd;

    CHECK(buf != NULL);
    /* EINTR on every blocking call: a 5 ms timer whose handler does not restart them. */
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGALRM, &sa, NULL) == 0);
    signal(SIGPIPE, SIG_IGN);
    CHECK(setitimer(ITIMER_REAL, &tick, NULL) == 0);

    /* Read: pieces of 1000 bytes with pauses arrive whole; end of input stops it short. */
    CHECK(pipe(p) == 0);
    CHECK(pthread_create(&th, NULL, slow_writer, &p[1]) == 0);
    CHECK(s3d_read_full(p[0], buf, BIG + 10, &got) == 0);
    CHECK_EQ_U64(got, BIG);
    for (size_t i = 0; i < BIG; i++)
        CHECK(buf[i] == (unsigned char)(i * 7));
    CHECK(pthread_join(th, NULL) == 0);
    CHECK(s3d_read_full(p[0], buf, 10, &got) == 0);
    CHECK_EQ_U64(got, 0);
    close(p[0]);

    /* Write: BIG bytes into a pipe that holds 64 KiB, blocked and interrupted on the way. */
    CHECK(pipe(p) == 0);
    CHECK(pthread_create(&th, NULL, drain, &p[0]) == 0);
    for (size_t i = 0; i < BIG; i++)
        buf[i] = (unsigned char)(i * 7);
    CHECK(s3d_write_full(p[1], buf, BIG) == 0);
    close(p[1]);
    CHECK(pthread_join(th, NULL) == 0);
    CHECK(setitimer(ITIMER_REAL, &stop, NULL) == 0);

    /* Failures come back as -errno. */
    CHECK(pipe(p) == 0);
    close(p[0]);
    CHECK(s3d_write_full(p[1], buf, 10) == -EPIPE);
    close(p[1]);
    CHECK(s3d_write_full(-1, buf, 10) == -EBADF);
    CHECK(s3d_read_full(-1, buf, 10, &got) == -EBADF);
    CHECK_EQ_U64(got, 0);

    /* pread / pwrite: at an offset, the file position untouched; a range past the end is
     * short, not an error. */
    fd = mkstemp(tmpl);
    CHECK(fd >= 0);
    unlink(tmpl);
    CHECK(s3d_pwrite_full(fd, buf, BIG, 4096) == 0);
    CHECK(lseek(fd, 0, SEEK_CUR) == 0);
    CHECK(s3d_pread_full(fd, buf + BIG, 10, 4096 + BIG - 4, &got) == 0);
    CHECK_EQ_U64(got, 4);
    CHECK(s3d_pread_full(fd, buf + 5, 100, 4096 + 5 + 1000, &got) == 0);
    CHECK_EQ_U64(got, 100);
    CHECK(buf[5] == (unsigned char)(1005 * 7));
    CHECK(s3d_pread_full(fd, buf, 10, 1u << 30, &got) == 0);
    CHECK_EQ_U64(got, 0);
    CHECK(s3d_write_full(fd, buf, 0) == 0);
    close(fd);
    free(buf);
    printf("ok\n");
    return 0;
}
