/* Shared by the DDP tests: a small MLP, deterministic batches, parameter
 * comparisons, a cross-rank bitwise check, a DDP side stepped beside its
 * one-process reference, and running a function on N ranks of a backend
 * (both backends as two TAP tests). Header-only (static functions). */
#ifndef PHX_T_DDP_UTIL_H
#define PHX_T_DDP_UTIL_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

/* Linear(sizes[0], sizes[1]), Tanh, Linear(sizes[1], sizes[2]), ...,
 * Linear(sizes[n-2], sizes[n-1]): n sizes, n-1 linear layers, children
 * "0", "1", ... (Tanh layers take odd indices). */
static inline phx_module *tu_mlp(const int64_t *sizes, int n, uint64_t seed)
{
    phx_rng *rng = phx_rng_new(seed);
    phx_module *m = phx_sequential_new();
    if (!rng || !m) return NULL;
    for (int i = 0; i + 1 < n; i++) {
        if (i > 0) phx_sequential_add(m, phx_tanh_new());
        if (phx_sequential_add(m, phx_linear_new(sizes[i], sizes[i + 1], true, rng)) != PHX_OK) {
            phx_module_free(m);
            m = NULL;
            break;
        }
    }
    phx_rng_free(rng);
    return m;
}

/* Row i of step s's global batch: x (in) and target (out), smooth
 * deterministic values in [-1, 1] that need no generator. */
static inline void tu_row(int s, int64_t i, int64_t in, int64_t out, float *x, float *y)
{
    for (int64_t j = 0; j < in; j++) x[j] = (float)sin(0.37 * (double)(s * 7919 + i * 131 + j * 17) + 0.5);
    for (int64_t j = 0; j < out; j++) y[j] = (float)cos(0.23 * (double)(s * 104729 + i * 37 + j * 11));
}

/* Fills x (rows, in) and y (rows, out) with rows first..first+rows-1 of
 * step s's global batch. */
static inline void tu_batch(int s, int64_t first, int64_t rows, phx_tensor *x, phx_tensor *y)
{
    int64_t in = phx_tensor_dim(x, 1), out = phx_tensor_dim(y, 1);
    float *hx = malloc((size_t)(rows * in) * sizeof *hx), *hy = malloc((size_t)(rows * out) * sizeof *hy);
    for (int64_t r = 0; r < rows; r++) tu_row(s, first + r, in, out, hx + r * in, hy + r * out);
    phx_tensor_from_host(x, hx);
    phx_tensor_from_host(y, hy);
    free(hx);
    free(hy);
}

/* AdamW with lr 1e-2, weight decay on the matrices only: the ZeRO and
 * FSDP tests' optimizer (a phx_zero_optimizer_new maker; arg unused). */
static inline phx_optimizer *tu_make_adamw(phx_module *m, void *arg)
{
    (void)arg;
    phx_adam_opts o = PHX_ADAMW_OPTS_INIT;
    o.lr = 1e-2;
    phx_optimizer *opt = phx_adam_new(m, &o);
    if (opt) phx_adam_decay_matrices_only(opt, NULL);
    return opt;
}

static inline phx_tensor *tu_new2(int64_t a, int64_t b)
{
    int64_t shape[2] = {a, b};
    return phx_tensor_zeros(PHX_F32, 2, shape, phx_cpu());
}

/* All parameters of m, flattened into a malloc'd host array (*n floats). */
static inline float *tu_flatten(phx_module *m, size_t *n)
{
    size_t total = 0, np = phx_module_num_params(m);
    for (size_t i = 0; i < np; i++) total += (size_t)phx_tensor_numel(phx_param_value(phx_module_param(m, i)));
    float *h = malloc((total ? total : 1) * sizeof *h);
    size_t off = 0;
    for (size_t i = 0; i < np; i++) {
        const phx_tensor *v = phx_param_value(phx_module_param(m, i));
        phx_tensor_to_host(v, h + off);
        off += (size_t)phx_tensor_numel(v);
    }
    *n = total;
    return h;
}

/* max over parameters of max|a - b| / max|b|: a relative error per
 * tensor, robust to elements near zero. */
static inline double tu_max_rel(phx_module *a, phx_module *b)
{
    double worst = 0;
    size_t np = phx_module_num_params(b);
    if (phx_module_num_params(a) != np) return INFINITY;
    for (size_t i = 0; i < np; i++) {
        const phx_tensor *va = phx_param_value(phx_module_param(a, i));
        const phx_tensor *vb = phx_param_value(phx_module_param(b, i));
        int64_t n = phx_tensor_numel(vb);
        if (phx_tensor_numel(va) != n) return INFINITY;
        float *ha = malloc((size_t)n * sizeof *ha), *hb = malloc((size_t)n * sizeof *hb);
        phx_tensor_to_host(va, ha);
        phx_tensor_to_host(vb, hb);
        double diff = 0, scale = 0;
        for (int64_t k = 0; k < n; k++) {
            diff = fmax(diff, fabs((double)ha[k] - (double)hb[k]));
            scale = fmax(scale, fabs((double)hb[k]));
        }
        free(ha);
        free(hb);
        if (scale > 0)
            worst = fmax(worst, diff / scale);
        else if (diff > 0)
            worst = INFINITY;
    }
    return worst;
}

/* 1 when every rank's parameters are bitwise equal to this rank's
 * (all-gathers them through c). */
static inline int tu_same_bits_across(phx_comm *c, phx_module *m)
{
    size_t n;
    float *mine = tu_flatten(m, &n);
    int world = phx_comm_size(c);
    int64_t len = (int64_t)n, all_len = (int64_t)n * world;
    phx_tensor *in = phx_tensor_from_data(PHX_F32, 1, &len, mine);
    phx_tensor *all = phx_tensor_zeros(PHX_F32, 1, &all_len, phx_cpu());
    int same = in && all && phx_comm_allgather(c, in, all, NULL) == PHX_OK;
    float *h = malloc((size_t)all_len * sizeof *h);
    if (same) phx_tensor_to_host(all, h);
    for (int r = 0; same && r < world; r++) same = memcmp(h + (size_t)r * n, mine, n * sizeof *mine) == 0;
    free(h);
    free(mine);
    phx_tensor_free(in);
    phx_tensor_free(all);
    return same;
}

/* forward, loss, backward of m on (x, y); then, when opt is given, the
 * optimizer step and zero_grad. Returns the first failing status. */
static inline phx_status tu_step(phx_module *m, phx_optimizer *opt, phx_loss *loss, const phx_tensor *x,
                                 const phx_tensor *y)
{
    phx_tensor *out;
    float l;
    phx_status st = phx_module_forward(m, x, &out);
    if (st == PHX_OK) st = phx_loss_forward(loss, out, y, &l);
    if (st == PHX_OK) st = phx_module_backward(m, phx_loss_grad(loss), NULL);
    if (st == PHX_OK && opt) st = phx_optimizer_step(opt);
    if (st == PHX_OK && opt) st = phx_optimizer_zero_grad(opt);
    return st;
}

/* One side of an equivalence check: a model, its optimizer and loss, and
 * the batch tensors it trains on (their row count is its share). */
typedef struct tu_side {
    phx_module *m;
    phx_optimizer *opt;
    phx_loss *loss;
    phx_tensor *x, *y;
} tu_side;

/* Step s on both sides: d (DDP) on this rank's rows of step s's global
 * batch, ref (one process) on all of them. Returns the first failing
 * status; ref does not step when d failed. */
static inline phx_status tu_step_both(int s, int rank, tu_side *d, tu_side *ref)
{
    int64_t rows = phx_tensor_dim(d->x, 0);
    tu_batch(s, (int64_t)rank * rows, rows, d->x, d->y);
    tu_batch(s, 0, phx_tensor_dim(ref->x, 0), ref->x, ref->y);
    phx_status st = tu_step(d->m, d->opt, d->loss, d->x, d->y);
    return st == PHX_OK ? tu_step(ref->m, ref->opt, ref->loss, ref->x, ref->y) : st;
}

/* Frees what side s holds (its module included: free a DDP side before
 * the model it wraps). */
static inline void tu_side_free(tu_side *s)
{
    phx_tensor_free(s->x);
    phx_tensor_free(s->y);
    phx_loss_free(s->loss);
    phx_optimizer_free(s->opt);
    phx_module_free(s->m);
    memset(s, 0, sizeof *s);
}

/* Runs fn on n ranks of backend ("threads": threads of this process;
 * "gloo": processes) through phx_spawn. Returns phx_spawn's status. */
static inline phx_status tu_spawn(const char *backend, int n, int (*fn)(int, void *), void *arg)
{
    setenv("PHX_COMM", backend, 1);
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("MASTER_PORT");
    fflush(stdout);
    return phx_spawn(n, fn, arg);
}

/* Two TAP tests: fn on n ranks of the threads backend ("threads, n
 * ranks: " and the formatted description), then on n gloo processes
 * ("gloo, n processes: the same"), skipped when built without Gloo. A
 * failure shows phx_spawn's error. */
static inline void tu_spawn_both(int n, int (*fn)(int, void *), void *arg, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static inline void tu_spawn_both(int n, int (*fn)(int, void *), void *arg, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    phx_status st = tu_spawn("threads", n, fn, arg);
    ok(st == PHX_OK, "threads, %d ranks: %s", n, what);
    if (st != PHX_OK) diag("%s", phx_last_error());
#ifdef HAVE_GLOO
    st = tu_spawn("gloo", n, fn, arg);
    ok(st == PHX_OK, "gloo, %d processes: the same", n);
    if (st != PHX_OK) diag("%s", phx_last_error());
#else
    skip(1, "built without Gloo");
#endif
}

/* Conv(1, 3, 3) - BN(3) - ReLU - MaxPool(2) - Flatten - Linear(27, 5) on
 * 1x8x8 images. */
static inline phx_module *tu_small_cnn(void)
{
    phx_rng *r = phx_rng_new(3);
    phx_module *m = phx_sequential_new();
    phx_sequential_add(m, phx_conv2d_new(1, 3, 3, 3, NULL, r));
    phx_sequential_add(m, phx_batchnorm2d_new(3, 1e-5f, 0.1f, true, true));
    phx_sequential_add(m, phx_relu_new());
    phx_sequential_add(m, phx_maxpool2d_new(2, 0, 0));
    phx_sequential_add(m, phx_flatten_new());
    phx_sequential_add(m, phx_linear_new(27, 5, true, r));
    phx_rng_free(r);
    return m;
}

/* Rows first..first+rows-1 of step s's batch for tu_small_cnn: x (rows, 1,
 * 8, 8) and an MSE target t (rows, 5), new tensors the caller frees. */
static inline void tu_cnn_batch(int step, int64_t first, int64_t rows, phx_tensor **x, phx_tensor **t)
{
    int64_t xs[4] = {rows, 1, 8, 8}, ts[2] = {rows, 5};
    *x = phx_tensor_new(PHX_F32, 4, xs, phx_cpu());
    *t = phx_tensor_new(PHX_F32, 2, ts, phx_cpu());
    float *hx = malloc((size_t)rows * 64 * sizeof *hx), *ht = malloc((size_t)rows * 5 * sizeof *ht);
    for (int64_t i = 0; i < rows; i++) tu_row(step, first + i, 64, 5, hx + i * 64, ht + i * 5);
    phx_tensor_from_host(*x, hx);
    phx_tensor_from_host(*t, ht);
    free(hx), free(ht);
}

/* Joins the world phx_spawn set up; prints why not. */
static inline phx_comm *tu_comm(int rank)
{
    phx_comm *c = NULL;
    if (phx_comm_init(NULL, &c) != PHX_OK) {
        printf("# rank %d: phx_comm_init: %s\n", rank, phx_last_error());
        fflush(stdout);
        return NULL;
    }
    return c;
}
/* Tensors read from a reference file (bench/torch/ scripts write them):
 * phx_safetensors_read(path, &r.names, &r.t, &r.n). */
typedef struct tu_ref {
    char **names;
    phx_tensor **t;
    size_t n;
} tu_ref;

/* The tensor named by the printf format, or NULL (said in a # line). */
static inline phx_tensor *tu_ref_find(const tu_ref *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline phx_tensor *tu_ref_find(const tu_ref *r, const char *fmt, ...)
{
    char key[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(key, sizeof key, fmt, ap);
    va_end(ap);
    for (size_t i = 0; i < r->n; i++)
        if (!strcmp(r->names[i], key)) return r->t[i];
    printf("# no tensor '%s' in the reference file\n", key);
    return NULL;
}

/* max |a - b| / max |b| over one tensor's elements (INFINITY when they
 * cannot be read or differ in size). */
static inline double tu_rel(const phx_tensor *a, const phx_tensor *b)
{
    int64_t n = phx_tensor_numel(b);
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    double diff = 0, scale = 0;
    if (x && y && phx_tensor_numel(a) == n && phx_tensor_to_host(a, x) == PHX_OK &&
        phx_tensor_to_host(b, y) == PHX_OK) {
        for (int64_t i = 0; i < n; i++) {
            diff = fmax(diff, fabs((double)x[i] - y[i]));
            scale = fmax(scale, fabs((double)y[i]));
        }
    } else {
        diff = INFINITY;
    }
    free(x);
    free(y);
    return diff / fmax(scale, 1e-30);
}

#endif
