/* Fuzz target: phx_checkpoint_load (and phx_checkpoint_meta) on arbitrary
 * bytes. The model is a Linear(4, 3) with Adam (amsgrad: three state
 * tensors) and an fp16 loss scaler, each holding known odd values. A load
 * that fails must leave parameters, optimizer state, step count and scaler
 * bitwise unchanged (doc/guide/failures.md); a load that succeeds is put back.
 * A broken invariant aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "t/ckpt-snapshot.h"

static phx_module *model;
static phx_optimizer *opt;
static phx_scaler *scaler;
static phx_precision *fp16; /* held for the process, like the model */
static char path[256];
static uint8_t *before, *after;
static size_t snap_len;

static size_t snapshot(uint8_t *out)
{
    return ckpt_snapshot(model, opt, scaler, out);
}

static void fill(phx_tensor *t, float base)
{
    int64_t n = phx_tensor_numel(t);
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) abort();
    for (int64_t i = 0; i < n; i++) v[i] = base + 0.1234567f * (float)i;
    phx_tensor_from_host(t, v);
    free(v);
}

static void set_known_state(void)
{
    for (size_t i = 0; i < phx_module_num_params(model); i++)
        fill(phx_param_value(phx_module_param(model, i)), 0.5f + (float)i);
    const char **names;
    phx_tensor **ts;
    size_t ns = phx_optimizer_state(opt, &names, &ts);
    for (size_t i = 0; i < ns; i++) fill(ts[i], 3.25f + (float)i);
    phx_optimizer_set_steps(opt, 77);
    if (phx_scaler_set_state(scaler, 12345.5, 321) != PHX_OK) abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (phx_precision_new("fp16", &fp16) != PHX_OK) {
        fprintf(stderr, "fp16 policy: %s\n", phx_last_error());
        abort();
    }
    model = phx_linear_new(4, 3, true, NULL);
    phx_adam_opts ao = PHX_ADAM_OPTS_INIT;
    ao.amsgrad = true;
    opt = phx_adam_new(model, &ao);
    scaler = phx_scaler_new(fp16, NULL);
    if (!model || !opt || !scaler) abort();
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/phx-fuzz-ckpt-%ld.safetensors", tmp && *tmp ? tmp : "/tmp", (long)getpid());
    set_known_state();
    snap_len = snapshot(NULL);
    before = malloc(snap_len);
    after = malloc(snap_len);
    if (!before || !after) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!model) LLVMFuzzerInitialize(NULL, NULL);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    snapshot(before);
    phx_status st = phx_checkpoint_load(path, model, opt, scaler);
    if (st != PHX_OK) {
        snapshot(after);
        if (memcmp(before, after, snap_len) != 0) {
            fprintf(stderr, "a failed phx_checkpoint_load changed the model: %s\n", phx_last_error());
            abort();
        }
        const char *e = phx_last_error();
        if (!e || strncmp(e, "phx_checkpoint_load: ", 21) != 0) {
            fprintf(stderr, "error lacks the 'phx_checkpoint_load: ' prefix: %s\n", e ? e : "(null)");
            abort();
        }
    } else {
        set_known_state();
    }
    char buf[64];
    (void)phx_checkpoint_meta(path, "optim.type", buf, sizeof buf);
    unlink(path);
    return 0;
}
