/* The store's job token (PHX_STORE_TOKEN): a client with the right token
 * is served; a wrong or missing token, or a token the server does not
 * have, is refused with a clear error on both sides, before any key can
 * be read or written; a client of another protocol version is told so. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

static void put32(uint8_t *p, uint32_t x)
{
    p[0] = (uint8_t)x;
    p[1] = (uint8_t)(x >> 8);
    p[2] = (uint8_t)(x >> 16);
    p[3] = (uint8_t)(x >> 24);
}
static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

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

static int closed_by_server(int fd)
{
    char b[64];
    ssize_t n;
    while ((n = recv(fd, b, sizeof b, 0)) > 0) {}
    return n == 0 || (n < 0 && errno == ECONNRESET);
}

/* Runs a client connection attempt with stderr captured in *log. */
static phx_status connect_as(const char *token, int port, phx_store **out, char *log, size_t loglen)
{
    if (token)
        setenv("PHX_STORE_TOKEN", token, 1);
    else
        unsetenv("PHX_STORE_TOKEN");
    char path[] = "/tmp/phx-token-log.XXXXXX";
    int lfd = mkstemp(path);
    int saved = dup(2);
    fflush(stderr);
    dup2(lfd, 2);
    *out = NULL;
    phx_status st = phx_store_new("127.0.0.1", port, false, 3.0, out);
    struct timespec ts = {0, 200 * 1000 * 1000};
    nanosleep(&ts, NULL); /* the server's warning */
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t n = pread(lfd, log, loglen - 1, 0);
    log[n > 0 ? n : 0] = 0;
    close(lfd);
    unlink(path);
    return st;
}

/* A phx_spawn rank: its token (written for the parent to compare). */
static int spawned(int rank, void *arg)
{
    const char *t = getenv("PHX_STORE_TOKEN");
    char path[256];
    snprintf(path, sizeof path, "%s.%d", (const char *)arg, rank);
    FILE *f = fopen(path, "w");
    if (!f) return 1;
    fprintf(f, "%s", t ? t : "");
    fclose(f);
    return 0;
}

static void spawn_tokens(char tok[2][128])
{
    char base[] = "/tmp/phx-spawn-token.XXXXXX";
    int fd = mkstemp(base);
    close(fd);
    unsetenv("PHX_COMM");
    is_int(phx_spawn(2, spawned, base), PHX_OK, "phx_spawn (processes) runs 2 ranks");
    for (int r = 0; r < 2; r++) {
        char path[256];
        snprintf(path, sizeof path, "%s.%d", base, r);
        FILE *f = fopen(path, "r");
        tok[r][0] = 0;
        if (f && fgets(tok[r], 128, f)) {}
        if (f) fclose(f);
        unlink(path);
    }
    unlink(base);
}

int main(void)
{
    plan(30);
    /* No ~/.phalanx/job-token: a process without PHX_STORE_TOKEN has no token. */
    unsetenv("HOME");
    char log[4096];
    const char *job = "9f1c0c3e5b7a2d4e6f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6";
    setenv("PHX_STORE_TOKEN", job, 1);
    phx_store *srv = NULL;
    if (phx_store_new("127.0.0.1", 0, true, 10.0, &srv)) {
        diag("server: %s", phx_last_error());
        return 1;
    }
    int port = phx_store_port(srv);
    phx_store_set(srv, "secret", "42", 2);

    phx_store *c = NULL;
    is_int(connect_as(job, port, &c, log, sizeof log), PHX_OK, "the job's token: connected");
    void *v = NULL;
    size_t n = 0;
    is_int(phx_store_get(c, "secret", &v, &n, 1.0), PHX_OK, "... reads a key");
    ok(n == 2 && memcmp(v, "42", 2) == 0, "... its value");
    free(v);
    phx_store *cl = NULL;
    unsetenv("PHX_STORE_TOKEN");
    is_int(phx_store_clone(c, &cl), PHX_OK, "a clone keeps the token of its handle (environment changed since)");
    phx_store_free(cl);
    phx_store_free(c);

    is_int(connect_as("not-the-job-token", port, &c, log, sizeof log), PHX_EIO, "a wrong token: PHX_EIO");
    like(phx_last_error(), "refused this process's PHX_STORE_TOKEN", "... the client says the token was refused");
    like(phx_last_error(), "127.0.0.1", "... naming the server");
    like(log, "PHX_STORE_TOKEN differs", "... the server's warning says why");
    like(log, "127.0.0.1:", "... and names the client's address");
    ok(c == NULL, "... no handle");

    is_int(connect_as(NULL, port, &c, log, sizeof log), PHX_EIO, "no token: PHX_EIO");
    like(phx_last_error(), "requires this job's token and PHX_STORE_TOKEN is not set", "... saying what is missing");

    is_int(connect_as("", port, &c, log, sizeof log), PHX_EIO, "an empty token is no token: PHX_EIO");

    /* A raw client that skips AUTH cannot touch keys. */
    int fd = raw_connect(port);
    uint8_t h[48], r[48];
    memset(h, 0, sizeof h);
    put32(h, 40);
    put32(h + 4, 1);
    put32(h + 8, 0x53584850u);
    put32(h + 12, 2);
    send(fd, h, sizeof h, 0);
    ssize_t got = recv(fd, r, sizeof r, MSG_WAITALL);
    ok(got == 48 && get32(r + 4) == 0 && (get32(r + 12) & 1), "HELLO to a server with a token: flags say so");
    uint8_t set[8 + 4 + 6 + 4 + 4];
    put32(set, 18);
    put32(set + 4, 2);
    put32(set + 8, 6);
    memcpy(set + 12, "secret", 6);
    put32(set + 18, 4);
    memcpy(set + 22, "evil", 4);
    send(fd, set, sizeof set, 0);
    ok(closed_by_server(fd), "a SET instead of AUTH: disconnected");
    close(fd);

    /* A made-up proof. */
    fd = raw_connect(port);
    send(fd, h, sizeof h, 0);
    recv(fd, r, sizeof r, MSG_WAITALL);
    uint8_t a[8 + 32];
    put32(a, 32);
    put32(a + 4, 9);
    memset(a + 8, 0xab, 32);
    send(fd, a, sizeof a, 0);
    got = recv(fd, r, 8, MSG_WAITALL);
    ok(got == 8 && get32(r + 4) == 4, "a made-up proof: DENIED");
    ok(closed_by_server(fd), "... then disconnected");
    close(fd);

    v = NULL;
    phx_store_get(srv, "secret", &v, &n, 1.0);
    ok(n == 2 && memcmp(v, "42", 2) == 0, "the key is unchanged after all of the above");
    free(v);

    /* Protocol version 1 (an older Phalanx) and 99: told the version. */
    int versions[2] = {1, 99};
    for (int i = 0; i < 2; i++) {
        fd = raw_connect(port);
        uint8_t h1[16];
        put32(h1, 8);
        put32(h1 + 4, 1);
        put32(h1 + 8, 0x53584850u);
        put32(h1 + 12, (uint32_t)versions[i]);
        send(fd, h1, sizeof h1, 0);
        got = recv(fd, r, 12, MSG_WAITALL);
        ok(got == 12 && get32(r + 4) == 3 && get32(r + 8) == 2,
           "HELLO of protocol version %d: status VERSION, the server's version 2", versions[i]);
        ok(closed_by_server(fd), "... then disconnected");
        close(fd);
    }
    phx_store_free(srv);

    /* A token on the client only. */
    unsetenv("PHX_STORE_TOKEN");
    if (phx_store_new("127.0.0.1", 0, true, 10.0, &srv)) {
        diag("server: %s", phx_last_error());
        return 1;
    }
    port = phx_store_port(srv);
    is_int(connect_as(job, port, &c, log, sizeof log), PHX_EIO, "a token here, none on the server: PHX_EIO");
    like(phx_last_error(), "runs without a job token", "... saying so");
    is_int(connect_as(NULL, port, &c, log, sizeof log), PHX_OK, "no token on either side: connected");
    phx_store_free(c);
    phx_store_free(srv);

    char longtok[1100];
    memset(longtok, 'a', sizeof longtok - 1);
    longtok[sizeof longtok - 1] = 0;
    setenv("PHX_STORE_TOKEN", longtok, 1);
    is_int(phx_store_new("127.0.0.1", 0, true, 10.0, &srv), PHX_EINVAL, "a 1099-byte token: PHX_EINVAL");
    like(phx_last_error(), "at most 1024", "... naming the limit");

    unsetenv("PHX_STORE_TOKEN");
    char tok[2][128];
    spawn_tokens(tok);
    ok(strlen(tok[0]) == 64 && strcmp(tok[0], tok[1]) == 0, "... both get the same random 64-digit job token (%s)",
       tok[0]);
    ok(getenv("PHX_STORE_TOKEN") == NULL, "... the caller's environment is unchanged");
    return done_testing();
}
