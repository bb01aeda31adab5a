/* main.c - the s3direct command-line tool (placeholder until the commands land). */
#include <stdio.h>
#include <string.h>

#include "s3direct/s3direct.h"

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--version") == 0) {
        printf("s3direct %s\n", s3d_version_string());
        return 0;
    }
    fprintf(stderr, "s3direct: no commands are implemented yet\n");
    return 2;
}
