/* Fused optimizer kernels against a float64 transcription of PyTorch
 * 1.13's _single_tensor_sgd / _single_tensor_adam / _single_tensor_adamw:
 * several steps with fresh gradients, every option (momentum, dampening,
 * nesterov, weight decay; Adam L2, AdamW decoupled, amsgrad), gradients
 * small enough that eps's placement matters; state buffers compared too. */
#include "config.h"
#include <string.h>
#include "t/core-util.h"

#define N 257
#define STEPS 12

typedef struct {
    float lr, momentum, dampening, wd;
    int nesterov;
    const char *name;
} sgd_cfg;
typedef struct {
    float lr, b1, b2, eps, wd;
    int ams, dec;
    float gscale;
    const char *name;
} adam_cfg;

static float p[N], g[N], buf[N], m[N], v[N], vmax[N];
static double pd[N], bufd[N], md[N], vd[N], vmaxd[N];

static double worst_state(const float *got, const double *ref, double rtol, double atol)
{
    double w = 0;
    for (int i = 0; i < N; i++) w = fmax(w, fabs(got[i] - ref[i]) / (atol + rtol * fabs(ref[i])));
    return w;
}

int main(void)
{
    const sgd_cfg sgds[] = {
        {0.1f, 0.0f, 0.0f, 0.0f, 0, "plain"},
        {0.05f, 0.9f, 0.0f, 0.0f, 0, "momentum 0.9"},
        {0.05f, 0.9f, 0.3f, 0.0f, 0, "momentum 0.9, dampening 0.3"},
        {0.05f, 0.9f, 0.0f, 1e-2f, 1, "nesterov, weight decay 1e-2"},
        {0.1f, 0.0f, 0.0f, 0.1f, 0, "weight decay 0.1, no momentum"},
    };
    const adam_cfg adams[] = {
        {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 0, 0, 1.0f, "Adam defaults"},
        {1e-2f, 0.8f, 0.99f, 1e-6f, 1e-2f, 0, 0, 1.0f, "Adam, L2 weight decay"},
        {1e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f, 0, 1, 1.0f, "AdamW"},
        {1e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f, 1, 1, 1.0f, "AdamW amsgrad"},
        {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1, 0, 1.0f, "Adam amsgrad"},
        {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 0, 0, 1e-8f, "Adam, gradients ~ eps"},
    };
    int ns = (int)(sizeof sgds / sizeof sgds[0]), na = (int)(sizeof adams / sizeof adams[0]);
    plan(ns + na + 8);
    const phx_kernels_v1 *K = cu_kernels();

    for (int c = 0; c < ns; c++) {
        const sgd_cfg *s = &sgds[c];
        for (int i = 0; i < N; i++) p[i] = cu_frand(-1, 1), pd[i] = p[i], buf[i] = NAN;
        phx_sgd_hparams h = {s->lr, s->momentum, s->dampening, s->wd, s->nesterov};
        phx_status st = PHX_OK;
        for (int t = 0; t < STEPS; t++) {
            for (int i = 0; i < N; i++) g[i] = cu_frand(-1, 1);
            st |= K->sgd_step(0, N, p, g, s->momentum != 0.0f ? buf : NULL, &h, t == 0);
            for (int i = 0; i < N; i++) { /* torch/optim/sgd.py, in float64 */
                double d = g[i];
                if (s->wd != 0) d += (double)s->wd * pd[i];
                if (s->momentum != 0) {
                    bufd[i] = t == 0 ? d : (double)s->momentum * bufd[i] + (1 - (double)s->dampening) * d;
                    d = s->nesterov ? d + (double)s->momentum * bufd[i] : bufd[i];
                }
                pd[i] -= (double)s->lr * d;
            }
        }
        double wp = worst_state(p, pd, 1e-5, 1e-6);
        double wb = s->momentum != 0.0f ? worst_state(buf, bufd, 1e-5, 1e-6) : 0;
        ok(st == PHX_OK && wp <= 1 && wb <= 1, "sgd %s: %d steps match float64 torch formula (worst p %.3g, buf %.3g)",
           s->name, STEPS, wp, wb);
    }

    for (int c = 0; c < na; c++) {
        const adam_cfg *a = &adams[c];
        for (int i = 0; i < N; i++) {
            p[i] = cu_frand(-1, 1), pd[i] = p[i];
            m[i] = v[i] = vmax[i] = 0.0f, md[i] = vd[i] = vmaxd[i] = 0.0;
        }
        phx_adam_hparams h = {a->lr, a->b1, a->b2, a->eps, a->wd, a->ams, a->dec};
        phx_status st = PHX_OK;
        for (int t = 1; t <= STEPS; t++) {
            for (int i = 0; i < N; i++) g[i] = a->gscale * cu_frand(-1, 1);
            st |= K->adam_step(0, N, p, g, m, v, a->ams ? vmax : NULL, &h, t);
            double b1 = a->b1, b2 = a->b2, lr = a->lr, wd = a->wd;
            double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);
            for (int i = 0; i < N; i++) { /* torch/optim/adam.py and adamw.py, in float64 */
                double gi = g[i];
                if (a->dec)
                    pd[i] *= 1 - lr * wd;
                else if (wd != 0)
                    gi += wd * pd[i];
                md[i] = b1 * md[i] + (1 - b1) * gi;
                vd[i] = b2 * vd[i] + (1 - b2) * gi * gi;
                double vh = vd[i];
                if (a->ams) vmaxd[i] = fmax(vmaxd[i], vd[i]), vh = vmaxd[i];
                double denom = sqrt(vh) / sqrt(bc2) + a->eps;
                pd[i] -= lr / bc1 * md[i] / denom;
            }
        }
        /* p moves by ~lr per step: allow f32 rounding of p and of the update */
        double wp = worst_state(p, pd, 4e-7 * STEPS, 2e-5 * a->lr * STEPS);
        double wm = worst_state(m, md, 1e-5, 1e-6 * a->gscale); /* m can cancel to ~0 */
        double wv = worst_state(v, vd, 1e-5, 1e-12 * a->gscale * a->gscale);
        double wx = a->ams ? worst_state(vmax, vmaxd, 1e-5, 1e-12 * a->gscale * a->gscale) : 0;
        ok(st == PHX_OK && wp <= 1 && wm <= 1 && wv <= 1 && wx <= 1,
           "%s: %d steps match float64 torch formula (worst p %.3g, m %.3g, v %.3g, vmax %.3g)", a->name, STEPS, wp, wm,
           wv, wx);
    }

    /* the first Adam step moves each weight by lr sign(g) (bias correction) */
    {
        float p1[3] = {0.5f, 0.5f, 0.5f}, g1[3] = {0.2f, -3.0f, 0.0f}, m1[3] = {0}, v1[3] = {0};
        phx_adam_hparams h = {0.01f, 0.9f, 0.999f, 1e-8f, 0.0f, 0, 0};
        K->adam_step(0, 3, p1, g1, m1, v1, NULL, &h, 1);
        ok(fabs(p1[0] - 0.49f) < 1e-6 && fabs(p1[1] - 0.51f) < 1e-6 && p1[2] == 0.5f,
           "first Adam step: p -= lr sign(g), zero gradient leaves p (%.7g %.7g %.7g)", p1[0], p1[1], p1[2]);
    }
    /* the kernel = phx_adam_update per element (the CUDA kernels share it) */
    {
        float pa[N], pb[N], ma[N] = {0}, mb[N] = {0}, va[N] = {0}, vb[N] = {0};
        for (int i = 0; i < N; i++) pa[i] = pb[i] = cu_frand(-1, 1), g[i] = cu_frand(-1, 1);
        phx_adam_hparams h = {1e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f, 0, 1};
        K->adam_step(0, N, pa, g, ma, va, NULL, &h, 3);
        phx_adam_coef co = phx_adam_coef_make(h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, 0, 1, 3);
        for (int i = 0; i < N; i++) phx_adam_update(&co, &pb[i], g[i], &mb[i], &vb[i], NULL);
        ok(memcmp(pa, pb, sizeof pa) == 0 && memcmp(va, vb, sizeof va) == 0,
           "adam kernel = phx_adam_update from kernels/math.h, bit for bit");
    }
    /* no allocation */
    {
        phx_adam_hparams h = {1e-3f, 0.9f, 0.999f, 1e-8f, 0, 1, 0};
        phx_sgd_hparams hs = {0.1f, 0.9f, 0, 0, 1};
        uint64_t before = phx_alloc_count();
        K->adam_step(0, N, p, g, m, v, vmax, &h, 5);
        K->sgd_step(0, N, p, g, buf, &hs, 0);
        is_int(phx_alloc_count() - before, 0, "optimizer steps allocate nothing");
    }
    /* errors */
    phx_adam_hparams h = {1e-3f, 0.9f, 0.999f, 1e-8f, 0, 1, 0};
    is_int(K->adam_step(0, N, p, g, m, v, NULL, &h, 1), PHX_EINVAL, "amsgrad without vmax: EINVAL");
    is_int(K->adam_step(0, N, p, g, m, v, vmax, &h, 0), PHX_EINVAL, "adam step 0: EINVAL");
    like(phx_last_error(), "step 0, expected >= 1", "message names the step");
    phx_sgd_hparams hs = {0.1f, 0.9f, 0, 0, 0};
    is_int(K->sgd_step(0, N, p, g, NULL, &hs, 1), PHX_EINVAL, "sgd momentum without a buffer: EINVAL");
    like(phx_last_error(), "momentum 0.9 needs a momentum buffer", "message says why");
    return done_testing();
}
