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
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "src/world/store-server.h"
#include "src/base/util.h"
#include "phalanx/log.h"

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
        px_conn *c = px_core_add(k, fd, peer);
        if (!c) {
            close(fd);
            return n;
        }
        c->since = px_now();
        if (k->local_only && !px_store_peer_is_mine(fd, c->denied, sizeof c->denied))
            phx_log(PHX_LOG_DEBUG, "store: %s will be refused: %s", peer, c->denied);
        n++;
    }
}

/* An address as /proc/net/tcp (AF_INET) or tcp6 prints it: the raw
 * 32-bit words in hex, then the port. A v4-mapped IPv6 address is
 * written both ways (v4 for tcp, mapped for tcp6). */
static void proc_addr(const struct sockaddr_storage *sa, char v4[16], char v6[48])
{
    v4[0] = v6[0] = 0;
    if (sa->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        uint32_t w[4] = {0, 0, htonl(0xffff), a->sin_addr.s_addr};
        snprintf(v4, 16, "%08X:%04X", w[3], ntohs(a->sin_port));
        snprintf(v6, 48, "%08X%08X%08X%08X:%04X", w[0], w[1], w[2], w[3], ntohs(a->sin_port));
    } else if (sa->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
        uint32_t w[4];
        memcpy(w, &a->sin6_addr, sizeof w);
        snprintf(v6, 48, "%08X%08X%08X%08X:%04X", w[0], w[1], w[2], w[3], ntohs(a->sin6_port));
        if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) snprintf(v4, 16, "%08X:%04X", w[3], ntohs(a->sin6_port));
    }
}

/* The owner of the live socket whose local address is local and remote
 * address is remote in file: 1 found (*uid), 0 not. */
static int proc_owner(const char *file, const char *local, const char *remote, unsigned long *uid)
{
    FILE *f = fopen(file, "re");
    if (!f) return 0;
    char line[512], la[64], ra[64];
    unsigned st;
    unsigned long u, inode;
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        if (sscanf(line, " %*u: %63s %63s %x %*s %*s %*s %lu %*s %lu", la, ra, &st, &u, &inode) == 5 &&
            strcmp(la, local) == 0 && strcmp(ra, remote) == 0 && inode != 0) {
            *uid = u;
            found = 1;
        }
    fclose(f);
    return found;
}

int px_store_peer_is_mine(int fd, char *why, size_t len)
{
    struct sockaddr_storage me, peer;
    socklen_t ml = sizeof me, pl = sizeof peer;
    char p4[16], p6[48], m4[16], m6[48], name[64];
    unsigned long uid = 0;
    if (getsockname(fd, (struct sockaddr *)&me, &ml) < 0 || getpeername(fd, (struct sockaddr *)&peer, &pl) < 0) {
        snprintf(why, len, "cannot identify the peer: %s", strerror(errno));
        return 0;
    }
    peer_name(&peer, pl, name, sizeof name);
    proc_addr(&peer, p4, p6);
    proc_addr(&me, m4, m6);
    /* The client's socket, seen from its side: local = its address,
     * remote = ours. An orphaned socket (closed by its owner) has inode 0
     * and does not count. */
    int found = (p4[0] && m4[0] && proc_owner("/proc/net/tcp", p4, m4, &uid)) ||
        (p6[0] && m6[0] && proc_owner("/proc/net/tcp6", p6, m6, &uid));
    if (!found) {
        snprintf(why, len,
                 "%s is not a process of this host, and this store has no job token "
                 "(PHX_STORE_TOKEN or ~/.phalanx/job-token) to check",
                 name);
        return 0;
    }
    if (uid != (unsigned long)geteuid()) {
        snprintf(why, len, "%s belongs to uid %lu, and this store without a job token serves only uid %lu", name, uid,
                 (unsigned long)geteuid());
        return 0;
    }
    return 1;
}

int px_store_addr_is_local(const char *host)
{
    struct addrinfo *res = NULL;
    if (px_store_resolve("phx_comm_init", host, 0, 0, &res)) return 0;
    int local = 0;
    for (struct addrinfo *a = res; a && !local; a = a->ai_next) {
        int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        local = bind(fd, a->ai_addr, a->ai_addrlen) == 0;
        close(fd);
    }
    freeaddrinfo(res);
    return local;
}
