/* The store server under attack from clients on the same host: memory
 * stays bounded (clients that never read their 64 MiB replies, readers
 * that read once and stay, a client announcing a huge body before or
 * after the handshake, replies pinning overwritten values), the accept
 * loop does not spin when file descriptors run out and serves the waiting
 * client once they are back, and a SET costs O(parked requests), not
 * O(parked requests x their keys). The server runs in this process; its
 * counters come from px_store_server_stats (built in from the sources). */
#include "config.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "src/world/store-server.h"
#include "phalanx/phalanx.h"
#include "t/tap.h"

#define MiB ((size_t)1 << 20)

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Resident memory of this process (server included), in bytes. */
static size_t rss(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %zu kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb * 1024;
}

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void put32(uint8_t *p, uint32_t x)
{
    px_put_u32(p, x);
}

static int raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        close(fd);
        return -1;
    }
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

static int send_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w <= 0) return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

/* HELLO (version 2) on a server without a token: 1 when answered OK. */
static int hello(int fd)
{
    uint8_t h[48], r[48];
    memset(h, 0, sizeof h);
    put32(h, 40);
    put32(h + 4, PX_OP_HELLO);
    put32(h + 8, PX_STORE_MAGIC);
    put32(h + 12, PX_STORE_VERSION);
    if (send_all(fd, h, sizeof h)) return 0;
    return recv(fd, r, sizeof r, MSG_WAITALL) == (ssize_t)sizeof r && px_get_u32(r + 4) == PX_ST_OK;
}

/* Sends a GET of key (never reads the reply). */
static void send_get(int fd, const char *key)
{
    uint8_t f[8 + 4 + 64 + 8];
    size_t kl = strlen(key);
    put32(f, (uint32_t)(4 + kl + 8));
    put32(f + 4, PX_OP_GET);
    put32(f + 8, (uint32_t)kl);
    memcpy(f + 12, key, kl);
    px_put_i64(f + 12 + kl, 1000);
    send_all(fd, f, 12 + kl + 8);
}

/* 1 when the server closed the connection (EOF or reset), draining what
 * it had sent before. */
static int closed_by_server(int fd)
{
    char b[65536];
    for (;;) {
        ssize_t n = recv(fd, b, sizeof b, 0);
        if (n > 0) continue;
        return n == 0 || (n < 0 && errno == ECONNRESET);
    }
}

static void still_serves(phx_store *s, const char *what)
{
    int64_t x = 0;
    ok(phx_store_add(s, "alive", 1, &x) == PHX_OK, "server still serves after %s", what);
}

static px_store_stats stats(phx_store *s)
{
    px_store_stats st;
    nap_ms(100); /* the server publishes its counters after each round */
    px_store_server_stats(px_store_server_of(s), &st);
    return st;
}

static char *big_value(size_t n, int seed)
{
    char *v = malloc(n);
    for (size_t i = 0; i < n; i++) v[i] = (char)(i * 31 + (size_t)seed);
    return v;
}

/* (a) 8 clients GET a 64 MiB value and never read. */
static void never_read(phx_store *s, int port)
{
    char *v = big_value(64 * MiB, 1);
    phx_store_set(s, "big", v, 64 * MiB);
    free(v);
    nap_ms(200);
    size_t before = rss();
    int fds[8];
    for (int i = 0; i < 8; i++) {
        fds[i] = raw_connect(port);
        hello(fds[i]);
        send_get(fds[i], "big");
    }
    nap_ms(500);
    size_t after = rss();
    px_store_stats st = stats(s);
    diag("RSS %.1f MiB -> %.1f MiB with 8 clients not reading a 64 MiB reply", before / 1048576.0, after / 1048576.0);
    ok(after < before + 64 * MiB, "8 clients GET a 64 MiB value and never read: RSS grows %.1f MiB (< 64)",
       ((double)after - (double)before) / 1048576.0);
    ok(st.out_bytes < MiB, "... reply buffers hold %zu bytes (the value is sent by reference)", st.out_bytes);
    void *got = NULL;
    size_t n = 0;
    is_int(phx_store_get(s, "big", &got, &n, 5.0), PHX_OK, "... a reading client still gets the value");
    ok(n == 64 * MiB && ((char *)got)[12345] == (char)(12345 * 31 + 1), "... intact");
    free(got);
    for (int i = 0; i < 8; i++) close(fds[i]);
}

/* (b) 4 clients read the value once and stay connected. */
static void read_once(phx_store *s, int port)
{
    phx_store *r[4];
    for (int i = 0; i < 4; i++) {
        void *got = NULL;
        size_t n = 0;
        phx_store_new("127.0.0.1", port, false, 5.0, &r[i]);
        phx_store_get(r[i], "big", &got, &n, 5.0);
        free(got);
    }
    px_store_stats st = stats(s);
    ok(st.out_bytes < MiB, "4 clients read a 64 MiB value once and stay: reply buffers hold %zu bytes", st.out_bytes);
    for (int i = 0; i < 4; i++) phx_store_free(r[i]);
}

/* (c) huge bodies: before the handshake refused after 8 bytes; after it,
 * memory follows the bytes that arrive. */
static void huge_bodies(phx_store *s, int port)
{
    int fd = raw_connect(port);
    uint8_t h[8 + 16];
    put32(h, 128u << 20);
    put32(h + 4, PX_OP_SET);
    memset(h + 8, 'x', 16);
    send_all(fd, h, sizeof h);
    ok(closed_by_server(fd), "a 128 MiB SET before HELLO: disconnected after the header");
    close(fd);
    px_store_stats st = stats(s);
    is_int(st.body_bytes, 0, "... having allocated nothing for it");

    fd = raw_connect(port);
    hello(fd);
    put32(h, 64u << 20);
    put32(h + 4, PX_OP_SET);
    send_all(fd, h, sizeof h);
    st = stats(s);
    ok(st.body_bytes <= PX_STORE_BODY_CHUNK, "a 64 MiB SET that sent 16 bytes holds %zu bytes (<= %zu)", st.body_bytes,
       PX_STORE_BODY_CHUNK);
    close(fd);

    fd = raw_connect(port);
    put32(h, 40);
    put32(h + 4, PX_OP_HELLO);
    put32(h + 8, PX_STORE_MAGIC);
    put32(h + 12, 99);
    send_all(fd, h, 16);
    send_all(fd, h + 8, 16);
    send_all(fd, h + 8, 16);
    uint8_t r[12];
    ssize_t n = recv(fd, r, sizeof r, MSG_WAITALL);
    ok(n == 12 && px_get_u32(r + 4) == PX_ST_VERSION && px_get_u32(r + 8) == PX_STORE_VERSION,
       "HELLO of protocol version 99: answered VERSION %u", PX_STORE_VERSION);
    ok(closed_by_server(fd), "... and disconnected");
    close(fd);
}

/* Replies that pin overwritten values stay within the budget: the
 * clients that read least recently go. */
static void stale_budget(phx_store *s, int port)
{
    px_store_server_set_max_stale(px_store_server_of(s), 100 * MiB);
    int fds[5];
    char *v = big_value(64 * MiB, 2); /* one buffer: RSS counts the server */
    size_t before = rss();
    for (int i = 0; i < 5; i++) {
        fds[i] = raw_connect(port);
        hello(fds[i]);
        send_get(fds[i], "big");
        nap_ms(100);
        v[0] = (char)i;
        phx_store_set(s, "big", v, 64 * MiB);
    }
    free(v);
    px_store_stats st = stats(s);
    size_t after = rss();
    ok(st.stale_bytes <= 100 * MiB, "5 overwritten 64 MiB values pinned by unread replies: %zu MiB kept (<= 100)",
       st.stale_bytes / MiB);
    ok(st.stalled_drops >= 3, "... %llu clients that did not read were disconnected",
       (unsigned long long)st.stalled_drops);
    ok(after < before + 250 * MiB, "... RSS grows %.0f MiB (< 250; 320 without the budget)",
       ((double)after - (double)before) / 1048576.0);
    ok(closed_by_server(fds[0]), "... the first of them sees its connection closed");
    for (int i = 0; i < 5; i++) close(fds[i]);
    phx_store_delete(s, "big", NULL);
    px_store_server_set_max_stale(px_store_server_of(s), PX_STORE_MAX_STALE);
}

/* (d) no file descriptors left: no spinning, and the client waiting in the
 * backlog is served once descriptors are back. */
static void out_of_fds(phx_store *s, int port)
{
    /* The server closes the connections of the tests above first: none
     * of its descriptors may come free while the test holds them all. */
    for (int i = 0; i < 50 && stats(s).clients > 1; i++) {}
    struct rlimit old, lim;
    getrlimit(RLIMIT_NOFILE, &old);
    lim = old;
    lim.rlim_cur = 256;
    setrlimit(RLIMIT_NOFILE, &lim);
    int spare[256], nspare = 0, fd;
    while (nspare < 256 && (fd = open("/dev/null", O_RDONLY)) >= 0) spare[nspare++] = fd;
    close(spare[--nspare]); /* one left: the client's */
    int c = raw_connect(port); /* the server cannot accept it */
    px_store_stats st0 = stats(s);
    double c0 = cpu_seconds();
    nap_ms(1000);
    double used = cpu_seconds() - c0;
    px_store_stats st1 = stats(s);
    ok(c >= 0, "a client connects while the server has no descriptor left");
    ok(used < 0.25, "... the server uses %.2f s of CPU in 1 s (no spinning on accept)", used);
    ok(st1.accept_backoffs > st0.accept_backoffs && st1.accept_backoffs < 20, "... it paused accepting %llu times",
       (unsigned long long)(st1.accept_backoffs - st0.accept_backoffs));
    while (nspare) close(spare[--nspare]);
    setrlimit(RLIMIT_NOFILE, &old);
    ok(hello(c), "descriptors back: the waiting client's handshake is answered");
    close(c);
    still_serves(s, "running out of descriptors");
}

/* (e) 50 parked WAITs of 1000 keys each. */
static void parked_waits(phx_store *s, int port)
{
    enum { NW = 50, NK = 1000 };
    size_t body = 12;
    for (int k = 0; k < NK; k++) body += 4 + (size_t)snprintf(NULL, 0, "w/%d", k);
    uint8_t *f = malloc(8 + body);
    put32(f, (uint32_t)body);
    put32(f + 4, PX_OP_WAIT);
    px_put_i64(f + 8, 60000);
    put32(f + 16, NK);
    size_t off = 20;
    for (int k = 0; k < NK; k++) {
        char key[16];
        int kl = snprintf(key, sizeof key, "w/%d", k);
        put32(f + off, (uint32_t)kl);
        memcpy(f + off + 4, key, (size_t)kl);
        off += 4 + (size_t)kl;
    }
    int fds[NW];
    for (int i = 0; i < NW; i++) {
        fds[i] = raw_connect(port);
        hello(fds[i]);
        send_all(fds[i], f, 8 + body);
    }
    free(f);
    px_store_stats st0 = stats(s);
    for (int i = 0; i < 100; i++) {
        char key[32];
        snprintf(key, sizeof key, "other/%d", i);
        phx_store_set(s, key, "x", 1);
    }
    px_store_stats st1 = stats(s);
    ok(st1.wake_checks - st0.wake_checks == 0,
       "100 SETs of other keys with %d parked WAITs of %d keys: %llu parked keys looked up (0)", NW, NK,
       (unsigned long long)(st1.wake_checks - st0.wake_checks));
    for (int k = 0; k < NK; k++) {
        char key[16];
        snprintf(key, sizeof key, "w/%d", k);
        phx_store_set(s, key, "v", 1);
    }
    px_store_stats st2 = stats(s);
    unsigned long long looked = (unsigned long long)(st2.wake_checks - st1.wake_checks);
    ok(looked <= 2ull * NW * NK, "setting their %d keys in order: %llu lookups (<= 2 per waiter per SET)", NK, looked);
    int answered = 0;
    for (int i = 0; i < NW; i++) {
        uint8_t r[8];
        if (recv(fds[i], r, 8, MSG_WAITALL) == 8 && px_get_u32(r + 4) == PX_ST_OK && px_get_u32(r) == 0) answered++;
        close(fds[i]);
    }
    is_int(answered, NW, "... and every WAIT is answered OK");

    /* a key deleted after the wait moved past it is waited for again */
    int fd = raw_connect(port);
    hello(fd);
    uint8_t w[8 + 12 + 2 * 5];
    put32(w, 12 + 2 * 5);
    put32(w + 4, PX_OP_WAIT);
    px_put_i64(w + 8, 60000);
    put32(w + 16, 2);
    put32(w + 20, 1);
    w[24] = 'a';
    put32(w + 25, 1);
    w[29] = 'b';
    send_all(fd, w, sizeof w);
    phx_store_set(s, "a", "1", 1);
    phx_store_delete(s, "a", NULL);
    phx_store_set(s, "b", "1", 1);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    ok(poll(&p, 1, 300) == 0, "WAIT a,b: set a, delete a, set b: still waiting");
    phx_store_set(s, "a", "2", 1);
    uint8_t r[8];
    ok(recv(fd, r, 8, MSG_WAITALL) == 8 && px_get_u32(r + 4) == PX_ST_OK, "... answered once a is set again");
    close(fd);
}

int main(void)
{
    plan(25);
    unsetenv("PHX_STORE_TOKEN");
    /* No ~/.phalanx/job-token: raw clients meet a server without a token. */
    unsetenv("HOME");
    phx_store *s = NULL;
    if (phx_store_new("127.0.0.1", 0, true, 30.0, &s)) {
        diag("server: %s", phx_last_error());
        return 1;
    }
    int port = phx_store_port(s);
    never_read(s, port);
    read_once(s, port);
    huge_bodies(s, port);
    stale_budget(s, port);
    out_of_fds(s, port);
    parked_waits(s, port);
    still_serves(s, "all of the above");
    phx_store_free(s);
    return done_testing();
}
