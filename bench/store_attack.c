/* The store server under the attacks of doc/reference/store.md ("Limits"), one per
 * run, printing one line "attack<TAB>what<TAB>value":
 *   a   8 clients GET a 64 MiB value and never read: server RSS growth
 *   b   4 clients read a 64 MiB value once and stay: RSS growth
 *   c   a client sends a 128 MiB CAS body without HELLO: RSS growth
 *   d   file descriptors exhausted, one client waiting: server CPU per s
 *   e   SET latency with 0 and with 50 parked WAITs of 1000 keys
 * The server runs in this process (phx_store_new), the attackers are raw
 * sockets speaking whichever protocol version the server answers, so the
 * same source measures an older libphalanx (bench/store_attack.sh). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "phalanx/phalanx.h"

#define MiB ((size_t)1 << 20)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void nap(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static double rss_mib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %zu kB", &kb) == 1) break;
    if (f) fclose(f);
    return (double)kb / 1024.0;
}

static void put32(uint8_t *p, uint32_t x)
{
    p[0] = (uint8_t)x;
    p[1] = (uint8_t)(x >> 8);
    p[2] = (uint8_t)(x >> 16);
    p[3] = (uint8_t)(x >> 24);
}
static void put64(uint8_t *p, int64_t x)
{
    put32(p, (uint32_t)(uint64_t)x);
    put32(p + 4, (uint32_t)((uint64_t)x >> 32));
}
static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int port_;

static int raw(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port_)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    struct timeval tv = {5, 0};
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

/* A connected client past the handshake (version 2, else 1), or -1. */
static int client(void)
{
    int fd = raw();
    uint8_t h[48], r[48];
    memset(h, 0, sizeof h);
    put32(h, 40);
    put32(h + 4, 1);
    put32(h + 8, 0x53584850u);
    put32(h + 12, 2);
    if (send_all(fd, h, sizeof h) == 0 && recv(fd, r, sizeof r, MSG_WAITALL) == 48 && get32(r + 4) == 0) return fd;
    close(fd);
    fd = raw();
    put32(h, 8);
    put32(h + 12, 1);
    if (send_all(fd, h, 16) == 0 && recv(fd, r, 12, MSG_WAITALL) == 12 && get32(r + 4) == 0) return fd;
    close(fd);
    return -1;
}

static void send_get(int fd, const char *key)
{
    uint8_t f[128];
    size_t kl = strlen(key);
    put32(f, (uint32_t)(12 + kl));
    put32(f + 4, 3);
    put32(f + 8, (uint32_t)kl);
    memcpy(f + 12, key, kl);
    put64(f + 12 + kl, 5000);
    send_all(fd, f, 20 + kl);
}

static void set_big(phx_store *s)
{
    char *v = malloc(64 * MiB);
    memset(v, 7, 64 * MiB);
    phx_store_set(s, "big", v, 64 * MiB);
    free(v);
    nap(0.2);
}

static void attack_a(phx_store *s)
{
    set_big(s);
    double before = rss_mib();
    int fds[8];
    for (int i = 0; i < 8; i++) {
        fds[i] = client();
        send_get(fds[i], "big");
    }
    nap(1.0);
    printf("a\tRSS MiB before / after 8 clients not reading a 64 MiB GET\t%.0f / %.0f\n", before, rss_mib());
}

static void attack_b(phx_store *s)
{
    set_big(s);
    double before = rss_mib();
    int fds[4];
    char *buf = malloc(1 << 20);
    for (int i = 0; i < 4; i++) {
        fds[i] = client();
        send_get(fds[i], "big");
        size_t want = 8 + 64 * MiB;
        while (want) {
            ssize_t n = recv(fds[i], buf, want < (1 << 20) ? want : (1 << 20), 0);
            if (n <= 0) break;
            want -= (size_t)n;
        }
    }
    free(buf);
    nap(0.5);
    printf("b\tRSS MiB before / after 4 clients read a 64 MiB value once and stay\t%.0f / %.0f\n", before, rss_mib());
}

static void attack_c(phx_store *s)
{
    (void)s;
    double before = rss_mib();
    int fd = raw();
    uint8_t h[8];
    put32(h, 128u << 20);
    put32(h + 4, 6); /* CAS: the largest body */
    send_all(fd, h, 8);
    char *chunk = calloc(1, MiB);
    size_t sent = 0;
    for (; sent < 127 * MiB; sent += MiB)
        if (send_all(fd, chunk, MiB)) break;
    free(chunk);
    nap(0.5);
    printf("c\tRSS MiB before / after a HELLO-less 128 MiB body (%zu MiB accepted by the server)\t%.0f / %.0f\n",
           sent / MiB, before, rss_mib());
}

static void attack_d(phx_store *s)
{
    (void)s;
    struct rlimit lim;
    getrlimit(RLIMIT_NOFILE, &lim);
    lim.rlim_cur = 256;
    setrlimit(RLIMIT_NOFILE, &lim);
    int fd;
    int last = -1;
    while ((fd = open("/dev/null", O_RDONLY)) >= 0) last = fd;
    close(last);
    int c = raw();
    double c0 = cpu(), t0 = now();
    nap(2.0);
    double used = (cpu() - c0) / (now() - t0);
    printf("d\tserver CPU while out of descriptors (cores busy)\t%.2f\n", used);
    close(c);
}

/* 50 parked WAITs of nk keys each, then the mean time of a SET. */
static double parked_set(phx_store *s, int nk, const char *prefix)
{
    enum { NW = 50, NS = 100 };
    const int NK = nk;
    size_t body = 12;
    for (int k = 0; k < NK; k++) body += 4 + (size_t)snprintf(NULL, 0, "%s/%d", prefix, k);
    uint8_t *f = malloc(8 + body);
    put32(f, (uint32_t)body);
    put32(f + 4, 5);
    put64(f + 8, 60000);
    put32(f + 16, NK);
    size_t off = 20;
    for (int k = 0; k < NK; k++) {
        char key[16];
        int kl = snprintf(key, sizeof key, "%s/%d", prefix, k);
        put32(f + off, (uint32_t)kl);
        memcpy(f + off + 4, key, (size_t)kl);
        off += 4 + (size_t)kl;
    }
    for (int i = 0; i < NW; i++) send_all(client(), f, 8 + body);
    free(f);
    nap(0.5);
    double t0 = now();
    for (int i = 0; i < NS; i++) phx_store_set(s, "other", "x", 1);
    return (now() - t0) / NS;
}

static void attack_e(phx_store *s)
{
    double t0 = now();
    for (int i = 0; i < 200; i++) phx_store_set(s, "warm", "x", 1);
    double idle = (now() - t0) / 200;
    double p1 = parked_set(s, 1000, "w");
    double p2 = parked_set(s, 90000, "x"); /* a WAIT body near its 1 MiB limit */
    printf("e\tSET latency ms with 0 / 50 parked WAITs of 1000 keys / 50 more of 90000 keys\t%.3f / %.3f / %.3f\n",
           idle * 1e3, p1 * 1e3, p2 * 1e3);
}

int main(int argc, char **argv)
{
    if (argc != 2 || strlen(argv[1]) != 1 || argv[1][0] < 'a' || argv[1][0] > 'e') {
        fprintf(stderr, "usage: store_attack a|b|c|d|e\n");
        return 2;
    }
    unsetenv("PHX_STORE_TOKEN");
    phx_log_set_level(PHX_LOG_ERROR);
    phx_store *s = NULL;
    if (phx_store_new("127.0.0.1", 0, true, 30.0, &s)) {
        fprintf(stderr, "store_attack: %s\n", phx_last_error());
        return 1;
    }
    port_ = phx_store_port(s);
    void (*attacks[])(phx_store *) = {attack_a, attack_b, attack_c, attack_d, attack_e};
    attacks[argv[1][0] - 'a'](s);
    fflush(stdout);
    _exit(0); /* the attackers' sockets stay open: skip the server's linger */
}
