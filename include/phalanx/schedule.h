/* Phalanx — training-loop tools: learning-rate schedules that drive any
 * optimizer, gradient-norm clipping, and AdamW weight-decay groups. See
 * doc/guide/training.md. */
#ifndef PHALANX_SCHEDULE_H
#define PHALANX_SCHEDULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "phalanx/module.h"
#include "phalanx/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum phx_schedule_kind {
    PHX_SCHED_CONSTANT = 0, /* base_lr */
    PHX_SCHED_WARMUP_COSINE = 1, /* linear warmup, then cosine decay to min_lr */
    PHX_SCHED_STEP = 2, /* StepLR: base_lr * gamma^(step / step_size) */
    PHX_SCHED_CALLBACK = 3 /* LambdaLR: base_lr * fn(step, user) */
} phx_schedule_kind;

/* Multiplier of the base learning rate for a 0-based step (LambdaLR's
 * lr_lambda). */
typedef double (*phx_lr_fn)(int64_t step, void *user);

typedef struct phx_schedule_opts {
    size_t struct_size; /* sizeof (phx_schedule_opts): PHX_SCHEDULE_OPTS_INIT sets it */
    int kind; /* phx_schedule_kind */
    /* warmup + cosine: step s < warmup_steps: base_lr (s + 1) / warmup_steps;
     * then min_lr + (base_lr - min_lr) (1 + cos(pi p)) / 2 with
     * p = (s - warmup_steps) / (total_steps - warmup_steps), clamped to 1
     * (so min_lr from total_steps on). */
    int64_t warmup_steps, total_steps;
    double min_lr;
    int64_t step_size; /* step decay: >= 1 */
    double gamma; /* step decay: > 0 */
    phx_lr_fn fn; /* callback */
    void *user;
} phx_schedule_opts;
#define PHX_SCHEDULE_OPTS_INIT \
    { \
        .struct_size = sizeof(phx_schedule_opts) \
    }

typedef struct phx_schedule phx_schedule;

/* A schedule for opt; base_lr is opt's learning rate now. The schedule
 * keeps no counter of its own: the step is phx_optimizer_steps(opt),
 * which checkpoints save ("optim.steps") and restore, so a resumed run
 * continues the schedule where it stopped. Make it before loading a
 * checkpoint that restores the learning rate (phx_zero_checkpoint_load
 * does: the scheduled lr of the saved step), or set opt's lr back to the
 * peak first; else that lr becomes base_lr. NULL with phx_last_error on
 * bad options (total_steps <= warmup_steps for cosine, min_lr < 0,
 * step_size < 1, gamma <= 0, no fn). Caller owns it; opt must outlive it. */
phx_schedule *phx_schedule_new(phx_optimizer *opt, const phx_schedule_opts *o);
/* The learning rate of a 0-based step. */
double phx_schedule_lr(const phx_schedule *s, int64_t step);
/* Sets opt's learning rate for its next step (step phx_optimizer_steps)
 * and returns it in *lr (may be NULL). Call before each optimizer step:
 * as PyTorch's opt.step(); scheduler.step() loop. PHX_EINVAL when a
 * callback returns a negative or non-finite multiplier. */
phx_status phx_schedule_apply(phx_schedule *s, double *lr);
void phx_schedule_free(phx_schedule *s);

/* torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm): the
 * total 2-norm of every gradient of model (f64 sums of squares) into
 * *total_norm (may be NULL); when it exceeds max_norm every gradient is
 * multiplied by max_norm / (total + 1e-6). A non-finite total leaves the
 * gradients alone (a GradScaler then skips the step). Under DDP call it
 * after the backward (gradients are averaged by then, identical on every
 * rank); under fp16 after phx_scaler_unscale. PHX_EINVAL for max_norm not
 * finite and > 0. */
phx_status phx_clip_grad_norm(phx_module *model, double max_norm, double *total_norm);

/* AdamW parameter groups: the weight decay of parameter i (index into
 * phx_module_param of the optimizer's model) becomes wd. PHX_EINVAL when
 * opt is not Adam/AdamW, i is out of range or wd is not finite and >= 0. */
phx_status phx_adam_set_weight_decay(phx_optimizer *opt, size_t i, double wd);
/* Keeps opt's weight decay on the parameters of two or more dims that no
 * Embedding owns (Linear and Conv2d weights) and sets 0 on all others:
 * biases, LayerNorm and BatchNorm parameters and Embedding tables. Not
 * nanoGPT's or llm.c's grouping, which decays every parameter of two or
 * more dims, embeddings included (phx_adam_set_weight_decay restores
 * theirs). *n_decayed (may be NULL) gets the number still decayed. */
phx_status phx_adam_decay_matrices_only(phx_optimizer *opt, size_t *n_decayed);

#ifdef __cplusplus
}
#endif
#endif
