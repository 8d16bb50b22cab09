/* DataParallel's gradient sum: the replicas' gradients are added into the
 * wrapped model's (accumulating, as autograd does) and reset to zero for
 * the next backward. Replica 0, on the model's device, has already added
 * its gradients into the model's during its backward; the others hold
 * theirs in a flat buffer each. On the CPU each pool task owns a slice of
 * the flat gradient space and sums it over those replicas in replica
 * order, so the result is independent of thread timing; a slice passes
 * through L1 once (read every replica, zero it, add the sum into the
 * model). */
#include "config.h"
#include <string.h>
#include "src/dp/dp-impl.h"
#include "src/base/util.h"

#define PX_DP_BLOCK 1024 /* floats summed at a time: 4 KiB, stays in L1 */

/* dst[0..n) += src_0[s..s+n) + ... + src_{k-1}[s..s+n); the sources are
 * zeroed as they are read. */
static void dp_sum(float *dst, float *const *src, size_t k, int64_t s, int64_t n)
{
    float acc[PX_DP_BLOCK];
    for (int64_t b = 0; b < n; b += PX_DP_BLOCK) {
        int64_t m = n - b < PX_DP_BLOCK ? n - b : PX_DP_BLOCK;
        float *s0 = src[0] + s + b;
        for (int64_t e = 0; e < m; e++) acc[e] = s0[e];
        memset(s0, 0, (size_t)m * sizeof *s0);
        for (size_t r = 1; r < k; r++) {
            float *sr = src[r] + s + b;
            for (int64_t e = 0; e < m; e++) acc[e] += sr[e];
            memset(sr, 0, (size_t)m * sizeof *sr);
        }
        float *dd = dst + b;
        for (int64_t e = 0; e < m; e++) dd[e] += acc[e];
    }
}

/* Slice t of reduce_tasks: cache-line aligned bounds in the flat space. */
static void dp_reduce_task(void *arg, size_t t)
{
    px_dp *d = arg;
    int64_t total = d->off[d->n_params];
    int64_t T = (int64_t)d->reduce_tasks;
    int64_t lo = (total * (int64_t)t / T) & ~(int64_t)15;
    int64_t hi = (int64_t)t + 1 == T ? total : (total * ((int64_t)t + 1) / T) & ~(int64_t)15;
    size_t j = 0;
    for (int64_t s = lo; s < hi;) {
        while (d->off[j + 1] <= s) j++;
        int64_t end = d->off[j + 1] < hi ? d->off[j + 1] : hi;
        float *dst = (float *)px_tensor_ptr(d->params[j]->grad) + (s - d->off[j]);
        dp_sum(dst, d->gsrc, d->n_gsrc, s, end - s);
        s = end;
    }
}

static bool dp_all_cpu(const px_dp *d)
{
    for (size_t j = 0; j < d->n_params; j++)
        if (d->params[j]->grad->storage->device.kind != PHX_DEVICE_CPU) return false;
    for (size_t r = 0; r < d->k; r++)
        if (d->reps[r].grad && d->reps[r].grad->storage->device.kind != PHX_DEVICE_CPU) return false;
    return true;
}

/* Any device: one replica at a time through the tensor ops, staging a
 * gradient on the model's device when the replica lives elsewhere. */
static phx_status dp_reduce_generic(px_dp *d)
{
    phx_status st = PHX_OK;
    for (size_t r = 0; r < d->k && st == PHX_OK; r++) {
        px_dp_rep *rep = &d->reps[r];
        if (!rep->grad) continue; /* it added into the model's gradients itself */
        for (size_t j = 0; j < d->n_params && st == PHX_OK; j++) {
            phx_tensor *g = rep->params[j]->grad, *mg = d->params[j]->grad;
            if (!phx_device_equal(g->storage->device, mg->storage->device)) {
                phx_tensor *t;
                st = px_buf_get(&d->stage, PHX_F32, g->ndim, g->shape, mg->storage->device, &t);
                if (st == PHX_OK) st = phx_tensor_copy(t, g);
                g = t;
            }
            if (st == PHX_OK) st = phx_tensor_axpby(1.0f, g, 1.0f, mg);
        }
    }
    px_dp_zero_replica_grads(d);
    return st;
}

phx_status px_dp_reduce(px_dp *d)
{
    d->n_gsrc = 0;
    for (size_t r = 0; r < d->k; r++)
        if (d->reps[r].grad) d->n_gsrc++;
    if (d->off[d->n_params] == 0 || d->n_gsrc == 0) return PHX_OK;
    if (!dp_all_cpu(d)) return dp_reduce_generic(d);
    d->n_gsrc = 0;
    for (size_t r = 0; r < d->k; r++)
        if (d->reps[r].grad) d->gsrc[d->n_gsrc++] = px_tensor_ptr(d->reps[r].grad);
    /* Small models: one task; the hand-off costs more than the sum. */
    d->reduce_tasks = d->off[d->n_params] < 16384 ? 1 : px_pool_size(d->pool);
    px_pool_run(d->pool, d->reduce_tasks, dp_reduce_task, d);
    return PHX_OK;
}

void px_dp_zero_replica_grads(px_dp *d)
{
    for (size_t r = 0; r < d->n; r++)
        if (d->reps[r].grad) (void)phx_tensor_fill(d->reps[r].grad, 0.0);
}
