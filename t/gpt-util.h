/* Shared by the transformer tests: reading a bench/torch/gpt.py file,
 * looking tensors up by name, loading a module's parameters from
 * "<prefix><name>" entries and comparing tensors. Header-only. */
#ifndef PHX_T_GPT_UTIL_H
#define PHX_T_GPT_UTIL_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

typedef struct gu_file {
    char **names;
    phx_tensor **ts;
    size_t n;
} gu_file;

/* Reads t/ref/<name>; 0 on failure (diag says why). */
static inline int gu_read(gu_file *f, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/t/ref/%s", getenv("top_srcdir") ? getenv("top_srcdir") : ".", name);
    memset(f, 0, sizeof *f);
    if (phx_safetensors_read(path, &f->names, &f->ts, &f->n) != PHX_OK) {
        diag("%s: %s", path, phx_last_error());
        return 0;
    }
    return 1;
}

static inline void gu_free(gu_file *f)
{
    phx_safetensors_free(f->names, f->ts, f->n);
    memset(f, 0, sizeof *f);
}

static inline phx_tensor *gu_get(const gu_file *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline phx_tensor *gu_get(const gu_file *f, const char *fmt, ...)
{
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->names[i], name) == 0) return f->ts[i];
    return NULL;
}

/* Copies "<prefix><param name>" into every parameter of m; the number
 * loaded, or -1 when one is missing or does not fit. */
static inline int gu_load(const gu_file *f, phx_module *m, const char *prefix)
{
    size_t n = phx_module_num_params(m);
    for (size_t i = 0; i < n; i++) {
        phx_tensor *t = gu_get(f, "%s%s", prefix, phx_module_param_name(m, i));
        phx_param *p = phx_module_param(m, i);
        if (!t || phx_tensor_copy(phx_param_value(p), t) != PHX_OK) {
            diag("cannot load %s%s: %s", prefix, phx_module_param_name(m, i), t ? phx_last_error() : "missing");
            return -1;
        }
        phx_param_touch(p);
    }
    return (int)n;
}

/* max_i |a_i - b_i| / max(1, |b_i|) over two tensors of the same numel
 * (any float dtype, any device); INFINITY when they do not fit. */
static inline double gu_max_rel(const phx_tensor *a, const phx_tensor *b)
{
    if (!a || !b || phx_tensor_numel(a) != phx_tensor_numel(b)) return INFINITY;
    int64_t n = phx_tensor_numel(a);
    int64_t s = n > 0 ? n : 1;
    phx_tensor *fa = phx_tensor_new(PHX_F32, 1, &s, phx_cpu()), *fb = phx_tensor_new(PHX_F32, 1, &s, phx_cpu());
    float *ha = malloc((size_t)s * sizeof *ha), *hb = malloc((size_t)s * sizeof *hb);
    double e = INFINITY;
    phx_tensor *va = phx_tensor_view(fa, 0, phx_tensor_ndim(a), phx_tensor_shape(a));
    phx_tensor *vb = phx_tensor_view(fb, 0, phx_tensor_ndim(b), phx_tensor_shape(b));
    phx_tensor *ca = NULL, *cb = NULL;
    if (va && vb) {
        ca = phx_tensor_new(phx_tensor_dtype(a), phx_tensor_ndim(a), phx_tensor_shape(a), phx_cpu());
        cb = phx_tensor_new(phx_tensor_dtype(b), phx_tensor_ndim(b), phx_tensor_shape(b), phx_cpu());
    }
    if (ca && cb && phx_tensor_copy(ca, a) == PHX_OK && phx_tensor_copy(cb, b) == PHX_OK &&
        phx_tensor_cast(va, ca) == PHX_OK && phx_tensor_cast(vb, cb) == PHX_OK &&
        phx_tensor_to_host(fa, ha) == PHX_OK && phx_tensor_to_host(fb, hb) == PHX_OK) {
        e = 0;
        for (int64_t i = 0; i < n; i++) {
            double d = fabs((double)ha[i] - hb[i]) / fmax(1.0, fabs((double)hb[i]));
            if (!(d <= e)) e = isnan(d) ? INFINITY : d;
        }
    }
    phx_tensor_free(ca);
    phx_tensor_free(cb);
    phx_tensor_free(va);
    phx_tensor_free(vb);
    phx_tensor_free(fa);
    phx_tensor_free(fb);
    free(ha);
    free(hb);
    return e;
}
/* sum(y * w) for m's output y on x (f64 accumulation): the objective
 * whose finite differences the module tests compare with backward. */
static inline double gu_objective(phx_module *m, const phx_tensor *x, const phx_tensor *w)
{
    phx_tensor *y;
    if (phx_module_forward(m, x, &y) != PHX_OK) return NAN;
    int64_t n = phx_tensor_numel(y);
    float *hy = malloc((size_t)n * sizeof *hy), *hw = malloc((size_t)n * sizeof *hw);
    phx_tensor_to_host(y, hy);
    phx_tensor_to_host(w, hw);
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)hy[i] * hw[i];
    free(hy);
    free(hw);
    return s;
}
/* The relative error of the central difference (eps 1e-2) of
 * gu_objective along element i of t (an input, or the value of parameter
 * p) against the analytic gradient ga at i. */
static inline double gu_fd_err(phx_module *m, const phx_tensor *x, const phx_tensor *dy, phx_tensor *t, phx_param *p,
                               int64_t i, double ga)
{
    const float eps = 1e-2f;
    float *h = malloc((size_t)phx_tensor_numel(t) * sizeof *h);
    phx_tensor_to_host(t, h);
    float v = h[i];
    h[i] = v + eps;
    phx_tensor_from_host(t, h);
    if (p) phx_param_touch(p);
    double up = gu_objective(m, x, dy);
    h[i] = v - eps;
    phx_tensor_from_host(t, h);
    if (p) phx_param_touch(p);
    double dn = gu_objective(m, x, dy);
    h[i] = v;
    phx_tensor_from_host(t, h);
    if (p) phx_param_touch(p);
    free(h);
    double fd = (up - dn) / (2.0 * eps);
    return fabs(fd - ga) / fmax(1.0, fabs(ga));
}
#endif
