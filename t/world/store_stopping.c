/* A client that reaches a store which closes the connection before
 * answering the handshake (the previous attempt's store stopping, under
 * phxrun --max-restarts, while a restarted rank on another node connects)
 * tries again within its timeout and joins the store that comes up next
 * on that port. Here a listener accepts and at once closes every
 * connection for 1 s, then gives the port to a real store server; the
 * client, started first, must end up served by the server. Also: a
 * server that answers with bytes that are not the protocol is still an
 * error at once, not tried again for the whole timeout. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "src/world/free-port.h"
#include "phalanx/phalanx.h"
#include "t/tap.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int listen_on(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, 64)) {
        close(fd);
        return -1;
    }
    return fd;
}

typedef struct fake {
    int fd; /* listening */
    double seconds; /* how long it plays */
    const char *answer; /* NULL: close at once; else write this, then close */
    int port, served; /* then a real store on the port (served: 1 once it saw the client's key) */
    int closed; /* connections it closed */
} fake;

static void *fake_run(void *arg)
{
    fake *f = arg;
    double end = now() + f->seconds;
    while (now() < end) {
        struct timeval tv = {0, 50000};
        setsockopt(f->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        int c = accept(f->fd, NULL, NULL);
        if (c < 0) continue;
        if (f->answer) {
            ssize_t w = write(c, f->answer, strlen(f->answer)); /* a short write is still not the protocol */
            (void)w;
        }
        close(c);
        f->closed++;
    }
    close(f->fd);
    if (f->port <= 0) return NULL;
    phx_store *s = NULL;
    if (phx_store_new("127.0.0.1", f->port, true, 10.0, &s)) {
        diag("the real server did not start: %s", phx_last_error());
        return NULL;
    }
    void *v = NULL;
    size_t n = 0;
    if (phx_store_get(s, "client", &v, &n, 10.0) == PHX_OK) f->served = n == 5 && !memcmp(v, "hello", 5);
    free(v);
    phx_store_free(s);
    return NULL;
}

int main(void)
{
    plan(6);
    setenv("PHX_STORE_TOKEN", "store-stopping-test-token", 1);
    unsetenv("PHX_RESTART_COUNT");
    int port = px_free_port();
    fake f = {.fd = listen_on(port), .seconds = 1.0, .port = port};
    if (port < 0 || f.fd < 0) {
        skip_all("cannot listen on a loopback port");
        return 0;
    }
    pthread_t t;
    pthread_create(&t, NULL, fake_run, &f);
    double t0 = now();
    phx_store *c = NULL;
    phx_status st = phx_store_new("127.0.0.1", port, false, 10.0, &c);
    double took = now() - t0;
    is_int(st, PHX_OK, "a client reaching a store that closes before the handshake joins the next one (%.2f s)", took);
    if (st) diag("%s", phx_last_error());
    ok(st == PHX_OK && took >= 0.9, "... after the closing one had gone (1 s; %.2f s)", took);
    ok(st == PHX_OK && phx_store_set(c, "client", "hello", 5) == PHX_OK, "... and uses it");
    phx_store_free(c);
    pthread_join(t, NULL);
    ok(f.closed > 0 && f.served, "the real server saw the client's key (%d connections closed before)", f.closed);

    /* a server speaking something else: an error at once */
    port = px_free_port();
    fake g = {.fd = listen_on(port), .seconds = 3.0, .answer = "SSH-2.0-OpenSSH_9.2\r\nnot a store\r\n"};
    pthread_create(&t, NULL, fake_run, &g);
    t0 = now();
    st = phx_store_new("127.0.0.1", port, false, 10.0, &c);
    took = now() - t0;
    ok(st != PHX_OK && took < 2.0, "a server answering other bytes: an error in %.2f s (%s)", took,
       phx_status_name(st));
    like(st ? phx_last_error() : "", "store protocol", "... naming the store protocol");
    if (st == PHX_OK) phx_store_free(c);
    pthread_join(t, NULL);
    return done_testing();
}
