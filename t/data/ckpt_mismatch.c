/* A checkpoint that does not match the model is refused with one message
 * listing every mismatch at once, as torch's load_state_dict does:
 * missing keys (parameters, buffers, optimizer state), unexpected keys,
 * shape and dtype mismatches, a tensor held twice, bad metadata; and the
 * model, its buffers and the optimizer are left bit for bit unchanged. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

static char dir[64];

/* Linear(4, 5) - Tanh - Linear(5, 3) - BatchNorm1d(3): parameters 0.*,
 * 2.*, 3.weight/bias; buffers 3.running_mean/var/num_batches_tracked. */
static phx_module *model(uint64_t seed)
{
    phx_rng *r = phx_rng_new(seed);
    phx_module *m = phx_sequential_new();
    phx_sequential_add(m, phx_linear_new(4, 5, true, r));
    phx_sequential_add(m, phx_tanh_new());
    phx_sequential_add(m, phx_linear_new(5, 3, true, r));
    phx_sequential_add(m, phx_batchnorm1d_new(3, 1e-5f, 0.1f, true, true));
    phx_rng_free(r);
    return m;
}

/* Every byte of m's state_dict, concatenated into a malloc'd buffer. */
static char *state_bytes(phx_module *m, size_t *len)
{
    size_t n = 0, np = phx_module_num_params(m), nb = phx_module_num_buffers(m);
    for (size_t i = 0; i < np; i++) n += phx_tensor_nbytes(phx_param_value(phx_module_param(m, i)));
    for (size_t i = 0; i < nb; i++) n += phx_tensor_nbytes(phx_module_buffer(m, i));
    char *b = malloc(n ? n : 1), *at = b;
    for (size_t i = 0; i < np; i++) {
        phx_tensor *v = phx_param_value(phx_module_param(m, i));
        phx_tensor_to_host(v, at);
        at += phx_tensor_nbytes(v);
    }
    for (size_t i = 0; i < nb; i++) {
        phx_tensor_to_host(phx_module_buffer(m, i), at);
        at += phx_tensor_nbytes(phx_module_buffer(m, i));
    }
    *len = n;
    return b;
}

static phx_tensor *f32(int nd, int64_t a, int64_t b, float v)
{
    int64_t s[2] = {a, b};
    phx_tensor *t = phx_tensor_new(PHX_F32, nd, s, phx_cpu());
    phx_tensor_fill(t, v);
    return t;
}

static void test_model_mismatches(void)
{
    phx_module *m = model(1);
    /* Different running statistics from the file's, so a partial load would show. */
    phx_tensor_fill(phx_module_find_buffer(m, "3.running_mean"), 0.75);
    size_t n0, n1;
    char *before = state_bytes(m, &n0);
    int64_t five = 5;
    phx_tensor *bias_i32 = phx_tensor_new(PHX_I32, 1, &five, phx_cpu());
    phx_tensor_fill(bias_i32, 1.0);
    phx_tensor *nbt = phx_tensor_new(PHX_I64, 0, NULL, phx_cpu()); /* a scalar, as the model's */
    phx_tensor_fill(nbt, 3.0);
    phx_tensor *w2 = f32(2, 3, 5, 0.5f);
    const char *names[] = {"0.weight",    "0.bias",   "2.weight",       "module.2.weight",
                           "3.weight",    "3.bias",   "3.running_mean", "3.num_batches_tracked",
                           "head.weight", "head.bias"};
    phx_tensor *ts[] = {
        f32(2, 4, 5, 1.0f), bias_i32,          w2, w2, f32(1, 3, 1, 2.0f), f32(1, 3, 1, 3.0f), f32(1, 3, 1, -1.0f), nbt,
        f32(2, 2, 3, 4.0f), f32(1, 2, 1, 5.0f)};
    size_t n = sizeof names / sizeof *names;
    char path[128];
    snprintf(path, sizeof path, "%s/mismatch.safetensors", dir);
    ok(phx_safetensors_write(path, names, ts, n, NULL, 0) == PHX_OK, "wrote a checkpoint with 7 problems");
    phx_status st = phx_checkpoint_load(path, m, NULL, NULL);
    const char *e = phx_last_error();
    is_int(st, PHX_EIO, "loading it is PHX_EIO");
    like(e, "(7 problems)", "the message counts every problem");
    like(e, "parameter '2.bias'", "... names the missing parameter");
    like(e, "buffer '3.running_var'", "... and the missing buffer");
    like(e, "'head.weight', 'head.bias'", "... both unexpected keys");
    like(e, "tensor '0.weight' has shape (4, 5), parameter '0.weight' has shape (5, 4)", "... the shape mismatch");
    like(e, "tensor '0.bias' has dtype I32, parameter '0.bias' is F32", "... the dtype mismatch");
    like(e, "tensors '2.weight' and 'module.2.weight' both hold parameter '2.weight'", "... the key held twice");
    char *after = state_bytes(m, &n1);
    ok(n0 == n1 && memcmp(before, after, n0) == 0, "parameters and buffers bitwise unchanged");
    free(before), free(after);
    for (size_t i = 0; i < n; i++)
        if (i != 3) phx_tensor_free(ts[i]);
    phx_module_free(m);
}

static void test_optimizer_mismatches(void)
{
    phx_module *m = model(2);
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.lr = 0.1;
    so.momentum = 0.9;
    phx_optimizer *opt = phx_sgd_new(m, &so);
    char path[128];
    snprintf(path, sizeof path, "%s/model-only.safetensors", dir);
    phx_checkpoint_save_model(path, m);
    /* The model part matches; the optimizer's states and steps are absent. */
    phx_status st = phx_checkpoint_load(path, m, opt, NULL);
    const char *e = phx_last_error();
    is_int(st, PHX_EIO, "a model-only file into model + SGD with momentum is PHX_EIO");
    like(e, "optimizer state 'optim.0.weight.momentum_buffer'", "... naming the first missing state");
    like(e, "optimizer state 'optim.3.bias.momentum_buffer'", "... and the last");
    like(e, "optim.steps is missing", "... and the missing step count");
    like(e, "optim.type is missing", "... and the missing optimizer type");
    like(e, "(8 problems)", "6 states, the step count and the type: 8 problems");
    phx_optimizer_free(opt);
    phx_module_free(m);
}

/* The state of another optimizer with the same state names: AdamW's
 * into Adam (both exp_avg, exp_avg_sq) is refused, nothing changed. */
static void test_optimizer_type(void)
{
    phx_module *m = model(4);
    phx_adam_opts wo = phx_adamw_defaults(), ao = PHX_ADAM_OPTS_INIT;
    phx_optimizer *w = phx_adam_new(m, &wo), *a = phx_adam_new(m, &ao);
    char path[128];
    snprintf(path, sizeof path, "%s/adamw.safetensors", dir);
    phx_optimizer_set_steps(w, 5);
    phx_status st = phx_checkpoint_save(path, m, w, NULL, NULL, 0);
    size_t len0, len1;
    char *before = state_bytes(m, &len0);
    st = st == PHX_OK ? phx_checkpoint_load(path, m, a, NULL) : st;
    char *after = state_bytes(m, &len1);
    ok(st == PHX_EIO && strstr(phx_last_error(), "optim.type is 'AdamW'") && strstr(phx_last_error(), "Adam"),
       "AdamW's state into Adam: PHX_EIO naming both (%s)", phx_last_error());
    ok(phx_optimizer_steps(a) == 0 && len0 == len1 && memcmp(before, after, len0) == 0,
       "... the model and the optimizer unchanged");
    ok(phx_checkpoint_load(path, m, w, NULL) == PHX_OK && phx_optimizer_steps(w) == 5,
       "the same file into AdamW loads (%s)", phx_last_error());
    free(before), free(after);
    phx_optimizer_free(w), phx_optimizer_free(a);
    phx_module_free(m);
}

/* More mismatches than a message holds: all counted, the rest elided. */
static void test_many(void)
{
    phx_module *m = phx_sequential_new();
    for (int i = 0; i < 150; i++) phx_sequential_add(m, phx_linear_new(1, 1, true, NULL));
    char path[128];
    snprintf(path, sizeof path, "%s/other.safetensors", dir);
    phx_module *o = model(3);
    phx_checkpoint_save_model(path, o);
    phx_status st = phx_checkpoint_load(path, m, NULL, NULL);
    const char *e = phx_last_error();
    is_int(st, PHX_EIO, "a checkpoint of another model: PHX_EIO");
    /* 0.*, 2.*, 3.weight/bias match by name with other shapes; the other
     * 294 parameters are missing; the 3 buffers are unexpected. */
    like(e, "(303 problems)", "every problem counted (294 missing, 6 shapes, 3 unexpected)");
    like(e, "tensor '3.bias' has shape (3,), parameter '3.bias' has shape (1,)", "the last shape mismatch is named");
    like(e, "more)", "the missing keys beyond the message are elided with a count");
    like(e, "parameter '0.bias'", "the first missing keys are named");
    ok(strlen(e) < 4000, "the message stays bounded (%zu bytes)", strlen(e));
    phx_module_free(o);
    phx_module_free(m);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/phx-ckpt-mm-XXXXXX");
    if (!mkdtemp(dir)) skip_all("cannot create a temporary folder");
    plan(25);
    test_model_mismatches();
    test_optimizer_mismatches();
    test_optimizer_type();
    test_many();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) diag("could not remove %s", dir);
    return done_testing();
}
