/* The loss scaler against PyTorch's GradScaler: scale sequences of scripted
 * clean/inf/NaN runs (t/ref/amp_scales.txt from bench/torch/scaler.py),
 * growth after exactly growth_interval clean steps, skipped steps leaving
 * parameters and optimizer state bitwise unchanged, no-op scaling for fp32
 * and bf16, bad input, and no allocation in a steady-state step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

#define MAX_STEPS 2100

static phx_precision *policy(const char *name)
{
    phx_precision *p = NULL;
    if (phx_precision_new(name, &p) != PHX_OK) {
        printf("Bail out! %s: %s\n", name, phx_last_error());
        exit(1);
    }
    return p;
}

/* Linear(4, 2) with weight = arange(8)/8, bias 0 (as the script). */
static phx_module *make_model(void)
{
    phx_module *m = phx_linear_new(4, 2, true, NULL);
    float w[8], b[2] = {0, 0};
    for (int i = 0; i < 8; i++) w[i] = (float)i / 8;
    phx_param *pw = phx_module_find_param(m, "weight"), *pb = phx_module_find_param(m, "bias");
    if (!m || !pw || !pb || phx_tensor_from_host(phx_param_value(pw), w) != PHX_OK ||
        phx_tensor_from_host(phx_param_value(pb), b) != PHX_OK) {
        printf("Bail out! model: %s\n", phx_last_error());
        exit(1);
    }
    phx_param_touch(pw);
    phx_param_touch(pb);
    return m;
}

/* SGD with PyTorch's defaults and lr 0.01. */
static phx_optimizer *sgd(phx_module *m)
{
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.lr = 0.01;
    return phx_sgd_new(m, &so);
}

static float *grad_ptr(phx_module *m, const char *name)
{
    return phx_tensor_data(phx_param_grad(phx_module_find_param(m, name)));
}

/* What the backward of the scaled loss would leave: every gradient 0.25 *
 * scale, then the planted value. */
static void fake_backward(phx_module *m, phx_scaler *s, char ev)
{
    phx_module_zero_grad(m);
    for (size_t i = 0; i < phx_module_num_params(m); i++) {
        phx_tensor *g = phx_param_grad(phx_module_param(m, i));
        phx_tensor_fill(g, 0.25);
        phx_scaler_scale_grad(s, g);
    }
    if (ev == 'i')
        grad_ptr(m, "bias")[1] = INFINITY;
    else if (ev == 'n')
        grad_ptr(m, "weight")[6] = NAN;
}

typedef struct ref_step {
    int listed, stepped;
    char ev;
    double scale, w0;
    long tracker;
} ref_step;

/* Replays one config of the reference file; returns 0 at EOF. */
static int run_config(FILE *f, ref_step *ref, phx_precision *fp16)
{
    char line[256];
    double init, growth, backoff;
    int interval, n;
    long pos;
    do {
        if (!fgets(line, sizeof line, f)) return 0;
    } while (line[0] == '#');
    if (sscanf(line, "config %lf %lf %lf %d %d", &init, &growth, &backoff, &interval, &n) != 5 || n > MAX_STEPS) {
        printf("Bail out! bad config line: %s", line);
        exit(1);
    }
    memset(ref, 0, sizeof(ref_step) * MAX_STEPS);
    for (int i = 0; i < n; i++) ref[i].ev = 'c';
    while ((pos = ftell(f)) >= 0 && fgets(line, sizeof line, f)) {
        int i, st;
        char ev;
        double sc, w0;
        long tr;
        if (strncmp(line, "config", 6) == 0) {
            fseek(f, pos, SEEK_SET);
            break;
        }
        if (sscanf(line, "%d %c %d %lf %ld %lf", &i, &ev, &st, &sc, &tr, &w0) != 6 || i < 0 || i >= n) {
            printf("Bail out! bad step line: %s", line);
            exit(1);
        }
        ref[i] = (ref_step){1, st, ev, sc, w0, tr};
    }

    /* 0 keeps a default: pass PyTorch's defaults as 0 to exercise them. */
    phx_scaler_opts o = {sizeof(phx_scaler_opts), init, growth == 2.0 ? 0 : growth, backoff == 0.5 ? 0 : backoff,
                         interval == 2000 ? 0 : interval};
    phx_module *m = make_model();
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.lr = 0.1;
    so.momentum = 0.9;
    phx_optimizer *opt = phx_sgd_new(m, &so);
    phx_scaler *s = phx_scaler_new(fp16, &o);
    int bad = 0, compared = 0;
    for (int i = 0; i < n && s && opt; i++) {
        bool stepped = false;
        fake_backward(m, s, ref[i].ev);
        phx_status st = phx_scaler_step(s, opt, &stepped);
        double w0 = 0;
        phx_tensor_get(phx_param_value(phx_module_find_param(m, "weight")), 0, &w0);
        if (!ref[i].listed) continue;
        compared++;
        int same = st == PHX_OK && (int)stepped == ref[i].stepped && phx_scaler_get_scale(s) == ref[i].scale &&
            phx_scaler_growth_tracker(s) == ref[i].tracker && fabs(w0 - ref[i].w0) <= 1e-6 * fmax(1, fabs(w0));
        if (!same && bad++ == 0)
            diag("step %d (%c): expected stepped %d scale %.17g tracker %ld w0 %.9g; got %d %.17g %lld %.9g (%s)", i,
                 ref[i].ev, ref[i].stepped, ref[i].scale, ref[i].tracker, ref[i].w0, (int)stepped,
                 phx_scaler_get_scale(s), (long long)phx_scaler_growth_tracker(s), w0, st ? phx_last_error() : "");
    }
    ok(s && opt && bad == 0 && compared > 0,
       "init %g growth %g backoff %g interval %d: %d steps equal PyTorch's (scale, tracker, skipped, weight)", init,
       growth, backoff, interval, compared);
    phx_scaler_free(s);
    phx_optimizer_free(opt);
    phx_module_free(m);
    return 1;
}

/* A copy of every parameter and optimizer state tensor, to compare bytes. */
typedef struct snapshot {
    size_t n;
    size_t bytes[16];
    unsigned char *data[16];
} snapshot;

static size_t collect(phx_module *m, phx_optimizer *opt, phx_tensor **ts)
{
    size_t n = 0;
    for (size_t i = 0; i < phx_module_num_params(m); i++) ts[n++] = phx_param_value(phx_module_param(m, i));
    const char **names;
    phx_tensor **st;
    size_t ns = phx_optimizer_state(opt, &names, &st);
    for (size_t i = 0; i < ns && n < 16; i++) ts[n++] = st[i];
    return n;
}

static void snap(phx_module *m, phx_optimizer *opt, snapshot *s)
{
    phx_tensor *ts[16];
    s->n = collect(m, opt, ts);
    for (size_t i = 0; i < s->n; i++) {
        s->bytes[i] = phx_tensor_nbytes(ts[i]);
        s->data[i] = malloc(s->bytes[i]);
        memcpy(s->data[i], phx_tensor_data(ts[i]), s->bytes[i]);
    }
}

static int same_as(phx_module *m, phx_optimizer *opt, snapshot *s)
{
    phx_tensor *ts[16];
    size_t n = collect(m, opt, ts);
    int same = n == s->n;
    for (size_t i = 0; i < s->n; i++) {
        if (same &&
            (phx_tensor_nbytes(ts[i]) != s->bytes[i] || memcmp(phx_tensor_data(ts[i]), s->data[i], s->bytes[i])))
            same = 0;
        free(s->data[i]);
    }
    return same;
}

/* Skipped steps under SGD with momentum and under AdamW. */
static void skipped_step_unchanged(phx_precision *fp16, int adam)
{
    const char *what = adam ? "adamw" : "sgd+momentum";
    phx_module *m = make_model();
    phx_optimizer *opt;
    if (adam) {
        phx_adam_opts ao = PHX_ADAMW_OPTS_INIT;
        opt = phx_adam_new(m, &ao);
    } else {
        phx_sgd_opts so = PHX_SGD_OPTS_INIT;
        so.momentum = 0.9;
        opt = phx_sgd_new(m, &so);
    }
    phx_scaler_opts o = {sizeof(phx_scaler_opts), 1024, 0, 0, 3};
    phx_scaler *s = phx_scaler_new(fp16, &o);
    bool stepped = false;
    /* Two clean steps create the optimizer state and set the tracker to 2. */
    for (int i = 0; i < 2; i++) {
        fake_backward(m, s, 'c');
        phx_scaler_step(s, opt, &stepped);
    }
    is_int(phx_scaler_growth_tracker(s), 2, "%s: tracker 2 after two clean steps", what);
    int64_t steps = phx_optimizer_steps(opt);
    for (int k = 0; k < 2; k++) {
        char ev = k ? 'n' : 'i';
        double before = phx_scaler_get_scale(s);
        snapshot sn;
        snap(m, opt, &sn);
        fake_backward(m, s, ev);
        phx_status st = phx_scaler_step(s, opt, &stepped);
        ok(st == PHX_OK && !stepped, "%s: %s in one gradient skips the step", what, k ? "NaN" : "inf");
        ok(same_as(m, opt, &sn), "%s: parameters and optimizer state bitwise unchanged after the %s", what,
           k ? "NaN" : "inf");
        is_int(phx_optimizer_steps(opt), steps, "%s: optimizer step count unchanged", what);
        ok(phx_scaler_get_scale(s) == before / 2, "%s: scale halved (%g -> %g)", what, before, phx_scaler_get_scale(s));
        is_int(phx_scaler_growth_tracker(s), 0, "%s: growth tracker reset", what);
    }
    /* The next clean step takes place with the halved scale. */
    fake_backward(m, s, 'c');
    ok(phx_scaler_step(s, opt, &stepped) == PHX_OK && stepped && phx_optimizer_steps(opt) == steps + 1,
       "%s: the next clean step steps", what);
    phx_scaler_free(s);
    phx_optimizer_free(opt);
    phx_module_free(m);
}

/* fp32 and bf16: scale 1, loss gradient untouched, the step always runs. */
static void no_scaling(const char *name)
{
    phx_precision *p = policy(name);
    phx_scaler *s = phx_scaler_new(p, NULL);
    phx_module *m = make_model();
    phx_optimizer *opt = sgd(m);
    ok(s && !phx_precision_scaling(p), "%s: scaler made, policy does not scale", name);
    ok(phx_scaler_get_scale(s) == 1.0 && phx_scaler_growth_tracker(s) == 0, "%s: scale 1, tracker 0", name);
    float v[3] = {0.1f, -2.5f, 3e-8f}, got[3];
    int64_t shape[1] = {3};
    phx_tensor *g = phx_tensor_from_data(PHX_F32, 1, shape, v);
    phx_scaler_scale_grad(s, g);
    phx_tensor_to_host(g, got);
    ok(memcmp(v, got, sizeof v) == 0, "%s: scale_grad leaves the loss gradient bitwise unchanged", name);
    bool stepped = false;
    phx_module_zero_grad(m);
    phx_tensor_fill(phx_param_grad(phx_module_find_param(m, "weight")), 0.5);
    double w0 = 0, w1 = 0;
    phx_tensor_get(phx_param_value(phx_module_find_param(m, "weight")), 1, &w0);
    ok(phx_scaler_step(s, opt, &stepped) == PHX_OK && stepped && phx_optimizer_steps(opt) == 1,
       "%s: step runs the optimizer", name);
    phx_tensor_get(phx_param_value(phx_module_find_param(m, "weight")), 1, &w1);
    is_close(w1, w0 - 0.01 * 0.5, 1e-7, "%s: gradient used as is (not unscaled)", name);
    ok(phx_scaler_set_state(s, 4096, 7) == PHX_OK && phx_scaler_get_scale(s) == 1.0,
       "%s: set_state accepted and ignored (as a disabled GradScaler)", name);
    phx_tensor_free(g);
    phx_optimizer_free(opt);
    phx_module_free(m);
    phx_scaler_free(s);
    phx_precision_free(p);
}

static void bad_input(phx_precision *fp16)
{
    static const phx_scaler_opts bad[] = {
        {sizeof(phx_scaler_opts), -1, 0, 0, 0},   {sizeof(phx_scaler_opts), NAN, 0, 0, 0},
        {sizeof(phx_scaler_opts), 1e39, 0, 0, 0}, {sizeof(phx_scaler_opts), 0, 1.0, 0, 0},
        {sizeof(phx_scaler_opts), 0, 0.5, 0, 0},  {sizeof(phx_scaler_opts), 0, INFINITY, 0, 0},
        {sizeof(phx_scaler_opts), 0, 0, 1.0, 0},  {sizeof(phx_scaler_opts), 0, 0, -0.5, 0},
        {sizeof(phx_scaler_opts), 0, 0, 0, -3},
    };
    static const char *field[] = {"init_scale",     "init_scale",     "init_scale",
                                  "growth_factor",  "growth_factor",  "growth_factor",
                                  "backoff_factor", "backoff_factor", "growth_interval"};
    int nulls = 0, named = 0;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        phx_error_clear();
        phx_scaler *s = phx_scaler_new(fp16, &bad[i]);
        nulls += s == NULL;
        named += strstr(phx_last_error(), field[i]) != NULL;
        phx_scaler_free(s);
    }
    is_int(nulls, 9, "9 bad option sets rejected");
    is_int(named, 9, "each error names the bad option");

    phx_scaler_opts o = {sizeof(phx_scaler_opts), 0, 0, 0, 10};
    phx_scaler *s = phx_scaler_new(fp16, &o);
    ok(phx_scaler_set_state(s, 1024, 5) == PHX_OK && phx_scaler_get_scale(s) == 1024 &&
           phx_scaler_growth_tracker(s) == 5,
       "set_state(1024, 5) round-trips");
    const double scales[] = {0, -1, NAN, INFINITY, 1e39};
    int rejected = 0;
    for (size_t i = 0; i < 5; i++) rejected += phx_scaler_set_state(s, scales[i], 0) == PHX_EINVAL;
    rejected += phx_scaler_set_state(s, 8, -1) == PHX_EINVAL;
    rejected += phx_scaler_set_state(s, 8, 10) == PHX_EINVAL;
    is_int(rejected, 7, "set_state rejects scale 0, -1, NaN, inf, 1e39 and trackers -1, 10 (interval 10)");
    like(phx_last_error(), "growth tracker 10", "the error names the tracker");
    ok(phx_scaler_get_scale(s) == 1024 && phx_scaler_growth_tracker(s) == 5, "rejected states change nothing");
    ok(phx_scaler_step(s, NULL, NULL) == PHX_EINVAL && phx_scaler_step(NULL, NULL, NULL) == PHX_EINVAL &&
           phx_scaler_scale_grad(s, NULL) == PHX_EINVAL,
       "NULL arguments are PHX_EINVAL");
    int64_t shape[1] = {2};
    phx_tensor *li = phx_tensor_zeros(PHX_I64, 1, shape, phx_cpu());
    ok(phx_scaler_scale_grad(s, li) == PHX_EINVAL, "an i64 loss gradient is PHX_EINVAL");
    like(phx_last_error(), "i64", "the error names the dtype");
    phx_tensor_free(li);
    phx_scaler_free(s);
    phx_scaler_free(NULL);
    ok(1, "phx_scaler_free(NULL) is a no-op");
}

static void steady_state(phx_precision *fp16)
{
    phx_module *m = make_model();
    phx_optimizer *opt = sgd(m);
    phx_scaler *s = phx_scaler_new(fp16, NULL);
    bool stepped;
    fake_backward(m, s, 'c');
    phx_scaler_step(s, opt, &stepped); /* first step: flags, optimizer state */
    uint64_t before = phx_alloc_count();
    for (int i = 0; i < 4; i++) {
        fake_backward(m, s, i == 2 ? 'i' : 'c');
        phx_scaler_step(s, opt, &stepped);
    }
    is_int(phx_alloc_count() - before, 0, "no allocation in steady-state scaled steps (clean and skipped)");
    phx_scaler_free(s);
    phx_optimizer_free(opt);
    phx_module_free(m);
}

int main(void)
{
    plan(55);
    phx_precision *fp16 = policy("fp16");
    phx_scaler *d = phx_scaler_new(fp16, NULL);
    ok(d && phx_scaler_get_scale(d) == 65536.0 && phx_scaler_growth_tracker(d) == 0,
       "fp16 defaults: scale 65536, tracker 0");
    phx_scaler_free(d);

    char path[4096];
    snprintf(path, sizeof path, "%s/t/ref/amp_scales.txt", getenv("top_srcdir") ? getenv("top_srcdir") : ".");
    FILE *f = fopen(path, "r");
    if (!f) {
        printf("Bail out! cannot open %s\n", path);
        return 1;
    }
    ref_step *ref = malloc(sizeof(ref_step) * MAX_STEPS);
    int configs = 0;
    while (run_config(f, ref, fp16)) configs++;
    is_int(configs, 4, "four reference configs replayed");
    free(ref);
    fclose(f);

    /* Exactly growth_interval clean steps double the scale. */
    phx_scaler_opts o = {sizeof(phx_scaler_opts), 0, 0, 0, 5};
    phx_scaler *s = phx_scaler_new(fp16, &o);
    phx_module *m = make_model();
    phx_optimizer *opt = sgd(m);
    bool stepped;
    int doubled_at = -1;
    for (int i = 1; i <= 5; i++) {
        fake_backward(m, s, 'c');
        phx_scaler_step(s, opt, &stepped);
        if (doubled_at < 0 && phx_scaler_get_scale(s) != 65536.0) doubled_at = i;
    }
    is_int(doubled_at, 5, "interval 5: the scale changes first after the 5th clean step");
    ok(phx_scaler_get_scale(s) == 131072.0 && phx_scaler_growth_tracker(s) == 0, "and it doubled; tracker reset");
    phx_scaler_free(s);
    phx_optimizer_free(opt);
    phx_module_free(m);

    skipped_step_unchanged(fp16, 0);
    skipped_step_unchanged(fp16, 1);
    no_scaling("fp32");
    no_scaling("bf16");
    bad_input(fp16);
    steady_state(fp16);
    phx_precision_free(fp16);
    return done_testing();
}
