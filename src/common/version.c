/* version.c - run-time version. */
#include "s3direct/version.h"

unsigned s3d_version(void)
{
    return S3D_VERSION_HEX;
}

const char *s3d_version_string(void)
{
    return S3D_VERSION_STRING;
}
