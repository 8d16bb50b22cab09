/* The reference cases of t/ref/ops_shape.txt (bench/torch/ops_shape_ref.py,
 * torch 1.13 in float64) for t/ops/shape and t/ops/index: each case's
 * result against torch's, its gradient (phx_backward_with of the weight w,
 * so d sum(out * w)) against torch's, and the same gradient against float
 * central differences of sum(out * w) evaluated in double on the host from
 * f32 forwards (every operation here is linear in its float inputs, so the
 * differences are exact up to the f32 perturbation, measured as stored).
 * Copies match torch exactly; the adding kernels (scatter_add) round each
 * sum to f32 where torch's float64 does not, hence a 1e-6 tolerance. */
#ifndef PHX_T_OPS_REF_CASES_H
#define PHX_T_OPS_REF_CASES_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

#define REF_MAX_IN 4

typedef struct ref_arr {
    int ndim;
    int64_t shape[PHX_MAX_DIMS];
    int nperm, perm[PHX_MAX_DIMS];
    int is_index;
    double *v;
    int64_t n;
} ref_arr;

typedef struct ref_case {
    char name[64], op[32];
    int nargs;
    int64_t args[8];
    int n_in;
    ref_arr in[REF_MAX_IN], out, w, grad[REF_MAX_IN];
    int has_w;
} ref_case;

static char *ref_tok(char **s)
{
    return strtok_r(NULL, " \t\n", s);
}

/* "NDIM SHAPE... [perm P...] : VALUES..." after the tokens already read. */
static void ref_parse_arr(char **save, ref_arr *a, int with_shape)
{
    char *t;
    if (with_shape) {
        a->ndim = atoi(ref_tok(save));
        for (int i = 0; i < a->ndim; i++) a->shape[i] = atoll(ref_tok(save));
    }
    while ((t = ref_tok(save)) && strcmp(t, ":"))
        if (!strcmp(t, "perm"))
            for (a->nperm = 0; a->nperm < a->ndim; a->nperm++) a->perm[a->nperm] = atoi(ref_tok(save));
    size_t cap = 16;
    a->v = malloc(cap * sizeof *a->v);
    a->n = 0;
    while ((t = ref_tok(save))) {
        if ((size_t)a->n == cap) a->v = realloc(a->v, (cap *= 2) * sizeof *a->v);
        a->v[a->n++] = strtod(t, NULL);
    }
}

static void ref_free(ref_case *c)
{
    for (int i = 0; i < c->n_in; i++) free(c->in[i].v), free(c->grad[i].v);
    free(c->out.v);
    free(c->w.v);
    memset(c, 0, sizeof *c);
}

/* Reads the next case; 0 at the end of the file. */
static int ref_next(FILE *f, ref_case *c)
{
    char *line = NULL, *save;
    size_t cap = 0;
    int in_case = 0;
    memset(c, 0, sizeof *c);
    while (getline(&line, &cap, f) > 0) {
        char *k = strtok_r(line, " \t\n", &save);
        if (!k) continue;
        if (!strcmp(k, "case")) {
            in_case = 1;
            snprintf(c->name, sizeof c->name, "%s", ref_tok(&save));
            snprintf(c->op, sizeof c->op, "%s", ref_tok(&save));
            c->nargs = atoi(ref_tok(&save));
            for (int i = 0; i < c->nargs; i++) c->args[i] = atoll(ref_tok(&save));
        } else if (!in_case)
            continue;
        else if (!strcmp(k, "in")) {
            ref_arr *a = &c->in[c->n_in++];
            a->is_index = !strcmp(ref_tok(&save), "i");
            ref_parse_arr(&save, a, 1);
        } else if (!strcmp(k, "out"))
            ref_parse_arr(&save, &c->out, 1);
        else if (!strcmp(k, "w")) {
            ref_parse_arr(&save, &c->w, 0);
            c->has_w = 1;
        } else if (!strcmp(k, "grad")) {
            int i = atoi(ref_tok(&save));
            ref_parse_arr(&save, &c->grad[i], 0);
        } else if (!strcmp(k, "end")) {
            free(line);
            return 1;
        }
    }
    free(line);
    return 0;
}

static FILE *ref_open(void)
{
    const char *top = getenv("top_srcdir");
    char path[4096];
    snprintf(path, sizeof path, "%s/t/ref/ops_shape.txt", top ? top : ".");
    return fopen(path, "r");
}

/* The operation of a case on its operands (NULL on failure). */
typedef phx_tensor *(*ref_op_fn)(const ref_case *c, phx_tensor **x);

/* A float tensor of a's values (f32), or an i64 one for indices. */
static phx_tensor *ref_tensor(const ref_arr *a, const int64_t *shape_or_null, int ndim)
{
    const int64_t *shape = shape_or_null ? shape_or_null : a->shape;
    if (!shape_or_null) ndim = a->ndim;
    if (a->is_index) {
        int64_t *v = malloc((size_t)(a->n ? a->n : 1) * sizeof *v);
        for (int64_t i = 0; i < a->n; i++) v[i] = (int64_t)a->v[i];
        phx_tensor *t = phx_tensor_from_data(PHX_I64, ndim, shape, v);
        free(v);
        return t;
    }
    float *v = malloc((size_t)(a->n ? a->n : 1) * sizeof *v);
    for (int64_t i = 0; i < a->n; i++) v[i] = (float)a->v[i];
    phx_tensor *t = phx_tensor_from_data(PHX_F32, ndim, shape, v);
    free(v);
    return t;
}

static double ref_get(const phx_tensor *t, int64_t i)
{
    double v = NAN;
    phx_tensor_get(t, i, &v);
    return v;
}

/* Forward of case c on its bases (perm applied); out is owned by the
 * open scope. */
static phx_tensor *ref_forward(const ref_case *c, phx_tensor **base, ref_op_fn op)
{
    phx_tensor *x[REF_MAX_IN];
    for (int i = 0; i < c->n_in; i++)
        x[i] = c->in[i].nperm ? phx_permute(base[i], c->in[i].nperm, c->in[i].perm) : base[i];
    return op(c, x);
}

/* sum(out * w) in double. */
static double ref_loss(const phx_tensor *out, const ref_arr *w)
{
    double s = 0;
    for (int64_t i = 0; i < w->n; i++) s += ref_get(out, i) * w->v[i];
    return s;
}

/* The three checks of one case; returns the number of failures. */
static int ref_run(const ref_case *c, ref_op_fn op)
{
    int failed = 0;
    phx_tensor *base[REF_MAX_IN] = {0};
    for (int i = 0; i < c->n_in; i++) {
        base[i] = ref_tensor(&c->in[i], NULL, 0);
        if (!c->in[i].is_index && c->has_w) phx_tensor_set_requires_grad(base[i], true);
    }
    phx_scope *s = phx_scope_begin();
    phx_tensor *out = ref_forward(c, base, op);
    int same = out && phx_tensor_ndim(out) == c->out.ndim && phx_tensor_numel(out) == c->out.n;
    for (int d = 0; same && d < c->out.ndim; d++) same = phx_tensor_dim(out, d) == c->out.shape[d];
    double worst = 0;
    for (int64_t i = 0; same && i < c->out.n; i++)
        worst = fmax(worst, fabs(ref_get(out, i) - c->out.v[i]) / (1 + fabs(c->out.v[i])));
    failed += !ok(same && worst < 1e-6, "%s: %s matches torch (shape and values, max rel diff %g)%s%s", c->name, c->op,
                  worst, out ? "" : ": ", out ? "" : phx_last_error());
    if (c->has_w && same) {
        phx_tensor *w = ref_tensor(&c->w, c->out.shape, c->out.ndim);
        phx_status st = phx_backward_with(out, w);
        double gworst = 0, fworst = 0;
        int have = st == PHX_OK;
        bool mode = phx_set_grad_enabled(false);
        for (int k = 0, leaf = -1; have && k < c->n_in; k++) {
            if (c->in[k].is_index) continue;
            const ref_arr *want = &c->grad[++leaf]; /* torch's gradients skip the index inputs */
            phx_tensor *g = phx_tensor_grad(base[k]);
            float *bv = phx_tensor_data(base[k]);
            for (int64_t i = 0; i < c->in[k].n; i++) {
                double an = g ? ref_get(g, i) : 0.0;
                gworst = fmax(gworst, fabs(an - want->v[i]) / (1 + fabs(want->v[i])));
                float x0 = bv[i], hi = x0 + 1e-2f, lo = x0 - 1e-2f;
                bv[i] = hi;
                double lp = ref_loss(ref_forward(c, base, op), &c->w);
                bv[i] = lo;
                double lm = ref_loss(ref_forward(c, base, op), &c->w);
                bv[i] = x0;
                double fd = (lp - lm) / ((double)hi - (double)lo);
                fworst = fmax(fworst, fabs(an - fd) / (1 + fabs(fd)));
            }
        }
        phx_set_grad_enabled(mode);
        failed += !ok(have && gworst < 1e-6, "%s: gradient matches torch (max rel diff %g)%s%s", c->name, gworst,
                      have ? "" : ": ", have ? "" : phx_last_error());
        failed +=
            !ok(have && fworst < 1e-4, "%s: gradient matches central differences (max rel diff %g)", c->name, fworst);
        phx_tensor_free(w);
    }
    phx_scope_end(s);
    for (int i = 0; i < c->n_in; i++) phx_tensor_free(base[i]);
    return failed;
}

/* Every case whose op `accept` takes, run through op; returns the number
 * of cases run (0 with a skip_all when the file is missing). */
static int ref_run_all(int (*accept)(const char *op), ref_op_fn op)
{
    FILE *f = ref_open();
    if (!f) skip_all("t/ref/ops_shape.txt not found (set top_srcdir)");
    ref_case c;
    int n = 0;
    while (ref_next(f, &c)) {
        if (accept(c.op)) {
            ref_run(&c, op);
            n++;
        }
        ref_free(&c);
    }
    fclose(f);
    return n;
}
#endif
