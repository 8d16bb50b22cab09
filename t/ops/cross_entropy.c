/* phx_cross_entropy_ex: values and gradients of F.cross_entropy with
 * weight, ignore_index, reduction and label_smoothing, alone and together,
 * the K-dim and unbatched forms, against PyTorch 1.13 (the ce_* cases of
 * t/ref/ops_math.txt, made by bench/torch/ops_math_ref.py) and central
 * differences; the fused path's equality with phx_cross_entropy; an
 * ignored row holding -inf; f16 logits; and the refusals. */
#include "t/ops/gradcheck.h"
#include "phalanx/loss.h"

/* The options of case c (its arg lines); in[2], when given, the weight. */
static phx_tensor *run(void *ctx, int k, phx_tensor *const *in)
{
    const gc_ref_case *c = ctx;
    phx_cross_entropy_opts o = PHX_CROSS_ENTROPY_OPTS_INIT;
    o.ignore_index = (int64_t)gc_ref_get(c, "arg", "ignore_index")->v[0];
    o.reduction = (phx_reduction)gc_ref_get(c, "arg", "reduction")->v[0];
    o.label_smoothing = gc_ref_get(c, "arg", "label_smoothing")->v[0];
    o.weight = k > 2 ? in[2] : NULL;
    return phx_cross_entropy_ex(in[0], in[1], &o);
}

static double value(const phx_tensor *t)
{
    double v = NAN;
    if (t) phx_tensor_get(t, 0, &v);
    return v;
}

static phx_tensor *i64s(int ndim, const int64_t *shape, const int64_t *v)
{
    return phx_tensor_from_data(PHX_I64, ndim, shape, v);
}

/* The PyTorch cases: each forward, its gradient, and (but where the value
 * is NaN or infinite) central differences. */
static void reference_cases(const gc_ref *r)
{
    int n = 0;
    for (int i = 0; i < r->nc; i++) {
        const gc_ref_case *c = &r->c[i];
        if (strncmp(c->name, "ce_", 3)) continue;
        n++;
        int finite_out = isfinite(gc_ref_get(c, "out", "out")->v[0]);
        gc_ref_run(r, c->name, run, (void *)c, 1e-5, 1e-6, finite_out);
    }
    ok(n >= 34, "%d reference cases of cross_entropy_ex ran (regenerate t/ref/ops_math.txt if fewer)", n);
}

/* The defaults with no ignored target are phx_cross_entropy itself. */
static void fused_path(const gc_ref *r)
{
    const gc_ref_case *c = gc_ref_case_find(r, "ce_default");
    phx_tensor *x = gc_ref_tensor_new(gc_ref_get(c, "in", "a")), *t = gc_ref_tensor_new(gc_ref_get(c, "in", "target"));
    phx_scope *s = phx_scope_begin();
    double a = value(phx_cross_entropy(x, t)), b = value(phx_cross_entropy_ex(x, t, NULL));
    ok(a == b && isfinite(a), "opts NULL, no ignored target: phx_cross_entropy's value exactly (%.9g, %.9g)", a, b);
    phx_cross_entropy_opts o = PHX_CROSS_ENTROPY_OPTS_INIT;
    o.ignore_index = 3; /* a class present in the target: now ignored */
    double d = value(phx_cross_entropy_ex(x, t, &o));
    ok(isfinite(d) && d != a, "ignore_index 3 changes the mean (%.9g vs %.9g)", d, a);
    phx_scope_end(s);
    phx_tensor_free(x), phx_tensor_free(t);
}

/* An ignored row may hold -inf (a masked class): the loss and gradient
 * stay finite and equal to the loss without that row. */
static void ignored_inf(void)
{
    int64_t xs[2] = {3, 4}, ts[1] = {3}, ts2[1] = {2};
    float xv[12] = {0.5f, -1, 2, 0.25f, -INFINITY, 1, 0.5f, -2, 1.5f, 0, -0.5f, 3};
    int64_t tv[3] = {2, -100, 3}, tv2[2] = {2, 3};
    float x2v[8] = {0.5f, -1, 2, 0.25f, 1.5f, 0, -0.5f, 3};
    int64_t x2s[2] = {2, 4};
    phx_tensor *x = phx_tensor_from_data(PHX_F32, 2, xs, xv), *t = i64s(1, ts, tv);
    phx_tensor *x2 = phx_tensor_from_data(PHX_F32, 2, x2s, x2v), *t2 = i64s(1, ts2, tv2);
    phx_tensor_set_requires_grad(x, true);
    phx_scope *s = phx_scope_begin();
    phx_cross_entropy_opts o = PHX_CROSS_ENTROPY_OPTS_INIT;
    o.label_smoothing = 0.1;
    phx_tensor *l = phx_cross_entropy_ex(x, t, &o);
    double v = value(l), want = value(phx_cross_entropy_ex(x2, t2, &o));
    phx_status st = l ? phx_backward(l) : PHX_EINVAL;
    const phx_tensor *g = phx_tensor_grad(x);
    int finite = st == PHX_OK && g != NULL;
    for (int64_t i = 0; finite && i < 12; i++) {
        double gv;
        phx_tensor_get(g, i, &gv);
        finite = isfinite(gv) && (i < 4 || i >= 8 || gv == 0);
    }
    ok(isfinite(v) && fabs(v - want) < 1e-6, "an ignored row holding -inf adds nothing (%.9g vs %.9g)", v, want);
    ok(finite, "... and its gradient is finite, zero on that row");
    phx_scope_end(s);
    phx_tensor_free(x), phx_tensor_free(t), phx_tensor_free(x2), phx_tensor_free(t2);
}

/* f16 logits: an f32 loss as f32 logits of the same values give, an f16
 * gradient. */
static void half_logits(const gc_ref *r)
{
    const gc_ref_case *c = gc_ref_case_find(r, "ce_combined_mean");
    phx_tensor *x = gc_ref_tensor_new(gc_ref_get(c, "in", "a")), *t = gc_ref_tensor_new(gc_ref_get(c, "in", "target"));
    phx_tensor *w = gc_ref_tensor_new(gc_ref_get(c, "in", "weight"));
    phx_tensor *xh = phx_tensor_new(PHX_F16, 2, phx_tensor_shape(x), phx_cpu());
    phx_tensor *x32 = phx_tensor_new(PHX_F32, 2, phx_tensor_shape(x), phx_cpu());
    phx_tensor_cast(xh, x), phx_tensor_cast(x32, xh);
    phx_tensor_set_requires_grad(xh, true), phx_tensor_set_requires_grad(x32, true);
    phx_cross_entropy_opts o = PHX_CROSS_ENTROPY_OPTS_INIT;
    o.weight = w, o.label_smoothing = 0.2;
    phx_scope *s = phx_scope_begin();
    phx_tensor *lh = phx_cross_entropy_ex(xh, t, &o), *l32 = phx_cross_entropy_ex(x32, t, &o);
    double gworst = 1;
    if (lh && l32 && !phx_backward(lh) && !phx_backward(l32)) {
        const phx_tensor *gh = phx_tensor_grad(xh), *g32 = phx_tensor_grad(x32);
        gworst = gh && phx_tensor_dtype(gh) == PHX_F16 ? 0 : 1;
        for (int64_t i = 0; !gworst && i < phx_tensor_numel(x); i++) {
            double u, v;
            phx_tensor_get(gh, i, &u), phx_tensor_get(g32, i, &v);
            gworst = fmax(gworst, fabs(u - v));
        }
    }
    ok(lh && phx_tensor_dtype(lh) == PHX_F32 && fabs(value(lh) - value(l32)) < 1e-6 && gworst < 1e-3,
       "f16 logits: f32 loss %.9g as f32's %.9g; f16 gradient within %g", value(lh), value(l32), gworst);
    phx_scope_end(s);
    phx_tensor_free(xh), phx_tensor_free(x32), phx_tensor_free(x), phx_tensor_free(t), phx_tensor_free(w);
}

/* fails: one call of phx_cross_entropy_ex expected to be refused with a
 * message containing each of the needles (up to 3, NULL ends). */
static void refused(const phx_tensor *x, const phx_tensor *t, const phx_cross_entropy_opts *o, const char *what,
                    const char *n1, const char *n2, const char *n3)
{
    phx_error_clear();
    phx_tensor *l = phx_cross_entropy_ex(x, t, o);
    const char *e = phx_last_error();
    int good = !l && e && strstr(e, n1) && (!n2 || strstr(e, n2)) && (!n3 || strstr(e, n3));
    ok(good, "%s is refused: %s", what, e ? e : "(no message)");
}

static void errors(void)
{
    int64_t xs[2] = {4, 5}, ts[1] = {4}, t3s[1] = {3}, ks[3] = {2, 5, 3}, kts[2] = {2, 3}, ws[1] = {4}, w5[1] = {5};
    int64_t es[2] = {0, 5}, e0[1] = {0};
    int64_t tv[4] = {1, 0, 4, 2}, bad[4] = {1, 0, 9, 2}, pad[4] = {1, -100, 4, 2};
    int64_t kbad[6] = {0, 1, 2, 3, 4, 7}, wi[5] = {1, 1, 1, 1, 1};
    float wv[5] = {1, 2, 3, 4, 5};
    phx_tensor *x = phx_tensor_zeros(PHX_F32, 2, xs, phx_cpu()), *t = i64s(1, ts, tv);
    phx_tensor *xk = phx_tensor_zeros(PHX_F32, 3, ks, phx_cpu()), *tk = i64s(2, kts, kbad);
    phx_tensor *tb = i64s(1, ts, bad), *tp = i64s(1, ts, pad), *t3 = i64s(1, t3s, tv);
    phx_tensor *w4 = phx_tensor_from_data(PHX_F32, 1, ws, wv), *wint = i64s(1, w5, wi);
    phx_tensor *wg = phx_tensor_from_data(PHX_F32, 1, w5, wv);
    phx_tensor *xe = phx_tensor_zeros(PHX_F32, 2, es, phx_cpu()), *te = phx_tensor_zeros(PHX_I64, 1, e0, phx_cpu());
    phx_tensor_set_requires_grad(x, true), phx_tensor_set_requires_grad(wg, true);
    phx_scope *s = phx_scope_begin();
    phx_cross_entropy_opts o = PHX_CROSS_ENTROPY_OPTS_INIT;
    refused(NULL, t, &o, "NULL logits", "logits", NULL, NULL);
    refused(x, NULL, &o, "NULL target", "target", NULL, NULL);
    refused(t, t, &o, "i64 logits", "logits", NULL, NULL);
    refused(x, x, &o, "a float target", "f32", "expected", "i64");
    refused(x, t3, &o, "a target of 3 rows for 4", "(3,)", "(4, 5)", "expected");
    refused(xk, t, &o, "(2, 5, 3) logits with a (4) target", "(2, 5, 3)", "(n, d1, ...)", NULL);
    refused(xe, te, &o, "empty logits", "non-empty", NULL, NULL);
    refused(x, tb, &o, "target 9 of 5 classes", "target 9 of row 2", "[0, 5)", "ignore_index -100");
    o.ignore_index = 0;
    refused(x, tp, &o, "target -100 with ignore_index 0", "target -100 of row 1", "ignore_index 0", NULL);
    o.ignore_index = -100;
    refused(xk, tk, &o, "K-dim target 7", "target 7 at (1, 2)", "[0, 5)", NULL);
    o.label_smoothing = -0.1;
    refused(x, t, &o, "label_smoothing -0.1", "label_smoothing -0.1", "[0, 1]", NULL);
    o.label_smoothing = 1.5;
    refused(x, t, &o, "label_smoothing 1.5", "label_smoothing 1.5", "[0, 1]", NULL);
    o.label_smoothing = NAN;
    refused(x, t, &o, "label_smoothing NaN", "label_smoothing", "[0, 1]", NULL);
    o.label_smoothing = 0;
    o.weight = w4;
    refused(x, t, &o, "a weight of 4 for 5 classes", "weight f32 (4,)", "expected f32 (5,)", NULL);
    o.weight = wint;
    refused(x, t, &o, "an i64 weight", "weight i64", "expected f32 (5,)", NULL);
    o.weight = wg;
    refused(x, t, &o, "a weight requiring a gradient", "weight requires a gradient", NULL, NULL);
    bool prev = phx_set_grad_enabled(false);
    ok(phx_cross_entropy_ex(x, t, &o) != NULL, "... accepted with grad mode off");
    phx_set_grad_enabled(prev);
    o.weight = NULL;
    o.reduction = (phx_reduction)7;
    refused(x, t, &o, "reduction 7", "reduction 7", "PHX_REDUCE_NONE", NULL);
    o.reduction = PHX_REDUCE_MEAN;
    o.struct_size = 0;
    refused(x, t, &o, "struct_size 0", "struct_size is 0", "PHX_CROSS_ENTROPY_OPTS_INIT", NULL);
    struct {
        phx_cross_entropy_opts o;
        int64_t later;
    } big = {PHX_CROSS_ENTROPY_OPTS_INIT, 1};
    big.o.struct_size = sizeof big;
    refused(x, t, &big.o, "a newer layout's field set", "past the", "newer Phalanx headers", NULL);
    big.later = 0;
    ok(phx_cross_entropy_ex(x, t, &big.o) != NULL, "a newer layout with its new field zero is read");
    ok(phx_tensor_grad(x) == NULL, "no refusal wrote a gradient");
    phx_scope_end(s);
    ok(phx_loss_new(PHX_LOSS_CROSS_ENTROPY, PHX_REDUCE_NONE) == NULL && strstr(phx_last_error(), "none"),
       "phx_loss_new refuses PHX_REDUCE_NONE: %s", phx_last_error());
    phx_tensor_free(x), phx_tensor_free(t), phx_tensor_free(xk), phx_tensor_free(tk), phx_tensor_free(tb);
    phx_tensor_free(tp), phx_tensor_free(t3), phx_tensor_free(w4), phx_tensor_free(wint), phx_tensor_free(wg);
    phx_tensor_free(xe), phx_tensor_free(te);
}

int main(void)
{
    gc_ref *r = gc_ref_load("ops_math.txt");
    if (!r) return ok(0, "reference data loads"), done_testing();
    reference_cases(r);
    fused_path(r);
    ignored_inf();
    half_logits(r);
    errors();
    gc_ref_free(r);
    return done_testing();
}
