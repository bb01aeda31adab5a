/* timefmt.h - the two time formats S3 sends (internal). Pure functions, thread-safe.
 *
 *   ISO-8601 (XML LastModified):   "2026-12-02T16:27:57.000Z", also without the fraction
 *                                  ("2026-12-02T16:27:57Z"), any number of fraction digits
 *                                  (ignored), "Z" or "+00:00" / "+hh:mm" / "-hh:mm" offsets;
 *   RFC 1123 (Last-Modified, Date): "Wed, 02 Dec 2026 16:27:57 GMT" (the weekday is checked
 *                                  for form only; "GMT" or "UTC" or "+0000").
 * Both parse pointer + length (no NUL needed), reject trailing garbage and out-of-range
 * fields, and return seconds since the epoch in *out. Failures are S3D_EPROTO, recorded with
 * s3d_fail and a message quoting the text. */
#ifndef S3D_S3_TIMEFMT_H
#define S3D_S3_TIMEFMT_H

#include <stddef.h>
#include <stdint.h>
#include "common/compiler.h"

S3D_NODISCARD int s3d_time_parse_iso8601(const char *s, size_t len, int64_t *out);
S3D_NODISCARD int s3d_time_parse_rfc1123(const char *s, size_t len, int64_t *out);

/* Days-from-civil: seconds since the epoch of a UTC calendar time (no range check beyond
 * month 1..12). Exposed for tests. */
int64_t s3d_time_from_civil(int year, int month, int day, int hour, int min, int sec);

#endif
