/* A loopback TCP port the kernel considers free right now (the usual small
 * race: it may be taken before it is used). Header-only so that phxrun,
 * which does not link libphalanx, shares it with phx_spawn. */
#ifndef PHX_CORE_FREE_PORT_H
#define PHX_CORE_FREE_PORT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

/* The port, or -1 when no socket could be bound. */
static inline int px_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    if (fd < 0) return -1;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
}
#endif
