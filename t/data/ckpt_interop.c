/* Checkpoints across PyTorch and Phalanx. (1) t/ref/torch_ckpt.safetensors
 * was written from torch's DataParallel state_dict ("module." keys) by
 * bench/torch/ckpt_interop.py (by hand, and through the safetensors
 * package as torch_ckpt_pkg.safetensors): both load, and the model then
 * computes torch's output for the stored input; the same state_dict saved
 * in float16, bfloat16 and float64 converts into the f32 model as torch's
 * load_state_dict does (output equal to torch's after its own conversion).
 * (2) A checkpoint Phalanx writes (with optimizer state) loads into torch
 * with load_state_dict(strict) through the same script once "optim.*" keys
 * are dropped; a model-only export loads without dropping anything --
 * skipped when $TORCH_PYTHON lacks torch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

static phx_module *model(void)
{
    phx_module *m = phx_sequential_new();
    phx_sequential_add(m, phx_linear_new(10, 8, true, NULL));
    phx_sequential_add(m, phx_tanh_new());
    phx_sequential_add(m, phx_linear_new(8, 3, true, NULL));
    return m;
}

int main(void)
{
    const char *src = getenv("top_srcdir") ? getenv("top_srcdir") : ".";
    char ck[1024], io[1024];
    snprintf(ck, sizeof ck, "%s/t/ref/torch_ckpt.safetensors", src);
    snprintf(io, sizeof io, "%s/t/ref/torch_ckpt_io.safetensors", src);
    plan(19);
    phx_module *m = model();
    ok(phx_checkpoint_load(ck, m, NULL, NULL) == PHX_OK, "torch-written checkpoint with module. keys loads (%s)",
       phx_last_error());
    char **names;
    phx_tensor **ts;
    size_t n;
    phx_safetensors_read(io, &names, &ts, &n);
    phx_tensor *x = NULL, *yt = NULL, *y = NULL;
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(names[i], "x")) x = ts[i];
        if (!strcmp(names[i], "y")) yt = ts[i];
    }
    ok(x && yt && phx_module_forward(m, x, &y) == PHX_OK, "forward on torch's input");
    double e = 0;
    for (int64_t i = 0; y && i < phx_tensor_numel(y); i++)
        e = fmax(e, fabs(((float *)phx_tensor_data(y))[i] - ((float *)phx_tensor_data(yt))[i]));
    ok(y && e < 1e-6, "output equals torch's (max abs diff %.2e)", e);

    /* The same state_dict written by the safetensors package itself. */
    char pkg[1024];
    snprintf(pkg, sizeof pkg, "%s/t/ref/torch_ckpt_pkg.safetensors", src);
    phx_module *m2 = model();
    phx_tensor *y2 = NULL;
    ok(phx_checkpoint_load(pkg, m2, NULL, NULL) == PHX_OK,
       "checkpoint written by safetensors.torch.save_file loads (%s)", phx_last_error());
    e = 0;
    if (x && phx_module_forward(m2, x, &y2) == PHX_OK)
        for (int64_t i = 0; i < phx_tensor_numel(y2); i++)
            e = fmax(e, fabs(((float *)phx_tensor_data(y2))[i] - ((float *)phx_tensor_data(yt))[i]));
    ok(y2 && e < 1e-6, "its output equals torch's (max abs diff %.2e)", e);
    phx_module_free(m2);

    /* F16, BF16 and F64 files convert into f32 parameters. */
    static const char *const convs[] = {"f16", "bf16", "f64"};
    for (int c = 0; c < 3; c++) {
        char cpath[1024], yname[16];
        snprintf(cpath, sizeof cpath, "%s/t/ref/torch_ckpt_%s.safetensors", src, convs[c]);
        snprintf(yname, sizeof yname, "y_%s", convs[c]);
        const phx_tensor *want = NULL;
        for (size_t i = 0; i < n; i++)
            if (!strcmp(names[i], yname)) want = ts[i];
        phx_module *mc = model();
        phx_tensor *yc = NULL;
        ok(phx_checkpoint_load(cpath, mc, NULL, NULL) == PHX_OK, "a %s state_dict loads into the f32 model (%s)",
           convs[c], phx_last_error());
        e = want ? 0 : INFINITY;
        if (want && x && phx_module_forward(mc, x, &yc) == PHX_OK)
            for (int64_t i = 0; i < phx_tensor_numel(yc); i++)
                e = fmax(e, fabs(((float *)phx_tensor_data(yc))[i] - ((const float *)phx_tensor_data(want))[i]));
        ok(yc && e < 1e-6, "its output equals torch's after load_state_dict of the %s file (max abs diff %.2e)",
           convs[c], e);
        phx_module_free(mc);
    }

    /* Phalanx -> torch */
    const char *py = getenv("TORCH_PYTHON") ? getenv("TORCH_PYTHON") : "/usr/bin/python3";
    char cmd[3072];
    snprintf(cmd, sizeof cmd, "'%s' -c 'import torch' >/dev/null 2>&1", py);
    if (system(cmd) != 0) {
        skip(8, "python3-torch is not installed");
        phx_module_free(m);
        phx_safetensors_free(names, ts, n);
        return done_testing();
    }
    phx_optimizer *opt = phx_adam_new(m, NULL);
    phx_loss *l = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    float v;
    for (int s = 0; s < 3; s++) {
        phx_optimizer_zero_grad(opt);
        phx_module_forward(m, x, &y);
        phx_loss_forward(l, y, yt, &v); /* any target will do */
        phx_module_backward(m, phx_loss_grad(l), NULL);
        phx_optimizer_step(opt);
    }
    phx_module_forward(m, x, &y);
    char path[] = "/tmp/phx-interop-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    phx_meta meta[] = {{"written_by", "phalanx"}};
    ok(phx_checkpoint_save(path, m, opt, NULL, meta, 1) == PHX_OK, "Phalanx writes a checkpoint with Adam state");
    snprintf(cmd, sizeof cmd, "'%s' '%s/bench/torch/ckpt_interop.py' read '%s' '%s' 2>&1", py, src, path, io);
    FILE *p = popen(cmd, "r");
    char line[512];
    int vals = 0, steps_ok = 0, wb = 0;
    double worst = 0;
    const float *yv = phx_tensor_data(y);
    while (p && fgets(line, sizeof line, p)) {
        if (!strncmp(line, "reader:", 7) || !strncmp(line, "meta:", 5) || strstr(line, "Error")) {
            diag("torch: %.*s", (int)strcspn(line, "\n"), line);
            steps_ok |= strstr(line, "meta: optim.steps 3") != NULL;
            wb |= strstr(line, "meta: written_by phalanx") != NULL;
            continue;
        }
        if (vals < 15) worst = fmax(worst, fabs(strtod(line, NULL) - yv[vals]));
        vals++;
    }
    int rc = p ? pclose(p) : -1;
    ok(rc == 0, "torch loaded it with load_state_dict(strict=True)");
    is_int(vals, 15, "torch computed the (5, 3) output");
    ok(vals == 15 && worst < 1e-6, "torch's output equals Phalanx's (max abs diff %.2e)", worst);
    ok(steps_ok, "torch sees metadata optim.steps = 3");
    ok(wb, "torch sees the user metadata");
    /* torch refuses the full checkpoint with strict keys (optim.* extra)
     * and takes the model-only export as it is. */
    snprintf(cmd, sizeof cmd, "'%s' '%s/bench/torch/ckpt_interop.py' read-strict '%s' '%s' >/dev/null 2>&1", py, src,
             path, io);
    ok(system(cmd) != 0, "the full checkpoint fails torch's strict load without dropping optim.* keys");
    ok(phx_checkpoint_save_model(path, m) == PHX_OK && system(cmd) == 0,
       "the model-only export loads in torch with strict=True as written");
    unlink(path);
    phx_loss_free(l);
    phx_optimizer_free(opt);
    phx_module_free(m);
    phx_safetensors_free(names, ts, n);
    return done_testing();
}
