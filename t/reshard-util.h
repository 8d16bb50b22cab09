/* What the reshardable-checkpoint tests (t/zero/reshard.c,
 * t/fsdp/reshard.c) share: the model's sizes, the deterministic data
 * (step s's global batch is rows 0..ROWS-1 of tu_batch(s, ...); a world
 * of W ranks gives rank r the rows r*ROWS/W .. (r+1)*ROWS/W-1, ROWS
 * divisible by 1, 2, 3 and 4, so the mean of the ranks' losses is the
 * global batch's loss), the AdamW, one step on some rows, the reference
 * run's losses (ref) beside a sharded run's (got, shared with gloo
 * processes) and the removal of the test's folder. */
#ifndef PHX_T_RESHARD_UTIL_H
#define PHX_T_RESHARD_UTIL_H

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <sys/stat.h>
#include "t/ddp-util.h"

#define ROWS 12
#define STEPS 10
#define SAVE_AT 5 /* steps done before the save */
#define LR 1e-2

static const int64_t sizes[] = {5, 9, 4}; /* 94 parameters: not divisible by 3 or 4 */
static double ref[STEPS];
static double *got; /* [STEPS] global losses of a sharded run (written by rank 0) */

/* Forward, loss, backward, step on rows [first, first + rows) of step s;
 * the local loss in *l. */
static phx_status step_rows(phx_module *m, phx_optimizer *o, int s, int64_t first, int64_t rows, double *l)
{
    phx_loss *loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    phx_tensor *x = tu_new2(rows, sizes[0]), *y = tu_new2(rows, sizes[2]), *out = NULL;
    float lv = NAN;
    tu_batch(s, first, rows, x, y);
    phx_status st = loss && x && y ? phx_module_forward(m, x, &out) : PHX_ENOMEM;
    if (st == PHX_OK) st = phx_loss_forward(loss, out, y, &lv);
    if (st == PHX_OK) st = phx_module_backward(m, phx_loss_grad(loss), NULL);
    if (st == PHX_OK) st = phx_optimizer_step(o);
    if (st == PHX_OK) st = phx_optimizer_zero_grad(o);
    *l = lv;
    phx_tensor_free(x);
    phx_tensor_free(y);
    phx_loss_free(loss);
    return st;
}

/* The mean over ranks of v (f32 is enough for a loss compared to 1e-6
 * only after the division; the sum of W values of similar size). */
static double mean_across(phx_comm *c, double v)
{
    int world = phx_comm_size(c);
    if (world <= 1) return v;
    int64_t one = 1;
    float f = (float)v;
    phx_tensor *t = phx_tensor_from_data(PHX_F32, 1, &one, &f);
    phx_comm_allreduce(c, t, PHX_SUM, NULL);
    phx_tensor_to_host(t, &f);
    phx_tensor_free(t);
    return (double)f / world;
}

/* max |got - ref| over steps first..last-1. */
static double loss_err(int first, int last)
{
    double e = 0;
    for (int s = first; s < last; s++) e = fmax(e, fabs(got[s] - ref[s]));
    return e;
}

static void clear_got(void)
{
    for (int s = 0; s < STEPS; s++) got[s] = NAN;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb, (void)flag, (void)f;
    return remove(p);
}

/* Removes folder d and everything in it. */
static void rm_tree(const char *d)
{
    nftw(d, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

#endif
