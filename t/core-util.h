/* Helpers for the core kernel tests: a deterministic generator and a
 * comparison that reports the worst element. */
#ifndef PHX_T_CORE_UTIL_H
#define PHX_T_CORE_UTIL_H

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include "kernels/math.h"
#include "phalanx/phalanx.h"
#include "phalanx/plugin/device_v1.h"
#include "t/tap.h"

static uint64_t cu_state = 0x9e3779b97f4a7c15ull;
static inline double cu_urand(void)
{
    cu_state ^= cu_state << 13;
    cu_state ^= cu_state >> 7;
    cu_state ^= cu_state << 17;
    return (double)(cu_state >> 11) / 9007199254740992.0;
}
static inline float cu_frand(float lo, float hi)
{
    return lo + (hi - lo) * (float)cu_urand();
}

static inline const phx_kernels_v1 *cu_kernels(void)
{
    return phx_device_table(phx_cpu())->kernels;
}

/* Decoded element i of a float buffer of dtype dt. */
static inline double cu_get(const void *p, phx_dtype dt, int64_t i)
{
    if (dt == PHX_F16) return phx_f16_to_f32(((const uint16_t *)p)[i]);
    if (dt == PHX_BF16) return phx_bf16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}
static inline void cu_set(void *p, phx_dtype dt, int64_t i, float v)
{
    if (dt == PHX_F16)
        ((uint16_t *)p)[i] = phx_f32_to_f16(v);
    else if (dt == PHX_BF16)
        ((uint16_t *)p)[i] = phx_f32_to_bf16(v);
    else
        ((float *)p)[i] = v;
}

/* Relative precision of a dtype (one ulp at 1). */
static inline double cu_eps(phx_dtype dt)
{
    return dt == PHX_F16 ? ldexp(1, -10) : dt == PHX_BF16 ? ldexp(1, -7) : ldexp(1, -23);
}

/* Worst |got - ref| / (atol + rtol |ref|) over n elements (> 1 fails);
 * NaN anywhere counts as infinitely wrong. *at gets its index. */
static inline double cu_worst(const void *got, phx_dtype dt, const double *ref, int64_t n, double rtol, double atol,
                              int64_t *at)
{
    double w = 0.0;
    if (at) *at = -1;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(cu_get(got, dt, i) - ref[i]) / (atol + rtol * fabs(ref[i]));
        if (e != e) e = INFINITY;
        if (e > w) {
            w = e;
            if (at) *at = i;
        }
    }
    return w;
}
/* The activations in float64 (kinds of phx_activation) and their
 * derivatives worked out by hand; gelu through erfc, which keeps its
 * relative precision in the left tail. */
static inline const char *cu_act_name(int act)
{
    static const char *names[5] = {"relu", "gelu", "gelu_tanh", "tanh", "sigmoid"};
    return act >= 0 && act < 5 ? names[act] : "?";
}

static inline double cu_act_ref(int act, double x)
{
    switch (act) {
    case PHX_ACT_RELU: return x <= 0 ? 0 : x; /* NaN stays NaN */
    case PHX_ACT_GELU: return 0.5 * x * erfc(-x / sqrt(2.0));
    case PHX_ACT_GELU_TANH: return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case PHX_ACT_TANH: return tanh(x);
    default: return 1 / (1 + exp(-x));
    }
}

static inline double cu_act_dref(int act, double x)
{
    switch (act) {
    case PHX_ACT_RELU: return x <= 0 ? 0 : 1; /* NaN passes dy */
    case PHX_ACT_GELU: return 0.5 * erfc(-x / sqrt(2.0)) + x * exp(-x * x / 2) / sqrt(2 * M_PI);
    case PHX_ACT_GELU_TANH: {
        double k = sqrt(2 / M_PI), u = k * (x + 0.044715 * x * x * x), t = tanh(u);
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
    }
    case PHX_ACT_TANH: return 1 - tanh(x) * tanh(x);
    default: {
        double s = 1 / (1 + exp(-x));
        return s * (1 - s);
    }
    }
}

/* 1 when /proc/cpuinfo lists the flag (0 when it cannot be read) */
static inline int cu_cpu_has(const char *flag)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[8192];
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f))
        if (strncmp(line, "flags", 5) == 0) {
            for (char *t = strtok(line, " \t\n"); t && !found; t = strtok(NULL, " \t\n")) found = strcmp(t, flag) == 0;
            break;
        }
    if (f) fclose(f);
    return found;
}

#endif
