/* phx_spawn (mp.spawn): n ranks as forked processes, or as threads of this
 * process when PHX_COMM chooses the threads backend. */
#include "config.h"
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "src/base/threads.h"
#include "src/base/util.h"
#include "src/world/free-port.h"
#include "src/world/store-server.h"
#include "src/world/world-impl.h"
#include "phalanx/plugin/kit.h"

#define PX_SPAWN_GRACE 5.0 /* seconds between SIGTERM and SIGKILL */

static __thread px_spawn_tls spawn_tls;

const px_spawn_tls *px_spawn_current(void)
{
    return &spawn_tls;
}

/* 1 when PHX_COMM's first choice is "threads". */
static int want_threads(void)
{
    const char *v = getenv("PHX_COMM");
    if (!v) return 0;
    while (*v == ' ') v++;
    size_t n = strcspn(v, ", ");
    return n == 7 && strncmp(v, "threads", 7) == 0;
}

static void nap(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* ---------------------------------------------------------------- threads */

typedef struct thread_arg {
    int rank, n;
    phx_store *store;
    int (*fn)(int, void *);
    void *arg;
    int rc;
} thread_arg;

static void *thread_main(void *p)
{
    thread_arg *a = p;
    spawn_tls = (px_spawn_tls){1, a->rank, a->n, a->store};
    /* The rank's own thread budget: ranks never share a counter. */
    px_threads_set_local(px_threads_rank_default(a->n));
    a->rc = a->fn(a->rank, a->arg);
    if (a->rc != 0) {
        /* The first failure is recorded; its peers' waits see it and stop. */
        char msg[64];
        int len = snprintf(msg, sizeof msg, "rank %d returned %d", a->rank, a->rc);
        phx_store_compare_set(a->store, PHX_KIT_ABORT_KEY, NULL, 0, msg, (size_t)len, NULL, NULL);
    }
    spawn_tls.active = 0;
    px_threads_set_local(0);
    return NULL;
}

static phx_status spawn_threads(int n, int (*fn)(int, void *), void *arg)
{
    phx_store *store = phx_store_new_local();
    thread_arg *a = px_calloc((size_t)n, sizeof *a);
    pthread_t *th = px_calloc((size_t)n, sizeof *th);
    phx_status st = PHX_OK;
    int started = 0;
    if (!store || !a || !th) {
        st = PHX_ENOMEM;
        goto out;
    }
    for (; started < n; started++) {
        a[started] = (thread_arg){started, n, store, fn, arg, 0};
        if (pthread_create(&th[started], NULL, thread_main, &a[started]) != 0) {
            st = phx_error(PHX_EIO, "phx_spawn: cannot create the thread of rank %d", started);
            char msg[] = "phx_spawn could not start every rank";
            phx_store_compare_set(store, PHX_KIT_ABORT_KEY, NULL, 0, msg, sizeof msg - 1, NULL, NULL);
            break;
        }
    }
    for (int r = 0; r < started; r++) pthread_join(th[r], NULL);
    if (st == PHX_OK) {
        void *first = NULL;
        size_t len = 0;
        int nfail = 0;
        for (int r = 0; r < n; r++) nfail += a[r].rc != 0;
        if (nfail) {
            phx_store_get(store, PHX_KIT_ABORT_KEY, &first, &len, 1.0);
            st = phx_error(PHX_EPEER, "phx_spawn: %d of %d thread ranks failed; the first: %.*s", nfail, n, (int)len,
                           first ? (char *)first : "?");
            free(first);
        }
    }
out:
    px_free(a);
    px_free(th);
    phx_store_free(store);
    return st;
}

/* -------------------------------------------------------------- processes */

static void child(int rank, int n, int (*fn)(int, void *), void *arg, const char *port, const char *token)
{
    char buf[16];
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* the parent dies: so do we */
    if (!getenv("MASTER_ADDR")) setenv("MASTER_ADDR", "127.0.0.1", 1);
    if (!getenv("MASTER_PORT")) setenv("MASTER_PORT", port, 1);
    if (token[0]) setenv("PHX_STORE_TOKEN", token, 1);
    snprintf(buf, sizeof buf, "%d", rank);
    setenv("RANK", buf, 1);
    setenv("LOCAL_RANK", buf, 1);
    snprintf(buf, sizeof buf, "%d", n);
    setenv("WORLD_SIZE", buf, 1);
    setenv("LOCAL_WORLD_SIZE", buf, 1);
    int rc = fn(rank, arg);
    fflush(NULL);
    _exit(rc == 0 ? 0 : (rc & 0xff) ? rc & 0xff : 1);
}

static void describe(char *buf, size_t len, int rank, int status)
{
    if (WIFEXITED(status))
        snprintf(buf, len, "rank %d exited with status %d", rank, WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "rank %d was killed by signal %d (%s)", rank, WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, len, "rank %d ended with wait status %d", rank, status);
}

static phx_status spawn_processes(int n, int (*fn)(int, void *), void *arg)
{
    pid_t *pids = px_calloc((size_t)n, sizeof *pids);
    if (!pids) return PHX_ENOMEM;
    char port[16] = "";
    if (!getenv("MASTER_PORT")) {
        int p = px_free_port();
        if (p < 0) {
            px_free(pids);
            return phx_error(PHX_EIO, "phx_spawn: no free port for MASTER_PORT");
        }
        snprintf(port, sizeof port, "%d", p);
    }
    /* The ranks' store accepts only them (doc/reference/store.md): a job token,
     * unless the caller set one. */
    char token[2 * PX_STORE_NONCE + 1] = "";
    const char *have = getenv("PHX_STORE_TOKEN");
    if (!have || !*have) {
        uint8_t r[PX_STORE_NONCE];
        if (px_store_nonce(r, sizeof r)) {
            px_free(pids);
            return PHX_EIO;
        }
        for (size_t i = 0; i < sizeof r; i++) snprintf(token + 2 * i, 3, "%02x", r[i]);
    }
    fflush(NULL);
    char first[160] = "";
    int live = 0, nfail = 0;
    for (int r = 0; r < n; r++) {
        pid_t pid = fork();
        if (pid == 0) {
            px_free(pids); /* the parent's: the rank neither needs nor frees it (valgrind saw it leak) */
            child(r, n, fn, arg, port, token);
        }
        if (pid < 0) {
            snprintf(first, sizeof first, "cannot fork rank %d: %s", r, strerror(errno));
            nfail++;
            break;
        }
        pids[r] = pid;
        live++;
    }
    double kill_at = nfail ? px_now() + PX_SPAWN_GRACE : -1;
    if (nfail)
        for (int r = 0; r < n; r++)
            if (pids[r] > 0) kill(pids[r], SIGTERM);
    while (live > 0) {
        int reaped = 0;
        for (int r = 0; r < n; r++) {
            int status;
            if (pids[r] <= 0 || waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
            pids[r] = -pids[r];
            live--;
            reaped = 1;
            if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
            if (nfail++ == 0) {
                describe(first, sizeof first, r, status);
                kill_at = px_now() + PX_SPAWN_GRACE;
                for (int q = 0; q < n; q++)
                    if (pids[q] > 0) kill(pids[q], SIGTERM);
            }
        }
        if (kill_at >= 0 && px_now() >= kill_at) {
            for (int q = 0; q < n; q++)
                if (pids[q] > 0) kill(pids[q], SIGKILL);
            kill_at = -1;
        }
        if (!reaped) nap(0.005);
    }
    px_free(pids);
    if (nfail)
        return phx_error(PHX_EPEER, "phx_spawn: %s (the first of %d failures; the other ranks were stopped)", first,
                         nfail);
    return PHX_OK;
}

phx_status phx_spawn(int n, int (*fn)(int rank, void *arg), void *arg)
{
    if (n < 1) return phx_error(PHX_EINVAL, "phx_spawn: n = %d: expected at least 1 rank", n);
    if (!fn) return phx_error(PHX_EINVAL, "phx_spawn: fn is NULL");
    if (spawn_tls.active) return phx_error(PHX_ESTATE, "phx_spawn: called from inside a spawned thread rank");
    return want_threads() ? spawn_threads(n, fn, arg) : spawn_processes(n, fn, arg);
}
