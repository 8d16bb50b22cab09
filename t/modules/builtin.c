/* Every built-in module against a float64 reimplementation written here:
 * the f32 forward must match it, and the f32 backward (input and
 * parameter gradients) must match central finite differences of it,
 * computed in float64 (step 1e-6, truncation error ~1e-12). The f32
 * gradients can only agree to f32 rounding, so the bound is a norm-wise
 * relative error below 1e-6 (f32 sums of a few
 * terms land near 1e-7): a wrong formula misses by O(1). */
#include <math.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

#define ROWS 3

static uint64_t lcg = 88172645463325252ull;
static double urand(void)
{
    lcg ^= lcg << 13;
    lcg ^= lcg >> 7;
    lcg ^= lcg << 17;
    return (double)(lcg >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* ---- float64 references ---------------------------------------------- */

enum kind { LINEAR, RELU, GELU, GELU_TANH, TANH, SIGMOID, DROPOUT, LAYERNORM };
typedef struct layer {
    enum kind k;
    int in, out;
    double *w, *b; /* parameters (NULL when absent), as the f32 module holds them */
    float p; /* dropout */
    uint64_t seed, offset;
} layer;

static double act(enum kind k, double x)
{
    switch (k) {
    case RELU: return x > 0 ? x : 0;
    case GELU: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case GELU_TANH: return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case TANH: return tanh(x);
    case SIGMOID: return 1 / (1 + exp(-x));
    default: return NAN;
    }
}

static void ref_layer(const layer *L, const double *x, double *y)
{
    if (L->k == LINEAR) {
        for (int r = 0; r < ROWS; r++)
            for (int o = 0; o < L->out; o++) {
                double s = L->b ? L->b[o] : 0;
                for (int i = 0; i < L->in; i++) s += x[r * L->in + i] * L->w[o * L->in + i];
                y[r * L->out + o] = s;
            }
    } else if (L->k == LAYERNORM) {
        for (int r = 0; r < ROWS; r++) {
            const double *xr = x + r * L->in;
            double m = 0, v = 0;
            for (int i = 0; i < L->in; i++) m += xr[i] / L->in;
            for (int i = 0; i < L->in; i++) v += (xr[i] - m) * (xr[i] - m) / L->in;
            for (int i = 0; i < L->in; i++)
                y[r * L->in + i] = (xr[i] - m) / sqrt(v + 1e-5) * (L->w ? L->w[i] : 1) + (L->b ? L->b[i] : 0);
        }
    } else if (L->k == DROPOUT) {
        for (int i = 0; i < ROWS * L->in; i++)
            y[i] = phx_philox_uniform(L->seed, L->offset + (uint64_t)i) >= L->p ? x[i] / (1.0 - L->p) : 0.0;
    } else {
        for (int i = 0; i < ROWS * L->in; i++) y[i] = act(L->k, x[i]);
    }
}

/* L = sum(dy * f(x)) through a chain of layers. */
static double ref_objective(layer *ls, int n, const double *x, const double *dy)
{
    double a[ROWS * 64], b[ROWS * 64];
    memcpy(a, x, sizeof(double) * ROWS * ls[0].in);
    for (int i = 0; i < n; i++) {
        ref_layer(&ls[i], a, b);
        memcpy(a, b, sizeof b);
    }
    int out = ls[n - 1].k == LINEAR ? ls[n - 1].out : ls[n - 1].in;
    double s = 0;
    for (int i = 0; i < ROWS * out; i++) s += dy[i] * a[i];
    return s;
}

static double fd(layer *ls, int n, double *v, const double *x, const double *dy)
{
    const double h = 1e-6, keep = *v;
    *v = keep + h;
    double lp = ref_objective(ls, n, x, dy);
    *v = keep - h;
    double lm = ref_objective(ls, n, x, dy);
    *v = keep;
    return (lp - lm) / (2 * h);
}

/* Norm-wise relative error of f32 values against float64 ones. */
static double rel_err(const float *got, const double *want, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
        den += want[i] * want[i];
    }
    return sqrt(num) / fmax(sqrt(den), 1e-30);
}

/* ---- the check -------------------------------------------------------- */

/* Builds references from the module's own parameter values (read back
 * as f32) so both sides start from the same numbers. */
static void check(const char *what, phx_module *m, layer *ls, int n)
{
    int in = ls[0].in, out = ls[n - 1].k == LINEAR ? ls[n - 1].out : ls[n - 1].in;
    float xf[ROWS * 64], dyf[ROWS * 64];
    double x[ROWS * 64], dy[ROWS * 64], yref[ROWS * 64], tmp[ROWS * 64];
    for (int i = 0; i < ROWS * in; i++) {
        double v = 2 * urand();
        if (fabs(v) < 0.05) /* keep ReLU's kink away from the FD stencil */
            v += 0.1;
        x[i] = xf[i] = (float)v;
    }
    for (int i = 0; i < ROWS * out; i++) dy[i] = dyf[i] = (float)urand();
    /* parameters: the module's values, in registration order of ls */
    size_t np = phx_module_num_params(m), k = 0;
    double *pv[16];
    int64_t pn[16];
    for (int i = 0; i < n; i++) {
        double **slots[2] = {&ls[i].w, &ls[i].b};
        for (int s = 0; s < 2; s++) {
            if (!*slots[s]) continue;
            phx_tensor *t = phx_param_value(phx_module_param(m, k));
            int64_t cnt = phx_tensor_numel(t);
            float buf[64 * 64];
            phx_tensor_to_host(t, buf);
            for (int64_t j = 0; j < cnt; j++) (*slots[s])[j] = buf[j];
            pv[k] = *slots[s];
            pn[k++] = cnt;
        }
    }
    ok(k == np, "%s: %zu parameters", what, np);
    int64_t xs[2] = {ROWS, in}, ys[2] = {ROWS, out};
    phx_tensor *xt = phx_tensor_from_data(PHX_F32, 2, xs, xf), *dyt = phx_tensor_from_data(PHX_F32, 2, ys, dyf);
    phx_tensor *y = NULL, *dx = NULL;
    phx_module_zero_grad(m);
    phx_status st = phx_module_forward(m, xt, &y);
    ok(st == PHX_OK && y && phx_tensor_numel(y) == ROWS * out, "%s: forward (%s)", what, phx_last_error());
    memcpy(tmp, x, sizeof tmp);
    {
        double a[ROWS * 64], b[ROWS * 64];
        memcpy(a, x, sizeof a);
        for (int i = 0; i < n; i++) {
            ref_layer(&ls[i], a, b);
            memcpy(a, b, sizeof b);
        }
        memcpy(yref, a, sizeof yref);
    }
    float yf[ROWS * 64];
    phx_tensor_to_host(y, yf);
    double e = rel_err(yf, yref, ROWS * out);
    ok(e < 1e-6, "%s: forward matches the float64 reference (rel err %.2e)", what, e);
    st = phx_module_backward(m, dyt, &dx);
    ok(st == PHX_OK && dx, "%s: backward (%s)", what, phx_last_error());
    double g[ROWS * 64];
    for (int i = 0; i < ROWS * in; i++) g[i] = fd(ls, n, &tmp[i], tmp, dy);
    float dxf[ROWS * 64];
    phx_tensor_to_host(dx, dxf);
    e = rel_err(dxf, g, ROWS * in);
    ok(e < 1e-6, "%s: dx vs float64 finite differences (rel err %.2e)", what, e);
    for (size_t p = 0; p < np; p++) {
        double gp[64 * 64];
        float gf[64 * 64];
        for (int64_t j = 0; j < pn[p]; j++) gp[j] = fd(ls, n, &pv[p][j], tmp, dy);
        phx_tensor_to_host(phx_param_grad(phx_module_param(m, p)), gf);
        e = rel_err(gf, gp, pn[p]);
        ok(e < 1e-6, "%s: d%s vs float64 finite differences (rel err %.2e)", what, phx_module_param_name(m, p), e);
    }
    phx_tensor_free(xt);
    phx_tensor_free(dyt);
}

static double wbuf[8][64 * 64];

static layer mk(enum kind k, int in, int out, int nparams, int slot)
{
    layer L = {k, in, out, NULL, NULL, 0.0f, 0, 0};
    if (nparams >= 1) L.w = wbuf[slot];
    if (nparams >= 2) L.b = wbuf[slot + 1];
    return L;
}

int main(void)
{
    plan(61);
    phx_rng *rng = phx_rng_new(42);

    phx_module *m = phx_linear_new(7, 5, true, rng);
    layer l1[] = {mk(LINEAR, 7, 5, 2, 0)};
    check("Linear(7, 5)", m, l1, 1);
    phx_module_free(m);

    m = phx_linear_new(6, 4, false, rng);
    layer l2[] = {mk(LINEAR, 6, 4, 1, 0)};
    check("Linear(6, 4, bias=False)", m, l2, 1);
    phx_module_free(m);

    struct {
        const char *name;
        phx_module *(*make)(void);
        enum kind k;
    } acts[] = {{"ReLU", phx_relu_new, RELU}, {"Tanh", phx_tanh_new, TANH}, {"Sigmoid", phx_sigmoid_new, SIGMOID}};
    for (size_t i = 0; i < 3; i++) {
        m = acts[i].make();
        layer la[] = {mk(acts[i].k, 9, 9, 0, 0)};
        check(acts[i].name, m, la, 1);
        phx_module_free(m);
    }
    m = phx_gelu_new(false);
    layer lg[] = {mk(GELU, 9, 9, 0, 0)};
    check("GELU (erf)", m, lg, 1);
    phx_module_free(m);
    m = phx_gelu_new(true);
    layer lgt[] = {mk(GELU_TANH, 9, 9, 0, 0)};
    check("GELU (tanh)", m, lgt, 1);
    phx_module_free(m);

    m = phx_dropout_new(0.3f, 99);
    layer ld[] = {mk(DROPOUT, 12, 12, 0, 0)};
    ld[0].p = 0.3f;
    ld[0].seed = 99;
    check("Dropout(0.3) train", m, ld, 1);
    phx_module_free(m);

    m = phx_layernorm_new(8, 1e-5f, true);
    /* non-trivial affine parameters */
    float wv[8], bv[8];
    for (int i = 0; i < 8; i++) {
        wv[i] = (float)(1 + 0.5 * urand());
        bv[i] = (float)(0.3 * urand());
    }
    phx_tensor_from_host(phx_param_value(phx_module_param(m, 0)), wv);
    phx_tensor_from_host(phx_param_value(phx_module_param(m, 1)), bv);
    layer ll[] = {mk(LAYERNORM, 8, 8, 2, 0)};
    check("LayerNorm(8)", m, ll, 1);
    phx_module_free(m);

    /* A Sequential through all the parameterised kinds. */
    m = phx_sequential_new();
    phx_sequential_add(m, phx_linear_new(6, 8, true, rng));
    phx_sequential_add(m, phx_layernorm_new(8, 1e-5f, true));
    phx_sequential_add(m, phx_gelu_new(false));
    phx_sequential_add(m, phx_linear_new(8, 3, true, rng));
    phx_sequential_add(m, phx_sigmoid_new());
    layer ls[] = {mk(LINEAR, 6, 8, 2, 0), mk(LAYERNORM, 8, 8, 2, 2), mk(GELU, 8, 8, 0, 0), mk(LINEAR, 8, 3, 2, 4),
                  mk(SIGMOID, 3, 3, 0, 0)};
    check("Sequential(Linear, LayerNorm, GELU, Linear, Sigmoid)", m, ls, 5);
    phx_module_free(m);

    phx_rng_free(rng);
    return done_testing();
}
