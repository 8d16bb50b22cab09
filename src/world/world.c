/* The world from the environment: torchrun's variables, else Open MPI's,
 * else Slurm's, else a world of one. Inside phx_spawn threads the thread's
 * own rank wins. The one parser of the launcher variables: device
 * selection, the thread budget and phx-info ask it (world-impl.h). */
#include "config.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "src/base/util.h"
#include "src/base/abi.h"
#include "src/world/world-impl.h"
#include "phalanx/comm.h"
#include "phalanx/log.h"

#define PX_DEFAULT_PORT 29500

/* Parses the variable into *out. 0: unset (out untouched), 1: set,
 * -1: invalid (phx_error names it). */
static int env_int(const char *name, long lo, long hi, int *out)
{
    const char *v = getenv(name);
    if (!v) return 0;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    /* strtol skips leading blanks and takes a '+': "RANK=' 1'" is refused
     * as a typo rather than read as 1. */
    int digits = (*v >= '0' && *v <= '9') || (*v == '-' && v[1] >= '0' && v[1] <= '9');
    if (!digits || errno || *end || x < lo || x > hi) {
        phx_error(PHX_EINVAL,
                  "phx_world_from_env: %s='%s': expected an integer in %ld..%ld (digits only, no "
                  "spaces)",
                  name, v, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 1;
}

/* SLURM_TASKS_PER_NODE ("2(x3),1") gives the tasks on node SLURM_NODEID. */
static int slurm_local_size(int *out)
{
    const char *t = getenv("SLURM_TASKS_PER_NODE");
    int node = 0;
    if (!t) return 0;
    if (env_int("SLURM_NODEID", 0, 1 << 30, &node) < 0) return -1;
    const char *p = t;
    while (*p) {
        char *end;
        long n = strtol(p, &end, 10), rep = 1;
        if (end == p || *p < '0' || *p > '9' || n < 1 || n > 1000000) goto bad;
        p = end;
        if (*p == '(') {
            if (p[1] != 'x') goto bad;
            rep = strtol(p + 2, &end, 10);
            if (end == p + 2 || p[2] < '0' || p[2] > '9' || *end != ')' || rep < 1 || rep > 1000000) goto bad;
            p = end + 1;
        }
        if (node < rep) {
            *out = (int)n;
            return 1;
        }
        node -= (int)rep;
        if (*p == ',')
            p++;
        else if (*p)
            goto bad;
    }
    return 0; /* node beyond the list: leave the default */
bad:
    phx_error(PHX_EINVAL, "phx_world_from_env: SLURM_TASKS_PER_NODE='%s': expected a list like '2(x3),1'", t);
    return -1;
}

/* Reads one launcher's names; returns 1 when its rank variable is set. */
static int read_launcher(const char *rank_v, const char *size_v, const char *lrank_v, const char *lsize_v, phx_world *w,
                         phx_status *st)
{
    int r = env_int(rank_v, 0, 1 << 30, &w->rank);
    int s = env_int(size_v, 1, 1 << 30, &w->size);
    *st = PHX_OK;
    if (r < 0 || s < 0) {
        *st = PHX_EINVAL;
        return 1;
    }
    if (r == 0 && s == 0) return 0;
    if (r == 0 || s == 0) {
        *st = phx_error(PHX_EINVAL, "phx_world_from_env: %s is set ('%s') but %s is not", r ? rank_v : size_v,
                        getenv(r ? rank_v : size_v), r ? size_v : rank_v);
        return 1;
    }
    w->local_rank = w->rank;
    w->local_size = w->size;
    if (lrank_v && env_int(lrank_v, 0, 1 << 30, &w->local_rank) < 0) {
        *st = PHX_EINVAL;
        return 1;
    }
    if (lsize_v && env_int(lsize_v, 1, 1 << 30, &w->local_size) < 0) {
        *st = PHX_EINVAL;
        return 1;
    }
    if (!lsize_v && slurm_local_size(&w->local_size) < 0) {
        *st = PHX_EINVAL;
        return 1;
    }
    if (w->rank >= w->size) {
        *st =
            phx_error(PHX_EINVAL, "phx_world_from_env: %s=%d is not less than %s=%d", rank_v, w->rank, size_v, w->size);
        return 1;
    }
    if (w->local_size > w->size) {
        *st = phx_error(PHX_EINVAL, "phx_world_from_env: %s=%d exceeds %s=%d", lsize_v ? lsize_v : "local size",
                        w->local_size, size_v, w->size);
        return 1;
    }
    if (w->local_rank >= w->local_size) {
        *st = phx_error(PHX_EINVAL, "phx_world_from_env: %s=%d is not less than the local world size %d",
                        lrank_v ? lrank_v : "local rank", w->local_rank, w->local_size);
        return 1;
    }
    return 1;
}

/* The first host of a Slurm hostlist ("gpu[07-09,12],cpu1" gives "gpu07",
 * "r[1-2]-n[01-04]" gives "r1-n01"): where Slurm's block distribution puts
 * task 0. Returns 0, or -1 for a list it cannot read. */
static int slurm_first_host(const char *list, char *out, size_t len)
{
    size_t n = 0;
    for (const char *p = list; *p && *p != ','; p++) {
        if (*p == '[') {
            const char *close = strchr(p, ']');
            size_t d = strspn(p + 1, "0123456789");
            if (!close || d == 0 || n + d >= len) return -1;
            memcpy(out + n, p + 1, d);
            n += d;
            p = close;
            continue;
        }
        if (*p == ']' || n + 1 >= len) return -1;
        out[n++] = *p;
    }
    out[n] = 0;
    return n > 0 ? 0 : -1;
}

/* Whether this process is a task of a Slurm job step (srun): Slurm 22.05
 * sets SLURM_PROCID=0 in the batch script too, but SLURM_STEP_ID only in a
 * step's tasks (the batch, extern and interactive steps have ids from
 * 0xfffffff0 up, and the batch script is given none). */
static int slurm_task(void)
{
    const char *step = getenv("SLURM_STEP_ID");
    if (!getenv("SLURM_PROCID") || !step || !*step) return 0;
    char *end;
    unsigned long long id = strtoull(step, &end, 10);
    return !*end && id < 0xfffffff0ull;
}

int px_world_slurm_cpus(void)
{
    const char *v = getenv("SLURM_CPUS_PER_TASK");
    if (!v || !*v || !slurm_task() || getenv("RANK") || getenv("OMPI_COMM_WORLD_RANK") || px_spawn_current()->active)
        return 0;
    char *end;
    long n = strtol(v, &end, 10);
    if (*v >= '0' && *v <= '9' && !*end && n >= 1 && n <= 4096) return (int)n;
    phx_log(PHX_LOG_WARN,
            "SLURM_CPUS_PER_TASK='%s' is not an integer in 1..4096; ignored (threads: cores / local ranks)", v);
    return 0;
}

/* A Slurm batch script or salloc shell (SLURM_NTASKS > 1 in a job but not a
 * task of a step) would otherwise run as rank 0 of the job's tasks and wait
 * PHX_TIMEOUT for ranks nobody started. */
static phx_status slurm_batch_check(void)
{
    const char *nt = getenv("SLURM_NTASKS"), *job = getenv("SLURM_JOB_ID");
    if (!nt || slurm_task() || !job) return PHX_OK;
    if (atoi(nt) <= 1) return PHX_OK;
    return phx_error(PHX_EINVAL,
                     "phx_world_from_env: SLURM_NTASKS=%s in job %s but no SLURM_STEP_ID: this is the "
                     "batch script (or an salloc shell), not one of the job's tasks; start the ranks with srun "
                     "(srun prog args...), or one phxrun per node",
                     nt, job);
}

/* The ranks of w (not the master): the spawn thread's world, else the
 * launcher's. batch_check refuses a Slurm batch script that asks for a
 * world of several tasks (a local rank and size still make sense there). */
static phx_status world_ranks(phx_world *w, int batch_check)
{
    phx_status st = PHX_OK;
    w->rank = w->local_rank = 0;
    w->size = w->local_size = 1;
    const px_spawn_tls *tls = px_spawn_current();
    if (tls->active) {
        w->rank = w->local_rank = tls->rank;
        w->size = w->local_size = tls->size;
    } else if (!read_launcher("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", w, &st) &&
               !read_launcher("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                              "OMPI_COMM_WORLD_LOCAL_SIZE", w, &st) &&
               !(batch_check && (st = slurm_batch_check())) &&
               (!slurm_task() || !read_launcher("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL, w, &st))) {
        w->rank = w->local_rank = 0;
        w->size = w->local_size = 1;
    }
    return st;
}

phx_status phx_world_from_env(phx_world *out)
{
    if (!out) return phx_error(PHX_EINVAL, "phx_world_from_env: out is NULL");
    phx_world w = PHX_WORLD_INIT;
    phx_status st = world_ranks(&w, 1);
    if (st != PHX_OK) return st;

    if ((st = px_env_master(w.master_addr, sizeof w.master_addr, &w.master_port))) return st;
    return px_abi_out(out, &w, sizeof w, "phx_world_from_env", "phx_world", "PHX_WORLD_INIT");
}

int px_world_spans_nodes(void)
{
    phx_world w;
    memset(&w, 0, sizeof w);
    return world_ranks(&w, 0) == PHX_OK && w.size > w.local_size;
}

phx_status px_world_local(int *local_rank, int *local_size)
{
    phx_world w;
    memset(&w, 0, sizeof w);
    phx_status st = world_ranks(&w, 0);
    if (st != PHX_OK) w.local_rank = 0, w.local_size = 1;
    if (local_rank) *local_rank = w.local_rank;
    if (local_size) *local_size = w.local_size;
    return st;
}

phx_status px_env_master(char *addr, size_t len, int *port)
{
    const char *a = getenv("MASTER_ADDR");
    int p = PX_DEFAULT_PORT;
    /* Under srun: the step's first node, where task 0 runs. */
    static const char *const lists[] = {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"};
    char first[256];
    for (size_t i = 0; (!a || !*a) && slurm_task() && i < 3; i++) {
        const char *l = getenv(lists[i]);
        if (!l || !*l) continue;
        if (slurm_first_host(l, first, sizeof first))
            return phx_error(PHX_EINVAL,
                             "phx_world_from_env: %s='%s': expected a Slurm host list like "
                             "'node[01-04],gpu7' (or set MASTER_ADDR)",
                             lists[i], l);
        a = first;
    }
    if (!a || !*a) a = "127.0.0.1";
    if (strlen(a) >= len)
        return phx_error(PHX_EINVAL, "phx_world_from_env: MASTER_ADDR is %zu characters long, at most %zu allowed",
                         strlen(a), len - 1);
    if (env_int("MASTER_PORT", 1, 65535, &p) < 0) return PHX_EINVAL;
    strcpy(addr, a);
    *port = p;
    return PHX_OK;
}

/* Whether this Slurm task was started with PMI-2 as its MPI wire-up
 * (srun --mpi=pmi2, or MpiDefault=pmi2 in slurm.conf): Slurm's mpi/pmi2
 * plugin gives each task PMI_FD, PMI_RANK and PMI_SIZE, and srun exports
 * SLURM_MPI_TYPE; a PMIx start (--mpi=pmix) sets PMIX_RANK instead, and
 * mpirun OMPI_COMM_WORLD_SIZE. */
static int slurm_pmi2_task(void)
{
    if (!slurm_task() || getenv("PMIX_RANK") || getenv("OMPI_COMM_WORLD_SIZE")) return 0;
    const char *type = getenv("SLURM_MPI_TYPE");
    if (type && strncmp(type, "pmi2", 4) == 0) return 1;
    return getenv("PMI_FD") && getenv("PMI_RANK");
}

const char *px_world_mpi_unusable(void)
{
#ifdef PX_MPI_PMI2
    return NULL;
#else
    if (!slurm_pmi2_task()) return NULL;
    return "this task was started by srun with PMI-2 (srun --mpi=pmi2 or MpiDefault=pmi2: PMI_RANK set, no "
           "PMIX_RANK), and the Open MPI the mpi backend is built on has no PMI-2 support (no pmix s2 "
           "component; Debian's has none), so MPI_Init would abort the job";
#endif
}

/* The next entry of a comma-separated list at *p (blanks trimmed; empty
 * entries skipped): its start and length, *p moved past it. 0 at the end. */
static int next_entry(const char **p, const char **start, size_t *n)
{
    for (;;) {
        const char *s = *p;
        while (*s == ' ' || *s == '\t' || *s == ',') s++;
        if (!*s) return 0;
        const char *e = s;
        while (*e && *e != ',') e++;
        *p = e;
        while (e > s && (e[-1] == ' ' || e[-1] == '\t')) e--;
        *start = s;
        *n = (size_t)(e - s);
        if (*n) return 1;
    }
}

static int is_mpi(const char *s, size_t n)
{
    return n == 3 && strncmp(s, "mpi", 3) == 0;
}

/* Whether the list names mpi. */
static int names_mpi(const char *list)
{
    const char *s;
    size_t n;
    while (next_entry(&list, &s, &n))
        if (is_mpi(s, n)) return 1;
    return 0;
}

phx_status px_world_comm_selection(const char *sel, char *buf, size_t len, const char **out)
{
    *out = sel;
    const char *why = px_world_mpi_unusable();
    if (!why) return PHX_OK;
    while (sel && (*sel == ' ' || *sel == '\t')) sel++;
    if (!sel || !*sel) {
        phx_log(PHX_LOG_INFO, "backend mpi not tried: %s; use srun --mpi=pmix for the mpi backend", why);
        *out = "^mpi";
        return PHX_OK;
    }
    if (*sel == '^') {
        if (names_mpi(sel + 1)) return PHX_OK;
        if ((size_t)snprintf(buf, len, "%s,mpi", sel) >= len) return PHX_OK; /* too long: the loader says so */
        *out = buf;
        return PHX_OK;
    }
    if (!names_mpi(sel)) return PHX_OK;
    /* An ordered list naming mpi: the others, in their order. */
    size_t used = 0, n;
    const char *p = sel, *s;
    buf[0] = 0;
    while (next_entry(&p, &s, &n)) {
        if (is_mpi(s, n)) continue;
        int w = snprintf(buf + used, len - used, "%s%.*s", used ? "," : "", (int)n, s);
        if (w < 0 || (size_t)w >= len - used) return PHX_OK; /* too long: the loader says so */
        used += (size_t)w;
    }
    if (!used)
        return phx_error(PHX_EUNSUPPORTED,
                         "phx_comm_init: backend '%s' cannot start here: %s; start the job with srun --mpi=pmix "
                         "(srun --mpi=list shows what this Slurm has), or set PHX_COMM=gloo",
                         sel, why);
    phx_log(PHX_LOG_INFO, "backend mpi not tried: %s; trying '%s'", why, buf);
    *out = buf;
    return PHX_OK;
}
