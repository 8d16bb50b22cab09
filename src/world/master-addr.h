/* Whether a multi-node job's master address is a host name that resolves
 * only to loopback (Debian's /etc/hosts maps the machine's own name to
 * 127.0.1.1): the other nodes would then connect to themselves and wait
 * PHX_TIMEOUT. A numeric loopback address is taken as meant (nodes
 * simulated on one host). Header-only so that phxrun, which does not link
 * libphalanx, shares it with the world's reader. */
#ifndef PHX_WORLD_MASTER_ADDR_H
#define PHX_WORLD_MASTER_ADDR_H

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

/* 1 when host is a name whose every address is loopback (ip gets the
 * first, as text), else 0 (numeric, unresolvable: the connect says so, or
 * some address is not loopback). */
static inline int px_name_is_loopback(const char *host, char *ip, size_t len)
{
    unsigned char buf[sizeof(struct in6_addr)];
    if (!host || !*host || inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1) return 0;
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, NULL, &hints, &res) || !res) return 0;
    int all = 1;
    for (struct addrinfo *a = res; a && all; a = a->ai_next) {
        if (a->ai_family == AF_INET)
            all = (ntohl(((struct sockaddr_in *)a->ai_addr)->sin_addr.s_addr) >> 24) == 127;
        else if (a->ai_family == AF_INET6)
            all = IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)a->ai_addr)->sin6_addr);
        else
            all = 0;
    }
    if (all && ip && len) {
        const void *src = res->ai_family == AF_INET ? (const void *)&((struct sockaddr_in *)res->ai_addr)->sin_addr
                                                    : (const void *)&((struct sockaddr_in6 *)res->ai_addr)->sin6_addr;
        if (!inet_ntop(res->ai_family, src, ip, (socklen_t)len)) snprintf(ip, len, "?");
    }
    freeaddrinfo(res);
    return all;
}
#endif
