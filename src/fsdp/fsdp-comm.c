/* FSDP's collectives and full buffers: allocating and freeing a unit's
 * full parameters and gradients, the all-gather of the shards (in
 * param_dtype under mixed precision), the reduce-scatter of the
 * gradients into the shard (one in flight), the non-finite flag and the
 * buffers' broadcast. src/fsdp/fsdp.c runs them around each unit. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "src/fsdp/fsdp-impl.h"
#include "src/modules/module-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/tensor/device-impl.h"
#include "src/base/util.h"

static const char *unit_name(const px_funit *u)
{
    return u->path[0] ? u->path : "(root)";
}

/* ---- full buffers ----------------------------------------------------- */

/* Gives t's storage memory (kept when it has some). */
static phx_status full_alloc(px_fsdp *f, const px_funit *u, phx_tensor *t, bool grad)
{
    px_storage *s = t->storage;
    if (s->data) return PHX_OK;
    const phx_device_v1 *tb = phx_device_table(s->device);
    if (!tb) return PHX_ENOTFOUND;
    phx_status st = tb->alloc(s->device.index, s->bytes, &s->data);
    if (st != PHX_OK) {
        s->data = NULL;
        return phx_error(st, "FSDP: allocating the full %s of unit '%s' (%zu bytes): %s",
                         grad ? "gradients" : "parameters", unit_name(u), s->bytes, phx_last_error());
    }
    uint64_t *now = grad ? &f->stats.grad_bytes : &f->stats.gathered_bytes;
    uint64_t *peak = grad ? &f->stats.peak_grad_bytes : &f->stats.peak_gathered_bytes;
    *now += s->bytes;
    if (*now > *peak) *peak = *now;
    return PHX_OK;
}

void px_fsdp_full_free(px_fsdp *f, phx_tensor *t, bool grad)
{
    px_storage *s = t->storage;
    if (!s->data) return;
    const phx_device_v1 *tb = phx_device_table(s->device);
    if (tb) tb->release(s->device.index, s->data);
    s->data = NULL;
    *(grad ? &f->stats.grad_bytes : &f->stats.gathered_bytes) -= s->bytes;
}

/* ---- gather and reshard ----------------------------------------------- */

/* Issues the all-gather of unit u's parameters (no-op when gathered):
 * of the f32 shard, or (mixed precision, unless exact) of its cast. */
phx_status px_fsdp_gather_start(px_fsdp *f, px_funit *u, bool prefetch, bool exact)
{
    if (u->gathered) return PHX_OK;
    bool lp = u->shard_lp && !exact;
    phx_status st = full_alloc(f, u, u->full_v, false);
    if (st == PHX_OK && lp) st = full_alloc(f, u, u->full_lp, false);
    if (st == PHX_OK && lp) st = phx_tensor_cast(u->shard_lp, u->shard_v);
    if (st == PHX_OK)
        st = phx_comm_allgather(f->comm, lp ? u->shard_lp : u->shard_v, lp ? u->full_lp : u->full_v, &u->gwork);
    if (st != PHX_OK) {
        u->gwork = NULL;
        px_fsdp_full_free(f, u->full_v, false);
        if (u->full_lp) px_fsdp_full_free(f, u->full_lp, false);
        return phx_error(st, "FSDP: all-gather of unit '%s' (%lld elements): %s", unit_name(u), (long long)u->numel,
                         phx_last_error());
    }
    u->gathered = true;
    u->exact = !lp;
    f->stats.gathers++;
    if (prefetch) f->stats.prefetches++;
    /* New values for the modules' low-precision weight copies. */
    for (size_t j = 0; j < u->n_params; j++) phx_param_touch(f->params[u->params[j]]);
    return PHX_OK;
}

/* Unit u's parameters, gathered and complete (widened into f32 when
 * gathered in param_dtype). */
phx_status px_fsdp_gather_wait_as(px_fsdp *f, px_funit *u, bool exact)
{
    phx_status st = px_fsdp_gather_start(f, u, false, exact);
    if (st != PHX_OK) return st;
    if (u->gwork) {
        st = phx_work_wait(u->gwork, -1);
        phx_work_free(u->gwork);
        u->gwork = NULL;
    }
    if (st == PHX_OK && !u->exact && u->full_lp->storage->data) st = phx_tensor_cast(u->full_v, u->full_lp);
    if (u->full_lp) px_fsdp_full_free(f, u->full_lp, false);
    if (st != PHX_OK) {
        char err[PX_FSDP_ERR_MAX];
        snprintf(err, sizeof err, "%s", phx_last_error());
        u->gathered = false;
        px_fsdp_full_free(f, u->full_v, false);
        return phx_error(st, "FSDP: all-gather of unit '%s' (%lld elements): %s", unit_name(u), (long long)u->numel,
                         err);
    }
    return PHX_OK;
}

phx_status px_fsdp_gather_wait(px_fsdp *f, px_funit *u)
{
    return px_fsdp_gather_wait_as(f, u, false);
}

/* Frees unit u's full parameters (unless summoned). */
void px_fsdp_reshard(px_fsdp *f, px_funit *u)
{
    if (!u->gathered || u->keep) return;
    if (u->gwork) {
        (void)phx_work_wait(u->gwork, -1);
        phx_work_free(u->gwork);
        u->gwork = NULL;
    }
    px_fsdp_full_free(f, u->full_v, false);
    if (u->full_lp) px_fsdp_full_free(f, u->full_lp, false);
    u->gathered = false;
}

/* ---- gradients -------------------------------------------------------- */

/* Unit u's full gradients, zeroed, for its backward. */
phx_status px_fsdp_grads_open(px_fsdp *f, px_funit *u)
{
    if (u->full_g->storage->data) return PHX_OK; /* the same backward reaching it twice */
    phx_status st = full_alloc(f, u, u->full_g, true);
    if (st == PHX_OK) st = phx_tensor_fill(u->full_g, 0.0);
    return st;
}

/* Waits for unit u's reduce-scatter, adds it into the shard gradient and
 * frees the full gradients. */
static phx_status rs_finish(px_fsdp *f, px_funit *u)
{
    if (!u->rs_pending) return PHX_OK;
    u->rs_pending = false;
    phx_status st = PHX_OK;
    if (u->rwork) {
        st = phx_work_wait(u->rwork, -1);
        phx_work_free(u->rwork);
        u->rwork = NULL;
    }
    /* Hybrid: each group reduced its own ranks; add the groups' blocks. */
    if (st == PHX_OK && f->rcomm) {
        st = phx_comm_allreduce(f->rcomm, u->rs_lp ? u->rs_lp : u->rs_out, PHX_SUM, NULL);
        if (st != PHX_OK)
            st = phx_error(st, "FSDP: all-reduce of unit '%s''s reduced block across the replicas: %s", unit_name(u),
                           phx_last_error());
    }
    if (st == PHX_OK && u->rs_lp) st = phx_tensor_cast(u->rs_out, u->rs_lp);
    if (st == PHX_OK)
        st = phx_tensor_axpby(1.0f, u->rs_out, 1.0f, u->shard_g);
    else
        st = phx_error(st, "FSDP: reduce-scatter of unit '%s' (%lld elements): %s", unit_name(u), (long long)u->numel,
                       phx_last_error());
    px_fsdp_full_free(f, u->full_g, true);
    if (u->full_g_lp) px_fsdp_full_free(f, u->full_g_lp, true);
    return st;
}

phx_status px_fsdp_rs_finish_all(px_fsdp *f)
{
    phx_status st = PHX_OK;
    for (size_t k = 0; k < f->n_units; k++) {
        phx_status s = rs_finish(f, &f->units[k]);
        if (st == PHX_OK) st = s;
    }
    return st;
}

/* Divides unit u's full gradients by the world and issues their
 * reduce-scatter; the one issued before is finished first (one in
 * flight while the next unit's backward runs). */
phx_status px_fsdp_rs_launch(px_fsdp *f, px_funit *u)
{
    phx_status st = px_fsdp_rs_finish_all(f);
    /* The average over the whole world (hybrid: the replicas' sums are added below). */
    phx_status s2 = f->wworld > 1 ? phx_tensor_axpby(0.0f, NULL, 1.0f / (float)f->wworld, u->full_g) : PHX_OK;
    if (st == PHX_OK) st = s2;
    /* Mixed precision: reduced in reduce_dtype. */
    if (u->full_g_lp) {
        phx_status cs = full_alloc(f, u, u->full_g_lp, true);
        if (cs == PHX_OK) cs = phx_tensor_cast(u->full_g_lp, u->full_g);
        if (cs != PHX_OK && st == PHX_OK) st = cs;
        if (cs != PHX_OK && u->full_g_lp->storage->data) (void)phx_tensor_fill(u->full_g_lp, NAN);
    }
    /* Issued even after a local failure: the other ranks expect it. */
    phx_status rs = u->full_g_lp && !u->full_g_lp->storage->data
        ? PHX_ENOMEM
        : phx_comm_reduce_scatter(f->comm, u->full_g_lp ? u->full_g_lp : u->full_g, u->rs_lp ? u->rs_lp : u->rs_out,
                                  PHX_SUM, &u->rwork);
    if (rs != PHX_OK) {
        u->rwork = NULL;
        px_fsdp_full_free(f, u->full_g, true);
        if (u->full_g_lp) px_fsdp_full_free(f, u->full_g_lp, true);
        if (st == PHX_OK)
            st = phx_error(rs, "FSDP: reduce-scatter of unit '%s' (%lld elements): %s", unit_name(u),
                           (long long)u->numel, phx_last_error());
        return st;
    }
    u->rs_pending = true;
    f->stats.reduce_scatters++;
    return st;
}

/* Elements of unit u's block that rank holds (the rest is padding). */
static int64_t block_valid(const px_funit *u, int rank)
{
    int64_t n = u->numel - (int64_t)rank * u->block;
    return n < 0 ? 0 : n > u->block ? u->block : n;
}

/* A non-finite gradient on any rank becomes visible on every rank (the
 * GradScaler then skips the step everywhere): one all-reduce of a flag,
 * and the shards filled with NaN when it is raised (the padding stays 0). */
phx_status px_fsdp_settle_nonfinite(px_fsdp *f)
{
    phx_device dev = phx_tensor_device(f->flag);
    const phx_kernels_v1 *kern = px_device_kernels(dev);
    if (!kern) return PHX_ENOTFOUND;
    if (!kern->unscale_check)
        return phx_error(PHX_EUNSUPPORTED, "FSDP: the gradients' device has no unscale_check kernel");
    phx_status st = phx_tensor_fill(f->flag, 0.0);
    for (size_t k = 0; k < f->n_units && st == PHX_OK; k++) {
        int64_t n = block_valid(&f->units[k], f->rank);
        if (n > 0)
            st = kern->unscale_check(dev.index, n, px_tensor_ptr(f->units[k].shard_g), 1.0f, px_tensor_ptr(f->flag));
    }
    phx_status cs = f->wworld > 1 ? phx_comm_allreduce(f->wcomm, f->flag, PHX_MAX, NULL) : PHX_OK;
    if (st == PHX_OK) st = cs;
    double found = 0;
    if (st == PHX_OK) st = phx_tensor_get(f->flag, 0, &found);
    for (size_t k = 0; k < f->n_units && st == PHX_OK && found != 0; k++) {
        int64_t n = block_valid(&f->units[k], f->rank);
        if (n == 0) continue;
        phx_tensor *v = px_tensor_view(f->units[k].shard_g, 0, 1, &n);
        st = v ? phx_tensor_fill(v, NAN) : PHX_ENOMEM;
        phx_tensor_free(v);
    }
    if (st != PHX_OK) return phx_error(st, "FSDP: checking the gradients for inf/NaN: %s", phx_last_error());
    return PHX_OK;
}

phx_status px_fsdp_broadcast_buffers(px_fsdp *f)
{
    size_t n = phx_module_num_buffers(f->model);
    if (f->wworld == 1) return PHX_OK;
    for (size_t i = 0; i < n; i++) {
        phx_status st = phx_comm_broadcast(f->wcomm, phx_module_buffer(f->model, i), 0, NULL);
        if (st != PHX_OK)
            return phx_error(st, "FSDP: broadcasting buffer '%s' from rank 0: %s", phx_module_buffer_name(f->model, i),
                             phx_last_error());
    }
    return PHX_OK;
}
