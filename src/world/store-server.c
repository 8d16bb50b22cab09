/* The store's TCP server: one thread polls the listening socket, a wake-up
 * pipe and every client, and moves bytes between the sockets and the
 * protocol engine (store-conn.c). Each client has at most one request in
 * progress; nothing more is read from it until its reply is sent. A
 * client that breaks the protocol (doc/reference/store.md), or has not completed the
 * handshake PX_STORE_HANDSHAKE_S after it connected, is disconnected with a
 * warning naming it and the reason; the others are not affected. */
#include "config.h"
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "src/world/store-server.h"
#include "src/base/util.h"
#include "phalanx/log.h"

/* accept() out of descriptors: pause polling the socket, from 10 ms
 * doubling to 1 s while it lasts. */
#define PX_ACCEPT_PAUSE_MIN 0.01
#define PX_ACCEPT_PAUSE_MAX 1.0

struct px_store_server {
    int lfd, port;
    int wake[2]; /* pipe: a byte wakes the thread to stop */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t nclients; /* under mu: clients past the handshake, for the
                      * linger in stop */
    double heard; /* under mu: when one of them (still connected) last sent
                   * or took bytes */
    px_store_stats stats; /* under mu: a copy after each round */
    size_t max_stale; /* under mu: the budget the core takes */
    px_store_core core; /* the server thread's alone */
};

/* Receives what is there, feeding the engine; stops when the connection
 * has a reply to send, is parked or the socket is drained. */
static void do_recv(px_store_core *k, px_conn *c)
{
    for (;;) {
        uint8_t *dst;
        size_t want;
        px_conn_want(k, c, &dst, &want);
        if (!want) return;
        ssize_t n = recv(c->fd, dst, want, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (n <= 0) {
            if (c->hdr_got || c->body_got)
                snprintf(c->why, sizeof c->why, "connection closed in the middle of a frame");
            else
                c->gone = 1;
            return;
        }
        px_conn_got(k, c, (size_t)n, px_now());
    }
}

/* Sends what the socket takes. */
static void do_send(px_store_core *k, px_conn *c)
{
    struct iovec iov[2];
    int n;
    while ((n = px_conn_output(c, iov)) > 0) {
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(c->fd, &m, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (w <= 0) {
            c->gone = 1;
            return;
        }
        px_conn_sent(k, c, (size_t)w, px_now());
    }
}

/* Closes the connections the round condemned. */
static void sweep(px_store_core *k)
{
    for (size_t i = k->nconns; i-- > 0;) {
        px_conn *c = k->conns[i];
        if (!c->why[0] && !c->gone) continue;
        if (c->why[0]) phx_log(PHX_LOG_WARN, "store server: disconnecting client %s: %s", c->peer, c->why);
        close(c->fd);
        px_core_remove(k, i);
    }
}

static int poll_ms(double dt)
{
    if (dt <= 0) return 0;
    if (dt > 3600.0) dt = 3600.0; /* keeps the conversion in range */
    return (int)(dt * 1000.0) + 1;
}

static void *server_main(void *arg)
{
    px_store_server *s = arg;
    px_store_core *k = &s->core;
    struct pollfd *pf = NULL;
    size_t cap = 0;
    double pause_until = -1, pause = PX_ACCEPT_PAUSE_MIN;
    for (;;) {
        if (cap < k->nconns + 2) {
            size_t nc = 2 * (k->nconns + 2);
            struct pollfd *p = px_realloc(pf, nc * sizeof *p);
            if (!p) {
                sleep(1);
                continue;
            }
            pf = p;
            cap = nc;
        }
        double now = px_now();
        double next = px_core_expire(k, now), due = px_core_handshakes(k, -1);
        if (due >= 0 && (next < 0 || due < next)) next = due;
        int listening = pause_until < 0 || now >= pause_until;
        if (!listening && (next < 0 || pause_until < next)) next = pause_until;
        pf[0] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
        pf[1] = (struct pollfd){.fd = listening ? s->lfd : -1, .events = POLLIN};
        for (size_t i = 0; i < k->nconns; i++) {
            px_conn *c = k->conns[i];
            struct iovec iov[2];
            /* A parked client is not read, but its hanging up is seen. */
            short ev = px_conn_output(c, iov) ? POLLOUT : px_conn_reading(c) ? POLLIN : c->parked ? POLLRDHUP : 0;
            pf[i + 2] = (struct pollfd){.fd = c->fd, .events = ev};
        }
        size_t n = k->nconns;
        if (poll(pf, n + 2, next < 0 ? -1 : poll_ms(next - now)) < 0 && errno != EINTR) break;
        if (pf[0].revents) break; /* stop */
        for (size_t i = 0; i < n; i++) {
            px_conn *c = k->conns[i];
            short re = pf[i + 2].revents;
            if (!re) continue;
            if (re & POLLNVAL) {
                c->gone = 1;
                continue;
            }
            if (re & POLLOUT)
                do_send(k, c);
            else if (re & POLLIN)
                do_recv(k, c);
            else if (re & (POLLERR | POLLHUP | POLLRDHUP))
                c->gone = 1;
        }
        /* Replies made this round (answers, woken waits): send at once. */
        for (size_t i = 0; i < k->nconns; i++) {
            struct iovec iov[2];
            px_conn *c = k->conns[i];
            if (!c->why[0] && !c->gone && px_conn_output(c, iov)) do_send(k, c);
        }
        /* After the reads: a handshake that was waiting in the socket
         * (the process was stopped, say) has been read by now. */
        px_core_handshakes(k, px_now());
        sweep(k);
        if (listening && (pf[1].revents & POLLIN)) {
            if (px_store_accept(k, s->lfd) < 0) {
                if (pause_until < 0 || pause == PX_ACCEPT_PAUSE_MIN)
                    phx_log(PHX_LOG_WARN,
                            "store server: out of file descriptors (%s); new clients wait in the "
                            "backlog until some close (raise ulimit -n)",
                            strerror(errno));
                k->stats.accept_backoffs++;
                pause_until = px_now() + pause;
                pause = pause * 2 > PX_ACCEPT_PAUSE_MAX ? PX_ACCEPT_PAUSE_MAX : pause * 2;
            } else {
                pause_until = -1;
                pause = PX_ACCEPT_PAUSE_MIN;
            }
        }
        pthread_mutex_lock(&s->mu);
        s->stats = k->stats;
        s->stats.clients = k->nconns;
        k->max_stale = s->max_stale;
        size_t joined = px_core_joined(k);
        s->heard = px_core_heard(k);
        if (s->nclients != joined) {
            s->nclients = joined;
            pthread_cond_broadcast(&s->cv);
        }
        pthread_mutex_unlock(&s->mu);
    }
    px_free(pf);
    return NULL;
}

phx_status px_store_server_start(const char *host, int port, const void *token, size_t token_len, px_store_server **out)
{
    int bound = 0, everywhere = 0;
    int fd = px_store_listen(host, port, &bound, &everywhere);
    if (fd < 0) return PHX_EIO;
    int insecure = px_store_insecure();
    if (everywhere && !token_len && insecure)
        phx_log(PHX_LOG_WARN,
                "store server on %s:%d listens on every interface without a job token and PHX_STORE_INSECURE=1: "
                "any host that reaches it can read and change the job's keys (set the same PHX_STORE_TOKEN on "
                "every rank, or give them a shared ~/.phalanx/job-token)",
                host, bound);
    else if (!token_len && !insecure)
        phx_log(PHX_LOG_INFO,
                "store server on %s:%d has no job token: it serves only processes of uid %ld on this host", host, bound,
                (long)geteuid());
    px_store_server *s = px_calloc(1, sizeof *s);
    if (!s) {
        close(fd);
        return PHX_ENOMEM;
    }
    s->lfd = fd;
    s->port = bound;
    phx_status st = px_core_init(&s->core, token, token_len);
    s->core.local_only = !token_len && !insecure;
    if (st == PHX_OK && pipe2(s->wake, O_CLOEXEC) < 0)
        st = phx_error(PHX_EIO, "phx_store_new: pipe: %s", strerror(errno));
    if (st) {
        px_core_destroy(&s->core);
        close(fd);
        px_free(s);
        return st;
    }
    s->max_stale = s->core.max_stale;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->thread, NULL, server_main, s) != 0) {
        close(s->wake[0]);
        close(s->wake[1]);
        close(fd);
        px_core_destroy(&s->core);
        px_free(s);
        return phx_error(PHX_EIO, "phx_store_new: cannot start the server thread");
    }
    *out = s;
    return PHX_OK;
}

int px_store_server_port(const px_store_server *s)
{
    return s ? s->port : -1;
}

void px_store_server_stats(px_store_server *s, px_store_stats *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->stats;
    pthread_mutex_unlock(&s->mu);
}

void px_store_server_set_max_stale(px_store_server *s, size_t bytes)
{
    /* The server thread takes it at the end of its round: wake it. */
    pthread_mutex_lock(&s->mu);
    s->max_stale = bytes;
    pthread_mutex_unlock(&s->mu);
}

void px_store_server_stop(px_store_server *s, double linger_s)
{
    if (!s) return;
    if (linger_s > 1e6) linger_s = 1e6;
    double start = px_now(), end = start + linger_s;
    pthread_mutex_lock(&s->mu);
    while (s->nclients > 0 && px_now() < end && px_now() - (s->heard > 0 ? s->heard : start) < PX_STORE_LINGER_QUIET) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    pthread_mutex_unlock(&s->mu);
    char b = 1;
    while (write(s->wake[1], &b, 1) < 0 && errno == EINTR) {}
    pthread_join(s->thread, NULL);
    for (size_t i = 0; i < s->core.nconns; i++) close(s->core.conns[i]->fd);
    px_core_destroy(&s->core);
    close(s->lfd);
    close(s->wake[0]);
    close(s->wake[1]);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    px_free(s);
}
