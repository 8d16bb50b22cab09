/* A CNN's state_dict across PyTorch and Phalanx (the examples/cnn model,
 * buffers included): (1) t/ref/cnn_state.safetensors, torch's state_dict
 * after three training batches, loads here and the eval output on
 * t/ref/cnn_state_io.safetensors's x equals torch's within 1e-5; (2) a
 * model trained here (running statistics moved, num_batches_tracked 4)
 * saved with phx_checkpoint_save_model loads in torch with strict keys
 * (bench/torch/cnn.py read) and torch's eval output equals ours; skipped
 * when $TORCH_PYTHON lacks torch. Then a state_dict without the buffers
 * is refused naming the missing one, and changes nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "t/gpt-util.h"

static phx_module *cnn(void)
{
    phx_module *m = phx_sequential_new();
    phx_sequential_add(m, phx_conv2d_new(1, 32, 3, 3, NULL, NULL));
    phx_sequential_add(m, phx_batchnorm2d_new(32, 1e-5f, 0.1f, true, true));
    phx_sequential_add(m, phx_relu_new());
    phx_sequential_add(m, phx_maxpool2d_new(2, 0, 0));
    phx_sequential_add(m, phx_conv2d_new(32, 64, 3, 3, NULL, NULL));
    phx_sequential_add(m, phx_batchnorm2d_new(64, 1e-5f, 0.1f, true, true));
    phx_sequential_add(m, phx_relu_new());
    phx_sequential_add(m, phx_maxpool2d_new(2, 0, 0));
    phx_sequential_add(m, phx_flatten_new());
    phx_sequential_add(m, phx_linear_new(64 * 5 * 5, 128, true, NULL));
    phx_sequential_add(m, phx_relu_new());
    phx_sequential_add(m, phx_dropout_new(0.5f, 1));
    phx_sequential_add(m, phx_linear_new(128, 10, true, NULL));
    return m;
}

int main(void)
{
    const char *src = getenv("top_srcdir") ? getenv("top_srcdir") : ".";
    char sd[1024], io[1024];
    snprintf(sd, sizeof sd, "%s/t/ref/cnn_state.safetensors", src);
    snprintf(io, sizeof io, "%s/t/ref/cnn_state_io.safetensors", src);
    gu_file f;
    if (!gu_read(&f, "cnn_state_io.safetensors")) {
        printf("Bail out! %s unreadable\n", io);
        return 1;
    }
    phx_tensor *x = gu_get(&f, "x"), *want = gu_get(&f, "y"), *y = NULL;
    phx_module *m = cnn();
    ok(phx_module_num_params(m) == 12 && phx_module_num_buffers(m) == 6, "12 parameters and 6 buffers");
    ok(phx_checkpoint_load(sd, m, NULL, NULL) == PHX_OK, "torch's state_dict loads (%s)", phx_last_error());
    double t = 0;
    phx_tensor_get(phx_module_find_buffer(m, "1.num_batches_tracked"), 0, &t);
    ok(t == 3, "1.num_batches_tracked is torch's 3 (%g)", t);
    phx_module_train(m, false);
    double e = phx_module_forward(m, x, &y) == PHX_OK ? gu_max_rel(y, want) : INFINITY;
    ok(e <= 1e-5, "eval output equals torch's (%.2g)", e);

    /* a state_dict without buffers: refused, nothing changed */
    phx_module *mlp = phx_sequential_new();
    phx_sequential_add(mlp, phx_linear_new(4, 4, true, NULL));
    char path[] = "/tmp/phx-cnn-state-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    phx_module *bn = phx_sequential_new();
    phx_sequential_add(bn, phx_linear_new(4, 4, true, NULL));
    phx_sequential_add(bn, phx_batchnorm1d_new(4, 1e-5f, 0.1f, true, true));
    phx_checkpoint_save_model(path, bn);
    phx_module *nob = phx_sequential_new();
    phx_sequential_add(nob, phx_linear_new(4, 4, true, NULL));
    phx_sequential_add(nob, phx_batchnorm1d_new(4, 1e-5f, 0.1f, true, false));
    ok(phx_checkpoint_load(path, nob, NULL, NULL) == PHX_EIO && strstr(phx_last_error(), "'1.running_mean'") &&
           strstr(phx_last_error(), "no parameter or buffer"),
       "a file with buffers the model lacks is refused naming one (%s)", phx_last_error());
    phx_checkpoint_save_model(path, nob);
    phx_tensor *rm = phx_module_find_buffer(bn, "1.running_mean");
    phx_tensor_fill(rm, 7.0);
    ok(phx_checkpoint_load(path, bn, NULL, NULL) == PHX_EIO && strstr(phx_last_error(), "buffer '1.running_mean'") &&
           strstr(phx_last_error(), "missing key"),
       "a file without the model's buffers is refused naming the buffer (%s)", phx_last_error());
    double v = 0;
    phx_tensor_get(rm, 0, &v);
    ok(v == 7.0, "... and the model is unchanged");
    phx_module_free(mlp), phx_module_free(bn), phx_module_free(nob);

    /* Phalanx -> torch */
    const char *py = getenv("TORCH_PYTHON") ? getenv("TORCH_PYTHON") : "/usr/bin/python3";
    char cmd[3072];
    snprintf(cmd, sizeof cmd, "'%s' -c 'import torch' >/dev/null 2>&1", py);
    if (system(cmd) != 0) {
        skip(3, "python3-torch is not installed");
    } else {
        phx_module_train(m, true);
        int64_t s[4] = {16, 1, 28, 28};
        phx_tensor *xb = phx_tensor_new(PHX_F32, 4, s, phx_cpu()), *yb;
        phx_rng *r = phx_rng_new(9);
        phx_rng_normal(r, xb, 0.3f, 1.0f);
        phx_module_forward(m, xb, &yb); /* a training forward: running statistics move */
        phx_rng_free(r);
        phx_tensor_free(xb);
        phx_module_train(m, false);
        phx_module_forward(m, x, &y);
        ok(phx_checkpoint_save_model(path, m) == PHX_OK, "Phalanx writes the CNN's state_dict");
        snprintf(cmd, sizeof cmd, "'%s' '%s/bench/torch/cnn.py' read '%s' '%s' 2>&1", py, src, path, io);
        FILE *p = popen(cmd, "r");
        char line[512];
        int vals = 0, tracked = -1;
        double worst = 0;
        float *hy = malloc(40 * sizeof *hy);
        phx_tensor_to_host(y, hy);
        while (p && fgets(line, sizeof line, p)) {
            if (sscanf(line, "tracked %d", &tracked) == 1) continue;
            if (vals < 40) worst = fmax(worst, fabs(strtod(line, NULL) - hy[vals]) / fmax(1.0, fabs(hy[vals])));
            else diag("torch: %s", line);
            vals++;
        }
        int rc = p ? pclose(p) : -1;
        ok(rc == 0 && vals == 40, "torch loads it with load_state_dict(strict=True) and computes (4, 10)");
        ok(worst <= 1e-5 && tracked == 4, "torch's eval output equals Phalanx's (%.2g), num_batches_tracked 4 (%d)",
           worst, tracked);
        free(hy);
    }
    unlink(path);
    phx_module_free(m);
    gu_free(&f);
    return done_testing();
}
