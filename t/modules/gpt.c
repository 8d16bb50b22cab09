/* The transformer modules against PyTorch 1.13 (t/ref/gpt_modules.safetensors
 * from bench/torch/gpt.py): for each case the module gets the script's
 * parameters, runs forward on its input and backward on its dy; output,
 * input gradient and every parameter gradient must match within 1e-5
 * relative. Then f32 central finite differences of L = sum(y * dy) for a
 * few inputs and weights of each differentiable module (eps 1e-2, within
 * 1e-2 relative: f32 is all the library computes in), the clear errors of
 * Embedding, Attention and the GPT, and 3-D inputs through Linear and
 * LayerNorm (cases linear3d, layernorm3d). */
#include "t/gpt-util.h"

static phx_module *make(const char *c)
{
    if (!strcmp(c, "emb")) return phx_embedding_new(11, 8, NULL);
    if (!strcmp(c, "softmax")) return phx_softmax_new();
    if (!strcmp(c, "logsoftmax")) return phx_log_softmax_new();
    if (!strcmp(c, "linear3d")) return phx_linear_new(8, 6, true, NULL);
    if (!strcmp(c, "layernorm3d")) return phx_layernorm_new(8, 1e-5f, true);
    if (!strcmp(c, "residual")) return phx_residual_new(phx_linear_new(8, 8, true, NULL));
    if (!strcmp(c, "attn")) return phx_attention_new(16, 4, 0.0f, true, 0, NULL);
    if (!strcmp(c, "block")) return phx_transformer_block_new(16, 2, 0.0f, true, 0, NULL);
    return NULL;
}


static double host_at(const phx_tensor *t, int64_t i)
{
    double v = NAN;
    phx_tensor_get(t, i, &v);
    return v;
}

static void run_case(const gu_file *f, const char *c)
{
    phx_module *m = make(c);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s.p.", c);
    int loaded = m ? gu_load(f, m, prefix) : -1;
    phx_tensor *x = gu_get(f, "%s.x", c), *dy = gu_get(f, "%s.dy", c);
    phx_tensor *y = NULL, *dx = NULL;
    phx_status st = loaded >= 0 && x && dy ? phx_module_forward(m, x, &y) : PHX_EINVAL;
    if (!ok(st == PHX_OK, "%s: forward (%d parameters from PyTorch)", c, loaded)) {
        diag("%s", phx_last_error());
        skip(3, "no forward");
        phx_module_free(m);
        return;
    }
    double ey = gu_max_rel(y, gu_get(f, "%s.y", c));
    ok(ey <= 1e-5, "%s: output within 1e-5 of PyTorch (max rel %.2g)", c, ey);
    st = phx_module_backward(m, dy, &dx);
    phx_tensor *want_dx = gu_get(f, "%s.dx", c);
    double edx = want_dx ? gu_max_rel(dx, want_dx) : (dx == NULL ? 0.0 : INFINITY);
    ok(st == PHX_OK && edx <= 1e-5, "%s: input gradient within 1e-5 (max rel %.2g)%s", c, edx,
       want_dx ? "" : " (none: indices)");
    if (st != PHX_OK) diag("%s", phx_last_error());
    double eg = 0;
    for (size_t i = 0; i < phx_module_num_params(m); i++) {
        double e =
            gu_max_rel(phx_param_grad(phx_module_param(m, i)), gu_get(f, "%s.g.%s", c, phx_module_param_name(m, i)));
        if (!(e <= eg)) {
            if (e > 1e-5) diag("%s: gradient of %s: max rel %.3g", c, phx_module_param_name(m, i), e);
            eg = e;
        }
    }
    ok(eg <= 1e-5, "%s: %zu parameter gradients within 1e-5 (max rel %.2g)", c, phx_module_num_params(m), eg);
    phx_module_free(m);
}

/* Finite differences on a copy of the case's module and data. */
static void fd_case(const gu_file *f, const char *c)
{
    phx_module *m = make(c);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s.p.", c);
    gu_load(f, m, prefix);
    phx_tensor *x0 = gu_get(f, "%s.x", c), *dy = gu_get(f, "%s.dy", c);
    phx_tensor *x = phx_tensor_new(phx_tensor_dtype(x0), phx_tensor_ndim(x0), phx_tensor_shape(x0), phx_cpu());
    phx_tensor_copy(x, x0);
    phx_tensor *y, *dx = NULL;
    phx_module_zero_grad(m);
    phx_module_forward(m, x, &y);
    phx_module_backward(m, dy, &dx);
    double worst = 0;
    int checked = 0;
    int64_t n = phx_tensor_numel(x);
    double *gx = NULL;
    if (dx && phx_tensor_dtype(x) == PHX_F32) {
        gx = malloc((size_t)n * sizeof *gx);
        for (int64_t i = 0; i < n; i++) gx[i] = host_at(dx, i);
        for (int64_t i = 0; i < n; i += n / 7 + 1, checked++) worst = fmax(worst, gu_fd_err(m, x, dy, x, NULL, i, gx[i]));
    }
    for (size_t k = 0; k < phx_module_num_params(m); k++) {
        phx_param *p = phx_module_param(m, k);
        phx_tensor *v = phx_param_value(p), *g = phx_param_grad(p);
        int64_t np = phx_tensor_numel(v);
        for (int64_t i = 0; i < np; i += np / 3 + 1, checked++)
            worst = fmax(worst, gu_fd_err(m, x, dy, v, p, i, host_at(g, i)));
    }
    ok(worst <= 1e-2, "%s: %d f32 central differences match the analytic gradients (max rel %.2g)", c, checked, worst);
    free(gx);
    phx_tensor_free(x);
    phx_module_free(m);
}

static void errors(void)
{
    phx_module *e = phx_embedding_new(11, 8, NULL);
    int64_t s = 3, idx[3] = {1, 11, 2};
    phx_tensor *x = phx_tensor_from_data(PHX_I64, 1, &s, idx), *y;
    phx_status st = phx_module_forward(e, x, &y);
    ok(st == PHX_EINVAL, "Embedding: an index outside the table is PHX_EINVAL");
    like(phx_last_error(), "index 11 at position 1 is outside the table of 11 rows",
         "... naming index, position and size");
    phx_tensor *xf = phx_tensor_zeros(PHX_F32, 1, &s, phx_cpu());
    ok(phx_module_forward(e, xf, &y) == PHX_EINVAL, "Embedding: f32 indices are PHX_EINVAL");
    like(phx_last_error(), "expected i64", "... saying i64 is expected");
    ok(phx_attention_new(10, 4, 0.0f, true, 0, NULL) == NULL, "Attention: d_model not a multiple of n_head");
    like(phx_last_error(), "multiple of n_head 4", "... said so");
    phx_module *a = phx_attention_new(16, 4, 0.0f, true, 0, NULL);
    int64_t s2[2] = {4, 16};
    phx_tensor *x2 = phx_tensor_zeros(PHX_F32, 2, s2, phx_cpu());
    ok(phx_module_forward(a, x2, &y) == PHX_EINVAL, "Attention: a 2-D input is PHX_EINVAL");
    like(phx_last_error(), "expected (B, T, 16)", "... naming the expected shape");
    phx_gpt_config cfg = PHX_GPT_CONFIG_INIT;
    cfg.block_size = 4;
    cfg.vocab_size = 5;
    cfg.d_model = 8;
    cfg.n_head = 2;
    phx_module *g = phx_gpt_new(&cfg, NULL);
    int64_t s3[2] = {1, 5}, toks[5] = {0, 1, 2, 3, 4};
    phx_tensor *x3 = phx_tensor_from_data(PHX_I64, 2, s3, toks);
    ok(g && phx_module_forward(g, x3, &y) == PHX_EINVAL, "GPT: a sequence longer than block_size is PHX_EINVAL");
    like(phx_last_error(), "sequence length 5, expected 1 .. block_size 4", "... naming both");
    phx_tensor_free(x);
    phx_tensor_free(xf);
    phx_tensor_free(x2);
    phx_tensor_free(x3);
    phx_module_free(e);
    phx_module_free(a);
    phx_module_free(g);
}

int main(void)
{
    static const char *const cases[] = {"emb",         "softmax",  "logsoftmax", "linear3d",
                                        "layernorm3d", "residual", "attn",       "block"};
    static const char *const fd[] = {"softmax", "logsoftmax", "residual", "attn", "block"};
    size_t nc = sizeof cases / sizeof cases[0], nf = sizeof fd / sizeof fd[0];
    plan((int)(nc * 4 + nf + 10));
    gu_file f;
    if (!gu_read(&f, "gpt_modules.safetensors")) {
        skip((int)(nc * 4 + nf), "no reference data");
    } else {
        for (size_t i = 0; i < nc; i++) run_case(&f, cases[i]);
        for (size_t i = 0; i < nf; i++) fd_case(&f, fd[i]);
        gu_free(&f);
    }
    errors();
    return done_testing();
}
