/* Checkpoints: round trip of model, optimizer, scaler and metadata;
 * resuming gives the same trajectory; atomic writes (a write that fails
 * midway leaves the previous file and no temporary); and every bad file
 * is refused with a message naming the problem while the model's
 * parameters stay bitwise unchanged. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

static char dir[256];

static phx_module *model(uint64_t seed)
{
    phx_rng *r = phx_rng_new(seed);
    phx_module *m = phx_sequential_new();
    phx_sequential_add(m, phx_linear_new(4, 5, true, r));
    phx_sequential_add(m, phx_tanh_new());
    phx_sequential_add(m, phx_linear_new(5, 3, true, r));
    phx_rng_free(r);
    return m;
}

/* All parameter bytes, concatenated (4 * 43 floats). */
static void snapshot(phx_module *m, float *out)
{
    for (size_t i = 0; i < phx_module_num_params(m); i++) {
        phx_tensor *v = phx_param_value(phx_module_param(m, i));
        phx_tensor_to_host(v, out);
        out += phx_tensor_numel(v);
    }
}

static void train(phx_module *m, phx_optimizer *o, int steps)
{
    float xv[8] = {0.5f, -1, 0.25f, 2, 1, 0, -0.5f, 0.3f};
    int64_t xs[2] = {2, 4}, ys[2] = {2, 3};
    phx_tensor *x = phx_tensor_from_data(PHX_F32, 2, xs, xv), *t = phx_tensor_zeros(PHX_F32, 2, ys, phx_cpu()), *y;
    phx_tensor_fill(t, 0.5);
    phx_loss *l = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    float v;
    for (int s = 0; s < steps; s++) {
        phx_optimizer_zero_grad(o);
        phx_module_forward(m, x, &y);
        phx_loss_forward(l, y, t, &v);
        phx_module_backward(m, phx_loss_grad(l), NULL);
        phx_optimizer_step(o);
    }
    phx_loss_free(l);
    phx_tensor_free(x);
    phx_tensor_free(t);
}

static const char *path_of(const char *name)
{
    static char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

static int count_tmp(void)
{
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) n += strstr(e->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    return n;
}

static void test_roundtrip(void)
{
    phx_module *a = model(1), *b = model(2);
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.momentum = 0.9;
    phx_optimizer *oa = phx_sgd_new(a, &so), *ob = phx_sgd_new(b, &so);
    train(a, oa, 3);
    phx_meta meta[] = {{"epoch", "7"}, {"note", "h\xc3\xa9llo"}};
    phx_scaler *sa = NULL, *sb = NULL;
    phx_precision *fp16 = NULL;
    if (phx_precision_new("fp16", &fp16) == PHX_OK) {
        phx_scaler_opts opt = {sizeof(phx_scaler_opts), 1024, 0, 0, 0};
        sa = phx_scaler_new(fp16, &opt);
        sb = phx_scaler_new(fp16, NULL);
        phx_scaler_set_state(sa, 256.0, 17);
    }
    const char *p = path_of("rt.safetensors");
    ok(phx_checkpoint_save(p, a, oa, sa, meta, 2) == PHX_OK, "save model + SGD state + scaler + metadata (%s)",
       phx_last_error());
    ok(count_tmp() == 0, "no temporary file left behind");
    ok(phx_checkpoint_load(p, b, ob, sb) == PHX_OK, "load into a differently initialised model (%s)", phx_last_error());
    float fa[43], fb[43];
    snapshot(a, fa);
    snapshot(b, fb);
    ok(memcmp(fa, fb, sizeof fa) == 0, "parameters bitwise equal after load");
    is_int(phx_optimizer_steps(ob), 3, "optimizer step count restored");
    const char **n1, **n2;
    phx_tensor **t1, **t2;
    size_t k = phx_optimizer_state(oa, &n1, &t1);
    ok(k == 4 && phx_optimizer_state(ob, &n2, &t2) == 4, "4 momentum buffers");
    bool same = true;
    for (size_t i = 0; i < k; i++) {
        float u[20], w[20];
        phx_tensor_to_host(t1[i], u);
        phx_tensor_to_host(t2[i], w);
        same = same && memcmp(u, w, (size_t)phx_tensor_numel(t1[i]) * 4) == 0;
    }
    ok(same, "momentum buffers bitwise equal");
    char buf[64];
    ok(phx_checkpoint_meta(p, "epoch", buf, sizeof buf) == PHX_OK && strcmp(buf, "7") == 0, "user metadata read back");
    ok(phx_checkpoint_meta(p, "note", buf, sizeof buf) == PHX_OK && strcmp(buf, "h\xc3\xa9llo") == 0, "UTF-8 metadata");
    ok(phx_checkpoint_meta(p, "optim.type", buf, sizeof buf) == PHX_OK && strcmp(buf, "SGD") == 0, "optim.type SGD");
    ok(phx_checkpoint_meta(p, "absent", buf, sizeof buf) == PHX_ENOTFOUND, "absent metadata is ENOTFOUND");
    if (sa) {
        ok(phx_scaler_get_scale(sb) == 256.0 && phx_scaler_growth_tracker(sb) == 17, "scaler state restored");
    } else {
        skip(1, "fp16 policy plugin not found");
    }

    /* Resuming continues the same trajectory, bit for bit. */
    train(a, oa, 4);
    train(b, ob, 4);
    snapshot(a, fa);
    snapshot(b, fb);
    ok(memcmp(fa, fb, sizeof fa) == 0, "4 more steps after loading == 4 more steps without stopping");

    /* A full checkpoint loads into a bare model; a model-only one does not
     * satisfy an optimizer. */
    phx_module *c = model(3);
    ok(phx_checkpoint_load(p, c, NULL, NULL) == PHX_OK, "full checkpoint loads into a model without optimizer");
    const char *q = path_of("model_only.safetensors");
    phx_checkpoint_save(q, c, NULL, NULL, NULL, 0);
    phx_optimizer *oc = phx_sgd_new(c, &so);
    ok(phx_checkpoint_load(q, c, oc, NULL) == PHX_EIO, "model-only checkpoint into model + optimizer refused");
    like(phx_last_error(), "optimizer state 'optim.0.weight.momentum_buffer'", "message names the missing state");
    phx_meta reserved[] = {{"optim.steps", "1"}};
    ok(phx_checkpoint_save(q, c, NULL, NULL, reserved, 1) == PHX_EINVAL, "reserved metadata key refused");

    phx_optimizer_free(oa);
    phx_optimizer_free(ob);
    phx_optimizer_free(oc);
    phx_module_free(a);
    phx_module_free(b);
    phx_module_free(c);
    phx_scaler_free(sa);
    phx_scaler_free(sb);
    phx_precision_free(fp16);
}

/* Adam's bias correction depends on the step count: resuming must restore
 * it with the moments. */
static void test_resume_adam(void)
{
    phx_module *a = model(11), *b = model(12);
    phx_adam_opts o = PHX_ADAMW_OPTS_INIT;
    o.amsgrad = true;
    o.lr = 1e-2;
    phx_optimizer *oa = phx_adam_new(a, &o), *ob = phx_adam_new(b, &o);
    train(a, oa, 3);
    const char *p = path_of("adam.safetensors");
    phx_error_clear();
    ok(phx_checkpoint_save(p, a, oa, NULL, NULL, 0) == PHX_OK && phx_checkpoint_load(p, b, ob, NULL) == PHX_OK,
       "AdamW amsgrad state saved and loaded (%s)", phx_last_error());
    train(a, oa, 4);
    train(b, ob, 4);
    float fa[43], fb[43];
    snapshot(a, fa);
    snapshot(b, fb);
    ok(memcmp(fa, fb, sizeof fa) == 0 && phx_optimizer_steps(ob) == 7,
       "AdamW amsgrad: 4 more steps after loading == without stopping (bitwise, step 7)");
    phx_optimizer_free(oa);
    phx_optimizer_free(ob);
    phx_module_free(a);
    phx_module_free(b);
}

/* A write that fails midway (file size limit) keeps the old file. */
static void test_atomic(void)
{
    phx_module *a = model(4), *b = model(5);
    const char *p = path_of("atomic.safetensors");
    phx_checkpoint_save(p, a, NULL, NULL, NULL, 0);
    FILE *f = fopen(p, "rb");
    char before[2048], after[2048];
    size_t nb = fread(before, 1, sizeof before, f);
    fclose(f);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 200; /* the header fits, the data does not */
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &lim);
    phx_status st = phx_checkpoint_save(p, b, NULL, NULL, NULL, 0);
    setrlimit(RLIMIT_FSIZE, &old);
    ok(st == PHX_EIO, "a save that cannot finish writing fails with EIO");
    like(phx_last_error(), "writing", "message says the write failed");
    f = fopen(p, "rb");
    size_t na = fread(after, 1, sizeof after, f);
    fclose(f);
    ok(na == nb && memcmp(before, after, nb) == 0, "the previous checkpoint is intact");
    ok(count_tmp() == 0, "the temporary file was removed");
    ok(phx_checkpoint_save("/nonexistent-dir/x.safetensors", a, NULL, NULL, NULL, 0) == PHX_EIO,
       "save into a missing folder is EIO");
    phx_module_free(a);
    phx_module_free(b);
}

/* ---- bad files -------------------------------------------------------- */

static void write_raw(const char *p, const void *head8, const char *json, const void *data, size_t dlen)
{
    FILE *f = fopen(p, "wb");
    uint64_t n = strlen(json);
    fwrite(head8 ? head8 : &n, 1, 8, f);
    fwrite(json, 1, strlen(json), f);
    if (dlen) fwrite(data, 1, dlen, f);
    fclose(f);
}

#define W "\"0.weight\":{\"dtype\":\"F32\",\"shape\":[5,4],\"data_offsets\":[0,80]}"
#define B "\"0.bias\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[80,100]}"
#define W2 "\"2.weight\":{\"dtype\":\"F32\",\"shape\":[3,5],\"data_offsets\":[100,160]}"
#define B2 "\"2.bias\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[160,172]}"

static void test_bad_files(void)
{
    phx_module *m = model(9);
    float ref[43], now[43], data[64];
    for (int i = 0; i < 64; i++) data[i] = 0.125f * (float)i;
    snapshot(m, ref);
    const char *p = path_of("bad.safetensors");
    write_raw(p, NULL, "{" W "," B "," W2 "," B2 "}", data, 172);
    phx_module *probe = model(10);
    phx_error_clear();
    ok(phx_checkpoint_load(p, probe, NULL, NULL) == PHX_OK, "the hand-written base file is valid (%s)",
       phx_last_error());
    phx_module_free(probe);

    struct {
        const char *what;
        const char *json;
        size_t dlen;
        const char *msg;
        int trunc;
    } cases[] = {
        {"truncated file (5 bytes)", NULL, 0, "is truncated: 5 bytes", 5},
        {"header length beyond the file", NULL, 0, "header length 100000 goes beyond the end of the file", -1},
        {"invalid JSON", "{\"0.weight\": {\"dtype\": \"F32\",", 0, "header is not valid JSON", 0},
        {"JSON that is not an object", "[1, 2, 3]", 0, "not an object", 0},
        {"duplicate keys", "{" W "," W "," B "," W2 "," B2 "}", 172, "header is not valid JSON", 0},
        {"unknown dtype",
         "{\"0.weight\":{\"dtype\":\"F8_E4M3\",\"shape\":[5,4],\"data_offsets\":[0,160]}," B "," W2 "," B2 "}", 172,
         "tensor '0.weight' has unknown dtype 'F8_E4M3' (supported: F32, F16, BF16, F64, I32, I64)", 0},
        {"offsets out of range (data truncated)", "{" W "," B "," W2 "," B2 "}", 150,
         "tensor '2.weight' data_offsets [100, 160] are out of range: the data section has 150 bytes", 0},
        {"offsets overlapping",
         "{" W ",\"0.bias\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[60,80]}," W2 "," B2 "}", 172,
         "tensors '0.weight' and '0.bias' overlap (byte 60)", 0},
        {"offsets overlapping (consistent sizes)",
         "{" W ",\"0.bias\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[70,90]}," W2 "," B2 "}", 172, "overlap",
         0},
        {"a hole in the data",
         "{" W ",\"0.bias\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[84,104]},"
         "\"2.weight\":{\"dtype\":\"F32\",\"shape\":[3,5],\"data_offsets\":[104,164]},"
         "\"2.bias\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[164,176]}}",
         176, "belong to no tensor", 0},
        {"offsets not matching the shape",
         "{\"0.weight\":{\"dtype\":\"F32\",\"shape\":[5,4],\"data_offsets\":[0,84]},"
         "\"0.bias\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[84,104]},"
         "\"2.weight\":{\"dtype\":\"F32\",\"shape\":[3,5],\"data_offsets\":[104,164]},"
         "\"2.bias\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[164,176]}}",
         176, "tensor '0.weight' data_offsets [0, 84] span 84 bytes, its shape and dtype F32 need 80", 0},
        {"an entry without shape", "{\"0.weight\":{\"dtype\":\"F32\",\"data_offsets\":[0,80]}," B "," W2 "," B2 "}",
         172, "entry '0.weight' needs", 0},
        {"missing key", "{" W "," B "," W2 "}", 160,
         "missing keys (the model's, absent from the file): parameter '2.bias'", 0},
        {"extra key",
         "{" W "," B "," W2 "," B2 ",\"3.weight\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[172,176]}}", 176,
         "no parameter or buffer of the model, or no state of the optimizer): '3.weight'", 0},
        {"shape mismatch",
         "{\"0.weight\":{\"dtype\":\"F32\",\"shape\":[4,5],\"data_offsets\":[0,80]}," B "," W2 "," B2 "}", 172,
         "tensor '0.weight' has shape (4, 5), parameter '0.weight' has shape (5, 4)", 0},
        {"dtype mismatch",
         "{\"0.weight\":{\"dtype\":\"I32\",\"shape\":[5,4],\"data_offsets\":[0,80]}," B "," W2 "," B2 "}", 172,
         "tensor '0.weight' has dtype I32, parameter '0.weight' is F32", 0},
        {"the same parameter twice (module. prefix)",
         "{" W ",\"module.0.weight\":{\"dtype\":\"F32\",\"shape\":[5,4],\"data_offsets\":[172,252]}," B "," W2 "," B2
         "}",
         252, "both hold parameter '0.weight'", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].trunc > 0) {
            FILE *f = fopen(p, "wb");
            fwrite("\x10\0\0\0\0", 1, 5, f);
            fclose(f);
        } else if (cases[i].trunc < 0) {
            uint64_t big = 100000;
            write_raw(p, &big, "{}", NULL, 0);
        } else {
            write_raw(p, NULL, cases[i].json, data, cases[i].dlen);
        }
        phx_status st = phx_checkpoint_load(p, m, NULL, NULL);
        ok(st == PHX_EIO, "%s: refused with EIO (got %s)", cases[i].what, phx_status_name(st));
        like(phx_last_error(), cases[i].msg, "%s: message", cases[i].what);
        snapshot(m, now);
        ok(memcmp(ref, now, sizeof ref) == 0, "%s: parameters bitwise unchanged", cases[i].what);
    }
    phx_status st = phx_checkpoint_load(path_of("does-not-exist.safetensors"), m, NULL, NULL);
    ok(st == PHX_ENOTFOUND, "missing file: ENOTFOUND");
    like(phx_last_error(), "cannot open", "missing file: message");
    snapshot(m, now);
    ok(memcmp(ref, now, sizeof ref) == 0, "missing file: parameters bitwise unchanged");
    phx_module_free(m);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/phx-ckpt-XXXXXX");
    if (!mkdtemp(dir)) skip_all("cannot create a temporary folder");
    plan(79);
    test_roundtrip();
    test_resume_adam();
    test_atomic();
    test_bad_files();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) diag("could not remove %s", dir);
    return done_testing();
}
