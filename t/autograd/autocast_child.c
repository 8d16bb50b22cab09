/* An f32 tensor with a history into a built-in child of a forward-only
 * module under fp16 or bf16 (a first-layer reshape as doc/guide/data.md
 * shows it, or a mean pool, which autocast runs in f32): the child casts
 * its input to the compute dtype, and its input gradient goes back
 * through that cast to f32, as a recorded phx_to_dtype does. The backward
 * used to fail ("the gradient of input 0 is f16 (5, 8), expected the
 * input's f32"). Checked against the same model with the cast written out
 * (phx_to_dtype before the child): the parameter gradients and the
 * module's input gradient are the same bits, and dx is f32. */
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

enum { RESHAPE, MEAN };
static int form, explicit_cast;

static phx_tensor *child(phx_module *m, const char *name, const phx_tensor *x)
{
    phx_tensor *y = NULL;
    return x && phx_module_forward(phx_module_find_child(m, name), x, &y) == PHX_OK ? y : NULL;
}

/* x (5, 2, 8): reshape to (10, 8) or mean over dim 1 to (5, 8); fc1, fc2 */
static phx_status two_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    int64_t rows[2] = {-1, 8};
    int dim = 1;
    phx_tensor *h = form == RESHAPE ? phx_reshape(x, 2, rows) : phx_mean(x, 1, &dim, false);
    if (h && explicit_cast) h = phx_to_dtype(h, phx_module_compute_dtype(self));
    *y = child(self, "fc2", child(self, "fc1", h));
    return *y ? PHX_OK : PHX_EINVAL;
}

static void no_ctx(phx_module *self)
{
    (void)self;
}

static const phx_module_vtable two_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE, .type_name = "Two", .forward = two_forward, .free = no_ctx};

/* forward, backward with dy = 1 (as the output's dtype), the gradients of
 * every parameter and of x into g (f32 values); PHX_OK or the status */
static phx_status run(phx_precision *p, const phx_tensor *x, float *g, size_t *n, phx_dtype *dx_dtype)
{
    phx_rng *rng = phx_rng_new(5);
    phx_module *m = phx_module_new(&two_vt, NULL);
    phx_module_add_child(m, "fc1", phx_linear_new(8, 4, true, rng));
    phx_module_add_child(m, "fc2", phx_linear_new(4, 3, true, rng));
    phx_rng_free(rng);
    phx_status st = phx_module_set_precision(m, p);
    phx_tensor *y = NULL, *dx = NULL, *dy = NULL;
    if (st == PHX_OK) st = phx_module_forward(m, x, &y);
    if (st == PHX_OK) {
        int64_t shape[2] = {phx_tensor_dim(y, 0), phx_tensor_dim(y, 1)};
        dy = phx_full(2, shape, 1.0, phx_tensor_dtype(y), phx_cpu());
        st = dy ? phx_module_backward(m, dy, &dx) : PHX_ENOMEM;
    }
    *n = 0;
    for (size_t i = 0; st == PHX_OK && i < phx_module_num_params(m); i++) {
        phx_tensor *gr = phx_param_grad(phx_module_param(m, i));
        st = phx_tensor_to_host(gr, g + *n);
        *n += (size_t)phx_tensor_numel(gr);
    }
    if (st == PHX_OK && !dx) st = PHX_EINTERNAL;
    if (st == PHX_OK) {
        *dx_dtype = phx_tensor_dtype(dx);
        phx_tensor *wide = phx_to_dtype(dx, PHX_F32);
        st = wide ? phx_tensor_to_host(wide, g + *n) : PHX_ENOMEM;
        *n += (size_t)phx_tensor_numel(dx);
        phx_tensor_free(wide);
    }
    phx_tensor_free(dy);
    phx_module_free(m);
    return st;
}

int main(void)
{
    plan(8);
    phx_rng *rng = phx_rng_new(9);
    int64_t xs[3] = {5, 2, 8};
    phx_tensor *x = phx_randn(3, xs, rng, PHX_F32, phx_cpu());
    phx_rng_free(rng);
    const char *names[2] = {"fp16", "bf16"}, *forms[2] = {"a reshape", "a mean"};
    for (int pi = 0; pi < 2; pi++) {
        phx_precision *p = NULL;
        if (phx_precision_new(names[pi], &p) != PHX_OK) {
            skip(4, "the precision policy plugin is missing");
            continue;
        }
        for (form = RESHAPE; form <= MEAN; form++) {
            float got[256], want[256];
            size_t ng = 0, nw = 0;
            phx_dtype dt = PHX_F16, dtw = PHX_F16;
            explicit_cast = 0;
            phx_status st = run(p, x, got, &ng, &dt);
            ok(st == PHX_OK && dt == PHX_F32, "%s: %s into fc1: backward runs, dx is f32 (%s)", names[pi], forms[form],
               st ? phx_last_error() : phx_dtype_name(dt));
            explicit_cast = 1;
            phx_status sw = run(p, x, want, &nw, &dtw);
            ok(st == PHX_OK && sw == PHX_OK && ng == nw && ng > 0 && !memcmp(got, want, ng * sizeof *got),
               "%s: %s: the %zu gradients are the bits of the model with phx_to_dtype written out", names[pi],
               forms[form], ng);
        }
        phx_precision_free(p);
    }
    phx_tensor_free(x);
    return done_testing();
}
