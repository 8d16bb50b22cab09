/* phxrun: starts the ranks of one node, like torchrun.
 *
 *   phxrun --nproc-per-node N [--nnodes M --node-rank K --master-addr A
 *          --master-port P | --standalone] [--grace S] prog args...
 *
 * Each rank is prog in its own process group (so a signal to the group
 * reaches whatever the rank started), with stdin from /dev/null, the
 * torchrun variables set, and PHX_NUM_THREADS / OMP_NUM_THREADS = cores / N
 * when unset. SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to every
 * rank. When a rank exits non-zero or dies by a signal, the other ranks
 * get SIGTERM (with SIGCONT, for a stopped rank), then SIGKILL after the
 * grace period (5 s); phxrun names the root cause (a stopped rank, else the
 * first killed by a signal phxrun did not send, else the first failure),
 * then the other failures, and exits with the root cause's status (128 +
 * signal for a signal). See doc/guide/comm.md.
 *
 * The job's store accepts only ranks that know its token: phxrun makes a
 * random PHX_STORE_TOKEN for its ranks when the environment has none (one
 * node), and passes the user's on (several nodes: the same on each). See
 * doc/reference/store.md. */
#include "config.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "src/world/free-port.h"
#include "src/world/master-addr.h"
#include "tools/phxrun-logs.h"

typedef struct opts {
    int nproc, nnodes, node_rank, port, standalone, tee, max_restarts;
    double grace;
    const char *addr, *log_dir;
    char **argv; /* prog and its arguments */
} opts;

static void usage(FILE *f)
{
    fputs("usage: phxrun --nproc-per-node N|auto|cpu|gpu [--nnodes M --node-rank K\n"
          "              --master-addr A --master-port P | --rdzv-endpoint A:P | --standalone]\n"
          "              [--log-dir DIR [--tee [0-3]]] [--max-restarts R] [--grace SECONDS] prog [args...]\n"
          "Starts N ranks of prog on this node with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,\n"
          "GROUP_RANK, MASTER_ADDR, MASTER_PORT and PHX_RESTART_COUNT set (RANK = node_rank * N + local\n"
          "rank). N: a number, gpu (the GPUs this node shows), cpu (its cores), auto (gpu if any, else cpu).\n"
          "  --standalone       one node, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT\n"
          "  --rdzv-endpoint    HOST:PORT, the same as --master-addr HOST --master-port PORT\n"
          "  --log-dir DIR      each rank's stdout and stderr in DIR/attempt_K/RANK/{stdout,stderr}.log\n"
          "  --tee [0-3]        also (or, without --log-dir, only) to the terminal, lines prefixed [rankR]:\n"
          "                     torchrun's values: 3 both streams (--tee alone), 1 stdout, 2 stderr, 0 none\n"
          "  --max-restarts R   when a rank fails, stop the ranks and start them again, up to R times\n"
          "  --grace S          seconds between SIGTERM and SIGKILL when stopping ranks (0-1000000, default 5)\n"
          "PHX_STORE_TOKEN: the job's store token; unset, phxrun makes a random one (one node) or\n"
          "warns (several nodes: export the same token on each).\n"
          "Defaults: --nnodes 1, --node-rank 0, MASTER_ADDR/MASTER_PORT from the environment,\n"
          "else 127.0.0.1:29500.\n",
          f);
}

static int die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "phxrun: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

static int parse_int(const char *name, const char *v, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    /* digits only (as every integer variable of the launchers): no blank, sign or 0x */
    if (!v || !*v || (*v < '0' || *v > '9') || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "phxrun: %s '%s': expected an integer in %ld..%ld\n", name, v ? v : "", lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

static int cores(void);

/* The GPUs this node shows: CUDA_VISIBLE_DEVICES' entries when set (as
 * CUDA counts them: up to the first that is not a number), else the
 * /dev/nvidiaN device files. No CUDA library is loaded. */
static int gpu_count(void)
{
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    int n = 0;
    if (v) {
        for (const char *p = v; *p;) {
            char *end;
            strtol(p, &end, 10);
            if (end == p) break;
            n++;
            p = *end == ',' ? end + 1 : end;
            if (*end != ',') break;
        }
        return n;
    }
    DIR *d = opendir("/dev");
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d));) {
        const char *s = e->d_name;
        if (strncmp(s, "nvidia", 6) || !s[6]) continue;
        s += 6;
        while (*s >= '0' && *s <= '9') s++;
        n += *s == 0;
    }
    closedir(d);
    return n;
}

/* --nproc-per-node: a number, or torchrun's gpu, cpu and auto. */
static int parse_nproc(const char *v, int *out)
{
    if (!strcmp(v, "cpu") || !strcmp(v, "auto")) {
        int g = strcmp(v, "auto") ? 0 : gpu_count();
        *out = g > 0 ? g : cores();
        return 0;
    }
    if (!strcmp(v, "gpu")) {
        if ((*out = gpu_count()) > 0) return 0;
        fprintf(stderr,
                "phxrun: --nproc-per-node gpu: this node shows no GPU (no /dev/nvidiaN, or "
                "CUDA_VISIBLE_DEVICES empty); use a number, cpu or auto\n");
        return -1;
    }
    char *end;
    long x = strtol(v, &end, 10);
    if (!*v || *v < '0' || *v > '9' || *end || x < 1 || x > 4096) {
        fprintf(stderr, "phxrun: --nproc-per-node '%s': expected 1..4096, gpu, cpu or auto\n", v);
        return -1;
    }
    *out = (int)x;
    return 0;
}

/* --rdzv-endpoint HOST:PORT (or [v6addr]:PORT); the port is 29400 when
 * left out, as torchrun's. */
static int parse_endpoint(const char *v, opts *o)
{
    static char host[256];
    const char *given = v;
    const char *colon = v[0] == '[' ? strstr(v, "]:") : strrchr(v, ':');
    size_t hl = colon ? (size_t)(colon - v) : strlen(v);
    if (v[0] == '[') {
        v++;
        hl = colon ? hl - 1 : 0;
        if (colon) colon++;
    }
    if (hl == 0 || hl >= sizeof host) {
        fprintf(stderr, "phxrun: --rdzv-endpoint '%s': expected HOST:PORT\n", given);
        return -1;
    }
    memcpy(host, v, hl);
    host[hl] = 0;
    o->addr = host;
    o->port = 29400;
    return colon ? parse_int("--rdzv-endpoint's port", colon + 1, 1, 65535, &o->port) : 0;
}

/* Options as torchrun spells them (dashes or underscores, "--x v" or "--x=v"). */
static int parse(int argc, char **argv, opts *o)
{
    o->nproc = -1;
    o->nnodes = 1;
    o->node_rank = 0;
    o->port = -1;
    o->grace = 5.0;
    int i = 1;
    for (; i < argc && argv[i][0] == '-' && argv[i][1] == '-'; i++) {
        char name[64], *val = NULL;
        if (!strcmp(argv[i], "--")) {
            i++;
            break;
        }
        snprintf(name, sizeof name, "%s", argv[i] + 2);
        for (char *p = name; *p; p++)
            if (*p == '_') *p = '-';
        char *eq = strchr(name, '=');
        if (eq) {
            *eq = 0;
            val = argv[i] + 2 + (eq - name) + 1;
        }
        if (!strcmp(name, "help")) {
            usage(stdout);
            exit(0);
        }
        if (!strcmp(name, "standalone")) {
            o->standalone = 1;
            continue;
        }
        if (!strcmp(name, "tee")) {
            /* torchrun's --tee takes 0-3 (--tee 3, --tee=3); bare --tee is 3.
             * A number after it is its value, never the program. */
            if (!val && i + 1 < argc && argv[i + 1][0] && strspn(argv[i + 1], "0123456789") == strlen(argv[i + 1]))
                val = argv[++i];
            if (!val)
                o->tee = 3;
            else if (val[0] >= '0' && val[0] <= '3' && !val[1])
                o->tee = val[0] - '0';
            else
                return die("--tee '%s': expected 0 (none), 1 (stdout), 2 (stderr) or 3 (both), as torchrun's; "
                           "a per-rank mapping such as 0:1,1:2 is not supported",
                           val);
            continue;
        }
        if (!val) {
            if (i + 1 >= argc) return die("option --%s needs a value", name);
            val = argv[++i];
        }
        int rc = 0;
        if (!strcmp(name, "nproc-per-node"))
            rc = parse_nproc(val, &o->nproc);
        else if (!strcmp(name, "nnodes"))
            rc = parse_int("--nnodes", val, 1, 1 << 20, &o->nnodes);
        else if (!strcmp(name, "node-rank"))
            rc = parse_int("--node-rank", val, 0, 1 << 20, &o->node_rank);
        else if (!strcmp(name, "master-port"))
            rc = parse_int("--master-port", val, 1, 65535, &o->port);
        else if (!strcmp(name, "master-addr"))
            o->addr = val;
        else if (!strcmp(name, "rdzv-endpoint"))
            rc = parse_endpoint(val, o);
        else if (!strcmp(name, "log-dir"))
            o->log_dir = val;
        else if (!strcmp(name, "max-restarts"))
            rc = parse_int("--max-restarts", val, 0, 1000000, &o->max_restarts);
        else if (!strcmp(name, "grace")) {
            char *end;
            o->grace = strtod(val, &end);
            /* bounded as PHX_TIMEOUT is: 'inf' would never escalate to SIGKILL */
            if (!*val || ((*val < '0' || *val > '9') && *val != '.') || strpbrk(val, "xX") || *end ||
                !(o->grace >= 0 && o->grace <= 1e6))
                return die("--grace '%s': expected seconds from 0 to 1000000", val);
        } else {
            usage(stderr);
            return die("unknown option --%s", name);
        }
        if (rc) return 2;
    }
    if (o->nproc < 1) {
        usage(stderr);
        return die("--nproc-per-node is required");
    }
    if (i >= argc) {
        usage(stderr);
        return die("no program to run");
    }
    if (o->node_rank >= o->nnodes) return die("--node-rank %d must be below --nnodes %d", o->node_rank, o->nnodes);
    if (o->standalone && (o->nnodes != 1 || o->addr || o->port > 0))
        return die("--standalone is one node on 127.0.0.1 with a free port: it excludes --nnodes > 1, "
                   "--master-addr, --master-port and --rdzv-endpoint");
    if ((long)o->nnodes * o->nproc > 1 << 24) return die("world too large");
    o->argv = argv + i;
    return 0;
}

static int cores(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void setenv_int(const char *name, int v)
{
    char b[16];
    snprintf(b, sizeof b, "%d", v);
    setenv(name, b, 1);
}

/* In the child: become rank `local`, then exec. */
static void start_rank(const opts *o, int local, const char *addr, int port, int attempt, const rank_out *out,
                       const sigset_t *orig, pid_t parent)
{
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(128 + SIGKILL); /* phxrun died before prctl */
    int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGPIPE};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) signal(sigs[i], SIG_DFL);
    sigprocmask(SIG_SETMASK, orig, NULL);
    int nul = open("/dev/null", O_RDONLY);
    if (nul >= 0) {
        dup2(nul, 0);
        if (nul > 0) close(nul);
    }
    rank_out_apply(out);
    setenv_int("PHX_RESTART_COUNT", attempt);
    setenv_int("RANK", o->node_rank * o->nproc + local);
    setenv_int("WORLD_SIZE", o->nnodes * o->nproc);
    setenv_int("LOCAL_RANK", local);
    setenv_int("LOCAL_WORLD_SIZE", o->nproc);
    setenv_int("GROUP_RANK", o->node_rank);
    setenv("MASTER_ADDR", addr, 1);
    setenv_int("MASTER_PORT", port);
    int threads = cores() / o->nproc;
    if (threads < 1) threads = 1;
    if (!getenv("PHX_NUM_THREADS")) setenv_int("PHX_NUM_THREADS", threads);
    if (!getenv("OMP_NUM_THREADS")) setenv_int("OMP_NUM_THREADS", threads);
    execvp(o->argv[0], o->argv);
    fprintf(stderr, "phxrun: rank %d: cannot run '%s': %s\n", o->node_rank * o->nproc + local, o->argv[0],
            strerror(errno));
    _exit(127);
}

static void describe(char *buf, size_t len, int rank, pid_t pid, int status)
{
    if (WIFEXITED(status))
        snprintf(buf, len, "rank %d (pid %d) exited with status %d", rank, (int)pid, WEXITSTATUS(status));
    else
        snprintf(buf, len, "rank %d (pid %d) was killed by signal %d (%s)", rank, (int)pid, WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
}

/* A random job token (64 hex digits) in PHX_STORE_TOKEN, unless set. */
static int job_token(const opts *o)
{
    const char *t = getenv("PHX_STORE_TOKEN");
    if (t && *t) return 0;
    if (o->nnodes > 1) {
        fprintf(stderr,
                "phxrun: warning: --nnodes %d without PHX_STORE_TOKEN: the job's store accepts any "
                "client that reaches it; export the same PHX_STORE_TOKEN on every node (for example "
                "PHX_STORE_TOKEN=$(openssl rand -hex 32))\n",
                o->nnodes);
        return 0;
    }
    unsigned char r[32];
    size_t got = 0;
    while (got < sizeof r) {
        ssize_t n = getrandom(r + got, sizeof r - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return die("cannot make a job token: getrandom: %s", strerror(errno));
        got += (size_t)n;
    }
    char hex[2 * sizeof r + 1];
    for (size_t i = 0; i < sizeof r; i++) snprintf(hex + 2 * i, 3, "%02x", r[i]);
    setenv("PHX_STORE_TOKEN", hex, 1);
    return 0;
}

/* Stops every rank still running: the signal now, SIGKILL after the grace. */
static void stop_all(const opts *o, const pid_t *pids, int sig, double *kill_at)
{
    for (int l = 0; l < o->nproc; l++) {
        if (pids[l] <= 0) continue;
        kill(-pids[l], sig);
        kill(-pids[l], SIGCONT); /* a stopped rank gets to handle it */
    }
    if (*kill_at < 0) *kill_at = now() + o->grace;
}

/* How a rank ended (or stopped): the blame goes to the root cause, not to
 * the first survivor that gave up. */
enum { END_NONE, END_OK, END_FAILED, END_SIGNAL };
typedef struct rank_end {
    int how; /* END_* */
    int status; /* the wait status */
    int order; /* reaping order, 1 = first */
    int stopped; /* seen stopped (WIFSTOPPED) before phxrun stopped the job */
    int stop_sig;
    int sent; /* a signal phxrun sent it (stop or forward), 0 if none */
} rank_end;

/* The root cause: a rank that was stopped (the others time out waiting
 * for it), else the first that died by a signal phxrun did not send, else
 * the first that failed. -1 if none. */
static int root_cause(const opts *o, const rank_end *e)
{
    int best = -1;
    for (int l = 0; l < o->nproc; l++)
        if (e[l].stopped) return l;
    for (int l = 0; l < o->nproc; l++)
        if (e[l].how == END_SIGNAL && WTERMSIG(e[l].status) != e[l].sent && (best < 0 || e[l].order < e[best].order))
            best = l;
    if (best >= 0) return best;
    for (int l = 0; l < o->nproc; l++)
        if ((e[l].how == END_FAILED || e[l].how == END_SIGNAL) && (best < 0 || e[l].order < e[best].order)) best = l;
    return best;
}

/* Waits (up to the grace period) for the tee processes to copy the last
 * lines; those still running then are killed. */
static void wait_tees(const opts *o, rank_out *out)
{
    double until = now() + o->grace;
    for (int l = 0; l < o->nproc; l++) {
        while (out[l].tee > 0) {
            int status;
            pid_t w = waitpid(out[l].tee, &status, WNOHANG);
            if (w < 0 && errno == ECHILD) break;
            if (w == out[l].tee) { /* a helper that died is replaced to copy what is left */
                rank_out_tee_ended(&out[l], status);
                continue;
            }
            if (now() >= until) {
                kill(out[l].tee, SIGKILL);
                waitpid(out[l].tee, NULL, 0);
                break;
            }
            usleep(10000);
        }
        out[l].tee = 0;
        rank_out_release(&out[l]);
    }
}

/* One attempt: starts the ranks and waits for all of them. Returns the
 * job's exit status; *by_signal is the signal phxrun itself received
 * (no restart then), 0 if none. */
static int run_group(const opts *o, const char *addr, int port, int attempt, sigset_t *set, const sigset_t *orig,
                     int *by_signal)
{
    pid_t *pids = calloc((size_t)o->nproc, sizeof *pids), self = getpid();
    int *done = calloc((size_t)o->nproc, sizeof *done);
    rank_out *out = calloc((size_t)o->nproc, sizeof *out);
    rank_end *end = calloc((size_t)o->nproc, sizeof *end);
    int reaped = 0;
    if (!pids || !done || !out || !end) {
        free(pids);
        free(done);
        free(out);
        free(end);
        return die("out of memory");
    }
    for (int l = 0; l < o->nproc; l++) out[l].rd[0] = out[l].rd[1] = out[l].file[0] = out[l].file[1] = -1;
    fflush(NULL);
    int live = 0, exit_code = 0;
    char first[1024] = "";
    double kill_at = -1;
    for (int l = 0; l < o->nproc; l++) {
        int rank = o->node_rank * o->nproc + l;
        if (rank_out_open(&out[l], o->log_dir, attempt, rank, o->tee)) {
            snprintf(first, sizeof first, "cannot start rank %d: its output cannot be set up", rank);
            exit_code = 1;
            break;
        }
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) start_rank(o, l, addr, port, attempt, &out[l], orig, self);
        rank_out_close(&out[l]);
        if (pid < 0) {
            snprintf(first, sizeof first, "cannot start rank %d: %s", rank, strerror(errno));
            exit_code = 1;
            break;
        }
        setpgid(pid, pid); /* also done in the child: whichever runs first */
        pids[l] = pid;
        live++;
    }
    if (exit_code) {
        fprintf(stderr, "phxrun: %s; stopping the other ranks\n", first);
        stop_all(o, pids, SIGTERM, &kill_at);
    }
    while (live > 0) {
        siginfo_t si;
        struct timespec tick = {0, 200 * 1000 * 1000};
        int sig = sigtimedwait(set, &si, &tick);
        if (sig > 0 && sig != SIGCHLD) {
            /* forward, and stop everything after the grace period */
            for (int l = 0; l < o->nproc; l++)
                if (pids[l] > 0 && !done[l]) {
                    kill(-pids[l], sig);
                    kill(-pids[l], SIGCONT);
                    end[l].sent = sig;
                }
            if (!exit_code) {
                *by_signal = sig;
                exit_code = 128 + sig;
                snprintf(first, sizeof first, "stopped by %s: phxrun forwarded it to the ranks",
                         sig == SIGINT        ? "SIGINT (Ctrl-C)"
                             : sig == SIGTERM ? "SIGTERM"
                             : sig == SIGHUP  ? "SIGHUP"
                                              : "SIGQUIT");
            } else if (!*by_signal) {
                *by_signal = sig;
            }
            if (kill_at < 0) kill_at = now() + o->grace;
        }
        int status;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG | WUNTRACED | WCONTINUED)) > 0) {
            int l = 0;
            while (l < o->nproc && pids[l] != pid) l++;
            if (l == o->nproc) {
                if (!WIFSTOPPED(status) && !WIFCONTINUED(status))
                    for (int q = 0; q < o->nproc; q++)
                        if (out[q].tee == pid) rank_out_tee_ended(&out[q], status);
                continue;
            }
            if (WIFCONTINUED(status)) continue;
            if (WIFSTOPPED(status)) {
                /* A rank that stops (SIGSTOP, a debugger's SIGTSTP) before the
                 * job fails is what the others will time out on. */
                if (!exit_code && !end[l].stopped) {
                    end[l].stopped = 1;
                    end[l].stop_sig = WSTOPSIG(status);
                    fprintf(stderr, "phxrun: rank %d (pid %d) was stopped by signal %d (%s)\n",
                            o->node_rank * o->nproc + l, (int)pid, WSTOPSIG(status), strsignal(WSTOPSIG(status)));
                }
                continue;
            }
            done[l] = 1;
            live--;
            end[l].status = status;
            end[l].order = ++reaped;
            end[l].how = WIFEXITED(status) ? (WEXITSTATUS(status) ? END_FAILED : END_OK) : END_SIGNAL;
            if (end[l].how == END_OK) continue;
            if (exit_code) continue; /* already stopping: the final line names the root cause */
            describe(first, sizeof first, o->node_rank * o->nproc + l, pid, status);
            exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            fprintf(stderr, "phxrun: %s; stopping the other ranks\n", first);
            stop_all(o, pids, SIGTERM, &kill_at);
            for (int q = 0; q < o->nproc; q++)
                if (!done[q] && !end[q].sent) end[q].sent = SIGTERM;
        }
        if (kill_at >= 0 && now() >= kill_at) {
            for (int q = 0; q < o->nproc; q++) {
                if (pids[q] <= 0 || done[q]) continue;
                fprintf(stderr, "phxrun: rank %d (pid %d) still running after %.3g s; sending SIGKILL\n",
                        o->node_rank * o->nproc + q, (int)pids[q], o->grace);
                kill(-pids[q], SIGKILL);
                end[q].sent = SIGKILL;
            }
            kill_at = -1;
        }
    }
    /* Blame the root cause, then list the others that failed. */
    int root = *by_signal ? -1 : root_cause(o, end);
    if (exit_code && root >= 0) {
        int rank = o->node_rank * o->nproc + root;
        if (end[root].stopped) {
            snprintf(first, sizeof first, "rank %d (pid %d) was stopped by signal %d (%s) and stopped answering", rank,
                     (int)pids[root], end[root].stop_sig, strsignal(end[root].stop_sig));
        } else {
            describe(first, sizeof first, rank, pids[root], end[root].status);
            exit_code = WIFEXITED(end[root].status) ? WEXITSTATUS(end[root].status) : 128 + WTERMSIG(end[root].status);
        }
        size_t used = strlen(first);
        const char *sep = "; then ";
        for (int k = 1; k <= reaped; k++)
            for (int l = 0; l < o->nproc; l++) {
                if (end[l].order != k || l == root || end[l].how == END_OK || used + 64 >= sizeof first) continue;
                char one[128];
                describe(one, sizeof one, o->node_rank * o->nproc + l, pids[l], end[l].status);
                used += (size_t)snprintf(first + used, sizeof first - used, "%s%s", sep, one);
                sep = ", ";
            }
    }
    /* A failed attempt leaves nothing: whatever the ranks started goes too. */
    if (exit_code)
        for (int l = 0; l < o->nproc; l++)
            if (pids[l] > 0) kill(-pids[l], SIGKILL);
    wait_tees(o, out);
    if (exit_code && first[0] && strncmp(first, "cannot", 6)) {
        char head[64] = "failed: "; /* with restarts: which attempt, as more may follow */
        if (*by_signal && !strncmp(first, "stopped by", 10))
            head[0] = '\0';
        else if (o->max_restarts > 0)
            snprintf(head, sizeof head, "attempt %d of %d failed: ", attempt + 1, o->max_restarts + 1);
        fprintf(stderr, "phxrun: %s%s (exit status %d)\n", head, first, exit_code);
    }
    free(pids);
    free(done);
    free(out);
    free(end);
    return exit_code;
}

int main(int argc, char **argv)
{
    opts o;
    memset(&o, 0, sizeof o);
    int rc = parse(argc, argv, &o);
    if (rc) return rc;

    const char *addr = o.addr ? o.addr : getenv("MASTER_ADDR");
    int port = o.port;
    if (o.standalone) {
        addr = "127.0.0.1";
        if ((port = px_free_port()) < 0) return die("--standalone: no free port on 127.0.0.1");
    }
    /* Several nodes: every node must be told where node 0 is, and a name
     * that resolves to loopback reaches no other node. Said now, not
     * after PHX_TIMEOUT. */
    char ip[64];
    if (o.nnodes > 1 && (!addr || !*addr))
        return die("--nnodes %d needs --master-addr (or MASTER_ADDR): the address of node 0 that every node can "
                   "reach, the same on each",
                   o.nnodes);
    if (o.nnodes > 1 && px_name_is_loopback(addr, ip, sizeof ip))
        return die("--master-addr %s resolves to %s, a loopback address, on this node: the other nodes cannot "
                   "reach it (see /etc/hosts, where Debian maps the host's own name to 127.0.1.1); give node 0's "
                   "address on the network",
                   addr, ip);
    if (!addr || !*addr) addr = "127.0.0.1";
    if ((rc = job_token(&o))) return rc;
    if (port < 0) {
        const char *p = getenv("MASTER_PORT");
        if (p && parse_int("MASTER_PORT", p, 1, 65535, &port)) return 2;
        if (!p) port = 29500;
    }
    /* Rank 0 of node 0 hosts the store: say now, not after the ranks
     * started, that another job holds the port. */
    if (o.node_rank == 0 && px_port_busy(port))
        return die("port %d is in use on this node (another job's store?): use --standalone for a free "
                   "port, or --master-port / MASTER_PORT",
                   port);

    /* Signals are taken synchronously (sigtimedwait), never by handlers. */
    sigset_t set, orig;
    sigemptyset(&set);
    int fwd[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    for (size_t i = 0; i < 4; i++) sigaddset(&set, fwd[i]);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, &orig);

    for (int attempt = 0;; attempt++) {
        int by_signal = 0;
        rc = run_group(&o, addr, port, attempt, &set, &orig, &by_signal);
        if (rc == 0 && attempt > 0)
            fprintf(stderr, "phxrun: succeeded after %d restart%s\n", attempt, attempt > 1 ? "s" : "");
        if (rc != 0 && !by_signal && attempt >= o.max_restarts && o.max_restarts > 0)
            fprintf(stderr, "phxrun: no restarts left (--max-restarts %d): exit status %d\n", o.max_restarts, rc);
        if (rc == 0 || by_signal || attempt >= o.max_restarts) return rc;
        fprintf(stderr, "phxrun: restarting the ranks (restart %d of at most %d, PHX_RESTART_COUNT=%d)\n", attempt + 1,
                o.max_restarts, attempt + 1);
        /* --standalone: the last attempt's port may still be held. */
        if (o.standalone && (port = px_free_port()) < 0) return die("--standalone: no free port on 127.0.0.1");
    }
}
