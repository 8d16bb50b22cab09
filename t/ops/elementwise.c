/* Elementwise operations: values and gradients against PyTorch 1.13
 * (t/ref/ops_math.txt, bench/torch/ops_math_ref.py) with broadcasting in
 * both operands and size-1 dims, central differences, f16/bf16 forward,
 * and the error cases (shapes that cannot broadcast, mixed dtypes and
 * devices, requires_grad on an integer tensor, NULL propagation). */
#include "t/ops/gradcheck.h"

typedef struct spec {
    const char *name;
    int cd; /* also check by central differences (no kinks near the inputs) */
} spec;

static phx_tensor *run(void *ctx, int k, phx_tensor *const *in)
{
    const char *n = ((const spec *)ctx)->name;
    const phx_tensor *a = in[0], *b = k > 1 ? in[1] : NULL;
#define IS(s) (!strcmp(n, s))
    if (IS("add")) return phx_add(a, b);
    if (IS("sub")) return phx_sub(a, b);
    if (IS("mul")) return phx_mul(a, b);
    if (IS("div")) return phx_div(a, b);
    if (IS("pow")) return phx_pow(a, b);
    if (IS("maximum") || IS("maximum_ties")) return phx_maximum(a, b);
    if (IS("minimum") || IS("minimum_ties")) return phx_minimum(a, b);
    if (IS("where")) return phx_where(in[0], in[1], in[2]);
    if (IS("eq")) return phx_eq(a, b);
    if (IS("ne")) return phx_ne(a, b);
    if (IS("lt")) return phx_lt(a, b);
    if (IS("le")) return phx_le(a, b);
    if (IS("gt")) return phx_gt(a, b);
    if (IS("ge")) return phx_ge(a, b);
    if (IS("add_scalar")) return phx_add_scalar(a, 2.5);
    if (IS("sub_scalar")) return phx_sub_scalar(a, 2.5);
    if (IS("mul_scalar")) return phx_mul_scalar(a, -1.5);
    if (IS("div_scalar")) return phx_div_scalar(a, 3.0);
    if (IS("rsub_scalar")) return phx_rsub_scalar(a, 2.0);
    if (IS("pow_scalar")) return phx_pow_scalar(a, 3.0);
    if (IS("pow_scalar_half")) return phx_pow_scalar(a, 0.5);
    if (IS("gt_scalar")) return phx_gt_scalar(a, 0.25);
    if (IS("neg")) return phx_neg(a);
    if (IS("exp")) return phx_exp(a);
    if (IS("ln")) return phx_ln(a);
    if (IS("sqrt")) return phx_sqrt(a);
    if (IS("rsqrt")) return phx_rsqrt(a);
    if (IS("abs")) return phx_abs(a);
    if (IS("clamp")) return phx_clamp(a, -0.5, 0.5);
    if (IS("clamp_lo")) return phx_clamp(a, -0.5, NAN);
    if (IS("relu")) return phx_relu(a);
    if (IS("gelu")) return phx_gelu(a, false);
    if (IS("gelu_tanh")) return phx_gelu(a, true);
    if (IS("tanh")) return phx_tanh(a);
    if (IS("sigmoid")) return phx_sigmoid(a);
#undef IS
    return NULL;
}

static const spec cases[] = {
    {"add", 1},
    {"sub", 1},
    {"mul", 1},
    {"div", 1},
    {"pow", 1},
    {"maximum", 1},
    {"minimum", 1},
    {"maximum_ties", 0},
    {"minimum_ties", 0},
    {"where", 1},
    {"eq", 0},
    {"ne", 0},
    {"lt", 0},
    {"le", 0},
    {"gt", 0},
    {"ge", 0},
    {"add_scalar", 1},
    {"sub_scalar", 1},
    {"mul_scalar", 1},
    {"div_scalar", 1},
    {"rsub_scalar", 1},
    {"pow_scalar", 1},
    {"pow_scalar_half", 1},
    {"gt_scalar", 0},
    {"neg", 1},
    {"exp", 1},
    {"ln", 1},
    {"sqrt", 1},
    {"rsqrt", 1},
    {"abs", 1},
    {"clamp", 1},
    {"clamp_lo", 1},
    {"relu", 1},
    {"gelu", 1},
    {"gelu_tanh", 1},
    {"tanh", 1},
    {"sigmoid", 1},
};

/* f16 and bf16: the same values as f32 rounded once, for a row
 * broadcast longer than one conversion block, a column broadcast and a
 * unary op. */
static void half_dtypes(void)
{
    int64_t sa[2] = {3, 1500}, sb[1] = {1500}, sc[2] = {3, 1};
    phx_rng *rng = phx_rng_new(5);
    phx_tensor *a = phx_tensor_new(PHX_F32, 2, sa, phx_cpu()), *b = phx_tensor_new(PHX_F32, 1, sb, phx_cpu());
    phx_tensor *c = phx_tensor_new(PHX_F32, 2, sc, phx_cpu());
    phx_rng_normal(rng, a, 0, 1);
    phx_rng_uniform(rng, b, 0.5f, 2.0f);
    phx_rng_normal(rng, c, 0, 1);
    phx_dtype dts[2] = {PHX_F16, PHX_BF16};
    for (int d = 0; d < 2; d++) {
        phx_tensor *ah = phx_tensor_new(dts[d], 2, sa, phx_cpu()), *bh = phx_tensor_new(dts[d], 1, sb, phx_cpu());
        phx_tensor *ch = phx_tensor_new(dts[d], 2, sc, phx_cpu());
        phx_tensor_cast(ah, a), phx_tensor_cast(bh, b), phx_tensor_cast(ch, c);
        phx_tensor *a32 = phx_tensor_new(PHX_F32, 2, sa, phx_cpu()), *b32 = phx_tensor_new(PHX_F32, 1, sb, phx_cpu());
        phx_tensor *c32 = phx_tensor_new(PHX_F32, 2, sc, phx_cpu());
        phx_tensor_cast(a32, ah), phx_tensor_cast(b32, bh), phx_tensor_cast(c32, ch);
        phx_scope *s = phx_scope_begin();
        phx_tensor *yh[3] = {phx_div(ah, bh), phx_exp(ah), phx_sub(ch, ah)};
        phx_tensor *y32[3] = {phx_div(a32, b32), phx_exp(a32), phx_sub(c32, a32)};
        const char *what[3] = {"a / b (row broadcast)", "exp(a)", "c - a (column broadcast)"};
        for (int o = 0; o < 3; o++) {
            phx_tensor *y32h = phx_tensor_new(dts[d], 2, sa, phx_cpu());
            phx_tensor_cast(y32h, y32[o]);
            ok(yh[o] && phx_tensor_dtype(yh[o]) == dts[d] &&
                   !memcmp(phx_tensor_data(yh[o]), phx_tensor_data(y32h), phx_tensor_nbytes(y32h)),
               "%s: %s equals the f32 result rounded once", phx_dtype_name(dts[d]), what[o]);
            phx_tensor_free(y32h);
        }
        phx_scope_end(s);
        phx_tensor_free(ah), phx_tensor_free(bh), phx_tensor_free(ch);
        phx_tensor_free(a32), phx_tensor_free(b32), phx_tensor_free(c32);
    }
    phx_tensor_free(a), phx_tensor_free(b), phx_tensor_free(c);
    phx_rng_free(rng);
}

/* Large outputs take the pool; every layout gives the reference values. */
static void large(void)
{
    int64_t sa[3] = {128, 66, 128}, sb[2] = {66, 1}, sc[1] = {128}; /* > 2^20: the pool */
    phx_rng *rng = phx_rng_new(9);
    phx_tensor *a = phx_tensor_new(PHX_F32, 3, sa, phx_cpu()), *b = phx_tensor_new(PHX_F32, 2, sb, phx_cpu());
    phx_tensor *c = phx_tensor_new(PHX_F32, 1, sc, phx_cpu());
    phx_rng_normal(rng, a, 0, 1), phx_rng_normal(rng, b, 0, 1), phx_rng_normal(rng, c, 0, 1);
    phx_scope *s = phx_scope_begin();
    phx_tensor *y = phx_sub(phx_mul(a, b), c);
    const float *pa = phx_tensor_data(a), *pb = phx_tensor_data(b), *pc = phx_tensor_data(c);
    const float *py = y ? phx_tensor_data(y) : NULL;
    int bad = !py;
    for (int64_t i = 0; py && i < 128; i++)
        for (int64_t j = 0; j < 66; j++)
            for (int64_t l = 0; l < 128; l++) {
                float want = pa[(i * 66 + j) * 128 + l] * pb[j] - pc[l];
                bad += py[(i * 66 + j) * 128 + l] != want;
            }
    ok(!bad, "a (128,66,128) * b (66,1) - c (128): every element as computed here (%d differ)", bad);
    phx_scope_end(s);
    phx_tensor_free(a), phx_tensor_free(b), phx_tensor_free(c);
    phx_rng_free(rng);
}

/* where with an i64 condition broadcast against both operands; masks
 * from comparisons are in the operands' dtype. */
static void where_int_cond(void)
{
    int64_t sc[2] = {2, 1}, sa[1] = {3}, cv[2] = {0, 7};
    float av[3] = {1, 2, 3}, bv = -1;
    phx_tensor *c = phx_tensor_from_data(PHX_I64, 2, sc, cv), *a = phx_tensor_from_data(PHX_F32, 1, sa, av);
    phx_tensor *b = phx_tensor_from_data(PHX_F32, 0, NULL, &bv);
    phx_scope *s = phx_scope_begin();
    phx_tensor *y = phx_where(c, a, b), *m = phx_gt_scalar(a, 1.5);
    double v[6] = {0};
    for (int i = 0; y && i < 6; i++) phx_tensor_get(y, i, &v[i]);
    ok(y && phx_tensor_numel(y) == 6 && v[0] == -1 && v[2] == -1 && v[3] == 1 && v[5] == 3,
       "where(i64 (2,1), (3), scalar) gives (2,3): %g %g %g / %g %g %g", v[0], v[1], v[2], v[3], v[4], v[5]);
    ok(m && phx_tensor_dtype(m) == PHX_F32 && !phx_tensor_requires_grad(m), "gt_scalar gives an f32 mask");
    phx_scope_end(s);
    phx_tensor_free(c), phx_tensor_free(a), phx_tensor_free(b);
}

/* relu keeps a NaN (PyTorch's relu): a diverged activation is not
 * hidden as 0; the gradient passes at NaN as threshold_backward does. The
 * op in each float dtype, and the ReLU module. */
static void relu_nan(void)
{
    int64_t s5[1] = {5}, s15[2] = {1, 5};
    float xv[5] = {NAN, -NAN, 1, -1, 0}, wv[5] = {2, 3, 4, 5, 6};
    phx_dtype dts[3] = {PHX_F32, PHX_F16, PHX_BF16};
    phx_scope *s = phx_scope_begin();
    for (int d = 0; d < 3; d++) {
        phx_tensor *x = phx_to_dtype(phx_tensor_from_data(PHX_F32, 1, s5, xv), dts[d]);
        phx_tensor *w = phx_to_dtype(phx_tensor_from_data(PHX_F32, 1, s5, wv), dts[d]);
        phx_tensor_set_requires_grad(x, true);
        phx_tensor *y = phx_relu(x);
        phx_status st = phx_backward(phx_sum(phx_mul(y, w), 0, NULL, false));
        double v[5] = {0}, g[5] = {0};
        for (int i = 0; y && i < 5; i++) phx_tensor_get(y, i, &v[i]);
        for (int i = 0; st == PHX_OK && i < 5; i++) phx_tensor_get(phx_tensor_grad(x), i, &g[i]);
        ok(y && isnan(v[0]) && isnan(v[1]) && v[2] == 1 && v[3] == 0 && v[4] == 0,
           "%s relu(NaN, -NaN, 1, -1, 0) = NaN NaN 1 0 0: %g %g %g %g %g", phx_dtype_name(dts[d]), v[0], v[1], v[2],
           v[3], v[4]);
        ok(st == PHX_OK && g[0] == 2 && g[1] == 3 && g[2] == 4 && g[3] == 0 && g[4] == 0,
           "%s relu's gradient passes at NaN: %g %g %g %g %g", phx_dtype_name(dts[d]), g[0], g[1], g[2], g[3], g[4]);
    }
    phx_module *m = phx_relu_new();
    phx_tensor *y = NULL;
    phx_module_forward(m, phx_tensor_from_data(PHX_F32, 2, s15, xv), &y);
    double v0 = 0, v1 = 0;
    if (y) phx_tensor_get(y, 0, &v0), phx_tensor_get(y, 1, &v1);
    ok(y && isnan(v0) && isnan(v1), "the ReLU module keeps NaN: %g %g", v0, v1);
    phx_module_free(m);
    phx_scope_end(s);
}

static void errors(void)
{
    int64_t s23[2] = {2, 3}, s4[1] = {4};
    phx_tensor *a = phx_tensor_zeros(PHX_F32, 2, s23, phx_cpu()), *b = phx_tensor_zeros(PHX_F32, 1, s4, phx_cpu());
    phx_tensor *h = phx_tensor_zeros(PHX_F16, 2, s23, phx_cpu()), *i = phx_tensor_zeros(PHX_I64, 2, s23, phx_cpu());
    phx_scope *s = phx_scope_begin();
    phx_tensor *y = phx_add(a, b);
    const char *e = phx_last_error();
    ok(!y && strstr(e, "(2, 3)") && strstr(e, "(4,)") && strstr(e, "dim 1"),
       "add of (2,3) and (4) is refused naming both shapes and the dim: %s", e);
    y = phx_mul(a, h);
    e = phx_last_error();
    ok(!y && strstr(e, "f32") && strstr(e, "f16"), "mul of f32 and f16 is refused naming both: %s", e);
    y = phx_exp(i);
    ok(!y && strstr(phx_last_error(), "i64"), "exp of an i64 tensor is refused: %s", phx_last_error());
    phx_status st = phx_tensor_set_requires_grad(i, true);
    ok(st == PHX_EINVAL, "requires_grad on an i64 tensor is refused: %s", phx_last_error());
    /* NULL propagation keeps the first error */
    y = phx_relu(phx_exp(phx_add(a, b)));
    e = phx_last_error();
    ok(!y && strstr(e, "add") && strstr(e, "cannot broadcast"), "a chain keeps the first error: %s", e);
    phx_error_clear();
    y = phx_neg(NULL);
    ok(!y && strstr(phx_last_error(), "NULL"), "a NULL operand with no error pending says so: %s", phx_last_error());
    phx_scope_end(s);
    phx_tensor_free(a), phx_tensor_free(b), phx_tensor_free(h), phx_tensor_free(i);
}

int main(void)
{
    gc_ref *r = gc_ref_load("ops_math.txt");
    if (!r) return ok(0, "reference data loads"), done_testing();
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        gc_ref_run(r, cases[i].name, run, (void *)&cases[i], 1e-5, 1e-5, cases[i].cd);
    half_dtypes();
    large();
    where_int_cond();
    relu_nan();
    errors();
    gc_ref_free(r);
    return done_testing();
}
