/* Modules in the recorded graph: a forward-only module made of built-in
 * children gives the same gradients, bit for bit, as the same layers in a
 * Sequential differentiated by their hand-written backward; parameters
 * are announced once each; a steady-state step allocates nothing; the
 * graph refuses a second backward. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

typedef struct block {
    phx_module *l1, *act, *l2;
} block;

static phx_status block_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    block *b = phx_module_ctx(self);
    phx_tensor *h = NULL, *a = NULL;
    phx_status st = phx_module_forward(b->l1, x, &h);
    if (!st) st = phx_module_forward(b->act, h, &a);
    if (!st) st = phx_module_forward(b->l2, a, y);
    return st;
}

static void block_free(phx_module *self)
{
    free(phx_module_ctx(self));
}

static const phx_module_vtable block_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "Block",
    .forward = block_forward,
    .free = block_free,
};

static phx_module *block_new(uint64_t seed)
{
    phx_rng *rng = phx_rng_new(seed);
    block *b = calloc(1, sizeof *b);
    phx_module *m = phx_module_new(&block_vt, b);
    b->l1 = phx_linear_new(5, 7, true, rng);
    b->act = phx_relu_new();
    b->l2 = phx_linear_new(7, 3, true, rng);
    phx_module_add_child(m, "l1", b->l1);
    phx_module_add_child(m, "act", b->act);
    phx_module_add_child(m, "l2", b->l2);
    phx_rng_free(rng);
    return m;
}

static phx_module *seq_new(uint64_t seed)
{
    phx_rng *rng = phx_rng_new(seed);
    phx_module *m = phx_sequential_new();
    phx_sequential_add(m, phx_linear_new(5, 7, true, rng));
    phx_sequential_add(m, phx_relu_new());
    phx_sequential_add(m, phx_linear_new(7, 3, true, rng));
    phx_rng_free(rng);
    return m;
}

static int ready_count;
static void on_ready(phx_param *p, void *user)
{
    (void)p, (void)user;
    ready_count++;
}

static int same_tensor(const phx_tensor *a, const phx_tensor *b)
{
    if (!a || !b || phx_tensor_numel(a) != phx_tensor_numel(b)) return 0;
    return !memcmp(phx_tensor_data(a), phx_tensor_data(b), phx_tensor_nbytes(a));
}

int main(void)
{
    plan(12);
    int64_t xs[2] = {4, 5}, ys[2] = {4, 3};
    phx_rng *rng = phx_rng_new(11);
    phx_tensor *x = phx_tensor_new(PHX_F32, 2, xs, phx_cpu()), *dy = phx_tensor_new(PHX_F32, 2, ys, phx_cpu());
    phx_rng_normal(rng, x, 0, 1);
    phx_rng_normal(rng, dy, 0, 1);

    phx_module *fo = block_new(3), *sq = seq_new(3);
    phx_module_set_grad_hook(fo, on_ready, NULL);
    phx_tensor *y1 = NULL, *y2 = NULL, *dx1 = NULL, *dx2 = NULL;
    ok(phx_module_forward(fo, x, &y1) == PHX_OK && phx_module_forward(sq, x, &y2) == PHX_OK, "both forwards run: %s",
       phx_last_error());
    ok(same_tensor(y1, y2), "forward-only block and Sequential give the same output");
    ok(phx_tensor_grad_fn(y1) && !strcmp(phx_tensor_grad_fn(y1), "Linear"),
       "the block's output was made by the Linear node (grad_fn %s)", phx_tensor_grad_fn(y1));
    ready_count = 0;
    ok(phx_module_backward(fo, dy, &dx1) == PHX_OK && phx_module_backward(sq, dy, &dx2) == PHX_OK,
       "both backwards run: %s", phx_last_error());
    int same = 1;
    for (size_t i = 0; i < phx_module_num_params(fo); i++)
        same &= same_tensor(phx_param_grad(phx_module_param(fo, i)), phx_param_grad(phx_module_param(sq, i)));
    ok(same && phx_module_num_params(fo) == 4, "all 4 parameter gradients equal bit for bit");
    ok(same_tensor(dx1, dx2), "dx equals the Sequential's");
    ok(ready_count == 4, "each parameter announced once (%d)", ready_count);

    /* The recorded graph is released by backward. */
    ok(phx_module_backward(fo, dy, NULL) == PHX_ESTATE && strstr(phx_last_error(), "freed"),
       "a second backward through the same graph is refused: %s", phx_last_error());

    /* Steady state: forward + backward + SGD allocate nothing. */
    phx_optimizer *opt = phx_sgd_new(fo, NULL);
    uint64_t before = 0;
    int failed = 0;
    for (int s = 1; s <= 8 && !failed; s++) {
        if (s == 4) before = phx_alloc_count();
        phx_tensor *y = NULL;
        failed = phx_optimizer_zero_grad(opt) != PHX_OK || phx_module_forward(fo, x, &y) != PHX_OK ||
            phx_module_backward(fo, dy, NULL) != PHX_OK || phx_optimizer_step(opt) != PHX_OK;
    }
    uint64_t after = phx_alloc_count();
    ok(!failed, "8 training steps run: %s", phx_last_error());
    ok(after == before, "steps 4-8 allocate nothing (%llu allocations)", (unsigned long long)(after - before));

    /* Grad mode off: nothing recorded, backward refused. */
    bool prev = phx_set_grad_enabled(false);
    phx_tensor *y3 = NULL;
    phx_module_forward(fo, x, &y3);
    phx_set_grad_enabled(prev);
    ok(y3 && !phx_tensor_requires_grad(y3) && !phx_tensor_grad_fn(y3), "no_grad: the output has no history");
    ok(phx_module_backward(fo, dy, NULL) == PHX_ESTATE, "no_grad: backward refused: %s", phx_last_error());

    phx_optimizer_free(opt);
    phx_module_free(fo);
    phx_module_free(sq);
    phx_tensor_free(x);
    phx_tensor_free(dy);
    phx_rng_free(rng);
    return done_testing();
}
