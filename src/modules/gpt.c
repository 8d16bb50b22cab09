/* The pre-LN transformer block (built from Sequential, Residual,
 * LayerNorm, attention, Linear, GELU and Dropout) and the GPT:
 *   x = drop(wte(idx) + wpe(pos)), x = h(x), logits = lm_head(ln_f(x)).
 * Positions are an i64 (B, T) buffer of 0 .. T-1 per row, refilled only
 * when the batch shape changes, so wpe's scatter-add backward sums the
 * position gradients over the batch by itself. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "src/modules/transformer-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"
#include "phalanx/transformer.h"
#include "src/base/abi.h"

phx_module *px_tree_clone_values(phx_module *clone, const phx_module *self)
{
    if (!clone) return NULL;
    size_t n = phx_module_num_params(self);
    phx_status st = n == phx_module_num_params(clone)
        ? PHX_OK
        : phx_error(PHX_EINTERNAL, "clone of %s: %zu parameters, expected %zu", phx_module_type(self),
                    phx_module_num_params(clone), n);
    if (st == PHX_OK && n > 0) st = phx_module_to(clone, phx_module_param(self, 0)->value->storage->device);
    for (size_t i = 0; i < n && st == PHX_OK; i++) {
        phx_param *d = phx_module_param(clone, i);
        st = phx_tensor_copy(d->value, phx_module_param(self, i)->value);
        phx_param_touch(d);
    }
    if (st != PHX_OK) {
        phx_module_free(clone);
        return NULL;
    }
    return clone;
}

static bool ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

phx_status px_gpt2_init(phx_module *m, phx_rng *rng, double std, int64_t n_layer)
{
    double proj_std = std / sqrt(2.0 * (double)(n_layer > 0 ? n_layer : 1));
    for (size_t i = 0; i < phx_module_num_params(m); i++) {
        phx_param *p = phx_module_param(m, i);
        const char *type = phx_module_type(p->owner), *name = phx_module_param_name(m, i);
        if (strcmp(type, "Linear") != 0 && strcmp(type, "Embedding") != 0) continue;
        phx_status st;
        if (strcmp(phx_param_name(p), "bias") == 0)
            st = phx_tensor_fill(p->value, 0.0);
        else
            st = phx_rng_normal(
                rng, p->value, 0.0f,
                (float)(ends_with(name, "c_proj.weight") || ends_with(name, ".fn.1.2.weight") ? proj_std : std));
        if (st != PHX_OK) return st;
        phx_param_touch(p);
    }
    return PHX_OK;
}

/* Appends m to seq; false (seq freed by the caller) on failure. */
static bool seq_add(phx_module *seq, phx_module *m)
{
    return m && phx_sequential_add(seq, m) == PHX_OK;
}

phx_module *phx_transformer_block_new(int64_t d_model, int64_t n_head, float dropout, bool bias, uint64_t seed,
                                      phx_rng *rng)
{
    phx_module *attn = phx_attention_new(d_model, n_head, dropout, bias, seed, rng);
    if (!attn) return NULL;
    phx_rng *own = NULL;
    if (!rng && !(rng = own = phx_rng_new(0))) {
        phx_module_free(attn);
        return NULL;
    }
    phx_module *block = phx_sequential_new(), *a = phx_sequential_new(), *f = phx_sequential_new(),
               *mlp = phx_sequential_new();
    bool ok = block && a && f && mlp;
    if (ok) ok = seq_add(a, phx_layernorm_new(d_model, 1e-5f, true));
    if (!ok)
        phx_module_free(attn);
    else
        ok = seq_add(a, attn); /* takes attn, also on failure */
    ok = ok && seq_add(mlp, phx_linear_new(d_model, 4 * d_model, bias, rng)) && seq_add(mlp, phx_gelu_new(false)) &&
        seq_add(mlp, phx_linear_new(4 * d_model, d_model, bias, rng)) &&
        (dropout == 0.0f || seq_add(mlp, phx_dropout_new(dropout, seed + 2)));
    ok = ok && seq_add(f, phx_layernorm_new(d_model, 1e-5f, true));
    phx_module *ra = NULL, *rf = NULL;
    if (ok) {
        ok = seq_add(f, mlp);
        mlp = NULL;
    }
    if (ok) {
        ra = phx_residual_new(a);
        a = NULL;
        ok = seq_add(block, ra);
    }
    if (ok) {
        rf = phx_residual_new(f);
        f = NULL;
        ok = seq_add(block, rf);
    }
    phx_rng_free(own);
    if (!ok) {
        phx_module_free(a);
        phx_module_free(f);
        phx_module_free(mlp);
        phx_module_free(block);
        return NULL;
    }
    return block;
}

/* ---- GPT ------------------------------------------------------------- */

typedef struct gpt {
    phx_gpt_config cfg;
    phx_module *wte, *wpe, *drop, *h, *ln_f, *lm_head;
    px_buf pos; /* (B, T) i64 positions */
    px_buf x; /* (B, T, C) token + position embeddings */
    phx_tensor *out; /* logits of the last forward */
} gpt;

static phx_status positions(gpt *G, int64_t B, int64_t T, phx_device dev, phx_tensor **out)
{
    int64_t shape[2] = {B, T};
    bool same = G->pos.view && G->pos.view->shape[0] == B && G->pos.view->shape[1] == T &&
        phx_device_equal(G->pos.view->storage->device, dev);
    phx_status st = px_buf_get(&G->pos, PHX_I64, 2, shape, dev, out);
    if (st != PHX_OK || same) return st;
    int64_t *host = px_malloc((size_t)(B * T) * sizeof *host);
    if (!host) return PHX_ENOMEM;
    for (int64_t i = 0; i < B * T; i++) host[i] = i % T;
    st = phx_tensor_from_host(*out, host);
    px_free(host);
    return st;
}

static phx_status gpt_forward(phx_module *self, const phx_tensor *idx, phx_tensor **y)
{
    gpt *G = phx_module_ctx(self);
    if (idx->dtype != PHX_I64 || idx->ndim != 2) {
        char a[64];
        return phx_error(PHX_EINVAL, "phx_gpt_forward: input is %s %s, expected i64 token indices (B, T)",
                         phx_dtype_name(idx->dtype), phx_tensor_shape_str(idx, a, sizeof a));
    }
    int64_t B = idx->shape[0], T = idx->shape[1];
    if (T < 1 || T > G->cfg.block_size || B < 1)
        return phx_error(PHX_EINVAL,
                         "phx_gpt_forward: sequence length %lld, expected 1 .. block_size %lld "
                         "(batch %lld)",
                         (long long)T, (long long)G->cfg.block_size, (long long)B);
    phx_device dev = idx->storage->device;
    const phx_kernels_v1 *k = px_device_kernels(dev);
    if (!k) return PHX_ENOTFOUND;
    PX_NEED_SLOT("phx_gpt_forward", dev, k, add);
    phx_tensor *pos, *tok, *pe, *x;
    phx_status st;
    if ((st = positions(G, B, T, dev, &pos)) != PHX_OK || (st = phx_module_forward(G->wte, idx, &tok)) != PHX_OK ||
        (st = phx_module_forward(G->wpe, pos, &pe)) != PHX_OK ||
        (st = px_buf_get(&G->x, tok->dtype, 3, tok->shape, dev, &x)) != PHX_OK ||
        (st = k->add(dev.index, x->numel, px_tensor_ptr(tok), px_tensor_ptr(pe), px_tensor_ptr(x), x->dtype)) != PHX_OK)
        return st;
    phx_tensor *h = x;
    if (G->drop && (st = phx_module_forward(G->drop, h, &h)) != PHX_OK) return st;
    if ((st = phx_module_forward(G->h, h, &h)) != PHX_OK || (st = phx_module_forward(G->ln_f, h, &h)) != PHX_OK ||
        (st = phx_module_forward(G->lm_head, h, &h)) != PHX_OK)
        return st;
    G->out = h;
    *y = h;
    return PHX_OK;
}

static phx_status gpt_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    gpt *G = phx_module_ctx(self);
    if (!G->out) return phx_error(PHX_ESTATE, "phx_gpt_backward: no forward to differentiate");
    if (!px_dy_fits(dy, G->out)) return px_dy_mismatch("phx_gpt_backward", dy, G->out);
    phx_tensor *g;
    phx_status st;
    if ((st = phx_module_backward(G->lm_head, dy, &g)) != PHX_OK ||
        (st = phx_module_backward(G->ln_f, g, &g)) != PHX_OK || (st = phx_module_backward(G->h, g, &g)) != PHX_OK)
        return st;
    if (G->drop && (st = phx_module_backward(G->drop, g, &g)) != PHX_OK) return st;
    if ((st = phx_module_backward(G->wpe, g, NULL)) != PHX_OK || (st = phx_module_backward(G->wte, g, NULL)) != PHX_OK)
        return st;
    if (dx) *dx = NULL;
    return PHX_OK;
}

static void gpt_free(phx_module *self)
{
    gpt *G = phx_module_ctx(self);
    if (!G) return;
    px_buf_free(&G->pos);
    px_buf_free(&G->x);
    px_free(G);
}

static phx_module *gpt_clone(const phx_module *self);

static const phx_module_vtable gpt_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "GPT",
    .forward = gpt_forward,
    .backward = gpt_backward,
    .free = gpt_free,
    .clone = gpt_clone,
};

phx_gpt_config phx_gpt_defaults(void)
{
    phx_gpt_config c = PHX_GPT_CONFIG_INIT;
    return c;
}

static bool add_named(phx_module *m, const char *name, phx_module *c, phx_module **slot)
{
    if (!c) return false;
    if (phx_module_add_child(m, name, c) != PHX_OK) {
        phx_module_free(c);
        return false;
    }
    *slot = c;
    return true;
}

phx_module *phx_gpt_new(const phx_gpt_config *cfg, phx_rng *rng)
{
    if (!cfg) {
        px_error_null("phx_gpt_new", "cfg");
        return NULL;
    }
    phx_gpt_config given = PHX_GPT_CONFIG_INIT;
    if (px_abi_in(&given, sizeof given, cfg, "phx_gpt_new", "phx_gpt_config", "PHX_GPT_CONFIG_INIT")) return NULL;
    cfg = &given;
    if (cfg->vocab_size < 1 || cfg->block_size < 1 || cfg->n_layer < 1 || cfg->n_head < 1 || cfg->d_model < 1 ||
        cfg->d_model % cfg->n_head != 0 || !(cfg->dropout >= 0.0f && cfg->dropout < 1.0f) || !(cfg->init_std >= 0.0)) {
        phx_error(PHX_EINVAL,
                  "phx_gpt_new: vocab %lld, block %lld, %lld layers, %lld heads, d_model %lld, dropout %g, "
                  "init_std %g: expected sizes >= 1, d_model a multiple of n_head, dropout in [0, 1), "
                  "init_std >= 0",
                  (long long)cfg->vocab_size, (long long)cfg->block_size, (long long)cfg->n_layer,
                  (long long)cfg->n_head, (long long)cfg->d_model, (double)cfg->dropout, cfg->init_std);
        return NULL;
    }
    phx_rng *own = NULL;
    if (!rng && !(rng = own = phx_rng_new(0))) return NULL;
    gpt *G;
    phx_module *m = px_module_alloc(&gpt_vt, sizeof *G, (void **)&G);
    bool ok = m != NULL;
    if (ok) {
        G->cfg = *cfg;
        int64_t C = cfg->d_model;
        ok = add_named(m, "wte", phx_embedding_new(cfg->vocab_size, C, rng), &G->wte) &&
            add_named(m, "wpe", phx_embedding_new(cfg->block_size, C, rng), &G->wpe) &&
            (cfg->dropout == 0.0f || add_named(m, "drop", phx_dropout_new(cfg->dropout, cfg->seed), &G->drop)) &&
            add_named(m, "h", phx_sequential_new(), &G->h);
        for (int64_t i = 0; ok && i < cfg->n_layer; i++)
            ok = seq_add(G->h,
                         phx_transformer_block_new(C, cfg->n_head, cfg->dropout, cfg->bias,
                                                   cfg->seed + 2 + 4 * (uint64_t)i, rng));
        ok = ok && add_named(m, "ln_f", phx_layernorm_new(C, 1e-5f, true), &G->ln_f) &&
            add_named(m, "lm_head", phx_linear_new(C, cfg->vocab_size, false, rng), &G->lm_head);
        if (ok && cfg->init_std > 0.0) ok = px_gpt2_init(m, rng, cfg->init_std, cfg->n_layer) == PHX_OK;
    }
    phx_rng_free(own);
    if (!ok) {
        phx_module_free(m);
        return NULL;
    }
    return m;
}

static phx_module *gpt_clone(const phx_module *self)
{
    const gpt *G = phx_module_ctx(self);
    phx_gpt_config c = G->cfg;
    c.init_std = 0.0;
    return px_tree_clone_values(phx_gpt_new(&c, NULL), self);
}
