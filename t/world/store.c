/* The rendezvous store: every operation on both kinds (TCP and in-process),
 * concurrent clients, add under contention, wait and get timeouts, the
 * distinct connection errors, and a server that survives clients sending
 * garbage, truncated frames and huge lengths. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- the API, the same on both kinds of store */
static void api(phx_store *s, const char *kind)
{
    void *v = NULL;
    size_t n = 0;
    int64_t x = 0;
    int del = -1;
    is_int(phx_store_set(s, "a", "hello", 5), PHX_OK, "%s: set", kind);
    is_int(phx_store_get(s, "a", &v, &n, 1.0), PHX_OK, "%s: get", kind);
    ok(n == 5 && v && memcmp(v, "hello", 5) == 0 && ((char *)v)[5] == 0, "%s: get returns the value, NUL after", kind);
    free(v);
    const char bin[6] = {0, 1, 0, 2, 'z', 0};
    phx_store_set(s, "bin", bin, sizeof bin);
    phx_store_get(s, "bin", &v, &n, 1.0);
    ok(n == 6 && memcmp(v, bin, 6) == 0, "%s: binary value with NULs round-trips", kind);
    free(v);
    is_int(phx_store_set(s, "empty", NULL, 0), PHX_OK, "%s: empty value", kind);
    v = NULL;
    phx_store_get(s, "empty", &v, &n, 1.0);
    ok(v != NULL && n == 0, "%s: empty value reads back empty", kind);
    free(v);
    size_t big = 3u << 20;
    char *b = malloc(big);
    for (size_t i = 0; i < big; i++) b[i] = (char)(i * 7 + 3);
    phx_store_set(s, "big", b, big);
    phx_store_get(s, "big", &v, &n, 5.0);
    ok(n == big && memcmp(v, b, big) == 0, "%s: 3 MiB value round-trips", kind);
    free(v);
    free(b);

    is_int(phx_store_add(s, "ctr", 5, &x), PHX_OK, "%s: add to a missing key", kind);
    is_int(x, 5, "%s: add starts from 0", kind);
    phx_store_add(s, "ctr", -7, &x);
    is_int(x, -2, "%s: add a negative delta", kind);
    phx_store_get(s, "ctr", &v, &n, 1.0);
    is_str((char *)v, "-2", "%s: a counter reads as decimal text", kind);
    free(v);
    is_int(phx_store_add(s, "a", 1, &x), PHX_EINVAL, "%s: add on a non-integer value is PHX_EINVAL", kind);
    like(phx_last_error(), "not a decimal integer", "%s: ... saying why", kind);

    void *act = NULL;
    size_t al = 0;
    is_int(phx_store_compare_set(s, "cas", NULL, 0, "one", 3, &act, &al), PHX_OK, "%s: compare_set on a missing key",
           kind);
    ok(al == 3 && memcmp(act, "one", 3) == 0, "%s: missing + empty expected -> set", kind);
    free(act);
    phx_store_compare_set(s, "cas", "two", 3, "three", 5, &act, &al);
    ok(al == 3 && memcmp(act, "one", 3) == 0, "%s: wrong expected -> unchanged, returns current", kind);
    free(act);
    phx_store_compare_set(s, "cas", "one", 3, "three", 5, &act, &al);
    ok(al == 5 && memcmp(act, "three", 5) == 0, "%s: right expected -> swapped", kind);
    free(act);

    int64_t before = -1, after = -1;
    phx_store_num_keys(s, &before);
    is_int(phx_store_delete(s, "cas", &del), PHX_OK, "%s: delete", kind);
    is_int(del, 1, "%s: delete reports the key existed", kind);
    phx_store_delete(s, "cas", &del);
    is_int(del, 0, "%s: deleting again reports 0", kind);
    phx_store_num_keys(s, &after);
    is_int(after, before - 1, "%s: num_keys drops by one", kind);

    double t0 = now();
    const char *keys[] = {"a", "never-set"};
    phx_status st = phx_store_wait(s, keys, 2, 0.3);
    double dt = now() - t0;
    is_int(st, PHX_ETIMEOUT, "%s: wait for a missing key times out", kind);
    like(phx_last_error(), "'never-set'", "%s: ... naming the missing key", kind);
    ok(dt >= 0.25 && dt < 3.0, "%s: ... after about the timeout (%.2f s)", kind, dt);
    is_int(phx_store_get(s, "never-set", &v, &n, 0.2), PHX_ETIMEOUT, "%s: get of a missing key times out", kind);
    is_int(phx_store_wait(s, keys, 1, 0.2), PHX_OK, "%s: wait for present keys returns at once", kind);

    char longkey[PHX_STORE_MAX_KEY + 2];
    memset(longkey, 'k', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = 0;
    is_int(phx_store_set(s, longkey, "x", 1), PHX_EINVAL, "%s: key over PHX_STORE_MAX_KEY is PHX_EINVAL", kind);
    like(phx_last_error(), "at most 4096", "%s: ... naming the limit", kind);
    is_int(phx_store_set(s, "huge", "x", (size_t)PHX_STORE_MAX_VALUE + 1), PHX_EINVAL,
           "%s: value over PHX_STORE_MAX_VALUE is PHX_EINVAL", kind);
    is_int(phx_store_set(s, NULL, "x", 1), PHX_EINVAL, "%s: NULL key is PHX_EINVAL", kind);
}

/* ---- a key set later wakes a waiting get */
typedef struct late {
    phx_store *s;
    int ms;
} late;

static void *set_later(void *p)
{
    late *l = p;
    nap_ms(l->ms);
    phx_store_set(l->s, "late", "here", 4);
    return NULL;
}

static void waits(phx_store *s, const char *kind)
{
    phx_store *other;
    phx_store_clone(s, &other);
    late l = {other, 200};
    pthread_t th;
    pthread_create(&th, NULL, set_later, &l);
    void *v = NULL;
    size_t n = 0;
    double t0 = now();
    phx_status st = phx_store_get(s, "late", &v, &n, 10.0);
    double dt = now() - t0;
    pthread_join(th, NULL);
    ok(st == PHX_OK && n == 4 && dt > 0.1 && dt < 5.0, "%s: get waits for a key another client sets (%.2f s)", kind,
       dt);
    free(v);
    phx_store_free(other);
}

/* ---- many clients adding at once */
typedef struct adder {
    phx_store *s;
    int iters;
    int fails;
} adder;

static void *add_many(void *p)
{
    adder *a = p;
    for (int i = 0; i < a->iters; i++)
        if (phx_store_add(a->s, "contended", 1, NULL) != PHX_OK) a->fails++;
    return NULL;
}

static void contention(phx_store *s, const char *kind)
{
    enum { NT = 8, ITERS = 500 };
    adder a[NT];
    pthread_t th[NT];
    for (int i = 0; i < NT; i++) {
        a[i] = (adder){NULL, ITERS, 0};
        if (phx_store_clone(s, &a[i].s)) a[i].fails = -1;
        pthread_create(&th[i], NULL, add_many, &a[i]);
    }
    int fails = 0;
    for (int i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        fails += a[i].fails;
        phx_store_free(a[i].s);
    }
    int64_t x = -1;
    phx_store_add(s, "contended", 0, &x);
    ok(fails == 0 && x == NT * ITERS, "%s: %d clients x %d adds -> %lld (expected %d)", kind, NT, ITERS, (long long)x,
       NT * ITERS);
}

/* ---- misbehaving raw clients */
static int raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        close(fd);
        return -1;
    }
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

/* 1 when the server closed the connection (read returns 0 / reset). */
static int closed_by_server(int fd)
{
    char b[64];
    ssize_t n = recv(fd, b, sizeof b, 0);
    return n == 0 || (n < 0 && errno == ECONNRESET);
}

static void put32(uint8_t *p, uint32_t x)
{
    p[0] = (uint8_t)x;
    p[1] = (uint8_t)(x >> 8);
    p[2] = (uint8_t)(x >> 16);
    p[3] = (uint8_t)(x >> 24);
}

/* HELLO (protocol version 2, a zero nonce) on a server without a token. */
static void hello(int fd)
{
    uint8_t h[48], r[48];
    memset(h, 0, sizeof h);
    put32(h, 40);
    put32(h + 4, 1);
    put32(h + 8, 0x53584850u);
    put32(h + 12, 2);
    send(fd, h, sizeof h, 0);
    recv(fd, r, sizeof r, MSG_WAITALL);
}

static void still_serves(phx_store *s, const char *what)
{
    int64_t x = 0;
    phx_status st = phx_store_add(s, "alive", 1, &x);
    ok(st == PHX_OK, "server still serves after %s", what);
}

static void bad_clients(phx_store *s)
{
    int port = phx_store_port(s);
    int fd = raw_connect(port);
    send(fd, "GET / HTTP/1.0\r\n\r\n", 18, 0);
    ok(closed_by_server(fd), "garbage instead of a handshake: disconnected");
    close(fd);
    still_serves(s, "garbage");

    fd = raw_connect(port);
    hello(fd);
    uint8_t h[8];
    put32(h, 0xffffffffu);
    put32(h + 4, 2); /* SET with a 4 GiB body */
    send(fd, h, sizeof h, 0);
    ok(closed_by_server(fd), "huge frame length: disconnected before any body");
    close(fd);
    still_serves(s, "a huge length");

    fd = raw_connect(port);
    hello(fd);
    put32(h, 4);
    put32(h + 4, 99); /* unknown op */
    send(fd, h, sizeof h, 0);
    send(fd, "abcd", 4, 0);
    ok(closed_by_server(fd), "unknown request type: disconnected");
    close(fd);

    fd = raw_connect(port);
    hello(fd);
    uint8_t f[8 + 12];
    put32(f, 12);
    put32(f + 4, 2); /* SET: key length 100 > body */
    put32(f + 8, 100);
    memcpy(f + 12, "xxxx", 4);
    put32(f + 16, 0);
    send(fd, f, sizeof f, 0);
    ok(closed_by_server(fd), "field length beyond its frame: disconnected");
    close(fd);

    fd = raw_connect(port);
    hello(fd);
    put32(h, 100);
    put32(h + 4, 2); /* 100-byte SET, then only 10 bytes */
    send(fd, h, sizeof h, 0);
    send(fd, "0123456789", 10, 0);
    close(fd); /* gone mid-frame */
    nap_ms(50);
    still_serves(s, "a client that disconnected mid-frame");

    fd = raw_connect(port);
    put32(h, 0);
    put32(h + 4, 8); /* NUMKEYS before the handshake */
    send(fd, h, sizeof h, 0);
    ok(closed_by_server(fd), "request before the handshake: disconnected");
    close(fd);
    still_serves(s, "all of the above");
}

/* ---- connection errors */
static void *fake_server(void *p)
{
    int lfd = *(int *)p;
    int fd = accept(lfd, NULL, NULL);
    if (fd >= 0) {
        char b[64];
        recv(fd, b, sizeof b, 0);
        const char reply[] = "HTTP/1.0 400 Bad Request\r\n\r\n";
        send(fd, reply, sizeof reply - 1, 0);
        close(fd);
    }
    return NULL;
}

static void errors(void)
{
    phx_store *a = NULL, *b = NULL;
    phx_status st = phx_store_new("127.0.0.1", 0, true, 5.0, &a);
    int port = phx_store_port(a);
    st = phx_store_new("127.0.0.1", port, true, 5.0, &b);
    is_int(st, PHX_EIO, "a second server on the same port is PHX_EIO");
    like(phx_last_error(), "in use", "... saying the port is in use");
    ok(b == NULL, "... and returns no store");
    phx_store_free(a);

    st = phx_store_new("no-such-host.invalid", 29500, false, 2.0, &b);
    is_int(st, PHX_EIO, "an unresolvable host is PHX_EIO");
    like(phx_last_error(), "cannot resolve host 'no-such-host.invalid'", "... naming the host");

    /* a port nobody listens on (bound, then closed) */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t sl = sizeof sa;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, (struct sockaddr *)&sa, sizeof sa);
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    close(fd);
    double t0 = now();
    st = phx_store_new("127.0.0.1", ntohs(sa.sin_port), false, 0.6, &b);
    double dt = now() - t0;
    is_int(st, PHX_ETIMEOUT, "no server within the timeout is PHX_ETIMEOUT");
    like(phx_last_error(), "no store server at 127.0.0.1:", "... naming host:port");
    like(phx_last_error(), "connection attempts were refused (the host answers but nothing listens",
         "... saying every attempt was refused, not that one timed out");
    ok(dt >= 0.5 && dt < 3.0, "... after retrying for about the timeout (%.2f s)", dt);

    /* something else listening there */
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    sa.sin_port = 0;
    bind(lfd, (struct sockaddr *)&sa, sizeof sa);
    listen(lfd, 1);
    getsockname(lfd, (struct sockaddr *)&sa, &sl);
    pthread_t th;
    pthread_create(&th, NULL, fake_server, &lfd);
    st = phx_store_new("127.0.0.1", ntohs(sa.sin_port), false, 3.0, &b);
    pthread_join(th, NULL);
    close(lfd);
    is_int(st, PHX_EIO, "a server that is not a Phalanx store is PHX_EIO");
    like(phx_last_error(), "Phalanx store", "... saying so");

    is_int(phx_store_new("127.0.0.1", 70000, false, 1.0, &b), PHX_EINVAL, "port 70000 is PHX_EINVAL");
    is_int(phx_store_new(NULL, 1, false, 1.0, &b), PHX_EINVAL, "NULL host is PHX_EINVAL");
}

int main(void)
{
    plan(92);
    phx_store *srv = NULL;
    phx_status st = phx_store_new("127.0.0.1", 0, true, 10.0, &srv);
    if (st) {
        diag("server: %s", phx_last_error());
        return 1;
    }
    ok(phx_store_port(srv) > 0, "the server picked a port (%d)", phx_store_port(srv));
    ok(!phx_store_is_local(srv), "a TCP store is not local");
    api(srv, "tcp");
    waits(srv, "tcp");
    contention(srv, "tcp");

    phx_store *loc = phx_store_new_local();
    api(loc, "local");
    waits(loc, "local");
    contention(loc, "local");
    char addr[64];
    is_int(phx_store_local_addr(loc, addr, sizeof addr), PHX_EUNSUPPORTED, "a local store has no address");
    is_int(phx_store_local_addr(srv, addr, sizeof addr), PHX_OK, "a TCP store knows its local address");
    is_str(addr, "127.0.0.1", "... the loopback here");
    ok(phx_store_is_local(loc), "a local store is local");
    phx_store_free(loc);

    bad_clients(srv);
    phx_store_free(srv);
    errors();
    return done_testing();
}
