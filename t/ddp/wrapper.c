/* Calls made on a DDP wrapper (or on its model after wrapping) either act
 * on the model or refuse with a message that says what to do; none is
 * silently ignored. Local checks: a world of one (comm NULL) suffices. */
#include "t/ddp-util.h"

static phx_module *bn_mlp(void)
{
    phx_rng *r = phx_rng_new(5);
    phx_module *m = phx_sequential_new();
    phx_sequential_add(m, phx_linear_new(4, 6, true, r));
    phx_sequential_add(m, phx_batchnorm1d_new(6, 1e-5f, 0.1f, true, true));
    phx_sequential_add(m, phx_tanh_new());
    phx_sequential_add(m, phx_linear_new(6, 2, true, r));
    phx_rng_free(r);
    return m;
}

static phx_status fwd(phx_module *m)
{
    phx_tensor *x = tu_new2(4, 4), *y; /* 2 rows per DataParallel replica: BatchNorm needs 2 */
    phx_tensor_fill(x, 0.5);
    phx_status st = phx_module_forward(m, x, &y);
    phx_tensor_free(x);
    return st;
}

static void hook(phx_param *p, void *user)
{
    (void)p, (void)user;
}

static void test_precision(void)
{
    phx_precision *bf16 = NULL;
    if (phx_precision_new("bf16", &bf16) != PHX_OK) {
        skip(4, "no bf16 precision plugin");
        return;
    }
    phx_module *m = bn_mlp();
    phx_module *ddp = phx_ddp_new(m, NULL, NULL);
    is_int(phx_module_set_precision(ddp, bf16), PHX_OK, "phx_module_set_precision on the DDP wrapper");
    is_int(fwd(ddp), PHX_OK, "... then a forward");
    is_int(phx_module_compute_dtype(m), PHX_BF16, "... acts on the model (its compute dtype is bf16)");
    phx_module_free(ddp);
    phx_module *ddp2 = phx_ddp_new(m, NULL, NULL);
    is_int(phx_module_compute_dtype(ddp2), PHX_BF16, "a wrapper reports its model's compute dtype");
    phx_module_free(ddp2);
    phx_module_free(m);
    phx_precision_free(bf16);
}

/* make_trouble breaks something; the next forward must refuse naming want. */
static void refuses(const char *what, void (*make_trouble)(phx_module *ddp, phx_module *m), const char *want)
{
    phx_module *m = bn_mlp();
    phx_module *ddp = phx_ddp_new(m, NULL, NULL);
    ok(ddp && fwd(ddp) == PHX_OK, "%s: a forward before it works", what);
    make_trouble(ddp, m);
    is_int(fwd(ddp), PHX_ESTATE, "%s: the next forward refuses", what);
    like(phx_last_error(), want, "%s: saying what to do", what);
    phx_module_free(ddp);
    phx_module_free(m);
}

static void set_hook(phx_module *ddp, phx_module *m)
{
    (void)m;
    phx_module_set_grad_hook(ddp, hook, NULL);
}

static void set_grad(phx_module *ddp, phx_module *m)
{
    (void)ddp;
    phx_param *p = phx_module_param(m, 0);
    phx_tensor *g =
        phx_tensor_zeros(PHX_F32, phx_tensor_ndim(phx_param_grad(p)), phx_tensor_shape(phx_param_grad(p)), phx_cpu());
    phx_param_set_grad(p, g);
    phx_tensor_free(g);
}

static void add_child(phx_module *ddp, phx_module *m)
{
    (void)m;
    phx_module_add_child(ddp, "head", phx_relu_new());
}

static void test_sync_batchnorm(void)
{
    phx_module *m = bn_mlp();
    phx_module *ddp = phx_ddp_new(m, NULL, NULL);
    size_t n = 0;
    is_int(phx_sync_batchnorm_convert(ddp, NULL, &n), PHX_OK, "phx_sync_batchnorm_convert on the DDP wrapper");
    is_int(n, 1, "... converts the model's BatchNorm");
    is_str(phx_module_type(phx_module_child(m, 1)), "SyncBatchNorm", "... which is a SyncBatchNorm now");
    is_int(fwd(ddp), PHX_OK, "... and the wrapper runs it");
    phx_module_free(ddp);
    phx_module_free(m);

    m = bn_mlp();
    phx_device devs[2] = {phx_cpu(), phx_cpu()};
    phx_module *dp = phx_dp_new(m, devs, 2, NULL);
    n = 7;
    is_int(phx_sync_batchnorm_convert(dp, NULL, &n), PHX_EINVAL,
           "phx_sync_batchnorm_convert on a DataParallel wrapper");
    like(phx_last_error(), "call phx_sync_batchnorm_convert on the model before wrapping it", "... says what to do");
    is_str(phx_module_type(phx_module_child(m, 1)), "BatchNorm1d", "... and converts nothing");
    phx_module_free(dp);
    phx_module_free(m);
}

static void test_dp_add_child(void)
{
    phx_module *m = bn_mlp();
    phx_device devs[2] = {phx_cpu(), phx_cpu()};
    phx_module *dp = phx_dp_new(m, devs, 2, NULL);
    ok(dp && fwd(dp) == PHX_OK, "DataParallel: a forward works");
    phx_module_add_child(dp, "head", phx_relu_new());
    is_int(fwd(dp), PHX_ESTATE, "DataParallel: after phx_module_add_child on the wrapper the forward refuses");
    like(phx_last_error(), "add it to the model before phx_dp_new", "... saying what to do");
    phx_module_free(dp);
    phx_module_free(m);
}

static void test_wrap_twice(void)
{
    phx_module *m = bn_mlp();
    phx_device devs[2] = {phx_cpu(), phx_cpu()};
    phx_module *dp = phx_dp_new(m, devs, 2, NULL);
    ok(phx_ddp_new(m, NULL, NULL) == NULL, "phx_ddp_new of a model a DataParallel wrapper holds is refused");
    like(phx_last_error(), "wrap a model once", "... saying so");
    ok(phx_ddp_new(dp, NULL, NULL) == NULL, "phx_ddp_new of a DataParallel wrapper is refused");
    phx_module_free(dp);
    phx_module *ddp = phx_ddp_new(m, NULL, NULL);
    ok(ddp != NULL, "once the other wrapper is freed the model wraps");
    ok(phx_module_clone(ddp) == NULL, "phx_module_clone of the wrapper is refused");
    like(phx_last_error(), "DistributedDataParallel has no clone slot", "... naming the wrapper");
    phx_module_free(ddp);
    phx_module_free(m);
}

int main(void)
{
    plan(4 + 3 * 3 + 7 + 3 + 6);
    test_precision();
    refuses("phx_module_set_grad_hook on the wrapper", set_hook, "the wrapper all-reduces through that hook");
    refuses("phx_param_set_grad on the model's parameter (what phx_module_to does)", set_grad,
            "move the model with phx_module_to before phx_ddp_new");
    refuses("phx_module_add_child on the wrapper", add_child, "add it to the model before phx_ddp_new");
    test_sync_batchnorm();
    test_dp_add_child();
    test_wrap_twice();
    return done_testing();
}
