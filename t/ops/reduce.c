/* Reductions, max/min with indices, argmax, softmax and log_softmax:
 * values and gradients against PyTorch 1.13 (t/ref/ops_math.txt), central
 * differences, px_sum_to through broadcast gradients, NaN and tie rules,
 * large sizes (the pool) against a direct loop, and errors. */
#include "t/ops/gradcheck.h"

typedef struct spec {
    const char *name;
    int cd;
} spec;

static phx_tensor *last_indices;

static phx_tensor *run(void *ctx, int k, phx_tensor *const *in)
{
    (void)k;
    const char *n = ((const spec *)ctx)->name;
    const phx_tensor *a = in[0];
    static const int d1[] = {1}, d02[] = {0, 2}, dm1[] = {-1}, d01[] = {0, 1};
#define IS(s) (!strcmp(n, s))
    if (IS("sum_d1") || IS("sum_size1")) return phx_sum(a, 1, d1, false);
    if (IS("sum_d02_keep")) return phx_sum(a, 2, d02, true);
    if (IS("sum_all")) return phx_sum(a, 0, NULL, false);
    if (IS("mean_dm1")) return phx_mean(a, 1, dm1, false);
    if (IS("mean_d01_keep")) return phx_mean(a, 2, d01, true);
    if (IS("var_d1")) return phx_var(a, 1, d1, 1, false);
    if (IS("var_all_c0")) return phx_var(a, 0, NULL, 0, false);
    if (IS("logsumexp_d1")) return phx_logsumexp(a, 1, d1, false);
    if (IS("logsumexp_d02_keep")) return phx_logsumexp(a, 2, d02, true);
    if (IS("max_d1")) return phx_max_dim(a, 1, false, &last_indices);
    if (IS("min_d0_keep")) return phx_min_dim(a, 0, true, &last_indices);
    if (IS("max_d2")) return phx_max_dim(a, 2, false, &last_indices);
    if (IS("softmax_d0")) return phx_softmax(a, 0);
    if (IS("softmax_d1")) return phx_softmax(a, 1);
    if (IS("softmax_d2")) return phx_softmax(a, 2);
    if (IS("log_softmax_d1")) return phx_log_softmax(a, 1);
    if (IS("log_softmax_d2")) return phx_log_softmax(a, -1);
#undef IS
    return NULL;
}

static const spec cases[] = {
    {"sum_d1", 1},         {"sum_d02_keep", 1},   {"sum_all", 1},      {"mean_dm1", 1},           {"mean_d01_keep", 1},
    {"var_d1", 1},         {"var_all_c0", 1},     {"logsumexp_d1", 1}, {"logsumexp_d02_keep", 1}, {"max_d1", 1},
    {"min_d0_keep", 1},    {"max_d2", 1},         {"softmax_d0", 1},   {"softmax_d1", 1},         {"softmax_d2", 1},
    {"log_softmax_d1", 1}, {"log_softmax_d2", 1}, {"sum_size1", 1},
};

/* The indices of max/min against PyTorch's. */
static void indices(const gc_ref *r)
{
    const char *names[] = {"max_d1", "min_d0_keep", "max_d2"};
    for (int c = 0; c < 3; c++) {
        const gc_ref_case *rc = gc_ref_case_find(r, names[c]);
        phx_tensor *a = gc_ref_tensor_new(gc_ref_get(rc, "in", "a"));
        phx_scope *s = phx_scope_begin();
        spec sp = {names[c], 0};
        last_indices = NULL;
        phx_tensor *y = run(&sp, 1, &a);
        char what[96];
        snprintf(what, sizeof what, "%s: indices (i64) match PyTorch", names[c]);
        gc_close(y && last_indices && phx_tensor_dtype(last_indices) == PHX_I64 ? last_indices : NULL,
                 gc_ref_get(rc, "out", "indices"), 0, 0, what);
        phx_scope_end(s);
        phx_tensor_free(a);
    }
}

/* NaN wins max/min and argmax; ties pick the first index and the gradient
 * goes to that one position only. */
static void nan_and_ties(void)
{
    float v[8] = {1, 3, 3, 2, 5, NAN, 7, NAN};
    int64_t sh[2] = {2, 4};
    phx_tensor *x = phx_tensor_from_data(PHX_F32, 2, sh, v);
    phx_tensor_set_requires_grad(x, true);
    phx_scope *s = phx_scope_begin();
    phx_tensor *ix = NULL, *m = phx_max_dim(x, 1, false, &ix), *am = phx_argmax(x, 1, false);
    double m0 = 0, m1 = 0, i0 = -1, i1 = -1, a0 = -1, a1 = -1;
    if (m && ix && am) {
        phx_tensor_get(m, 0, &m0), phx_tensor_get(m, 1, &m1), phx_tensor_get(ix, 0, &i0), phx_tensor_get(ix, 1, &i1);
        phx_tensor_get(am, 0, &a0), phx_tensor_get(am, 1, &a1);
    }
    ok(m0 == 3 && i0 == 1 && a0 == 1, "a tie gives the first index (value %g, index %g, argmax %g)", m0, i0, a0);
    ok(isnan(m1) && i1 == 1 && a1 == 1, "the first NaN wins (value %g, index %g, argmax %g)", m1, i1, a1);
    phx_status st = m ? phx_backward(phx_sum(m, 0, NULL, false)) : PHX_EINVAL;
    const phx_tensor *g = phx_tensor_grad(x);
    double gv[8] = {0};
    for (int i = 0; g && i < 8; i++) phx_tensor_get(g, i, &gv[i]);
    ok(st == PHX_OK && g && gv[1] == 1 && gv[2] == 0 && gv[5] == 1 && gv[0] + gv[3] + gv[4] + gv[6] + gv[7] == 0,
       "the gradient goes to the selected position only (%g %g %g %g | %g %g %g %g)", gv[0], gv[1], gv[2], gv[3], gv[4],
       gv[5], gv[6], gv[7]);
    phx_scope_end(s);
    phx_tensor_free(x);
}

/* Large: sum/max/softmax over dims 0, 1 and 2 against loops. */
static void large(void)
{
    int64_t sh[3] = {64, 129, 130}; /* > 2^20 elements: the pool splits */
    phx_rng *rng = phx_rng_new(3);
    phx_tensor *x = phx_tensor_new(PHX_F32, 3, sh, phx_cpu());
    phx_rng_normal(rng, x, 0, 1);
    const float *p = phx_tensor_data(x);
    for (int d = 0; d < 3; d++) {
        phx_scope *s = phx_scope_begin();
        phx_tensor *ys = phx_sum(x, 1, &d, false), *ix = NULL, *ym = phx_max_dim(x, d, false, &ix);
        phx_tensor *sm = phx_softmax(x, d);
        int64_t o = 1, n = sh[d], in = 1;
        for (int i = 0; i < d; i++) o *= sh[i];
        for (int i = d + 1; i < 3; i++) in *= sh[i];
        int bad = !ys || !ym || !sm;
        double worst = 0;
        for (int64_t a = 0; !bad && a < o; a++)
            for (int64_t c = 0; c < in; c++) {
                double sum = 0, best = -INFINITY, se = 0;
                int64_t bi = 0;
                for (int64_t k = 0; k < n; k++) {
                    float v = p[(a * n + k) * in + c];
                    sum += v;
                    if (v > best) best = v, bi = k;
                }
                for (int64_t k = 0; k < n; k++) se += exp(p[(a * n + k) * in + c] - best);
                const float *psm = phx_tensor_data(sm);
                for (int64_t k = 0; k < n; k++) {
                    double want = exp(p[(a * n + k) * in + c] - best) / se;
                    worst = fmax(worst, fabs(psm[(a * n + k) * in + c] - want));
                }
                double got;
                phx_tensor_get(ys, a * in + c, &got);
                worst = fmax(worst, fabs(got - sum) / (1 + fabs(sum)) * 1e-2);
                float gm = ((const float *)phx_tensor_data(ym))[a * in + c];
                bad += gm != (float)best || ((const int64_t *)phx_tensor_data(ix))[a * in + c] != bi;
            }
        ok(!bad && worst < 1e-6,
           "(64,129,130) over dim %d: sum, max, indices and softmax as a direct loop (%d "
           "wrong, worst error %g)",
           d, bad, worst);
        phx_scope_end(s);
    }
    phx_tensor_free(x);
    phx_rng_free(rng);
}

/* f16 and bf16: sum, logsumexp and softmax within the dtype's rounding of
 * the f32 result on the same (rounded) values. */
static void half_dtypes(void)
{
    /* (3, 50, 7) over dim 1 (tiles), (3, 300) over dim 1 (runs): both
     * past the size where f16 (and bf16 max/min) are widened first */
    int64_t sh[2][3] = {{3, 50, 7}, {3, 300, 1}};
    phx_rng *rng = phx_rng_new(4);
    phx_dtype dts[2] = {PHX_F16, PHX_BF16};
    double tol[2] = {2e-3, 1.6e-2};
    for (int c = 0; c < 2; c++) {
        phx_tensor *x = phx_tensor_new(PHX_F32, 3, sh[c], phx_cpu());
        phx_rng_normal(rng, x, 0, 1);
        for (int d = 0; d < 2; d++) {
            phx_tensor *h = phx_tensor_new(dts[d], 3, sh[c], phx_cpu());
            phx_tensor_cast(h, x), phx_tensor_cast(x, h);
            phx_scope *s = phx_scope_begin();
            int dim = 1;
            phx_tensor *ih = NULL, *i32 = NULL;
            phx_tensor *yh[4] = {phx_sum(h, 1, &dim, false), phx_logsumexp(h, 1, &dim, true), phx_softmax(h, 1),
                                 phx_min_dim(h, 1, false, &ih)};
            phx_tensor *y[4] = {phx_sum(x, 1, &dim, false), phx_logsumexp(x, 1, &dim, true), phx_softmax(x, 1),
                                phx_min_dim(x, 1, false, &i32)};
            double worst = 0;
            int bad = !ih || !i32 || memcmp(phx_tensor_data(ih), phx_tensor_data(i32), phx_tensor_nbytes(i32));
            for (int o = 0; o < 4; o++) {
                bad += !yh[o] || !y[o] || phx_tensor_dtype(yh[o]) != dts[d];
                for (int64_t i = 0; !bad && i < phx_tensor_numel(y[o]); i++) {
                    double u, v;
                    phx_tensor_get(yh[o], i, &u), phx_tensor_get(y[o], i, &v);
                    worst = fmax(worst, fabs(u - v) / (fabs(v) + 1e-3));
                }
            }
            ok(!bad && worst < tol[d],
               "%s (%lld, %lld, %lld) over dim 1: sum, logsumexp, softmax and min within %g "
               "of f32 (%g), min's indices equal",
               phx_dtype_name(dts[d]), (long long)sh[c][0], (long long)sh[c][1], (long long)sh[c][2], tol[d], worst);
            phx_scope_end(s);
            phx_tensor_free(h);
        }
        phx_tensor_free(x);
    }
    phx_rng_free(rng);
}

/* torch.var divides by max(0, N - correction): a correction of N or more
 * gives inf for spread values, NaN for equal ones (0 / 0); values from
 * PyTorch 1.13. */
static void var_large_correction(void)
{
    int64_t s3[1] = {3}, s23[2] = {2, 2};
    float xv[3] = {1, 2, 4}, cv[3] = {3, 3, 3}, mv[4] = {1, 2, 1, 5};
    phx_scope *s = phx_scope_begin();
    phx_tensor *x = phx_tensor_from_data(PHX_F32, 1, s3, xv), *c = phx_tensor_from_data(PHX_F32, 1, s3, cv);
    phx_tensor *m = phx_tensor_from_data(PHX_F32, 2, s23, mv);
    double v[6] = {0, 0, 0, 0, 0, 0};
    int64_t corr[4] = {2, 3, 4, 5};
    for (int i = 0; i < 4; i++) {
        phx_tensor *y = phx_var(x, 0, NULL, corr[i], false);
        if (y) phx_tensor_get(y, 0, &v[i]);
    }
    ok(fabs(v[0] - 14.0 / 3) < 1e-5 && isinf(v[1]) && v[1] > 0 && isinf(v[2]) && v[2] > 0 && isinf(v[3]) && v[3] > 0,
       "var of (1, 2, 4) with correction 2, 3, 4, 5: 4.667 inf inf inf (got %g %g %g %g)", v[0], v[1], v[2], v[3]);
    phx_tensor *yc = phx_var(c, 0, NULL, 4, false), *ym = phx_var(m, 1, (int[]){1}, 3, false);
    if (yc) phx_tensor_get(yc, 0, &v[4]);
    ok(yc && isnan(v[4]), "var of (3, 3, 3) with correction 4: NaN (0 / 0; got %g)", v[4]);
    if (ym) phx_tensor_get(ym, 0, &v[4]), phx_tensor_get(ym, 1, &v[5]);
    ok(ym && isinf(v[4]) && isinf(v[5]), "var over dim 1 of (2,2) with correction 3: inf inf (got %g %g)", v[4], v[5]);
    phx_scope_end(s);
}

/* A 0-dim tensor takes dim 0 and -1 as PyTorch (its one element): sum and
 * mean give it back (gradient 1), softmax 1 and log_softmax 0 (gradient
 * 0), max_dim the value and index 0, argmax 0; another dim is refused
 * with the range -1 .. 0. */
static void scalar_dims(void)
{
    phx_scope *s = phx_scope_begin();
    int d0 = 0, dm1 = -1, d1 = 1, dd[2] = {0, -1};
    const char *names[6] = {"sum(dim 0)",          "mean(dim -1, keepdim)",   "softmax(dim 0)",
                            "log_softmax(dim -1)", "max_dim(dim 0, keepdim)", "min_dim(dim -1)"};
    double want[6] = {2.5, 2.5, 1, 0, 2.5, 2.5}, wantg[6] = {1, 1, 0, 0, 1, 1};
    for (int k = 0; k < 6; k++) {
        phx_tensor *x = phx_full(0, NULL, 2.5, PHX_F32, phx_cpu()), *ix = NULL;
        phx_tensor_set_requires_grad(x, true);
        phx_tensor *y = k == 0 ? phx_sum(x, 1, &d0, false)
            : k == 1           ? phx_mean(x, 1, &dm1, true)
            : k == 2           ? phx_softmax(x, 0)
            : k == 3           ? phx_log_softmax(x, -1)
            : k == 4           ? phx_max_dim(x, 0, true, &ix)
                               : phx_min_dim(x, -1, false, NULL);
        double v = NAN, g = NAN, iv = 0;
        const char *err = y ? "" : phx_last_error();
        if (y) phx_tensor_get(y, 0, &v);
        if (ix) phx_tensor_get(ix, 0, &iv);
        if (y && phx_backward(y) == PHX_OK && phx_tensor_grad(x)) phx_tensor_get(phx_tensor_grad(x), 0, &g);
        ok(y && phx_tensor_ndim(y) == 0 && v == want[k] && g == wantg[k] &&
               (!ix || (phx_tensor_ndim(ix) == 0 && iv == 0)),
           "0-dim %s: %g, gradient %g (got %g, %g%s)", names[k], want[k], wantg[k], v, g, err);
    }
    phx_tensor *x = phx_full(0, NULL, 2.5, PHX_F32, phx_cpu());
    phx_tensor *am = phx_argmax(x, 0, true);
    double iv = -1;
    if (am) phx_tensor_get(am, 0, &iv);
    ok(am && phx_tensor_ndim(am) == 0 && iv == 0, "0-dim argmax(dim 0): index 0");
    ok(!phx_sum(x, 1, &d1, false) && strstr(phx_last_error(), "dim 1") && strstr(phx_last_error(), "expected -1 .. 0"),
       "0-dim sum over dim 1 is refused with the range taken: %s", phx_last_error());
    ok(!phx_sum(x, 2, dd, false) && strstr(phx_last_error(), "twice"),
       "0-dim sum over dims 0 and -1: the same dim twice: %s", phx_last_error());
    ok(!phx_softmax(x, 1) && strstr(phx_last_error(), "expected -1 .. 0"), "0-dim softmax over dim 1 is refused: %s",
       phx_last_error());
    ok(!phx_argmax(x, -2, false) && strstr(phx_last_error(), "expected -1 .. 0"),
       "0-dim argmax over dim -2 is refused: %s", phx_last_error());
    phx_scope_end(s);
}

static void errors(void)
{
    int64_t sh[2] = {2, 3}, z[2] = {2, 0};
    phx_tensor *x = phx_tensor_zeros(PHX_F32, 2, sh, phx_cpu()), *e = phx_tensor_zeros(PHX_F32, 2, z, phx_cpu());
    phx_scope *s = phx_scope_begin();
    int d = 2, dd[2] = {1, -1};
    ok(!phx_sum(x, 1, &d, false) && strstr(phx_last_error(), "dim 2"), "dim out of range: %s", phx_last_error());
    ok(!phx_mean(x, 2, dd, false) && strstr(phx_last_error(), "twice"), "repeated dim: %s", phx_last_error());
    ok(!phx_max_dim(e, 1, false, NULL) && strstr(phx_last_error(), "empty"), "max over an empty dim: %s",
       phx_last_error());
    phx_tensor *se = phx_sum(e, 1, (int[]){1}, false);
    double v = -1;
    if (se) phx_tensor_get(se, 0, &v);
    ok(se && phx_tensor_numel(se) == 2 && v == 0, "sum over an empty dim gives 0");
    phx_scope_end(s);
    phx_tensor_free(x), phx_tensor_free(e);
}

int main(void)
{
    gc_ref *r = gc_ref_load("ops_math.txt");
    if (!r) return ok(0, "reference data loads"), done_testing();
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        gc_ref_run(r, cases[i].name, run, (void *)&cases[i], 1e-5, 1e-5, cases[i].cd);
    indices(r);
    nan_and_ties();
    large();
    half_dtypes();
    var_large_correction();
    scalar_dims();
    errors();
    gc_ref_free(r);
    return done_testing();
}
