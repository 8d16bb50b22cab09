/* The TCP store client (phx_store_new): one connection per handle, one
 * request at a time under the handle's lock, so a handle is thread-safe.
 * It connects with retry and backoff, shakes hands (HELLO, then AUTH with
 * the job token) and sends each operation as one request. Protocol:
 * store-proto.h; the server it may start: store-server.h.
 *
 * Every call is bounded by the store's timeout T (PHX_TIMEOUT): a request
 * waits for its reply up to its own wait plus T, so a server that pauses
 * for less than T (its process stopped, the network down) costs only the
 * pause. A connection that breaks is made again, with backoff, within the
 * same bound, and the request repeated (except an ADD the server may have
 * applied). A server that leaves a request unanswered for the whole bound
 * has stopped answering: the handle fails every later call at once,
 * naming it, so a job's failure protocol does not wait T per store call. */
#include "config.h"
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include "src/world/store-impl.h"
#include "src/world/store-server.h"
#include "src/world/master-addr.h"
#include "src/world/world-impl.h"
#include "src/base/util.h"
#include "phalanx/log.h"

typedef struct tcp_store {
    phx_store base;
    int fd; /* -1: connect again before the next request */
    char silent[512]; /* set: the server stopped answering (every call fails) */
    pthread_mutex_t mu; /* one request at a time */
    char host[256];
    int port;
    px_store_server *server; /* owned when this handle started it */
    uint8_t token[PX_STORE_MAX_TOKEN]; /* the job token when made (px_store_token) */
    size_t token_len;
    char token_src[320]; /* where it came from, or why there is none */
} tcp_store;

static const px_store_ops tcp_ops;

static tcp_store *tcp_of(phx_store *s)
{
    return (tcp_store *)s;
}

/* Milliseconds for poll(): never more than an hour (the callers loop). */
static int poll_ms(double s)
{
    if (!(s > 0)) return 0;
    if (s > 3600.0) s = 3600.0;
    return (int)(s * 1000.0) + 1;
}

/* ------------------------------------------------------------ the wire */

/* Sends or receives iov completely before the deadline. */
static phx_status io_all(tcp_store *s, int sending, struct iovec *iov, int niov, double deadline, const char *who)
{
    while (niov > 0) {
        if (iov->iov_len == 0) {
            iov++;
            niov--;
            continue;
        }
        ssize_t n;
        if (sending) {
            struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
            n = sendmsg(s->fd, &m, MSG_NOSIGNAL);
        } else {
            n = recv(s->fd, iov->iov_base, iov->iov_len, 0);
        }
        if (n > 0) {
            size_t k = (size_t)n;
            while (niov > 0 && k >= iov->iov_len) {
                k -= iov->iov_len;
                iov++;
                niov--;
            }
            if (niov > 0) {
                iov->iov_base = (char *)iov->iov_base + k;
                iov->iov_len -= k;
            }
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            double left = deadline - px_now();
            if (left <= 0)
                return phx_error(PHX_ETIMEOUT, "%s: no reply from the store server at %s:%d%s", who, s->host, s->port,
                                 s->base.host_of);
            struct pollfd p = {.fd = s->fd, .events = sending ? POLLOUT : POLLIN};
            poll(&p, 1, poll_ms(left));
            continue;
        }
        return phx_error(PHX_EPEER, "%s: the store server at %s:%d%s closed the connection%s%s", who, s->host, s->port,
                         s->base.host_of, n < 0 ? ": " : "", n < 0 ? strerror(errno) : "");
    }
    return PHX_OK;
}

/* One request and its reply on the current connection, before the
 * deadline; iov[0] is free for the header, iov[1..nparts] the body. The
 * reply body (if any) is px_malloc'd into *body. *sent is set once the
 * whole request went out (the server may have run it). Any failure leaves
 * the stream out of sync: the caller closes the connection. */
static phx_status exchange(tcp_store *s, const char *who, uint32_t op, struct iovec *iov, int nparts, double deadline,
                           uint32_t *status, uint8_t **body, size_t *blen, int *sent)
{
    uint8_t hdr[PX_STORE_HDR], rhdr[PX_STORE_HDR];
    size_t len = 0;
    for (int i = 1; i <= nparts; i++) len += iov[i].iov_len;
    px_put_u32(hdr, (uint32_t)len);
    px_put_u32(hdr + 4, op);
    iov[0] = (struct iovec){hdr, sizeof hdr};
    *body = NULL;
    *blen = 0;
    *sent = 0;
    phx_status st;
    if ((st = io_all(s, 1, iov, nparts + 1, deadline, who))) return st;
    *sent = 1;
    iov[0] = (struct iovec){rhdr, sizeof rhdr};
    if ((st = io_all(s, 0, iov, 1, deadline, who))) return st;
    size_t rlen = px_get_u32(rhdr);
    *status = px_get_u32(rhdr + 4);
    if (rlen > (size_t)PHX_STORE_MAX_VALUE + 8)
        return phx_error(PHX_EIO, "%s: the store server at %s:%d sent a %zu-byte reply (protocol error)", who, s->host,
                         s->port, rlen);
    if (!rlen) return PHX_OK;
    if (!(*body = px_malloc(rlen + 1))) return PHX_ENOMEM;
    iov[0] = (struct iovec){*body, rlen};
    if ((st = io_all(s, 0, iov, 1, deadline, who))) {
        px_free(*body);
        *body = NULL;
        return st;
    }
    (*body)[rlen] = 0;
    *blen = rlen;
    return PHX_OK;
}

static phx_status reconnect(tcp_store *s, const char *who, double deadline);

/* One request/reply under the handle's lock, bounded by wait_s plus the
 * store's timeout; a broken connection is made again and the request
 * repeated within that bound. The reply body (if any) is px_malloc'd into
 * *body. */
static phx_status transact(tcp_store *s, const char *who, uint32_t op, struct iovec *parts, int nparts, double wait_s,
                           uint32_t *status, uint8_t **body, size_t *blen)
{
    struct iovec iov[8];
    pthread_mutex_lock(&s->mu);
    phx_status st;
    double start = px_now(), deadline = start + (wait_s > 0 ? wait_s : 0) + s->base.timeout_s, backoff = 0.01;
    for (int tries = 0;; tries++) {
        *body = NULL;
        *blen = 0;
        if (s->silent[0]) {
            st = phx_error(PHX_EIO, "%s: %s", who, s->silent);
            break;
        }
        int sent = 0, again = s->fd >= 0;
        if (s->fd < 0) {
            if (tries > 0) { /* a server that closes every new connection is not hammered */
                double nap = backoff < deadline - px_now() ? backoff : 0;
                struct timespec ts = {(time_t)nap, (long)((nap - (double)(time_t)nap) * 1e9)};
                nanosleep(&ts, NULL);
                backoff = backoff * 2 > 1.0 ? 1.0 : backoff * 2;
            }
            st = reconnect(s, who, deadline);
        } else {
            if (nparts) memcpy(iov + 1, parts, (size_t)nparts * sizeof *parts);
            st = exchange(s, who, op, iov, nparts, deadline, status, body, blen, &sent);
            if (st == PHX_OK) break;
            close(s->fd);
            s->fd = -1;
        }
        if (st == PHX_ETIMEOUT) {
            snprintf(s->silent, sizeof s->silent,
                     "the store server at %s:%d%s stopped answering: no reply in %.1f s (the store's timeout, "
                     "PHX_TIMEOUT, after the call's own wait); is the process that hosts it stopped or hung?",
                     s->host, s->port, s->base.host_of, px_now() - start);
            st = phx_error(PHX_ETIMEOUT, "%s: %s", who, s->silent);
            break;
        }
        if (st == PHX_OK) continue; /* connected again: the request */
        if (st != PHX_EPEER || !again) break;
        if (sent && op == PX_OP_ADD) {
            char why[512];
            snprintf(why, sizeof why, "%s", phx_last_error());
            st = phx_error(PHX_EPEER, "%s (after the add was sent: not repeated, it may have been applied)", why);
            break;
        }
        phx_log(PHX_LOG_WARN, "%s; connecting again", phx_last_error());
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

/* Connects one socket within the deadline; returns fd or -1 with errno. */
static int try_connect(const struct addrinfo *ai, double deadline)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        if (errno != EINPROGRESS) {
            int e = errno;
            close(fd);
            errno = e;
            return -1;
        }
        double left = deadline - px_now();
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int e = 0;
        socklen_t el = sizeof e;
        if (left <= 0 || poll(&p, 1, poll_ms(left)) <= 0) {
            close(fd);
            errno = ETIMEDOUT;
            return -1;
        }
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el);
        if (e) {
            close(fd);
            errno = e;
            return -1;
        }
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* HELLO, then AUTH when either side has a job token (doc/reference/store.md). */
static phx_status handshake(tcp_store *s, const char *who, double deadline)
{
    uint8_t hello[PX_STORE_HELLO_BODY], cnonce[PX_STORE_NONCE], *body = NULL;
    size_t blen;
    uint32_t status = 0;
    struct iovec iov[2];
    int sent;
    phx_status st = px_store_nonce(cnonce, sizeof cnonce);
    if (st) return st;
    px_put_u32(hello, PX_STORE_MAGIC);
    px_put_u32(hello + 4, PX_STORE_VERSION);
    memcpy(hello + 8, cnonce, sizeof cnonce);
    iov[1] = (struct iovec){hello, sizeof hello};
    st = exchange(s, who, PX_OP_HELLO, iov, 1, deadline, &status, &body, &blen, &sent);
    if (st == PHX_ETIMEOUT) {
        char why[256];
        snprintf(why, sizeof why, "%s", phx_last_error());
        return phx_error(st,
                         "%s: %s:%d accepted the connection but did not answer the handshake within the "
                         "store's timeout of %g s (%s); is the server overloaded or out of file descriptors, or "
                         "PHX_TIMEOUT too short?",
                         who, s->host, s->port, s->base.timeout_s, why);
    }
    if (st == PHX_EPEER) {
        char why[256];
        snprintf(why, sizeof why, "%s", phx_last_error());
        return phx_error(st, "%s: %s:%d closed the connection before answering the handshake (%s)", who, s->host,
                         s->port, why);
    }
    if (st) {
        char why[256];
        snprintf(why, sizeof why, "%s", phx_last_error());
        return phx_error(st, "%s: %s:%d does not speak the Phalanx store protocol (%s)", who, s->host, s->port, why);
    }
    if (status == PX_ST_DENIED) {
        st = phx_error(PHX_EIO, "%s: the store server at %s:%d refused this process: %.*s", who, s->host, s->port,
                       (int)(blen < 300 ? blen : 300), body ? (const char *)body : "");
        px_free(body);
        return st;
    }
    if (status == PX_ST_VERSION && blen == 4) {
        st = phx_error(PHX_EIO,
                       "%s: the store server at %s:%d speaks store protocol version %u, this library "
                       "version %u (mixed Phalanx versions in one job?)",
                       who, s->host, s->port, px_get_u32(body), PX_STORE_VERSION);
        px_free(body);
        return st;
    }
    if (status != PX_ST_OK || blen != 8 + PX_STORE_NONCE || px_get_u32(body) != PX_STORE_VERSION) {
        px_free(body);
        return phx_error(PHX_EIO, "%s: %s:%d did not answer as a Phalanx store (protocol version %u expected)", who,
                         s->host, s->port, PX_STORE_VERSION);
    }
    uint32_t flags = px_get_u32(body + 4);
    uint8_t snonce[PX_STORE_NONCE], proof[PX_STORE_NONCE];
    memcpy(snonce, body + 8, sizeof snonce);
    px_free(body);
    int needs = (flags & PX_STORE_FLAG_TOKEN) != 0;
    if (!needs && !s->token_len) return PHX_OK;
    if (needs && !s->token_len)
        return phx_error(PHX_EIO,
                         "%s: the store server at %s:%d requires this job's token and PHX_STORE_TOKEN "
                         "is not set in this process, nor is there a ~/.phalanx/job-token (%s) (phxrun sets "
                         "PHX_STORE_TOKEN for its ranks; other launchers: export the same PHX_STORE_TOKEN on "
                         "every rank, or give them a home folder they share)",
                         who, s->host, s->port, s->token_src);
    if (!needs)
        return phx_error(PHX_EIO,
                         "%s: this process has a job token (%s) but the store server at %s:%d "
                         "runs without a job token (was it started with another environment?); every rank "
                         "must have the same PHX_STORE_TOKEN or ~/.phalanx/job-token",
                         who, s->token_src, s->host, s->port);
    if (px_store_proof(s->token, s->token_len, "client", cnonce, snonce, proof))
        return phx_error(PHX_EIO, "%s: cannot compute the token proof (OpenSSL HMAC failed)", who);
    iov[1] = (struct iovec){proof, sizeof proof};
    if ((st = exchange(s, who, PX_OP_AUTH, iov, 1, deadline, &status, &body, &blen, &sent))) return st;
    if (status == PX_ST_DENIED) {
        px_free(body);
        return phx_error(PHX_EIO,
                         "%s: the store server at %s:%d refused this process's %s (it "
                         "differs from the job's token the server was started with)",
                         who, s->host, s->port, s->token_src);
    }
    int good = status == PX_ST_OK && blen == PX_STORE_NONCE &&
        px_store_proof(s->token, s->token_len, "server", cnonce, snonce, proof) == 0 && px_store_proof_eq(proof, body);
    px_free(body);
    if (!good)
        return phx_error(PHX_EIO,
                         "%s: the server at %s:%d could not prove it knows %s (another "
                         "program listens on that port?)",
                         who, s->host, s->port, s->token_src);
    return PHX_OK;
}

/* Connects s->fd to s->host:s->port before the deadline, with backoff
 * (10 ms doubling to 1 s). A refused connection is retried when
 * `refused_retry` (the server may not be up yet), else it ends the try
 * (the server was there and its process is gone). */
static phx_status connect_loop(tcp_store *s, const char *who, double deadline, int refused_retry)
{
    struct addrinfo *res;
    phx_status st = px_store_resolve(who, s->host, s->port, 0, &res);
    if (st) return st;
    double backoff = 0.01, start = px_now();
    int last = ECONNREFUSED, tries = 0, refused = 0;
    s->fd = -1;
    while (s->fd < 0) {
        for (struct addrinfo *ai = res; ai && s->fd < 0 && (tries == 0 || px_now() < deadline); ai = ai->ai_next) {
            s->fd = try_connect(ai, deadline);
            if (s->fd < 0) last = errno, tries++, refused += errno == ECONNREFUSED;
        }
        if (s->fd >= 0) break;
        if (last == ENETUNREACH || last == EHOSTUNREACH) {
            if (!refused_retry && px_now() < deadline) goto later; /* an outage may end */
            freeaddrinfo(res);
            return phx_error(PHX_EIO, "%s: host %s is unreachable (port %d): %s", who, s->host, s->port,
                             strerror(last));
        }
        if (last == ECONNREFUSED && !refused_retry) {
            freeaddrinfo(res);
            return phx_error(PHX_EPEER,
                             "%s: the store server at %s:%d%s closed the connection and refuses new ones (the "
                             "process that hosts it has exited?)",
                             who, s->host, s->port, s->base.host_of);
        }
    later:;
        double now = px_now();
        if (now >= deadline) {
            freeaddrinfo(res);
            if (refused == tries)
                return phx_error(PHX_ETIMEOUT,
                                 "%s: no store server at %s:%d%s after %.0f s: all %d connection attempts were "
                                 "refused (the host answers but nothing listens on port %d: is rank 0 started, "
                                 "with the same MASTER_PORT?)",
                                 who, s->host, s->port, s->base.host_of, now - start, tries, s->port);
            if (last == ETIMEDOUT)
                return phx_error(PHX_ETIMEOUT,
                                 "%s: no store server at %s:%d%s after %.0f s: the connection attempts timed out "
                                 "(no answer from %s: is the address right, the host up, a firewall dropping "
                                 "port %d?)",
                                 who, s->host, s->port, s->base.host_of, now - start, s->host, s->port);
            return phx_error(PHX_ETIMEOUT, "%s: no store server at %s:%d%s after %.0f s (last error: %s)", who, s->host,
                             s->port, s->base.host_of, now - start, strerror(last));
        }
        double nap = backoff < deadline - now ? backoff : deadline - now;
        struct timespec ts = {(time_t)nap, (long)((nap - (double)(time_t)nap) * 1e9)};
        nanosleep(&ts, NULL);
        backoff = backoff * 2 > 1.0 ? 1.0 : backoff * 2;
    }
    freeaddrinfo(res);
    return PHX_OK;
}

/* phxrun's attempt (PHX_RESTART_COUNT) or NULL: a server records it under
 * PX_STORE_ATTEMPT_KEY, and a client of another attempt has reached the
 * previous attempt's store, whose rank 0 is still exiting. */
static const char *env_attempt(void)
{
    const char *a = getenv("PHX_RESTART_COUNT");
    return a && *a && strlen(a) < 32 ? a : NULL;
}

/* Whether the server s reached records an attempt other than mine (its
 * value in theirs). A server that records none is taken as right. */
static int other_attempt(tcp_store *s, const char *mine, char *theirs, size_t len)
{
    void *v = NULL;
    size_t n = 0;
    if (phx_store_get(&s->base, PX_STORE_ATTEMPT_KEY, &v, &n, 1e-6) != PHX_OK) return 0;
    snprintf(theirs, len, "%.*s", (int)n, (const char *)v);
    free(v);
    return strcmp(theirs, mine) != 0;
}

/* Connects s to s->host:s->port with retry and backoff within the store's
 * timeout, then shakes hands. A server that closes the connection before
 * answering the handshake is tried again too: under phxrun
 * --max-restarts that is the previous attempt's store stopping (its rank
 * 0 exiting) while this rank of the next attempt connects. And a client
 * that reaches the store of another attempt hangs up and tries again
 * until the store of its own attempt answers (the old one goes with its
 * rank 0). */
static phx_status tcp_connect(tcp_store *s)
{
    double deadline = px_now() + s->base.timeout_s, backoff = 0.02;
    const char *mine = env_attempt();
    char theirs[40];
    for (;;) {
        phx_status st = connect_loop(s, "phx_store_new", deadline, 1);
        if (st) return st;
        int again = 1; /* another attempt's store, or one that closed before answering: stopping */
        if ((st = handshake(s, "phx_store_new", deadline)) != PHX_OK) {
            again = st == PHX_EPEER;
        } else {
            if (!mine) return PHX_OK;
            if (s->server) return phx_store_set(&s->base, PX_STORE_ATTEMPT_KEY, mine, strlen(mine));
            if (!other_attempt(s, mine, theirs, sizeof theirs)) return PHX_OK;
            st = phx_error(PHX_ETIMEOUT,
                           "phx_store_new: the store server at %s:%d%s is attempt %s's and this process is "
                           "attempt %s (PHX_RESTART_COUNT): the previous attempt's store was still there after "
                           "%.0f s (do all nodes run phxrun with the same --max-restarts?)",
                           s->host, s->port, s->base.host_of, theirs, mine, s->base.timeout_s);
        }
        close(s->fd);
        s->fd = -1;
        double now = px_now();
        if (!again || now >= deadline) return st; /* phx_last_error says why */
        double nap = backoff < deadline - now ? backoff : deadline - now;
        struct timespec ts = {(time_t)nap, (long)((nap - (double)(time_t)nap) * 1e9)};
        nanosleep(&ts, NULL);
        backoff = backoff * 2 > 0.5 ? 0.5 : backoff * 2;
    }
}

/* The connection broke: a new one before the deadline (the caller holds
 * the lock). A handshake the server does not answer in time means it
 * stopped answering; transact records that. */
static phx_status reconnect(tcp_store *s, const char *who, double deadline)
{
    phx_status st = connect_loop(s, who, deadline, 0);
    if (st) return st;
    if ((st = handshake(s, who, deadline))) {
        close(s->fd);
        s->fd = -1;
    }
    return st;
}
/* ------------------------------------------------------------- handles */

static tcp_store *tcp_alloc(const char *host, int port, double timeout_s, const uint8_t *token, size_t tlen,
                            const char *src)
{
    tcp_store *s = px_calloc(1, sizeof *s);
    if (!s) return NULL;
    s->base.ops = &tcp_ops;
    s->base.timeout_s = timeout_s;
    memcpy(s->token, token, tlen);
    s->token_len = tlen;
    snprintf(s->token_src, sizeof s->token_src, "%s", src);
    s->fd = -1;
    s->port = port;
    snprintf(s->host, sizeof s->host, "%s", host);
    pthread_mutex_init(&s->mu, NULL);
    return s;
}

/* A store for a world that spans nodes must be reachable from the other
 * nodes: a name that resolves only to loopback (Debian's /etc/hosts maps
 * the host's own name to 127.0.1.1), or the 127.0.0.1 assumed when
 * MASTER_ADDR is unset (gloo under a multi-host mpirun without -x
 * MASTER_ADDR), would make every rank wait PHX_TIMEOUT. */
static phx_status check_reachable(const char *host)
{
    if (!px_world_spans_nodes()) return PHX_OK;
    char ip[64];
    const char *ma = getenv("MASTER_ADDR");
    if (px_name_is_loopback(host, ip, sizeof ip))
        return phx_error(PHX_EINVAL,
                         "phx_store_new: this world spans nodes but the store's host '%s' resolves to %s, a "
                         "loopback address, which the other nodes cannot reach (see /etc/hosts, where Debian maps "
                         "the host's own name to 127.0.1.1); set MASTER_ADDR to node 0's address on the network",
                         host, ip);
    if ((!ma || !*ma) && !strcmp(host, "127.0.0.1"))
        return phx_error(PHX_EINVAL,
                         "phx_store_new: this world spans nodes but MASTER_ADDR is not set (127.0.0.1 assumed, "
                         "which the other nodes cannot reach); set MASTER_ADDR to node 0's address on every rank "
                         "(mpirun: -x MASTER_ADDR -x MASTER_PORT)");
    return PHX_OK;
}

phx_status phx_store_new(const char *host, int port, bool is_server, double timeout_s, phx_store **out)
{
    if (!out) return phx_error(PHX_EINVAL, "phx_store_new: out is NULL");
    if (!host || !*host) return phx_error(PHX_EINVAL, "phx_store_new: host is empty");
    if (strlen(host) >= 256) return phx_error(PHX_EINVAL, "phx_store_new: host name is longer than 255 bytes");
    if (port < (is_server ? 0 : 1) || port > 65535)
        return phx_error(PHX_EINVAL, "phx_store_new: port %d: expected %s..65535", port, is_server ? "0" : "1");
    phx_status st = check_reachable(host);
    if (st) return st;
    px_store_server *srv = NULL;
    uint8_t token[PX_STORE_MAX_TOKEN];
    size_t tlen;
    char src[320];
    st = px_store_token("phx_store_new", token, &tlen, src, sizeof src);
    if (st) return st;
    if (is_server) {
        if ((st = px_store_server_start(host, port, token, tlen, &srv))) return st;
        port = px_store_server_port(srv);
    }
    tcp_store *s = tcp_alloc(host, port, px_timeout(timeout_s), token, tlen, src);
    if (!s) {
        px_store_server_stop(srv, 0);
        return PHX_ENOMEM;
    }
    s->server = srv;
    if ((st = tcp_connect(s))) {
        px_store_server_stop(srv, 0);
        pthread_mutex_destroy(&s->mu);
        px_free(s);
        return st;
    }
    *out = &s->base;
    return PHX_OK;
}

static phx_status tcp_clone(phx_store *base, phx_store **out)
{
    tcp_store *s = tcp_of(base);
    tcp_store *c = tcp_alloc(s->host, s->port, base->timeout_s, s->token, s->token_len, s->token_src);
    if (!c) return PHX_ENOMEM;
    memcpy(c->base.host_of, base->host_of, sizeof c->base.host_of);
    phx_status st = tcp_connect(c);
    if (st) {
        pthread_mutex_destroy(&c->mu);
        px_free(c);
        return st;
    }
    *out = &c->base;
    return PHX_OK;
}

static void tcp_free(phx_store *base)
{
    tcp_store *s = tcp_of(base);
    if (s->fd >= 0) close(s->fd);
    /* The server lives until the other ranks have hung up (or timeout). */
    px_store_server_stop(s->server, base->timeout_s);
    pthread_mutex_destroy(&s->mu);
    px_free(s);
}

px_store_server *px_store_server_of(phx_store *s)
{
    return s && s->ops == &tcp_ops ? tcp_of(s)->server : NULL;
}

static int tcp_port(const phx_store *s)
{
    return ((const tcp_store *)s)->port;
}

static phx_status tcp_local_addr(const phx_store *base, char *buf, size_t len)
{
    const tcp_store *s = (const tcp_store *)base;
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    if (getsockname(s->fd, (struct sockaddr *)&sa, &sl) < 0)
        return phx_error(PHX_EIO, "phx_store_local_addr: getsockname: %s", strerror(errno));
    int rc = getnameinfo((struct sockaddr *)&sa, sl, buf, (socklen_t)len, NULL, 0, NI_NUMERICHOST);
    if (rc) return phx_error(PHX_EIO, "phx_store_local_addr: %s", gai_strerror(rc));
    return PHX_OK;
}

/* ---------------------------------------------------------- operations */

static phx_status tcp_set(phx_store *base, const char *who, const char *key, size_t kl, const void *value, size_t len)
{
    uint8_t kh[4], vh[4], *body;
    size_t blen;
    uint32_t status;
    px_put_u32(kh, (uint32_t)kl);
    px_put_u32(vh, (uint32_t)len);
    struct iovec p[4] = {{kh, 4}, {(void *)key, kl}, {vh, 4}, {(void *)value, len}};
    phx_status st = transact(tcp_of(base), who, PX_OP_SET, p, 4, 0, &status, &body, &blen);
    px_free(body);
    return st;
}

static phx_status tcp_get(phx_store *base, const char *who, const char *key, size_t kl, double t, void **value,
                          size_t *len)
{
    uint8_t kh[4], th[8], *body;
    size_t blen;
    uint32_t status;
    px_put_u32(kh, (uint32_t)kl);
    px_put_i64(th, (int64_t)(t * 1000.0));
    struct iovec p[3] = {{kh, 4}, {(void *)key, kl}, {th, 8}};
    phx_status st = transact(tcp_of(base), who, PX_OP_GET, p, 3, t, &status, &body, &blen);
    if (st) return st;
    if (status == PX_ST_TIMEOUT) {
        px_free(body);
        return px_store_not_set(who, key, t);
    }
    if (!body && !(body = px_store_dup_value("", 0))) return PHX_ENOMEM;
    *value = body;
    *len = blen;
    return PHX_OK;
}

static phx_status tcp_add(phx_store *base, const char *who, const char *key, size_t kl, int64_t delta, int64_t *result)
{
    uint8_t kh[4], dh[8], *body;
    size_t blen;
    uint32_t status;
    px_put_u32(kh, (uint32_t)kl);
    px_put_i64(dh, delta);
    struct iovec p[3] = {{kh, 4}, {(void *)key, kl}, {dh, 8}};
    phx_status st = transact(tcp_of(base), who, PX_OP_ADD, p, 3, 0, &status, &body, &blen);
    if (st) return st;
    if (status == PX_ST_NOTINT)
        st = px_store_not_int(who, key);
    else if (blen != 8)
        st = phx_error(PHX_EIO, "%s: malformed reply from the store server", who);
    else if (result)
        *result = px_get_i64(body);
    px_free(body);
    return st;
}

static phx_status tcp_wait(phx_store *base, const char *who, const char *const *keys, size_t n, double t)
{
    size_t total = px_store_wait_size(keys, n);
    uint8_t *buf = px_malloc(total), *body;
    if (!buf) return PHX_ENOMEM;
    px_put_i64(buf, (int64_t)(t * 1000.0));
    px_put_u32(buf + 8, (uint32_t)n);
    size_t off = 12;
    for (size_t i = 0; i < n; i++) {
        size_t kl = strlen(keys[i]);
        px_put_u32(buf + off, (uint32_t)kl);
        memcpy(buf + off + 4, keys[i], kl);
        off += 4 + kl;
    }
    size_t blen;
    uint32_t status;
    struct iovec p = {buf, total};
    phx_status st = transact(tcp_of(base), who, PX_OP_WAIT, &p, 1, t, &status, &body, &blen);
    px_free(buf);
    if (st) return st;
    if (status == PX_ST_TIMEOUT) {
        uint32_t miss = blen == 4 ? px_get_u32(body) : 0;
        st = px_store_not_set(who, miss < n ? keys[miss] : "?", t);
    }
    px_free(body);
    return st;
}

static phx_status tcp_compare_set(phx_store *base, const char *who, const char *key, size_t kl, const void *expected,
                                  size_t elen, const void *desired, size_t dlen, int want, uint8_t **now, size_t *nlen)
{
    uint8_t kh[4], eh[4], dh[4];
    uint32_t status;
    px_put_u32(kh, (uint32_t)kl);
    px_put_u32(eh, (uint32_t)elen);
    px_put_u32(dh, (uint32_t)dlen);
    struct iovec p[6] = {{kh, 4}, {(void *)key, kl},      {eh, 4}, {(void *)expected, elen},
                         {dh, 4}, {(void *)desired, dlen}};
    phx_status st = transact(tcp_of(base), who, PX_OP_CAS, p, 6, 0, &status, now, nlen);
    if (st == PHX_OK && !*now && want && !(*now = px_store_dup_value("", 0))) st = PHX_ENOMEM;
    return st;
}

static phx_status tcp_delete(phx_store *base, const char *who, const char *key, size_t kl, int *deleted)
{
    uint8_t kh[4], *body;
    size_t blen;
    uint32_t status;
    px_put_u32(kh, (uint32_t)kl);
    struct iovec p[2] = {{kh, 4}, {(void *)key, kl}};
    phx_status st = transact(tcp_of(base), who, PX_OP_DELETE, p, 2, 0, &status, &body, &blen);
    if (st) return st;
    if (blen != 4)
        st = phx_error(PHX_EIO, "%s: malformed reply from the store server", who);
    else if (deleted)
        *deleted = (int)px_get_u32(body);
    px_free(body);
    return st;
}

static phx_status tcp_num_keys(phx_store *base, const char *who, int64_t *count)
{
    uint8_t *body;
    size_t blen;
    uint32_t status;
    phx_status st = transact(tcp_of(base), who, PX_OP_NUMKEYS, NULL, 0, 0, &status, &body, &blen);
    if (st) return st;
    if (blen != 8)
        st = phx_error(PHX_EIO, "%s: malformed reply from the store server", who);
    else
        *count = px_get_i64(body);
    px_free(body);
    return st;
}

static const px_store_ops tcp_ops = {
    .in_process = 0,
    .set = tcp_set,
    .get = tcp_get,
    .add = tcp_add,
    .wait = tcp_wait,
    .compare_set = tcp_compare_set,
    .del = tcp_delete,
    .num_keys = tcp_num_keys,
    .clone = tcp_clone,
    .free = tcp_free,
    .port = tcp_port,
    .local_addr = tcp_local_addr,
};
