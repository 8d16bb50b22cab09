/* A stranger on the store's port (a TCP connection that never completes
 * the handshake, no token needed) holds nothing up: the server's stop does
 * not wait for it, rank 0's phx_comm_free of a two-rank gloo job returns
 * at once with one connected, and the server closes it after the
 * handshake deadline (PX_STORE_HANDSHAKE_S). A client that completed the
 * handshake is still waited for (unless quiet for PX_STORE_LINGER_QUIET)
 * and never dropped for being idle. All
 * with PHX_TIMEOUT=20: a stop that waited for a stranger takes 20 s. The
 * server runs in this process; its counters come from
 * px_store_server_stats (built in from the sources). */
#include "config.h"
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "src/world/free-port.h"
#include "src/world/store-server.h"
#include "phalanx/phalanx.h"
#include "t/comm_harness.h"

#define TIMEOUT 20.0

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void nap(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static int raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* HELLO on a server without a token: 1 when answered OK (the connection
 * is then a client like any other). */
static int hello(int fd)
{
    uint8_t h[48], r[48];
    memset(h, 0, sizeof h);
    px_put_u32(h, 40);
    px_put_u32(h + 4, PX_OP_HELLO);
    px_put_u32(h + 8, PX_STORE_MAGIC);
    px_put_u32(h + 12, PX_STORE_VERSION);
    if (send(fd, h, sizeof h, MSG_NOSIGNAL) != (ssize_t)sizeof h) return 0;
    return recv(fd, r, sizeof r, MSG_WAITALL) == (ssize_t)sizeof r && px_get_u32(r + 4) == PX_ST_OK;
}

/* Seconds until the server closes fd (recv returns 0 or a reset), or -1
 * when it is still open after `limit` s. */
static double closed_after(int fd, double t0, double limit)
{
    for (;;) {
        double left = t0 + limit - now();
        if (left <= 0) return -1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)(left * 1000) + 1) <= 0) continue;
        char b[64];
        ssize_t n = recv(fd, b, sizeof b, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno == ECONNRESET)) return now() - t0;
        if (n < 0 && errno != EAGAIN && errno != EINTR) return -1;
    }
}

static size_t clients(phx_store *s)
{
    px_store_stats st;
    nap(0.1); /* the server publishes its counters after each round */
    px_store_server_stats(px_store_server_of(s), &st);
    return st.clients;
}

/* Starts a server and one client of it, with a round trip done; returns
 * the time phx_store_free of the server took, with `strangers` idle
 * connections and `half` connections that sent 4 bytes of a header. */
static double stop_time(int strangers, int half, int *fds)
{
    phx_store *s, *c;
    if (phx_store_new("127.0.0.1", 0, true, TIMEOUT, &s)) return -1;
    int port = phx_store_port(s);
    for (int i = 0; i < strangers + half; i++) {
        fds[i] = raw_connect(port);
        if (i >= strangers && fds[i] >= 0) send(fds[i], "\x28\0\0\0", 4, MSG_NOSIGNAL);
    }
    if (phx_store_new("127.0.0.1", port, false, TIMEOUT, &c) == PHX_OK) {
        phx_store_set(c, "k", "v", 1);
        phx_store_free(c);
    }
    nap(0.1);
    double t0 = now();
    phx_store_free(s);
    return now() - t0;
}

/* Two gloo ranks (forked); rank 0 connects a stranger to its own store's
 * port (when `stranger`), then both all-reduce and free. Returns rank 0's
 * free time, or -1. */
static double *free_dt;

static int gloo_rank(int rank, int port, int stranger)
{
    phx_comm_opts o = PHX_COMM_OPTS_INIT;
    o.backend = "gloo";
    phx_comm *c;
    if (phx_comm_init(&o, &c)) {
        fprintf(stderr, "rank %d: %s\n", rank, phx_last_error());
        return 1;
    }
    int fd = rank == 0 && stranger ? raw_connect(port) : -1;
    int64_t n = 16;
    phx_tensor *t = phx_tensor_zeros(PHX_F32, 1, &n, phx_cpu());
    phx_status st = phx_comm_allreduce(c, t, PHX_SUM, NULL);
    phx_tensor_free(t);
    nap(0.1);
    double t0 = now();
    phx_comm_free(c);
    if (rank == 0) *free_dt = now() - t0;
    if (fd >= 0) close(fd);
    return st == PHX_OK && (rank != 0 || !stranger || fd >= 0) ? 0 : 1;
}

static double gloo_free_time(int stranger)
{
    char port[16];
    int p = px_free_port();
    snprintf(port, sizeof port, "%d", p);
    *free_dt = -1;
    pid_t pids[2];
    fflush(NULL);
    for (int r = 0; r < 2; r++) {
        if ((pids[r] = fork()) == 0) {
            char b[8];
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            snprintf(b, sizeof b, "%d", r);
            setenv("RANK", b, 1);
            setenv("WORLD_SIZE", "2", 1);
            setenv("MASTER_ADDR", "127.0.0.1", 1);
            setenv("MASTER_PORT", port, 1);
            _exit(gloo_rank(r, p, stranger));
        }
    }
    int bad = 0;
    double end = now() + 60;
    for (int r = 0; r < 2; r++) {
        int status = 0;
        while (waitpid(pids[r], &status, WNOHANG) == 0 && now() < end) nap(0.01);
        if (now() >= end) {
            kill(pids[r], SIGKILL);
            waitpid(pids[r], &status, 0);
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status)) bad = 1;
    }
    return bad ? -1 : *free_dt;
}

int main(void)
{
    plan(12);
    unsetenv("PHX_STORE_TOKEN");
    /* No ~/.phalanx/job-token: raw clients meet a server without a token. */
    unsetenv("HOME");
    setenv("PHX_TIMEOUT", "20", 1);
    int fds[4];

    double base = stop_time(0, 0, fds);
    double with = stop_time(2, 2, fds);
    for (int i = 0; i < 4; i++)
        if (fds[i] >= 0) close(fds[i]);
    diag("server stop: %.3f s alone, %.3f s with 2 idle strangers and 2 that sent half a header", base, with);
    ok(base >= 0 && base < 2.0, "the server stops at once with no client left (%.3f s)", base);
    ok(with >= 0 && with < 2.0,
       "... and with 4 connections that never completed the handshake (%.3f s; %g s if it waits for them)", with,
       TIMEOUT);

    /* The deadline: strangers closed, a client that shook hands kept. */
    phx_store *s;
    if (phx_store_new("127.0.0.1", 0, true, 1.0, &s)) {
        diag("server: %s", phx_last_error());
        return 1;
    }
    int port = phx_store_port(s);
    double t0 = now();
    int idle = raw_connect(port), half = raw_connect(port), joined = raw_connect(port);
    send(half, "\x28\0\0\0", 4, MSG_NOSIGNAL);
    ok(hello(joined), "a raw client completes HELLO");
    double t_idle = closed_after(idle, t0, PX_STORE_HANDSHAKE_S + 1.0);
    double t_half = closed_after(half, t0, PX_STORE_HANDSHAKE_S + 1.0);
    diag("strangers closed after %.2f s (idle) and %.2f s (half a header); deadline %.1f s", t_idle, t_half,
         PX_STORE_HANDSHAKE_S);
    ok(t_idle >= PX_STORE_HANDSHAKE_S - 0.5 && t_idle >= 0,
       "an idle stranger is closed by the server after the handshake deadline (%.2f s, within %.1f + 1 s)", t_idle,
       PX_STORE_HANDSHAKE_S);
    ok(t_half >= 0, "a stranger that sent half a header is closed too (%.2f s)", t_half);
    size_t n = clients(s);
    ok(n == 2, "the client that shook hands and the handle's own stay connected (%zu clients)", n);
    int64_t x = 0;
    ok(phx_store_add(s, "alive", 1, &x) == PHX_OK && x == 1, "the server still serves");
    /* A joined client heard from within PX_STORE_LINGER_QUIET is waited for
     * (up to the store's timeout, 1 s); one quiet longer (the first, idle
     * since its HELLO 5 s ago: a peer cut off or stopped) is not. */
    int fresh = raw_connect(port);
    ok(hello(fresh), "a second raw client completes HELLO");
    t0 = now();
    phx_store_free(s);
    double held = now() - t0;
    close(idle);
    close(half);
    close(joined);
    close(fresh);
    ok(held >= 0.8, "a client that completed the handshake just now is still waited for at stop (%.2f s of 1 s)", held);
    if (phx_store_new("127.0.0.1", 0, true, 30.0, &s)) {
        diag("server: %s", phx_last_error());
        return 1;
    }
    joined = raw_connect(phx_store_port(s));
    ok(hello(joined), "a raw client completes HELLO");
    struct timespec nap = {2, 300 * 1000 * 1000}; /* past PX_STORE_LINGER_QUIET */
    nanosleep(&nap, NULL);
    t0 = now();
    phx_store_free(s);
    held = now() - t0;
    close(joined);
    ok(held < 1.0, "one quiet for %.1f s is not waited for (%.2f s, timeout 30 s)", PX_STORE_LINGER_QUIET, held);

    if (!h_have("gloo")) {
        skip(1, "no gloo plugin in this build");
        return done_testing();
    }
    free_dt = mmap(NULL, sizeof *free_dt, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (free_dt == MAP_FAILED) return 99;
    double g0 = gloo_free_time(0), g = gloo_free_time(1);
    diag("gloo, 2 ranks: rank 0's phx_comm_free took %.3f s alone, %.3f s with a stranger on its store", g0, g);
    ok(g >= 0 && g < 2.0, "rank 0's phx_comm_free returns at once with a stranger connected (%.3f s, < 2 s)", g);
    return done_testing();
}
