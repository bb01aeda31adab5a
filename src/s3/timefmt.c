/* timefmt.c - ISO-8601 and RFC 1123 times as S3 sends them. */
#include "s3/timefmt.h"

#include <string.h>

#include "common/error.h"

int64_t s3d_time_from_civil(int year, int month, int day, int hour, int min, int sec)
{
    /* Howard Hinnant's days_from_civil: exact for the proleptic Gregorian calendar, no libc
     * time zone state (timegm is a GNU extension and touches TZ). */
    int64_t y = (int64_t)year - (month <= 2);
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t mp = (month + 9) % 12;
    int64_t doy = (153 * mp + 2) / 5 + day - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    int64_t days = era * 146097 + doe - 719468;
    return days * 86400 + hour * 3600 + min * 60 + sec;
}

static int is_leap(int y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static int days_in_month(int y, int m)
{
    static const int d[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && is_leap(y) ? 29 : d[m - 1];
}

/* Reads exactly n decimal digits at s[*pos]; -1 if any is not a digit or the text ends. */
static int digits(const char *s, size_t len, size_t *pos, int n)
{
    int v = 0, i;
    for (i = 0; i < n; i++) {
        if (*pos >= len || s[*pos] < '0' || s[*pos] > '9')
            return -1;
        v = v * 10 + (s[(*pos)++] - '0');
    }
    return v;
}

static int expect(const char *s, size_t len, size_t *pos, char c)
{
    if (*pos >= len || s[*pos] != c)
        return -1;
    (*pos)++;
    return 0;
}

static int fields_ok(int y, int mo, int d, int h, int mi, int se)
{
    /* Second 60 is a leap second: S3 never sends one, but it is valid text. */
    return y >= 1 && mo >= 1 && mo <= 12 && d >= 1 && d <= days_in_month(y, mo) && h >= 0 &&
           h <= 23 && mi >= 0 && mi <= 59 && se >= 0 && se <= 60;
}

static int bad(const char *what, const char *s, size_t len)
{
    return s3d_fail(S3D_EPROTO, "malformed %s time \"%.*s\"", what, (int)(len > 64 ? 64 : len), s);
}

int s3d_time_parse_iso8601(const char *s, size_t len, int64_t *out)
{
    size_t p = 0;
    int y, mo, d, h, mi, se, off = 0;
    if ((y = digits(s, len, &p, 4)) < 0 || expect(s, len, &p, '-') ||
        (mo = digits(s, len, &p, 2)) < 0 || expect(s, len, &p, '-') ||
        (d = digits(s, len, &p, 2)) < 0 || expect(s, len, &p, 'T') ||
        (h = digits(s, len, &p, 2)) < 0 || expect(s, len, &p, ':') ||
        (mi = digits(s, len, &p, 2)) < 0 || expect(s, len, &p, ':') ||
        (se = digits(s, len, &p, 2)) < 0)
        return bad("ISO-8601", s, len);
    if (p < len && s[p] == '.') {
        size_t start = ++p;
        while (p < len && s[p] >= '0' && s[p] <= '9')
            p++;
        if (p == start)
            return bad("ISO-8601", s, len);
    }
    if (p < len && s[p] == 'Z') {
        p++;
    } else if (p < len && (s[p] == '+' || s[p] == '-')) {
        int sign = s[p++] == '-' ? -1 : 1, oh, om;
        if ((oh = digits(s, len, &p, 2)) < 0 || expect(s, len, &p, ':') ||
            (om = digits(s, len, &p, 2)) < 0 || oh > 23 || om > 59)
            return bad("ISO-8601", s, len);
        off = sign * (oh * 3600 + om * 60);
    } else {
        return bad("ISO-8601", s, len);
    }
    if (p != len || !fields_ok(y, mo, d, h, mi, se))
        return bad("ISO-8601", s, len);
    *out = s3d_time_from_civil(y, mo, d, h, mi, se) - off;
    return 0;
}

int s3d_time_parse_rfc1123(const char *s, size_t len, int64_t *out)
{
    static const char *const wdays[7] = {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};
    static const char *const months[12] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                           "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    size_t p = 0;
    int i, y, mo = 0, d, h, mi, se;
    if (len < 5)
        return bad("RFC 1123", s, len);
    for (i = 0; i < 7 && memcmp(s, wdays[i], 3) != 0; i++)
        ;
    if (i == 7)
        return bad("RFC 1123", s, len);
    p = 3;
    if (expect(s, len, &p, ',') || expect(s, len, &p, ' ') || (d = digits(s, len, &p, 2)) < 0 ||
        expect(s, len, &p, ' ') || p + 3 > len)
        return bad("RFC 1123", s, len);
    for (i = 0; i < 12; i++)
        if (memcmp(s + p, months[i], 3) == 0)
            mo = i + 1;
    p += 3;
    if (mo == 0 || expect(s, len, &p, ' ') || (y = digits(s, len, &p, 4)) < 0 ||
        expect(s, len, &p, ' ') || (h = digits(s, len, &p, 2)) < 0 || expect(s, len, &p, ':') ||
        (mi = digits(s, len, &p, 2)) < 0 || expect(s, len, &p, ':') ||
        (se = digits(s, len, &p, 2)) < 0 || expect(s, len, &p, ' '))
        return bad("RFC 1123", s, len);
    if (!((len - p == 3 && (memcmp(s + p, "GMT", 3) == 0 || memcmp(s + p, "UTC", 3) == 0)) ||
          (len - p == 5 && memcmp(s + p, "+0000", 5) == 0)))
        return bad("RFC 1123", s, len);
    if (!fields_ok(y, mo, d, h, mi, se))
        return bad("RFC 1123", s, len);
    *out = s3d_time_from_civil(y, mo, d, h, mi, se);
    return 0;
}
