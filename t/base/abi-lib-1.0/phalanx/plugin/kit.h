/* Phalanx — the plugin author's kit (plugin ABI 1.1): what communicator
 * plugins share, exported by libphalanx so an out-of-tree plugin uses the
 * same code as the built-in threads and gloo backends.
 *   an ordered worker queue: collectives run one at a time, in issue
 *     order, on a thread of the plugin, and complete their work handles;
 *   element-wise reductions of every dtype (f16/bf16 accumulate in f32 and
 *     round once) and the divide that turns a sum into an average;
 *   phx_spawn's abort key, which tells a plugin waiting on its peers that
 *     one of them has failed. */
#ifndef PHALANX_PLUGIN_KIT_H
#define PHALANX_PLUGIN_KIT_H

#include <stddef.h>
#include "phalanx/error.h"
#include "phalanx/tensor.h"
#include "phalanx/store.h"
#include "phalanx/plugin/comm_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the ordered worker queue ---- */

typedef struct phx_kit_queue phx_kit_queue;

/* Runs one job (a copy of what was pushed); returns its status, and on
 * failure writes the reason into msg[0..msg_len) (it becomes the work's
 * phx_last_error). Called on the queue's thread, or on the pushing thread
 * for phx_kit_queue_push_inline. */
typedef phx_status (*phx_kit_run_fn)(void *ctx, const void *job, char *msg, size_t msg_len);

/* A queue of jobs of job_size bytes each (copied in: plain data), run by
 * run(ctx, job, ...) on one thread that the queue starts now; that thread
 * inherits the caller's signal mask. name ("gloo") prefixes its errors.
 * PHX_ENOMEM or PHX_EIO (no thread) with the reason. */
phx_status phx_kit_queue_new(size_t job_size, phx_kit_run_fn run, void *ctx, const char *name, phx_kit_queue **out);

/* Queues job; the queue's thread runs it after every job pushed before
 * and then calls phx_work_complete(work, status, msg). Thread-safe.
 * PHX_ENOMEM when the queue cannot grow (job not queued, work untouched). */
phx_status phx_kit_queue_push(phx_kit_queue *q, const void *job, phx_work *work);

/* As phx_kit_queue_push, but when nothing is queued or running the job
 * runs at once on the calling thread (and the work completes before this
 * returns): for latency-bound collectives, it saves the hand-off to the
 * queue's thread and back. Order is kept either way. */
phx_status phx_kit_queue_push_inline(phx_kit_queue *q, const void *job, phx_work *work);

/* Runs what is queued, stops the thread, frees the queue. NULL: no-op. */
void phx_kit_queue_free(phx_kit_queue *q);

/* ---- reductions ---- */

/* For each o < nout: out[o][0..cnt) <- op over q = 0..n-1 (in that order)
 * of in[q][off .. off+cnt), elements of dt; for PHX_AVG the sum is then
 * divided by div. f16/bf16 accumulate in f32 and round once; integer sums
 * wrap (two's complement) and integer averages truncate toward zero; max
 * and min propagate NaN. An output may be one of the inputs at the same
 * offset (each block is read before it is written). Every rank that
 * reduces the same inputs gets the same bits. PHX_EINVAL for a dtype or
 * op out of range, or n < 1. */
phx_status phx_kit_reduce(void *const *out, int nout, const void *const *in, int n, size_t off, size_t cnt,
                          phx_dtype dt, phx_reduce_op op, int div);

/* buf[0..cnt) /= div, element-wise, as phx_kit_reduce's PHX_AVG does
 * (the average of a sum made elsewhere). */
phx_status phx_kit_divide(void *buf, size_t cnt, phx_dtype dt, int div);

/* ---- phx_spawn's abort key ---- */

/* The store key phx_spawn sets (in the store its ranks share) when one of
 * them has failed; its value says which and why. A plugin waiting on its
 * peers polls it and gives up with PHX_EPEER. */
#define PHX_KIT_ABORT_KEY "phx/spawn/abort"

/* 1 when PHX_KIT_ABORT_KEY is set in store (checked without waiting);
 * its value, NUL-terminated, goes into why[0..why_len). 0 otherwise. */
int phx_kit_aborted(phx_store *store, char *why, size_t why_len);

#ifdef __cplusplus
}
#endif
#endif
