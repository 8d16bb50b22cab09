/* A training run's progress lines and records (include/phalanx/progress.h). */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "src/base/abi.h"
#include "src/base/util.h"
#include "src/train/metrics-impl.h"
#include "phalanx/progress.h"

#define EXTRA_MAX 16

struct phx_progress {
    double t0; /* px_now() at new */
    int64_t total, first, done; /* done: the current step's number */
    int every;
    int rank;
    int tty; /* out is a terminal: the step line is rewritten in place */
    int pending; /* a step line is on screen without its newline */
    FILE *out;
    char unit[33];
    char rate_key[48]; /* "<unit>_per_s" */
    phx_metrics *metrics;
    int nextra; /* phx_progress_add's keys for the next step */
    char extra_key[EXTRA_MAX][65];
    double extra[EXTRA_MAX];
};

const char *phx_progress_hms(double s, char *buf, size_t n)
{
    if (!buf || n == 0) return buf;
    long t = !(s > 0) ? 0 : s > 1e12 ? (long)1e12 : (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
    return buf;
}

phx_progress *phx_progress_new(const phx_progress_opts *opts)
{
    static const char *fn = "phx_progress_new";
    phx_progress_opts o = PHX_PROGRESS_OPTS_INIT;
    if (px_abi_in(&o, sizeof o, opts, fn, "phx_progress_opts", "PHX_PROGRESS_OPTS_INIT")) return NULL;
    const char *unit = o.unit ? o.unit : "samples";
    size_t ul = strlen(unit);
    int unit_ok = ul >= 1 && ul <= 32;
    for (size_t i = 0; i < ul; i++) unit_ok &= (unit[i] >= 'a' && unit[i] <= 'z') || (unit[i] >= 'A' && unit[i] <= 'Z');
    if (o.total_steps < 0 || o.first_step < 0 || o.every < 0 || (o.total_steps && o.first_step > o.total_steps)) {
        phx_error(PHX_EINVAL,
                  "%s: total_steps %lld, first_step %lld, every %d: expected counts >= 0 and first_step <= "
                  "total_steps (when total_steps is given)",
                  fn, (long long)o.total_steps, (long long)o.first_step, o.every);
        return NULL;
    }
    if (!unit_ok) {
        phx_error(PHX_EINVAL, "%s: unit '%s': expected 1-32 letters, such as \"samples\" or \"tokens\"", fn, unit);
        return NULL;
    }
    phx_progress *p = px_calloc(1, sizeof *p);
    if (!p) return NULL;
    p->t0 = px_now();
    p->total = o.total_steps;
    p->first = p->done = o.first_step;
    p->every = o.every;
    p->rank = o.rank;
    p->out = o.out ? o.out : stdout;
    p->tty = isatty(fileno(p->out));
    snprintf(p->unit, sizeof p->unit, "%s", unit);
    snprintf(p->rate_key, sizeof p->rate_key, "%s_per_s", unit);
    p->metrics = phx_metrics_open(o.metrics, o.rank);
    if (!p->metrics || (o.tensorboard && phx_metrics_tensorboard(p->metrics, o.tensorboard) != PHX_OK)) {
        phx_progress_free(p);
        return NULL;
    }
    return p;
}

void phx_progress_break(phx_progress *p)
{
    if (p && p->pending) {
        fputc('\n', p->out);
        fflush(p->out);
        p->pending = 0;
    }
}

void phx_progress_free(phx_progress *p)
{
    if (!p) return;
    phx_progress_break(p);
    phx_metrics_close(p->metrics);
    px_free(p);
}

int64_t phx_progress_steps(const phx_progress *p)
{
    return p ? p->done : 0;
}

phx_metrics *phx_progress_metrics(phx_progress *p)
{
    return p ? p->metrics : NULL;
}

/* Begins a record with the step and the epoch. */
static void begin(phx_progress *p, int epoch)
{
    phx_metrics_begin(p->metrics);
    phx_metrics_add_i64(p->metrics, "step", p->done);
    phx_metrics_add_i64(p->metrics, "epoch", epoch);
}

phx_status phx_progress_step(phx_progress *p, int epoch, double loss, double lr, double per_s)
{
    if (!p) return phx_error(PHX_EINVAL, "phx_progress_step: progress is NULL");
    p->done++;
    begin(p, epoch);
    phx_metrics_add_f64(p->metrics, "loss", loss);
    if (lr >= 0) phx_metrics_add_f64(p->metrics, "lr", lr);
    if (per_s > 0) phx_metrics_add_f64(p->metrics, p->rate_key, per_s);
    for (int i = 0; i < p->nextra; i++) phx_metrics_add_f64(p->metrics, p->extra_key[i], p->extra[i]);
    p->nextra = 0;
    phx_status st = phx_metrics_end(p->metrics);
    int64_t run = p->done - p->first;
    if (p->rank != 0 || p->every <= 0 || run % p->every != 0) return st;
    double el = px_now() - p->t0;
    char e[32], r[32];
    FILE *f = p->out;
    fprintf(f, "%sstep %lld", p->tty ? "\r\033[K" : "", (long long)p->done);
    if (p->total > 0) fprintf(f, "/%lld", (long long)p->total);
    fprintf(f, " loss %.4f", loss);
    if (per_s > 0) fprintf(f, " %.0f %s/s", per_s, p->unit);
    fprintf(f, " elapsed %s", phx_progress_hms(el, e, sizeof e));
    if (p->total > 0 && p->done < p->total)
        fprintf(f, " ETA %s", phx_progress_hms(el / (double)run * (double)(p->total - p->done), r, sizeof r));
    if (p->tty)
        p->pending = 1;
    else
        fputc('\n', f);
    fflush(f);
    return st;
}

phx_status phx_progress_add(phx_progress *p, const char *key, double value)
{
    static const char *fn = "phx_progress_add";
    if (!p) return phx_error(PHX_EINVAL, "%s: progress is NULL", fn);
    static const char *own[] = {"time", "step", "epoch", "loss", "lr"};
    int bad = !key || !px_metrics_key_ok(key) || !strcmp(key, p->rate_key);
    for (size_t i = 0; !bad && i < sizeof own / sizeof *own; i++) bad = !strcmp(key, own[i]);
    for (int i = 0; !bad && i < p->nextra; i++) bad = !strcmp(key, p->extra_key[i]);
    if (bad)
        return phx_error(PHX_EINVAL,
                         "%s: key '%s': expected 1-64 letters, digits, '_', '.' or '-' (not a digit first), not time, "
                         "step, epoch, loss, lr, %s or a key "
                         "already added for this step",
                         fn, key ? key : "(null)", p->rate_key);
    if (p->nextra == EXTRA_MAX)
        return phx_error(PHX_EINVAL, "%s: more than %d keys for one step at '%s'", fn, EXTRA_MAX, key);
    snprintf(p->extra_key[p->nextra], sizeof p->extra_key[0], "%s", key);
    p->extra[p->nextra++] = value;
    return PHX_OK;
}

phx_status phx_progress_record(phx_progress *p, int epoch, const char *key, double value)
{
    if (!p) return phx_error(PHX_EINVAL, "phx_progress_record: progress is NULL");
    begin(p, epoch);
    phx_status st = phx_metrics_add_f64(p->metrics, key, value);
    if (st != PHX_OK) return st;
    return phx_metrics_end(p->metrics);
}
