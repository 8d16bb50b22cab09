/* Phalanx — a training run's progress: a step line with the loss, the
 * throughput, the elapsed time and an ETA every N steps, and every step
 * recorded in a metrics file (JSON Lines, include/phalanx/metrics.h)
 * and/or TensorBoard event files. What tqdm and SummaryWriter do in a
 * PyTorch loop; every example uses it (--log-every, --metrics,
 * --tensorboard).
 *
 *   phx_progress_opts po = PHX_PROGRESS_OPTS_INIT;
 *   po.total_steps = epochs * batches_per_epoch;
 *   po.every = 50;                       // a line every 50 steps
 *   po.metrics = "run.jsonl";            // optional
 *   po.tensorboard = "runs/a";           // optional
 *   po.rank = rank;                      // only rank 0 prints and writes
 *   phx_progress *p = phx_progress_new(&po);
 *   for (...) {
 *       ...
 *       phx_progress_add(p, "grad_norm", norm);   // optional extras
 *       phx_progress_step(p, epoch, loss, lr, samples_per_s);
 *   }
 *   phx_progress_break(p);               // before printing a line of one's own
 *   phx_progress_record(p, epoch, "accuracy", acc);
 *   phx_progress_free(p);
 *
 * prints, into a pipe or a file, whole lines
 *
 *   step 50/2345 loss 0.5123 10234 samples/s elapsed 0:03 ETA 2:21
 *
 * and on a terminal rewrites one line in place. A step's record is
 * {"time":..,"step":N,"epoch":E,"loss":..,"lr":..,"samples_per_s":..}.
 *
 * A resumed run sets first_step to the steps already made: step numbers,
 * the metrics file's steps and TensorBoard's steps continue from there
 * (and the metrics file's time from its last record), and the ETA counts
 * this run's steps only. A handle is used by one thread at a time. */
#ifndef PHALANX_PROGRESS_H
#define PHALANX_PROGRESS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "phalanx/error.h"
#include "phalanx/metrics.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct phx_progress phx_progress;

typedef struct phx_progress_opts {
    size_t struct_size; /* PHX_PROGRESS_OPTS_INIT sets it (doc/maint/abi.md) */
    int64_t total_steps; /* the last step's number (0: unknown, no ETA) */
    int64_t first_step; /* steps made before this run (a resumed run); 0 */
    int every; /* a step line every `every` steps (0: none) */
    int rank; /* only rank 0 prints and writes */
    const char *unit; /* the throughput's unit: "samples" (NULL) or "tokens"; the record's key is <unit>_per_s */
    const char *metrics; /* JSON Lines file appended to (NULL: none) */
    const char *tensorboard; /* folder for a TensorBoard event file (NULL: none) */
    FILE *out; /* where the lines go (NULL: stdout) */
} phx_progress_opts;

#define PHX_PROGRESS_OPTS_INIT \
    { \
        .struct_size = sizeof(phx_progress_opts) \
    }

/* A progress handle, its files opened (rank 0 only). NULL with
 * phx_last_error when opts is bad (negative counts, first_step past
 * total_steps, a unit that is not 1-32 letters), or a file or folder
 * cannot be opened (the error names it), or PHX_EABI. */
phx_progress *phx_progress_new(const phx_progress_opts *opts);

/* Closes the files after ending a pending step line; NULL does nothing. */
void phx_progress_free(phx_progress *p);

/* One training step done: records it (lr < 0 and per_s <= 0 are left out
 * of the record and the line) and prints the step line when it is due.
 * PHX_EIO when the record cannot be written (the line is still printed);
 * PHX_EINVAL when p is NULL. */
phx_status phx_progress_step(phx_progress *p, int epoch, double loss, double lr, double per_s);

/* Adds key = value to the next step's record (at most 16 keys, each
 * once; key as phx_metrics_add_f64 takes it), e.g. "grad_norm" or
 * "loss_scale": call before phx_progress_step. PHX_EINVAL for a bad,
 * repeated or 17th key (nothing is queued). */
phx_status phx_progress_add(phx_progress *p, const char *key, double value);

/* Records one more value (e.g. "val_loss", "accuracy", "loss_scale") at
 * the current step; key as phx_metrics_add_f64 takes it. */
phx_status phx_progress_record(phx_progress *p, int epoch, const char *key, double value);

/* Ends a step line left on screen (a terminal), so what is printed next
 * starts on its own line. */
void phx_progress_break(phx_progress *p);

/* The current step's number: first_step plus the steps recorded. */
int64_t phx_progress_steps(const phx_progress *p);

/* The metrics handle the records go through (owned by p; never NULL for
 * a valid p: one that writes nothing when no file was asked for), for a
 * program's own records. */
phx_metrics *phx_progress_metrics(phx_progress *p);

/* Writes seconds as "1:02:03" or "4:05" into buf (n bytes); returns buf. */
const char *phx_progress_hms(double seconds, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
