/* Shape operations: every reference case of t/ref/ops_shape.txt for
 * reshape .. expand (values, gradients against torch and against central
 * differences; t/ops/ref-cases.h), then views sharing storage, copies of
 * other dtypes, and the errors: bad shapes name both shapes and the dim,
 * a reshape's element count names both shapes, a NULL input keeps the
 * first error. */
#include <math.h>
#include "t/ops/ref-cases.h"

static int is_shape_op(const char *op)
{
    static const char *const ops[] = {"reshape",   "flatten", "squeeze", "unsqueeze", "permute",
                                      "transpose", "narrow",  "slice",   "cat",       "stack",
                                      "split",     "chunk",   "expand",  "contiguous"};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        if (!strcmp(op, ops[i])) return 1;
    return 0;
}

static phx_tensor *shape_op(const ref_case *c, phx_tensor **x)
{
    const int64_t *a = c->args;
    const char *op = c->op;
    if (!strcmp(op, "reshape")) return phx_reshape(x[0], (int)a[0], a + 1);
    if (!strcmp(op, "flatten")) return phx_flatten(x[0], (int)a[0], (int)a[1]);
    if (!strcmp(op, "squeeze")) return phx_squeeze(x[0], (int)a[0]);
    if (!strcmp(op, "unsqueeze")) return phx_unsqueeze(x[0], (int)a[0]);
    if (!strcmp(op, "permute")) {
        int p[PHX_MAX_DIMS];
        for (int i = 0; i < a[0]; i++) p[i] = (int)a[1 + i];
        return phx_permute(x[0], (int)a[0], p);
    }
    if (!strcmp(op, "transpose")) return phx_transpose(x[0], (int)a[0], (int)a[1]);
    if (!strcmp(op, "narrow")) return phx_narrow(x[0], (int)a[0], a[1], a[2]);
    if (!strcmp(op, "slice")) return phx_slice(x[0], (int)a[0], a[1], a[2], a[3]);
    if (!strcmp(op, "cat")) return phx_cat(c->n_in, (const phx_tensor *const *)x, (int)a[0]);
    if (!strcmp(op, "stack")) return phx_stack(c->n_in, (const phx_tensor *const *)x, (int)a[0]);
    if (!strcmp(op, "split") || !strcmp(op, "chunk")) {
        phx_tensor *p[16];
        int n = !strcmp(op, "split") ? phx_split(x[0], a[0], (int)a[1], p, 16)
                                     : phx_chunk(x[0], (int)a[0], (int)a[1], p, 16);
        return n > a[2] ? p[a[2]] : NULL;
    }
    if (!strcmp(op, "expand")) return phx_expand(x[0], (int)a[0], a + 1);
    if (!strcmp(op, "contiguous")) return phx_contiguous(x[0]);
    return NULL;
}

static phx_tensor *iota(phx_dtype dt, int ndim, const int64_t *shape)
{
    phx_tensor *t = phx_tensor_new(dt, ndim, shape, phx_cpu());
    for (int64_t i = 0; i < phx_tensor_numel(t); i++) {
        void *p = phx_tensor_data(t);
        if (dt == PHX_I64)
            ((int64_t *)p)[i] = i * 1000003;
        else if (dt == PHX_F32)
            ((float *)p)[i] = (float)i;
        else if (dt == PHX_I32)
            ((int32_t *)p)[i] = (int32_t)(i * 31);
        else
            ((uint16_t *)p)[i] = (uint16_t)(i * 7);
    }
    return t;
}

int main(void)
{
    int cases = ref_run_all(is_shape_op, shape_op);
    ok(cases >= 30, "ran %d shape reference cases", cases);
    phx_scope *s = phx_scope_begin();
    char msg[512];

    /* Views share storage; copies do not. */
    int64_t s234[3] = {2, 3, 4}, s64[2] = {6, 4}, s1x[3] = {1, 3, 4};
    phx_tensor *x = iota(PHX_F32, 3, s234), *x1 = iota(PHX_F32, 3, s1x);
    phx_tensor *r = phx_reshape(x, 2, s64), *u = phx_unsqueeze(x, 1), *q = phx_squeeze(u, 1),
               *n0 = phx_narrow(x, 0, 1, 1), *n1 = phx_narrow(x1, 1, 1, 2), *ni = phx_narrow(x, 1, 1, 2),
               *p = phx_permute(x, 3, (int[]){0, 2, 1});
    ok(phx_tensor_same_storage(r, x) && phx_tensor_same_storage(u, x) && phx_tensor_same_storage(q, x) &&
           phx_tensor_same_storage(n0, x) && phx_tensor_same_storage(n1, x1),
       "reshape, unsqueeze, squeeze and narrows over size-1 leading dims are views");
    ok(n0 && phx_tensor_offset(n0) == 12 && n1 && phx_tensor_offset(n1) == 4,
       "narrow views start at the narrowed element (offsets %lld, %lld)", (long long)phx_tensor_offset(n0),
       (long long)phx_tensor_offset(n1));
    ok(ni && p && !phx_tensor_same_storage(ni, x) && !phx_tensor_same_storage(p, x),
       "an inner narrow and permute are copies");
    ok(phx_contiguous(x) == x, "contiguous returns the tensor itself");

    /* Copies move bytes of every dtype (checked against index arithmetic). */
    const phx_dtype dts[] = {PHX_I64, PHX_BF16, PHX_F16, PHX_I32};
    const int64_t shapes[2][3] = {{2, 3, 4}, {3, 40, 33}}; /* the second takes the tiled path */
    for (int k = 0; k < 8; k++) {
        const int64_t *B = shapes[k / 4];
        phx_tensor *t = iota(dts[k % 4], 3, B), *pt = phx_permute(t, 3, (int[]){2, 0, 1});
        int good = pt != NULL;
        for (int64_t a = 0; good && a < B[2]; a++)
            for (int64_t b = 0; b < B[0]; b++)
                for (int64_t c = 0; c < B[1]; c++) {
                    double got = NAN, want = 0;
                    phx_tensor_get(pt, (a * B[0] + b) * B[1] + c, &got);
                    phx_tensor_get(t, (b * B[1] + c) * B[2] + a, &want);
                    good &= got == want;
                }
        ok(good, "permute (2, 0, 1) of a %s tensor (%lld, %lld, %lld) moves every element", phx_dtype_name(dts[k % 4]),
           (long long)B[0], (long long)B[1], (long long)B[2]);
        phx_tensor_free(t);
    }
    /* A large permute runs split over threads: same values as element by element. */
    int64_t big[2] = {700, 900};
    phx_tensor *bt = iota(PHX_F32, 2, big), *btt = phx_transpose(bt, 0, 1);
    int good = btt != NULL;
    const float *bv = phx_tensor_data(bt), *btv = btt ? phx_tensor_data(btt) : NULL;
    for (int64_t i = 0; good && i < 900; i++)
        for (int64_t j = 0; j < 700; j++) good &= btv[i * 700 + j] == bv[j * 900 + i];
    ok(good, "a 700 x 900 transpose is exact");
    phx_tensor_free(bt);
    /* Large copies of runs (no transpose) split over threads too. */
    int64_t wide[2] = {300, 1000}, row[2] = {1, 1000};
    phx_tensor *wt = iota(PHX_F32, 2, wide), *wn = phx_narrow(wt, 1, 1, 998), *rt = iota(PHX_F32, 2, row),
               *re = phx_expand(rt, 2, (int64_t[]){400, 1000});
    const float *wv = phx_tensor_data(wt), *wnv = wn ? phx_tensor_data(wn) : NULL, *rv = phx_tensor_data(rt),
                *rev = re ? phx_tensor_data(re) : NULL;
    good = wn && re;
    for (int64_t i = 0; good && i < 300; i++)
        for (int64_t j = 0; j < 998; j++) good &= wnv[i * 998 + j] == wv[i * 1000 + j + 1];
    for (int64_t i = 0; good && i < 400; i++)
        for (int64_t j = 0; j < 1000; j++) good &= rev[i * 1000 + j] == rv[j];
    ok(good, "a (300, 1000) inner narrow and a (1, 1000) -> (400, 1000) expand are exact");
    phx_tensor_free(wt);
    phx_tensor_free(rt);

    /* Errors name both shapes and the dim; nothing is returned. */
    int64_t bad[2] = {5, 5}, inf2[2] = {-1, 5};
    ok(!phx_reshape(x, 2, bad) && strstr(phx_last_error(), "(5, 5)") && strstr(phx_last_error(), "(2, 3, 4)"),
       "reshape numel mismatch names both shapes: %s", phx_last_error());
    ok(!phx_reshape(x, 2, inf2) && strstr(phx_last_error(), "(-1, 5)"), "reshape with an impossible -1: %s",
       phx_last_error());
    int64_t e1[2] = {3, 4};
    phx_tensor *y = iota(PHX_F32, 2, e1);
    ok(!phx_cat(2, (const phx_tensor *[]){x, y}, 0) && strstr(phx_last_error(), "(2, 3, 4)") &&
           strstr(phx_last_error(), "(3, 4)"),
       "cat of 3 and 2 dims names both shapes: %s", phx_last_error());
    int64_t s254[3] = {2, 5, 4};
    phx_tensor *z = iota(PHX_F32, 3, s254);
    ok(!phx_cat(2, (const phx_tensor *[]){x, z}, 2) && strstr(phx_last_error(), "dim 1") &&
           strstr(phx_last_error(), "(2, 5, 4)"),
       "cat with a mismatched dim names it: %s", phx_last_error());
    ok(phx_cat(2, (const phx_tensor *[]){x, z}, 1) != NULL, "the same along that dim works");
    ok(!phx_stack(2, (const phx_tensor *[]){x, z}, 0) && strstr(phx_last_error(), "(2, 5, 4)"),
       "stack of two shapes: %s", phx_last_error());
    int64_t ex[3] = {2, 5, 4};
    ok(!phx_expand(x, 3, ex) && strstr(phx_last_error(), "dim 1") && strstr(phx_last_error(), "(2, 5, 4)") &&
           strstr(phx_last_error(), "(2, 3, 4)"),
       "expand of a non-1 dim names the shapes and dim: %s", phx_last_error());
    ok(!phx_narrow(x, 2, 3, 2) && strstr(phx_last_error(), "(2, 3, 4)"), "narrow past the end: %s", phx_last_error());
    ok(!phx_permute(x, 3, (int[]){0, 1, 1}) && strstr(phx_last_error(), "twice"), "permute repeating a dim: %s",
       phx_last_error());
    ok(!phx_transpose(x, 0, 3) && strstr(phx_last_error(), "dim 3"), "transpose of dim 3 of 3: %s", phx_last_error());
    phx_tensor *pieces[2];
    ok(phx_split(x, 1, 2, pieces, 2) == -1 && strstr(phx_last_error(), "4 pieces"), "split with too little room: %s",
       phx_last_error());
    /* messages say what is wrong: a NULL array, the bounds accepted */
    phx_error_clear();
    ok(!phx_cat(2, NULL, 0) && strstr(phx_last_error(), "ts is NULL"), "cat of a NULL array says so: %s",
       phx_last_error());
    phx_error_clear();
    ok(!phx_permute(x, 3, NULL) && strstr(phx_last_error(), "dims is NULL"), "permute with NULL dims says so: %s",
       phx_last_error());
    ok(phx_split(x, 1, 2, NULL, 4) == -1 && strstr(phx_last_error(), "out is NULL"),
       "split into a NULL out says so: %s", phx_last_error());
    ok(!phx_narrow(x, 0, 5, 1) && strstr(phx_last_error(), "expected -2 <= start <= 2"),
       "narrow's start error gives the range accepted, negatives included: %s", phx_last_error());
    ok(!phx_narrow(x, 2, -3, 4) && strstr(phx_last_error(), "length 4 from start -3") &&
           strstr(phx_last_error(), "0 <= length <= 3"),
       "narrow's length error gives the room left after start: %s", phx_last_error());
    phx_tensor *n3 = phx_narrow(x, 2, -3, 3);
    ok(n3 && phx_tensor_dim(n3, 2) == 3, "narrow from start -3 of 4, length 3, is accepted (torch)");
    phx_tensor *s0 = phx_tensor_zeros(PHX_F32, 0, NULL, phx_cpu());
    ok(!phx_transpose(s0, 0, 0) && strstr(phx_last_error(), "0-dim tensor, which has no dims"),
       "a dim of a 0-dim tensor where none is taken: %s", phx_last_error());
    phx_tensor_free(s0);
    phx_tensor *pc[4];
    ok(phx_chunk(x, 3, 2, pc, 4) == 2 && phx_tensor_dim(pc[1], 2) == 2, "chunk(3) of 4 gives 2 pieces of 2 (torch)");
    phx_tensor *empty = phx_tensor_zeros(PHX_F32, 2, (int64_t[]){0, 2}, phx_cpu());
    ok(phx_chunk(empty, 3, 0, pc, 4) == 3 && phx_tensor_numel(pc[2]) == 0 && phx_split(empty, 2, 0, pc, 4) == 1,
       "a dim of size 0: chunk(3) gives 3 empty pieces, split 1 (torch)");
    phx_tensor_free(empty);

    /* NULL propagation keeps the first error. */
    phx_tensor *chain = phx_transpose(phx_reshape(phx_narrow(x, 0, 5, 1), 1, (int64_t[]){-1}), 0, 0);
    snprintf(msg, sizeof msg, "%s", phx_last_error());
    ok(!chain && strstr(msg, "phx_narrow"), "a failed narrow's message survives reshape and transpose: %s", msg);
    phx_tensor *cats = phx_cat(2, (const phx_tensor *[]){x, phx_expand(x, 2, e1)}, 0);
    ok(!cats && strstr(phx_last_error(), "phx_expand"), "cat keeps its NULL input's error: %s", phx_last_error());

    /* A permuted, expanded input through several ops still gets its gradient. */
    int64_t s13[2] = {1, 3};
    phx_tensor *v = iota(PHX_F32, 2, s13);
    phx_tensor_set_requires_grad(v, true);
    phx_tensor *e = phx_expand(phx_transpose(v, 0, 1), 2, (int64_t[]){3, 2});
    phx_tensor *ones = phx_full(2, (int64_t[]){3, 2}, 1.0, PHX_F32, phx_cpu());
    ok(e && phx_backward_with(e, ones) == PHX_OK && phx_tensor_grad(v) &&
           phx_tensor_get(phx_tensor_grad(v), 2, &(double){0}) == PHX_OK,
       "expand(transpose(v)) backward runs: %s", phx_last_error());
    double g2 = 0;
    phx_tensor_get(phx_tensor_grad(v), 2, &g2);
    ok(g2 == 2.0, "each element of v is used twice: gradient 2 (%g)", g2);

    phx_scope_end(s);

    /* Steady state: a step of shape and index ops, forward and backward,
     * allocates nothing once warm. (No intermediate is used twice here:
     * the engine's sum of two gradients of one node allocates a tensor.) */
    phx_tensor *leaf = iota(PHX_F32, 3, s234);
    phx_tensor_set_requires_grad(leaf, true);
    phx_tensor *sel = phx_tensor_from_data(PHX_I64, 1, (int64_t[]){2}, (int64_t[]){2, 0});
    uint64_t before = 0;
    int failed = 0;
    for (int step = 0; step < 6 && !failed; step++) {
        if (step == 3) before = phx_alloc_count();
        phx_scope *st = phx_scope_begin();
        phx_tensor *a = phx_permute(leaf, 3, (int[]){2, 0, 1});
        phx_tensor *b = phx_narrow(phx_reshape(a, 2, (int64_t[]){4, 6}), 1, 1, 3);
        phx_tensor *e = phx_expand(phx_narrow(leaf, 0, 0, 1), 3, (int64_t[]){2, 3, 4});
        phx_tensor *c =
            phx_cat(2, (const phx_tensor *[]){b, phx_flatten(phx_permute(e, 3, (int[]){0, 2, 1}), 0, 1)}, 0);
        phx_tensor *k = phx_full(2, (int64_t[]){12, 3}, 2.0, PHX_F32, phx_cpu());
        phx_tensor *d = phx_index_select(phx_stack(2, (const phx_tensor *[]){c, k}, 0), 1, sel);
        phx_tensor *gd = d ? phx_full(phx_tensor_ndim(d), phx_tensor_shape(d), 1.0, PHX_F32, phx_cpu()) : NULL;
        failed = !d || phx_tensor_zero_grad(leaf) != PHX_OK || phx_backward_with(d, gd) != PHX_OK;
        phx_scope_end(st);
    }
    uint64_t after = phx_alloc_count();
    ok(!failed, "6 steps of permute/reshape/narrow/expand/cat/stack/index_select run: %s",
       failed ? phx_last_error() : "");
    ok(after == before, "steps 4-6 allocate nothing (%llu allocations)", (unsigned long long)(after - before));
    phx_tensor_free(leaf);
    phx_tensor_free(sel);
    phx_tensor_free(x);
    phx_tensor_free(x1);
    phx_tensor_free(y);
    phx_tensor_free(z);
    phx_tensor_free(v);
    return done_testing();
}
