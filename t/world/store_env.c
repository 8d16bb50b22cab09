/* Timeouts too large for a clock (PHX_TIMEOUT=inf, 1e300, an API timeout
 * of 1e300 s) are clamped to the documented largest, 1e6 s, everywhere
 * they are converted (a build with -fsanitize=float-cast-overflow runs
 * these paths); and the launcher variables a typo makes wrong are refused
 * or warned about with the accepted range. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Runs fn with stderr captured into buf. */
static void capture(void (*fn)(void *), void *arg, char *buf, size_t len)
{
    char path[] = "/tmp/phx-env-log.XXXXXX";
    int lfd = mkstemp(path);
    int saved = dup(2);
    fflush(stderr);
    dup2(lfd, 2);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t n = pread(lfd, buf, len - 1, 0);
    buf[n > 0 ? n : 0] = 0;
    close(lfd);
    unlink(path);
}

static double comm_timeout(double opt)
{
    phx_comm_opts o = PHX_COMM_OPTS_INIT;
    o.backend = "threads";
    o.rank = 0;
    o.size = 1;
    o.local_rank = 0;
    o.local_size = 1;
    o.timeout_s = opt;
    phx_comm *c = NULL;
    if (phx_comm_init(&o, &c)) {
        diag("comm: %s", phx_last_error());
        return -1;
    }
    double t = phx_comm_timeout(c);
    phx_comm_free(c);
    return t;
}

static void comm_inf(void *arg)
{
    *(double *)arg = comm_timeout(0);
}

typedef struct late {
    phx_store *s;
    const char *key;
} late;

static void *set_later(void *p)
{
    late *l = p;
    nap_ms(200);
    phx_store_set(l->s, l->key, "v", 1);
    return NULL;
}

static void threads_warn(void *arg)
{
    *(int *)arg = phx_num_threads();
}

int main(void)
{
    plan(20);
    char log[4096];
    unsetenv("PHX_STORE_TOKEN");

    setenv("PHX_TIMEOUT", "inf", 1);
    double t = 0;
    capture(comm_inf, &t, log, sizeof log);
    ok(t == 1e6, "PHX_TIMEOUT=inf: the communicator's timeout is 1e6 s (got %g)", t);
    like(log, "exceeds the largest timeout, 1000000 s", "... with a warning naming the largest");
    setenv("PHX_TIMEOUT", "1e300", 1);
    capture(comm_inf, &t, log, sizeof log);
    ok(t == 1e6, "PHX_TIMEOUT=1e300: 1e6 s (got %g)", t);
    setenv("PHX_TIMEOUT", "3e6", 1);
    capture(comm_inf, &t, log, sizeof log);
    ok(t == 1e6, "PHX_TIMEOUT=3e6 (over 2^31 ms): 1e6 s (got %g)", t);
    /* digits only: ' 3' and 0x3 were taken as 3 s */
    const char *odd[] = {" 3", "0x3", "+3"};
    for (int i = 0; i < 3; i++) {
        setenv("PHX_TIMEOUT", odd[i], 1);
        capture(comm_inf, &t, log, sizeof log);
        ok(t == 600 && strstr(log, "is not a positive number of seconds; using 600"),
           "PHX_TIMEOUT='%s': refused with a warning, 600 s (got %g)", odd[i], t);
    }
    setenv("PHX_TIMEOUT", "120", 1);
    t = comm_timeout(1e300);
    ok(t == 1e6, "an API timeout of 1e300 s: 1e6 s (got %g)", t);
    t = comm_timeout(2.5);
    ok(t == 2.5, "an API timeout of 2.5 s is kept (got %g)", t);

    /* The store converts a timeout to milliseconds for its requests and
     * polls: huge ones arrive clamped and still wait for the key. */
    setenv("PHX_TIMEOUT", "inf", 1);
    phx_store *srv = NULL, *other = NULL;
    phx_status st = phx_store_new("127.0.0.1", 0, true, 1e300, &srv);
    is_int(st, PHX_OK, "a store with a 1e300 s timeout starts");
    if (st) return done_testing();
    phx_store_clone(srv, &other);
    late l = {other, "k1"};
    pthread_t th;
    pthread_create(&th, NULL, set_later, &l);
    void *v = NULL;
    size_t n = 0;
    is_int(phx_store_get(srv, "k1", &v, &n, 1e300), PHX_OK, "get with a 1e300 s timeout waits for the key");
    pthread_join(th, NULL);
    free(v);
    l.key = "k2";
    pthread_create(&th, NULL, set_later, &l);
    const char *keys[] = {"k1", "k2"};
    is_int(phx_store_wait(srv, keys, 2, 1e300), PHX_OK, "wait with a 1e300 s timeout waits for the keys");
    pthread_join(th, NULL);
    l.key = "k3";
    pthread_create(&th, NULL, set_later, &l);
    is_int(phx_store_get(srv, "k3", &v, &n, 0), PHX_OK, "get with the store's own (infinite) timeout");
    pthread_join(th, NULL);
    free(v);
    is_int(phx_store_get(srv, "never", &v, &n, 0.2), PHX_ETIMEOUT, "a small timeout still times out");
    phx_store_free(other);
    phx_store_free(srv);
    setenv("PHX_TIMEOUT", "120", 1);

    /* RANK with a leading space is a typo, not rank 1. */
    phx_world w = PHX_WORLD_INIT;
    setenv("RANK", " 1", 1);
    setenv("WORLD_SIZE", "2", 1);
    is_int(phx_world_from_env(&w), PHX_EINVAL, "RANK=' 1': PHX_EINVAL");
    like(phx_last_error(), "RANK=' 1': expected an integer in 0..", "... naming the variable and the range");
    setenv("RANK", "+1", 1);
    is_int(phx_world_from_env(&w), PHX_EINVAL, "RANK='+1': PHX_EINVAL");
    setenv("RANK", "1", 1);
    is_int(phx_world_from_env(&w), PHX_OK, "RANK='1' is fine");
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");

    setenv("PHX_NUM_THREADS", "100000", 1);
    int nt = 0;
    capture(threads_warn, &nt, log, sizeof log);
    like(log, "PHX_NUM_THREADS='100000' is not an integer in 1..4096", "PHX_NUM_THREADS=100000 warns with the range");
    ok(nt >= 1 && nt <= 4096, "... and uses the default (%d)", nt);
    return done_testing();
}
