/* Phalanx — training metrics as JSON Lines (one JSON object per line), for
 * plotting (tools/phx-plot) and for any tool that reads JSON Lines.
 *
 *   phx_metrics *m = phx_metrics_open("run.jsonl", rank);
 *   phx_metrics_begin(m);
 *   phx_metrics_add_i64(m, "step", step);
 *   phx_metrics_add_f64(m, "loss", loss);
 *   phx_metrics_end(m);          // {"time":12.5,"step":100,"loss":0.42}
 *   phx_metrics_close(m);
 *
 * Every record starts with "time", the wall-clock seconds since the handle
 * was opened, plus the "time" of the file's last record when the file
 * already had records: a run restarted from a checkpoint that appends to
 * its metrics file continues the time axis instead of starting it again
 * at 0. The examples and tools use these keys, and phx-plot knows
 * them: step, epoch, loss, val_loss, accuracy, lr, samples_per_s,
 * tokens_per_s, loss_scale; a program adds its own keys freely.
 *
 * Only rank 0 writes: a handle opened with another rank (or a NULL path)
 * accepts every call and writes nothing, so one program runs unchanged on
 * every rank. A record is written with one write(2) on a file opened with
 * O_APPEND, so a line is never split, even when several programs append
 * to one file. The file is created with mode 0666 less the umask. A handle
 * is used by one thread at a time.
 *
 * TensorBoard: phx_metrics_tensorboard(m, "runs/a") also writes every
 * record's numbers as TensorBoard scalars (what PyTorch's SummaryWriter
 * writes; open with `tensorboard --logdir runs`):
 *
 *   {"time":12.5,"step":100,"loss":0.42,"lr":0.001}
 *     -> scalars "loss" = 0.42 and "lr" = 0.001 at step 100
 *
 * Each number except "step" becomes a scalar of its key's name (as a
 * float32, NaN and infinities included); the step is the record's "step",
 * else the previous record's (0 at first); strings are left out. The file
 * is events.out.tfevents.<seconds>.<hostname>.<pid> in that directory
 * (created when missing), written without TensorFlow or protobuf
 * (doc/reference/formats.md); each record is appended with one write(2), so a crash
 * loses at most the record being written. phx_metrics_hparams adds the
 * run's hyperparameters (TensorBoard's HPARAMS tab). */
#ifndef PHALANX_METRICS_H
#define PHALANX_METRICS_H

#include <stdint.h>
#include "phalanx/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct phx_metrics phx_metrics;

/* Opens path for appending (created if missing). rank != 0 or path NULL:
 * a handle that writes nothing. NULL (with phx_last_error naming the path
 * and the system's reason) when the file cannot be opened. */
phx_metrics *phx_metrics_open(const char *path, int rank);

/* Also writes each record's numbers as TensorBoard scalars into a new
 * event file in dir (above), from the next record on. A handle that
 * writes nothing (rank != 0) returns PHX_OK and writes nothing; a rank-0
 * handle opened with a NULL path writes the event file alone.
 * PHX_EINVAL: m or dir NULL or empty, or already writing events; PHX_EIO
 * naming the directory or file and the system's reason. */
phx_status phx_metrics_tensorboard(phx_metrics *m, const char *dir);

/* One hyperparameter: a string (str not NULL) or a number. A small value
 * type, like phx_meta: it never grows. */
typedef struct phx_hparam {
    const char *name; /* a key as phx_metrics_add_* take it */
    const char *str; /* the value when a string; NULL: num is the value */
    double num;
} phx_hparam;

/* Records the run's hyperparameters (SummaryWriter.add_hparams' first
 * half): a line {"time":..,"hparams":{"lr":0.001,"optimizer":"adamw"}}
 * and, with TensorBoard events on, the hparams plugin's session-start
 * record, so TensorBoard's HPARAMS tab lists the run with these values
 * beside its scalars (TensorBoard takes the metrics from the scalars).
 * Numbers are written with 17 digits. PHX_EINVAL: n outside 1-64, a bad
 * or repeated name, a non-finite number, a record begun and not ended,
 * or the line would pass 4096 bytes; PHX_EIO as phx_metrics_end. */
phx_status phx_metrics_hparams(phx_metrics *m, const phx_hparam *hp, int n);

/* The event file's path (owned by m), or NULL when m writes none. */
const char *phx_metrics_tensorboard_file(const phx_metrics *m);

/* Closes the files; NULL does nothing. An unfinished record is dropped. */
void phx_metrics_close(phx_metrics *m);

/* Starts a record (dropping an unfinished one). */
phx_status phx_metrics_begin(phx_metrics *m);

/* Adds one key to the record begun. Keys are 1-64 characters of letters,
 * digits, '_', '.' or '-', not starting with a digit, and unique within
 * the record ("time" is the library's). A non-finite double is written as
 * null (JSON has no NaN). A string is escaped as JSON requires.
 * PHX_EINVAL: no record begun, a bad or repeated key, a string that is
 * not valid UTF-8, or the record would pass 4096 bytes (the record is
 * then dropped whole). */
phx_status phx_metrics_add_i64(phx_metrics *m, const char *key, int64_t value);
phx_status phx_metrics_add_f64(phx_metrics *m, const char *key, double value);
phx_status phx_metrics_add_str(phx_metrics *m, const char *key, const char *value);

/* Writes the record as one line. PHX_EIO when the write fails (the error
 * names the file); PHX_EINVAL when no record was begun. */
phx_status phx_metrics_end(phx_metrics *m);

#ifdef __cplusplus
}
#endif
#endif
