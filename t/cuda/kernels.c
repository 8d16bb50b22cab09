/* Every slot of the cuda kernel table against the CPU kernel table, on
 * fresh random inputs (seed from the clock, printed; PHX_TEST_SEED
 * repeats a run), with every output poisoned (all bits set: NaN for the
 * float types) on both devices before the kernels run.
 *
 * Bounds: ops that do the same f32 arithmetic as the CPU (casts, fills,
 * axpby, mul, bias_add, relu, dropout, the uniform fill, SGD, Adam,
 * unscale, max/min) must match bit for bit; the plugin is built without
 * FMA contraction so they do. Transcendental activations (math.h's
 * phx_expf/phx_tanhf/phx_erf1p on both devices) and the normal fill
 * (CUDA's logf/cosf against glibc's): relative error <= 1e-6 with an
 * absolute floor of 1e-6 for f32 results, one rounding of the result type
 * for f16/bf16. Reductions summed in another order (layernorm, softmax,
 * loss values): ||gpu - cpu|| / ||cpu|| <= 1e-5 (2e-5 for layernorm's
 * dw/db sums over 300 rows), 1e-6 for the double loss sums, 1e-12 for
 * reduce's double sums. Layernorm and cross entropy also run on inputs
 * with a large common offset: both devices work on rows shifted by their
 * first element / their max, so the bounds stay the same (an unshifted
 * mean or lse = max + log s would be off by ~ulp(offset), far beyond).
 * GEMM, ||gpu - cpu|| / ||cpu||: 1e-5 with an f32 result, 2e-3 into f16,
 * 1.6e-2 into bf16 (one rounding of the result type, 2^-9 and 2^-6 at
 * worst after a reordered f32 sum). The tensor API's slots (minor 4):
 * copies, where, index_select and gather bit for bit; binary and unary
 * ops value for value (NaN where NaN) except pow, exp, log and rsqrt
 * (1e-6 relative for f32, one rounding for bf16); reduce_dim's max/min
 * and positions exactly, its sums, softmax_dim and its backward 1e-5
 * norm-wise (one rounding for bf16); index_add and scatter_add, which add
 * with atomics in any order, 1e-5 (f32) and 1.6e-2 (bf16) norm-wise. The
 * GPU's own rule for indices out of range (0 written, adds skipped) is
 * checked on the GPU alone. Skips without a CUDA device. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "kernels/math.h"
#include "phalanx/device.h"
#include "phalanx/error.h"
#include "phalanx/tensor.h"
#include "phalanx/plugin/device_v1.h"
#include "t/tap.h"

static const phx_device_v1 *G, *C; /* GPU and CPU tables */
static const phx_kernels_v1 *KG, *KC;
static uint64_t rng_state;

static uint64_t rnd64(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static float rndf(float lo, float hi)
{
    return lo + (hi - lo) * (float)((rnd64() >> 40) * (1.0 / 16777216.0));
}

/* ---- buffers: a host copy (CPU side) and a device twin, both poisoned */

typedef struct buf {
    void *h, *d;
    size_t bytes;
} buf;

static buf bnew(size_t bytes)
{
    buf b = {malloc(bytes ? bytes : 1), NULL, bytes};
    memset(b.h, 0xff, bytes);
    if (G->alloc(0, bytes ? bytes : 1, &b.d) != PHX_OK || (bytes && G->copy_h2d(0, b.d, b.h, bytes) != PHX_OK)) {
        diag("device buffer of %zu bytes: %s", bytes, phx_last_error());
        exit(1);
    }
    return b;
}

/* Same contents on both sides. */
static void bset(buf *b, const void *src)
{
    memcpy(b->h, src, b->bytes);
    G->copy_h2d(0, b->d, src, b->bytes);
}

static void bfree(buf *b)
{
    free(b->h);
    G->release(0, b->d);
}

/* The device side, brought back into host memory out (synchronous). */
static void bget(const buf *b, void *out)
{
    G->synchronize(0);
    if (G->copy_d2h(0, out, b->d, b->bytes) != PHX_OK) diag("copy_d2h: %s", phx_last_error());
}

/* Random values of dt, converted on the host like the CPU does. */
static buf brand(phx_dtype dt, int64_t n, float lo, float hi)
{
    size_t es = phx_dtype_size(dt);
    buf b = bnew((size_t)n * es);
    float *f = malloc((size_t)n * sizeof *f + 1);
    for (int64_t i = 0; i < n; i++) f[i] = rndf(lo, hi);
    void *tmp = malloc((size_t)n * es + 1);
    KC->cast(0, tmp, dt, f, PHX_F32, n);
    bset(&b, tmp);
    free(tmp);
    free(f);
    return b;
}

/* ---- comparisons */

static float at(const void *p, phx_dtype dt, int64_t i)
{
    switch (dt) {
    case PHX_F16: return phx_f16_to_f32(((const uint16_t *)p)[i]);
    case PHX_BF16: return phx_bf16_to_f32(((const uint16_t *)p)[i]);
    case PHX_I32: return (float)((const int32_t *)p)[i];
    case PHX_I64: return (float)((const int64_t *)p)[i];
    default: return ((const float *)p)[i];
    }
}

/* bit for bit */
static int same(const buf *b, const char *what)
{
    unsigned char *g = malloc(b->bytes + 1);
    bget(b, g);
    size_t i = 0;
    while (i < b->bytes && g[i] == ((unsigned char *)b->h)[i]) i++;
    int good = ok(i == b->bytes, "%s: bit for bit", what);
    if (!good)
        diag("  first difference at byte %zu of %zu: gpu %02x cpu %02x", i, b->bytes, g[i], ((unsigned char *)b->h)[i]);
    free(g);
    return good;
}

/* per element: |g - c| <= rel (|c| + floor); NaN only where both are */
static int close_elem(const buf *b, phx_dtype dt, int64_t n, double rel, double floor, const char *what)
{
    void *g = malloc(b->bytes + 1);
    bget(b, g);
    int64_t bad = -1;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double gv = at(g, dt, i), cv = at(b->h, dt, i);
        if (isnan(cv) || isnan(gv)) {
            if (!(isnan(cv) && isnan(gv)) && bad < 0) bad = i;
            continue;
        }
        if (isinf(cv) || isinf(gv)) {
            if (gv != cv && bad < 0) bad = i;
            continue;
        }
        double e = fabs(gv - cv) / (fabs(cv) + floor);
        if (e > worst) worst = e;
        if (e > rel && bad < 0) bad = i;
    }
    int good = ok(bad < 0, "%s: per element within %.1e (worst %.2e)", what, rel, worst);
    if (!good) diag("  element %lld: gpu %.9g cpu %.9g", (long long)bad, at(g, dt, bad), at(b->h, dt, bad));
    free(g);
    return good;
}

/* ||g - c|| / ||c|| <= tol, and no NaN anywhere (unwritten outputs) */
static int close_norm(const buf *b, phx_dtype dt, int64_t n, double tol, const char *what)
{
    void *g = malloc(b->bytes + 1);
    bget(b, g);
    double num = 0, den = 0;
    int64_t nan_at = -1;
    for (int64_t i = 0; i < n; i++) {
        double gv = at(g, dt, i), cv = at(b->h, dt, i);
        if ((isnan(gv) || isnan(cv)) && nan_at < 0) nan_at = i;
        num += (gv - cv) * (gv - cv);
        den += cv * cv;
    }
    double e = den > 0 ? sqrt(num / den) : sqrt(num);
    int good = ok(nan_at < 0 && e <= tol, "%s: relative error %.2e <= %.1e", what, e, tol);
    if (nan_at >= 0)
        diag("  NaN at %lld: gpu %g cpu %g (an unwritten output?)", (long long)nan_at, at(g, dt, nan_at),
             at(b->h, dt, nan_at));
    free(g);
    return good;
}

static int check_ok(phx_status sg, phx_status sc, const char *what)
{
    if (sg == PHX_OK && sc == PHX_OK) return 1;
    ok(0, "%s: gpu %s, cpu %s (%s)", what, phx_status_name(sg), phx_status_name(sc), phx_last_error());
    return 0;
}

static const phx_dtype fdt[3] = {PHX_F32, PHX_F16, PHX_BF16};
static double round_tol(phx_dtype dt)
{
    return dt == PHX_F32 ? 1e-6 : dt == PHX_F16 ? 1e-3 : 8e-3;
}
#define N_ODD 100003 /* not a multiple of 8: vector body and scalar tail */

/* ---- the ops */

static void test_cast_fill(void)
{
    const phx_dtype all[5] = {PHX_F32, PHX_F16, PHX_BF16, PHX_I32, PHX_I64};
    float special[] = {NAN, INFINITY, -INFINITY, -0.0f, 1e10f, -1e10f, 65519.f, 65520.f, 3e38f, 1e-8f, 2.5f, -2.5f};
    for (int s = 0; s < 5; s++)
        for (int d = 0; d < 5; d++) {
            phx_dtype st = all[s], dt = all[d];
            for (int shift = 0; shift < 2; shift++) { /* aligned, then one element off */
                int64_t n = N_ODD;
                buf in = brand(st, n + 1, -70000.f, 70000.f);
                if (phx_dtype_is_float(st)) {
                    void *tmp = malloc(64 * 8);
                    KC->cast(0, tmp, st, special, PHX_F32, 12);
                    memcpy(in.h, tmp, 12 * phx_dtype_size(st));
                    G->copy_h2d(0, in.d, tmp, 12 * phx_dtype_size(st));
                    free(tmp);
                } else if (st == PHX_I64) {
                    int64_t big[3] = {INT64_MAX, INT64_MIN, (int64_t)1 << 40};
                    memcpy(in.h, big, sizeof big);
                    G->copy_h2d(0, in.d, big, sizeof big);
                }
                buf out = bnew((size_t)(n + 1) * phx_dtype_size(dt));
                size_t so = (size_t)shift * phx_dtype_size(st), dof = (size_t)shift * phx_dtype_size(dt);
                phx_status sg = KG->cast(0, (char *)out.d + dof, dt, (char *)in.d + so, st, n);
                phx_status sc = KC->cast(0, (char *)out.h + dof, dt, (char *)in.h + so, st, n);
                char what[64];
                snprintf(what, sizeof what, "cast %s -> %s%s", phx_dtype_name(st), phx_dtype_name(dt),
                         shift ? " (unaligned)" : "");
                if (check_ok(sg, sc, what)) same(&out, what);
                bfree(&in);
                bfree(&out);
            }
        }
    double values[] = {3.7, -1e10, 0.0};
    for (int d = 0; d < 5; d++)
        for (int v = 0; v < 3; v++) {
            buf out = bnew((size_t)N_ODD * phx_dtype_size(all[d]));
            phx_status sg = KG->fill(0, out.d, all[d], N_ODD, values[v]);
            phx_status sc = KC->fill(0, out.h, all[d], N_ODD, values[v]);
            char what[64];
            snprintf(what, sizeof what, "fill %s with %g", phx_dtype_name(all[d]), values[v]);
            if (check_ok(sg, sc, what)) same(&out, what);
            bfree(&out);
        }
}

static void test_elementwise(void)
{
    /* axpby: every dtype pair, every mode */
    struct {
        int has_x;
        float alpha, beta;
        const char *name;
    } modes[] = {{0, 0.f, 0.f, "zero"},
                 {0, 0.f, 0.75f, "scale"},
                 {1, -1.5f, 0.f, "beta 0"},
                 {1, 0.5f, 1.f, "beta 1"},
                 {1, 1.25f, -0.5f, "general"}};
    for (int xi = 0; xi < 3; xi++)
        for (int yi = 0; yi < 3; yi++)
            for (int m = 0; m < 5; m++) {
                if (!modes[m].has_x && xi != yi) continue;
                buf x = brand(fdt[xi], N_ODD, -4, 4), y = brand(fdt[yi], N_ODD, -4, 4);
                if (modes[m].beta == 0.f) {
                    memset(y.h, 0xff, y.bytes);
                    G->copy_h2d(0, y.d, y.h, y.bytes);
                } /* not read */
                phx_status sg = KG->axpby(0, N_ODD, modes[m].alpha, modes[m].has_x ? x.d : NULL, fdt[xi], modes[m].beta,
                                          y.d, fdt[yi]);
                phx_status sc = KC->axpby(0, N_ODD, modes[m].alpha, modes[m].has_x ? x.h : NULL, fdt[xi], modes[m].beta,
                                          y.h, fdt[yi]);
                char what[64];
                snprintf(what, sizeof what, "axpby %s x %s y, %s", phx_dtype_name(fdt[xi]), phx_dtype_name(fdt[yi]),
                         modes[m].name);
                if (check_ok(sg, sc, what)) same(&y, what);
                bfree(&x);
                bfree(&y);
            }
    for (int d = 0; d < 3; d++) {
        buf a = brand(fdt[d], N_ODD, -3, 3), b = brand(fdt[d], N_ODD, -3, 3), o = bnew(a.bytes);
        char what[64];
        snprintf(what, sizeof what, "mul %s", phx_dtype_name(fdt[d]));
        if (check_ok(KG->mul(0, N_ODD, a.d, b.d, o.d, fdt[d]), KC->mul(0, N_ODD, a.h, b.h, o.h, fdt[d]), what))
            same(&o, what);
        bfree(&a), bfree(&b), bfree(&o);
        int64_t colss[2] = {64, 37};
        for (int c = 0; c < 2; c++) {
            int64_t rows = 999, cols = colss[c];
            buf y = brand(fdt[d], rows * cols, -2, 2), bias = brand(PHX_F32, cols, -1, 1);
            snprintf(what, sizeof what, "bias_add %s, %lld columns", phx_dtype_name(fdt[d]), (long long)cols);
            if (check_ok(KG->bias_add(0, rows, cols, y.d, fdt[d], bias.d),
                         KC->bias_add(0, rows, cols, y.h, fdt[d], bias.h), what))
                same(&y, what);
            for (int beta = 0; beta < 2; beta++) {
                buf db = brand(PHX_F32, cols, -1, 1);
                if (!beta) {
                    memset(db.h, 0xff, db.bytes);
                    G->copy_h2d(0, db.d, db.h, db.bytes);
                }
                snprintf(what, sizeof what, "bias_grad %s, %lld columns, beta %d", phx_dtype_name(fdt[d]),
                         (long long)cols, beta);
                if (check_ok(KG->bias_grad(0, rows, cols, y.d, fdt[d], beta ? 0.5f : 0.f, db.d),
                             KC->bias_grad(0, rows, cols, y.h, fdt[d], beta ? 0.5f : 0.f, db.h), what))
                    close_elem(&db, PHX_F32, cols, 1e-6, 1e-6, what);
                bfree(&db);
            }
            bfree(&y), bfree(&bias);
        }
    }
}

static void test_activations(void)
{
    const char *names[5] = {"relu", "gelu", "gelu_tanh", "tanh", "sigmoid"};
    for (int act = 0; act < 5; act++)
        for (int d = 0; d < 3; d++) {
            phx_dtype dt = fdt[d];
            buf x = brand(dt, N_ODD, -6, 6), y = bnew(x.bytes), dy = brand(dt, N_ODD, -1, 1), dx = bnew(x.bytes);
            char what[64];
            snprintf(what, sizeof what, "%s forward %s", names[act], phx_dtype_name(dt));
            if (check_ok(KG->act_forward(0, act, N_ODD, x.d, y.d, dt), KC->act_forward(0, act, N_ODD, x.h, y.h, dt),
                         what)) {
                if (act == PHX_ACT_RELU)
                    same(&y, what);
                else
                    close_elem(&y, dt, N_ODD, round_tol(dt), 1e-6, what);
            }
            /* backward from the same y on both sides (the CPU's) */
            G->copy_h2d(0, y.d, y.h, y.bytes);
            snprintf(what, sizeof what, "%s backward %s", names[act], phx_dtype_name(dt));
            if (check_ok(KG->act_backward(0, act, N_ODD, x.d, y.d, dy.d, dx.d, dt),
                         KC->act_backward(0, act, N_ODD, x.h, y.h, dy.h, dx.h, dt), what)) {
                if (act == PHX_ACT_RELU || act == PHX_ACT_TANH || act == PHX_ACT_SIGMOID)
                    same(&dx, what);
                else
                    close_elem(&dx, dt, N_ODD, round_tol(dt), 1e-6, what);
            }
            bfree(&x), bfree(&y), bfree(&dy), bfree(&dx);
        }
}

static void test_random(void)
{
    float ps[3] = {0.3f, 0.f, 1.f};
    for (int d = 0; d < 3; d++)
        for (int pi = 0; pi < 3; pi++) {
            phx_dtype dt = fdt[d];
            uint64_t seed = rnd64(), off = 7 + (rnd64() & 1023);
            buf x = brand(dt, N_ODD, -2, 2), y = bnew(x.bytes), m = bnew(N_ODD), dx = bnew(x.bytes);
            char what[80];
            snprintf(what, sizeof what, "dropout p=%g %s offset %llu: output", ps[pi], phx_dtype_name(dt),
                     (unsigned long long)off);
            if (check_ok(KG->dropout_forward(0, N_ODD, ps[pi], seed, off, x.d, y.d, m.d, dt),
                         KC->dropout_forward(0, N_ODD, ps[pi], seed, off, x.h, y.h, m.h, dt), what)) {
                same(&y, what);
                snprintf(what, sizeof what, "dropout p=%g %s: mask", ps[pi], phx_dtype_name(dt));
                same(&m, what);
            }
            snprintf(what, sizeof what, "dropout backward p=%g %s", ps[pi], phx_dtype_name(dt));
            if (check_ok(KG->dropout_backward(0, N_ODD, ps[pi], m.d, x.d, dx.d, dt),
                         KC->dropout_backward(0, N_ODD, ps[pi], m.h, x.h, dx.h, dt), what))
                same(&dx, what);
            bfree(&x), bfree(&y), bfree(&m), bfree(&dx);
        }
    for (int d = 0; d < 3; d++) {
        phx_dtype dt = fdt[d];
        uint64_t seed = rnd64(), off = rnd64() & 4095;
        buf u = bnew((size_t)N_ODD * phx_dtype_size(dt)), nrm = bnew(u.bytes);
        char what[64];
        snprintf(what, sizeof what, "rng_uniform %s", phx_dtype_name(dt));
        if (check_ok(KG->rng_uniform(0, u.d, dt, N_ODD, seed, off, -0.5f, 2.f),
                     KC->rng_uniform(0, u.h, dt, N_ODD, seed, off, -0.5f, 2.f), what))
            same(&u, what);
        snprintf(what, sizeof what, "rng_normal %s", phx_dtype_name(dt));
        if (check_ok(KG->rng_normal(0, nrm.d, dt, N_ODD, seed, off | 1, 0.25f, 2.f),
                     KC->rng_normal(0, nrm.h, dt, N_ODD, seed, off | 1, 0.25f, 2.f), what))
            close_elem(&nrm, dt, N_ODD, round_tol(dt), 1e-6, what);
        bfree(&u), bfree(&nrm);
    }
}

/* A large common offset for dt. f32: 1e5 (ulp 2^-7). Simulated on the
 * CPU, unshifted forms miss the bounds by far there: a layernorm mean
 * from sum x puts y off by ~5e-2, and lse = max + log s the cross entropy
 * gradient by ~1.5e-4 and its loss by ~1.2e-5 (reordered shifted sums:
 * ~3e-7, 1e-7, 7e-8). f16/bf16 (bounds of one rounding of theirs): 64,
 * where a range of 4 still holds 8 (bf16) to 64 (f16) values. */
static float big_offset(phx_dtype dt)
{
    return dt == PHX_F32 ? 1e5f : 64.f;
}

static void test_layernorm(void)
{
    /* rows, cols, whether x has a large common offset */
    int64_t shapes[3][3] = {{300, 1000, 0}, {257, 37, 0}, {300, 1000, 1}};
    for (int d = 0; d < 3; d++)
        for (int s = 0; s < 3; s++)
            for (int affine = 0; affine < 2; affine++) {
                phx_dtype dt = fdt[d];
                int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
                float off = shapes[s][2] ? big_offset(dt) : 0.f;
                buf x = brand(dt, n, off + 2, off + 6), w = brand(PHX_F32, cols, 0.5f, 1.5f),
                    b = brand(PHX_F32, cols, -1, 1);
                buf y = bnew(x.bytes), mean = bnew((size_t)rows * 4), rstd = bnew((size_t)rows * 4);
                char what[96];
                snprintf(what, sizeof what, "layernorm %s (%lld, %lld)%s, x in [%g, %g)", phx_dtype_name(dt),
                         (long long)rows, (long long)cols, affine ? " affine" : "", (double)(off + 2),
                         (double)(off + 6));
                if (!check_ok(KG->layernorm_forward(0, rows, cols, 1e-5f, x.d, affine ? w.d : NULL, affine ? b.d : NULL,
                                                    y.d, mean.d, rstd.d, dt),
                              KC->layernorm_forward(0, rows, cols, 1e-5f, x.h, affine ? w.h : NULL, affine ? b.h : NULL,
                                                    y.h, mean.h, rstd.h, dt),
                              what))
                    continue;
                close_norm(&y, dt, n, dt == PHX_F32 ? 1e-5 : round_tol(dt), what);
                close_norm(&mean, PHX_F32, rows, 1e-6, "  ... mean");
                close_norm(&rstd, PHX_F32, rows, 1e-5, "  ... rstd");
                /* backward from the CPU's statistics on both sides */
                G->copy_h2d(0, mean.d, mean.h, mean.bytes);
                G->copy_h2d(0, rstd.d, rstd.h, rstd.bytes);
                buf dy = brand(dt, n, -1, 1), dx = bnew(x.bytes), dw = brand(PHX_F32, cols, -1, 1),
                    db = brand(PHX_F32, cols, -1, 1);
                snprintf(what, sizeof what, "layernorm backward %s (%lld, %lld)%s", phx_dtype_name(dt), (long long)rows,
                         (long long)cols, affine ? " affine" : "");
                if (check_ok(KG->layernorm_backward(0, rows, cols, x.d, affine ? w.d : NULL, mean.d, rstd.d, dy.d, dx.d,
                                                    dw.d, db.d, dt),
                             KC->layernorm_backward(0, rows, cols, x.h, affine ? w.h : NULL, mean.h, rstd.h, dy.h, dx.h,
                                                    dw.h, db.h, dt),
                             what)) {
                    close_norm(&dx, dt, n, dt == PHX_F32 ? 1e-5 : round_tol(dt), what);
                    close_norm(&dw, PHX_F32, cols, 2e-5, "  ... dw (accumulated)");
                    close_norm(&db, PHX_F32, cols, 2e-5, "  ... db (accumulated)");
                }
                bfree(&x), bfree(&w), bfree(&b), bfree(&y), bfree(&mean), bfree(&rstd);
                bfree(&dy), bfree(&dx), bfree(&dw), bfree(&db);
            }
}

static void test_losses(void)
{
    for (int d = 0; d < 3; d++)
        for (int mean = 0; mean < 2; mean++) {
            phx_dtype dt = fdt[d];
            buf y = brand(dt, N_ODD, -2, 2), t = brand(PHX_F32, N_ODD, -2, 2), g = bnew((size_t)N_ODD * 4), l = bnew(4);
            char what[64];
            snprintf(what, sizeof what, "mse %s %s: loss", phx_dtype_name(dt), mean ? "mean" : "sum");
            if (check_ok(KG->mse(0, N_ODD, y.d, dt, t.d, mean, l.d, g.d),
                         KC->mse(0, N_ODD, y.h, dt, t.h, mean, l.h, g.h), what)) {
                close_norm(&l, PHX_F32, 1, 1e-6, what);
                snprintf(what, sizeof what, "mse %s %s: gradient", phx_dtype_name(dt), mean ? "mean" : "sum");
                same(&g, what);
            }
            bfree(&y), bfree(&t), bfree(&g), bfree(&l);
        }
    int64_t classes_list[2] = {10, 2000};
    for (int d = 0; d < 3; d++)
        for (int ci = 0; ci < 2; ci++)
            for (int mode = 0; mode < 3; mode++) { /* cross entropy, the same on offset logits, nll */
                phx_dtype dt = fdt[d];
                int logp = mode == 2;
                float off = mode == 1 ? big_offset(dt) : 0.f;
                int64_t rows = 300, classes = classes_list[ci];
                buf x = brand(dt, rows * classes, off - 8, off + 8), lab = bnew((size_t)rows * 8),
                    g = bnew((size_t)(rows * classes) * 4), l = bnew(4);
                int64_t *lh = malloc((size_t)rows * 8);
                for (int64_t r = 0; r < rows; r++) lh[r] = (int64_t)(rnd64() % (uint64_t)classes);
                bset(&lab, lh);
                int64_t bg = 5, bc = 5;
                char what[96];
                snprintf(what, sizeof what, "%s %s, %lld classes%s: loss", logp ? "nll" : "cross_entropy",
                         phx_dtype_name(dt), (long long)classes, off != 0.f ? ", logits offset" : "");
                if (check_ok(KG->cross_entropy(0, rows, classes, x.d, dt, lab.d, logp, l.d, g.d, &bg),
                             KC->cross_entropy(0, rows, classes, x.h, dt, lab.h, logp, l.h, g.h, &bc), what)) {
                    close_norm(&l, PHX_F32, 1, 1e-6, what);
                    snprintf(what, sizeof what, "%s %s, %lld classes%s: gradient", logp ? "nll" : "cross_entropy",
                             phx_dtype_name(dt), (long long)classes, off != 0.f ? ", logits offset" : "");
                    if (logp)
                        same(&g, what);
                    else
                        close_norm(&g, PHX_F32, rows * classes, 1e-5, what);
                    ok(bg == -1 && bc == -1, "  ... no bad label reported");
                }
                /* a bad label: an error naming the row, nothing written */
                lh[123] = classes;
                bset(&lab, lh);
                memset(g.h, 0xff, g.bytes);
                G->copy_h2d(0, g.d, g.h, g.bytes);
                memset(l.h, 0xff, 4);
                G->copy_h2d(0, l.d, l.h, 4);
                phx_status sg = KG->cross_entropy(0, rows, classes, x.d, dt, lab.d, logp, l.d, g.d, &bg);
                ok(sg == PHX_EINVAL && bg == 123, "  ... label %lld at row 123: PHX_EINVAL, row reported",
                   (long long)classes);
                like(phx_last_error(), "row 123", "  ... the message names the row");
                same(&g, "  ... gradient untouched");
                same(&l, "  ... loss untouched");
                free(lh);
                bfree(&x), bfree(&lab), bfree(&g), bfree(&l);
            }
}

static void test_optim(void)
{
    phx_sgd_hparams sgd[4] = {{0.1f, 0.f, 0.f, 0.f, 0},
                              {0.05f, 0.9f, 0.f, 1e-4f, 0},
                              {0.05f, 0.9f, 0.1f, 0.f, 1},
                              {0.01f, 0.5f, 0.f, 0.01f, 1}};
    for (int h = 0; h < 4; h++)
        for (int first = 0; first < 2; first++) {
            buf p = brand(PHX_F32, N_ODD, -1, 1), g = brand(PHX_F32, N_ODD, -1, 1), mb = brand(PHX_F32, N_ODD, -1, 1);
            char what[64];
            snprintf(what, sizeof what, "sgd config %d%s", h, first ? " first step" : "");
            float *mbd = sgd[h].momentum != 0.f ? mb.d : NULL, *mbh = sgd[h].momentum != 0.f ? mb.h : NULL;
            if (check_ok(KG->sgd_step(0, N_ODD, p.d, g.d, mbd, &sgd[h], first),
                         KC->sgd_step(0, N_ODD, p.h, g.h, mbh, &sgd[h], first), what)) {
                same(&p, what);
                if (mbd) same(&mb, "  ... momentum buffer");
            }
            bfree(&p), bfree(&g), bfree(&mb);
        }
    phx_adam_hparams adam[3] = {{1e-3f, 0.9f, 0.999f, 1e-8f, 0.f, 0, 0},
                                {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0, 1},
                                {2e-3f, 0.8f, 0.99f, 1e-6f, 0.1f, 1, 0}};
    int64_t steps[2] = {1, 10};
    for (int h = 0; h < 3; h++)
        for (int s = 0; s < 2; s++) {
            buf p = brand(PHX_F32, N_ODD, -1, 1), g = brand(PHX_F32, N_ODD, -1, 1),
                m = brand(PHX_F32, N_ODD, -0.1f, 0.1f), v = brand(PHX_F32, N_ODD, 0, 0.01f),
                vm = brand(PHX_F32, N_ODD, 0, 0.01f);
            char what[64];
            snprintf(what, sizeof what, "adam config %d step %lld", h, (long long)steps[s]);
            if (check_ok(KG->adam_step(0, N_ODD, p.d, g.d, m.d, v.d, adam[h].amsgrad ? vm.d : NULL, &adam[h], steps[s]),
                         KC->adam_step(0, N_ODD, p.h, g.h, m.h, v.h, adam[h].amsgrad ? vm.h : NULL, &adam[h], steps[s]),
                         what)) {
                same(&p, what);
                same(&m, "  ... m");
                same(&v, "  ... v");
                if (adam[h].amsgrad) same(&vm, "  ... vmax");
            }
            bfree(&p), bfree(&g), bfree(&m), bfree(&v), bfree(&vm);
        }
    for (int inf = 0; inf < 2; inf++) {
        buf g = brand(PHX_F32, N_ODD, -100, 100), f = bnew(4);
        float zero = 0.f;
        bset(&f, &zero);
        if (inf) {
            float big = 3e38f;
            ((float *)g.h)[77777] = big;
            G->copy_h2d(0, (float *)g.d + 77777, &big, 4);
        }
        char what[64];
        snprintf(what, sizeof what, "unscale_check%s", inf ? " with an overflow" : "");
        if (check_ok(KG->unscale_check(0, N_ODD, g.d, inf ? 4.f : 1.f / 1024.f, f.d),
                     KC->unscale_check(0, N_ODD, g.h, inf ? 4.f : 1.f / 1024.f, f.h), what)) {
            same(&g, what);
            same(&f, "  ... found_inf");
            ok(((float *)f.h)[0] == (inf ? 1.f : 0.f), "  ... found_inf is %d", inf);
        }
        bfree(&g), bfree(&f);
    }
}

static void test_reduce(void)
{
    const phx_dtype all[5] = {PHX_F32, PHX_F16, PHX_BF16, PHX_I32, PHX_I64};
    const char *ops[4] = {"sum", "avg", "max", "min"};
    for (int d = 0; d < 5; d++)
        for (int op = 0; op < 4; op++) {
            buf x = brand(all[d], 1000003, -1000, 1000);
            double rg = 0, rc = 0;
            char what[64];
            snprintf(what, sizeof what, "reduce %s %s", ops[op], phx_dtype_name(all[d]));
            if (check_ok(KG->reduce(0, op, 1000003, x.d, all[d], &rg), KC->reduce(0, op, 1000003, x.h, all[d], &rc),
                         what)) {
                if (op >= PHX_MAX)
                    ok(rg == rc, "%s: exact (%.17g)", what, rc);
                else
                    is_close(rg, rc, 1e-12, "%s", what);
            }
            bfree(&x);
        }
    buf x = brand(PHX_F32, 5000, -1, 1);
    float nan = NAN;
    G->copy_h2d(0, (float *)x.d + 4321, &nan, 4);
    double r = 0;
    ok(KG->reduce(0, PHX_MAX, 5000, x.d, PHX_F32, &r) == PHX_OK && isnan(r), "reduce max propagates NaN");
    bfree(&x);
}

static void test_gemm(void)
{
    struct {
        int64_t m, n, k;
    } shapes[3] = {{256, 1024, 784}, {33, 17, 129}, {1, 300, 64}};
    for (int a = 0; a < 3; a++)
        for (int c = 0; c < 3; c++)
            for (int s = 0; s < 3; s++)
                for (int t = 0; t < 4; t++) {
                    phx_dtype adt = fdt[a], cdt = fdt[c];
                    int ta = t & 1, tb = t >> 1;
                    int64_t m = shapes[s].m, n = shapes[s].n, k = shapes[s].k;
                    /* leading dims larger than the rows where it costs nothing */
                    int64_t lda = (ta ? m : k) + (s == 1 ? 3 : 0), ldb = (tb ? k : n) + (s == 1 ? 5 : 0);
                    int64_t ldc = n + (s == 1 ? 2 : 0);
                    buf A = brand(adt, (ta ? k : m) * lda, -1, 1), B = brand(adt, (tb ? n : k) * ldb, -1, 1),
                        Cm = brand(cdt, m * ldc, -1, 1);
                    float beta = s == 1 ? 0.5f : 0.f;
                    char what[96];
                    snprintf(what, sizeof what, "gemm %s -> %s (%lld, %lld, %lld) %c%c beta %g", phx_dtype_name(adt),
                             phx_dtype_name(cdt), (long long)m, (long long)n, (long long)k, ta ? 'T' : 'N',
                             tb ? 'T' : 'N', beta);
                    if (check_ok(KG->gemm(0, ta, tb, m, n, k, 1.25f, A.d, lda, B.d, ldb, adt, beta, Cm.d, ldc, cdt),
                                 KC->gemm(0, ta, tb, m, n, k, 1.25f, A.h, lda, B.h, ldb, adt, beta, Cm.h, ldc, cdt),
                                 what))
                        close_norm(&Cm, cdt, m * ldc, cdt == PHX_F32 ? 1e-5 : cdt == PHX_F16 ? 2e-3 : 1.6e-2, what);
                    bfree(&A), bfree(&B), bfree(&Cm);
                }
}

/* The transformer slots (minor 1): strided-batched GEMM, softmax with
 * and without the causal mask (and log), the embedding gather and its
 * scatter-add, the residual add and the sum of squares. */
static void test_transformer(void)
{
    char what[112];
    /* gemm_batched: attention's shapes (B*H, T, T, hd), a transposed b */
    for (int a = 0; a < 3; a++) {
        phx_dtype dt = fdt[a];
        int64_t batch = 12, m = 64, n = 64, k = 32;
        for (int tb = 0; tb < 2; tb++) {
            int64_t sa = m * k, sb = k * n, sc = m * n;
            buf A = brand(dt, batch * sa, -1, 1), B = brand(dt, batch * sb, -1, 1), Cm = brand(dt, batch * sc, -1, 1);
            snprintf(what, sizeof what, "gemm_batched %s x%lld (%lld, %lld, %lld) N%c beta 0.5", phx_dtype_name(dt),
                     (long long)batch, (long long)m, (long long)n, (long long)k, tb ? 'T' : 'N');
            if (check_ok(KG->gemm_batched(0, 0, tb, m, n, k, 0.75f, A.d, k, sa, B.d, tb ? k : n, sb, dt, 0.5f, Cm.d, n,
                                          sc, dt, batch),
                         KC->gemm_batched(0, 0, tb, m, n, k, 0.75f, A.h, k, sa, B.h, tb ? k : n, sb, dt, 0.5f, Cm.h, n,
                                          sc, dt, batch),
                         what))
                close_norm(&Cm, dt, batch * sc, dt == PHX_F32 ? 1e-5 : dt == PHX_F16 ? 2e-3 : 1.6e-2, what);
            bfree(&A), bfree(&B), bfree(&Cm);
        }
    }
    /* softmax: scores (rows of T = 128 with the causal mask, or 1000) */
    for (int a = 0; a < 3; a++)
        for (int v = 0; v < 4; v++) {
            phx_dtype dt = fdt[a];
            int causal = v & 1, lg = v >> 1;
            int64_t rows = causal ? 4 * 128 : 300, cols = causal ? 128 : 1000, n = rows * cols;
            buf x = brand(dt, n, -8, 8), y = bnew(x.bytes);
            snprintf(what, sizeof what, "softmax %s (%lld, %lld)%s%s", phx_dtype_name(dt), (long long)rows,
                     (long long)cols, causal ? " causal" : "", lg ? " log" : "");
            if (!check_ok(KG->softmax_forward(0, rows, cols, 0.125f, causal, lg, x.d, y.d, dt),
                          KC->softmax_forward(0, rows, cols, 0.125f, causal, lg, x.h, y.h, dt), what)) {
                bfree(&x), bfree(&y);
                continue;
            }
            close_elem(&y, dt, n, dt == PHX_F32 ? 1e-5 : round_tol(dt), 1e-6, what);
            /* backward from the CPU's output on both sides */
            G->copy_h2d(0, y.d, y.h, y.bytes);
            buf dy = brand(dt, n, -1, 1), dx = bnew(x.bytes);
            snprintf(what, sizeof what, "softmax backward %s (%lld, %lld)%s%s", phx_dtype_name(dt), (long long)rows,
                     (long long)cols, causal ? " causal" : "", lg ? " log" : "");
            if (check_ok(KG->softmax_backward(0, rows, cols, 0.125f, causal, lg, y.d, dy.d, dx.d, dt),
                         KC->softmax_backward(0, rows, cols, 0.125f, causal, lg, y.h, dy.h, dx.h, dt), what))
                close_norm(&dx, dt, n, dt == PHX_F32 ? 1e-5 : round_tol(dt), what);
            bfree(&x), bfree(&y), bfree(&dy), bfree(&dx);
        }
    /* embedding: 2048 indices into a (100, 96) table, repeats included */
    for (int a = 0; a < 3; a++) {
        phx_dtype dt = fdt[a];
        int64_t n = 2048, num = 100, dim = 96;
        buf idx = bnew((size_t)n * 8), w = brand(PHX_F32, num * dim, -1, 1),
            y = bnew((size_t)(n * dim) * phx_dtype_size(dt));
        int64_t *iv = malloc((size_t)n * 8);
        for (int64_t i = 0; i < n; i++) iv[i] = (int64_t)(rnd64() % (uint64_t)num);
        bset(&idx, iv);
        int64_t bad_g = 7, bad_c = 7;
        snprintf(what, sizeof what, "embedding %s (%lld of %lld, dim %lld)", phx_dtype_name(dt), (long long)n,
                 (long long)num, (long long)dim);
        if (check_ok(KG->embedding_forward(0, n, num, dim, idx.d, w.d, y.d, dt, &bad_g),
                     KC->embedding_forward(0, n, num, dim, idx.h, w.h, y.h, dt, &bad_c), what)) {
            ok(bad_g == -1 && bad_c == -1, "  ... no index out of range (gpu %lld, cpu %lld)", (long long)bad_g,
               (long long)bad_c);
            same(&y, what);
        }
        buf dy = brand(dt, n * dim, -1, 1), dw = brand(PHX_F32, num * dim, -1, 1);
        snprintf(what, sizeof what, "embedding backward %s (scatter-add of %lld rows)", phx_dtype_name(dt),
                 (long long)n);
        if (check_ok(KG->embedding_backward(0, n, num, dim, idx.d, dy.d, dt, dw.d),
                     KC->embedding_backward(0, n, num, dim, idx.h, dy.h, dt, dw.h), what))
            close_norm(&dw, PHX_F32, num * dim, 1e-5, what);
        iv[n / 2] = num; /* out of range: reported, not written */
        bset(&idx, iv);
        bad_g = bad_c = 7;
        KG->embedding_forward(0, n, num, dim, idx.d, w.d, y.d, dt, &bad_g);
        KC->embedding_forward(0, n, num, dim, idx.h, w.h, y.h, dt, &bad_c);
        ok(bad_g == n / 2 && bad_c == n / 2, "embedding %s: index %lld out of range found at row %lld (gpu %lld)",
           phx_dtype_name(dt), (long long)num, (long long)(n / 2), (long long)bad_g);
        free(iv);
        bfree(&idx), bfree(&w), bfree(&y), bfree(&dy), bfree(&dw);
    }
    /* add (in place on a) and sum_squares */
    for (int a = 0; a < 3; a++) {
        phx_dtype dt = fdt[a];
        buf x = brand(dt, N_ODD, -2, 2), y = brand(dt, N_ODD, -2, 2);
        snprintf(what, sizeof what, "add %s (%d, in place)", phx_dtype_name(dt), N_ODD);
        if (check_ok(KG->add(0, N_ODD, x.d, y.d, x.d, dt), KC->add(0, N_ODD, x.h, y.h, x.h, dt), what)) same(&x, what);
        double sg = -1, sc = -2;
        snprintf(what, sizeof what, "sum_squares %s (%d)", phx_dtype_name(dt), N_ODD);
        if (check_ok(KG->sum_squares(0, N_ODD, y.d, dt, &sg), KC->sum_squares(0, N_ODD, y.h, dt, &sc), what))
            ok(fabs(sg - sc) <= 1e-12 * fabs(sc), "%s: %.17g vs %.17g", what, sg, sc);
        bfree(&x), bfree(&y);
    }
}

/* The convolutional slots (minor 2). Convolutions, ||gpu - cpu|| /
 * ||cpu||: 1e-4 in f32 (cuDNN may pick Winograd or FFT algorithms, a few
 * ulps further than a direct sum), 1.6e-2 in bf16 (one rounding of y or
 * dx; dw is rounded to bf16 before it is added, as cuDNN gives it); db
 * 1e-5. BatchNorm: 1e-5 for the f32 statistics and sums, results 1e-5 in
 * f32 and one rounding in bf16. Max pooling is exact (y and argmax bit
 * for bit on integer-valued inputs with ties and a NaN); its dx and
 * average pooling 1e-5 in f32 and 1.6e-2 in bf16 (the CPU may round dx
 * after each addition). */

/* shapes: n c h w k kh kw oh ow stride_h stride_w pad_h pad_w dil_h dil_w groups */
static phx_conv2d_desc win(const int64_t v[16])
{
    phx_conv2d_desc d = {v[0], v[1], v[2],  v[3],  v[4],  v[5],  v[6],  v[7],
                         v[8], v[9], v[10], v[11], v[12], v[13], v[14], v[15]};
    return d;
}

static int win_name(char *out, size_t cap, const char *op, phx_dtype dt, const phx_conv2d_desc *d)
{
    return snprintf(out, cap, "%s %s (%lld,%lld,%lld,%lld)->%lldx%lldx%lld k%lldx%lld s%lld p%lldx%lld d%lld g%lld", op,
                    phx_dtype_name(dt), (long long)d->n, (long long)d->c, (long long)d->h, (long long)d->w,
                    (long long)d->k, (long long)d->oh, (long long)d->ow, (long long)d->kh, (long long)d->kw,
                    (long long)d->stride_h, (long long)d->pad_h, (long long)d->pad_w, (long long)d->dil_h,
                    (long long)d->groups);
}

static void test_conv(void)
{
    static const int64_t shapes[][16] = {
        {2, 3, 9, 11, 8, 3, 3, 9, 11, 1, 1, 1, 1, 1, 1, 1}, /* 3x3 "same" */
        {2, 4, 16, 15, 6, 3, 3, 8, 8, 2, 2, 1, 1, 1, 1, 1}, /* stride 2, odd width */
        {2, 4, 12, 12, 5, 3, 3, 12, 12, 1, 1, 2, 2, 2, 2, 1}, /* dilation 2 */
        {2, 6, 10, 10, 4, 3, 5, 10, 10, 1, 1, 1, 2, 1, 1, 2}, /* groups 2, 3x5 */
        {3, 16, 7, 7, 32, 1, 1, 7, 7, 1, 1, 0, 0, 1, 1, 1}, /* 1x1 */
        {4, 8, 32, 32, 16, 7, 7, 16, 16, 2, 2, 3, 3, 1, 1, 1}, /* ResNet's stem, smaller */
    };
    const phx_dtype dts[2] = {PHX_F32, PHX_BF16};
    char what[160];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int a = 0; a < 2; a++) {
            phx_dtype dt = dts[a];
            phx_conv2d_desc d = win(shapes[s]);
            int64_t nx = d.n * d.c * d.h * d.w, ny = d.n * d.k * d.oh * d.ow, nw = d.k * (d.c / d.groups) * d.kh * d.kw;
            double tol = dt == PHX_F32 ? 1e-4 : 1.6e-2;
            int with_bias = s % 2 == 0;
            buf x = brand(dt, nx, -1, 1), w = brand(dt, nw, -0.5f, 0.5f), bias = brand(PHX_F32, d.k, -1, 1),
                y = bnew((size_t)ny * phx_dtype_size(dt));
            win_name(what, sizeof what, with_bias ? "conv2d +bias" : "conv2d", dt, &d);
            if (check_ok(KG->conv2d_forward(0, &d, x.d, w.d, with_bias ? bias.d : NULL, y.d, dt),
                         KC->conv2d_forward(0, &d, x.h, w.h, with_bias ? bias.h : NULL, y.h, dt), what))
                close_norm(&y, dt, ny, tol, what);
            buf dy = brand(dt, ny, -1, 1), dx = bnew(x.bytes);
            win_name(what, sizeof what, "conv2d backward_data", dt, &d);
            if (check_ok(KG->conv2d_backward_data(0, &d, dy.d, w.d, dx.d, dt),
                         KC->conv2d_backward_data(0, &d, dy.h, w.h, dx.h, dt), what))
                close_norm(&dx, dt, nx, tol, what);
            buf dw = brand(PHX_F32, nw, -1, 1), db = brand(PHX_F32, d.k, -1, 1);
            win_name(what, sizeof what, "conv2d backward_weight", dt, &d);
            if (check_ok(KG->conv2d_backward_weight(0, &d, x.d, dy.d, dw.d, with_bias ? db.d : NULL, dt),
                         KC->conv2d_backward_weight(0, &d, x.h, dy.h, dw.h, with_bias ? db.h : NULL, dt), what)) {
                close_norm(&dw, PHX_F32, nw, tol, "  ... dw (accumulated)");
                close_norm(&db, PHX_F32, d.k, 1e-5, "  ... db (accumulated)");
            }
            bfree(&x), bfree(&w), bfree(&bias), bfree(&y), bfree(&dy), bfree(&dx), bfree(&dw), bfree(&db);
        }
    /* "same" padding with an even kernel pads the bottom/right once more:
     * not what cuDNN's symmetric padding gives, a clear refusal */
    static const int64_t even[16] = {1, 2, 8, 8, 2, 2, 2, 8, 8, 1, 1, 0, 0, 1, 1, 1};
    phx_conv2d_desc d = win(even);
    buf x = brand(PHX_F32, 128, -1, 1), w = brand(PHX_F32, 16, -1, 1), y = bnew(128 * 4);
    phx_status sg = KG->conv2d_forward(0, &d, x.d, w.d, NULL, y.d, PHX_F32);
    ok(sg == PHX_EUNSUPPORTED && strstr(phx_last_error(), "8x8") != NULL,
       "conv2d 2x2 \"same\" (output 8x8 from 8x8): gpu %s, expected PHX_EUNSUPPORTED naming the shapes (%s)",
       phx_status_name(sg), sg == PHX_OK ? "" : phx_last_error());
    bfree(&x), bfree(&w), bfree(&y);
}

static void test_batchnorm(void)
{
    /* n, c, hw (n * hw: 196, 21, 8, 2000), whether x has an offset */
    static const int64_t shapes[][4] = {{4, 6, 49, 0}, {3, 5, 7, 0}, {8, 16, 1, 0}, {2, 3, 1000, 1}};
    const phx_dtype dts[2] = {PHX_F32, PHX_BF16};
    char what[128];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int a = 0; a < 2; a++) {
            phx_dtype dt = dts[a];
            int64_t n = shapes[s][0], c = shapes[s][1], hw = shapes[s][2], total = n * c * hw;
            int affine = s != 1;
            float off = shapes[s][3] ? 8.f : 0.f, eps = 1e-5f;
            double tol = dt == PHX_F32 ? 1e-5 : round_tol(dt);
            buf x = brand(dt, total, off - 2, off + 2), mean = bnew((size_t)c * 4), var = bnew((size_t)c * 4);
            snprintf(what, sizeof what, "batchnorm_stats %s (%lld, %lld, %lld), x in [%g, %g)", phx_dtype_name(dt),
                     (long long)n, (long long)c, (long long)hw, (double)(off - 2), (double)(off + 2));
            if (check_ok(KG->batchnorm_stats(0, n, c, hw, x.d, dt, mean.d, var.d),
                         KC->batchnorm_stats(0, n, c, hw, x.h, dt, mean.h, var.h), what)) {
                close_norm(&mean, PHX_F32, c, 1e-5, "  ... mean");
                close_norm(&var, PHX_F32, c, 1e-5, "  ... var");
            }
            /* the rest from the CPU's statistics on both sides */
            G->copy_h2d(0, mean.d, mean.h, mean.bytes);
            G->copy_h2d(0, var.d, var.h, var.bytes);
            buf w = brand(PHX_F32, c, 0.5f, 1.5f), b = brand(PHX_F32, c, -1, 1), y = bnew(x.bytes);
            snprintf(what, sizeof what, "batchnorm_apply %s (%lld, %lld, %lld)%s", phx_dtype_name(dt), (long long)n,
                     (long long)c, (long long)hw, affine ? " affine" : "");
            if (check_ok(KG->batchnorm_apply(0, n, c, hw, x.d, mean.d, var.d, eps, affine ? w.d : NULL,
                                             affine ? b.d : NULL, y.d, dt),
                         KC->batchnorm_apply(0, n, c, hw, x.h, mean.h, var.h, eps, affine ? w.h : NULL,
                                             affine ? b.h : NULL, y.h, dt),
                         what))
                close_norm(&y, dt, total, tol, what);
            buf dy = brand(dt, total, -1, 1), sdy = bnew((size_t)c * 4), sdx = bnew((size_t)c * 4),
                dw = brand(PHX_F32, c, -1, 1), db = brand(PHX_F32, c, -1, 1), dx = bnew(x.bytes);
            snprintf(what, sizeof what, "batchnorm_backward_reduce %s (%lld, %lld, %lld)", phx_dtype_name(dt),
                     (long long)n, (long long)c, (long long)hw);
            if (check_ok(KG->batchnorm_backward_reduce(0, n, c, hw, x.d, dy.d, dt, mean.d, var.d, eps, sdy.d, sdx.d,
                                                       affine ? dw.d : NULL, affine ? db.d : NULL),
                         KC->batchnorm_backward_reduce(0, n, c, hw, x.h, dy.h, dt, mean.h, var.h, eps, sdy.h, sdx.h,
                                                       affine ? dw.h : NULL, affine ? db.h : NULL),
                         what)) {
                close_norm(&sdy, PHX_F32, c, 1e-5, "  ... sum_dy");
                close_norm(&sdx, PHX_F32, c, 1e-5, "  ... sum_dy_xmu");
                close_norm(&dw, PHX_F32, c, 1e-5, "  ... dw (accumulated)");
                close_norm(&db, PHX_F32, c, 1e-5, "  ... db (accumulated)");
            }
            G->copy_h2d(0, sdy.d, sdy.h, sdy.bytes);
            G->copy_h2d(0, sdx.d, sdx.h, sdx.bytes);
            for (int train = 0; train < 2; train++) {
                snprintf(what, sizeof what, "batchnorm_backward_apply %s (%lld, %lld, %lld)%s%s", phx_dtype_name(dt),
                         (long long)n, (long long)c, (long long)hw, affine ? " affine" : "",
                         train ? " batch statistics" : " fixed statistics");
                if (check_ok(KG->batchnorm_backward_apply(0, n, c, hw, x.d, dy.d, dt, mean.d, var.d, eps,
                                                          affine ? w.d : NULL, train ? sdy.d : NULL,
                                                          train ? sdx.d : NULL, (double)(n * hw), dx.d),
                             KC->batchnorm_backward_apply(0, n, c, hw, x.h, dy.h, dt, mean.h, var.h, eps,
                                                          affine ? w.h : NULL, train ? sdy.h : NULL,
                                                          train ? sdx.h : NULL, (double)(n * hw), dx.h),
                             what))
                    close_norm(&dx, dt, total, tol, what);
            }
            bfree(&x), bfree(&mean), bfree(&var), bfree(&w), bfree(&b), bfree(&y);
            bfree(&dy), bfree(&sdy), bfree(&sdx), bfree(&dw), bfree(&db), bfree(&dx);
        }
}

/* Integers in [-3, 3] (exact in every dtype: ties in most windows), a NaN
 * at every nan_every-th element. */
static buf bints(phx_dtype dt, int64_t n, int64_t nan_every)
{
    size_t es = phx_dtype_size(dt);
    buf b = bnew((size_t)n * es);
    float *f = malloc((size_t)n * sizeof *f + 1);
    for (int64_t i = 0; i < n; i++) f[i] = (i + 1) % nan_every == 0 ? NAN : (float)((int)(rnd64() % 7) - 3);
    void *tmp = malloc((size_t)n * es + 1);
    KC->cast(0, tmp, dt, f, PHX_F32, n);
    bset(&b, tmp);
    free(tmp);
    free(f);
    return b;
}

static void test_pool(void)
{
    static const int64_t shapes[][16] = {
        {2, 3, 9, 10, 3, 2, 2, 4, 5, 2, 2, 0, 0, 1, 1, 3}, /* 2x2 stride 2 */
        {2, 4, 15, 15, 4, 3, 3, 8, 8, 2, 2, 1, 1, 1, 1, 4}, /* ResNet's 3x3 stride 2 pad 1 */
        {1, 3, 12, 12, 3, 3, 3, 10, 10, 1, 1, 1, 1, 2, 2, 3}, /* dilation 2 */
        {2, 2, 10, 11, 2, 3, 3, 5, 5, 2, 2, 0, 0, 1, 1, 2}, /* oh, ow past the edge (ceil mode) */
    };
    const phx_dtype dts[2] = {PHX_F32, PHX_BF16};
    char what[160];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int a = 0; a < 2; a++) {
            phx_dtype dt = dts[a];
            phx_conv2d_desc d = win(shapes[s]);
            int64_t nx = d.n * d.c * d.h * d.w, ny = d.n * d.c * d.oh * d.ow;
            size_t es = phx_dtype_size(dt);
            double tol = dt == PHX_F32 ? 1e-5 : 1.6e-2;
            buf x = bints(dt, nx, 37), y = bnew((size_t)ny * es), am = bnew((size_t)ny * 4);
            win_name(what, sizeof what, "maxpool2d", dt, &d);
            if (check_ok(KG->maxpool2d_forward(0, &d, x.d, y.d, am.d, dt),
                         KC->maxpool2d_forward(0, &d, x.h, y.h, am.h, dt), what)) {
                same(&y, what);
                same(&am, "  ... argmax (first on ties, NaN wins)");
            }
            G->copy_h2d(0, am.d, am.h, am.bytes);
            buf dy = brand(dt, ny, -1, 1), dx = bnew(x.bytes);
            win_name(what, sizeof what, "maxpool2d backward", dt, &d);
            if (check_ok(KG->maxpool2d_backward(0, &d, am.d, dy.d, dx.d, dt),
                         KC->maxpool2d_backward(0, &d, am.h, dy.h, dx.h, dt), what))
                close_norm(&dx, dt, nx, tol, what);
            bfree(&x);
            x = brand(dt, nx, -2, 2);
            for (int inc = 0; inc < 2; inc++) {
                win_name(what, sizeof what, inc ? "avgpool2d count_include_pad" : "avgpool2d", dt, &d);
                if (d.dil_h != 1) continue; /* no dilation in PyTorch's AvgPool2d */
                if (check_ok(KG->avgpool2d_forward(0, &d, inc, x.d, y.d, dt),
                             KC->avgpool2d_forward(0, &d, inc, x.h, y.h, dt), what))
                    close_norm(&y, dt, ny, tol, what);
                win_name(what, sizeof what, inc ? "avgpool2d backward count_include_pad" : "avgpool2d backward", dt,
                         &d);
                if (check_ok(KG->avgpool2d_backward(0, &d, inc, dy.d, dx.d, dt),
                             KC->avgpool2d_backward(0, &d, inc, dy.h, dx.h, dt), what))
                    close_norm(&dx, dt, nx, tol, what);
            }
            bfree(&x), bfree(&y), bfree(&am), bfree(&dy), bfree(&dx);
        }
}

/* ---- the tensor-API slots (minor 4) */

/* A buffer of dt holding vals, converted on the host like the CPU does. */
static buf bvals(phx_dtype dt, int64_t n, const float *vals)
{
    size_t es = phx_dtype_size(dt);
    buf b = bnew((size_t)n * es);
    void *tmp = malloc((size_t)n * es + 1);
    KC->cast(0, tmp, dt, vals, PHX_F32, n);
    bset(&b, tmp);
    free(tmp);
    return b;
}

/* Indices in [0, n) (repeats likely), on both sides. */
static buf bidx(int64_t count, int64_t n)
{
    buf b = bnew((size_t)count * 8);
    int64_t *v = malloc((size_t)count * 8 + 1);
    for (int64_t i = 0; i < count; i++) v[i] = (int64_t)(rnd64() % (uint64_t)n);
    bset(&b, v);
    free(v);
    return b;
}

static int64_t numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int k = 0; k < ndim; k++) n *= shape[k];
    return n;
}

/* The elements a strided view of shape reaches: 1 + sum (size - 1) stride
 * (strides >= 0). */
static int64_t extent(int ndim, const int64_t *shape, const int64_t *st)
{
    int64_t e = 1;
    for (int k = 0; k < ndim; k++) e += (shape[k] - 1) * st[k];
    return e;
}

static void shape_name(char *out, size_t size, int ndim, const int64_t *shape)
{
    int o = snprintf(out, size, "(");
    for (int k = 0; k < ndim && o > 0 && (size_t)o < size; k++)
        o += snprintf(out + o, size - (size_t)o, k ? ", %lld" : "%lld", (long long)shape[k]);
    if (o > 0 && (size_t)o < size) snprintf(out + o, size - (size_t)o, ")");
}

/* Layouts of the strided tests: shape, and each side's strides. */
typedef struct layout {
    const char *what;
    int ndim;
    int64_t shape[PHX_MAX_DIMS], s1[PHX_MAX_DIMS], s2[PHX_MAX_DIMS];
} layout;

static void test_strided(void)
{
    /* s1: dst, s2: src */
    static const layout L[] = {
        {"permuted (0, 2, 1, 3) source", 4, {2, 4, 3, 5}, {60, 15, 5, 1}, {60, 5, 20, 1}},
        {"expanded (1, 4, 5) -> (3, 4, 5) source", 3, {3, 4, 5}, {20, 5, 1}, {0, 5, 1}},
        {"into columns 2..4 of a (4, 10) destination", 2, {4, 3}, {10, 1}, {3, 1}},
        {"transposed destination", 2, {6, 9}, {1, 6}, {9, 1}},
        {"both contiguous (a device copy)", 2, {7, 11}, {11, 1}, {11, 1}},
        {"one element (0 dims)", 0, {0}, {0}, {0}},
    };
    const phx_dtype dts[3] = {PHX_F32, PHX_BF16, PHX_I64};
    char what[200];
    for (size_t l = 0; l < sizeof L / sizeof L[0]; l++)
        for (int a = 0; a < 3; a++) {
            phx_dtype dt = dts[a];
            const layout *y = &L[l];
            int64_t nd = extent(y->ndim, y->shape, y->s1) + 2, ns = extent(y->ndim, y->shape, y->s2);
            buf dst = bnew((size_t)nd * phx_dtype_size(dt)), src = brand(dt, ns, -100, 100);
            size_t off = 2 * phx_dtype_size(dt); /* a destination not at the start of its buffer */
            snprintf(what, sizeof what, "copy_strided %s %s", phx_dtype_name(dt), y->what);
            if (check_ok(KG->copy_strided(0, dt, y->ndim, y->shape, (char *)dst.d + off, y->s1, src.d, y->s2),
                         KC->copy_strided(0, dt, y->ndim, y->shape, (char *)dst.h + off, y->s1, src.h, y->s2), what))
                same(&dst, what);
            bfree(&dst), bfree(&src);
        }
}

static int binary_exact(int op)
{
    return op != PHX_BIN_POW;
}

static void test_broadcast(void)
{
    /* s1: a, s2: b */
    static const layout L[] = {
        {"a (2, 3, 4, 5), b (3, 1, 5) broadcast", 4, {2, 3, 4, 5}, {60, 20, 5, 1}, {0, 5, 0, 1}},
        {"a transposed (5, 7) view, b a row (7)", 2, {5, 7}, {1, 5}, {0, 1}},
        {"a (33, 17), b a scalar", 2, {33, 17}, {17, 1}, {0, 0}},
        {"a (4, 1) column against b (1, 6)", 2, {4, 6}, {1, 0}, {0, 1}},
    };
    const phx_dtype dts[2] = {PHX_F32, PHX_BF16};
    const char *ops[13] = {"add", "sub", "mul", "div", "pow", "max", "min", "eq", "ne", "lt", "le", "gt", "ge"};
    char what[240], sh[64];
    for (size_t l = 0; l < sizeof L / sizeof L[0]; l++)
        for (int t = 0; t < 2; t++) {
            phx_dtype dt = dts[t];
            const layout *y = &L[l];
            int64_t n = numel(y->ndim, y->shape), na = extent(y->ndim, y->shape, y->s1),
                    nb = extent(y->ndim, y->shape, y->s2);
            shape_name(sh, sizeof sh, y->ndim, y->shape);
            for (int ints = 0; ints < 2; ints++) {
                /* floats (pow's base positive), or integers in [-3, 3] with
                 * NaN: ties for the comparisons, NaN through max/min */
                buf a = ints ? bints(dt, na, 11) : brand(dt, na, 0.25f, 2),
                    b = ints ? bints(dt, nb, 7) : brand(dt, nb, -2, 2);
                buf out = bnew((size_t)n * phx_dtype_size(dt));
                for (int op = PHX_BIN_ADD; op <= PHX_BIN_GE; op++) {
                    snprintf(what, sizeof what, "binary %s %s %s %s%s", ops[op], phx_dtype_name(dt), sh, y->what,
                             ints ? ", integers and NaN" : "");
                    if (!check_ok(KG->binary(0, op, dt, y->ndim, y->shape, out.d, a.d, y->s1, b.d, y->s2),
                                  KC->binary(0, op, dt, y->ndim, y->shape, out.h, a.h, y->s1, b.h, y->s2), what))
                        continue;
                    if (binary_exact(op))
                        close_elem(&out, dt, n, 0, 1e-30, what); /* the same values, NaN where NaN */
                    else
                        close_elem(&out, dt, n, dt == PHX_F32 ? 1e-6 : round_tol(dt), 1e-6, what);
                }
                bfree(&a), bfree(&b), bfree(&out);
            }
        }
    /* unary: every op, floats and integers (ties with alpha), then in place */
    static const struct {
        int op;
        const char *name;
        float alpha, beta;
        int exact;
    } U[] = {
        {PHX_UN_NEG, "neg", 0, 0, 1},
        {PHX_UN_EXP, "exp", 0, 0, 0},
        {PHX_UN_LOG, "log", 0, 0, 0},
        {PHX_UN_SQRT, "sqrt", 0, 0, 1},
        {PHX_UN_RSQRT, "rsqrt", 0, 0, 0},
        {PHX_UN_ABS, "abs", 0, 0, 1},
        {PHX_UN_SIGN, "sign", 0, 0, 1},
        {PHX_UN_AFFINE, "affine 1.5 x - 0.25", 1.5f, -0.25f, 1},
        {PHX_UN_POW, "pow 2.5", 2.5f, 0, 0},
        {PHX_UN_POW, "pow -2", -2.0f, 0, 0},
        {PHX_UN_CLAMP, "clamp [-0.5, 0.75]", -0.5f, 0.75f, 1},
        {PHX_UN_CLAMP, "clamp [NaN, 0.5]", NAN, 0.5f, 1},
        {PHX_UN_CLAMP, "clamp [-1, NaN]", -1.0f, NAN, 1},
        {PHX_UN_RECIP, "recip", 0, 0, 1},
        {PHX_UN_EQ, "eq 1", 1, 0, 1},
        {PHX_UN_NE, "ne 1", 1, 0, 1},
        {PHX_UN_LT, "lt 1", 1, 0, 1},
        {PHX_UN_LE, "le 1", 1, 0, 1},
        {PHX_UN_GT, "gt 1", 1, 0, 1},
        {PHX_UN_GE, "ge 1", 1, 0, 1},
        {PHX_UN_SQUARE, "square", 0, 0, 1},
    };
    const int64_t n = 10007;
    for (int t = 0; t < 2; t++) {
        phx_dtype dt = dts[t];
        for (int ints = 0; ints < 2; ints++) {
            buf x = ints ? bints(dt, n, 13) : brand(dt, n, -3, 3), y = bnew(x.bytes);
            for (size_t u = 0; u < sizeof U / sizeof U[0]; u++) {
                snprintf(what, sizeof what, "unary %s %s, %lld %s", U[u].name, phx_dtype_name(dt), (long long)n,
                         ints ? "integers and NaN" : "values in [-3, 3)");
                if (check_ok(KG->unary(0, U[u].op, dt, n, y.d, x.d, U[u].alpha, U[u].beta),
                             KC->unary(0, U[u].op, dt, n, y.h, x.h, U[u].alpha, U[u].beta), what))
                    close_elem(&y, dt, n,
                               U[u].exact          ? 0
                                   : dt == PHX_F32 ? 1e-6
                                                   : round_tol(dt),
                               U[u].exact ? 1e-30 : 1e-6, what);
            }
            snprintf(what, sizeof what, "unary square %s in place (y = x)", phx_dtype_name(dt));
            if (check_ok(KG->unary(0, PHX_UN_SQUARE, dt, n, x.d, x.d, 0, 0),
                         KC->unary(0, PHX_UN_SQUARE, dt, n, x.h, x.h, 0, 0), what))
                close_elem(&x, dt, n, 0, 1e-30, what);
            bfree(&x), bfree(&y);
        }
    }
    /* where: cond in several dtypes (0, -0, NaN and numbers), broadcast */
    static const struct {
        const char *what;
        int ndim;
        int64_t shape[3], c[3], a[3], b[3];
    } W[] = {
        {"cond (2, 1, 5), a (2, 3, 5), b (5)", 3, {2, 3, 5}, {5, 0, 1}, {15, 5, 1}, {0, 0, 1}},
        {"cond (4, 6), a scalar, b transposed", 2, {4, 6}, {6, 1}, {0, 0}, {1, 4}},
    };
    const phx_dtype cdts[4] = {PHX_F32, PHX_BF16, PHX_I32, PHX_I64}, wdts[2] = {PHX_F32, PHX_BF16};
    for (size_t w = 0; w < sizeof W / sizeof W[0]; w++)
        for (int c = 0; c < 4; c++)
            for (int t = 0; t < 2; t++) {
                phx_dtype cdt = cdts[c], dt = wdts[t];
                int64_t n = numel(W[w].ndim, W[w].shape), nc = extent(W[w].ndim, W[w].shape, W[w].c),
                        na = extent(W[w].ndim, W[w].shape, W[w].a), nb = extent(W[w].ndim, W[w].shape, W[w].b);
                float *cv = malloc((size_t)nc * sizeof *cv + 1);
                const float pick[5] = {0.0f, -0.0f, NAN, 1.0f, -2.5f};
                for (int64_t i = 0; i < nc; i++) cv[i] = pick[rnd64() % 5];
                buf cond = bvals(cdt, nc, cv), a = brand(dt, na, -50, 50), b = brand(dt, nb, -50, 50),
                    out = bnew((size_t)n * phx_dtype_size(dt));
                snprintf(what, sizeof what, "where %s, cond %s, %s", phx_dtype_name(dt), phx_dtype_name(cdt),
                         W[w].what);
                if (check_ok(
                        KG->where(0, dt, W[w].ndim, W[w].shape, out.d, cond.d, cdt, W[w].c, a.d, W[w].a, b.d, W[w].b),
                        KC->where(0, dt, W[w].ndim, W[w].shape, out.h, cond.h, cdt, W[w].c, a.h, W[w].a, b.h, W[w].b),
                        what))
                    same(&out, what);
                free(cv);
                bfree(&cond), bfree(&a), bfree(&b), bfree(&out);
            }
}

/* (outer, n, inner) shapes: inner 1 (a warp per row on the GPU), few
 * outputs (warps reading strided), many outputs (a thread per output) */
static const int64_t dim_shapes[][3] = {{3, 37, 1}, {4, 50, 7}, {2, 33, 600}, {1, 1000, 1}};

static void test_reduce_dim(void)
{
    const phx_dtype dts[2] = {PHX_F32, PHX_BF16};
    const char *ops[5] = {"sum", "mean", "max", "min", "logsumexp"};
    char what[200];
    for (size_t s = 0; s < sizeof dim_shapes / sizeof dim_shapes[0]; s++)
        for (int t = 0; t < 2; t++)
            for (int ints = 0; ints < 2; ints++) {
                phx_dtype dt = dts[t];
                int64_t outer = dim_shapes[s][0], n = dim_shapes[s][1], inner = dim_shapes[s][2];
                int64_t nx = outer * n * inner, ny = outer * inner;
                buf x = ints ? bints(dt, nx, 53) : brand(dt, nx, -4, 4), y = bnew((size_t)ny * phx_dtype_size(dt)),
                    idx = bnew((size_t)ny * 8);
                for (int op = PHX_RED_SUM; op <= PHX_RED_LOGSUMEXP; op++) {
                    int arg = op == PHX_RED_MAX || op == PHX_RED_MIN;
                    snprintf(what, sizeof what, "reduce_dim %s %s (%lld, %lld, %lld)%s", ops[op], phx_dtype_name(dt),
                             (long long)outer, (long long)n, (long long)inner, ints ? ", integers (ties) and NaN" : "");
                    if (!check_ok(KG->reduce_dim(0, op, dt, outer, n, inner, x.d, y.d, arg ? idx.d : NULL),
                                  KC->reduce_dim(0, op, dt, outer, n, inner, x.h, y.h, arg ? idx.h : NULL), what))
                        continue;
                    if (arg) {
                        close_elem(&y, dt, ny, 0, 1e-30, what);
                        same(&idx, "  ... positions (the first on ties, NaN wins)");
                    } else if (ints) { /* NaN in most outputs: NaN where the CPU has NaN */
                        close_elem(&y, dt, ny, dt == PHX_F32 ? 1e-5 : round_tol(dt), 1e-3, what);
                    } else {
                        close_norm(&y, dt, ny, dt == PHX_F32 ? 1e-5 : round_tol(dt), what);
                    }
                }
                bfree(&x), bfree(&y), bfree(&idx);
            }
    /* an empty middle dim: sum 0, mean NaN, logsumexp -inf */
    for (int op = PHX_RED_SUM; op <= PHX_RED_LOGSUMEXP; op++) {
        if (op == PHX_RED_MAX || op == PHX_RED_MIN) continue;
        buf x = bnew(4), y = bnew(6 * 4);
        snprintf(what, sizeof what, "reduce_dim %s f32 (2, 0, 3)", ops[op]);
        if (check_ok(KG->reduce_dim(0, op, PHX_F32, 2, 0, 3, x.d, y.d, NULL),
                     KC->reduce_dim(0, op, PHX_F32, 2, 0, 3, x.h, y.h, NULL), what))
            close_elem(&y, PHX_F32, 6, 0, 1e-30, what);
        bfree(&x), bfree(&y);
    }
}

static void test_softmax_dim(void)
{
    const phx_dtype dts[2] = {PHX_F32, PHX_BF16};
    char what[200];
    for (size_t s = 0; s < sizeof dim_shapes / sizeof dim_shapes[0]; s++)
        for (int t = 0; t < 2; t++)
            for (int lg = 0; lg < 2; lg++) {
                phx_dtype dt = dts[t];
                int64_t outer = dim_shapes[s][0], n = dim_shapes[s][1], inner = dim_shapes[s][2],
                        nx = outer * n * inner;
                double tol = dt == PHX_F32 ? 1e-5 : round_tol(dt);
                buf x = brand(dt, nx, -6, 6), y = bnew(x.bytes), dy = brand(dt, nx, -1, 1), dx = bnew(x.bytes);
                snprintf(what, sizeof what, "softmax_dim%s %s (%lld, %lld, %lld)", lg ? " log" : "", phx_dtype_name(dt),
                         (long long)outer, (long long)n, (long long)inner);
                if (check_ok(KG->softmax_dim(0, lg, dt, outer, n, inner, x.d, y.d),
                             KC->softmax_dim(0, lg, dt, outer, n, inner, x.h, y.h), what))
                    close_norm(&y, dt, nx, tol, what);
                G->copy_h2d(0, y.d, y.h, y.bytes); /* backward from the CPU's y on both sides */
                snprintf(what, sizeof what, "softmax_dim_backward%s %s (%lld, %lld, %lld)", lg ? " log" : "",
                         phx_dtype_name(dt), (long long)outer, (long long)n, (long long)inner);
                if (check_ok(KG->softmax_dim_backward(0, lg, dt, outer, n, inner, y.d, dy.d, dx.d),
                             KC->softmax_dim_backward(0, lg, dt, outer, n, inner, y.h, dy.h, dx.h), what))
                    close_norm(&dx, dt, nx, tol, what);
                snprintf(what, sizeof what, "softmax_dim%s %s (%lld, %lld, %lld) in place (y = x)", lg ? " log" : "",
                         phx_dtype_name(dt), (long long)outer, (long long)n, (long long)inner);
                if (check_ok(KG->softmax_dim(0, lg, dt, outer, n, inner, x.d, x.d),
                             KC->softmax_dim(0, lg, dt, outer, n, inner, x.h, x.h), what))
                    close_norm(&x, dt, nx, tol, what);
                bfree(&x), bfree(&y), bfree(&dy), bfree(&dx);
            }
}

static void test_index(void)
{
    static const int64_t shapes[][4] = {{3, 10, 7, 13}, {1, 50, 1, 200}, {4, 6, 33, 3}}; /* outer, n, inner, m */
    const phx_dtype dts[3] = {PHX_F32, PHX_BF16, PHX_I64};
    char what[200];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 3; t++) {
            phx_dtype dt = dts[t];
            int64_t outer = shapes[s][0], n = shapes[s][1], inner = shapes[s][2], m = shapes[s][3];
            int64_t nx = outer * n * inner, ny = outer * m * inner;
            size_t es = phx_dtype_size(dt);
            buf x = brand(dt, nx, -100, 100), sel = bidx(m, n), full = bidx(ny, n), y = bnew((size_t)ny * es);
            snprintf(what, sizeof what, "index_select %s (%lld, %lld, %lld), %lld indices", phx_dtype_name(dt),
                     (long long)outer, (long long)n, (long long)inner, (long long)m);
            if (check_ok(KG->index_select(0, dt, outer, n, inner, x.d, sel.d, m, y.d),
                         KC->index_select(0, dt, outer, n, inner, x.h, sel.h, m, y.h), what))
                same(&y, what);
            snprintf(what, sizeof what, "gather %s (%lld, %lld, %lld) -> (%lld, %lld, %lld)", phx_dtype_name(dt),
                     (long long)outer, (long long)n, (long long)inner, (long long)outer, (long long)m,
                     (long long)inner);
            if (check_ok(KG->gather(0, dt, outer, n, inner, x.d, full.d, m, y.d),
                         KC->gather(0, dt, outer, n, inner, x.h, full.h, m, y.h), what))
                same(&y, what);
            if (dt != PHX_I64) { /* float dtypes: the adds, repeated indices summed in any order */
                double tol = dt == PHX_F32 ? 1e-5 : 1.6e-2;
                buf src = brand(dt, ny, -1, 1);
                snprintf(what, sizeof what, "index_add %s (%lld, %lld, %lld), %lld indices", phx_dtype_name(dt),
                         (long long)outer, (long long)n, (long long)inner, (long long)m);
                if (check_ok(KG->index_add(0, dt, outer, n, inner, x.d, sel.d, m, src.d),
                             KC->index_add(0, dt, outer, n, inner, x.h, sel.h, m, src.h), what))
                    close_norm(&x, dt, nx, tol, what);
                G->copy_h2d(0, x.d, x.h, x.bytes);
                snprintf(what, sizeof what, "scatter_add %s (%lld, %lld, %lld) from (%lld, %lld, %lld)",
                         phx_dtype_name(dt), (long long)outer, (long long)n, (long long)inner, (long long)outer,
                         (long long)m, (long long)inner);
                if (check_ok(KG->scatter_add(0, dt, outer, n, inner, x.d, full.d, m, src.d),
                             KC->scatter_add(0, dt, outer, n, inner, x.h, full.h, m, src.h), what))
                    close_norm(&x, dt, nx, tol, what);
                bfree(&src);
            }
            bfree(&x), bfree(&sel), bfree(&full), bfree(&y);
        }
    /* the GPU's own rule for indices outside [0, n) (the CPU refuses them):
     * index_select and gather write 0, index_add and scatter_add skip */
    {
        const int64_t n = 4, m = 4, bad[4] = {1, -1, 4, 2};
        float xv[8] = {1, 2, 3, 4, 5, 6, 7, 8}, yv[8], src1[8] = {1, 1, 1, 1, 1, 1, 1, 1};
        buf x = bvals(PHX_F32, 8, xv), idx = bnew(sizeof bad), y = bnew(8 * 4), src = bvals(PHX_F32, 8, src1);
        bset(&idx, bad);
        int good = KG->index_select(0, PHX_F32, 2, n, 1, x.d, idx.d, m, y.d) == PHX_OK;
        bget(&y, yv);
        ok(good && yv[0] == 2 && yv[1] == 0 && yv[2] == 0 && yv[3] == 3 && yv[4] == 6 && yv[5] == 0 && yv[6] == 0 &&
               yv[7] == 7,
           "index_select on cuda: indices -1 and n give 0 (got %g %g %g %g)", yv[0], yv[1], yv[2], yv[3]);
        good = KG->index_add(0, PHX_F32, 2, n, 1, x.d, idx.d, m, src.d) == PHX_OK;
        bget(&x, yv);
        ok(good && yv[0] == 1 && yv[1] == 3 && yv[2] == 4 && yv[3] == 4 && yv[4] == 5 && yv[5] == 7 && yv[6] == 8 &&
               yv[7] == 8,
           "index_add on cuda: indices -1 and n are skipped (got %g %g %g %g)", yv[0], yv[1], yv[2], yv[3]);
        bfree(&x), bfree(&idx), bfree(&y), bfree(&src);
    }
}

/* ---- coverage: the test that runs each kernel slot on both tables, one
 * line per slot of kernels_v1.def. The table below is made from the .def,
 * so a slot appended there without its COVER_ line here does not compile
 * (COVER_<slot> is undeclared); tools/check/kernel-slots.py checks that
 * the test named calls the slot as KG-><slot>( and KC-><slot>(. A slot
 * with no test yet would be "COVER_<slot> NULL" with the reason beside it;
 * none is. */
#define COVER_gemm test_gemm
#define COVER_cast test_cast_fill
#define COVER_fill test_cast_fill
#define COVER_axpby test_elementwise
#define COVER_mul test_elementwise
#define COVER_bias_add test_elementwise
#define COVER_bias_grad test_elementwise
#define COVER_act_forward test_activations
#define COVER_act_backward test_activations
#define COVER_dropout_forward test_random
#define COVER_dropout_backward test_random
#define COVER_layernorm_forward test_layernorm
#define COVER_layernorm_backward test_layernorm
#define COVER_mse test_losses
#define COVER_cross_entropy test_losses
#define COVER_sgd_step test_optim
#define COVER_adam_step test_optim
#define COVER_unscale_check test_optim
#define COVER_reduce test_reduce
#define COVER_rng_uniform test_random
#define COVER_rng_normal test_random
#define COVER_gemm_batched test_transformer
#define COVER_softmax_forward test_transformer
#define COVER_softmax_backward test_transformer
#define COVER_embedding_forward test_transformer
#define COVER_embedding_backward test_transformer
#define COVER_add test_transformer
#define COVER_sum_squares test_transformer
#define COVER_conv2d_forward test_conv
#define COVER_conv2d_backward_data test_conv
#define COVER_conv2d_backward_weight test_conv
#define COVER_batchnorm_stats test_batchnorm
#define COVER_batchnorm_apply test_batchnorm
#define COVER_batchnorm_backward_reduce test_batchnorm
#define COVER_batchnorm_backward_apply test_batchnorm
#define COVER_maxpool2d_forward test_pool
#define COVER_maxpool2d_backward test_pool
#define COVER_avgpool2d_forward test_pool
#define COVER_avgpool2d_backward test_pool
#define COVER_copy_strided test_strided
#define COVER_binary test_broadcast
#define COVER_unary test_broadcast
#define COVER_where test_broadcast
#define COVER_reduce_dim test_reduce_dim
#define COVER_softmax_dim test_softmax_dim
#define COVER_softmax_dim_backward test_softmax_dim
#define COVER_index_select test_index
#define COVER_index_add test_index
#define COVER_gather test_index
#define COVER_scatter_add test_index

typedef void (*slot_test)(void);
static const struct {
    const char *slot;
    slot_test test;
} coverage[] = {
#define PHX_KERNEL_SLOT(name, ret, args, since) {#name, COVER_##name},
#include "phalanx/plugin/kernels_v1.def"
#undef PHX_KERNEL_SLOT
};

/* The tests, in the order they run. */
static const slot_test tests[] = {test_cast_fill,  test_elementwise, test_activations, test_random,  test_layernorm,
                                  test_losses,     test_optim,       test_reduce,      test_gemm,    test_transformer,
                                  test_conv,       test_batchnorm,   test_pool,        test_strided, test_broadcast,
                                  test_reduce_dim, test_softmax_dim, test_index};

/* Every slot's test is among those run. */
static void check_coverage(void)
{
    size_t n = sizeof coverage / sizeof coverage[0], nt = sizeof tests / sizeof tests[0], missing = 0;
    for (size_t s = 0; s < n; s++) {
        size_t t = 0;
        while (t < nt && tests[t] != coverage[s].test) t++;
        if (t == nt) {
            diag("kernel slot %s: no test in tests[] runs it", coverage[s].slot);
            missing++;
        }
    }
    ok(missing == 0, "every one of the %zu kernel slots has a test that ran", n);
}

int main(void)
{
    phx_device gpu = {PHX_DEVICE_CUDA, 0};
    if (phx_device_count(PHX_DEVICE_CUDA) < 1) skip_all("no CUDA device");
    G = phx_device_table(gpu);
    C = phx_device_table(phx_cpu());
    if (!G || !C) skip_all("no CUDA device table");
    KG = G->kernels;
    KC = C->kernels;
    const char *fixed = getenv("PHX_TEST_SEED");
    uint64_t seed = fixed ? strtoull(fixed, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20);
    rng_state = seed | 1;
    diag("seed %llu (PHX_TEST_SEED=%llu repeats this run)", (unsigned long long)seed, (unsigned long long)seed);
    const char *tf = getenv("PHX_TF32");
    if (tf && strcmp(tf, "1") == 0) skip_all("PHX_TF32=1 changes the f32 GEMM bound: run without it");
    for (size_t t = 0; t < sizeof tests / sizeof tests[0]; t++) tests[t]();
    check_coverage();
    return done_testing();
}
