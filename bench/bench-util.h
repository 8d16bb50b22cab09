/* Shared by the benchmarks: the clock, failing loudly, the MLP they time,
 * one training step, the labels they train on, the PyTorch interpreter,
 * the "theirs, ratio" columns and the usual command-line options.
 * Header-only (static functions); define BENCH_NAME ("bench/dp") before
 * including it. */
#ifndef PHX_BENCH_UTIL_H
#define PHX_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <phalanx/phalanx.h>
#include "bench/bench-tsv.h"

#ifndef BENCH_NAME
#error "define BENCH_NAME before including bench/bench-util.h"
#endif

/* Monotonic seconds. */
static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Prints "BENCH_NAME: what: <phx_last_error()>" and exits 1. */
static inline void bench_die(const char *what)
{
    fprintf(stderr, "%s: %s: %s\n", BENCH_NAME, what, phx_last_error());
    exit(1);
}

static inline void bench_check(phx_status st, const char *what)
{
    if (st != PHX_OK) bench_die(what);
}

/* The MLP 784-hidden1-hidden2-10 with ReLU between the Linear layers, its
 * weights drawn from rng. */
static inline phx_module *bench_mlp(phx_rng *rng, int64_t hidden1, int64_t hidden2)
{
    phx_module *m = phx_sequential_new();
    phx_sequential_add(m, phx_linear_new(784, hidden1, true, rng));
    phx_sequential_add(m, phx_relu_new());
    phx_sequential_add(m, phx_linear_new(hidden1, hidden2, true, rng));
    phx_sequential_add(m, phx_relu_new());
    phx_sequential_add(m, phx_linear_new(hidden2, 10, true, rng));
    return m;
}

/* Class labels for n rows: (7 i + shift) mod 10. */
static inline void bench_labels(int64_t *lab, int64_t n, int64_t shift)
{
    for (int64_t i = 0; i < n; i++) lab[i] = (i * 7 + shift) % 10;
}

/* One training step: zero_grad, forward, loss, backward, optimizer step;
 * the loss value in *l when l is given. Returns the first failure's status
 * and, when failed is given, sets *failed to that stage's name
 * ("zero_grad", "forward", "loss", "backward", "step"). */
static inline phx_status bench_step(phx_module *m, phx_optimizer *opt, phx_loss *loss, const phx_tensor *x,
                                    const phx_tensor *y, float *l, const char **failed)
{
    phx_tensor *out = NULL;
    float own;
    if (!l) l = &own;
    const char *stage = "zero_grad";
    phx_status st = phx_optimizer_zero_grad(opt);
    if (st == PHX_OK && (st = phx_module_forward(m, x, &out)) != PHX_OK) stage = "forward";
    if (st == PHX_OK && (st = phx_loss_forward(loss, out, y, l)) != PHX_OK) stage = "loss";
    if (st == PHX_OK && (st = phx_module_backward(m, phx_loss_grad(loss), NULL)) != PHX_OK) stage = "backward";
    if (st == PHX_OK && (st = phx_optimizer_step(opt)) != PHX_OK) stage = "step";
    if (failed) *failed = st == PHX_OK ? NULL : stage;
    return st;
}

/* The median of the n values of v that are >= 0 (failed runs are -1), or
 * -1 when none is; sorts v. */
static inline double bench_median(double *v, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        if (v[i] >= 0) v[k++] = v[i];
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    if (k == 0) return -1;
    return k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
}

/* The interpreter for bench/torch scripts: $TORCH_PYTHON, else
 * /usr/bin/python3. */
static inline const char *bench_python(void)
{
    const char *py = getenv("TORCH_PYTHON");
    return py && *py ? py : "/usr/bin/python3";
}

/* Prints the columns " theirs ratio" (theirs in width columns, then
 * ours/theirs as "1.23x"), or dashes when either figure is missing (<= 0).
 * No newline. */
static inline void bench_vs(double ours, double theirs, int width)
{
    if (theirs > 0 && ours > 0)
        printf(" %*.1f %7.2fx", width, theirs, ours / theirs);
    else
        printf(" %*s %8s", width, "-", "-");
}

/* A command-line option "--name VALUE" stored in *dst by kind: 'd'
 * double, 'i' int, 'l' int64_t, 's' string; kind 'n' is a flag
 * ("--no-torch") that sets the string *dst to NULL. */
typedef struct bench_opt {
    const char *name;
    char kind;
    void *dst;
} bench_opt;

/* Parses argv[1..] against opts[0..n). An unknown option or one without
 * its value prints "usage: argv[0] usage" and returns 2; else 0. */
static inline int bench_args(int argc, char **argv, const bench_opt *opts, size_t n, const char *usage)
{
    for (int i = 1; i < argc; i++) {
        const bench_opt *o = NULL;
        for (size_t k = 0; k < n && !o; k++)
            if (!strcmp(argv[i], opts[k].name) && (opts[k].kind == 'n' || i + 1 < argc)) o = &opts[k];
        if (!o) {
            fprintf(stderr, "usage: %s %s\n", argv[0], usage);
            return 2;
        }
        switch (o->kind) {
        case 'n': *(const char **)o->dst = NULL; break;
        case 'd': *(double *)o->dst = atof(argv[++i]); break;
        case 'i': *(int *)o->dst = atoi(argv[++i]); break;
        case 'l': *(int64_t *)o->dst = atoll(argv[++i]); break;
        default: *(const char **)o->dst = argv[++i]; break;
        }
    }
    return 0;
}
#endif
