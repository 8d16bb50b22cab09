/* A module called again before the backward of its last call (a shared
 * encoder: y1 = m(x1); y2 = m(x2); loss(y1, y2)). Inside a scope the
 * first output keeps its values and its own node: a forward-only module
 * made of operations differentiates both calls; a module with a
 * hand-written backward, which keeps one call's state, refuses the
 * backward and changes nothing. A training loop's forward after a
 * backward still reuses the module's output buffer. A container's child
 * run again on its own before the container's backward is refused too. */
#include <math.h>
#include <pthread.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

static phx_tensor *input(int64_t r, int64_t c, double base)
{
    int64_t s[2] = {r, c};
    phx_tensor *t = phx_tensor_new(PHX_F32, 2, s, phx_cpu());
    float v[64];
    for (int64_t i = 0; i < r * c; i++) v[i] = (float)(base + 0.25 * (double)i);
    phx_tensor_from_host(t, v);
    return t;
}

static int says(const char *a, const char *b)
{
    const char *e = phx_last_error();
    return strstr(e, a) && (!b || strstr(e, b));
}

static double at(const phx_tensor *t, int64_t i)
{
    double v = NAN;
    phx_tensor_get(t, i, &v);
    return v;
}

/* Lin: y = x W, W (3, 2), made of operations (forward-only) */
static phx_status lin_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    *y = phx_matmul(x, phx_param_value(phx_module_param(self, 0)));
    return *y ? PHX_OK : PHX_EINVAL;
}
/* Wrap: relu of its one child */
static phx_status wrap_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    phx_tensor *h = NULL;
    phx_status st = phx_module_forward(phx_module_child(self, 0), x, &h);
    if (st != PHX_OK) return st;
    *y = phx_relu(h);
    return *y ? PHX_OK : PHX_EINVAL;
}
/* Pair: a hand-written container of children a and b whose forward uses a only */
typedef struct pair {
    phx_module *a, *b;
} pair;
static phx_status pair_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    return phx_module_forward(((pair *)phx_module_ctx(self))->a, x, y);
}
static phx_status pair_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    return phx_module_backward(((pair *)phx_module_ctx(self))->a, dy, dx);
}
static void no_free(phx_module *m)
{
    (void)m;
}
/* Twice: a hand-written container running its child a twice, a(a(x)) */
static phx_status twice_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    phx_module *a = ((pair *)phx_module_ctx(self))->a;
    phx_tensor *h = NULL;
    phx_status st = phx_module_forward(a, x, &h);
    return st != PHX_OK ? st : phx_module_forward(a, h, y);
}
static phx_status twice_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    phx_module *a = ((pair *)phx_module_ctx(self))->a;
    phx_tensor *g = NULL;
    phx_status st = phx_module_backward(a, dy, &g);
    return st != PHX_OK ? st : phx_module_backward(a, g, dx);
}
/* FoTwice: a forward-only module running its child twice, c(c(x)) */
static phx_status fo_twice_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    phx_module *c = phx_module_child(self, 0);
    phx_tensor *h = NULL;
    phx_status st = phx_module_forward(c, x, &h);
    return st != PHX_OK ? st : phx_module_forward(c, h, y);
}
static const phx_module_vtable fo_twice_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE, .type_name = "FoTwice", .forward = fo_twice_forward, .free = no_free};

/* AB: a forward-only module using two calls of its child, a = c(x),
 * b = c(tanh(a)), y = a * b; ABA: three calls, y = a * c(c(a)) */
static phx_status ab_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    phx_module *c = phx_module_child(self, 0);
    phx_tensor *a = NULL, *b = NULL;
    phx_status st = phx_module_forward(c, x, &a);
    if (st == PHX_OK) st = phx_module_forward(c, phx_tanh(a), &b);
    if (st == PHX_OK && phx_module_ctx(self)) st = phx_module_forward(c, phx_tanh(b), &b);
    if (st != PHX_OK) return st;
    *y = phx_mul(a, b);
    return *y ? PHX_OK : PHX_EINVAL;
}
static const phx_module_vtable ab_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE, .type_name = "AB", .forward = ab_forward, .free = no_free};

/* HwTwo: a hand-written module calling its child on x, then on x2 */
typedef struct two_in {
    phx_module *c;
    const phx_tensor *x2;
} two_in;
static phx_status hw_two_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    two_in *t = phx_module_ctx(self);
    phx_tensor *a = NULL;
    phx_status st = phx_module_forward(t->c, x, &a);
    return st != PHX_OK ? st : phx_module_forward(t->c, t->x2, y);
}
static phx_status hw_two_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    (void)self, (void)dy, (void)dx;
    return phx_error(PHX_EUNSUPPORTED, "HwTwo has no backward");
}
static const phx_module_vtable hw_two_vt = {.struct_size = PHX_MODULE_VTABLE_SIZE,
                                            .type_name = "HwTwo",
                                            .forward = hw_two_forward,
                                            .backward = hw_two_backward,
                                            .free = no_free};
/* Tied: a forward-only module using its child P = Sequential(C) on x and
 * C itself on x2 (a tied layer): y = P(x) * C(x2) */
static phx_status tied_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    two_in *t = phx_module_ctx(self);
    phx_tensor *a = NULL, *b = NULL;
    phx_status st = phx_module_forward(phx_module_child(self, 0), x, &a);
    if (st == PHX_OK) st = phx_module_forward(t->c, t->x2, &b);
    if (st != PHX_OK) return st;
    *y = phx_mul(a, b);
    return *y ? PHX_OK : PHX_EINVAL;
}
static const phx_module_vtable tied_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE, .type_name = "Tied", .forward = tied_forward, .free = no_free};

/* a call of a module on another thread, with no scope open there */
typedef struct other_call {
    phx_module *m;
    const phx_tensor *x;
    phx_tensor *y;
    phx_status st;
} other_call;
static void *call_elsewhere(void *arg)
{
    other_call *c = arg;
    c->st = phx_module_forward(c->m, c->x, &c->y);
    return NULL;
}

static const phx_module_vtable twice_vt = {.struct_size = PHX_MODULE_VTABLE_SIZE,
                                           .type_name = "Twice",
                                           .forward = twice_forward,
                                           .backward = twice_backward,
                                           .free = no_free};
static const phx_module_vtable pair_vt = {.struct_size = PHX_MODULE_VTABLE_SIZE,
                                          .type_name = "Pair",
                                          .forward = pair_forward,
                                          .backward = pair_backward,
                                          .free = no_free};
static const phx_module_vtable lin_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE, .type_name = "Lin", .forward = lin_forward, .free = no_free};
static const phx_module_vtable wrap_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE, .type_name = "Wrap", .forward = wrap_forward, .free = no_free};

static phx_module *ops_lin(void)
{
    int64_t s[2] = {3, 2};
    phx_tensor *w = phx_tensor_new(PHX_F32, 2, s, phx_cpu());
    float v[6];
    for (int i = 0; i < 6; i++) v[i] = (float)(0.5 - 0.3 * i);
    phx_tensor_from_host(w, v);
    phx_module *m = phx_module_new(&lin_vt, NULL);
    phx_module_add_param(m, "weight", w);
    return m;
}

/* (x W)[r][c] for x (rows, 3), W (3, 2) row-major, computed here */
static double xw(const phx_tensor *x, const phx_tensor *w, int64_t r, int64_t c)
{
    double s = 0;
    for (int64_t k = 0; k < 3; k++) s += at(x, r * 3 + k) * at(w, k * 2 + c);
    return s;
}

/* Linear's y[r][o] = sum_k x[r][k] W[o][k] + b[o], computed here */
static double linear_at(phx_module *l, const phx_tensor *x, int64_t in, int64_t out, int64_t r, int64_t o)
{
    const phx_tensor *w = phx_param_value(phx_module_find_param(l, "weight"));
    const phx_tensor *b = phx_param_value(phx_module_find_param(l, "bias"));
    double s = at(b, o);
    for (int64_t k = 0; k < in; k++) s += at(x, r * in + k) * at(w, o * in + k);
    (void)out;
    return s;
}

/* The weight gradient of Lin for L = sum(x1 W) + c2 sum(x2 W) [+ sum(x3 W)],
 * x (2, 3): dL/dW[k][c] = sum_r x1[r][k] + c2 x2[r][k] [+ x3[r][k]] */
static int lin_grad_is(const phx_tensor *gw, const phx_tensor *x1, const phx_tensor *x2, double c2,
                       const phx_tensor *x3)
{
    for (int64_t k = 0; k < 3; k++)
        for (int64_t c = 0; c < 2; c++) {
            double want = 0;
            for (int64_t r = 0; r < 2; r++)
                want += at(x1, r * 3 + k) + c2 * at(x2, r * 3 + k) + (x3 ? at(x3, r * 3 + k) : 0.0);
            if (fabs(at(gw, k * 2 + c) - want) >= 1e-5) return 0;
        }
    return 1;
}

static int all_zero(const phx_tensor *g)
{
    for (int64_t i = 0; i < phx_tensor_numel(g); i++)
        if (at(g, i) != 0.0) return 0;
    return 1;
}

int main(void)
{
    plan(53);
    phx_tensor *x1 = input(2, 3, 1.0), *x2 = input(2, 3, -2.0), *x3 = input(2, 3, 0.5);

    /* 1. Linear (hand-written backward) twice, both outputs in one loss */
    phx_scope *s = phx_scope_begin();
    phx_module *lin = phx_linear_new(3, 2, true, NULL);
    phx_tensor *y1 = NULL, *y2 = NULL;
    phx_status st = phx_module_forward(lin, x1, &y1);
    double want1 = linear_at(lin, x1, 3, 2, 1, 1);
    if (st == PHX_OK) st = phx_module_forward(lin, x2, &y2);
    ok(st == PHX_OK && y1 != y2 && fabs(at(y1, 3) - want1) < 1e-5 &&
           fabs(at(y2, 3) - linear_at(lin, x2, 3, 2, 1, 1)) < 1e-5,
       "Linear twice: y1 keeps the first call's values (%g, expected %g), y2 the second's", at(y1, 3), want1);
    st = phx_backward(phx_sum(phx_sub(y1, y2), 0, NULL, false));
    ok(st == PHX_ESTATE && says("Linear", "ran forward again"), "a loss of both: refused: %s", phx_last_error());
    ok(all_zero(phx_param_grad(phx_module_find_param(lin, "weight"))) &&
           all_zero(phx_param_grad(phx_module_find_param(lin, "bias"))),
       "and no gradient was added");
    st = phx_backward(phx_sum(y2, 0, NULL, false));
    ok(st == PHX_OK, "a loss of the second output alone runs (%s)", st ? phx_last_error() : "ok");
    double gb = at(phx_param_grad(phx_module_find_param(lin, "bias")), 0);
    ok(fabs(gb - 2.0) < 1e-6, "its bias gradient is the batch size, 2 (%g)", gb);
    phx_scope_end(s);

    /* 2. a training loop: forward, backward, forward reuses the buffer */
    s = phx_scope_begin();
    phx_tensor *ya = NULL, *yb = NULL;
    st = phx_module_forward(lin, x1, &ya);
    if (st == PHX_OK) st = phx_backward(phx_sum(ya, 0, NULL, false));
    if (st == PHX_OK) st = phx_module_forward(lin, x2, &yb);
    ok(st == PHX_OK && ya == yb, "after a backward the next forward reuses the output buffer (%s)",
       st ? phx_last_error() : "ok");
    phx_scope_end(s);
    phx_module_free(lin);

    /* 3. a forward-only module of operations, three calls (a triplet) */
    s = phx_scope_begin();
    phx_module *ol = ops_lin();
    const phx_tensor *w = phx_param_value(phx_module_param(ol, 0));
    phx_tensor *o1 = NULL, *o2 = NULL, *o3 = NULL;
    st = phx_module_forward(ol, x1, &o1);
    if (st == PHX_OK) st = phx_module_forward(ol, x2, &o2);
    if (st == PHX_OK) st = phx_module_forward(ol, x3, &o3);
    int vals = st == PHX_OK;
    for (int64_t i = 0; vals && i < 4; i++)
        vals = fabs(at(o1, i) - xw(x1, w, i / 2, i % 2)) < 1e-5 && fabs(at(o2, i) - xw(x2, w, i / 2, i % 2)) < 1e-5 &&
            fabs(at(o3, i) - xw(x3, w, i / 2, i % 2)) < 1e-5;
    ok(vals, "three calls of a forward-only module: each output keeps its own values");
    /* L = sum(o1) - 2 sum(o2) + sum(o3): dL/dW[k][c] = sum_r x1 - 2 x2 + x3 */
    phx_tensor *l = phx_add(phx_sub(phx_sum(o1, 0, NULL, false), phx_mul_scalar(phx_sum(o2, 0, NULL, false), 2.0)),
                            phx_sum(o3, 0, NULL, false));
    st = phx_backward(l);
    int grads = st == PHX_OK && lin_grad_is(phx_param_grad(phx_module_param(ol, 0)), x1, x2, -2.0, x3);
    ok(grads, "a loss of all three: the weight gradient sums the three calls' (%s)", st ? phx_last_error() : "ok");
    phx_scope_end(s);
    phx_module_free(ol);

    /* 4. a forward-only module around a Linear: the first output keeps
     * its values; the Linear inside refuses the backward */
    s = phx_scope_begin();
    phx_module *wr = phx_module_new(&wrap_vt, NULL), *inner = phx_linear_new(3, 2, true, NULL);
    phx_module_add_child(wr, "l", inner);
    phx_tensor *r1 = NULL, *r2 = NULL;
    st = phx_module_forward(wr, x1, &r1);
    double keep = fmax(linear_at(inner, x1, 3, 2, 0, 0), 0.0);
    if (st == PHX_OK) st = phx_module_forward(wr, x2, &r2);
    ok(st == PHX_OK && r1 != r2 && fabs(at(r1, 0) - keep) < 1e-5, "Wrap(Linear) twice: r1 kept (%g, expected %g)",
       at(r1, 0), keep);
    st = phx_backward(phx_sum(phx_add(r1, r2), 0, NULL, false));
    ok(st == PHX_ESTATE && says("Linear", "ran forward again") &&
           all_zero(phx_param_grad(phx_module_find_param(inner, "weight"))),
       "a loss of both: refused, no gradient: %s", phx_last_error());
    phx_scope_end(s);
    phx_module_free(wr);

    /* 5. Linear on its own output (lin(lin(x))), square: the second call
     * reads the first output and writes elsewhere; its values are right */
    s = phx_scope_begin();
    phx_module *sq = phx_linear_new(3, 3, true, NULL);
    phx_tensor *h = NULL, *z = NULL;
    st = phx_module_forward(sq, x1, &h);
    double hv[6];
    for (int i = 0; i < 6; i++) hv[i] = linear_at(sq, x1, 3, 3, i / 3, i % 3);
    if (st == PHX_OK) st = phx_module_forward(sq, h, &z);
    int zok = st == PHX_OK && z != h;
    for (int i = 0; zok && i < 6; i++) {
        const phx_tensor *wt = phx_param_value(phx_module_find_param(sq, "weight"));
        double want = at(phx_param_value(phx_module_find_param(sq, "bias")), i % 3);
        for (int k = 0; k < 3; k++) want += hv[(i / 3) * 3 + k] * at(wt, (i % 3) * 3 + k);
        zok = fabs(at(z, i) - want) < 1e-5 && fabs(at(h, i) - hv[i]) < 1e-5;
    }
    ok(zok, "lin(lin(x)): the first output kept, the second computed from it");
    ok(phx_backward(phx_sum(z, 0, NULL, false)) == PHX_ESTATE && says("Linear", "ran forward again"),
       "its backward refused: %s", phx_last_error());
    phx_scope_end(s);
    phx_module_free(sq);

    /* 6. Flatten (its output a view of its input) twice */
    s = phx_scope_begin();
    phx_module *fl = phx_flatten_new();
    phx_tensor *q1 = input(2, 3, 4.0), *q2 = input(2, 3, 9.0), *f1 = NULL, *f2 = NULL;
    phx_tensor_set_requires_grad(q1, true), phx_tensor_set_requires_grad(q2, true);
    st = phx_module_forward(fl, q1, &f1);
    if (st == PHX_OK) st = phx_module_forward(fl, q2, &f2);
    ok(st == PHX_OK && f1 != f2 && at(f1, 5) == at(q1, 5) && at(f2, 5) == at(q2, 5),
       "Flatten twice: each output views its own input (%g, %g)", at(f1, 5), at(f2, 5));
    ok(phx_backward(phx_sum(phx_add(f1, f2), 0, NULL, false)) == PHX_ESTATE && !phx_tensor_grad(q1) &&
           !phx_tensor_grad(q2),
       "a loss of both: refused, no gradient: %s", phx_last_error());
    phx_scope_end(s);
    phx_module_free(fl);
    phx_tensor_free(q1), phx_tensor_free(q2);

    /* 7. grad mode off: nothing is recorded and the buffer is reused as
     * documented (the output is the module's until its next forward) */
    s = phx_scope_begin();
    phx_module *ev = phx_linear_new(3, 2, true, NULL);
    bool was = phx_set_grad_enabled(false);
    phx_tensor *e1 = NULL, *e2 = NULL;
    st = phx_module_forward(ev, x1, &e1);
    if (st == PHX_OK) st = phx_module_forward(ev, x2, &e2);
    phx_set_grad_enabled(was);
    ok(st == PHX_OK && e1 == e2 && fabs(at(e2, 0) - linear_at(ev, x2, 3, 2, 0, 0)) < 1e-5,
       "with grad mode off two calls share the buffer (nothing to keep)");
    phx_scope_end(s);

    /* 8. eval with grad mode on and no backward, in a scope per batch:
     * each batch's output is kept only until its scope ends */
    uint64_t before = 0;
    for (int i = 0; i < 3; i++) {
        s = phx_scope_begin();
        phx_tensor *e = NULL;
        st = phx_module_forward(ev, i % 2 ? x2 : x1, &e);
        if (i == 1) before = phx_alloc_count();
        phx_scope_end(s);
    }
    ok(st == PHX_OK && phx_alloc_count() - before <= 2,
       "an evaluation loop with grad mode on allocates at most 2 tensors per batch once warm (%llu)",
       (unsigned long long)(phx_alloc_count() - before));
    phx_module_free(ev);

    /* 9. a container's child run again on its own (grad mode off)
     * between the container's forward and its backward: the container's
     * backward would use the child's newer state; refused, nothing added */
    s = phx_scope_begin();
    phx_module *seq = phx_sequential_new(), *child = phx_linear_new(3, 2, true, NULL);
    phx_sequential_add(seq, child);
    phx_tensor *sy = NULL, *cy = NULL;
    st = phx_module_forward(seq, x1, &sy);
    phx_tensor *sl = st == PHX_OK ? phx_sum(sy, 0, NULL, false) : NULL;
    was = phx_set_grad_enabled(false);
    if (st == PHX_OK) st = phx_module_forward(child, x2, &cy);
    phx_set_grad_enabled(was);
    phx_status sb = sl ? phx_backward(sl) : PHX_EINVAL;
    ok(st == PHX_OK && sb == PHX_ESTATE &&
           says("child Linear", "ran forward again after the Sequential's last forward") &&
           all_zero(phx_param_grad(phx_module_find_param(child, "weight"))),
       "Sequential(Linear), the Linear run alone before the backward: refused, no gradient: %s", phx_last_error());
    /* the user's phx_module_backward of the container: refused the same way */
    phx_tensor *dy = input(2, 2, 1.0);
    ok(phx_module_backward(seq, dy, NULL) == PHX_ESTATE && says("child Linear", "ran forward again"),
       "and phx_module_backward of the Sequential: %s", phx_last_error());
    /* its next forward makes the backward right again */
    st = phx_module_forward(seq, x1, &sy);
    if (st == PHX_OK) st = phx_backward(phx_sum(sy, 0, NULL, false));
    double gw1 = at(phx_param_grad(phx_module_find_param(child, "weight")), 0), want = at(x1, 0) + at(x1, 3);
    ok(st == PHX_OK && fabs(gw1 - want) < 1e-5,
       "after the Sequential's next forward the backward runs: W[0][0] grad %g, "
       "expected %g",
       gw1, want);
    phx_scope_end(s);
    phx_module_free(seq);

    /* 10. a child the container's last forward did not use, run on its own
     * in between: not the container's business, its backward runs */
    s = phx_scope_begin();
    pair pc = {phx_linear_new(3, 2, true, NULL), phx_linear_new(3, 2, true, NULL)};
    phx_module *pm = phx_module_new(&pair_vt, &pc);
    phx_module_add_child(pm, "a", pc.a), phx_module_add_child(pm, "b", pc.b);
    phx_tensor *py = NULL, *pb = NULL;
    st = phx_module_forward(pm, x1, &py);
    if (st == PHX_OK) st = phx_module_forward(pc.b, x2, &pb);
    if (st == PHX_OK) st = phx_backward(phx_sum(py, 0, NULL, false));
    double gw2 = at(phx_param_grad(phx_module_find_param(pc.a, "weight")), 0);
    ok(st == PHX_OK && fabs(gw2 - want) < 1e-5,
       "Pair(a, b) using a, b run alone in between: the backward runs (%s, %g)", st ? phx_last_error() : "ok", gw2);
    phx_scope_end(s);
    phx_module_free(pm);
    phx_tensor_free(dy);

    /* 11. nested scopes: the outer scope's output outlives the inner one */
    phx_scope *outer = phx_scope_begin();
    phx_module *nl = phx_linear_new(3, 2, true, NULL);
    st = phx_module_forward(nl, x1, &y1);
    want1 = linear_at(nl, x1, 3, 2, 1, 1);
    s = phx_scope_begin();
    if (st == PHX_OK) st = phx_module_forward(nl, x2, &y2);
    phx_scope_end(s);
    ok(st == PHX_OK && fabs(at(y1, 3) - want1) < 1e-5,
       "y1 in an outer scope, y2 in an inner one that ended: y1 intact (%g, expected %g)", at(y1, 3), want1);

    /* 12. the same module inside a forward-only container (whose call has
     * a scope of its own) keeps the user's output in the user's scope */
    phx_module *ow = phx_module_new(&wrap_vt, NULL), *wl = phx_linear_new(3, 2, true, NULL);
    phx_module_add_child(ow, "l", wl);
    phx_tensor *yl = NULL, *w1 = NULL, *w3 = NULL;
    st = phx_module_forward(wl, x1, &yl);
    double wantl = linear_at(wl, x1, 3, 2, 0, 0);
    if (st == PHX_OK) st = phx_module_forward(ow, x2, &w1);
    if (st == PHX_OK) st = phx_backward(phx_sum(w1, 0, NULL, false));
    if (st == PHX_OK) st = phx_module_forward(ow, x3, &w3);
    ok(st == PHX_OK && fabs(at(yl, 0) - wantl) < 1e-5 && yl != w3,
       "Linear's own output, then Wrap(Linear) twice with a backward between: the output intact (%g, expected %g)",
       at(yl, 0), wantl);

    /* 13. a module's output, then the module inside a hand-written container */
    phx_module *cs = phx_sequential_new(), *cl = phx_linear_new(3, 2, true, NULL);
    phx_sequential_add(cs, cl);
    phx_tensor *feats = NULL, *co = NULL;
    st = phx_module_forward(cl, x1, &feats);
    double wantf = linear_at(cl, x1, 3, 2, 1, 0), wanto = linear_at(cl, x2, 3, 2, 1, 0);
    if (st == PHX_OK) st = phx_module_forward(cs, x2, &co);
    if (st == PHX_OK) st = phx_backward(phx_sum(co, 0, NULL, false));
    double cb = at(phx_param_grad(phx_module_find_param(cl, "bias")), 0);
    ok(st == PHX_OK && fabs(at(feats, 2) - wantf) < 1e-5 && fabs(at(co, 2) - wanto) < 1e-5 && fabs(cb - 2.0) < 1e-6,
       "Linear's output, then Sequential(Linear): both outputs right (%g, %g), the backward runs (bias grad %g)",
       at(feats, 2), at(co, 2), cb);
    phx_scope_end(outer);
    phx_module_free(nl), phx_module_free(ow), phx_module_free(cs);

    /* 14. DataParallel over two CPU replicas: an evaluation loop with grad
     * mode on and a scope per batch, then two outputs in one scope */
    phx_module *dl = phx_linear_new(3, 2, true, NULL);
    phx_device devs[2] = {phx_cpu(), phx_cpu()};
    phx_module *dp = phx_dp_new(dl, devs, 2, NULL);
    phx_tensor *b4[3] = {input(4, 3, 1.0), input(4, 3, -2.0), input(4, 3, 0.5)};
    int dp_ok = dp != NULL;
    for (int i = 0; dp_ok && i < 3; i++) {
        s = phx_scope_begin();
        phx_tensor *dy4 = NULL;
        dp_ok = phx_module_forward(dp, b4[i], &dy4) == PHX_OK;
        for (int64_t e = 0; dp_ok && e < 8; e++)
            dp_ok = fabs(at(dy4, e) - linear_at(dl, b4[i], 3, 2, e / 2, e % 2)) < 1e-5;
        phx_scope_end(s);
    }
    ok(dp_ok, "DataParallel (2 replicas), 3 batches with grad mode on: every output right (%s)",
       dp_ok ? "ok" : phx_last_error());
    s = phx_scope_begin();
    phx_tensor *d1 = NULL, *d2 = NULL;
    st = dp ? phx_module_forward(dp, b4[0], &d1) : PHX_EINVAL;
    if (st == PHX_OK) st = phx_module_forward(dp, b4[1], &d2);
    dp_ok = st == PHX_OK && d1 != d2;
    for (int64_t e = 0; dp_ok && e < 8; e++)
        dp_ok = fabs(at(d1, e) - linear_at(dl, b4[0], 3, 2, e / 2, e % 2)) < 1e-5 &&
            fabs(at(d2, e) - linear_at(dl, b4[1], 3, 2, e / 2, e % 2)) < 1e-5;
    ok(dp_ok, "DataParallel: y1 = dp(x1); y2 = dp(x2) in one scope: both right");
    phx_scope_end(s);
    phx_module_free(dp), phx_module_free(dl);
    for (int i = 0; i < 3; i++) phx_tensor_free(b4[i]);

    /* 15. a hand-written container running its child twice: right values,
     * and its backward (the child keeps one call's state) refused */
    s = phx_scope_begin();
    pair tc = {phx_linear_new(3, 3, true, NULL), NULL};
    phx_module *tw = phx_module_new(&twice_vt, &tc);
    phx_module_add_child(tw, "a", tc.a);
    phx_tensor *ty = NULL;
    double th[6], tz[6];
    for (int i = 0; i < 6; i++) th[i] = linear_at(tc.a, x1, 3, 3, i / 3, i % 3);
    const phx_tensor *tw_w = phx_param_value(phx_module_find_param(tc.a, "weight"));
    for (int i = 0; i < 6; i++) {
        tz[i] = at(phx_param_value(phx_module_find_param(tc.a, "bias")), i % 3);
        for (int k = 0; k < 3; k++) tz[i] += th[(i / 3) * 3 + k] * at(tw_w, (i % 3) * 3 + k);
    }
    st = phx_module_forward(tw, x1, &ty);
    int tv = st == PHX_OK;
    for (int i = 0; tv && i < 6; i++) tv = fabs(at(ty, i) - tz[i]) < 1e-5;
    ok(tv, "Twice(a) = a(a(x)): the values of two calls (%g, expected %g)", at(ty, 0), tz[0]);
    st = phx_backward(phx_sum(ty, 0, NULL, false));
    ok(st == PHX_ESTATE && says("child Linear", "twice in it") &&
           all_zero(phx_param_grad(phx_module_find_param(tc.a, "weight"))),
       "its backward refused, no gradient: %s", phx_last_error());
    phx_scope_end(s);
    phx_module_free(tw);

    /* 16. a module on its own output with no scope open: the second call
     * writes elsewhere (Linear, grad mode off; Wrap, grad mode on) */
    phx_module *q = phx_linear_new(3, 3, true, NULL);
    was = phx_set_grad_enabled(false);
    phx_tensor *qa = NULL, *qb = NULL;
    st = phx_module_forward(q, x1, &qa);
    if (st == PHX_OK) st = phx_module_forward(q, qa, &qb);
    phx_set_grad_enabled(was);
    double qbv[6]; /* read before q runs again */
    for (int i = 0; i < 6; i++) qbv[i] = at(qb, i);
    phx_module *qw = phx_module_new(&wrap_vt, NULL);
    phx_module_add_child(qw, "l", q);
    phx_tensor *ra = NULL, *rb = NULL;
    if (st == PHX_OK) st = phx_module_forward(qw, x1, &ra);
    if (st == PHX_OK) st = phx_module_forward(qw, ra, &rb);
    int qv = st == PHX_OK;
    const phx_tensor *qwt = phx_param_value(phx_module_find_param(q, "weight"));
    for (int i = 0; qv && i < 6; i++) {
        double h1[3], lin2 = at(phx_param_value(phx_module_find_param(q, "bias")), i % 3), relu2;
        for (int o = 0; o < 3; o++) h1[o] = linear_at(q, x1, 3, 3, i / 3, o);
        for (int k = 0; k < 3; k++) lin2 += h1[k] * at(qwt, (i % 3) * 3 + k);
        relu2 = at(phx_param_value(phx_module_find_param(q, "bias")), i % 3);
        for (int k = 0; k < 3; k++) relu2 += fmax(h1[k], 0.0) * at(qwt, (i % 3) * 3 + k);
        qv = fabs(qbv[i] - lin2) < 1e-5 && fabs(at(rb, i) - fmax(relu2, 0.0)) < 1e-5;
    }
    ok(qv, "no scope: lin(lin(x)) with grad mode off and Wrap(Wrap(x)) with it on give the values of two calls (%s)",
       st ? phx_last_error() : "ok");
    phx_tensor_free(rb); /* an operation's result made with no scope open: the caller's */
    phx_module_free(qw);

    /* 17. a forward-only module running a child of operations twice
     * (shared weights) inside a Sequential: its graph holds both calls,
     * so the Sequential's backward runs; dL/dW of sum(x W W) computed
     * here: x^T (1 W^T) + (x W)^T 1 */
    s = phx_scope_begin();
    phx_module *gq = phx_module_new(&lin_vt, NULL), *fq = phx_module_new(&fo_twice_vt, NULL);
    int64_t s33[2] = {3, 3};
    phx_tensor *wq = phx_tensor_new(PHX_F32, 2, s33, phx_cpu());
    float wv[9];
    for (int i = 0; i < 9; i++) wv[i] = (float)(0.5 + 0.1 * i);
    phx_tensor_from_host(wq, wv);
    phx_module_add_param(gq, "weight", wq);
    phx_module_add_child(fq, "g", gq);
    phx_module *sq2 = phx_sequential_new();
    phx_sequential_add(sq2, fq);
    phx_tensor *fy = NULL;
    st = phx_module_forward(sq2, x1, &fy);
    if (st == PHX_OK) st = phx_backward(phx_sum(fy, 0, NULL, false));
    const phx_tensor *gq_g = phx_param_grad(phx_module_param(gq, 0));
    int fq_ok = st == PHX_OK;
    for (int i = 0; fq_ok && i < 3; i++)
        for (int k = 0; k < 3; k++) {
            double want = 0;
            for (int r = 0; r < 2; r++) {
                double g1 = 0, hk = 0;
                for (int c = 0; c < 3; c++) g1 += wv[k * 3 + c], hk += at(x1, r * 3 + c) * wv[c * 3 + i];
                want += at(x1, r * 3 + i) * g1 + hk;
            }
            fq_ok = fq_ok && fabs(at(gq_g, i * 3 + k) - want) < 1e-4 * fmax(1.0, fabs(want));
        }
    ok(fq_ok, "Sequential(FoTwice(G)), G of operations: the backward runs, dL/dW that of both calls (%s)",
       st ? phx_last_error() : "ok");
    phx_scope_end(s);
    phx_module_free(sq2);

    /* 18. a call on another thread while this thread's scope holds the
     * last output: that output keeps its values */
    s = phx_scope_begin();
    phx_module *tl = phx_linear_new(3, 2, true, NULL);
    phx_tensor *ty1 = NULL;
    st = phx_module_forward(tl, x1, &ty1);
    double tw1 = linear_at(tl, x1, 3, 2, 1, 1);
    other_call oc = {tl, x2, NULL, PHX_EINVAL};
    pthread_t thr;
    if (st == PHX_OK && pthread_create(&thr, NULL, call_elsewhere, &oc) == 0) pthread_join(thr, NULL);
    ok(oc.st == PHX_OK && oc.y != ty1 && fabs(at(ty1, 3) - tw1) < 1e-5 &&
           fabs(at(oc.y, 3) - linear_at(tl, x2, 3, 2, 1, 1)) < 1e-5,
       "Linear on this thread in a scope, then on another thread: the first output intact (%g, expected %g)",
       at(ty1, 3), tw1);
    phx_scope_end(s);
    phx_module_free(tl);

    /* 19. a container whose output is a view of a child's buffer
     * (Sequential(Linear, Flatten)): the first output keeps its values */
    s = phx_scope_begin();
    phx_module *vf = phx_sequential_new(), *vl = phx_linear_new(3, 2, true, NULL);
    phx_sequential_add(vf, vl), phx_sequential_add(vf, phx_flatten_new());
    phx_tensor *v1 = NULL, *v2 = NULL;
    st = phx_module_forward(vf, x1, &v1);
    double vw = linear_at(vl, x1, 3, 2, 1, 0);
    if (st == PHX_OK) st = phx_module_forward(vf, x2, &v2);
    ok(st == PHX_OK && fabs(at(v1, 2) - vw) < 1e-5 && fabs(at(v2, 2) - linear_at(vl, x2, 3, 2, 1, 0)) < 1e-5,
       "Sequential(Linear, Flatten) twice: y1 (a view of the Linear's buffer) intact (%g, expected %g)", at(v1, 2), vw);
    phx_scope_end(s);

    /* 20. a step that evaluates with grad mode on before its training
     * forward, in one scope: the kept output's memory comes back through
     * the storage cache, so the loop allocates nothing once warm */
    uint64_t warm = 0;
    phx_module *al = phx_linear_new(3, 2, true, NULL);
    for (int step = 0; step < 8; step++) {
        if (step == 3) warm = phx_alloc_count();
        s = phx_scope_begin();
        phx_tensor *ev1 = NULL, *tr = NULL;
        st = phx_module_forward(al, x1, &ev1);
        if (st == PHX_OK) st = phx_module_forward(al, x2, &tr);
        if (st == PHX_OK) st = phx_backward(phx_sum(tr, 0, NULL, false));
        phx_scope_end(s);
    }
    ok(st == PHX_OK && phx_alloc_count() == warm,
       "an evaluation with grad mode on, then a training step, in one scope per step: no allocation in steps 3-7 "
       "(%llu)",
       (unsigned long long)(phx_alloc_count() - warm));
    phx_module_free(vf), phx_module_free(al);

    /* 21. a container's output, then its child run on its own: the
     * container's output (the child's buffer, or Flatten's view of it)
     * keeps its values, and the container's backward is refused */
    for (int flat = 0; flat < 2; flat++) {
        s = phx_scope_begin();
        phx_module *cq = phx_sequential_new(), *ql = phx_linear_new(3, 2, true, NULL);
        phx_sequential_add(cq, ql);
        if (flat) phx_sequential_add(cq, phx_flatten_new());
        phx_tensor *c1 = NULL, *c2 = NULL;
        st = phx_module_forward(cq, x1, &c1);
        double cw = linear_at(ql, x1, 3, 2, 1, 0);
        if (st == PHX_OK) st = phx_module_forward(ql, x2, &c2);
        int kept =
            st == PHX_OK && fabs(at(c1, 2) - cw) < 1e-5 && fabs(at(c2, 2) - linear_at(ql, x2, 3, 2, 1, 0)) < 1e-5;
        st = phx_backward(phx_sum(c1, 0, NULL, false));
        ok(kept && st == PHX_ESTATE && says("child Linear", "ran forward again"),
           "%s, then its Linear alone: the Sequential's output intact (%g, expected %g), its backward refused: %s",
           flat ? "Sequential(Linear, Flatten)" : "Sequential(Linear)", at(c1, 2), cw, phx_last_error());
        phx_scope_end(s);
        phx_module_free(cq);
    }

    /* 22. a forward-only encoder shared by two inputs inside
     * DataParallel: the wrapper keeps one call's state; refused, and the
     * message says how to share it (one call on the concatenated inputs) */
    s = phx_scope_begin();
    phx_module *de = ops_lin();
    phx_device dd[2] = {phx_cpu(), phx_cpu()};
    phx_module *dw = phx_dp_new(de, dd, 2, NULL);
    phx_tensor *de1 = NULL, *de2 = NULL;
    st = dw ? phx_module_forward(dw, x1, &de1) : PHX_EINVAL;
    if (st == PHX_OK) st = phx_module_forward(dw, x2, &de2);
    if (st == PHX_OK) st = phx_backward(phx_sum(phx_sub(de1, de2), 0, NULL, false));
    ok(st == PHX_ESTATE && says("DataParallel", "phx_cat") && all_zero(phx_param_grad(phx_module_param(de, 0))),
       "DataParallel(encoder) on two inputs in one loss: refused, no gradient, the way named: %s", phx_last_error());
    phx_scope_end(s);
    phx_module_free(dw), phx_module_free(de);

    /* 23. no scope open, a forward-only module twice, a loss of both:
     * the module keeps the first output; L = sum(o1) - 2 sum(o2),
     * dL/dW[k][c] = sum_r x1 - 2 x2 */
    phx_module *enc = ops_lin();
    const phx_tensor *nw = phx_param_value(phx_module_param(enc, 0));
    phx_tensor *n1 = NULL, *n2 = NULL;
    st = phx_module_forward(enc, x1, &n1);
    if (st == PHX_OK) st = phx_module_forward(enc, x2, &n2);
    int nv = st == PHX_OK && n1 != n2;
    for (int64_t i = 0; nv && i < 4; i++)
        nv = fabs(at(n1, i) - xw(x1, nw, i / 2, i % 2)) < 1e-5 && fabs(at(n2, i) - xw(x2, nw, i / 2, i % 2)) < 1e-5;
    ok(nv, "no scope: a forward-only module twice keeps both outputs' values (%s)", st ? phx_last_error() : "ok");
    phx_tensor *ns1 = phx_sum(n1, 0, NULL, false), *ns2 = phx_sum(n2, 0, NULL, false);
    phx_tensor *ns2x = phx_mul_scalar(ns2, 2.0), *nloss = phx_sub(ns1, ns2x);
    st = phx_backward(nloss);
    int ng = st == PHX_OK && lin_grad_is(phx_param_grad(phx_module_param(enc, 0)), x1, x2, -2.0, NULL);
    ok(ng, "and a loss of both gives the gradient of both calls (%s)", st ? phx_last_error() : "ok");
    phx_tensor_free(nloss), phx_tensor_free(ns2x), phx_tensor_free(ns2), phx_tensor_free(ns1);

    /* 24. no scope, a third call before the backward: the first output is
     * freed, and an operation or a backward given it is refused */
    phx_tensor *n3 = NULL, *n4 = NULL, *n5 = NULL;
    st = phx_module_forward(enc, x1, &n3);
    if (st == PHX_OK) st = phx_module_forward(enc, x2, &n4);
    if (st == PHX_OK) st = phx_module_forward(enc, x3, &n5);
    phx_tensor *bad = st == PHX_OK ? phx_sub(n3, n5) : NULL;
    ok(st == PHX_OK && !bad && says("a freed tensor", "Lin") && says("phx_scope_begin", NULL),
       "no scope: three calls, then the first output in an operation: refused: %s", phx_last_error());
    double hbuf[4];
    st = phx_tensor_to_host(n3, hbuf);
    phx_status bst = phx_backward(n3);
    ok(st == PHX_ESTATE && bst == PHX_ESTATE && says("phx_backward", "a freed tensor"),
       "and in phx_tensor_to_host and phx_backward: %s", phx_last_error());
    phx_tensor *okd = phx_sub(n4, n5);
    ok(okd && fabs(at(okd, 0) - (xw(x2, nw, 0, 0) - xw(x3, nw, 0, 0))) < 1e-5, "the last two outputs stay usable (%s)",
       okd ? "ok" : phx_last_error());
    phx_tensor_free(okd);
    /* a retain and two frees of the freed handle change nothing: the
     * next 200 tensors are 200 distinct handles */
    phx_tensor_retain(n3), phx_tensor_free(n3), phx_tensor_free(n3);
    phx_tensor *many[200];
    int64_t one = 1;
    int distinct = 1;
    for (int i = 0; i < 200; i++) {
        many[i] = phx_tensor_new(PHX_F32, 1, &one, phx_cpu());
        for (int j = 0; distinct && j < i; j++) distinct = many[i] && many[j] != many[i];
    }
    for (int i = 0; i < 200; i++) phx_tensor_free(many[i]);
    ok(distinct, "a retain and frees of the freed handle leave the handle pool whole");
    phx_module_free(enc);

    /* 25. no scope, a Linear twice: y1 keeps its values; a loss of both
     * is refused (one call's state), nothing added */
    phx_module *nlin = phx_linear_new(3, 2, true, NULL);
    phx_tensor *m1 = NULL, *m2 = NULL;
    st = phx_module_forward(nlin, x1, &m1);
    double mw = linear_at(nlin, x1, 3, 2, 1, 1);
    if (st == PHX_OK) st = phx_module_forward(nlin, x2, &m2);
    phx_tensor *md = st == PHX_OK ? phx_sub(m1, m2) : NULL, *ml = phx_sum(md, 0, NULL, false);
    phx_status mst = phx_backward(ml);
    ok(st == PHX_OK && m1 != m2 && fabs(at(m1, 3) - mw) < 1e-5 && mst == PHX_ESTATE &&
           says("Linear", "ran forward again") && all_zero(phx_param_grad(phx_module_find_param(nlin, "bias"))),
       "no scope: Linear twice: y1 intact (%g, expected %g), a loss of both refused: %s", at(m1, 3), mw,
       phx_last_error());
    phx_tensor_free(ml), phx_tensor_free(md);

    /* 26. no scope, an evaluation loop with grad mode on (each output's
     * graph waits forever): the kept outputs' memory comes back through
     * the storage cache, so it allocates nothing once warm */
    phx_module *ne = phx_sequential_new();
    phx_sequential_add(ne, nlin), phx_sequential_add(ne, phx_relu_new());
    phx_module *nf = ops_lin();
    int evals_ok = 1;
    for (int step = 0; step < 8; step++) {
        if (step == 3) warm = phx_alloc_count();
        phx_tensor *e1 = NULL, *e2 = NULL;
        st = phx_module_forward(ne, step % 2 ? x1 : x2, &e1);
        if (st == PHX_OK) st = phx_module_forward(nf, x3, &e2);
        phx_tensor *es = st == PHX_OK ? phx_sum(e1, 0, NULL, false) : NULL;
        evals_ok = evals_ok && es && fabs(at(e2, 1) - xw(x3, phx_param_value(phx_module_param(nf, 0)), 0, 1)) < 1e-5;
        phx_tensor_free(es);
    }
    ok(evals_ok && phx_alloc_count() == warm,
       "no scope: an evaluation loop with grad mode on allocates nothing in steps 3-7 (%llu)",
       (unsigned long long)(phx_alloc_count() - warm));
    phx_module_free(ne), phx_module_free(nf);

    /* 27. with grad mode off a forward-only module's earlier output is
     * freed at its next call and marked: using it is refused, not run on
     * the handle's next tenant (PyTorch: x1 W - x2 W) */
    phx_module *ge = ops_lin();
    was = phx_set_grad_enabled(false);
    phx_tensor *g1 = NULL, *g2 = NULL;
    st = phx_module_forward(ge, x1, &g1);
    if (st == PHX_OK) st = phx_module_forward(ge, x2, &g2);
    phx_tensor *g3 = st == PHX_OK ? phx_mul_scalar(g2, 3.0) : NULL, *gd = phx_sub(g1, g2);
    ok(g3 && g3 != g1 && !gd && says("a freed tensor", "Lin"),
       "grad mode off: a forward-only module's output used after its next call: refused: %s", phx_last_error());
    phx_tensor_free(g3), phx_tensor_free(gd);
    phx_set_grad_enabled(was);

    /* 28. every other way in for a freed output: refused, nothing read */
    phx_tensor *fr1 = NULL, *fr2 = NULL, *fr3 = NULL;
    st = phx_module_forward(ge, x1, &fr1);
    if (st == PHX_OK) st = phx_module_forward(ge, x2, &fr2);
    if (st == PHX_OK) st = phx_module_forward(ge, x3, &fr3);
    const phx_tensor *three[3] = {fr1, fr2, fr3};
    phx_loss *lo = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    phx_rng *rg = phx_rng_new(1);
    phx_module *bl = phx_linear_new(3, 2, true, NULL);
    phx_tensor *blo = NULL, *bdx = NULL, *dst = input(2, 2, 5.0);
    float lv = 0;
    int refused = st == PHX_OK;
    phx_tensor *cat = phx_cat(3, three, 0);
    refused = refused && !cat && says("phx_cat", "a freed tensor");
    refused = refused && phx_loss_forward(lo, fr1, fr2, &lv) == PHX_ESTATE && says("a freed tensor", NULL);
    refused = refused && phx_module_forward(bl, x1, &blo) == PHX_OK &&
        phx_module_backward(bl, fr1, &bdx) == PHX_ESTATE && says("dy is a freed tensor", NULL);
    refused = refused && phx_rng_uniform(rg, fr1, 0, 1) == PHX_ESTATE && says("a freed tensor", NULL);
    refused = refused && phx_tensor_axpby(1.0f, fr1, 1.0f, dst) == PHX_ESTATE && fabs(at(dst, 0) - 5.0) < 1e-6;
    refused = refused && phx_param_set_value(phx_module_find_param(bl, "bias"), fr1) != PHX_OK &&
        says("a freed tensor", NULL);
    phx_loader *ld = phx_loader_new(fr1, fr2, 1, false, 0, false, NULL, 0);
    refused = refused && !ld && says("a freed tensor", NULL);
    refused = refused && !phx_tensor_view(fr1, 0, 1, (int64_t[]){2}) && says("a freed tensor", NULL);
    ok(refused,
       "a freed output in phx_cat, phx_loss_forward, as dy, phx_rng_uniform, phx_tensor_axpby, "
       "phx_param_set_value, phx_loader_new, phx_tensor_view: all refused (%s)",
       phx_last_error());
    phx_loader_free(ld), phx_loss_free(lo), phx_rng_free(rg), phx_module_free(bl), phx_tensor_free(dst);
    phx_module_free(ge);

    /* 29. evaluations (grad mode on) and training steps alternating, with
     * batches of 2, 2 and 3 rows and no scope: allocates nothing once warm */
    phx_tensor *xr[3] = {x1, x2, input(3, 3, 1.5)};
    phx_module *al2 = phx_linear_new(3, 2, true, NULL);
    int run_ok = 1;
    for (int step = 0; step < 60; step++) {
        if (step == 30) warm = phx_alloc_count();
        phx_tensor *ay = NULL;
        st = phx_module_forward(al2, xr[step % 3], &ay);
        phx_tensor *as = st == PHX_OK ? phx_sum(ay, 0, NULL, false) : NULL;
        if (as && step % 2) st = phx_backward(as);
        run_ok = run_ok && as && st == PHX_OK;
        phx_tensor_free(as);
    }
    ok(run_ok && phx_alloc_count() == warm,
       "no scope: evaluations and training steps alternating over batches of 2, 2, 3 rows: no allocation in "
       "steps 30-59 (%llu)",
       (unsigned long long)(phx_alloc_count() - warm));
    phx_module_free(al2), phx_tensor_free(xr[2]);

    /* 30. a forward-only parent using two (three) calls of its child,
     * grad mode off and on, no scope: each call's output intact; checked
     * against the child computed here on doubles */
    for (int variant = 0; variant < 4; variant++) {
        int three_calls = variant & 1, grad = variant >> 1;
        phx_module *cl = phx_linear_new(3, 3, true, NULL);
        phx_module *pa = phx_module_new(&ab_vt, three_calls ? (void *)&ab_vt : NULL);
        phx_module_add_child(pa, "c", cl);
        const phx_tensor *cw = phx_param_value(phx_module_find_param(cl, "weight"));
        const phx_tensor *cb = phx_param_value(phx_module_find_param(cl, "bias"));
        double av[6], cur[6], nxt[6];
        for (int i = 0; i < 6; i++) av[i] = cur[i] = linear_at(cl, x1, 3, 3, i / 3, i % 3);
        for (int rep = 0; rep < 1 + three_calls; rep++) {
            for (int i = 0; i < 6; i++) {
                nxt[i] = at(cb, i % 3);
                for (int k = 0; k < 3; k++) nxt[i] += tanh(cur[(i / 3) * 3 + k]) * at(cw, (i % 3) * 3 + k);
            }
            memcpy(cur, nxt, sizeof cur);
        }
        was = phx_set_grad_enabled(grad);
        phx_tensor *py = NULL;
        st = phx_module_forward(pa, x1, &py);
        phx_set_grad_enabled(was);
        int pv = st == PHX_OK;
        for (int i = 0; pv && i < 6; i++) pv = fabs(at(py, i) - av[i] * cur[i]) < 1e-5;
        ok(pv,
           "a forward-only parent using %s calls of its Linear child, grad mode %s, no scope: a * b right "
           "(%g, expected %g; %s)",
           three_calls ? "three" : "two", grad ? "on" : "off", at(py, 0), av[0] * cur[0], st ? phx_last_error() : "ok");
        phx_module_free(pa);
    }

    /* 31. DataParallel in a scope, batches of 2, 1, 2 rows: the first
     * output (gathered) stays intact through the one-replica call */
    s = phx_scope_begin();
    phx_module *dlin = phx_linear_new(3, 2, true, NULL);
    phx_module *dp3 = phx_dp_new(dlin, dd, 2, NULL);
    phx_tensor *xone = input(1, 3, 7.0), *dy1 = NULL, *dy2 = NULL, *dy3 = NULL;
    double d0 = linear_at(dlin, x1, 3, 2, 1, 1);
    st = dp3 ? phx_module_forward(dp3, x1, &dy1) : PHX_EINVAL;
    if (st == PHX_OK) st = phx_module_forward(dp3, xone, &dy2);
    if (st == PHX_OK) st = phx_module_forward(dp3, x2, &dy3);
    ok(st == PHX_OK && fabs(at(dy1, 3) - d0) < 1e-5 && fabs(at(dy3, 3) - linear_at(dlin, x2, 3, 2, 1, 1)) < 1e-5,
       "DataParallel(2) in a scope, batches of 2, 1, 2 rows: the first output intact (%g, expected %g; %s)", at(dy1, 3),
       d0, st ? phx_last_error() : "ok");
    phx_scope_end(s);
    phx_module_free(dp3), phx_module_free(dlin), phx_tensor_free(xone);

    /* 32. a hand-written parent calling its child twice, 40 times in one
     * scope (an evaluation epoch), grad mode off: the child keeps one
     * earlier output itself, so nothing is allocated once warm (with grad
     * mode on the scope keeps each pending output until it ends) */
    for (int grad = 0; grad < 1; grad++) {
        phx_module *hc = phx_linear_new(3, 2, true, NULL);
        two_in hti = {hc, x2};
        phx_module *hp = phx_module_new(&hw_two_vt, &hti);
        phx_module_add_child(hp, "c", hc);
        was = phx_set_grad_enabled(grad);
        s = phx_scope_begin();
        int hok = 1;
        for (int it = 0; it < 40; it++) {
            if (it == 10) warm = phx_alloc_count();
            phx_tensor *hy = NULL;
            hok = hok && phx_module_forward(hp, x1, &hy) == PHX_OK &&
                fabs(at(hy, 3) - linear_at(hc, x2, 3, 2, 1, 1)) < 1e-5;
        }
        uint64_t grew = phx_alloc_count() - warm;
        phx_scope_end(s);
        phx_set_grad_enabled(was);
        ok(hok && grew == 0,
           "a hand-written parent calling its child twice, 40 times in one scope, grad mode %s: no allocation in "
           "calls 10-39 (%llu)",
           grad ? "on" : "off", (unsigned long long)grew);
        phx_module_free(hp);
    }

    /* 33. a layer tied between a Sequential and its parent, grad mode
     * off: y = Sequential(C)(x1) * C(x2), both calls' values */
    phx_module *tc2 = phx_linear_new(3, 2, true, NULL), *tseq = phx_sequential_new();
    phx_sequential_add(tseq, tc2);
    two_in tti = {tc2, x2};
    phx_module *tied = phx_module_new(&tied_vt, &tti);
    phx_module_add_child(tied, "p", tseq);
    was = phx_set_grad_enabled(false);
    phx_tensor *ty2 = NULL;
    st = phx_module_forward(tied, x1, &ty2);
    phx_set_grad_enabled(was);
    int tv2 = st == PHX_OK;
    for (int i = 0; tv2 && i < 4; i++)
        tv2 = fabs(at(ty2, i) - linear_at(tc2, x1, 3, 2, i / 2, i % 2) * linear_at(tc2, x2, 3, 2, i / 2, i % 2)) < 1e-5;
    ok(tv2, "grad mode off: Sequential(C)(x1) * C(x2) in a forward-only parent: both calls' values (%s)",
       st ? phx_last_error() : "ok");
    phx_module_free(tied);

    phx_tensor_free(x1), phx_tensor_free(x2), phx_tensor_free(x3);
    return done_testing();
}
