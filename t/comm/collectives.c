/* Every collective x dtype x op x count on the backend PHX_COMM names,
 * for world sizes 1-4 (or the world phxrun gives).
 *
 *   t/comm/collectives            phx_spawn worlds of 1, 2, 3, 4 ranks
 *                                 (processes; threads when PHX_COMM=threads)
 *   phxrun --nproc-per-node N t/comm/collectives
 *   mpirun -np N t/comm/collectives
 *                                 one world of N, from the environment
 *
 * Each rank checks its own result against a float64 (or exact integer)
 * reference computed from the same deterministic inputs, and hashes it;
 * at the end the ranks allgather their verdicts and hashes, and rank 0
 * prints one TAP line per check: ok when every rank passed and every
 * rank's result is bitwise identical. COMM_SUITE=allreduce limits the
 * run to all-reduce; COMM_BIG=0 skips the >= 16M-element case;
 * COMM_WORLDS="2 3" picks the world sizes; COMM_ALGOS="ring hd rd" runs
 * every world once per gloo all-reduce algorithm (PHX_GLOO_ALGO). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "kernels/math.h"
#include "phalanx/phalanx.h"
#include "t/tap.h"

#define MAX_CHECKS 512
#define BIG_COUNT (16 * 1024 * 1024 + 3)

static const int64_t counts[] = {0, 1, 7, 1000003};
#define NCOUNTS (sizeof counts / sizeof counts[0])
static const char *const opn[] = {"sum", "avg", "max", "min"};

typedef struct results {
    int n; /* checks run */
    char name[MAX_CHECKS][128];
    int64_t bad[MAX_CHECKS]; /* elements wrong on this rank (-1: error) */
    int64_t hash[MAX_CHECKS];
    char why[MAX_CHECKS][160];
} results;

/* What phx_spawn's rank 0 reports back to the parent (shared memory). */
typedef struct report {
    int printed, failed;
} report;

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* Input element i of rank q for check salt, exactly representable in dt. */
static double gen(phx_dtype dt, int salt, int q, int64_t i, int64_t *iv)
{
    uint64_t u = mix(((uint64_t)salt << 48) ^ ((uint64_t)q << 40) ^ (uint64_t)i);
    switch (dt) {
    case PHX_F32: return (double)((int64_t)(u >> 40) - (1 << 23)) / (1 << 23);
    case PHX_F16: return (double)((int64_t)(u >> 53) - 1024) / 1024.0;
    case PHX_BF16: return (double)((int64_t)(u >> 56) - 128) / 128.0;
    case PHX_I32: *iv = (int32_t)(uint32_t)(u >> 32); return 0;
    default: *iv = (int64_t)u; return 0;
    }
}

static void put(void *buf, phx_dtype dt, int64_t i, double v, int64_t iv)
{
    switch (dt) {
    case PHX_F32: ((float *)buf)[i] = (float)v; break;
    case PHX_F16: ((uint16_t *)buf)[i] = phx_f32_to_f16((float)v); break;
    case PHX_BF16: ((uint16_t *)buf)[i] = phx_f32_to_bf16((float)v); break;
    case PHX_I32: ((int32_t *)buf)[i] = (int32_t)iv; break;
    default: ((int64_t *)buf)[i] = iv;
    }
}

static double getf(const void *buf, phx_dtype dt, int64_t i, int64_t *iv)
{
    switch (dt) {
    case PHX_F32: return ((const float *)buf)[i];
    case PHX_F16: return phx_f16_to_f32(((const uint16_t *)buf)[i]);
    case PHX_BF16: return phx_bf16_to_f32(((const uint16_t *)buf)[i]);
    case PHX_I32: *iv = ((const int32_t *)buf)[i]; return 0;
    default: *iv = ((const int64_t *)buf)[i]; return 0;
    }
}

static double eps(phx_dtype dt)
{
    return dt == PHX_F32 ? 0x1p-24 : dt == PHX_F16 ? 0x1p-11 : 0x1p-8;
}

static int64_t hash_bytes(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 0x9e3779b97f4a7c15ull;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return (int64_t)h;
}

/* Checks out[i] == reduction over ranks of gen(q, off + i). */
static int64_t check_reduce(const void *out, phx_dtype dt, phx_reduce_op op, int salt, int n, int64_t off, int64_t cnt,
                            char *why, size_t wl)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < cnt; i++) {
        int64_t iv = 0, gi = 0;
        double got = getf(out, dt, i, &gi);
        if (phx_dtype_is_float(dt)) {
            double ref = 0, mag = 0;
            for (int q = 0; q < n; q++) {
                double x = gen(dt, salt, q, off + i, &iv);
                mag += fabs(x);
                if (q == 0)
                    ref = x;
                else if (op == PHX_MAX)
                    ref = x > ref ? x : ref;
                else if (op == PHX_MIN)
                    ref = x < ref ? x : ref;
                else
                    ref += x;
            }
            if (op == PHX_AVG) {
                ref /= n;
                mag /= n;
            }
            double tol = (op == PHX_MAX || op == PHX_MIN) ? 0 : eps(dt) * (n + 1) * (mag + fabs(ref));
            if (!(fabs(got - ref) <= tol)) {
                if (!bad++)
                    snprintf(why, wl, "element %" PRId64 ": got %.9g, expected %.9g (tol %.3g)", i, got, ref, tol);
            }
        } else {
            uint64_t acc = 0;
            int64_t ref = 0;
            for (int q = 0; q < n; q++) {
                gen(dt, salt, q, off + i, &iv);
                if (dt == PHX_I32) iv = (int32_t)iv;
                if (q == 0) {
                    ref = iv;
                    acc = (uint64_t)iv;
                    continue;
                }
                if (op == PHX_MAX)
                    ref = iv > ref ? iv : ref;
                else if (op == PHX_MIN)
                    ref = iv < ref ? iv : ref;
                else
                    acc += (uint64_t)iv;
            }
            if (op == PHX_SUM || op == PHX_AVG) {
                ref = dt == PHX_I32 ? (int64_t)(int32_t)(uint32_t)acc : (int64_t)acc;
                if (op == PHX_AVG) ref /= n;
            }
            if (gi != ref && !bad++)
                snprintf(why, wl, "element %" PRId64 ": got %" PRId64 ", expected %" PRId64, i, gi, ref);
        }
    }
    return bad;
}

/* Checks out[i] == gen(src(i), off(i)) bit for bit (copies). */
static int64_t check_copy(const void *out, phx_dtype dt, int salt, int64_t cnt, int src_fixed, int64_t block, char *why,
                          size_t wl)
{
    size_t es = phx_dtype_size(dt);
    int64_t bad = 0;
    uint8_t want[8];
    for (int64_t i = 0; i < cnt; i++) {
        int q = src_fixed >= 0 ? src_fixed : (int)(i / block);
        int64_t j = src_fixed >= 0 ? i : i % block, iv = 0;
        double v = gen(dt, salt, q, j, &iv);
        put(want, dt, 0, v, iv);
        if (memcmp((const uint8_t *)out + (size_t)i * es, want, es) && !bad++)
            snprintf(why, wl, "element %" PRId64 " (from rank %d) differs", i, q);
    }
    return bad;
}

static void fill(void *buf, phx_dtype dt, int salt, int q, int64_t cnt)
{
    for (int64_t i = 0; i < cnt; i++) {
        int64_t iv = 0;
        double v = gen(dt, salt, q, i, &iv);
        put(buf, dt, i, v, iv);
    }
}

static phx_tensor *vec(phx_dtype dt, int64_t n)
{
    phx_tensor *t = phx_tensor_new(dt, 1, &n, phx_cpu());
    if (!t) {
        fprintf(stderr, "tensor_new: %s\n", phx_last_error());
        exit(99);
    }
    return t;
}

/* One check: records name, verdict and hash. */
static void record(results *r, const char *name, phx_status st, int64_t bad, const char *why, const phx_tensor *t)
{
    int k = r->n++;
    snprintf(r->name[k], sizeof r->name[k], "%s", name);
    r->bad[k] = st != PHX_OK ? -1 : bad;
    r->hash[k] = t ? hash_bytes(phx_tensor_data(t), phx_tensor_nbytes(t)) : 0;
    if (st != PHX_OK)
        snprintf(r->why[k], sizeof r->why[k], "%s: %s", phx_status_name(st), phx_last_error());
    else
        snprintf(r->why[k], sizeof r->why[k], "%s", bad ? why : "");
}

static void suite(phx_comm *c, results *r, int only_allreduce, int big)
{
    const int n = phx_comm_size(c), me = phx_comm_rank(c);
    const char *algo = getenv("PHX_GLOO_ALGO");
    char be[32], name[128], why[160];
    snprintf(be, sizeof be, "%s%s%s", phx_comm_backend(c), algo ? "/" : "", algo ? algo : "");
    int salt = 1;
    for (int dt = 0; dt < PHX_NUM_DTYPES; dt++) {
        for (size_t ci = 0; ci < NCOUNTS; ci++) {
            int64_t cnt = counts[ci];
            for (int op = 0; op < 4; op++, salt++) {
                phx_tensor *t = vec(dt, cnt);
                fill(phx_tensor_data(t), dt, salt, me, cnt);
                phx_status st = phx_comm_allreduce(c, t, op, NULL);
                why[0] = 0;
                int64_t bad = st ? 0 : check_reduce(phx_tensor_data(t), dt, op, salt, n, 0, cnt, why, sizeof why);
                snprintf(name, sizeof name, "%s world %d: allreduce %s %s count %" PRId64, be, n, phx_dtype_name(dt),
                         opn[op], cnt);
                record(r, name, st, bad, why, t);
                phx_tensor_free(t);
                if (only_allreduce) continue;

                salt++;
                phx_tensor *in = vec(dt, cnt * n), *out = vec(dt, cnt);
                fill(phx_tensor_data(in), dt, salt, me, cnt * n);
                st = phx_comm_reduce_scatter(c, in, out, op, NULL);
                why[0] = 0;
                bad = st ? 0 : check_reduce(phx_tensor_data(out), dt, op, salt, n, me * cnt, cnt, why, sizeof why);
                snprintf(name, sizeof name, "%s world %d: reduce_scatter %s %s count %" PRId64, be, n,
                         phx_dtype_name(dt), opn[op], cnt);
                record(r, name, st, bad, why, NULL); /* ranks hold different blocks */
                phx_tensor_free(in);
                phx_tensor_free(out);
            }
            if (only_allreduce) continue;
            /* broadcast from a root that moves with the check */
            int root = (int)((dt + ci) % (size_t)n);
            phx_tensor *t = vec(dt, cnt);
            fill(phx_tensor_data(t), dt, salt, me, cnt);
            phx_status st = phx_comm_broadcast(c, t, root, NULL);
            why[0] = 0;
            int64_t bad = st ? 0 : check_copy(phx_tensor_data(t), dt, salt, cnt, root, 0, why, sizeof why);
            snprintf(name, sizeof name, "%s world %d: broadcast %s root %d count %" PRId64, be, n, phx_dtype_name(dt),
                     root, cnt);
            record(r, name, st, bad, why, t);
            phx_tensor_free(t);
            salt++;
            /* allgather; for count 7 in place (input = this rank's block of the output) */
            phx_tensor *out = vec(dt, cnt * n), *in;
            int inplace = cnt == 7;
            in = inplace ? phx_tensor_view(out, me * cnt, 1, &cnt) : vec(dt, cnt);
            fill(phx_tensor_data(in), dt, salt, me, cnt);
            st = phx_comm_allgather(c, in, out, NULL);
            why[0] = 0;
            bad = st ? 0 : check_copy(phx_tensor_data(out), dt, salt, cnt * n, -1, cnt ? cnt : 1, why, sizeof why);
            snprintf(name, sizeof name, "%s world %d: allgather %s count %" PRId64 "%s", be, n, phx_dtype_name(dt), cnt,
                     inplace ? " (in place)" : "");
            record(r, name, st, bad, why, out);
            phx_tensor_free(in);
            phx_tensor_free(out);
            salt++;
        }
    }
    if (!only_allreduce) {
        phx_status st = phx_comm_barrier(c, NULL);
        snprintf(name, sizeof name, "%s world %d: barrier", be, n);
        record(r, name, st, 0, "", NULL);
    }
    if (big) {
        /* >= 16M elements: one dtype and op (runtime on small machines) */
        phx_tensor *t = vec(PHX_F32, BIG_COUNT);
        fill(phx_tensor_data(t), PHX_F32, 9999, me, BIG_COUNT);
        phx_status st = phx_comm_allreduce(c, t, PHX_SUM, NULL);
        why[0] = 0;
        int64_t bad =
            st ? 0 : check_reduce(phx_tensor_data(t), PHX_F32, PHX_SUM, 9999, n, 0, BIG_COUNT, why, sizeof why);
        snprintf(name, sizeof name, "%s world %d: allreduce f32 sum count %d", be, n, BIG_COUNT);
        record(r, name, st, bad, why, t);
        phx_tensor_free(t);
    }
}

/* Gathers every rank's verdicts and hashes; rank 0 prints the TAP lines
 * (numbered from tap_run_). Other ranks print their failures to stderr. */
static int publish(phx_comm *c, results *r)
{
    const int n = phx_comm_size(c), me = phx_comm_rank(c);
    int64_t k = r->n, nk = k * n;
    phx_tensor *bad = phx_tensor_from_data(PHX_I64, 1, &k, r->bad),
               *hash = phx_tensor_from_data(PHX_I64, 1, &k, r->hash);
    phx_tensor *allbad = vec(PHX_I64, nk), *allhash = vec(PHX_I64, nk);
    phx_status st = phx_comm_allgather(c, bad, allbad, NULL);
    if (!st) st = phx_comm_allgather(c, hash, allhash, NULL);
    for (int i = 0; i < r->n; i++)
        if (r->bad[i]) fprintf(stderr, "rank %d: %s: %" PRId64 " wrong: %s\n", me, r->name[i], r->bad[i], r->why[i]);
    if (st) {
        fprintf(stderr, "rank %d: gathering the results failed: %s\n", me, phx_last_error());
        return 1;
    }
    if (me == 0) {
        const int64_t *ab = phx_tensor_data(allbad), *ah = phx_tensor_data(allhash);
        for (int i = 0; i < r->n; i++) {
            int okall = 1, same = 1, who = -1;
            for (int q = 0; q < n; q++) {
                if (ab[q * k + i] != 0 && who < 0) {
                    okall = 0;
                    who = q;
                }
                if (ah[q * k + i] != ah[i]) same = 0;
            }
            if (!ok(okall && same, "%s", r->name[i])) {
                if (!okall)
                    diag("  rank %d: %" PRId64 " wrong%s%s", who, ab[who * k + i], who == 0 ? ": " : " (see stderr)",
                         who == 0 ? r->why[i] : "");
                if (!same) diag("  results differ between ranks (hash mismatch)");
            }
        }
    }
    phx_tensor_free(bad);
    phx_tensor_free(hash);
    phx_tensor_free(allbad);
    phx_tensor_free(allhash);
    return 0;
}

static int env_int(const char *v, int d)
{
    return v ? atoi(v) : d;
}

static int run_rank(int base, report *rep)
{
    phx_comm *c;
    if (phx_comm_init(NULL, &c)) {
        fprintf(stderr, "phx_comm_init: %s\n", phx_last_error());
        return 2;
    }
    results *r = calloc(1, sizeof *r);
    const char *s = getenv("COMM_SUITE");
    suite(c, r, s && !strcmp(s, "allreduce"), env_int(getenv("COMM_BIG"), 1));
    if (phx_comm_rank(c) == 0) tap_run_ = base;
    int rc = publish(c, r);
    if (phx_comm_rank(c) == 0 && rep) {
        rep->printed = tap_run_ - base;
        rep->failed = tap_failed_;
    }
    phx_comm_free(c);
    free(r);
    return rc; /* failed checks are "not ok" lines, not a failed rank */
}

typedef struct spawn_arg {
    int base;
    report *rep;
} spawn_arg;

static int spawned(int rank, void *p)
{
    spawn_arg *a = p;
    (void)rank;
    return run_rank(a->base, a->rep);
}

/* The number of checks one world runs (same for every world size). */
static int checks_per_world(void)
{
    const char *s = getenv("COMM_SUITE");
    int only = s && !strcmp(s, "allreduce");
    int per = PHX_NUM_DTYPES * (int)NCOUNTS * 4 * (only ? 1 : 2);
    if (!only) per += PHX_NUM_DTYPES * (int)NCOUNTS * 2 + 1;
    return per + (env_int(getenv("COMM_BIG"), 1) ? 1 : 0);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *launched = getenv("RANK") ? getenv("RANK") : getenv("OMPI_COMM_WORLD_RANK");
    if (launched) { /* under phxrun or mpirun: one world from the environment */
        int rc = run_rank(0, NULL);
        if (!strcmp(launched, "0")) return done_testing() || rc;
        return rc;
    }
    int worlds[8], nw = 0;
    const char *w = getenv("COMM_WORLDS");
    for (const char *p = w ? w : "1 2 3 4"; *p && nw < 8;) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p) break;
        worlds[nw++] = (int)x;
        p = end;
    }
    char algos[4][16], list[64];
    int na = 0;
    snprintf(list, sizeof list, "%s", getenv("COMM_ALGOS") ? getenv("COMM_ALGOS") : "");
    for (char *sv, *tok = strtok_r(list, " ", &sv); tok && na < 4; tok = strtok_r(NULL, " ", &sv))
        snprintf(algos[na++], sizeof algos[0], "%s", tok);
    int per = checks_per_world();
    plan(per * nw * (na ? na : 1));
    report *rep = mmap(NULL, sizeof *rep, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    for (int j = 0; j < nw * (na ? na : 1); j++) {
        int i = j % nw;
        if (na) setenv("PHX_GLOO_ALGO", algos[j / nw], 1);
        int base = tap_run_;
        rep->printed = rep->failed = 0;
        spawn_arg a = {base, rep};
        phx_status st = phx_spawn(worlds[i], spawned, &a);
        /* processes: rank 0 counted in its own copy of tap.h's counters */
        tap_run_ = base + rep->printed;
        tap_failed_ = rep->failed > tap_failed_ ? rep->failed : tap_failed_;
        if (st) diag("world %d: %s", worlds[i], phx_last_error());
        while (tap_run_ < base + per) ok(0, "world %d: check not reached", worlds[i]);
    }
    return done_testing();
}
