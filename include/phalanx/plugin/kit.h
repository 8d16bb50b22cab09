/* Phalanx — the plugin author's kit (plugin ABI 1.1): what communicator
 * plugins share, exported by libphalanx so an out-of-tree plugin uses the
 * same code as the built-in threads, gloo and mpi backends.
 *   an ordered worker queue: collectives run one at a time, in issue
 *     order, on a thread of the plugin, and complete their work handles;
 *   element-wise reductions of every dtype (f16/bf16 accumulate in f32 and
 *     round once) and the divide that turns a sum into an average;
 *   phx_spawn's abort key, which tells a plugin waiting on its peers that
 *     one of them has failed;
 *   (ABI 1.3) one record for a queued collective (phx_kit_op) and the
 *     kit's communicator (phx_kit_comm): the five collective slots filled
 *     from one run function over the queue, with the failure protocol
 *     (a dead peer is PHX_EPEER naming its rank, ranks out of step are
 *     PHX_EDESYNC naming both collectives, a timeout blames the rank at
 *     the end of the chain of waits) and PHX_DEBUG=detail's check;
 *   (ABI 1.3) the stall check: ranks out of step named within about a
 *     second (PHX_DESYNC_CHECK_MS), a rank that is only late waited for. */
#ifndef PHALANX_PLUGIN_KIT_H
#define PHALANX_PLUGIN_KIT_H

#include <stddef.h>
#include <stdint.h>
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

/* ---- one queued collective ---- */

typedef enum phx_kit_kind {
    PHX_KIT_ALLREDUCE,
    PHX_KIT_BROADCAST,
    PHX_KIT_ALLGATHER,
    PHX_KIT_REDUCE_SCATTER,
    PHX_KIT_BARRIER
} phx_kit_kind;

/* A collective as the core hands it to a plugin (comm_v1.h has the
 * shapes): plain data, so it can be queued by copy. */
typedef struct phx_kit_op {
    phx_kit_kind kind;
    const void *send; /* the input: == recv for allreduce and broadcast,
                          NULL for barrier */
    void *recv; /* the output (NULL for barrier) */
    int64_t count; /* elements per rank: allgather's input, reduce_scatter's
                          output; 0 for barrier */
    phx_dtype dt; /* PHX_F32 for barrier */
    phx_reduce_op op; /* allreduce and reduce_scatter; PHX_SUM otherwise */
    int root; /* broadcast; 0 otherwise */
} phx_kit_op;

/* "allreduce", "broadcast", "allgather", "reduce_scatter", "barrier"
 * ("?" out of range). */
const char *phx_kit_kind_name(phx_kit_kind kind);

/* What op is, as the failure messages name it: "allreduce(count=4096,
 * f32, sum)", "broadcast(count=10, f32, root 1)", "allgather(count=2,
 * i64)". Writes at most len bytes (NUL-terminated); returns buf. */
char *phx_kit_op_text(const phx_kit_op *op, char *buf, size_t len);

/* ---- the kit's communicator: slots, queue and failure protocol ---- */

typedef struct phx_kit_comm phx_kit_comm;

/* Runs one collective, on the kit's queue thread (or the caller's, see
 * phx_kit_comm_set_inline): PHX_OK, or an error with the reason in
 * msg[0..msg_len) (empty: phx_last_error() is taken). A failed wait on a
 * peer is named with phx_kit_comm_peer before returning; PHX_ETIMEOUT
 * and PHX_EPEER start the failure protocol (phx_kit_comm_new). */
typedef phx_status (*phx_kit_op_fn)(void *ctx, const phx_kit_op *op, char *msg, size_t msg_len);

/* A communicator for the plugin's init to store in *state: the kit's
 * slots (PHX_KIT_COMM_SLOTS) queue each collective as a phx_kit_op and
 * run(ctx, op, ...) runs it, one at a time in issue order, on a thread
 * the kit starts now. name ("gloo") starts every message; keys go under
 * a->prefix + name + "/" in a->store.
 * The failure protocol, around each run:
 *   - a failed op's message is "<name>: rank R: <kind> #<seq> failed[ with
 *     peer rank P]: <reason>", and the communicator is then broken: every
 *     later op fails at once with PHX_EPEER, "... not run: the
 *     communicator failed earlier (<first message>)";
 *   - after PHX_ETIMEOUT or PHX_EPEER this rank publishes what it issued
 *     as op #seq and reads its peers' (up to a second after a timeout or
 *     a desync hint, a millisecond otherwise): a peer that issued
 *     something else makes it PHX_EDESYNC, naming both collectives;
 *   - after PHX_ETIMEOUT waiting on peer P, the blame follows the chain
 *     of published waits to the rank that published none (the one that
 *     stopped), and the message names that rank;
 *   - a PHX_EPEER is published for the other ranks
 *     (phx_kit_comm_failure), unless it was itself such a report.
 * PHX_ENOMEM, or PHX_EIO when no thread can be started. */
phx_status phx_kit_comm_new(const phx_comm_init_args *a, const char *name, phx_kit_op_fn run, void *ctx,
                            phx_kit_comm **out);

/* The ctx given to phx_kit_comm_new. */
void *phx_kit_comm_ctx(const phx_kit_comm *kc);

/* All-reduces of at most bytes run on the calling thread when nothing is
 * queued or running (phx_kit_queue_push_inline): latency-bound ones skip
 * two thread hand-offs. 0 (the default): every op goes to the thread. */
void phx_kit_comm_set_inline(phx_kit_comm *kc, size_t bytes);

/* Runs what is queued and stops the thread; later collectives are
 * refused (PHX_EINVAL). kc stays valid for phx_kit_comm_free: a plugin
 * whose watchdog helps the last ops (phx_kit_comm_failure) drains, stops
 * the watchdog, then frees. */
void phx_kit_comm_drain(phx_kit_comm *kc);

/* Drains kc (if not yet) and frees it, not its ctx: free that after.
 * NULL: no-op. */
void phx_kit_comm_free(phx_kit_comm *kc);

/* The five collective slots over a phx_kit_comm: the plugin's state (what
 * its init stored) must be the phx_kit_comm. Each wraps its arguments
 * into a phx_kit_op and queues it; the core has checked them already. */
phx_status phx_kit_allreduce(void *kc, void *buf, int64_t count, phx_dtype dt, phx_reduce_op op, phx_work *work);
phx_status phx_kit_broadcast(void *kc, void *buf, int64_t count, phx_dtype dt, int root, phx_work *work);
phx_status phx_kit_allgather(void *kc, const void *send, void *recv, int64_t count, phx_dtype dt, phx_work *work);
phx_status phx_kit_reduce_scatter(void *kc, const void *send, void *recv, int64_t count, phx_dtype dt, phx_reduce_op op,
                                  phx_work *work);
phx_status phx_kit_barrier(void *kc, phx_work *work);

/* In a phx_comm_v1 initializer: the five collective slots above.
 *   static const phx_comm_v1 vt = {.init = my_init, .finalize = my_fini,
 *                                  PHX_KIT_COMM_SLOTS};                  */
#define PHX_KIT_COMM_SLOTS \
    .allreduce = phx_kit_allreduce, .broadcast = phx_kit_broadcast, .allgather = phx_kit_allgather, \
    .reduce_scatter = phx_kit_reduce_scatter, .barrier = phx_kit_barrier

/* The same, for a table filled at run time. */
void phx_kit_comm_slots(phx_comm_v1 *v);

/* Called by run before it returns an error: the failed wait was on rank
 * peer (it becomes "with peer rank P" and starts the blame chain);
 * desync != 0 when the transport saw another collective's data (the
 * desync check then waits for the peers' answers). */
void phx_kit_comm_peer(phx_kit_comm *kc, int peer, int desync);

/* For a plugin's watchdog. 1 while an op runs: *op, its number *seq and
 * the seconds it has run (*secs); 0 when idle. Any pointer may be NULL. */
int phx_kit_comm_running(phx_kit_comm *kc, phx_kit_op *op, uint64_t *seq, double *secs);

/* For a watchdog that sees a long wait: publishes what the running op is
 * (once per op), so that peers that time out find this rank's answer at
 * once. */
void phx_kit_comm_publish_running(phx_kit_comm *kc);

/* 1 when another rank has reported a failure (phx_kit_comm_report, or
 * phx_spawn's abort key) or the store cannot be reached (its host is part
 * of the job); the reason goes into why[0..why_len). 0 otherwise. A run
 * that gives up on it starts its message "another rank reported a
 * failure: " (then it is not published again). */
int phx_kit_comm_failure(phx_kit_comm *kc, char *why, size_t why_len);

/* Tells the other ranks' phx_kit_comm_failure about msg (the first report
 * wins). */
void phx_kit_comm_report(phx_kit_comm *kc, const char *msg);

/* Completes the running op's work now with st and msg (a watchdog giving
 * up on a call that cannot be cancelled); the op's own result is then
 * dropped. 1 when there was one to complete. */
int phx_kit_comm_expire(phx_kit_comm *kc, phx_status st, const char *msg);

/* ---- what each rank issued: PHX_DEBUG=detail and the desync check ---- */

/* Publishes text as what this rank issued as collective seq, under
 * <prefix><seq>/<rank>. */
phx_status phx_kit_issued_set(phx_store *store, const char *prefix, uint64_t seq, int rank, const char *text);

/* After a failure: publishes mine, then reads each peer's text for seq
 * (wait seconds for the first, at most 0.2 s for the next once one was
 * silent). 1 when a peer issued something else: msg gets "rank R issued
 * <mine> as collective #seq but rank P issued <theirs>: the ranks went out
 * of step (...)". 0 when none differs. */
int phx_kit_issued_differ(phx_store *store, const char *prefix, uint64_t seq, int rank, int size, const char *mine,
                          double wait, char *msg, size_t msg_len);

/* Before a collective (PHX_DEBUG=detail, which the core runs for every
 * backend): publishes mine, reads every rank's (each within timeout_s)
 * and fails with PHX_EDESYNC naming the first rank that differs from rank
 * 0 ("<who>: PHX_DEBUG=detail: collective #5 differs across ranks: rank 0
 * issued X, rank 2 issued Y"), or with the store's error naming a rank
 * that issued nothing. Drops this rank's text for seq - 1. */
phx_status phx_kit_issued_check(phx_store *store, const char *prefix, uint64_t seq, int rank, int size,
                                const char *mine, double timeout_s, const char *who);

/* Queue-level form of phx_kit_comm_expire: completes the work of the job
 * running on q's thread now; its own result is dropped. 1 when there was
 * one. */
int phx_kit_queue_expire(phx_kit_queue *q, phx_status st, const char *msg);

/* ---- ranks out of step, named within about a second (ABI 1.3) ---- */

/* The desync sentence every backend uses: "rank R issued <mine> as
 * collective #seq but rank P issued <theirs>: the ranks went out of step
 * (...)". Writes at most len bytes (NUL-terminated); returns msg. */
char *phx_kit_desync_text(char *msg, size_t len, int rank, const char *mine, uint64_t seq, int peer,
                          const char *theirs);

/* The stall check. The kit keeps what this rank issued as its last 64
 * collectives. When one has run for phx_kit_comm_check_s seconds
 * (PHX_DESYNC_CHECK_MS, default 1000 ms; 0 turns the check off), this
 * rank's record (phx_kit_comm_record) goes to the other ranks and theirs
 * are compared with it (phx_kit_comm_compare): a collective number at
 * which two ranks issued different collectives fails the running op with
 * PHX_EDESYNC naming both (phx_kit_comm_desync), while a rank that is
 * merely late (it has not issued the op yet) matches and is waited for up
 * to PHX_TIMEOUT. By default a thread of the kit exchanges the records
 * through the store (a->store of phx_kit_comm_new) and polls it every
 * 100 ms while the op is stalled; nothing is exchanged while collectives
 * complete within the check's time. */
double phx_kit_comm_check_s(const phx_kit_comm *kc); /* NULL: what the environment says */

/* This rank's record into buf[0..len) (NUL-terminated, at most about
 * 12 KiB): how many collectives it issued, whether the last still runs,
 * and the text of each of the last 64 (phx_kit_op_text). Returns the
 * length written. */
size_t phx_kit_comm_record(phx_kit_comm *kc, char *buf, size_t len);

/* 1 when record (rank peer's phx_kit_comm_record) holds a collective
 * number at which peer issued something else than this rank: msg gets
 * phx_kit_desync_text for the first such number. 0 otherwise (an
 * unparsable record included). */
int phx_kit_comm_compare(phx_kit_comm *kc, int peer, const char *record, char *msg, size_t len);

/* The same comparison on two records as text (a plugin that keeps its
 * own history, such as nccl, writes the format of phx_kit_comm_record:
 * a line "phx-kit-record <rank> <ops issued> <1 if the last runs>", then
 * one line "<op number> <phx_kit_op_text>" per op, oldest first). */
int phx_kit_record_compare(int rank, const char *mine, int peer, const char *theirs, char *msg, size_t len);

/* The store exchange the kit's stall check runs: when publish, sets mine
 * under <prefix>stall/<rank> and counts it in <prefix>stall/gen; then,
 * if that count moved since *gen (always when gen is NULL), reads every
 * other rank's record and compares it with mine. 1 with msg when a rank
 * differs. */
int phx_kit_record_exchange(phx_store *store, const char *prefix, int rank, int size, const char *mine, int publish,
                            int64_t *gen, char *msg, size_t len);

/* Fails the running op with PHX_EDESYNC: its message becomes "<name>:
 * rank R: <kind> #<seq> failed: <why>" (also written to msg[0..len) when
 * msg is not NULL), the communicator is broken, and the op's wait on its
 * peers is ended through the abort function (phx_kit_comm_set_abort) or,
 * without one, its work completes now (phx_kit_comm_expire) while the
 * stuck run ends at its own timeout. 1 when an op was running. */
int phx_kit_comm_desync(phx_kit_comm *kc, const char *why, char *msg, size_t len);

/* How the plugin ends a run that waits on its peers (called on another
 * thread than the run's): after it, the run must return soon with an
 * error (its status and message are then replaced by st and msg). */
typedef void (*phx_kit_abort_fn)(void *ctx, phx_status st, const char *msg);
void phx_kit_comm_set_abort(phx_kit_comm *kc, phx_kit_abort_fn abort_fn);

/* own != 0: the plugin's ranks share no store (it makes its own world),
 * so the kit exchanges no records; the plugin sends phx_kit_comm_record
 * over its own channel and calls phx_kit_comm_compare and
 * phx_kit_comm_desync itself. */
void phx_kit_comm_set_exchange(phx_kit_comm *kc, int own);

#ifdef __cplusplus
}
#endif
#endif
