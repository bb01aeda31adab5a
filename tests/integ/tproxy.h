/* tproxy.h - a tiny TCP proxy for tests: forwards 127.0.0.1:PORT to an upstream HTTP server
 * and can break one connection for real, or slow traffic down, so that retry, resume and
 * cancel paths run against real failed requests.
 *
 * It also records, per request, the request line and the Range header it saw going to the
 * server (HTTP/1.1 parsing of the client side: header block, then Content-Length body), and
 * checks each body against the x-amz-checksum-crc32c its request announced. */
#ifndef S3D_TEST_TPROXY_H
#define S3D_TEST_TPROXY_H

#include <stddef.h>
#include <stdint.h>

struct tproxy_opts {
    int64_t cut_s2c_after;   /* close one connection once this many response bytes have gone
                                to the client in total; -1 = never */
    int64_t cut_c2s_after;   /* the same for request bytes going to the server; -1 = never */
    int delay_us;            /* sleep this long after each forwarded chunk (<= 64 KiB) */
    int64_t stall_s2c_after; /* once this many response bytes went to the client, stop
                                forwarding on that connection for stall_ms (once); -1 never */
    int stall_ms;
    const char *fail_request;    /* answer the first request whose line contains this with
                                    HTTP 500 InternalError from the proxy itself (the request
                                    never reaches the server); NULL = never */
    int fail_status;             /* with fail_request: answer this status instead of 500 */
    const char *fail_code;       /* with fail_request: this <Code> instead of InternalError */
    const char *cut_response_to; /* reset the connection instead of passing on the response
                                    to the first request whose line contains this; NULL =
                                    never */
};

struct tproxy;

/* Starts listening on an ephemeral port of 127.0.0.1, forwarding to up_host:up_port. Exits the
 * test (t_fail) on failure. */
struct tproxy *tproxy_start(const char *up_host, int up_port, const struct tproxy_opts *o);
/* "http://127.0.0.1:PORT" */
const char *tproxy_url(const struct tproxy *p);
/* Requests answered with a 500 by the proxy (0 or 1). */
int tproxy_failed_requests(struct tproxy *p);
/* Connections cut so far (0 or 1). */
int tproxy_cuts(struct tproxy *p);
/* Client connections accepted so far. */
int tproxy_connections(struct tproxy *p);
/* The most requests in flight at once so far: a request counts from its head going to the
 * server until the first byte of its response comes back. */
int tproxy_peak_in_flight(struct tproxy *p);
/* Requests that carried an x-amz-checksum-crc32c header, and those of them whose body had
 * another CRC-32C (each logged as a "CRC32C MISMATCH" line). */
int tproxy_crc_checked(struct tproxy *p);
int tproxy_crc_bad(struct tproxy *p);
/* One-byte bodies with a wrong CRC-32C: the client asking whether the server checks checksums
 * (s3d_op_probe_body_crc, payload signing AUTO over http), counted apart from crc_bad. */
int tproxy_crc_probes(struct tproxy *p);
/* Stalls so far (0 or 1). */
int tproxy_stalls(struct tproxy *p);
/* The log so far: one line per request ("PUT /b/k?partNumber=1&uploadId=..." then, when
 * present, " Range: bytes=A-B"). Owned by the proxy; valid until the next call. */
const char *tproxy_log(struct tproxy *p);
/* Stops accepting, closes all connections, frees. */
void tproxy_stop(struct tproxy *p);

/* Parses host and port out of an "http://host:port" URL (tests' AWS_ENDPOINT_URL). */
void tproxy_parse_endpoint(const char *url, char *host, size_t cap, int *port);

#endif
