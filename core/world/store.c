/* phx_store: the TCP client (one connection per handle, one request at a
 * time, thread-safe) and the in-process store (a locked table and a
 * condition variable). Protocol: store-proto.h; server: store-server.h. */
#include "config.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include "core/world/store-server.h"
#include "core/base/util.h"

enum { PX_STORE_LOCAL = 1, PX_STORE_TCP = 2 };

/* Grace given to the server to answer a timed wait before the client
 * gives up on the connection itself. */
#define PX_STORE_REPLY_GRACE 10.0

typedef struct px_local {
    atomic_int refs;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC; broadcast on every change */
    px_kv *kv;
} px_local;

struct phx_store {
    int kind;
    double timeout_s;
    px_local *local; /* LOCAL */
    int fd; /* TCP */
    int broken; /* the stream lost sync: every call fails */
    pthread_mutex_t mu;
    char host[256];
    int port;
    px_store_server *server; /* owned when this handle started it */
    uint8_t token[PX_STORE_MAX_TOKEN]; /* PHX_STORE_TOKEN when made (TCP) */
    size_t token_len;
};

/* Milliseconds for poll(): never more than an hour (the callers loop). */
static int poll_ms(double s)
{
    if (!(s > 0)) return 0;
    if (s > 3600.0) s = 3600.0;
    return (int)(s * 1000.0) + 1;
}

static phx_status check_key(const char *who, const char *key)
{
    if (!key) return phx_error(PHX_EINVAL, "%s: key is NULL", who);
    size_t n = strlen(key);
    if (n > PHX_STORE_MAX_KEY)
        return phx_error(PHX_EINVAL, "%s: key is %zu bytes long, at most %u allowed", who, n, PHX_STORE_MAX_KEY);
    return PHX_OK;
}

static phx_status check_value(const char *who, const void *v, size_t len)
{
    if (!v && len) return phx_error(PHX_EINVAL, "%s: value is NULL with length %zu", who, len);
    if (len > PHX_STORE_MAX_VALUE)
        return phx_error(PHX_EINVAL, "%s: value is %zu bytes long, at most %u allowed", who, len, PHX_STORE_MAX_VALUE);
    return PHX_OK;
}

/* A malloc'd copy with a NUL after it (not counted in len). */
static void *dup_value(const void *v, size_t len)
{
    uint8_t *d = px_malloc(len + 1);
    if (!d) return NULL;
    if (len) memcpy(d, v, len);
    d[len] = 0;
    return d;
}

/* ------------------------------------------------------------------ local */

phx_store *phx_store_new_local(void)
{
    phx_store *s = px_calloc(1, sizeof *s);
    px_local *l = px_calloc(1, sizeof *l);
    if (!s || !l || !(l->kv = px_kv_new())) {
        px_free(s);
        px_free(l);
        return NULL;
    }
    atomic_init(&l->refs, 1);
    pthread_mutex_init(&l->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->cv, &ca);
    pthread_condattr_destroy(&ca);
    s->kind = PX_STORE_LOCAL;
    s->local = l;
    s->fd = -1;
    s->port = -1;
    s->timeout_s = px_env_timeout();
    return s;
}

/* Waits (mu held) until every key exists or the deadline; returns the
 * index of the first missing key, or n when all exist. */
static size_t local_wait(px_local *l, const char *const *keys, size_t n, double deadline)
{
    for (;;) {
        size_t i, vl;
        for (i = 0; i < n; i++)
            if (!px_kv_get(l->kv, keys[i], strlen(keys[i]), &vl)) break;
        if (i == n) return n;
        double now = px_now();
        if (now >= deadline) return i;
        double left = deadline - now;
        if (left > 1.0) left = 1.0;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        long ns = ts.tv_nsec + (long)(left * 1e9);
        ts.tv_sec += ns / 1000000000;
        ts.tv_nsec = ns % 1000000000;
        pthread_cond_timedwait(&l->cv, &l->mu, &ts);
    }
}

/* -------------------------------------------------------------------- tcp */

/* Sends or receives iov completely before the deadline. */
static phx_status io_all(phx_store *s, int sending, struct iovec *iov, int niov, double deadline, const char *who)
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
            if (left <= 0) {
                s->broken = 1;
                return phx_error(PHX_ETIMEOUT, "%s: no reply from the store server at %s:%d", who, s->host, s->port);
            }
            struct pollfd p = {.fd = s->fd, .events = sending ? POLLOUT : POLLIN};
            poll(&p, 1, poll_ms(left));
            continue;
        }
        s->broken = 1;
        return phx_error(PHX_EPEER, "%s: the store server at %s:%d closed the connection%s%s", who, s->host, s->port,
                         n < 0 ? ": " : "", n < 0 ? strerror(errno) : "");
    }
    return PHX_OK;
}

/* One request/reply. The reply body (if any) is px_malloc'd into *body. */
static phx_status transact(phx_store *s, const char *who, uint32_t op, struct iovec *parts, int nparts, double wait_s,
                           uint32_t *status, uint8_t **body, size_t *blen)
{
    uint8_t hdr[PX_STORE_HDR], rhdr[PX_STORE_HDR];
    size_t len = 0;
    struct iovec iov[8];
    for (int i = 0; i < nparts; i++) len += parts[i].iov_len;
    px_put_u32(hdr, (uint32_t)len);
    px_put_u32(hdr + 4, op);
    iov[0] = (struct iovec){hdr, sizeof hdr};
    if (nparts) memcpy(iov + 1, parts, (size_t)nparts * sizeof *parts);
    *body = NULL;
    *blen = 0;
    pthread_mutex_lock(&s->mu);
    phx_status st;
    if (s->broken) {
        st = phx_error(PHX_EIO, "%s: the connection to the store server at %s:%d was lost earlier", who, s->host,
                       s->port);
        goto out;
    }
    double deadline = px_now() + wait_s + PX_STORE_REPLY_GRACE;
    if ((st = io_all(s, 1, iov, nparts + 1, deadline, who))) goto out;
    iov[0] = (struct iovec){rhdr, sizeof rhdr};
    if ((st = io_all(s, 0, iov, 1, deadline, who))) goto out;
    size_t rlen = px_get_u32(rhdr);
    *status = px_get_u32(rhdr + 4);
    if (rlen > (size_t)PHX_STORE_MAX_VALUE + 8) {
        s->broken = 1;
        st = phx_error(PHX_EIO, "%s: the store server at %s:%d sent a %zu-byte reply (protocol error)", who, s->host,
                       s->port, rlen);
        goto out;
    }
    if (rlen) {
        if (!(*body = px_malloc(rlen + 1))) {
            s->broken = 1;
            st = PHX_ENOMEM;
            goto out;
        }
        iov[0] = (struct iovec){*body, rlen};
        if ((st = io_all(s, 0, iov, 1, deadline, who))) {
            px_free(*body);
            *body = NULL;
            goto out;
        }
        (*body)[rlen] = 0;
        *blen = rlen;
    }
out:
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

/* HELLO, then AUTH when either side has a job token (doc/store.md). */
static phx_status handshake(phx_store *s, double wait_s)
{
    const char *who = "phx_store_new";
    uint8_t hello[PX_STORE_HELLO_BODY], cnonce[PX_STORE_NONCE], *body = NULL;
    size_t blen;
    uint32_t status = 0;
    phx_status st = px_store_nonce(cnonce, sizeof cnonce);
    if (st) return st;
    px_put_u32(hello, PX_STORE_MAGIC);
    px_put_u32(hello + 4, PX_STORE_VERSION);
    memcpy(hello + 8, cnonce, sizeof cnonce);
    struct iovec part = {hello, sizeof hello};
    st = transact(s, who, PX_OP_HELLO, &part, 1, wait_s, &status, &body, &blen);
    if (st == PHX_ETIMEOUT) {
        char why[256];
        snprintf(why, sizeof why, "%s", phx_last_error());
        return phx_error(st,
                         "%s: %s:%d accepted the connection but did not answer the handshake (%s); is the "
                         "server overloaded or out of file descriptors?",
                         who, s->host, s->port, why);
    }
    if (st) {
        char why[256];
        snprintf(why, sizeof why, "%s", phx_last_error());
        return phx_error(st, "%s: %s:%d does not speak the Phalanx store protocol (%s)", who, s->host, s->port, why);
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
                         "is not set in this process (phxrun sets it for its ranks; other launchers: export the "
                         "same PHX_STORE_TOKEN on every rank)",
                         who, s->host, s->port);
    if (!needs)
        return phx_error(PHX_EIO,
                         "%s: PHX_STORE_TOKEN is set in this process but the store server at %s:%d "
                         "runs without a job token (was it started with another environment?); every rank "
                         "must have the same PHX_STORE_TOKEN",
                         who, s->host, s->port);
    if (px_store_proof(s->token, s->token_len, "client", cnonce, snonce, proof))
        return phx_error(PHX_EIO, "%s: cannot compute the token proof (OpenSSL HMAC failed)", who);
    part = (struct iovec){proof, sizeof proof};
    if ((st = transact(s, who, PX_OP_AUTH, &part, 1, wait_s, &status, &body, &blen))) return st;
    if (status == PX_ST_DENIED) {
        px_free(body);
        return phx_error(PHX_EIO,
                         "%s: the store server at %s:%d refused this process's PHX_STORE_TOKEN (it "
                         "differs from the job's token the server was started with)",
                         who, s->host, s->port);
    }
    int good = status == PX_ST_OK && blen == PX_STORE_NONCE &&
        px_store_proof(s->token, s->token_len, "server", cnonce, snonce, proof) == 0 && px_store_proof_eq(proof, body);
    px_free(body);
    if (!good)
        return phx_error(PHX_EIO,
                         "%s: the server at %s:%d could not prove it knows PHX_STORE_TOKEN (another "
                         "program listens on that port?)",
                         who, s->host, s->port);
    return PHX_OK;
}

/* Connects s to s->host:s->port with retry and backoff, then shakes hands. */
static phx_status tcp_connect(phx_store *s)
{
    const char *who = "phx_store_new";
    struct addrinfo *res;
    phx_status st = px_store_resolve(who, s->host, s->port, 0, &res);
    if (st) return st;
    double start = px_now(), deadline = start + s->timeout_s, backoff = 0.01;
    int last = ECONNREFUSED;
    s->fd = -1;
    while (s->fd < 0) {
        for (struct addrinfo *ai = res; ai && s->fd < 0; ai = ai->ai_next) {
            s->fd = try_connect(ai, deadline);
            if (s->fd < 0) last = errno;
        }
        if (s->fd >= 0) break;
        if (last == ENETUNREACH || last == EHOSTUNREACH) {
            freeaddrinfo(res);
            return phx_error(PHX_EIO, "%s: host %s is unreachable (port %d): %s", who, s->host, s->port,
                             strerror(last));
        }
        double now = px_now();
        if (now >= deadline) {
            freeaddrinfo(res);
            return phx_error(PHX_ETIMEOUT, "%s: no store server at %s:%d after %.0f s (last error: %s)", who, s->host,
                             s->port, s->timeout_s, strerror(last));
        }
        double nap = backoff < deadline - now ? backoff : deadline - now;
        struct timespec ts = {(time_t)nap, (long)((nap - (double)(time_t)nap) * 1e9)};
        nanosleep(&ts, NULL);
        backoff = backoff * 2 > 1.0 ? 1.0 : backoff * 2;
    }
    freeaddrinfo(res);
    double left = deadline - px_now();
    st = handshake(s, (left > 1 ? left : 1) - PX_STORE_REPLY_GRACE);
    if (st) {
        close(s->fd);
        s->fd = -1;
    }
    return st;
}

static phx_store *tcp_alloc(const char *host, int port, double timeout_s, const uint8_t *token, size_t tlen)
{
    phx_store *s = px_calloc(1, sizeof *s);
    if (!s) return NULL;
    memcpy(s->token, token, tlen);
    s->token_len = tlen;
    s->kind = PX_STORE_TCP;
    s->fd = -1;
    s->port = port;
    s->timeout_s = timeout_s;
    snprintf(s->host, sizeof s->host, "%s", host);
    pthread_mutex_init(&s->mu, NULL);
    return s;
}

phx_status phx_store_new(const char *host, int port, bool is_server, double timeout_s, phx_store **out)
{
    if (!out) return phx_error(PHX_EINVAL, "phx_store_new: out is NULL");
    if (!host || !*host) return phx_error(PHX_EINVAL, "phx_store_new: host is empty");
    if (strlen(host) >= 256) return phx_error(PHX_EINVAL, "phx_store_new: host name is longer than 255 bytes");
    if (port < (is_server ? 0 : 1) || port > 65535)
        return phx_error(PHX_EINVAL, "phx_store_new: port %d: expected %s..65535", port, is_server ? "0" : "1");
    px_store_server *srv = NULL;
    uint8_t token[PX_STORE_MAX_TOKEN];
    size_t tlen;
    phx_status st = px_store_token("phx_store_new", token, &tlen);
    if (st) return st;
    if (is_server) {
        if ((st = px_store_server_start(host, port, token, tlen, &srv))) return st;
        port = px_store_server_port(srv);
    }
    phx_store *s = tcp_alloc(host, port, px_timeout(timeout_s), token, tlen);
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
    *out = s;
    return PHX_OK;
}

phx_status phx_store_clone(phx_store *s, phx_store **out)
{
    if (!s || !out) return phx_error(PHX_EINVAL, "phx_store_clone: %s is NULL", s ? "out" : "store");
    if (s->kind == PX_STORE_LOCAL) {
        phx_store *c = px_calloc(1, sizeof *c);
        if (!c) return PHX_ENOMEM;
        *c = *s;
        atomic_fetch_add(&s->local->refs, 1);
        *out = c;
        return PHX_OK;
    }
    phx_store *c = tcp_alloc(s->host, s->port, s->timeout_s, s->token, s->token_len);
    if (!c) return PHX_ENOMEM;
    phx_status st = tcp_connect(c);
    if (st) {
        pthread_mutex_destroy(&c->mu);
        px_free(c);
        return st;
    }
    *out = c;
    return PHX_OK;
}

void phx_store_free(phx_store *s)
{
    if (!s) return;
    if (s->kind == PX_STORE_LOCAL) {
        if (atomic_fetch_sub(&s->local->refs, 1) == 1) {
            px_kv_free(s->local->kv);
            pthread_mutex_destroy(&s->local->mu);
            pthread_cond_destroy(&s->local->cv);
            px_free(s->local);
        }
        px_free(s);
        return;
    }
    if (s->fd >= 0) close(s->fd);
    /* The server lives until the other ranks have hung up (or timeout). */
    px_store_server_stop(s->server, s->timeout_s);
    pthread_mutex_destroy(&s->mu);
    px_free(s);
}

px_store_server *px_store_server_of(phx_store *s)
{
    return s && s->kind == PX_STORE_TCP ? s->server : NULL;
}

int phx_store_port(const phx_store *s)
{
    return s && s->kind == PX_STORE_TCP ? s->port : -1;
}

int phx_store_is_local(const phx_store *s)
{
    return s && s->kind == PX_STORE_LOCAL;
}

phx_status phx_store_local_addr(const phx_store *s, char *buf, size_t len)
{
    if (!s || !buf || !len) return phx_error(PHX_EINVAL, "phx_store_local_addr: NULL argument");
    if (s->kind != PX_STORE_TCP)
        return phx_error(PHX_EUNSUPPORTED, "phx_store_local_addr: an in-process store has no network address");
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    if (getsockname(s->fd, (struct sockaddr *)&sa, &sl) < 0)
        return phx_error(PHX_EIO, "phx_store_local_addr: getsockname: %s", strerror(errno));
    int rc = getnameinfo((struct sockaddr *)&sa, sl, buf, (socklen_t)len, NULL, 0, NI_NUMERICHOST);
    if (rc) return phx_error(PHX_EIO, "phx_store_local_addr: %s", gai_strerror(rc));
    return PHX_OK;
}

/* ------------------------------------------------------------ operations */

phx_status phx_store_set(phx_store *s, const char *key, const void *value, size_t len)
{
    static const char who[] = "phx_store_set";
    phx_status st;
    if (!s) return phx_error(PHX_EINVAL, "%s: store is NULL", who);
    if ((st = check_key(who, key)) || (st = check_value(who, value, len))) return st;
    size_t kl = strlen(key);
    if (s->kind == PX_STORE_LOCAL) {
        pthread_mutex_lock(&s->local->mu);
        st = px_kv_set(s->local->kv, key, kl, value, len);
        pthread_cond_broadcast(&s->local->cv);
        pthread_mutex_unlock(&s->local->mu);
        return st;
    }
    uint8_t kh[4], vh[4], *body;
    size_t blen;
    uint32_t status;
    px_put_u32(kh, (uint32_t)kl);
    px_put_u32(vh, (uint32_t)len);
    struct iovec p[4] = {{kh, 4}, {(void *)key, kl}, {vh, 4}, {(void *)value, len}};
    st = transact(s, who, PX_OP_SET, p, 4, 0, &status, &body, &blen);
    px_free(body);
    return st;
}

phx_status phx_store_get(phx_store *s, const char *key, void **value, size_t *len, double timeout_s)
{
    static const char who[] = "phx_store_get";
    phx_status st;
    if (!s || !value || !len) return phx_error(PHX_EINVAL, "%s: NULL argument", who);
    if ((st = check_key(who, key))) return st;
    double t = timeout_s > 0 ? px_timeout(timeout_s) : s->timeout_s;
    size_t kl = strlen(key);
    if (s->kind == PX_STORE_LOCAL) {
        px_local *l = s->local;
        pthread_mutex_lock(&l->mu);
        size_t vl;
        const uint8_t *v = NULL;
        if (local_wait(l, &key, 1, px_now() + t) == 1) v = px_kv_get(l->kv, key, kl, &vl);
        void *copy = v ? dup_value(v, vl) : NULL;
        pthread_mutex_unlock(&l->mu);
        if (!v) return phx_error(PHX_ETIMEOUT, "%s: key '%s' not set after %.3g s", who, key, t);
        if (!copy) return PHX_ENOMEM;
        *value = copy;
        *len = vl;
        return PHX_OK;
    }
    uint8_t kh[4], th[8], *body;
    size_t blen;
    uint32_t status;
    px_put_u32(kh, (uint32_t)kl);
    px_put_i64(th, (int64_t)(t * 1000.0));
    struct iovec p[3] = {{kh, 4}, {(void *)key, kl}, {th, 8}};
    if ((st = transact(s, who, PX_OP_GET, p, 3, t, &status, &body, &blen))) return st;
    if (status == PX_ST_TIMEOUT) {
        px_free(body);
        return phx_error(PHX_ETIMEOUT, "%s: key '%s' not set after %.3g s", who, key, t);
    }
    if (!body && !(body = dup_value("", 0))) return PHX_ENOMEM;
    *value = body;
    *len = blen;
    return PHX_OK;
}

phx_status phx_store_add(phx_store *s, const char *key, int64_t delta, int64_t *result)
{
    static const char who[] = "phx_store_add";
    phx_status st;
    if (!s) return phx_error(PHX_EINVAL, "%s: store is NULL", who);
    if ((st = check_key(who, key))) return st;
    size_t kl = strlen(key);
    if (s->kind == PX_STORE_LOCAL) {
        pthread_mutex_lock(&s->local->mu);
        st = px_kv_add(s->local->kv, key, kl, delta, result);
        pthread_cond_broadcast(&s->local->cv);
        pthread_mutex_unlock(&s->local->mu);
        if (st == PHX_EINVAL) phx_error(st, "%s: key '%s' holds a value that is not a decimal integer", who, key);
        return st;
    }
    uint8_t kh[4], dh[8], *body;
    size_t blen;
    uint32_t status;
    px_put_u32(kh, (uint32_t)kl);
    px_put_i64(dh, delta);
    struct iovec p[3] = {{kh, 4}, {(void *)key, kl}, {dh, 8}};
    if ((st = transact(s, who, PX_OP_ADD, p, 3, 0, &status, &body, &blen))) return st;
    if (status == PX_ST_NOTINT)
        st = phx_error(PHX_EINVAL, "%s: key '%s' holds a value that is not a decimal integer", who, key);
    else if (blen != 8)
        st = phx_error(PHX_EIO, "%s: malformed reply from the store server", who);
    else if (result)
        *result = px_get_i64(body);
    px_free(body);
    return st;
}

phx_status phx_store_wait(phx_store *s, const char *const *keys, size_t n, double timeout_s)
{
    static const char who[] = "phx_store_wait";
    phx_status st;
    if (!s || (!keys && n)) return phx_error(PHX_EINVAL, "%s: NULL argument", who);
    size_t total = 12;
    for (size_t i = 0; i < n; i++) {
        if ((st = check_key(who, keys[i]))) return st;
        total += 4 + strlen(keys[i]);
    }
    if (total > PX_STORE_MAX_WAIT_BODY)
        return phx_error(PHX_EINVAL, "%s: %zu keys take %zu bytes, at most %u allowed in one wait", who, n, total,
                         PX_STORE_MAX_WAIT_BODY);
    double t = timeout_s > 0 ? px_timeout(timeout_s) : s->timeout_s;
    if (s->kind == PX_STORE_LOCAL) {
        pthread_mutex_lock(&s->local->mu);
        size_t miss = local_wait(s->local, keys, n, px_now() + t);
        pthread_mutex_unlock(&s->local->mu);
        if (miss < n) return phx_error(PHX_ETIMEOUT, "%s: key '%s' not set after %.3g s", who, keys[miss], t);
        return PHX_OK;
    }
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
    st = transact(s, who, PX_OP_WAIT, &p, 1, t, &status, &body, &blen);
    px_free(buf);
    if (st) return st;
    if (status == PX_ST_TIMEOUT) {
        uint32_t miss = blen == 4 ? px_get_u32(body) : 0;
        st = phx_error(PHX_ETIMEOUT, "%s: key '%s' not set after %.3g s", who, miss < n ? keys[miss] : "?", t);
    }
    px_free(body);
    return st;
}

phx_status phx_store_compare_set(phx_store *s, const char *key, const void *expected, size_t elen, const void *desired,
                                 size_t dlen, void **actual, size_t *alen)
{
    static const char who[] = "phx_store_compare_set";
    phx_status st;
    if (!s) return phx_error(PHX_EINVAL, "%s: store is NULL", who);
    if ((st = check_key(who, key)) || (st = check_value(who, expected, elen)) || (st = check_value(who, desired, dlen)))
        return st;
    size_t kl = strlen(key);
    uint8_t *now = NULL;
    size_t nlen = 0;
    if (s->kind == PX_STORE_LOCAL) {
        pthread_mutex_lock(&s->local->mu);
        st = px_kv_cas(s->local->kv, key, kl, expected, elen, desired, dlen, NULL);
        pthread_cond_broadcast(&s->local->cv);
        const uint8_t *v = px_kv_get(s->local->kv, key, kl, &nlen);
        if (st == PHX_OK && actual && !(now = dup_value(v ? v : (const uint8_t *)"", v ? nlen : 0))) st = PHX_ENOMEM;
        if (!v) nlen = 0;
        pthread_mutex_unlock(&s->local->mu);
    } else {
        uint8_t kh[4], eh[4], dh[4];
        uint32_t status;
        px_put_u32(kh, (uint32_t)kl);
        px_put_u32(eh, (uint32_t)elen);
        px_put_u32(dh, (uint32_t)dlen);
        struct iovec p[6] = {{kh, 4}, {(void *)key, kl},      {eh, 4}, {(void *)expected, elen},
                             {dh, 4}, {(void *)desired, dlen}};
        st = transact(s, who, PX_OP_CAS, p, 6, 0, &status, &now, &nlen);
        if (st == PHX_OK && !now && actual && !(now = dup_value("", 0))) st = PHX_ENOMEM;
    }
    if (st == PHX_OK && actual) {
        *actual = now;
        if (alen) *alen = nlen;
    } else {
        px_free(now);
        if (st == PHX_OK && alen) *alen = nlen;
    }
    return st;
}

phx_status phx_store_delete(phx_store *s, const char *key, int *deleted)
{
    static const char who[] = "phx_store_delete";
    phx_status st;
    if (!s) return phx_error(PHX_EINVAL, "%s: store is NULL", who);
    if ((st = check_key(who, key))) return st;
    size_t kl = strlen(key);
    if (s->kind == PX_STORE_LOCAL) {
        pthread_mutex_lock(&s->local->mu);
        int d = px_kv_delete(s->local->kv, key, kl);
        pthread_mutex_unlock(&s->local->mu);
        if (deleted) *deleted = d;
        return PHX_OK;
    }
    uint8_t kh[4], *body;
    size_t blen;
    uint32_t status;
    px_put_u32(kh, (uint32_t)kl);
    struct iovec p[2] = {{kh, 4}, {(void *)key, kl}};
    if ((st = transact(s, who, PX_OP_DELETE, p, 2, 0, &status, &body, &blen))) return st;
    if (blen != 4)
        st = phx_error(PHX_EIO, "%s: malformed reply from the store server", who);
    else if (deleted)
        *deleted = (int)px_get_u32(body);
    px_free(body);
    return st;
}

phx_status phx_store_num_keys(phx_store *s, int64_t *count)
{
    static const char who[] = "phx_store_num_keys";
    if (!s || !count) return phx_error(PHX_EINVAL, "%s: NULL argument", who);
    if (s->kind == PX_STORE_LOCAL) {
        pthread_mutex_lock(&s->local->mu);
        *count = px_kv_count(s->local->kv);
        pthread_mutex_unlock(&s->local->mu);
        return PHX_OK;
    }
    uint8_t *body;
    size_t blen;
    uint32_t status;
    phx_status st = transact(s, who, PX_OP_NUMKEYS, NULL, 0, 0, &status, &body, &blen);
    if (st) return st;
    if (blen != 8)
        st = phx_error(PHX_EIO, "%s: malformed reply from the store server", who);
    else
        *count = px_get_i64(body);
    px_free(body);
    return st;
}
