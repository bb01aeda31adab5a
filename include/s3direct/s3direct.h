/* s3direct/s3direct.h - umbrella header: everything public. */
#ifndef S3DIRECT_S3DIRECT_H
#define S3DIRECT_S3DIRECT_H

#include "s3direct/version.h"
#include "s3direct/errors.h"
#include "s3direct/log.h"
#include "s3direct/client.h"
#include "s3direct/object.h"
#include "s3direct/transfer.h"
#include "s3direct/checkpoint.h"

#endif
