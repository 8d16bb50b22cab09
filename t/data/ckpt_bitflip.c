/* A Phalanx checkpoint with one bit flipped never loads as good data.
 * A Linear(64, 48) with Adam state (exp_avg, exp_avg_sq), 7 steps and a
 * loss scaler is saved (38 KB); 5,000 copies, each with one bit flipped
 * (a deterministic generator: half in the 8-byte length and the JSON
 * header, half in the data section), are loaded into a model, optimizer
 * and scaler holding other values. A load that returns PHX_OK must leave
 * exactly the saved state; a refused one must leave the state as it was.
 * Also: the message names the file and the tensor; metadata keys
 * starting "phx." are refused at save; a file without checksums (written
 * by torch) still loads. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "t/ckpt-snapshot.h"
#include "t/tap.h"

enum { FLIPS = 5000 };

static phx_module *model;
static phx_optimizer *opt;
static phx_scaler *scaler;

static void fill(phx_tensor *t, float base)
{
    int64_t n = phx_tensor_numel(t);
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = base + 0.001f * (float)(i % 997);
    phx_tensor_from_host(t, v);
    free(v);
}

/* Every value a load may change, set from base. */
static void set_state(float base, int64_t steps, double scale)
{
    for (size_t i = 0; i < phx_module_num_params(model); i++) fill(phx_param_value(phx_module_param(model, i)), base);
    const char **sn;
    phx_tensor **st;
    size_t ns = phx_optimizer_state(opt, &sn, &st);
    for (size_t i = 0; i < ns; i++) fill(st[i], base * 0.5f);
    phx_optimizer_set_steps(opt, steps);
    phx_scaler_set_state(scaler, scale, steps % 5);
}

static void put(const char *path, const uint8_t *b, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

int main(void)
{
    char dir[64] = "/tmp/phx-flip-XXXXXX", path[128], bad[128];
    if (!mkdtemp(dir)) return 1;
    snprintf(path, sizeof path, "%s/ckpt.safetensors", dir);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
    plan(7);
    model = phx_linear_new(64, 48, true, NULL);
    phx_adam_opts ao = PHX_ADAM_OPTS_INIT;
    opt = phx_adam_new(model, &ao);
    phx_precision *fp16 = NULL;
    if (phx_precision_new("fp16", &fp16) != PHX_OK) {
        printf("Bail out! %s\n", phx_last_error());
        return 1;
    }
    scaler = phx_scaler_new(fp16, NULL);
    const char **sn;
    phx_tensor **st;
    phx_optimizer_state(opt, &sn, &st); /* Adam's state exists from the start */

    set_state(1.0f, 7, 4096.0);
    phx_meta meta[1] = {{"epoch", "3"}};
    ok(phx_checkpoint_save(path, model, opt, scaler, meta, 1) == PHX_OK, "saved (%s)", phx_last_error());
    size_t slen = ckpt_snapshot(model, opt, scaler, NULL);
    uint8_t *saved = malloc(slen), *live = malloc(slen), *now = malloc(slen);
    ckpt_snapshot(model, opt, scaler, saved);
    FILE *f = fopen(path, "rb");
    uint8_t *orig = malloc(1 << 20), *copy = malloc(1 << 20);
    size_t len = f ? fread(orig, 1, 1 << 20, f) : 0;
    if (f) fclose(f);
    uint64_t hlen;
    memcpy(&hlen, orig, 8);
    ok(len > 8 + hlen && len < 200000, "the file has %zu bytes, %llu of them the header", len,
       (unsigned long long)hlen);

    set_state(0.5f, 11, 512.0);
    ckpt_snapshot(model, opt, scaler, live);
    size_t silent = 0, refused = 0, intact = 0, changed_on_failure = 0, in_header = 0;
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int k = 0; k < FLIPS; k++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        size_t head = 8 + (size_t)hlen;
        size_t pos = k % 2 ? (size_t)(s % head) : head + (size_t)(s % (len - head));
        in_header += pos < head;
        memcpy(copy, orig, len);
        copy[pos] ^= (uint8_t)(1u << ((s >> 32) % 8));
        put(bad, copy, len);
        phx_status r = phx_checkpoint_load(bad, model, opt, scaler);
        ckpt_snapshot(model, opt, scaler, now);
        if (r == PHX_OK) {
            if (memcmp(now, saved, slen) != 0) {
                silent++;
                diag("byte %zu: loaded PHX_OK with state that differs from the saved one", pos);
            } else {
                intact++;
            }
            set_state(0.5f, 11, 512.0);
        } else {
            refused++;
            changed_on_failure += memcmp(now, live, slen) != 0;
        }
    }
    diag("%d one-bit flips (%zu in the header): %zu refused, %zu loaded the saved state, %zu loaded other data", FLIPS,
         in_header, refused, intact, silent);
    is_int(silent, 0, "no flipped copy loads with state that differs from the saved one");
    is_int(changed_on_failure, 0, "a refused load changes nothing");

    /* A flip in the data of the bias (the last parameter) names it. */
    memcpy(copy, orig, len);
    char want[300];
    snprintf(want, sizeof want, "phx_checkpoint_load: '%s' is corrupt: tensor 'bias' fails its checksum", bad);
    size_t bias_at = 8 + (size_t)hlen + (size_t)phx_tensor_nbytes(phx_param_value(phx_module_param(model, 0)));
    copy[bias_at + 5] ^= 0x10;
    put(bad, copy, len);
    phx_status r = phx_checkpoint_load(bad, model, opt, scaler);
    ok(r == PHX_EIO && strstr(phx_last_error(), want), "a flip in the bias: PHX_EIO naming file and tensor (%s)",
       phx_last_error());

    /* The reserved prefix; a torch file without checksums. */
    phx_meta mine[1] = {{"phx.crc32.bias", "00000000"}};
    r = phx_checkpoint_save(bad, model, opt, scaler, mine, 1);
    ok(r == PHX_EINVAL && strstr(phx_last_error(), "reserved"), "metadata key 'phx.crc32.bias' is refused at save (%s)",
       phx_last_error());
    char tp[512];
    const char *sd = getenv("srcdir");
    snprintf(tp, sizeof tp, "%s/t/ref/torch_ckpt.safetensors", sd ? sd : ".");
    char **names;
    phx_tensor **ts;
    size_t n;
    r = phx_safetensors_read(tp, &names, &ts, &n);
    ok(r == PHX_OK && n > 0, "a torch-written file without checksums reads (%zu tensors; %s)", r == PHX_OK ? n : 0,
       phx_last_error());
    if (r == PHX_OK) phx_safetensors_free(names, ts, n);

    unlink(path);
    unlink(bad);
    rmdir(dir);
    free(saved), free(live), free(now), free(orig), free(copy);
    phx_optimizer_free(opt);
    phx_scaler_free(scaler);
    phx_precision_free(fp16);
    phx_module_free(model);
    return done_testing();
}
