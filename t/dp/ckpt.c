/* Checkpoints through the DataParallel wrapper move freely:
 *  - the wrapper's parameter names are the model's ("0.weight", no "module.");
 *  - PyTorch's DataParallel state_dict (t/ref/torch_ckpt.safetensors,
 *    "module." keys, from bench/torch/ckpt_interop.py) loads into the
 *    wrapper, and the replicas then compute torch's output for the stored
 *    input (t/ref/torch_ckpt_io.safetensors), batch 5 split 2+2+1;
 *  - after training through the wrapper, saving through it writes exactly
 *    the model's keys, which load into an unwrapped model (bitwise) and into
 *    PyTorch's plain model (load_state_dict strict; skipped without torch). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

static phx_module *model(uint64_t seed)
{
    phx_rng *r = phx_rng_new(seed);
    phx_module *m = phx_sequential_new();
    phx_sequential_add(m, phx_linear_new(10, 8, true, r));
    phx_sequential_add(m, phx_tanh_new());
    phx_sequential_add(m, phx_linear_new(8, 3, true, r));
    phx_rng_free(r);
    return m;
}

static double max_diff(const phx_tensor *a, const float *b)
{
    double e = 0;
    for (int64_t i = 0; i < phx_tensor_numel(a); i++) e = fmax(e, fabs(((const float *)phx_tensor_data(a))[i] - b[i]));
    return e;
}

static int same_params(phx_module *a, phx_module *b)
{
    if (phx_module_num_params(a) != phx_module_num_params(b)) return 0;
    for (size_t i = 0; i < phx_module_num_params(a); i++) {
        phx_tensor *x = phx_param_value(phx_module_param(a, i)), *y = phx_param_value(phx_module_param(b, i));
        if (!phx_tensor_same_shape(x, y) || memcmp(phx_tensor_data(x), phx_tensor_data(y), phx_tensor_nbytes(x)))
            return 0;
    }
    return 1;
}

int main(void)
{
    const char *src = getenv("top_srcdir") ? getenv("top_srcdir") : ".";
    char ck[1024], io[1024], dir[] = "/tmp/phx-dp-ckpt-XXXXXX", mine[1100];
    snprintf(ck, sizeof ck, "%s/t/ref/torch_ckpt.safetensors", src);
    snprintf(io, sizeof io, "%s/t/ref/torch_ckpt_io.safetensors", src);
    plan(12);

    phx_module *m = model(1);
    phx_device devs[3] = {phx_cpu(), phx_cpu(), phx_cpu()};
    phx_module *dp = phx_dp_new(m, devs, 3, NULL);
    int names_ok = dp && phx_module_num_params(dp) == phx_module_num_params(m);
    for (size_t i = 0; names_ok && i < phx_module_num_params(m); i++)
        names_ok = phx_module_param(dp, i) == phx_module_param(m, i) &&
            strcmp(phx_module_param_name(dp, i), phx_module_param_name(m, i)) == 0;
    ok(names_ok, "the wrapper lists the model's parameters under the model's names");
    is_str(dp ? phx_module_param_name(dp, 0) : NULL, "0.weight", "first name is 0.weight, no module. prefix");

    /* PyTorch -> wrapper */
    ok(phx_checkpoint_load(ck, dp, NULL, NULL) == PHX_OK,
       "torch DataParallel checkpoint (module. keys) loads into the wrapper");
    char **names;
    phx_tensor **ts;
    size_t n = 0;
    phx_tensor *x = NULL, *yt = NULL, *y = NULL;
    if (phx_safetensors_read(io, &names, &ts, &n) == PHX_OK)
        for (size_t i = 0; i < n; i++) {
            if (!strcmp(names[i], "x")) x = ts[i];
            if (!strcmp(names[i], "y")) yt = ts[i];
        }
    ok(x && yt && phx_module_forward(dp, x, &y) == PHX_OK, "forward of torch's input (5 rows over 3 replicas)");
    double e = y && yt ? max_diff(y, phx_tensor_data(yt)) : INFINITY;
    ok(e <= 1e-6, "the replicas compute torch's output (max abs diff %.2e)", e);

    /* Train a little through the wrapper, then save through it. */
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.momentum = 0.5;
    phx_optimizer *opt = phx_sgd_new(dp, &so);
    phx_loss *loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    phx_tensor *target = phx_tensor_zeros(PHX_F32, 2, phx_tensor_shape(yt), phx_cpu());
    int trained = opt && loss && target;
    for (int s = 0; s < 3 && trained; s++) {
        float l;
        trained = !phx_optimizer_zero_grad(opt) && !phx_module_forward(dp, x, &y) &&
            !phx_loss_forward(loss, y, target, &l) && !phx_module_backward(dp, phx_loss_grad(loss), NULL) &&
            !phx_optimizer_step(opt);
    }
    ok(trained && mkdtemp(dir) != NULL, "3 SGD steps through the wrapper");
    snprintf(mine, sizeof mine, "%s/dp.safetensors", dir);
    ok(phx_checkpoint_save(mine, dp, NULL, NULL, NULL, 0) == PHX_OK, "save through the wrapper");
    char **kn;
    phx_tensor **kt;
    size_t kc = 0;
    int keys_ok = phx_safetensors_read(mine, &kn, &kt, &kc) == PHX_OK && kc == phx_module_num_params(m);
    for (size_t i = 0; keys_ok && i < kc; i++) keys_ok = phx_module_find_param(m, kn[i]) != NULL;
    ok(keys_ok, "the file's keys are exactly the model's names (%zu keys)", kc);
    if (kc) phx_safetensors_free(kn, kt, kc);

    phx_module *plain = model(2);
    ok(phx_checkpoint_load(mine, plain, NULL, NULL) == PHX_OK && same_params(plain, m),
       "it loads into an unwrapped model: parameters bitwise equal");

    /* wrapper -> PyTorch */
    phx_tensor *yw = NULL;
    phx_module_forward(dp, x, &yw);
    const char *py = getenv("TORCH_PYTHON") ? getenv("TORCH_PYTHON") : "/usr/bin/python3";
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' -c 'import torch' >/dev/null 2>&1", py);
    if (system(cmd) != 0) {
        skip(3, "python3-torch is not installed");
    } else {
        snprintf(cmd, sizeof cmd, "'%s' '%s/bench/torch/ckpt_interop.py' read '%s' '%s'", py, src, mine, io);
        FILE *p = popen(cmd, "r");
        char line[256];
        float got[15];
        int k = 0;
        while (p && fgets(line, sizeof line, p))
            if (strncmp(line, "reader:", 7) && strncmp(line, "meta:", 5) && k < 15) got[k++] = strtof(line, NULL);
        int rc = p ? pclose(p) : -1;
        ok(rc == 0, "PyTorch loads the wrapper's checkpoint with load_state_dict(strict=True)");
        is_int(k, 15, "PyTorch prints 5 x 3 outputs");
        double ew = yw && k == 15 ? max_diff(yw, got) : INFINITY;
        ok(ew <= 1e-6, "PyTorch's output with it equals the wrapper's (max abs diff %.2e)", ew);
    }
    unlink(mine);
    rmdir(dir);
    if (n) phx_safetensors_free(names, ts, n);
    phx_tensor_free(target);
    phx_loss_free(loss);
    phx_optimizer_free(opt);
    phx_module_free(plain);
    phx_module_free(dp);
    phx_module_free(m);
    return done_testing();
}
