/* Autograd refuses what cannot be differentiated, names the op and what
 * was expected, and changes nothing: a saved tensor modified in place, a
 * second backward, requires_grad on an integer tensor, a non-
 * differentiable op on the path, a backward of a tensor with no history,
 * an implicit gradient of many elements, a gradient of the wrong shape,
 * broadcasting that cannot work, mixed dtypes, a module with a
 * hand-written backward twice in one graph. */
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

static phx_tensor *leaf(int64_t r, int64_t c, double v)
{
    int64_t s[2] = {r, c};
    phx_tensor *t = phx_tensor_new(PHX_F32, 2, s, phx_cpu());
    phx_tensor_fill(t, v);
    phx_tensor_set_requires_grad(t, true);
    return t;
}

static int says(const char *a, const char *b)
{
    const char *e = phx_last_error();
    return strstr(e, a) && (!b || strstr(e, b));
}

/* P: a hand-written container of children a and b whose forward uses a only */
typedef struct pair {
    phx_module *a, *b;
} pair;
static phx_status p_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    return phx_module_forward(((pair *)phx_module_ctx(self))->a, x, y);
}
static phx_status p_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    return phx_module_backward(((pair *)phx_module_ctx(self))->a, dy, dx);
}
static void no_free(phx_module *m)
{
    (void)m;
}
static const phx_module_vtable p_vt = {.struct_size = PHX_MODULE_VTABLE_SIZE,
                                       .type_name = "P",
                                       .forward = p_forward,
                                       .backward = p_backward,
                                       .free = no_free};
/* F: a forward-only module around its one child */
static phx_status f_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    return phx_module_forward(phx_module_child(self, 0), x, y);
}
static const phx_module_vtable f_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE, .type_name = "F", .forward = f_forward, .free = no_free};

static double grad0(phx_module *m)
{
    double d = 0;
    phx_tensor_get(phx_param_grad(phx_module_param(m, 0)), 0, &d);
    return d;
}

int main(void)
{
    plan(19);
    phx_scope *sc = phx_scope_begin();
    phx_tensor *a = leaf(2, 3, 2.0), *b = leaf(2, 3, 3.0);

    /* 1. in place after save */
    phx_tensor *c = phx_mul(a, b);
    phx_tensor_fill(b, 1.0);
    phx_status st = phx_backward(phx_sum(c, 0, NULL, false));
    ok(st == PHX_ESTATE && says("mul", "in-place"), "a tensor saved by mul then changed in place: %s",
       phx_last_error());
    ok(phx_tensor_grad(a) == NULL || phx_tensor_numel(phx_tensor_grad(a)) == 6,
       "a's gradient was not given a wrong value");

    /* 2. second backward */
    phx_tensor *d = phx_sum(phx_mul(a, a), 0, NULL, false);
    phx_status s1 = phx_backward(d), s2 = phx_backward(d);
    ok(s1 == PHX_OK && s2 == PHX_ESTATE && says("freed", "retain"), "a second backward: %s", phx_last_error());

    /* 3. integer requires_grad */
    int64_t n = 4;
    phx_tensor *ix = phx_tensor_zeros(PHX_I64, 1, &n, phx_cpu());
    ok(phx_tensor_set_requires_grad(ix, true) == PHX_EINVAL && says("i64", "f32"), "requires_grad on an i64 tensor: %s",
       phx_last_error());
    ok(!phx_tensor_requires_grad(ix), "and the tensor is unchanged");

    /* 4. non-differentiable op on the path */
    phx_tensor *m = phx_to_dtype(phx_argmax(a, 1, false), PHX_F32);
    st = phx_backward(phx_sum(m, 0, NULL, false));
    ok(st == PHX_EINVAL && says("argmax", "not differentiable"), "argmax on the path to the loss: %s",
       phx_last_error());

    /* 5. no history */
    phx_tensor *plain = phx_tensor_zeros(PHX_F32, 1, &n, phx_cpu());
    ok(phx_backward(plain) == PHX_EINVAL && says("does not require a gradient", NULL), "a plain tensor: %s",
       phx_last_error());

    /* 6. implicit gradient of many elements; 7. wrong gradient shape */
    phx_tensor *e = phx_mul(a, b);
    ok(phx_backward(e) == PHX_EINVAL && says("6 elements", "phx_backward_with"), "backward of a (2, 3) tensor: %s",
       phx_last_error());
    phx_tensor *g = phx_tensor_zeros(PHX_F32, 1, &n, phx_cpu());
    ok(phx_backward_with(e, g) == PHX_EINVAL && says("(4,)", "(2, 3)"), "a (4,) gradient for (2, 3): %s",
       phx_last_error());

    /* 8. broadcasting; 9. dtypes */
    phx_tensor *f = leaf(4, 2, 1.0);
    ok(!phx_add(a, f) && says("(2, 3)", "(4, 2)"), "(2, 3) + (4, 2): %s", phx_last_error());
    int64_t s23[2] = {2, 3};
    phx_tensor *h = phx_tensor_zeros(PHX_BF16, 2, s23, phx_cpu());
    ok(!phx_add(a, h) && says("f32", "bf16"), "f32 + bf16: %s", phx_last_error());
    /* 10. class indices compared as PyTorch's (argmax == y): the message says how */
    phx_tensor *idx = phx_argmax(a, 1, false), *lab = phx_tensor_zeros(PHX_I64, 1, (int64_t[]){2}, phx_cpu());
    ok(idx && !phx_eq(idx, lab) && says("i64", "phx_to_dtype converts"), "argmax == labels (i64): %s",
       phx_last_error());
    phx_tensor_free(lab);

    /* 11. a second phx_module_backward of one forward: refused (it would add the gradients again) */
    phx_module *lin = phx_linear_new(3, 2, true, NULL);
    phx_tensor *lx = leaf(4, 3, 1.0), *ly = NULL, *ldy = leaf(4, 2, 1.0);
    float gb1[2] = {0}, gb2[2] = {1, 1};
    phx_tensor *bg = phx_param_grad(phx_module_find_param(lin, "bias"));
    phx_status b1 = phx_module_forward(lin, lx, &ly);
    if (b1 == PHX_OK) b1 = phx_module_backward(lin, ldy, NULL);
    phx_tensor_to_host(bg, gb1);
    phx_status b2 = phx_module_backward(lin, ldy, NULL);
    phx_tensor_to_host(bg, gb2);
    ok(b1 == PHX_OK && b2 == PHX_ESTATE && says("Linear", "forward again") && !memcmp(gb1, gb2, sizeof gb1),
       "a second phx_module_backward of one forward: refused, the gradients as they were: %s", phx_last_error());
    phx_status b3 = phx_module_forward(lin, lx, &ly);
    if (b3 == PHX_OK) b3 = phx_module_backward(lin, ldy, NULL);
    ok(b3 == PHX_OK, "after the next forward it runs (%s)", b3 ? phx_last_error() : "ok");
    phx_module_free(lin);
    phx_tensor_free(lx), phx_tensor_free(ldy);

    /* 12. a module with a hand-written backward called twice in one graph
     * (lin(tanh(lin(x)))): refused before any node ran, so neither the
     * outer call's gradients nor x's are half added */
    phx_module *sq = phx_linear_new(3, 3, true, NULL);
    phx_tensor *sx = leaf(2, 3, 0.5), *q1 = NULL, *q2 = NULL;
    phx_tensor *wg = phx_param_grad(phx_module_find_param(sq, "weight"));
    phx_tensor *sbg = phx_param_grad(phx_module_find_param(sq, "bias"));
    float w0[9], w1[9], sb0[3], sb1[3];
    phx_tensor_to_host(wg, w0), phx_tensor_to_host(sbg, sb0);
    phx_status t1 = phx_module_forward(sq, sx, &q1);
    phx_tensor *mid = t1 == PHX_OK ? phx_tanh(q1) : NULL;
    phx_status t2 = mid ? phx_module_forward(sq, mid, &q2) : PHX_EINVAL;
    phx_status tb = t2 == PHX_OK ? phx_backward(phx_sum(q2, 0, NULL, false)) : PHX_EINVAL;
    ok(tb == PHX_ESTATE && says("Linear", "ran forward again after the call this graph recorded"),
       "one Linear twice in one graph: %s", phx_last_error());
    phx_tensor_to_host(wg, w1), phx_tensor_to_host(sbg, sb1);
    ok(!memcmp(w0, w1, sizeof w0) && !memcmp(sb0, sb1, sizeof sb0) && !phx_tensor_grad(sx),
       "and nothing changed: the outer call's weight and bias gradients as before, no gradient for x");
    phx_module_free(sq);
    phx_tensor_free(sx);

    /* 13. the user's phx_module_backward of a container's child, then
     * phx_backward through the container: the child's gradients would be
     * added twice; refused, nothing changed */
    phx_module *seq = phx_sequential_new(), *child = phx_linear_new(3, 2, true, NULL);
    phx_sequential_add(seq, child);
    phx_tensor *cx = leaf(4, 3, 1.0), *cy = NULL, *cdy = leaf(4, 2, 1.0);
    phx_tensor *cbg = phx_param_grad(phx_module_find_param(child, "bias"));
    float cb1[2] = {0}, cb2[2] = {1, 1};
    phx_status c1 = phx_module_forward(seq, cx, &cy);
    phx_tensor *closs = c1 == PHX_OK ? phx_sum(cy, 0, NULL, false) : NULL;
    if (c1 == PHX_OK) c1 = phx_module_backward(child, cdy, NULL);
    phx_tensor_to_host(cbg, cb1);
    phx_status c2 = closs ? phx_backward(closs) : PHX_EINVAL;
    phx_tensor_to_host(cbg, cb2);
    ok(c1 == PHX_OK && c2 == PHX_ESTATE && says("child Linear", "forward again") && !memcmp(cb1, cb2, sizeof cb1),
       "the child's backward by the user, then phx_backward through its Sequential: refused, unchanged: %s",
       phx_last_error());
    phx_module_free(seq);
    phx_tensor_free(cx), phx_tensor_free(cdy);

    /* 14. a child the user ran standalone (forward and backward) and its
     * container's forward that does not use it: the container's backward
     * is not the child's business, and runs */
    pair pc = {phx_linear_new(3, 3, true, NULL), phx_linear_new(3, 3, true, NULL)};
    phx_module *p = phx_module_new(&p_vt, &pc);
    phx_module_add_child(p, "a", pc.a), phx_module_add_child(p, "b", pc.b);
    phx_tensor *px = leaf(2, 3, 1.0), *pdy = leaf(2, 3, 1.0), *py = NULL, *pb = NULL;
    phx_status pa = phx_module_forward(pc.b, px, &pb);
    if (pa == PHX_OK) pa = phx_module_backward(pc.b, pdy, NULL);
    if (pa == PHX_OK) pa = phx_module_forward(p, px, &py);
    if (pa == PHX_OK) pa = phx_backward(phx_sum(py, 0, NULL, false));
    ok(pa == PHX_OK, "a child's own backward, then phx_backward through a container that did not use it: runs (%s)",
       pa ? phx_last_error() : "ok");
    phx_module_free(p);

    /* 15. Sequential(F(l1), l2), F forward-only: the user's backward of l1
     * is found before l2's backward adds anything */
    phx_module *l1 = phx_linear_new(3, 3, true, NULL), *l2 = phx_linear_new(3, 3, true, NULL);
    phx_module *fo = phx_module_new(&f_vt, NULL), *seq2 = phx_sequential_new();
    phx_module_add_child(fo, "l1", l1);
    phx_sequential_add(seq2, fo), phx_sequential_add(seq2, l2);
    phx_status fa = phx_module_forward(seq2, px, &py);
    phx_tensor *floss = fa == PHX_OK ? phx_sum(py, 0, NULL, false) : NULL;
    if (fa == PHX_OK) fa = phx_module_backward(l1, pdy, NULL);
    double l2_before = grad0(l2);
    phx_status fb = floss ? phx_backward(floss) : PHX_EINVAL;
    ok(fa == PHX_OK && fb == PHX_ESTATE && grad0(l2) == l2_before,
       "a grandchild under a forward-only child, its backward run by the user: refused before l2's gradient moved "
       "(%g, %g): %s",
       l2_before, grad0(l2), phx_last_error());
    phx_module_free(seq2);
    phx_tensor_free(px), phx_tensor_free(pdy);

    phx_scope_end(sc);
    phx_tensor_free(a);
    phx_tensor_free(b);
    phx_tensor_free(ix);
    phx_tensor_free(plain);
    phx_tensor_free(g);
    phx_tensor_free(f);
    phx_tensor_free(h);
    return done_testing();
}
