/* Gradient checks for tensor operations (header-only, for TAP tests).
 *
 * 1. gc_check: the analytic gradient of an operation against central
 *    differences. The function under test builds one output from k input
 *    tensors; the checked quantity is L = sum(out * w) for a fixed random
 *    w (out's shape, N(0, 1) from a seed), so the analytic side is
 *    phx_backward_with(out, w) and the numeric side is
 *        dL/dx_j ~ (L(x_j + eps) - L(x_j - eps)) / (2 eps)
 *    for every element j of every float input. The library has no f64
 *    dtype, so the forward runs in f32 and only the sum L is taken in
 *    double on the host: the difference carries f32 rounding of about
 *    1e-7 |L| / eps. Hence eps ~ 1e-3 (small enough for smooth ops with
 *    O(1) inputs, large enough for f32), and a mixed tolerance
 *        |analytic - numeric| <= atol + rtol * max(|analytic|, |numeric|)
 *    with rtol ~ 1e-2 and atol ~ 1e-2 (gc_default). Inputs must keep away
 *    from kinks (abs at 0, relu at 0, max ties, clamp bounds) by more
 *    than eps: the tests draw them so.
 * 2. gc_ref_*: reference tensors (inputs, outputs, the weight w and the
 *    gradients) read from a text file made by a PyTorch script
 *    (bench/torch/ops_math_ref.py writes t/ref/ops_math.txt), and
 *    gc_close to compare a tensor with one of them.
 *
 * Reference file format, one tensor per line ('#' starts a comment line):
 *     case NAME                       starts a case
 *     ROLE NAME DTYPE NDIM D0 .. Dn-1 V0 V1 ...   (DTYPE f32 or i64)
 *     end
 * ROLE is a free word; the script uses in (inputs), w (the weight of the
 * sum), out (the forward value), grad (d sum(out*w) / d input NAME),
 * arg (scalar arguments as a 0-dim or 1-D f32 tensor).
 *
 * Everything here runs on the CPU device. */
#ifndef PHX_T_OPS_GRADCHECK_H
#define PHX_T_OPS_GRADCHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "phalanx/ops.h"
#include "phalanx/autograd.h"
#include "t/tap.h"

#define GC_MAX_IN 8

/* Builds the output from in[0 .. k-1]; NULL on error (phx_last_error).
 * The result belongs to the open scope (the ops' rule). */
typedef phx_tensor *(*gc_fn)(void *ctx, int k, phx_tensor *const *in);

typedef struct gc_opts {
    double eps, rtol, atol;
    uint64_t seed; /* of w */
    unsigned no_grad_mask; /* bit i: input i is not checked (an index, a mask) */
} gc_opts;

static inline gc_opts gc_default(void)
{
    gc_opts o = {1e-3, 1e-2, 1e-2, 1234, 0};
    return o;
}

/* out's values as doubles (f32/f16/bf16/i64), malloc'd; NULL on error. */
static inline double *gc_values(const phx_tensor *t)
{
    int64_t n = phx_tensor_numel(t);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; v && i < n; i++)
        if (phx_tensor_get(t, i, &v[i]) != PHX_OK) {
            free(v);
            return NULL;
        }
    return v;
}

/* sum(out * w) in double, with grad mode off; NAN on error. */
static inline double gc_loss(gc_fn fn, void *ctx, int k, phx_tensor *const *in, const double *w, int64_t nw)
{
    bool prev = phx_set_grad_enabled(false);
    phx_scope *s = phx_scope_begin();
    phx_tensor *out = fn(ctx, k, in);
    double L = NAN;
    if (out && phx_tensor_numel(out) == nw) {
        double *v = gc_values(out);
        if (v) {
            L = 0;
            for (int64_t i = 0; i < nw; i++) L += v[i] * w[i];
            free(v);
        }
    }
    phx_scope_end(s);
    phx_set_grad_enabled(prev);
    return L;
}

/* Runs the check for `name` and reports one ok() per checked input:
 * returns the number of failed inputs (a failure to run counts as one).
 * The inputs must be f32 CPU leaves; their requires_grad is set here and
 * cleared again. */
static inline int gc_check(const char *name, gc_fn fn, void *ctx, int k, phx_tensor **in, gc_opts o)
{
    int fails = 0;
    for (int i = 0; i < k; i++)
        if (!(o.no_grad_mask & (1u << i))) {
            phx_tensor_zero_grad(in[i]);
            if (phx_tensor_set_requires_grad(in[i], true) != PHX_OK) {
                ok(0, "%s: requires_grad on input %d: %s", name, i, phx_last_error());
                return 1;
            }
        }
    phx_scope *s = phx_scope_begin();
    phx_tensor *out = fn(ctx, k, in);
    phx_tensor *wt = NULL;
    double *w = NULL;
    int64_t nw = 0;
    phx_status st = out ? PHX_OK : PHX_EINVAL;
    if (!st) {
        nw = phx_tensor_numel(out);
        wt = phx_tensor_new(phx_tensor_dtype(out), phx_tensor_ndim(out), phx_tensor_shape(out), phx_cpu());
        phx_rng *rng = phx_rng_new(o.seed);
        st = wt && rng ? phx_rng_normal(rng, wt, 0, 1) : PHX_ENOMEM;
        phx_rng_free(rng);
        if (!st) w = gc_values(wt);
        if (!st) st = phx_backward_with(out, wt);
    }
    phx_scope_end(s);
    if (st) {
        ok(0, "%s: forward and backward run: %s", name, phx_last_error());
        phx_tensor_free(wt);
        free(w);
        for (int i = 0; i < k; i++)
            if (!(o.no_grad_mask & (1u << i))) phx_tensor_set_requires_grad(in[i], false);
        return 1;
    }
    for (int i = 0; i < k; i++) {
        if (o.no_grad_mask & (1u << i)) continue;
        const phx_tensor *g = phx_tensor_grad(in[i]);
        int64_t n = phx_tensor_numel(in[i]);
        double *ga = g ? gc_values(g) : calloc((size_t)(n ? n : 1), sizeof(double));
        float *x = phx_tensor_data(in[i]);
        double worst = 0, wa = 0, wn = 0;
        int64_t wj = -1;
        int bad = !ga || (g && phx_tensor_numel(g) != n);
        for (int64_t j = 0; !bad && j < n; j++) {
            float x0 = x[j];
            x[j] = (float)(x0 + o.eps);
            double lp = gc_loss(fn, ctx, k, in, w, nw);
            x[j] = (float)(x0 - o.eps);
            double lm = gc_loss(fn, ctx, k, in, w, nw);
            x[j] = x0;
            double num = (lp - lm) / (2 * o.eps), an = ga[j];
            double err = fabs(an - num), lim = o.atol + o.rtol * fmax(fabs(an), fabs(num));
            if (!(err <= lim) && (wj < 0 || err - lim > worst)) worst = err - lim, wa = an, wn = num, wj = j;
        }
        int good = !bad && wj < 0;
        ok(good, "%s: d/d input %d matches central differences (eps %g, rtol %g, atol %g)%s", name, i, o.eps, o.rtol,
           o.atol, g ? "" : " [no gradient reached it: zeros]");
        if (!good && !bad) diag("element %lld: analytic %.8g, numeric %.8g", (long long)wj, wa, wn);
        fails += !good;
        free(ga);
        phx_tensor_zero_grad(in[i]);
        phx_tensor_set_requires_grad(in[i], false);
    }
    phx_tensor_free(wt);
    free(w);
    return fails;
}

/* ---- Reference data ---- */

typedef struct gc_ref_tensor {
    char role[64], name[32];
    phx_dtype dt;
    int ndim;
    int64_t shape[PHX_MAX_DIMS];
    int64_t n;
    double *v;
} gc_ref_tensor;

typedef struct gc_ref_case {
    char name[64];
    int nt;
    gc_ref_tensor t[16];
} gc_ref_case;

typedef struct gc_ref {
    int nc;
    gc_ref_case *c;
} gc_ref;

/* Reads $top_srcdir/t/ref/<file> (or ./t/ref/<file>); NULL with a diag on
 * failure. */
static inline gc_ref *gc_ref_load(const char *file)
{
    const char *sd = getenv("top_srcdir");
    char path[1024];
    snprintf(path, sizeof path, "%s/t/ref/%s", sd ? sd : ".", file);
    FILE *f = fopen(path, "r");
    if (!f) {
        diag("cannot open %s", path);
        return NULL;
    }
    gc_ref *r = calloc(1, sizeof *r);
    int cap = 0;
    char word[64];
    gc_ref_case *cur = NULL;
    int bad = 0;
    while (!bad && fscanf(f, "%63s", word) == 1) {
        if (word[0] == '#') {
            int ch;
            while ((ch = fgetc(f)) != EOF && ch != '\n') {}
        } else if (!strcmp(word, "case")) {
            if (r->nc == cap) {
                cap = cap ? 2 * cap : 64;
                r->c = realloc(r->c, sizeof *r->c * (size_t)cap);
            }
            cur = &r->c[r->nc++];
            memset(cur, 0, sizeof *cur);
            bad = fscanf(f, "%63s", cur->name) != 1;
        } else if (!strcmp(word, "end")) {
            cur = NULL;
        } else if (cur && cur->nt < 16) {
            gc_ref_tensor *t = &cur->t[cur->nt++];
            char dts[8];
            snprintf(t->role, sizeof t->role, "%s", word);
            bad = fscanf(f, "%31s %7s %d", t->name, dts, &t->ndim) != 3 || t->ndim < 0 || t->ndim > PHX_MAX_DIMS;
            t->dt = !strcmp(dts, "i64") ? PHX_I64 : PHX_F32;
            t->n = 1;
            for (int d = 0; !bad && d < t->ndim; d++) {
                long long s;
                bad = fscanf(f, "%lld", &s) != 1;
                t->shape[d] = s;
                t->n *= s;
            }
            t->v = malloc(sizeof(double) * (size_t)(t->n ? t->n : 1));
            for (int64_t j = 0; !bad && j < t->n; j++) bad = fscanf(f, "%lf", &t->v[j]) != 1;
        } else {
            bad = 1;
        }
    }
    fclose(f);
    if (bad) diag("%s: parse error near '%s' (case %d)", path, word, r->nc);
    return r;
}

static inline const gc_ref_case *gc_ref_case_find(const gc_ref *r, const char *name)
{
    for (int i = 0; r && i < r->nc; i++)
        if (!strcmp(r->c[i].name, name)) return &r->c[i];
    return NULL;
}

static inline const gc_ref_tensor *gc_ref_get(const gc_ref_case *c, const char *role, const char *name)
{
    for (int i = 0; c && i < c->nt; i++)
        if (!strcmp(c->t[i].role, role) && !strcmp(c->t[i].name, name)) return &c->t[i];
    return NULL;
}

/* A new CPU tensor (caller owns) holding the reference values. */
static inline phx_tensor *gc_ref_tensor_new(const gc_ref_tensor *r)
{
    if (!r) return NULL;
    phx_tensor *t = phx_tensor_new(r->dt, r->ndim, r->shape, phx_cpu());
    if (!t) return NULL;
    if (r->dt == PHX_I64) {
        int64_t *d = phx_tensor_data(t);
        for (int64_t j = 0; j < r->n; j++) d[j] = (int64_t)r->v[j];
    } else {
        float *d = phx_tensor_data(t);
        for (int64_t j = 0; j < r->n; j++) d[j] = (float)r->v[j];
    }
    return t;
}

/* 1 when t has r's shape and every value is within atol + rtol |ref|
 * (NaN matches NaN, infinities must be equal); reports one ok(). */
static inline int gc_close(const phx_tensor *t, const gc_ref_tensor *r, double rtol, double atol, const char *what)
{
    if (!t || !r) return ok(0, "%s: %s", what, !r ? "no reference data" : phx_last_error());
    int same = phx_tensor_ndim(t) == r->ndim;
    for (int d = 0; same && d < r->ndim; d++) same = phx_tensor_dim(t, d) == r->shape[d];
    if (!same) {
        char s[64];
        return ok(0, "%s: shape %s, expected %d dims as the reference", what, phx_tensor_shape_str(t, s, sizeof s),
                  r->ndim);
    }
    double *v = gc_values(t), worst = -1, got = 0, want = 0;
    int64_t wj = -1;
    for (int64_t j = 0; v && j < r->n; j++) {
        double a = v[j], b = r->v[j];
        int good = (isnan(a) && isnan(b)) || (isinf(b) && a == b) || fabs(a - b) <= atol + rtol * fabs(b);
        /* the first mismatch counts even when its difference is NaN */
        if (!good && (wj < 0 || fabs(a - b) > worst)) worst = fabs(a - b), got = a, want = b, wj = j;
    }
    int res = ok(v && wj < 0, "%s (rtol %g, atol %g)", what, rtol, atol);
    if (wj >= 0) diag("element %lld: got %.9g, expected %.9g", (long long)wj, got, want);
    free(v);
    return res;
}

/* Runs case `name` of r: its "in" tensors (in file order) through fn,
 * compares the output with "out out" and, after phx_backward_with(out,
 * w), each input's gradient with "grad <input>"; then, unless cd is 0,
 * checks the same gradients by central differences (gc_check, inputs
 * without a reference gradient excluded). Reports one ok() per
 * comparison; returns the number of failures. */
static inline int gc_ref_run(const gc_ref *r, const char *name, gc_fn fn, void *ctx, double rtol, double atol, int cd)
{
    const gc_ref_case *c = gc_ref_case_find(r, name);
    if (!c) return !ok(0, "%s: no reference case (regenerate t/ref/ops_math.txt)", name);
    phx_tensor *in[GC_MAX_IN] = {NULL};
    const gc_ref_tensor *gr[GC_MAX_IN] = {NULL};
    int k = 0, fails = 0;
    unsigned nograd = 0;
    for (int i = 0; i < c->nt && k < GC_MAX_IN; i++)
        if (!strcmp(c->t[i].role, "in")) {
            gr[k] = gc_ref_get(c, "grad", c->t[i].name);
            if (!gr[k]) nograd |= 1u << k;
            in[k++] = gc_ref_tensor_new(&c->t[i]);
        }
    for (int i = 0; i < k; i++)
        if (gr[i]) phx_tensor_set_requires_grad(in[i], true);
    phx_tensor *w = gc_ref_tensor_new(gc_ref_get(c, "w", "w"));
    phx_scope *s = phx_scope_begin();
    phx_tensor *out = fn(ctx, k, in);
    char what[160];
    snprintf(what, sizeof what, "%s: forward matches PyTorch", name);
    fails += !gc_close(out, gc_ref_get(c, "out", "out"), rtol, atol, what);
    if (out && nograd != (1u << k) - 1) {
        phx_status st = phx_backward_with(out, w);
        if (!ok(st == PHX_OK, "%s: backward runs: %s", name, st ? phx_last_error() : "ok")) fails++;
        for (int i = 0; i < k && !st; i++) {
            if (!gr[i]) continue;
            snprintf(what, sizeof what, "%s: gradient of %s matches PyTorch", name, gr[i]->name);
            fails += !gc_close(phx_tensor_grad(in[i]), gr[i], rtol, atol, what);
        }
    }
    phx_scope_end(s);
    for (int i = 0; i < k; i++)
        if (gr[i]) phx_tensor_set_requires_grad(in[i], false);
    if (cd && nograd != (1u << k) - 1) {
        gc_opts o = gc_default();
        o.no_grad_mask = nograd;
        char nm[96];
        snprintf(nm, sizeof nm, "%s (central differences)", name);
        fails += gc_check(nm, fn, ctx, k, in, o);
    }
    for (int i = 0; i < k; i++) phx_tensor_free(in[i]);
    phx_tensor_free(w);
    return fails;
}

/* The number of ok() lines gc_ref_run reports for case name (for plan()). */
static inline int gc_ref_count(const gc_ref *r, const char *name, int cd)
{
    const gc_ref_case *c = gc_ref_case_find(r, name);
    if (!c) return 1;
    int grads = 0;
    for (int i = 0; i < c->nt; i++) grads += !strcmp(c->t[i].role, "grad");
    return 1 + (grads ? 1 + grads + (cd ? grads : 0) : 0);
}

static inline void gc_ref_free(gc_ref *r)
{
    for (int i = 0; r && i < r->nc; i++)
        for (int j = 0; j < r->c[i].nt; j++) free(r->c[i].t[j].v);
    if (r) free(r->c);
    free(r);
}
#endif
