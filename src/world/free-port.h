/* A loopback TCP port the kernel considers free right now (the usual small
 * race: it may be taken before it is used). Header-only so that phxrun,
 * which does not link libphalanx, shares it with phx_spawn. */
#ifndef PHX_CORE_FREE_PORT_H
#define PHX_CORE_FREE_PORT_H

#include <arpa/inet.h>
#include <errno.h>
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

/* 1 when a TCP store could not listen on PORT here because something
 * already does (another job's store, say), else 0. SO_REUSEADDR as the
 * store's own listener, so a port a finished job left in TIME_WAIT is
 * not called busy. */
static inline int px_port_busy(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, busy;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    if (fd < 0) return 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    busy = bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 && errno == EADDRINUSE;
    close(fd);
    return busy;
}
#endif
