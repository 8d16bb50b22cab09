/* The store's TCP server: one thread polls the listening socket, a wake-up
 * pipe and every client. Each client has at most one request in progress;
 * GET and WAIT on missing keys are parked until a write makes them true or
 * their deadline passes. A client that breaks the protocol (doc/store.md)
 * is disconnected; the others are not affected. */
#include "config.h"
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>
#include "core/world/store-proto.h"
#include "core/base/util.h"
#include "phalanx/log.h"

typedef struct conn {
    int fd;
    int hello;                   /* handshake done */
    uint8_t hdr[PX_STORE_HDR];
    size_t hdr_got;
    uint8_t *body;               /* request body (px_malloc'd) */
    uint32_t op;
    size_t body_len, body_got;
    int parked;                  /* GET/WAIT waiting for keys */
    double deadline;             /* parked until (< 0: forever) */
    uint8_t *out;                /* reply bytes */
    size_t out_len, out_off, out_cap;
} conn;

struct px_store_server {
    int lfd, port;
    int wake[2];                 /* pipe: a byte wakes the thread to stop */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    size_t nclients;             /* under mu: for the linger in stop */
    conn **conns;
    size_t nconns, capconns;
    px_kv *kv;
};

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
    if (rc != 0)
        return phx_error(PHX_EIO, "%s: cannot resolve host '%s': %s", who, host, gai_strerror(rc));
    return PHX_OK;
}

static void conn_close(px_store_server *s, size_t i)
{
    conn *c = s->conns[i];
    close(c->fd);
    px_free(c->body);
    px_free(c->out);
    px_free(c);
    s->conns[i] = s->conns[--s->nconns];
    pthread_mutex_lock(&s->mu);
    s->nclients--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void drop(px_store_server *s, size_t i, const char *why)
{
    phx_log(PHX_LOG_WARN, "store server: disconnecting client (fd %d): %s", s->conns[i]->fd, why);
    conn_close(s, i);
}

/* Appends a reply frame; -1 when out of memory. */
static int reply(conn *c, uint32_t status, const void *a, size_t alen, const void *b, size_t blen)
{
    size_t need = c->out_len + PX_STORE_HDR + alen + blen;
    if (need > c->out_cap) {
        uint8_t *o = px_realloc(c->out, need);
        if (!o) return -1;
        c->out = o;
        c->out_cap = need;
    }
    uint8_t *p = c->out + c->out_len;
    px_put_u32(p, (uint32_t)(alen + blen));
    px_put_u32(p + 4, status);
    if (alen) memcpy(p + PX_STORE_HDR, a, alen);
    if (blen) memcpy(p + PX_STORE_HDR + alen, b, blen);
    c->out_len = need;
    return 0;
}

static int reply_i64(conn *c, int64_t x)
{
    uint8_t b[8];
    px_put_i64(b, x);
    return reply(c, PX_ST_OK, b, 8, NULL, 0);
}

static int reply_u32(conn *c, uint32_t status, uint32_t x)
{
    uint8_t b[4];
    px_put_u32(b, x);
    return reply(c, status, b, 4, NULL, 0);
}

/* A parked (or new) GET/WAIT: 1 answered, 0 still waiting, -1 error. */
static int try_wait(px_store_server *s, conn *c, double now)
{
    px_rd r = {c->body, c->body_len};
    const uint8_t *k;
    size_t kl, vl;
    int64_t tmo;
    uint32_t n, missing = UINT32_MAX;
    if (c->op == PX_OP_GET) {
        if (px_rd_bytes(&r, PHX_STORE_MAX_KEY, &k, &kl) || px_rd_i64(&r, &tmo) || r.left) return -1;
        const uint8_t *v = px_kv_get(s->kv, k, kl, &vl);
        if (v) { c->parked = 0; return reply(c, PX_ST_OK, v, vl, NULL, 0) ? -1 : 1; }
        missing = 0;
    } else {
        if (px_rd_i64(&r, &tmo) || px_rd_u32(&r, &n)) return -1;
        for (uint32_t i = 0; i < n; i++) {
            if (px_rd_bytes(&r, PHX_STORE_MAX_KEY, &k, &kl)) return -1;
            if (missing == UINT32_MAX && !px_kv_get(s->kv, k, kl, &vl)) missing = i;
        }
        if (r.left) return -1;
        if (missing == UINT32_MAX) { c->parked = 0; return reply(c, PX_ST_OK, NULL, 0, NULL, 0) ? -1 : 1; }
    }
    if (!c->parked) {
        c->parked = 1;
        c->deadline = tmo < 0 ? -1.0 : now + (double)tmo / 1000.0;
    }
    if (c->deadline >= 0 && now >= c->deadline) {
        c->parked = 0;
        return reply_u32(c, PX_ST_TIMEOUT, missing) ? -1 : 1;
    }
    return 0;
}

/* Executes the complete request in c->body; -1 = protocol error. */
static int handle(px_store_server *s, conn *c, double now, int *changed)
{
    px_rd r = {c->body, c->body_len};
    const uint8_t *k, *v, *e;
    size_t kl, vl, el;
    int64_t x, res;
    uint32_t u, ver;
    if (!c->hello) {
        if (c->op != PX_OP_HELLO || px_rd_u32(&r, &u) || px_rd_u32(&r, &ver) || u != PX_STORE_MAGIC) return -1;
        c->hello = 1;
        return reply_u32(c, PX_ST_OK, PX_STORE_VERSION);
    }
    switch (c->op) {
    case PX_OP_SET:
        if (px_rd_bytes(&r, PHX_STORE_MAX_KEY, &k, &kl) || px_rd_bytes(&r, PHX_STORE_MAX_VALUE, &v, &vl) || r.left)
            return -1;
        if (px_kv_set(s->kv, k, kl, v, vl)) return -1;
        *changed = 1;
        return reply(c, PX_ST_OK, NULL, 0, NULL, 0);
    case PX_OP_GET:
    case PX_OP_WAIT:
        return try_wait(s, c, now) < 0 ? -1 : 0;
    case PX_OP_ADD:
        if (px_rd_bytes(&r, PHX_STORE_MAX_KEY, &k, &kl) || px_rd_i64(&r, &x) || r.left) return -1;
        if (px_kv_add(s->kv, k, kl, x, &res) != PHX_OK) return reply(c, PX_ST_NOTINT, NULL, 0, NULL, 0);
        *changed = 1;
        return reply_i64(c, res);
    case PX_OP_CAS:
        if (px_rd_bytes(&r, PHX_STORE_MAX_KEY, &k, &kl) || px_rd_bytes(&r, PHX_STORE_MAX_VALUE, &e, &el) ||
            px_rd_bytes(&r, PHX_STORE_MAX_VALUE, &v, &vl) || r.left)
            return -1;
        if (px_kv_cas(s->kv, k, kl, e, el, v, vl)) return -1;
        *changed = 1;
        v = px_kv_get(s->kv, k, kl, &vl);
        return reply(c, PX_ST_OK, v, v ? vl : 0, NULL, 0);
    case PX_OP_DELETE:
        if (px_rd_bytes(&r, PHX_STORE_MAX_KEY, &k, &kl) || r.left) return -1;
        return reply_u32(c, PX_ST_OK, (uint32_t)px_kv_delete(s->kv, k, kl));
    case PX_OP_NUMKEYS:
        if (r.left) return -1;
        return reply_i64(c, px_kv_count(s->kv));
    default:
        return -1;
    }
}

/* The request is answered: forget it. */
static void request_done(conn *c)
{
    px_free(c->body);
    c->body = NULL;
    c->hdr_got = c->body_got = c->body_len = 0;
    c->parked = 0;
}

/* Writes what it can; -1 when the peer is gone. */
static int flush_out(conn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        if (n <= 0) return -1;
        c->out_off += (size_t)n;
    }
    c->out_off = c->out_len = 0;
    return 0;
}

/* Reads what is there; returns 1 when a request is complete, 0 when more
 * is needed, -1 on EOF or error (*why says which). */
static int read_some(conn *c, const char **why)
{
    for (;;) {
        uint8_t *dst;
        size_t want;
        if (c->hdr_got < PX_STORE_HDR) {
            dst = c->hdr + c->hdr_got;
            want = PX_STORE_HDR - c->hdr_got;
        } else {
            dst = c->body + c->body_got;
            want = c->body_len - c->body_got;
        }
        if (want == 0) return 1;
        ssize_t n = recv(c->fd, dst, want, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        if (n <= 0) {
            *why = (c->hdr_got || c->body_got) ? "connection closed in the middle of a frame" : NULL;
            return -1;
        }
        if (c->hdr_got < PX_STORE_HDR) {
            c->hdr_got += (size_t)n;
            if (c->hdr_got < PX_STORE_HDR) continue;
            c->body_len = px_get_u32(c->hdr);
            c->op = px_get_u32(c->hdr + 4);
            size_t max = px_store_max_body(c->op);
            if (c->op == 0 || c->op > PX_OP_MAX) { *why = "unknown request type"; return -1; }
            if (c->body_len > max) { *why = "frame length exceeds the limit for its type"; return -1; }
            c->body = px_malloc(c->body_len);
            if (!c->body) { *why = "out of memory"; return -1; }
            c->body_got = 0;
        } else {
            c->body_got += (size_t)n;
        }
    }
}

static void accept_clients(px_store_server *s)
{
    for (;;) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (s->nconns == s->capconns) {
            size_t cap = s->capconns ? 2 * s->capconns : 16;
            conn **cs = px_realloc(s->conns, cap * sizeof *cs);
            if (!cs) { close(fd); return; }
            s->conns = cs;
            s->capconns = cap;
        }
        conn *c = px_calloc(1, sizeof *c);
        if (!c) { close(fd); return; }
        c->fd = fd;
        s->conns[s->nconns++] = c;
        pthread_mutex_lock(&s->mu);
        s->nclients++;
        pthread_mutex_unlock(&s->mu);
    }
}

/* Re-checks parked requests (after a change, or for deadlines). */
static void wake_parked(px_store_server *s, double now)
{
    for (size_t i = 0; i < s->nconns;) {
        conn *c = s->conns[i];
        if (c->parked) {
            int rc = try_wait(s, c, now);
            if (rc < 0 || (rc > 0 && flush_out(c) < 0)) { drop(s, i, "cannot answer a wait"); continue; }
            if (rc > 0) request_done(c);
        }
        i++;
    }
}

static void *server_main(void *arg)
{
    px_store_server *s = arg;
    struct pollfd *pf = NULL;
    size_t cap = 0;
    for (;;) {
        if (cap < s->nconns + 2) {
            cap = 2 * (s->nconns + 2);
            struct pollfd *p = px_realloc(pf, cap * sizeof *p);
            if (!p) { sleep(1); continue; }
            pf = p;
        }
        double now = px_now(), next = -1;
        pf[0] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
        pf[1] = (struct pollfd){.fd = s->lfd, .events = POLLIN};
        for (size_t i = 0; i < s->nconns; i++) {
            conn *c = s->conns[i];
            short ev = c->out_len ? POLLOUT : (c->parked ? 0 : POLLIN);
            pf[i + 2] = (struct pollfd){.fd = c->fd, .events = ev};
            if (c->parked && c->deadline >= 0 && (next < 0 || c->deadline < next)) next = c->deadline;
        }
        int tmo = -1;
        if (next >= 0) tmo = next <= now ? 0 : (int)((next - now) * 1000.0) + 1;
        size_t n = s->nconns;
        if (poll(pf, n + 2, tmo) < 0 && errno != EINTR) break;
        if (pf[0].revents) break;                 /* stop */
        now = px_now();
        int changed = 0;
        /* Walk backwards: dropping swaps the last client into slot i. */
        for (size_t i = n; i-- > 0;) {
            conn *c = s->conns[i];
            short re = pf[i + 2].revents;
            if (!re) continue;
            if (re & (POLLERR | POLLNVAL)) { conn_close(s, i); continue; }
            if (c->out_len) {
                if (flush_out(c) < 0) conn_close(s, i);
                continue;
            }
            if (c->parked) {
                if (re & POLLHUP) conn_close(s, i);
                continue;
            }
            const char *why = NULL;
            int rc = read_some(c, &why);
            if (rc < 0) {
                if (why) drop(s, i, why);
                else conn_close(s, i);
                continue;
            }
            if (rc == 0) continue;
            if (handle(s, c, now, &changed) < 0) { drop(s, i, "malformed request"); continue; }
            if (c->parked) continue;
            request_done(c);
            if (flush_out(c) < 0) conn_close(s, i);
        }
        if (changed || next >= 0) wake_parked(s, now);
        if (pf[1].revents & POLLIN) accept_clients(s);
    }
    px_free(pf);
    return NULL;
}

phx_status px_store_server_start(const char *host, int port, px_store_server **out)
{
    struct addrinfo *res;
    phx_status st = px_store_resolve("phx_store_new", host, port, 1, &res);
    if (st) return st;
    /* Bind the loopback address itself when asked for it (nothing outside
     * can connect); otherwise every interface of that family, so peers
     * reach us whatever name MASTER_ADDR gives this host. */
    struct sockaddr_storage sa;
    socklen_t salen = (socklen_t)res->ai_addrlen;
    memcpy(&sa, res->ai_addr, res->ai_addrlen);
    int fam = res->ai_family;
    freeaddrinfo(res);
    if (fam == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&sa;
        if ((ntohl(a->sin_addr.s_addr) >> 24) != 127) a->sin_addr.s_addr = htonl(INADDR_ANY);
    } else if (fam == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&sa;
        if (!IN6_IS_ADDR_LOOPBACK(&a->sin6_addr)) a->sin6_addr = in6addr_any;
    }
    int fd = socket(fam, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return phx_error(PHX_EIO, "phx_store_new: socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&sa, salen) < 0) {
        int e = errno;
        close(fd);
        if (e == EADDRINUSE)
            return phx_error(PHX_EIO, "phx_store_new: port %d on %s is in use (another job or store listens "
                             "there; choose another MASTER_PORT)", port, host);
        return phx_error(PHX_EIO, "phx_store_new: cannot bind %s:%d: %s", host, port, strerror(e));
    }
    if (listen(fd, 1024) < 0) {
        int e = errno;
        close(fd);
        return phx_error(PHX_EIO, "phx_store_new: listen on %s:%d: %s", host, port, strerror(e));
    }
    getsockname(fd, (struct sockaddr *)&sa, &salen);
    px_store_server *s = px_calloc(1, sizeof *s);
    if (!s) { close(fd); return PHX_ENOMEM; }
    s->lfd = fd;
    s->port = ntohs(fam == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port : ((struct sockaddr_in *)&sa)->sin_port);
    s->kv = px_kv_new();
    if (!s->kv || pipe2(s->wake, O_CLOEXEC) < 0) {
        st = s->kv ? phx_error(PHX_EIO, "phx_store_new: pipe: %s", strerror(errno)) : PHX_ENOMEM;
        px_kv_free(s->kv);
        close(fd);
        px_free(s);
        return st;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->thread, NULL, server_main, s) != 0) {
        close(s->wake[0]); close(s->wake[1]); close(fd);
        px_kv_free(s->kv);
        px_free(s);
        return phx_error(PHX_EIO, "phx_store_new: cannot start the server thread");
    }
    *out = s;
    return PHX_OK;
}

int px_store_server_port(const px_store_server *s) { return s ? s->port : -1; }

void px_store_server_stop(px_store_server *s, double linger_s)
{
    if (!s) return;
    double end = px_now() + linger_s;
    pthread_mutex_lock(&s->mu);
    while (s->nclients > 0 && px_now() < end) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    pthread_mutex_unlock(&s->mu);
    char b = 1;
    while (write(s->wake[1], &b, 1) < 0 && errno == EINTR) {}
    pthread_join(s->thread, NULL);
    for (size_t i = s->nconns; i-- > 0;) conn_close(s, i);
    close(s->lfd);
    close(s->wake[0]);
    close(s->wake[1]);
    px_free(s->conns);
    px_kv_free(s->kv);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    px_free(s);
}
