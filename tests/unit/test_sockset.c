/* test_sockset.c - the socket set of a multi handle (s3ctx.h, struct s3d_multi; http.h,
 * s3d_sockset): every socket a request opens is in the set while its connection lives and
 * leaves it when curl closes it, and s3d_multi_unacked counts the bytes of an upload the peer
 * has not acknowledged. The peer here is a local listener that never reads, with a small
 * receive buffer: what it holds (SIOCINQ) is what the kernel acknowledged, the rest of what
 * curl handed over is still in the client's send queue. The adaptive controller counts an
 * upload's bytes as sent minus that queue (engine/xfer.c, bytes_carried); without the set,
 * every byte in a send buffer would count as carried. No server needed. */
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/sockios.h>

#include "s3/s3ctx.h"
#include "testutil.h"

#define BODY (8u << 20)

int main(void)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    struct s3d_http_conf conf;
    struct s3d_http_req req;
    struct s3d_multi mm;
    struct curl_slist *hdrs = NULL;
    struct iovec iov;
    char url[64];
    char *body;
    int lfd, sfd = -1, rcv = 65536, running = 1, still = 0, i, inq = 0;
    uint64_t last = 0, unacked;
    CURL *e;

    CHECK(curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK);
    lfd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(lfd >= 0);
    CHECK(setsockopt(lfd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv)) == 0);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(lfd, 4) == 0);
    CHECK(getsockname(lfd, (struct sockaddr *)&sa, &len) == 0);
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/b/k", (unsigned)ntohs(sa.sin_port));

    body = calloc(1, BODY);
    CHECK(body != NULL);
    iov.iov_base = body;
    iov.iov_len = BODY;
    hdrs = curl_slist_append(hdrs, "Expect:");
    memset(&conf, 0, sizeof(conf));
    memset(&req, 0, sizeof(req));
    req.method = "PUT";
    req.url = url;
    req.headers = hdrs;
    req.iov = &iov;
    req.iovcnt = 1;
    req.body_len = BODY;
    memset(&mm, 0, sizeof(mm));
    mm.m = curl_multi_init();
    e = curl_easy_init();
    CHECK(mm.m != NULL && e != NULL);
    CHECK_OK(s3d_http_setup(e, &req, &conf));
    CHECK(s3d_multi_add(&mm, e, &req) == CURLM_OK);

    /* Run until curl can hand over nothing more: the peer's buffer and our send queue full. */
    for (i = 0; i < 2000 && running && still < 20; i++) {
        CHECK(curl_multi_perform(mm.m, &running) == CURLM_OK);
        if (sfd < 0)
            sfd = accept(lfd, NULL, NULL); /* the listener is blocking: connected by now */
        curl_multi_poll(mm.m, NULL, 0, 5, NULL);
        still = req.sent == last ? still + 1 : 0;
        last = req.sent;
    }
    CHECK(running == 1 && sfd >= 0);
    CHECK(req.sent > 0 && req.sent < BODY);
    CHECK(mm.socks.n == 1);
    CHECK(ioctl(sfd, SIOCINQ, &inq) == 0);
    unacked = s3d_multi_unacked(&mm);
    printf("handed to the socket %" PRIu64 " B, held by the peer %d B, unacknowledged %" PRIu64
           " B\n",
           req.sent, inq, unacked);
    /* Everything curl handed over (the body so far and the request's head, < 4 KiB) is either
     * held by the peer or still queued on our side. */
    CHECK(unacked > 0);
    CHECK((uint64_t)inq + unacked >= req.sent);
    CHECK((uint64_t)inq + unacked <= req.sent + 4096);
    CHECK(unacked > req.sent / 4); /* most of it: the peer holds about its 128 KiB */

    /* Closing the connection takes its socket out of the set. */
    curl_multi_remove_handle(mm.m, e);
    curl_easy_cleanup(e);
    curl_multi_cleanup(mm.m);
    CHECK(mm.socks.n == 0);
    CHECK(s3d_multi_unacked(&mm) == 0);
    s3d_sockset_free(&mm.socks);
    s3d_http_req_cleanup(&req);
    curl_slist_free_all(hdrs);
    close(sfd);
    close(lfd);
    free(body);
    curl_global_cleanup();
    printf("ok\n");
    return 0;
}
