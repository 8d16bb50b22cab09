/* Learning-rate schedules over an optimizer's step counter. */
#include <math.h>
#include "phalanx/schedule.h"
#include "src/base/util.h"
#include "src/base/abi.h"

struct phx_schedule {
    phx_optimizer *opt;
    phx_schedule_opts o;
    double base_lr;
};

phx_schedule *phx_schedule_new(phx_optimizer *opt, const phx_schedule_opts *o)
{
    if (!opt || !o) {
        px_error_null("phx_schedule_new", opt ? "opts" : "optimizer");
        return NULL;
    }
    phx_schedule_opts own = PHX_SCHEDULE_OPTS_INIT;
    if (px_abi_in(&own, sizeof own, o, "phx_schedule_new", "phx_schedule_opts", "PHX_SCHEDULE_OPTS_INIT")) return NULL;
    o = &own;
    const char *bad = NULL;
    switch (o->kind) {
    case PHX_SCHED_CONSTANT: break;
    case PHX_SCHED_WARMUP_COSINE:
        if (o->warmup_steps < 0 || o->total_steps <= o->warmup_steps)
            bad = "warmup_steps >= 0 and total_steps > warmup_steps";
        else if (!(o->min_lr >= 0.0) || isinf(o->min_lr))
            bad = "min_lr finite and >= 0";
        break;
    case PHX_SCHED_STEP:
        if (o->step_size < 1 || !(o->gamma > 0.0) || isinf(o->gamma)) bad = "step_size >= 1 and gamma finite and > 0";
        break;
    case PHX_SCHED_CALLBACK:
        if (!o->fn) bad = "a callback fn";
        break;
    default:
        phx_error(PHX_EINVAL, "phx_schedule_new: kind %d, expected constant, warmup_cosine, step or callback", o->kind);
        return NULL;
    }
    if (bad) {
        phx_error(PHX_EINVAL,
                  "phx_schedule_new: warmup %lld, total %lld, min_lr %g, step_size %lld, gamma %g: "
                  "expected %s",
                  (long long)o->warmup_steps, (long long)o->total_steps, o->min_lr, (long long)o->step_size, o->gamma,
                  bad);
        return NULL;
    }
    phx_schedule *s = px_calloc(1, sizeof *s);
    if (!s) return NULL;
    s->opt = opt;
    s->o = *o;
    s->base_lr = phx_optimizer_lr(opt);
    return s;
}

double phx_schedule_lr(const phx_schedule *s, int64_t step)
{
    if (!s) return 0.0;
    const phx_schedule_opts *o = &s->o;
    switch (o->kind) {
    case PHX_SCHED_WARMUP_COSINE: {
        if (step < o->warmup_steps) return s->base_lr * (double)(step + 1) / (double)o->warmup_steps;
        double p = (double)(step - o->warmup_steps) / (double)(o->total_steps - o->warmup_steps);
        if (p > 1.0) p = 1.0;
        return o->min_lr + (s->base_lr - o->min_lr) * 0.5 * (1.0 + cos(M_PI * p));
    }
    case PHX_SCHED_STEP: return s->base_lr * pow(o->gamma, (double)(step / o->step_size));
    case PHX_SCHED_CALLBACK: return s->base_lr * o->fn(step, o->user);
    default: return s->base_lr;
    }
}

phx_status phx_schedule_apply(phx_schedule *s, double *lr)
{
    if (!s) return phx_error(PHX_EINVAL, "phx_schedule_apply: schedule is NULL");
    int64_t step = phx_optimizer_steps(s->opt);
    double v = phx_schedule_lr(s, step);
    if (!(v >= 0.0) || isinf(v))
        return phx_error(PHX_EINVAL, "phx_schedule_apply: learning rate %g at step %lld, expected finite and >= 0", v,
                         (long long)step);
    phx_status st = phx_optimizer_set_lr(s->opt, v);
    if (st == PHX_OK && lr) *lr = v;
    return st;
}

void phx_schedule_free(phx_schedule *s)
{
    px_free(s);
}
