/* ZeRO's consolidated state (checkpoints: gathered onto one rank or all,
 * copied back into the shards) and gradient clipping over the shards. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "src/zero/zero-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/tensor/device-impl.h"
#include "src/base/util.h"

/* ---- consolidated state ----------------------------------------------- */

/* All-reduces two host floats through a tensor on the comm's device
 * (blocking; a world of one keeps them). */
static phx_status allreduce_pair(px_zero *z, float v[2], phx_reduce_op op)
{
    int64_t two = 2;
    phx_tensor *t = phx_tensor_new(PHX_F32, 1, &two, phx_comm_device(z->comm));
    phx_tensor *h = phx_tensor_from_data(PHX_F32, 1, &two, v);
    phx_status st = t && h ? phx_tensor_copy(t, h) : PHX_ENOMEM;
    if (st == PHX_OK) st = phx_comm_allreduce(z->comm, t, op, NULL);
    if (st == PHX_OK) st = phx_tensor_to_host(t, v);
    phx_tensor_free(t);
    phx_tensor_free(h);
    return st;
}

void px_zero_drop_full(px_zero *z)
{
    for (size_t i = 0; i < z->n_full; i++) {
        if (z->full_names) px_free(z->full_names[i]);
        if (z->full) phx_tensor_free(z->full[i]);
    }
    px_free(z->full_names);
    px_free(z->full);
    z->full_names = NULL;
    z->full = NULL;
    z->n_full = z->n_kinds = 0;
    z->consolidated = false;
}

/* ---- consolidation ---------------------------------------------------- */

/* The shard optimizer's state as kinds per piece: tensors[i * kinds + k]
 * named "<piece leaf>.<kind>" with the piece's numel. 0 kinds for an
 * empty shard or a stateless optimizer; -1 for another layout. */
static long state_kinds(px_zero *z, const char ***names, phx_tensor ***ts)
{
    size_t n = phx_optimizer_state(z->inner, names, ts);
    if (z->n_shard == 0 || n == 0) return 0;
    if (n % z->n_shard) return -1;
    size_t kinds = n / z->n_shard;
    for (size_t i = 0; i < z->n_shard; i++) {
        const char *leaf = phx_param_name(z->shard[i].sp);
        size_t ll = strlen(leaf);
        for (size_t k = 0; k < kinds; k++) {
            const char *nm = (*names)[i * kinds + k];
            const char *kind0 = (*names)[k] + strlen(phx_param_name(z->shard[0].sp)) + 1;
            if (strncmp(nm, leaf, ll) != 0 || nm[ll] != '.' || strcmp(nm + ll + 1, kind0) != 0 ||
                phx_tensor_numel((*ts)[i * kinds + k]) != z->shard[i].piece.len ||
                phx_tensor_dtype((*ts)[i * kinds + k]) != PHX_F32)
                return -1;
        }
    }
    return (long)kinds;
}

/* Consolidation: one kind of state through chunk c. */
typedef struct state_arg {
    px_zchunk *c;
    int q;
    int64_t lo;
    size_t kind, kinds;
    phx_tensor **ts; /* the shard optimizer's state tensors */
} state_arg;

/* The shard piece holding part (same region and parameter). */
static const px_zshard *piece_of(const px_zero *z, size_t region, const px_zpiece *part, size_t *index)
{
    for (size_t i = 0; i < z->n_shard; i++) {
        const px_zshard *s = &z->shard[i];
        if (s->region == region && s->piece.param == part->param && s->piece.off <= part->off &&
            part->off + part->len <= s->piece.off + s->piece.len) {
            *index = i;
            return s;
        }
    }
    return NULL;
}

static phx_status pack_state(px_zero *z, size_t region, const px_zpiece *part, int64_t at, void *arg)
{
    const state_arg *a = arg;
    size_t i;
    const px_zshard *s = piece_of(z, region, part, &i);
    if (!s) return phx_error(PHX_EINVAL, "phx_zero_consolidate: no shard piece holds an owned range (internal)");
    int64_t len = part->len;
    phx_tensor *dst = px_tensor_view(a->c->send, at - a->lo, 1, &len);
    phx_tensor *src = px_tensor_view(a->ts[i * a->kinds + a->kind], part->off - s->piece.off, 1, &len);
    phx_status st = dst && src ? phx_tensor_copy(dst, src) : PHX_ENOMEM;
    phx_tensor_free(dst);
    phx_tensor_free(src);
    return st;
}

static phx_status unpack_state(px_zero *z, size_t region, const px_zpiece *part, int64_t at, void *arg)
{
    (void)region;
    const state_arg *a = arg;
    int64_t len = part->len;
    phx_tensor *dst = px_tensor_view(z->full[part->param * z->n_kinds + a->kind], part->off, 1, &len);
    phx_tensor *src = px_tensor_view(a->c->recv, (int64_t)a->q * a->c->len + (at - a->lo), 1, &len);
    phx_status st = dst && src ? phx_tensor_copy(dst, src) : PHX_ENOMEM;
    phx_tensor_free(dst);
    phx_tensor_free(src);
    return st;
}

/* Allocates the full tensors and their names on a holder rank. */
static phx_status alloc_full(px_zero *z, const char *const *names, size_t kinds)
{
    z->n_kinds = kinds;
    z->n_full = z->n_params * kinds;
    z->full_names = px_calloc(z->n_full ? z->n_full : 1, sizeof *z->full_names);
    z->full = px_calloc(z->n_full ? z->n_full : 1, sizeof *z->full);
    if (!z->full_names || !z->full) return PHX_ENOMEM;
    size_t skip = strlen(phx_param_name(z->shard[0].sp)) + 1;
    for (size_t i = 0; i < z->n_params; i++) {
        const phx_tensor *v = phx_param_value(z->params[i]);
        const char *pn = phx_module_param_name(z->model, i);
        for (size_t k = 0; k < kinds; k++) {
            const char *kind = names[k] + skip;
            size_t len = strlen(pn) + strlen(kind) + 2;
            char *nm = px_malloc(len);
            phx_tensor *t = phx_tensor_zeros(PHX_F32, phx_tensor_ndim(v), phx_tensor_shape(v), phx_tensor_device(v));
            z->full_names[i * kinds + k] = nm;
            z->full[i * kinds + k] = t;
            if (!nm || !t) return PHX_ENOMEM;
            snprintf(nm, len, "%s.%s", pn, kind);
        }
    }
    return PHX_OK;
}

phx_status phx_zero_consolidate(phx_optimizer *zo, int root)
{
    px_zero *z = px_zero_of(zo, "phx_zero_consolidate");
    if (!z) return PHX_EINVAL;
    if (root < -1 || root >= z->world)
        return phx_error(PHX_EINVAL, "phx_zero_consolidate: root %d, expected -1 or 0 .. %d", root, z->world - 1);
    px_zero_drop_full(z);
    /* A world of one makes its gather buffers only now. */
    if (!z->send_buf && px_zero_make_plans(z) != PHX_OK)
        return phx_error(PHX_ENOMEM, "phx_zero_consolidate: no memory for the gather buffers");
    const char **names = NULL;
    phx_tensor **ts = NULL;
    long kinds = state_kinds(z, &names, &ts);
    /* Agree on the number of kinds and on whether any rank cannot take
     * part before any rank starts gathering. */
    float agree[2] = {kinds > 0 ? (float)kinds : 0.0f, kinds < 0 ? 1.0f : 0.0f};
    phx_status st = allreduce_pair(z, agree, PHX_MAX);
    if (st != PHX_OK) return phx_error(st, "phx_zero_consolidate: agreeing on the state layout: %s", phx_last_error());
    if (agree[1] != 0)
        return phx_error(PHX_EUNSUPPORTED,
                         "phx_zero_consolidate: the shard optimizer (%s) on some rank does not keep one state tensor "
                         "per piece and kind; it cannot be consolidated",
                         phx_optimizer_type(z->inner));
    size_t K = (size_t)agree[0];
    bool hold = root == -1 || root == z->rank;
    if (K > 0 && hold && (kinds <= 0 || (size_t)kinds != K))
        return phx_error(PHX_EUNSUPPORTED,
                         "phx_zero_consolidate: rank %d owns no elements (or a stateless shard) and cannot name the "
                         "state; consolidate onto rank 0",
                         z->rank);
    if (hold) st = alloc_full(z, names, K);
    /* One all-gather per kind and chunk, as the parameters' (collective:
     * reached by every rank even after a local failure). */
    for (size_t k = 0; k < K; k++) {
        for (size_t g = 0; g < z->n_regions; g++) {
            px_zregion *rg = &z->regions[g];
            for (size_t j = 0; j < rg->n_chunks; j++) {
                px_zchunk *c = &rg->chunks[j];
                state_arg a = {c, z->rank, 0, k, K, ts};
                int64_t hi;
                px_zero_chunk_range(rg, c, z->rank, &a.lo, &hi);
                phx_status ls = st == PHX_OK ? px_zero_for_range(z, g, a.lo, hi, pack_state, &a) : st;
                phx_status cs = z->world > 1 ? phx_comm_allgather(z->comm, c->send, c->recv, NULL)
                                             : phx_tensor_copy(c->recv, c->send);
                if (cs != PHX_OK)
                    return phx_error(cs, "phx_zero_consolidate: all-gather of region %zu: %s", g, phx_last_error());
                for (int q = 0; q < z->world && hold && ls == PHX_OK; q++) {
                    a.q = q;
                    px_zero_chunk_range(rg, c, q, &a.lo, &hi);
                    ls = px_zero_for_range(z, g, a.lo, hi, unpack_state, &a);
                }
                if (st == PHX_OK) st = ls;
            }
        }
    }
    if (st != PHX_OK) {
        px_zero_drop_full(z);
        return phx_error(st, "phx_zero_consolidate: %s", phx_last_error());
    }
    z->consolidated = hold;
    return PHX_OK;
}

phx_status phx_zero_load_full_state(phx_optimizer *zo)
{
    px_zero *z = px_zero_of(zo, "phx_zero_load_full_state");
    if (!z) return PHX_EINVAL;
    if (!z->consolidated)
        return phx_error(PHX_ESTATE,
                         "phx_zero_load_full_state: no consolidated state on rank %d; call "
                         "phx_zero_consolidate(zero, -1) before phx_checkpoint_load",
                         z->rank);
    const char **names = NULL;
    phx_tensor **ts = NULL;
    long kinds = state_kinds(z, &names, &ts);
    if (kinds < 0 || (kinds > 0 && (size_t)kinds != z->n_kinds))
        return phx_error(PHX_EUNSUPPORTED, "phx_zero_load_full_state: the shard optimizer's state changed layout");
    phx_status st = PHX_OK;
    for (size_t i = 0; i < z->n_shard && st == PHX_OK; i++)
        for (size_t k = 0; k < (size_t)kinds && st == PHX_OK; k++) {
            int64_t len = z->shard[i].piece.len;
            phx_tensor *src =
                px_tensor_view(z->full[z->shard[i].piece.param * z->n_kinds + k], z->shard[i].piece.off, 1, &len);
            phx_tensor *dst = px_tensor_view(ts[i * kinds + k], 0, 1, &len);
            st = src && dst ? phx_tensor_copy(dst, src) : PHX_ENOMEM;
            phx_tensor_free(src);
            phx_tensor_free(dst);
        }
    return st;
}

/* ---- clipping --------------------------------------------------------- */

phx_status phx_zero_clip_grad_norm(phx_optimizer *zo, double max_norm, double *total_norm)
{
    px_zero *z = px_zero_of(zo, "phx_zero_clip_grad_norm");
    if (!z) return PHX_EINVAL;
    if (!(max_norm > 0.0) || isinf(max_norm))
        return phx_error(PHX_EINVAL, "phx_zero_clip_grad_norm: max_norm %g, expected finite and > 0", max_norm);
    phx_status st = px_zero_check_model(z);
    if (st == PHX_OK) st = px_zero_refresh_grads(z);
    /* This rank's sum of squares (f64), then the sum over ranks as two f32
     * halves (hi + lo) so the total keeps about 48 bits. A local failure
     * still joins the all-reduce, poisoning the sum with NaN. */
    double sum = 0.0;
    for (size_t k = 0; k < z->n_shard && st == PHX_OK; k++) {
        const phx_tensor *g = phx_param_grad(z->shard[k].sp);
        const phx_kernels_v1 *kern = px_device_kernels(g->storage->device);
        if (!kern) {
            st = PHX_ENOTFOUND;
            break;
        }
        PX_NEED_SLOT("phx_zero_clip_grad_norm", g->storage->device, kern, sum_squares);
        double s = 0.0;
        st = kern->sum_squares(g->storage->device.index, g->numel, px_tensor_ptr(g), g->dtype, &s);
        sum += s;
    }
    char err[512] = "";
    if (st != PHX_OK) {
        snprintf(err, sizeof err, "%s", phx_last_error());
        sum = NAN;
    }
    if (z->world > 1) {
        float hl[2] = {(float)sum, 0.0f};
        hl[1] = (float)(sum - (double)hl[0]);
        phx_status cs = allreduce_pair(z, hl, PHX_SUM);
        if (cs != PHX_OK)
            return phx_error(cs, "phx_zero_clip_grad_norm: all-reducing the sum of squares: %s", phx_last_error());
        sum = (double)hl[0] + (double)hl[1];
    }
    if (st != PHX_OK) return phx_error(st, "phx_zero_clip_grad_norm: %s", err);
    double total = sqrt(sum);
    if (total_norm) *total_norm = total;
    if (!isfinite(total)) return PHX_OK;
    float coef = (float)(max_norm / (total + 1e-6)); /* PyTorch's clip_coef, applied when < 1 */
    if (!(coef < 1.0f)) return PHX_OK;
    for (size_t k = 0; k < z->n_shard; k++) {
        st = phx_tensor_axpby(0.0f, NULL, coef, phx_param_grad(z->shard[k].sp));
        if (st != PHX_OK) return st;
    }
    return PHX_OK;
}
