/* The models of bench/step (and bench/scale), each with its batch, loss
 * and optimizer: make(name) for name in linear, mlp, gpt, gpt_bf16, cnn,
 * mlp_fo, cnn_fo, resnet, gpt_fo (bench/step.c's comment describes them). */
#ifndef PHX_BENCH_MODELS_H
#define PHX_BENCH_MODELS_H

#include <stdlib.h>
#include <string.h>
#include "bench/bench-util.h"
#include "examples/resnet-model.h"

/* A forward-only module running its children in order, with the children
 * named in `ops` replaced by tensor operations: "relu" (phx_relu) and
 * "flatten" (phx_flatten from dim 1). */
typedef struct fo_seq {
    const char *ops[16]; /* per child: NULL (run it) or an operation */
} fo_seq;

static phx_status fo_seq_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    fo_seq *f = phx_module_ctx(self);
    phx_tensor *h = (phx_tensor *)x;
    for (size_t i = 0; i < phx_module_num_children(self) && h; i++) {
        const char *op = f->ops[i];
        h = !op ? fwd(phx_module_child(self, i), h) : !strcmp(op, "relu") ? phx_relu(h) : phx_flatten(h, 1, -1);
    }
    *y = h;
    return h ? PHX_OK : PHX_EINVAL;
}

static void fo_seq_free(phx_module *self)
{
    free(phx_module_ctx(self));
}

static const phx_module_vtable fo_seq_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE, .type_name = "ForwardOnly", .forward = fo_seq_forward, .free = fo_seq_free};

/* seq's children moved under a forward-only parent; ReLU and Flatten
 * children become operations (they stay children, unused, so parameter
 * names and order do not change). */
static phx_module *forward_only(phx_module *seq)
{
    fo_seq *f = calloc(1, sizeof *f);
    phx_module *m = phx_module_new(&fo_seq_vt, f);
    if (!m) bench_check(PHX_ENOMEM, "forward-only model");
    char name[24];
    for (size_t i = 0; i < phx_module_num_children(seq) && i < 16; i++) {
        phx_module *c = phx_module_clone(phx_module_child(seq, i));
        const char *t = phx_module_type(c);
        f->ops[i] = !strcmp(t, "ReLU") ? "relu" : !strcmp(t, "Flatten") ? "flatten" : NULL;
        snprintf(name, sizeof name, "%zu", i);
        bench_check(c ? phx_module_add_child(m, name, c) : PHX_ENOMEM, "forward-only child");
    }
    phx_module_free(seq);
    return m;
}

typedef struct setup {
    phx_module *m;
    phx_tensor *x, *y;
    phx_loss *loss;
    phx_optimizer *opt;
    phx_precision *prec; /* the bf16 policy or --precision's, or NULL (outlives m) */
} setup;

/* A classification batch: inputs of shape xs uniform in [0, 1), labels
 * 0..9 for its xs[0] rows, cross-entropy. */
static void classify(setup *s, phx_rng *rng, int ndim, const int64_t *xs)
{
    s->x = phx_tensor_new(PHX_F32, ndim, xs, phx_cpu());
    s->y = phx_tensor_new(PHX_I64, 1, xs, phx_cpu());
    if (s->x && s->y) {
        phx_rng_uniform(rng, s->x, 0, 1);
        bench_labels(phx_tensor_data(s->y), xs[0], 0);
    }
    s->loss = phx_loss_new(PHX_LOSS_CROSS_ENTROPY, PHX_REDUCE_MEAN);
}

/* A forward-only GPT over phx_gpt_new's layers: token and position
 * embeddings added with phx_add (positions from phx_arange), each
 * transformer block as x + fn0(x), then + fn1(.) with phx_add in place of
 * the fused Residual modules, the final LayerNorm and head. */
static phx_status gpt_fo_forward(phx_module *self, const phx_tensor *idx, phx_tensor **y)
{
    int64_t T = phx_tensor_dim(idx, 1);
    phx_tensor *pos = phx_arange(0, (double)T, 1, PHX_I64, phx_tensor_device(idx));
    phx_tensor *x = phx_add(fwd(child(self, "wte"), idx), fwd(child(self, "wpe"), pos));
    phx_module *h = child(self, "h");
    for (size_t i = 0; i < phx_module_num_children(h) && x; i++) {
        phx_module *b = phx_module_child(h, i);
        for (size_t r = 0; r < 2 && x; r++) {
            phx_module *fn = phx_module_find_child(phx_module_child(b, r), "fn");
            x = phx_add(x, fwd(fn, x));
        }
    }
    *y = fwd(child(self, "lm_head"), fwd(child(self, "ln_f"), x));
    return *y ? PHX_OK : PHX_EINVAL;
}

static const phx_module_vtable gpt_fo_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE, .type_name = "GPTForwardOnly", .forward = gpt_fo_forward, .free = no_ctx};

/* gpt's children cloned under a forward-only parent (same parameters). */
static phx_module *gpt_forward_only(phx_module *gpt)
{
    phx_module *m = phx_module_new(&gpt_fo_vt, NULL);
    static const char *names[] = {"wte", "wpe", "h", "ln_f", "lm_head"};
    for (int i = 0; i < 5 && m; i++) {
        phx_module *c = phx_module_clone(child(gpt, names[i]));
        bench_check(c ? phx_module_add_child(m, names[i], c) : PHX_ENOMEM, "forward-only GPT");
    }
    phx_module_free(gpt);
    return m;
}

static setup make(const char *name)
{
    setup s = {0};
    if (!strcmp(name, "gpt_fo")) {
        s = make("gpt");
        phx_optimizer_free(s.opt);
        s.m = gpt_forward_only(s.m);
        phx_adam_opts ao = PHX_ADAMW_OPTS_INIT;
        ao.lr = 3e-4;
        s.opt = s.m ? phx_adam_new(s.m, &ao) : NULL;
        if (!s.opt) bench_check(PHX_ENOMEM, "setup");
        return s;
    }
    if (!strcmp(name, "mlp_fo") || !strcmp(name, "cnn_fo")) {
        s = make(!strcmp(name, "mlp_fo") ? "mlp" : "cnn");
        phx_optimizer_free(s.opt);
        s.m = forward_only(s.m);
        if (!strcmp(name, "cnn_fo")) {
            phx_adam_opts ao = PHX_ADAMW_OPTS_INIT;
            s.opt = phx_adam_new(s.m, &ao);
        } else {
            phx_sgd_opts o = PHX_SGD_OPTS_INIT;
            o.lr = 0.01;
            s.opt = phx_sgd_new(s.m, &o);
        }
        if (!s.opt) bench_check(PHX_ENOMEM, "setup");
        return s;
    }
    phx_rng *rng = phx_rng_new(0);
    if (!strcmp(name, "resnet")) {
        s.m = resnet_new(rng);
        int64_t xs[4] = {128, 1, 28, 28};
        classify(&s, rng, 4, xs);
        phx_sgd_opts o = PHX_SGD_OPTS_INIT;
        o.lr = 0.05;
        o.momentum = 0.9;
        s.opt = s.m ? phx_sgd_new(s.m, &o) : NULL;
        if (!s.m || !s.x || !s.y || !s.loss || !s.opt) bench_check(PHX_ENOMEM, "setup");
        phx_rng_free(rng);
        return s;
    }
    if (!strcmp(name, "linear")) {
        s.m = phx_linear_new(10, 1, true, rng);
        int64_t xs[2] = {64, 10}, ys[2] = {64, 1};
        s.x = phx_tensor_new(PHX_F32, 2, xs, phx_cpu());
        s.y = phx_tensor_new(PHX_F32, 2, ys, phx_cpu());
        phx_rng_normal(rng, s.x, 0, 1);
        phx_rng_normal(rng, s.y, 0, 1);
        s.loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    } else if (!strncmp(name, "gpt", 3)) {
        phx_gpt_config cfg = PHX_GPT_CONFIG_INIT; /* vocab 65, T 128, 4 layers, 4 heads, d_model 128 */
        s.m = phx_gpt_new(&cfg, rng);
        /* gpt_bf16: the bf16 policy (f32 master weights, bf16 compute) */
        if (s.m && !strcmp(name, "gpt_bf16"))
            bench_check(phx_precision_new("bf16", &s.prec) == PHX_OK ? phx_module_set_precision(s.m, s.prec)
                                                                     : PHX_EINVAL,
                        "the bf16 policy");
        int64_t ts[2] = {16, 128};
        s.x = phx_tensor_new(PHX_I64, 2, ts, phx_cpu());
        s.y = phx_tensor_new(PHX_I64, 2, ts, phx_cpu());
        if (s.x && s.y) {
            for (int i = 0; i < 16 * 128; i++) ((int64_t *)phx_tensor_data(s.x))[i] = (i * 37 + 5) % 65;
            for (int i = 0; i < 16 * 128; i++) ((int64_t *)phx_tensor_data(s.y))[i] = (i * 53 + 11) % 65;
        }
        s.loss = phx_loss_new(PHX_LOSS_CROSS_ENTROPY, PHX_REDUCE_MEAN);
        phx_adam_opts ao = PHX_ADAMW_OPTS_INIT;
        ao.lr = 3e-4;
        s.opt = s.m ? phx_adam_new(s.m, &ao) : NULL;
        if (!s.m || !s.x || !s.y || !s.loss || !s.opt) bench_check(PHX_ENOMEM, "setup");
        phx_rng_free(rng);
        return s;
    } else if (!strcmp(name, "cnn")) {
        s.m = phx_sequential_new();
        phx_sequential_add(s.m, phx_conv2d_new(1, 32, 3, 3, NULL, rng));
        phx_sequential_add(s.m, phx_batchnorm2d_new(32, 1e-5f, 0.1f, true, true));
        phx_sequential_add(s.m, phx_relu_new());
        phx_sequential_add(s.m, phx_maxpool2d_new(2, 0, 0));
        phx_sequential_add(s.m, phx_conv2d_new(32, 64, 3, 3, NULL, rng));
        phx_sequential_add(s.m, phx_batchnorm2d_new(64, 1e-5f, 0.1f, true, true));
        phx_sequential_add(s.m, phx_relu_new());
        phx_sequential_add(s.m, phx_maxpool2d_new(2, 0, 0));
        phx_sequential_add(s.m, phx_flatten_new());
        phx_sequential_add(s.m, phx_linear_new(1600, 128, true, rng));
        phx_sequential_add(s.m, phx_relu_new());
        phx_sequential_add(s.m, phx_dropout_new(0.5f, 1));
        phx_sequential_add(s.m, phx_linear_new(128, 10, true, rng));
        int64_t xs[4] = {128, 1, 28, 28};
        classify(&s, rng, 4, xs);
        phx_adam_opts ao = PHX_ADAMW_OPTS_INIT;
        s.opt = phx_adam_new(s.m, &ao);
        if (!s.x || !s.y || !s.loss || !s.opt) bench_check(PHX_ENOMEM, "setup");
        phx_rng_free(rng);
        return s;
    } else {
        s.m = bench_mlp(rng, 1024, 1024);
        int64_t xs[2] = {256, 784};
        classify(&s, rng, 2, xs);
    }
    phx_sgd_opts o = PHX_SGD_OPTS_INIT;
    o.lr = 0.01;
    s.opt = phx_sgd_new(s.m, &o);
    if (!s.m || !s.x || !s.y || !s.loss || !s.opt) bench_check(PHX_ENOMEM, "setup");
    phx_rng_free(rng);
    return s;
}

/* Frees what make() made (the policy after the model). */
static void setup_free(setup *s)
{
    phx_optimizer_free(s->opt);
    phx_loss_free(s->loss);
    phx_module_free(s->m);
    phx_precision_free(s->prec);
    phx_tensor_free(s->x);
    phx_tensor_free(s->y);
}

#endif
