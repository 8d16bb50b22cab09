/* Indexing: the reference cases of t/ref/ops_shape.txt for index_select,
 * gather, scatter_add and one_hot (t/ops/ref-cases.h), then repeated
 * indices, indices out of range (named with the bound, nothing written)
 * and argument errors. */
#include "t/ops/ref-cases.h"

static int is_index_op(const char *op)
{
    return !strcmp(op, "index_select") || !strcmp(op, "gather") || !strcmp(op, "scatter_add") || !strcmp(op, "one_hot");
}

static phx_tensor *index_op(const ref_case *c, phx_tensor **x)
{
    int d = (int)c->args[0];
    if (!strcmp(c->op, "index_select")) return phx_index_select(x[0], d, x[1]);
    if (!strcmp(c->op, "gather")) return phx_gather(x[0], d, x[1]);
    if (!strcmp(c->op, "scatter_add")) return phx_scatter_add(x[0], d, x[1], x[2]);
    if (!strcmp(c->op, "one_hot")) return phx_one_hot(x[0], c->args[0]);
    return NULL;
}

int main(void)
{
    int cases = ref_run_all(is_index_op, index_op);
    ok(cases >= 9, "ran %d index reference cases", cases);
    phx_scope *s = phx_scope_begin();
    int64_t s43[2] = {4, 3}, s3[1] = {3}, s23[2] = {2, 3};
    float xv[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    phx_tensor *x = phx_tensor_from_data(PHX_F32, 2, s43, xv);
    phx_tensor *bad = phx_tensor_from_data(PHX_I64, 1, s3, (int64_t[]){0, 4, 1});
    phx_tensor *neg = phx_tensor_from_data(PHX_I64, 1, s3, (int64_t[]){0, -1, 1});
    ok(!phx_index_select(x, 0, bad) && strstr(phx_last_error(), "index 4") && strstr(phx_last_error(), "size 4") &&
           strstr(phx_last_error(), "phx_index_select"),
       "index_select: an index past the end names it and the bound: %s", phx_last_error());
    ok(!phx_index_select(x, 0, neg) && strstr(phx_last_error(), "index -1"), "a negative index too: %s",
       phx_last_error());
    phx_tensor *gi = phx_tensor_from_data(PHX_I64, 2, s43, (int64_t[]){0, 1, 2, 2, 1, 0, 0, 0, 3, 1, 1, 1});
    ok(!phx_gather(x, 1, gi) && strstr(phx_last_error(), "index 3") && strstr(phx_last_error(), "size 3"),
       "gather: index 3 along a dim of 3: %s", phx_last_error());
    phx_tensor *src = phx_full(2, s43, 1.0, PHX_F32, phx_cpu());
    ok(!phx_scatter_add(x, 1, gi, src) && strstr(phx_last_error(), "index 3"), "scatter_add: the same: %s",
       phx_last_error());
    float after[12];
    phx_tensor_to_host(x, after);
    ok(!memcmp(after, xv, sizeof xv), "the failed scatter_add left t unchanged");
    phx_tensor *fidx = phx_full(1, s3, 1.0, PHX_F32, phx_cpu());
    ok(!phx_index_select(x, 0, fidx) && strstr(phx_last_error(), "expected i64"), "float indices: %s",
       phx_last_error());
    phx_tensor *i23 = phx_tensor_from_data(PHX_I64, 2, s23, (int64_t[]){0, 1, 2, 0, 1, 2});
    phx_tensor *gg = phx_gather(x, 0, i23);
    double g01 = 0;
    ok(gg && phx_tensor_get(gg, 1, &g01) == PHX_OK && g01 == 4.0,
       "gather with idx (2, 3) along dim 0 of (4, 3) picks rows per column (%g): %s", g01, gg ? "" : phx_last_error());
    phx_tensor *i22 = phx_tensor_from_data(PHX_I64, 2, (int64_t[]){2, 2}, (int64_t[]){0, 1, 2, 0});
    ok(!phx_gather(x, 0, i22) && strstr(phx_last_error(), "(4, 3)") && strstr(phx_last_error(), "(2, 2)") &&
           strstr(phx_last_error(), "dim 1"),
       "gather with idx differing off the dim names both shapes and the dim: %s", phx_last_error());
    ok(!phx_one_hot(bad, 3) && strstr(phx_last_error(), "index 4") && strstr(phx_last_error(), "3 classes"),
       "one_hot out of range: %s", phx_last_error());

    /* Repeated indices accumulate: index_select of row 1 three times,
     * backward of ones gives 3 on row 1. */
    phx_tensor_set_requires_grad(x, true);
    phx_tensor *rep = phx_tensor_from_data(PHX_I64, 1, s3, (int64_t[]){1, 1, 1});
    phx_tensor *y = phx_index_select(x, 0, rep);
    phx_tensor *ones = phx_full(2, (int64_t[]){3, 3}, 1.0, PHX_F32, phx_cpu());
    ok(y && phx_backward_with(y, ones) == PHX_OK, "index_select backward runs: %s", phx_last_error());
    double g[12] = {0};
    for (int i = 0; i < 12; i++) phx_tensor_get(phx_tensor_grad(x), i, &g[i]);
    ok(g[3] == 3 && g[4] == 3 && g[5] == 3 && g[0] == 0 && g[11] == 0, "row 1 gets 3, others 0 (%g %g)", g[3], g[0]);
    ok(phx_tensor_grad_fn(y) && !strcmp(phx_tensor_grad_fn(y), "index_select"), "grad_fn is index_select");

    /* A large gather (split over threads) against host indexing. */
    int64_t big[2] = {500, 600};
    float *bx = malloc(500 * 600 * sizeof *bx);
    int64_t *bi = malloc(500 * 600 * sizeof *bi);
    for (int64_t i = 0; i < 500 * 600; i++) bx[i] = (float)i, bi[i] = (i * 7 + i / 600) % 600;
    phx_tensor *bxt = phx_tensor_from_data(PHX_F32, 2, big, bx), *bit = phx_tensor_from_data(PHX_I64, 2, big, bi);
    phx_tensor *bg = phx_gather(bxt, 1, bit);
    const float *bgv = bg ? phx_tensor_data(bg) : NULL;
    int same = bg != NULL;
    for (int64_t r = 0; same && r < 500; r++)
        for (int64_t c = 0; c < 600; c++) same &= bgv[r * 600 + c] == bx[r * 600 + bi[r * 600 + c]];
    ok(same, "a (500, 600) gather along dim 1 equals host indexing");
    phx_tensor_free(bxt);
    phx_tensor_free(bit);
    free(bx);
    free(bi);

    /* The saved index changed in place before backward: refused, naming it. */
    phx_tensor *idx2 = phx_tensor_from_data(PHX_I64, 1, s3, (int64_t[]){0, 2, 3});
    phx_tensor *y2 = phx_index_select(x, 0, idx2);
    phx_tensor_fill(idx2, 1.0);
    ok(y2 && phx_backward_with(y2, ones) == PHX_ESTATE && strstr(phx_last_error(), "index_select") &&
           strstr(phx_last_error(), "in-place"),
       "an index modified after index_select: %s", phx_last_error());
    phx_tensor_free(idx2);

    /* bf16 gather/scatter_add run in f32 and round once. */
    phx_tensor *xb = phx_tensor_new(PHX_BF16, 2, s43, phx_cpu());
    phx_tensor_cast(xb, x);
    phx_tensor *gb = phx_gather(xb, 0, i23);
    double v = 0;
    int got = gb && phx_tensor_get(gb, 4, &v) == PHX_OK;
    ok(got && v == 4.0, "bf16 gather picks x[1][1] = 4 (%g)", v);

    /* bf16 gradients: index_add and scatter_add round once per store. */
    phx_tensor_set_requires_grad(xb, true);
    phx_tensor *yb = phx_gather(xb, 0, i23);
    phx_tensor *gy = phx_full(2, s23, 0.5, PHX_BF16, phx_cpu());
    double gb0 = -1, gb3 = -1;
    int ran = yb && phx_backward_with(yb, gy) == PHX_OK && phx_tensor_grad(xb) &&
        phx_tensor_dtype(phx_tensor_grad(xb)) == PHX_BF16;
    if (ran) phx_tensor_get(phx_tensor_grad(xb), 0, &gb0), phx_tensor_get(phx_tensor_grad(xb), 3, &gb3);
    /* Both rows of i23 pick the diagonal x[0][0], x[1][1], x[2][2]: each
     * gets 0.5 twice, x[1][0] nothing. */
    ok(ran && gb0 == 1.0 && gb3 == 0.0, "bf16 gather backward: x[0][0] gets 1, x[1][0] 0 (%g, %g)%s", gb0, gb3,
       ran ? "" : phx_last_error());
    phx_scope_end(s);
    phx_tensor_free(x);
    phx_tensor_free(bad);
    phx_tensor_free(neg);
    phx_tensor_free(gi);
    phx_tensor_free(i23);
    phx_tensor_free(i22);
    phx_tensor_free(rep);
    phx_tensor_free(xb);
    return done_testing();
}
