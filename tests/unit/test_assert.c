/* test_assert.c - S3D_ASSERT (common/compiler.h): in a build with S3D_ASSERTS (debug,
 * sanitizer, fuzz) a false condition aborts with a message naming it; elsewhere the condition
 * is not even evaluated. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/compiler.h"
#include "testutil.h"

int main(void)
{
    int evaluated = 0;
    S3D_ASSERT(++evaluated > 0);
#ifdef S3D_ASSERTS
    pid_t pid;
    int status = 0;
    CHECK(evaluated == 1);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        S3D_ASSERT(evaluated == 42);
        _exit(0); /* not reached */
    }
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
    printf("asserts on: a false one aborted the child\n");
#else
    CHECK(evaluated == 0);
    printf("asserts compiled out: the condition was not evaluated\n");
#endif
    printf("ok\n");
    return 0;
}
