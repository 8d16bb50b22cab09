/* The store server's listening socket: name resolution, bind and listen,
 * and accepting clients without spinning when the process runs out of
 * file descriptors. */
#include "config.h"
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>
#include "src/world/store-server.h"
#include "src/base/util.h"

phx_status px_store_resolve(const char *who, const char *host, int port, int passive, struct addrinfo **res)
{
    struct addrinfo hints;
    char ports[16];
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    snprintf(ports, sizeof ports, "%d", port);
    int rc = getaddrinfo(host, ports, &hints, res);
    if (rc != 0) return phx_error(PHX_EIO, "%s: cannot resolve host '%s': %s", who, host, gai_strerror(rc));
    return PHX_OK;
}

int px_store_listen(const char *host, int port, int *bound, int *everywhere)
{
    struct addrinfo *res;
    if (px_store_resolve("phx_store_new", host, port, 1, &res)) return -1;
    /* Bind the loopback address itself when asked for it (nothing outside
     * can connect); otherwise every interface of that family, so peers
     * reach us whatever name MASTER_ADDR gives this host. */
    struct sockaddr_storage sa;
    socklen_t salen = (socklen_t)res->ai_addrlen;
    memcpy(&sa, res->ai_addr, res->ai_addrlen);
    int fam = res->ai_family;
    freeaddrinfo(res);
    *everywhere = 0;
    if (fam == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&sa;
        if ((ntohl(a->sin_addr.s_addr) >> 24) != 127) {
            a->sin_addr.s_addr = htonl(INADDR_ANY);
            *everywhere = 1;
        }
    } else if (fam == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&sa;
        if (!IN6_IS_ADDR_LOOPBACK(&a->sin6_addr)) {
            a->sin6_addr = in6addr_any;
            *everywhere = 1;
        }
    }
    int fd = socket(fam, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return phx_error(PHX_EIO, "phx_store_new: socket: %s", strerror(errno)), -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&sa, salen) < 0) {
        int e = errno;
        close(fd);
        if (e == EADDRINUSE)
            phx_error(PHX_EIO,
                      "phx_store_new: port %d on %s is in use (another job or store listens "
                      "there; choose another MASTER_PORT)",
                      port, host);
        else
            phx_error(PHX_EIO, "phx_store_new: cannot bind %s:%d: %s", host, port, strerror(e));
        return -1;
    }
    if (listen(fd, 1024) < 0) {
        int e = errno;
        close(fd);
        phx_error(PHX_EIO, "phx_store_new: listen on %s:%d: %s", host, port, strerror(e));
        return -1;
    }
    getsockname(fd, (struct sockaddr *)&sa, &salen);
    *bound = ntohs(fam == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port : ((struct sockaddr_in *)&sa)->sin_port);
    return fd;
}

static void peer_name(const struct sockaddr_storage *sa, socklen_t len, char *buf, size_t n)
{
    char host[INET6_ADDRSTRLEN] = "?", port[8] = "?";
    getnameinfo((const struct sockaddr *)sa, len, host, sizeof host, port, sizeof port,
                NI_NUMERICHOST | NI_NUMERICSERV);
    snprintf(buf, n, "%s:%s", host, port);
}

int px_store_accept(px_store_core *k, int lfd)
{
    int n = 0;
    for (;;) {
        struct sockaddr_storage sa;
        socklen_t sl = sizeof sa;
        int fd = accept4(lfd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            /* Out of descriptors (or kernel memory): the connection stays
             * in the backlog and the socket stays readable, so polling it
             * again at once would spin. */
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) return -1;
            return n;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        char peer[64];
        peer_name(&sa, sl, peer, sizeof peer);
        if (!px_core_add(k, fd, peer)) {
            close(fd);
            return n;
        }
        n++;
    }
}
