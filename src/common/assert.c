/* assert.c - what a failed S3D_ASSERT does (compiler.h): the condition and its place on
 * stderr, then abort(), so a debugger or the sanitizer's report shows the stack. */
#include <stdio.h>
#include <stdlib.h>

#include "common/compiler.h"

void s3d_assert_fail(const char *cond, const char *file, int line, const char *func)
{
    fprintf(stderr, "s3direct: %s:%d: %s: assertion failed: %s\n", file, line, func, cond);
    fflush(stderr);
    abort();
}
