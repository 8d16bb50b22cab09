/* torch.matmul's cases (dot, vector-matrix, matrix-vector, matrix,
 * batched, batch broadcasting both ways, the folded Linear case): values
 * and gradients against PyTorch 1.13 (t/ref/ops_math.txt) and central
 * differences; bf16; empty operands; errors. */
#include "t/ops/gradcheck.h"

static phx_tensor *run(void *ctx, int k, phx_tensor *const *in)
{
    (void)ctx, (void)k;
    return phx_matmul(in[0], in[1]);
}

static const char *const cases[] = {"matmul_dot",         "matmul_vecmat",     "matmul_matvec",   "matmul_mm",
                                    "matmul_bmm",         "matmul_bcast",      "matmul_fold",     "matmul_vec_batched",
                                    "matmul_batched_vec", "matmul_bcast_left", "matmul_bcast_one"};

/* A composite: attention-like softmax(q kt / 2) v + bias through relu,
 * every operand's gradient by central differences. */
static phx_tensor *attn(void *ctx, int k, phx_tensor *const *in)
{
    (void)ctx, (void)k;
    phx_tensor *s = phx_softmax(phx_mul_scalar(phx_matmul(in[0], in[1]), 0.5), -1);
    return phx_relu(phx_add(phx_matmul(s, in[2]), in[3]));
}

static void composite(void)
{
    int64_t sq[3] = {2, 3, 4}, sk[3] = {2, 4, 3}, sv[3] = {1, 3, 5}, sb[1] = {5};
    phx_rng *rng = phx_rng_new(12);
    phx_tensor *in[4] = {phx_tensor_new(PHX_F32, 3, sq, phx_cpu()), phx_tensor_new(PHX_F32, 3, sk, phx_cpu()),
                         phx_tensor_new(PHX_F32, 3, sv, phx_cpu()), phx_tensor_new(PHX_F32, 1, sb, phx_cpu())};
    for (int i = 0; i < 4; i++) phx_rng_normal(rng, in[i], 0, 1);
    gc_check("relu(softmax(q kt / 2) v + b)", attn, NULL, 4, in, gc_default());
    for (int i = 0; i < 4; i++) phx_tensor_free(in[i]);
    phx_rng_free(rng);
}

static void bf16(void)
{
    int64_t sa[3] = {2, 3, 8}, sb[2] = {8, 5};
    phx_rng *rng = phx_rng_new(7);
    phx_tensor *a = phx_tensor_new(PHX_F32, 3, sa, phx_cpu()), *b = phx_tensor_new(PHX_F32, 2, sb, phx_cpu());
    phx_rng_normal(rng, a, 0, 1), phx_rng_normal(rng, b, 0, 1);
    phx_tensor *ah = phx_tensor_new(PHX_BF16, 3, sa, phx_cpu()), *bh = phx_tensor_new(PHX_BF16, 2, sb, phx_cpu());
    phx_tensor_cast(ah, a), phx_tensor_cast(bh, b);
    phx_tensor_cast(a, ah), phx_tensor_cast(b, bh); /* the same values in f32 */
    phx_scope *s = phx_scope_begin();
    phx_tensor *yh = phx_matmul(ah, bh), *y = phx_matmul(a, b);
    double worst = yh ? 0 : 1;
    for (int64_t i = 0; yh && y && i < phx_tensor_numel(y); i++) {
        double u, v;
        phx_tensor_get(yh, i, &u), phx_tensor_get(y, i, &v);
        worst = fmax(worst, fabs(u - v) / (1 + fabs(v)));
    }
    ok(yh && phx_tensor_dtype(yh) == PHX_BF16 && worst < 1e-2,
       "bf16 matmul: bf16 result within bf16 rounding of "
       "f32 (%g)",
       worst);
    /* backward in bf16: gradients of sum(relu(a b + c) * w) as f32's */
    int64_t sc[1] = {5};
    phx_tensor *c = phx_tensor_new(PHX_F32, 1, sc, phx_cpu()), *ch = phx_tensor_new(PHX_BF16, 1, sc, phx_cpu());
    phx_rng_normal(rng, c, 0, 1), phx_tensor_cast(ch, c), phx_tensor_cast(c, ch);
    phx_tensor *wt = phx_tensor_new(PHX_F32, 3, (int64_t[]){2, 3, 5}, phx_cpu());
    phx_tensor *wh = phx_tensor_new(PHX_BF16, 3, (int64_t[]){2, 3, 5}, phx_cpu());
    phx_rng_normal(rng, wt, 0, 1), phx_tensor_cast(wh, wt), phx_tensor_cast(wt, wh);
    phx_tensor *leaves[2][3] = {{a, b, c}, {ah, bh, ch}};
    for (int v = 0; v < 2; v++)
        for (int i = 0; i < 3; i++) phx_tensor_set_requires_grad(leaves[v][i], true);
    phx_status st = phx_backward_with(phx_relu(phx_add(phx_matmul(a, b), c)), wt);
    phx_status sth = phx_backward_with(phx_relu(phx_add(phx_matmul(ah, bh), ch)), wh);
    double gworst = st || sth ? 1 : 0;
    int dt_ok = 1;
    for (int i = 0; !gworst && i < 3; i++) {
        const phx_tensor *g = phx_tensor_grad(leaves[0][i]), *gh = phx_tensor_grad(leaves[1][i]);
        dt_ok &= gh && phx_tensor_dtype(gh) == PHX_BF16;
        for (int64_t j = 0; g && gh && j < phx_tensor_numel(g); j++) {
            double u, v;
            phx_tensor_get(gh, j, &u), phx_tensor_get(g, j, &v);
            gworst = fmax(gworst, fabs(u - v) / (1 + fabs(v)));
        }
    }
    ok(dt_ok && gworst < 3e-2,
       "bf16 backward through matmul, add, relu: bf16 gradients within bf16 rounding of f32 "
       "(%g)",
       gworst);
    phx_scope_end(s);
    phx_tensor_free(c), phx_tensor_free(ch), phx_tensor_free(wt), phx_tensor_free(wh);
    phx_tensor_free(a), phx_tensor_free(b), phx_tensor_free(ah), phx_tensor_free(bh);
    phx_rng_free(rng);
}

/* Steady state: a step of these ops, forward and backward, allocates
 * nothing once warm (results and gradients come from the storage cache).
 * No intermediate is used twice and the output gradient is given: the
 * engine's sum of two gradients of one tensor and phx_backward's seed
 * allocate. */
static void steady_state(void)
{
    int64_t sx[2] = {6, 5}, sw[2] = {5, 4}, sb[1] = {4}, st[1] = {6};
    phx_rng *rng = phx_rng_new(8);
    phx_tensor *x = phx_tensor_new(PHX_F32, 2, sx, phx_cpu()), *w = phx_tensor_new(PHX_F32, 2, sw, phx_cpu());
    phx_tensor *b = phx_tensor_new(PHX_F32, 1, sb, phx_cpu()), *one = phx_tensor_new(PHX_F32, 0, NULL, phx_cpu());
    phx_tensor *t = phx_tensor_from_data(PHX_I64, 1, st, (int64_t[]){0, 1, 2, 3, 0, 1});
    phx_rng_normal(rng, x, 0, 1), phx_rng_normal(rng, w, 0, 1), phx_rng_normal(rng, b, 0, 1);
    phx_tensor_fill(one, 1.0);
    phx_tensor_set_requires_grad(w, true), phx_tensor_set_requires_grad(b, true);
    uint64_t before = 0;
    int failed = 0;
    for (int step = 0; step < 6 && !failed; step++) {
        if (step == 3) before = phx_alloc_count();
        phx_scope *s = phx_scope_begin();
        int d0 = 0;
        phx_tensor *h = phx_softmax(phx_mul_scalar(phx_relu(phx_add(phx_matmul(x, w), b)), 2.0), 1);
        phx_tensor *m = phx_max_dim(phx_log_softmax(phx_exp(h), 0), 1, true, NULL);
        phx_tensor *l = phx_mean(phx_sum(phx_sqrt(phx_add_scalar(phx_abs(m), 1.0)), 1, &d0, false), 0, NULL, false);
        failed = !l || phx_tensor_zero_grad(w) != PHX_OK || phx_tensor_zero_grad(b) != PHX_OK ||
            phx_backward_with(l, one) != PHX_OK;
        phx_tensor *ce = failed ? NULL : phx_cross_entropy(phx_add(phx_matmul(x, w), b), t);
        failed = failed || !ce || phx_backward_with(ce, one) != PHX_OK;
        phx_scope_end(s);
    }
    uint64_t after = phx_alloc_count();
    ok(!failed, "6 steps of matmul/add/relu/softmax/max_dim/mean/cross_entropy run: %s",
       failed ? phx_last_error() : "");
    ok(after == before, "steps 4-6 allocate nothing (%llu allocations)", (unsigned long long)(after - before));
    phx_tensor_free(x), phx_tensor_free(w), phx_tensor_free(b), phx_tensor_free(one), phx_tensor_free(t);
    phx_rng_free(rng);
}

/* An empty contracted dim gives zeros, an empty outer dim an empty
 * result, as torch.matmul (shapes from PyTorch 1.13); the gradients have
 * the operands' shapes and are zero. Every gemm route: one call (2-D, and
 * a batch folded into rows), batched, per batch entry (broadcast). */
static void empty(void)
{
    static const struct {
        int na, nb;
        int64_t a[4], b[4];
        const char *want;
    } cs[] = {
        {2, 2, {2, 0}, {0, 3}, "(2, 3)"},
        {2, 2, {2, 3}, {3, 0}, "(2, 0)"},
        {1, 1, {0}, {0}, "()"},
        {2, 1, {2, 0}, {0}, "(2,)"},
        {1, 2, {0}, {0, 3}, "(3,)"},
        {3, 3, {2, 2, 0}, {2, 0, 3}, "(2, 2, 3)"},
        {3, 2, {2, 2, 0}, {0, 3}, "(2, 2, 3)"},
        {3, 2, {2, 2, 3}, {3, 0}, "(2, 2, 0)"},
        {4, 3, {2, 1, 2, 0}, {3, 0, 4}, "(2, 3, 2, 4)"},
    };
    phx_dtype dts[2] = {PHX_F32, PHX_BF16};
    for (int d = 0; d < 2; d++)
        for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
            phx_scope *s = phx_scope_begin();
            phx_tensor *a = phx_full(cs[i].na, cs[i].a, 1.0, dts[d], phx_cpu());
            phx_tensor *b = phx_full(cs[i].nb, cs[i].b, 1.0, dts[d], phx_cpu());
            phx_tensor_set_requires_grad(a, true), phx_tensor_set_requires_grad(b, true);
            char sa[64] = "", sb[64] = "", sc[64] = "?", ga[64] = "?", gb[64] = "?";
            phx_tensor_shape_str(a, sa, sizeof sa), phx_tensor_shape_str(b, sb, sizeof sb);
            phx_tensor *c = phx_matmul(a, b);
            const char *err = c ? "" : phx_last_error();
            int zero = c != NULL;
            for (int64_t j = 0; c && j < phx_tensor_numel(c); j++) {
                double v = 1;
                phx_tensor_get(c, j, &v);
                zero &= v == 0;
            }
            phx_status st = c ? phx_backward(phx_sum(c, 0, NULL, false)) : PHX_EINVAL;
            phx_tensor *gra = phx_tensor_grad(a), *grb = phx_tensor_grad(b);
            int gzero = st == PHX_OK && gra && grb;
            for (int64_t j = 0; gzero && j < phx_tensor_numel(gra); j++) {
                double v = 1;
                phx_tensor_get(gra, j, &v);
                gzero &= v == 0;
            }
            for (int64_t j = 0; gzero && j < phx_tensor_numel(grb); j++) {
                double v = 1;
                phx_tensor_get(grb, j, &v);
                gzero &= v == 0;
            }
            if (c) phx_tensor_shape_str(c, sc, sizeof sc);
            if (gra) phx_tensor_shape_str(gra, ga, sizeof ga);
            if (grb) phx_tensor_shape_str(grb, gb, sizeof gb);
            ok(c && !strcmp(sc, cs[i].want) && zero, "%s %s @ %s: zeros of shape %s (got %s%s)", phx_dtype_name(dts[d]),
               sa, sb, cs[i].want, sc, err);
            ok(gzero && !strcmp(ga, sa) && !strcmp(gb, sb),
               "%s %s @ %s: zero gradients of shapes %s and %s (got %s, %s)", phx_dtype_name(dts[d]), sa, sb, sa, sb,
               ga, gb);
            phx_scope_end(s);
        }
}

static void errors(void)
{
    int64_t s23[2] = {2, 3}, s43[2] = {4, 3}, b1[3] = {2, 2, 3}, b2[3] = {3, 3, 4}, s34[2] = {3, 4};
    phx_tensor *a = phx_tensor_zeros(PHX_F32, 2, s23, phx_cpu()), *b = phx_tensor_zeros(PHX_F32, 2, s43, phx_cpu());
    phx_tensor *x = phx_tensor_zeros(PHX_F32, 3, b1, phx_cpu()), *y = phx_tensor_zeros(PHX_F32, 3, b2, phx_cpu());
    phx_tensor *h = phx_tensor_zeros(PHX_F16, 2, s34, phx_cpu());
    phx_scope *s = phx_scope_begin();
    ok(!phx_matmul(a, b) && strstr(phx_last_error(), "(2, 3)") && strstr(phx_last_error(), "(4, 3)"),
       "(2,3) @ (4,3) is refused naming both shapes: %s", phx_last_error());
    ok(!phx_matmul(x, y) && strstr(phx_last_error(), "batch dim 0"), "batch 2 vs 3 is refused: %s", phx_last_error());
    ok(!phx_matmul(a, h) && strstr(phx_last_error(), "f16"), "f32 @ f16 is refused: %s", phx_last_error());
    phx_scope_end(s);
    phx_tensor_free(a), phx_tensor_free(b), phx_tensor_free(x), phx_tensor_free(y), phx_tensor_free(h);
}

int main(void)
{
    gc_ref *r = gc_ref_load("ops_math.txt");
    if (!r) return ok(0, "reference data loads"), done_testing();
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) gc_ref_run(r, cases[i], run, NULL, 1e-5, 1e-5, 1);
    composite();
    bf16();
    steady_state();
    empty();
    errors();
    gc_ref_free(r);
    return done_testing();
}
