/* The CPU kernels against PyTorch 1.13 itself: values made by
 * bench/torch/core_kernels.py (inputs included) in t/ref/core_kernels.txt.
 * Activations and their autograd gradients, LayerNorm, cross entropy /
 * nll, mse, and SGD/Adam/AdamW trajectories (5 steps). */
#include "config.h"
#include <stdlib.h>
#include <string.h>
#include "t/core-util.h"

#define MAXSEC 64
#define BAIL_OUT_(why, name) \
    do { \
        printf("Bail out! %s: %s\n", why, name); \
        exit(1); \
    } while (0)
static struct {
    char name[48];
    int n;
    float *v;
} sec[MAXSEC];
static int nsec;

static int load(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char name[48];
    int n;
    while (nsec < MAXSEC && fscanf(f, "%47s %d", name, &n) == 2) {
        snprintf(sec[nsec].name, sizeof sec[nsec].name, "%s", name);
        sec[nsec].n = n;
        sec[nsec].v = malloc((size_t)n * sizeof(float));
        for (int i = 0; i < n; i++) {
            double d;
            if (fscanf(f, "%lf", &d) != 1) {
                fclose(f);
                return 0;
            }
            sec[nsec].v[i] = (float)d;
        }
        nsec++;
    }
    fclose(f);
    return nsec > 0;
}

static const float *get(const char *name, int n)
{
    for (int i = 0; i < nsec; i++)
        if (strcmp(sec[i].name, name) == 0) {
            if (sec[i].n != n) BAIL_OUT_("section has the wrong size", name);
            return sec[i].v;
        }
    BAIL_OUT_("section missing", name);
    return NULL;
}

/* worst |got - torch| / (atol + rtol |torch|) */
static double cmp(const float *got, const float *ref, int n, double rtol, double atol)
{
    double w = 0;
    for (int i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]) / (atol + rtol * fabs(ref[i]));
        w = fmax(w, e != e ? INFINITY : e);
    }
    return w;
}

int main(void)
{
    const char *top = getenv("top_srcdir");
    char path[4096];
    snprintf(path, sizeof path, "%s/t/ref/core_kernels.txt", top ? top : ".");
    if (!load(path)) skip_all("t/ref/core_kernels.txt not found (run from the build tree or set top_srcdir)");
    plan(5 * 2 + 4 + 4 + 4 + 4);
    const phx_kernels_v1 *K = cu_kernels();

    /* activations */
    const char *an[5] = {"relu", "gelu", "gelu_tanh", "tanh", "sigmoid"};
    const float *x = get("act.x", 49), *dy = get("act.dy", 49);
    float y[64], dx[64], buf[64];
    for (int a = 0; a < 5; a++) {
        char nm[48];
        K->act_forward(0, (phx_activation)a, 49, x, y, PHX_F32);
        snprintf(nm, sizeof nm, "act.%s.y", an[a]);
        /* torch's vectorised erf loses ~2e-7 (absolute) to cancellation in
         * gelu's left tail, where ours stays nearer float64 (t/tensor/act) */
        double w = cmp(y, get(nm, 49), 49, 2e-6, 3e-7);
        ok(w <= 1, "%s forward = torch (worst %.3g of 2e-6 rel + 3e-7)", an[a], w);
        K->act_backward(0, (phx_activation)a, 49, x, y, dy, dx, PHX_F32);
        snprintf(nm, sizeof nm, "act.%s.dx", an[a]);
        w = cmp(dx, get(nm, 49), 49, 2e-6, 1e-6);
        ok(w <= 1, "%s backward = torch autograd (worst %.3g)", an[a], w);
    }

    /* layernorm (4, 10), one row offset by 50 */
    const float *lx = get("ln.x", 40), *lw = get("ln.w", 10), *lb = get("ln.b", 10), *ldy = get("ln.dy", 40);
    float ly[40], ldx[40], mean[4], rstd[4], dw[10] = {0}, db[10] = {0};
    K->layernorm_forward(0, 4, 10, 1e-5f, lx, lw, lb, ly, mean, rstd, PHX_F32);
    K->layernorm_backward(0, 4, 10, lx, lw, mean, rstd, ldy, ldx, dw, db, PHX_F32);
    double w = cmp(ly, get("ln.y", 40), 40, 1e-5, 1e-5);
    ok(w <= 1, "layernorm forward = torch (worst %.3g)", w);
    w = cmp(ldx, get("ln.dx", 40), 40, 1e-4, 1e-4);
    ok(w <= 1, "layernorm dx = torch (worst %.3g)", w);
    w = cmp(dw, get("ln.dw", 10), 10, 1e-5, 1e-5);
    ok(w <= 1, "layernorm dw = torch (worst %.3g)", w);
    w = cmp(db, get("ln.db", 10), 10, 1e-6, 1e-6);
    ok(w <= 1, "layernorm db = torch (worst %.3g)", w);

    /* cross entropy and nll, mean over 5 rows of 7 classes */
    const float *lg = get("ce.logits", 35), *labf = get("ce.labels", 5);
    int64_t lab[5];
    for (int i = 0; i < 5; i++) lab[i] = (int64_t)labf[i];
    float loss, g[35];
    K->cross_entropy(0, 5, 7, lg, PHX_F32, lab, 0, &loss, g, NULL);
    ok(cmp(&loss, get("ce.loss", 1), 1, 1e-6, 1e-7) <= 1, "cross_entropy loss = torch (%.9g vs %.9g)", (double)loss,
       (double)get("ce.loss", 1)[0]);
    w = cmp(g, get("ce.grad", 35), 35, 1e-5, 1e-7);
    ok(w <= 1, "cross_entropy gradient = torch, logits ~1000 row included (worst %.3g)", w);
    K->cross_entropy(0, 5, 7, get("nll.logp", 35), PHX_F32, lab, 1, &loss, g, NULL);
    ok(cmp(&loss, get("nll.loss", 1), 1, 1e-6, 1e-7) <= 1, "nll loss = torch");
    ok(cmp(g, get("nll.grad", 35), 35, 0, 1e-9) <= 1, "nll gradient = torch");

    /* mse */
    const float *my = get("mse.y", 13), *mt = get("mse.t", 13);
    for (int mean_ = 0; mean_ < 2; mean_++) {
        char nm[48];
        K->mse(0, 13, my, PHX_F32, mt, mean_, &loss, g);
        snprintf(nm, sizeof nm, "mse.%s.loss", mean_ ? "mean" : "sum");
        ok(cmp(&loss, get(nm, 1), 1, 1e-6, 0) <= 1, "mse %s loss = torch", mean_ ? "mean" : "sum");
        snprintf(nm, sizeof nm, "mse.%s.grad", mean_ ? "mean" : "sum");
        ok(cmp(g, get(nm, 13), 13, 1e-6, 1e-7) <= 1, "mse %s gradient = torch", mean_ ? "mean" : "sum");
    }

    /* optimizers: 5 steps from p0 with the given gradients */
    const float *p0 = get("opt.p0", 16), *gr = get("opt.grads", 80);
    struct {
        const char *name;
        int adam;
        phx_sgd_hparams s;
        phx_adam_hparams a;
    } cfg[4] = {
        {"opt.sgd_nesterov", 0, {0.05f, 0.9f, 0.0f, 0.01f, 1}, {0, 0, 0, 0, 0, 0, 0}},
        {"opt.sgd_dampening", 0, {0.1f, 0.8f, 0.25f, 0.0f, 0}, {0, 0, 0, 0, 0, 0, 0}},
        {"opt.adam_l2", 1, {0, 0, 0, 0, 0}, {0.01f, 0.8f, 0.99f, 1e-6f, 0.01f, 0, 0}},
        {"opt.adamw_amsgrad", 1, {0, 0, 0, 0, 0}, {0.01f, 0.9f, 0.999f, 1e-8f, 0.05f, 1, 1}},
    };
    for (int c = 0; c < 4; c++) {
        float p[16], m[16] = {0}, v[16] = {0}, vmax[16] = {0};
        memcpy(p, p0, sizeof p);
        for (int s = 0; s < 5; s++) {
            if (cfg[c].adam)
                K->adam_step(0, 16, p, gr + 16 * s, m, v, vmax, &cfg[c].a, s + 1);
            else
                K->sgd_step(0, 16, p, gr + 16 * s, buf, &cfg[c].s, s == 0);
        }
        w = cmp(p, get(cfg[c].name, 16), 16, 1e-6, 1e-6);
        ok(w <= 1, "%s: 5 steps = torch.optim (worst %.3g of 1e-6)", cfg[c].name + 4, w);
    }
    for (int i = 0; i < nsec; i++) free(sec[i].v);
    return done_testing();
}
