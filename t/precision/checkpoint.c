/* The scaler's state (scale, growth tracker) survives phx_checkpoint_save
 * and phx_checkpoint_load; a checkpoint with an invalid scale is refused
 * and changes nothing; the state of a scaler that does not scale (fp32)
 * is refused by one that does. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

int main(void)
{
    plan(15);
    char dir[] = "/tmp/phx-amp-ckpt-XXXXXX", path[256], bad[256];
    if (!mkdtemp(dir)) {
        printf("Bail out! mkdtemp\n");
        return 1;
    }
    snprintf(path, sizeof path, "%s/a.safetensors", dir);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);

    phx_precision *fp16 = NULL, *fp32 = NULL;
    if (phx_precision_new("fp16", &fp16) || phx_precision_new("fp32", &fp32)) {
        printf("Bail out! %s\n", phx_last_error());
        return 1;
    }
    phx_module *m = phx_linear_new(3, 2, true, NULL);
    phx_scaler_opts o = {sizeof(phx_scaler_opts), 0, 3.0, 0.3, 0};
    phx_scaler *s = phx_scaler_new(fp16, &o);
    /* 65536 * 0.3 in f32: not a power of two, must come back bit-exact. */
    const double odd = (double)(float)(65536.0 * 0.3);
    ok(phx_scaler_set_state(s, odd, 1234) == PHX_OK, "scaler state set to (%.10g, 1234)", odd);
    phx_status st = phx_checkpoint_save(path, m, NULL, s, NULL, 0);
    is_int(st, PHX_OK, "checkpoint saved with the scaler");
    if (st) diag("%s", phx_last_error());

    char buf[64];
    ok(phx_checkpoint_meta(path, "scaler.scale", buf, sizeof buf) == PHX_OK && strtod(buf, NULL) == odd,
       "metadata scaler.scale = '%s'", buf);
    ok(phx_checkpoint_meta(path, "scaler.growth_tracker", buf, sizeof buf) == PHX_OK && atoll(buf) == 1234,
       "metadata scaler.growth_tracker = '%s'", buf);

    phx_scaler *s2 = phx_scaler_new(fp16, &o);
    st = phx_checkpoint_load(path, m, NULL, s2);
    is_int(st, PHX_OK, "checkpoint loaded into a fresh scaler");
    ok(phx_scaler_get_scale(s2) == odd, "scale restored bit-exact (%.10g)", phx_scaler_get_scale(s2));
    is_int(phx_scaler_growth_tracker(s2), 1234, "growth tracker restored");

    /* Loading into a non-scaling policy's scaler: accepted, still scale 1. */
    phx_scaler *s32 = phx_scaler_new(fp32, NULL);
    ok(phx_checkpoint_load(path, m, NULL, s32) == PHX_OK && phx_scaler_get_scale(s32) == 1.0,
       "an fp32 scaler loads it and keeps scale 1");
    ok(phx_checkpoint_load(path, m, NULL, NULL) == PHX_OK, "the checkpoint loads without a scaler too");
    ok(phx_checkpoint_meta(path, "scaler.enabled", buf, sizeof buf) == PHX_OK && !strcmp(buf, "1"),
       "metadata scaler.enabled = '%s' (an fp16 scaler)", buf);

    /* An fp32 run's scaler state (scale 1) into an fp16 scaler: refused, as
     * PyTorch's GradScaler refuses a disabled scaler's state; it would
     * have set the scale to 1. Without the scaler it loads. */
    char p32[300];
    snprintf(p32, sizeof p32, "%s/fp32.safetensors", dir);
    st = phx_checkpoint_save(p32, m, NULL, s32, NULL, 0);
    char en[8] = "";
    phx_checkpoint_meta(p32, "scaler.enabled", en, sizeof en);
    phx_status l16 = st == PHX_OK ? phx_checkpoint_load(p32, m, NULL, s2) : st;
    ok(st == PHX_OK && !strcmp(en, "0") && l16 == PHX_EIO && strstr(phx_last_error(), "does not scale") &&
           phx_scaler_get_scale(s2) == odd,
       "an fp32 run's scaler state into an fp16 scaler: refused, the scale kept (%s)", phx_last_error());
    ok(phx_checkpoint_load(p32, m, NULL, NULL) == PHX_OK, "... and it loads without the scaler");
    unlink(p32);

    /* A scale of -5 in the metadata: refused, nothing changed. */
    const char *names[2] = {"weight", "bias"};
    phx_tensor *ts[2] = {phx_param_value(phx_module_find_param(m, "weight")),
                         phx_param_value(phx_module_find_param(m, "bias"))};
    float w_before[6], w_after[6], zeros[6] = {0};
    phx_tensor_to_host(ts[0], w_before);
    int64_t shape[2] = {2, 3};
    phx_tensor *zw = phx_tensor_from_data(PHX_F32, 2, shape, zeros);
    phx_tensor *zts[2] = {zw, ts[1]};
    phx_meta meta[2] = {{"scaler.scale", "-5"}, {"scaler.growth_tracker", "3"}};
    st = phx_safetensors_write(bad, names, zts, 2, meta, 2);
    ok(st == PHX_OK, "wrote a checkpoint whose scaler.scale is -5");
    st = phx_checkpoint_load(bad, m, NULL, s2);
    ok(st != PHX_OK && phx_scaler_get_scale(s2) == odd && phx_scaler_growth_tracker(s2) == 1234,
       "loading it fails (%s) and leaves the scaler as it was", phx_status_name(st));
    phx_tensor_to_host(ts[0], w_after);
    ok(memcmp(w_before, w_after, sizeof w_before) == 0, "and leaves the weights as they were");
    (void)names;

    phx_tensor_free(zw);
    phx_scaler_free(s);
    phx_scaler_free(s2);
    phx_scaler_free(s32);
    phx_module_free(m);
    phx_precision_free(fp16);
    phx_precision_free(fp32);
    unlink(path);
    unlink(bad);
    rmdir(dir);
    return done_testing();
}
