/* ZeRO-1 and ZeRO-2: an optimizer that keeps state for one rank's shard
 * of the parameters, steps it, and all-gathers the updated blocks.
 *
 * The parameters, in named_parameters() order, form one flat f32 space
 * cut into regions (ZeRO-1: runs of at most region_bytes; ZeRO-2: the DDP
 * buckets, whose gradients are reduce-scattered block by block). Region
 * g of n elements is split into world blocks of ceil(n / world); rank r
 * owns block r. The shard is a module whose parameters are views of the
 * owned pieces of the model's parameters (values and gradients), so any
 * optimizer made over it updates the model in place and allocates state
 * for its pieces only. The all-gather copies every block through one
 * pair of buffers sized for the largest region; the copy plans (views)
 * are made once, so a step allocates nothing. doc/guide/sharding.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/zero.h"
#include "src/zero/zero-impl.h"
#include "phalanx/log.h"
#include "src/ddp/ddp-impl.h"
#include "src/modules/module-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/tensor/device-impl.h"
#include "src/base/util.h"
#include "src/base/abi.h"

static const char zero_type[] = "ZeroRedundancyOptimizer";

px_zero *px_zero_of(phx_optimizer *o, const char *who)
{
    px_zero *z = o && strcmp(phx_optimizer_type(o), zero_type) == 0 ? phx_optimizer_ctx(o) : NULL;
    if (!z || z->magic != PX_ZERO_MAGIC) {
        phx_error(PHX_EINVAL, "%s: optimizer is %s, expected a ZeroRedundancyOptimizer", who,
                  o ? phx_optimizer_type(o) : "NULL");
        return NULL;
    }
    return z;
}

/* ---- the partition ---------------------------------------------------- */

static phx_status add_piece(px_zregion *g, size_t param, int64_t off, int64_t len)
{
    px_zpiece *np = px_realloc(g->pieces, (g->n_pieces + 1) * sizeof *np);
    if (!np) return PHX_ENOMEM;
    g->pieces = np;
    g->pieces[g->n_pieces++] = (px_zpiece){param, off, len};
    g->numel += len;
    return PHX_OK;
}

static px_zregion *new_region(px_zero *z)
{
    px_zregion *nr = px_realloc(z->regions, (z->n_regions + 1) * sizeof *nr);
    if (!nr) return NULL;
    z->regions = nr;
    memset(&nr[z->n_regions], 0, sizeof *nr);
    return &nr[z->n_regions++];
}

/* ZeRO-1: runs of at most cap elements across parameter boundaries. */
static phx_status regions_flat(px_zero *z, int64_t cap)
{
    px_zregion *g = NULL;
    for (size_t i = 0; i < z->n_params; i++) {
        int64_t n = phx_tensor_numel(phx_param_value(z->params[i])), off = 0;
        while (off < n) {
            if (!g || g->numel >= cap)
                if (!(g = new_region(z))) return PHX_ENOMEM;
            int64_t take = n - off < cap - g->numel ? n - off : cap - g->numel;
            phx_status st = add_piece(g, i, off, take);
            if (st != PHX_OK) return st;
            off += take;
        }
    }
    for (size_t k = 0; k < z->n_regions; k++) z->regions[k].block = (z->regions[k].numel + z->world - 1) / z->world;
    return PHX_OK;
}

/* ZeRO-2: the DDP buckets, whole parameters in bucket order. */
static phx_status regions_buckets(px_zero *z)
{
    px_ddp *d = z->ddp;
    for (size_t b = 0; b < d->n_buckets; b++) {
        px_zregion *g = new_region(z);
        if (!g) return PHX_ENOMEM;
        for (size_t j = 0; j < d->buckets[b].n_members; j++) {
            size_t i = d->buckets[b].members[j];
            phx_status st = add_piece(g, i, 0, phx_tensor_numel(phx_param_value(z->params[i])));
            if (st != PHX_OK) return st;
        }
        g->block = d->buckets[b].block;
    }
    return PHX_OK;
}

/* Stage 3: the FSDP units, whole parameters in unit order, and the
 * units' blocks. */
static phx_status regions_units(px_zero *z)
{
    px_fsdp *f = z->fsdp;
    for (size_t k = 0; k < f->n_units; k++) {
        px_zregion *g = new_region(z);
        if (!g) return PHX_ENOMEM;
        const px_funit *u = &f->units[k];
        for (size_t j = 0; j < u->n_params; j++) {
            size_t i = u->params[j];
            phx_status st = add_piece(g, i, 0, phx_tensor_numel(phx_param_value(z->params[i])));
            if (st != PHX_OK) return st;
        }
        g->block = u->block;
    }
    return PHX_OK;
}

/* Calls fn for every piece of region g inside [lo, hi) of its flat order:
 * the parameter, the element range in it and where it starts in the
 * region. */
phx_status px_zero_for_range(px_zero *z, size_t region, int64_t lo, int64_t hi, px_zero_piece_fn fn, void *arg)
{
    const px_zregion *g = &z->regions[region];
    int64_t start = 0;
    for (size_t k = 0; k < g->n_pieces; k++) {
        const px_zpiece *p = &g->pieces[k];
        int64_t a = lo > start ? lo : start, b = hi < start + p->len ? hi : start + p->len;
        if (a < b) {
            px_zpiece part = {p->param, p->off + (a - start), b - a};
            phx_status st = fn(z, region, &part, a, arg);
            if (st != PHX_OK) return st;
        }
        start += p->len;
    }
    return PHX_OK;
}

/* ---- the shard module ----------------------------------------------- */

static phx_status shard_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    (void)self, (void)x, (void)y;
    return phx_error(PHX_EUNSUPPORTED,
                     "ZeroRedundancyOptimizer: the shard module only holds parameters for its "
                     "optimizer; run the model instead");
}
static void shard_free(phx_module *self)
{
    (void)self;
}
static const phx_module_vtable shard_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "ZeroShard",
    .forward = shard_forward,
    .free = shard_free,
};

/* A piece's view of t (its parameter's value or gradient), shaped as the
 * piece's shard parameter. */
static phx_tensor *piece_view(const px_zero *z, const px_zpiece *p, const phx_tensor *t)
{
    int64_t row[2] = {1, p->len};
    bool matrix = phx_tensor_ndim(phx_param_value(z->params[p->param])) >= 2;
    return px_tensor_view(t, p->off, matrix ? 2 : 1, matrix ? row : row + 1);
}

/* Stage 3: the piece's view of its unit's persistent shard (value or
 * gradient), which holds the rank's block of the unit's flat space. */
static phx_tensor *shard_view(const px_zero *z, const px_zshard *s, bool grad)
{
    const px_funit *u = &z->fsdp->units[s->region];
    px_zpiece at = s->piece;
    at.off = s->at - (int64_t)z->rank * u->block;
    return piece_view(z, &at, grad ? u->shard_g : u->shard_v);
}

static phx_status add_shard_piece(px_zero *z, size_t region, const px_zpiece *part, int64_t at, void *arg)
{
    (void)arg;
    px_zshard *ns = px_realloc(z->shard, (z->n_shard + 1) * sizeof *ns);
    if (!ns) return PHX_ENOMEM;
    z->shard = ns;
    px_zshard *s = &z->shard[z->n_shard];
    s->piece = *part;
    s->region = region;
    s->at = at;
    phx_param *src = z->params[part->param];
    /* The leaf name: the dotted name with '_' for '.', and the offset when
     * the piece is not the whole parameter. */
    const char *dotted = phx_module_param_name(z->model, part->param);
    size_t nl = strlen(dotted) + 24; /* never cut: a cut name could repeat another */
    char *name = px_malloc(nl);
    if (!name) return PHX_ENOMEM;
    bool whole = part->off == 0 && part->len == phx_tensor_numel(phx_param_value(src));
    if (whole)
        snprintf(name, nl, "%s", dotted);
    else
        snprintf(name, nl, "%s_%lld", dotted, (long long)part->off);
    for (char *c = name; *c; c++)
        if (*c == '.') *c = '_';
    phx_tensor *v = z->fsdp ? shard_view(z, s, false) : piece_view(z, part, phx_param_value(src));
    phx_param *sp = v ? phx_module_add_param(z->shard_mod, name, v) : NULL;
    px_free(name);
    if (!sp) phx_tensor_free(v); /* (NULL-safe) kept only by a parameter made */
    if (!v || !sp) return PHX_ENOMEM;
    sp->owner = src->owner; /* type-based rules see the parameter's module */
    phx_tensor_free(sp->grad);
    sp->grad = NULL;
    s->sp = sp;
    z->n_shard++;
    return PHX_OK;
}

/* Points each piece's gradient at its parameter's current gradient (DDP
 * may have moved it into a new bucket since the last step). */
phx_status px_zero_refresh_grads(px_zero *z)
{
    for (size_t k = 0; z->fsdp && k < z->n_shard; k++) {
        px_zshard *s = &z->shard[k];
        if (s->sp->grad) continue; /* views of the unit's shard, made once */
        if (!(s->sp->grad = shard_view(z, s, true))) return PHX_ENOMEM;
    }
    for (size_t k = 0; !z->fsdp && k < z->n_shard; k++) {
        px_zshard *s = &z->shard[k];
        const phx_tensor *g = phx_param_grad(z->params[s->piece.param]);
        phx_tensor *cur = s->sp->grad;
        if (cur && cur->storage == g->storage && cur->offset == g->offset + s->piece.off) continue;
        phx_tensor *v = piece_view(z, &s->piece, g);
        if (!v) return PHX_ENOMEM;
        phx_tensor_free(cur);
        s->sp->grad = v;
    }
    return PHX_OK;
}

/* ---- the all-gather plans --------------------------------------------- */

static phx_status seg_add(px_zseg **segs, size_t *n, phx_tensor *dst, phx_tensor *src)
{
    px_zseg *ns = dst && src ? px_realloc(*segs, (*n + 1) * sizeof *ns) : NULL;
    if (!ns) {
        phx_tensor_free(dst);
        phx_tensor_free(src);
        return PHX_ENOMEM;
    }
    *segs = ns;
    ns[(*n)++] = (px_zseg){dst, src};
    return PHX_OK;
}

/* The flat range of rank q's part of chunk c of region g. */
void px_zero_chunk_range(const px_zregion *g, const px_zchunk *c, int q, int64_t *lo, int64_t *hi)
{
    int64_t a = (int64_t)q * g->block + c->off, b = a + c->len;
    *lo = a < g->numel ? a : g->numel;
    *hi = b < g->numel ? b : g->numel;
}

typedef struct plan_arg {
    px_zchunk *c;
    int q; /* the rank whose part is planned */
    int64_t lo; /* where that part starts in the region */
} plan_arg;

static phx_status plan_pack(px_zero *z, size_t region, const px_zpiece *part, int64_t at, void *arg)
{
    (void)region;
    plan_arg *a = arg;
    int64_t len = part->len;
    phx_tensor *dst = px_tensor_view(a->c->send, at - a->lo, 1, &len);
    phx_tensor *src = px_tensor_view(phx_param_value(z->params[part->param]), part->off, 1, &len);
    return seg_add(&a->c->pack, &a->c->n_pack, dst, src);
}

static phx_status plan_unpack(px_zero *z, size_t region, const px_zpiece *part, int64_t at, void *arg)
{
    (void)region;
    plan_arg *a = arg;
    int64_t len = part->len;
    phx_tensor *dst = px_tensor_view(phx_param_value(z->params[part->param]), part->off, 1, &len);
    phx_tensor *src = px_tensor_view(a->c->recv, (int64_t)a->q * a->c->len + (at - a->lo), 1, &len);
    return seg_add(&a->c->unpack, &a->c->n_unpack, dst, src);
}

/* The chunks of every region, the shared buffers (one chunk to send,
 * world chunks to receive) and the copy plans through them. */
phx_status px_zero_make_plans(px_zero *z)
{
    int64_t big = 1;
    for (size_t k = 0; k < z->n_regions; k++) {
        px_zregion *g = &z->regions[k];
        int64_t per = g->block < z->chunk ? g->block : z->chunk;
        g->n_chunks = g->block > 0 ? (size_t)((g->block + per - 1) / per) : 0;
        g->chunks = px_calloc(g->n_chunks ? g->n_chunks : 1, sizeof *g->chunks);
        if (!g->chunks) return PHX_ENOMEM;
        for (size_t j = 0; j < g->n_chunks; j++) {
            g->chunks[j].off = (int64_t)j * per;
            g->chunks[j].len = g->block - g->chunks[j].off < per ? g->block - g->chunks[j].off : per;
        }
        if (per > big) big = per;
    }
    int64_t all = big * z->world;
    phx_device dev = phx_tensor_device(phx_param_value(z->params[0]));
    z->send_buf = phx_tensor_zeros(PHX_F32, 1, &big, dev);
    z->recv_buf = phx_tensor_zeros(PHX_F32, 1, &all, dev);
    if (!z->send_buf || !z->recv_buf) return PHX_ENOMEM;
    for (size_t k = 0; k < z->n_regions; k++) {
        px_zregion *g = &z->regions[k];
        for (size_t j = 0; j < g->n_chunks; j++) {
            px_zchunk *c = &g->chunks[j];
            int64_t wl = c->len * z->world;
            c->send = px_tensor_view(z->send_buf, 0, 1, &c->len);
            c->recv = px_tensor_view(z->recv_buf, 0, 1, &wl);
            if (!c->send || !c->recv) return PHX_ENOMEM;
            for (int q = 0; q < z->world; q++) {
                plan_arg a = {c, q, 0};
                int64_t hi;
                px_zero_chunk_range(g, c, q, &a.lo, &hi);
                phx_status st = px_zero_for_range(z, k, a.lo, hi, q == z->rank ? plan_pack : plan_unpack, &a);
                if (st != PHX_OK) return st;
            }
        }
    }
    return PHX_OK;
}

static phx_status run_segs(const px_zseg *s, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        phx_status st = phx_tensor_copy(s[k].dst, s[k].src);
        if (st != PHX_OK) return st;
    }
    return PHX_OK;
}

/* Every rank's updated blocks to every rank, chunk by chunk. */
static phx_status gather_params(px_zero *z)
{
    for (size_t k = 0; k < z->n_regions; k++) {
        px_zregion *g = &z->regions[k];
        for (size_t j = 0; j < g->n_chunks; j++) {
            px_zchunk *c = &g->chunks[j];
            phx_status st = run_segs(c->pack, c->n_pack);
            if (st == PHX_OK) {
                st = phx_comm_allgather(z->comm, c->send, c->recv, NULL);
                if (st != PHX_OK)
                    return phx_error(st,
                                     "ZeroRedundancyOptimizer: all-gather of region %zu of %zu (%lld elements), "
                                     "chunk %zu of %zu: %s",
                                     k, z->n_regions, (long long)g->numel, j, g->n_chunks, phx_last_error());
            }
            if (st == PHX_OK) st = run_segs(c->unpack, c->n_unpack);
            if (st != PHX_OK) return st;
        }
    }
    return PHX_OK;
}

/* ---- the optimizer ---------------------------------------------------- */

/* The shard's views are of the parameters as they were at construction:
 * a model changed since (phx_module_to, a parameter added) would be
 * stepped through stale views. O(pieces), no allocation. */
phx_status px_zero_check_model(px_zero *z)
{
    if (phx_module_num_params(z->model) != z->n_params)
        return phx_error(PHX_ESTATE,
                         "ZeroRedundancyOptimizer: the model has %zu parameters, it had %zu when the optimizer was "
                         "made; change the model first",
                         phx_module_num_params(z->model), z->n_params);
    for (size_t k = 0; z->fsdp && k < z->n_params; k++)
        if (phx_module_param(z->model, k) != z->params[k])
            return phx_error(PHX_ESTATE,
                             "ZeroRedundancyOptimizer: parameter '%s' was replaced after the optimizer was made",
                             phx_module_param_name(z->model, k));
    for (size_t k = 0; !z->fsdp && k < z->n_shard; k++) {
        const px_zshard *s = &z->shard[k];
        const phx_tensor *v = phx_param_value(z->params[s->piece.param]), *sv = phx_param_value(s->sp);
        if (phx_module_param(z->model, s->piece.param) != z->params[s->piece.param] || v->storage != sv->storage ||
            v->offset + s->piece.off != sv->offset)
            return phx_error(PHX_ESTATE,
                             "ZeroRedundancyOptimizer: parameter '%s' was replaced or moved (phx_module_to?) after "
                             "the optimizer was made; move the model before phx_zero_optimizer_new",
                             phx_module_param_name(z->model, s->piece.param));
    }
    return PHX_OK;
}

static phx_status zero_step(phx_optimizer *self)
{
    px_zero *z = phx_optimizer_ctx(self);
    px_zero_drop_full(z);
    /* A changed model is refused on every rank alike (the same model
     * change on each), before any collective. */
    phx_status st = px_zero_check_model(z);
    if (st != PHX_OK) return st;
    if (z->fsdp && px_fsdp_unsynced(z->fsdp))
        return phx_error(PHX_ESTATE,
                         "ZeroRedundancyOptimizer: gradients accumulated under phx_fsdp_set_no_sync are not reduced "
                         "yet; run the accumulation's last backward with no_sync cleared before the step");
    st = px_zero_refresh_grads(z);
    if (st == PHX_OK) st = phx_optimizer_set_lr(z->inner, phx_optimizer_lr(self));
    if (st == PHX_OK) {
        phx_optimizer_set_steps(z->inner, phx_optimizer_steps(self));
        st = phx_optimizer_step(z->inner);
    }
    char err[512] = "";
    if (st != PHX_OK) snprintf(err, sizeof err, "%s", phx_last_error());
    /* Gathered even after a local failure, keeping the ranks in step.
     * Stage 3 gathers nothing: the next forward gathers each unit. */
    phx_status gs = z->world > 1 && !z->fsdp ? gather_params(z) : PHX_OK;
    for (size_t i = 0; !z->fsdp && i < z->n_params; i++) phx_param_touch(z->params[i]);
    if (st != PHX_OK)
        return phx_error(st, "ZeroRedundancyOptimizer: the shard's %s step: %s", phx_optimizer_type(z->inner), err);
    return gs;
}

static size_t zero_state(phx_optimizer *self, const char ***names, phx_tensor ***tensors)
{
    px_zero *z = phx_optimizer_ctx(self);
    if (!z->consolidated || !z->full || !z->full[0]) {
        phx_log(PHX_LOG_WARN,
                "ZeroRedundancyOptimizer: the state is sharded; call phx_zero_consolidate on every rank "
                "before saving it (this listing is empty)");
        return 0;
    }
    *names = (const char **)z->full_names;
    *tensors = z->full;
    return z->n_full;
}

static void zero_release(px_zero *z)
{
    if (!z) return;
    px_zero_drop_full(z);
    phx_optimizer_free(z->inner);
    phx_module_free(z->shard_mod);
    for (size_t k = 0; k < z->n_regions; k++) {
        px_zregion *g = &z->regions[k];
        for (size_t j = 0; j < g->n_chunks; j++) {
            px_zchunk *c = &g->chunks[j];
            for (size_t i = 0; i < c->n_pack; i++) phx_tensor_free(c->pack[i].dst), phx_tensor_free(c->pack[i].src);
            for (size_t i = 0; i < c->n_unpack; i++)
                phx_tensor_free(c->unpack[i].dst), phx_tensor_free(c->unpack[i].src);
            px_free(c->pack);
            px_free(c->unpack);
            phx_tensor_free(c->send);
            phx_tensor_free(c->recv);
        }
        px_free(g->chunks);
        px_free(g->pieces);
    }
    px_free(z->regions);
    phx_tensor_free(z->send_buf);
    phx_tensor_free(z->recv_buf);
    px_free(z->shard);
    px_free(z->params);
    if (z->ddp) px_ddp_zero2_detach(z->ddp);
    phx_module_free(z->ddp_mod); /* drops the reference taken at construction (ZeRO-2, stage 3) */
    px_free(z);
}

static void zero_free(phx_optimizer *self)
{
    zero_release(phx_optimizer_ctx(self));
}

static const phx_optimizer_vtable zero_vt = {
    .struct_size = PHX_OPTIMIZER_VTABLE_SIZE,
    .type_name = zero_type,
    .step = zero_step,
    .state = zero_state,
    .free = zero_free,
};

/* Every rank must cut the same regions: same parameter count, elements,
 * stage and regions. PHX_EDESYNC on every rank naming the first rank that
 * differs from rank 0. */
static phx_status check_layout(px_zero *z)
{
    int64_t total = 0;
    for (size_t i = 0; i < z->n_params; i++) total += phx_tensor_numel(phx_param_value(z->params[i]));
    int64_t mine[4] = {(int64_t)z->n_params, total, z->stage, (int64_t)z->n_regions};
    int64_t n = 4, nall = 4 * z->world;
    phx_device dev = phx_comm_device(z->comm);
    phx_tensor *in = phx_tensor_new(PHX_I64, 1, &n, dev), *all = phx_tensor_new(PHX_I64, 1, &nall, dev);
    phx_tensor *host = phx_tensor_new(PHX_I64, 1, &nall, phx_cpu());
    phx_tensor *hin = phx_tensor_from_data(PHX_I64, 1, &n, mine);
    phx_status st = in && all && host && hin ? PHX_OK : PHX_ENOMEM;
    if (st == PHX_OK) st = phx_tensor_copy(in, hin);
    if (st == PHX_OK) st = phx_comm_allgather(z->comm, in, all, NULL);
    if (st == PHX_OK) st = phx_tensor_copy(host, all);
    if (st == PHX_OK) {
        const int64_t *h = px_tensor_ptr(host);
        static const char *const what[4] = {"parameters", "parameter elements", "stage", "regions"};
        for (int r = 1; r < z->world && st == PHX_OK; r++)
            for (int k = 0; k < 4 && st == PHX_OK; k++)
                if (h[r * 4 + k] != h[k])
                    st = phx_error(PHX_EDESYNC,
                                   "phx_zero_optimizer_new: rank %d has %lld %s, rank 0 has %lld; every rank must "
                                   "shard the same model the same way",
                                   r, (long long)h[r * 4 + k], what[k], (long long)h[k]);
    } else {
        st = phx_error(st, "phx_zero_optimizer_new: exchanging the parameter layout: %s", phx_last_error());
    }
    phx_tensor_free(in);
    phx_tensor_free(all);
    phx_tensor_free(host);
    phx_tensor_free(hin);
    return st;
}

static phx_status check_params(px_zero *z)
{
    if (z->n_params == 0) return phx_error(PHX_EINVAL, "phx_zero_optimizer_new: the model has no parameters");
    phx_device dev = phx_tensor_device(phx_param_value(z->params[0]));
    for (size_t i = 0; i < z->n_params; i++) {
        const phx_tensor *v = phx_param_value(z->params[i]), *g = phx_param_grad(z->params[i]);
        if (phx_tensor_dtype(v) != PHX_F32 || phx_tensor_dtype(g) != PHX_F32)
            return phx_error(PHX_EINVAL, "phx_zero_optimizer_new: parameter '%s' is %s, expected f32 master weights",
                             phx_module_param_name(z->model, i), phx_dtype_name(phx_tensor_dtype(v)));
        if (!phx_device_equal(phx_tensor_device(v), dev) || !phx_device_equal(phx_tensor_device(g), dev))
            return phx_error(PHX_EUNSUPPORTED,
                             "phx_zero_optimizer_new: parameter '%s' is on another device than '%s'; all "
                             "parameters must share one device",
                             phx_module_param_name(z->model, i), phx_module_param_name(z->model, 0));
    }
    return PHX_OK;
}

phx_optimizer *phx_zero_optimizer_new(phx_module *model, phx_comm *comm, phx_zero_make_fn make, void *arg,
                                      const phx_zero_opts *opts)
{
    if (!model || !make) {
        px_error_null("phx_zero_optimizer_new", !model ? "model" : "make");
        return NULL;
    }
    phx_zero_opts o = PHX_ZERO_OPTS_INIT;
    if (px_abi_in(&o, sizeof o, opts, "phx_zero_optimizer_new", "phx_zero_opts", "PHX_ZERO_OPTS_INIT")) return NULL;
    px_fsdp *fs = px_fsdp_get(model);
    if (o.stage < 0 || o.stage > 3) {
        phx_error(PHX_EINVAL,
                  "phx_zero_optimizer_new: stage %d, expected 1, 2 or 3 (0 means 1, or 3 for an FSDP model)", o.stage);
        return NULL;
    }
    if ((o.stage == 3) != (fs != NULL) && !(fs && o.stage == 0)) {
        phx_error(PHX_EINVAL, "phx_zero_optimizer_new: stage %d %s", o.stage,
                  fs ? "over an FSDP model, which takes stage 3 (or 0)"
                     : "needs an FSDP model (phx_fsdp_new), whose units are the regions");
        return NULL;
    }
    if (fs) {
        if (comm && comm != fs->wcomm && comm != fs->comm) {
            phx_error(PHX_EINVAL, "phx_zero_optimizer_new: stage 3 needs the FSDP wrapper's communicator");
            return NULL;
        }
        if (o.shard_comm || o.replicate_comm) {
            phx_error(PHX_EINVAL,
                      "phx_zero_optimizer_new: stage 3 shards as its FSDP wrapper does; give shard_comm and "
                      "replicate_comm to phx_fsdp_new");
            return NULL;
        }
        comm = fs->comm; /* the sharding group */
        o.stage = 3;
    }
    px_ddp *d = NULL;
    if (o.replicate_comm && !o.shard_comm) {
        phx_error(PHX_EINVAL, "phx_zero_optimizer_new: replicate_comm without shard_comm; hybrid sharding needs both");
        return NULL;
    }
    if (o.stage == 2) {
        if (!(d = px_ddp_of(model, "phx_zero_optimizer_new (stage 2)"))) return NULL;
        if (comm && comm != d->comm) {
            phx_error(PHX_EINVAL, "phx_zero_optimizer_new: stage 2 needs the DDP wrapper's communicator");
            return NULL;
        }
        comm = d->comm;
        int ns = phx_comm_size(o.shard_comm), nr = phx_comm_size(o.replicate_comm), nw = phx_comm_size(d->comm);
        if (o.shard_comm && ns * nr != nw) {
            phx_error(PHX_EINVAL,
                      "phx_zero_optimizer_new: hybrid stage 2 with a shard group of %d ranks and a replicate group "
                      "of %d (%s): expected %d x %d = the DDP wrapper's world of %d",
                      ns, nr, o.replicate_comm ? "given" : "NULL, a group of one", ns, nw / (ns > 0 ? ns : 1), nw);
            return NULL;
        }
    }
    /* The partition's communicator: the shard group when hybrid. */
    phx_comm *world_comm = comm;
    if (o.shard_comm) comm = o.shard_comm;
    px_zero *z = px_calloc(1, sizeof *z);
    if (!z) return NULL;
    z->magic = PX_ZERO_MAGIC;
    z->model = model;
    z->comm = comm;
    z->rcomm = fs ? fs->rcomm : o.replicate_comm;
    z->replicas_unknown = !z->rcomm && o.shard_comm && phx_comm_size(world_comm) > phx_comm_size(o.shard_comm);
    z->rank = phx_comm_rank(comm);
    z->world = phx_comm_size(comm);
    z->stage = o.stage >= 2 ? o.stage : 1;
    z->fsdp = fs;
    if (fs) {
        /* The units and their shards outlive the optimizer's views. */
        z->ddp_mod = model;
        model->refs++;
    }
    z->n_params = phx_module_num_params(model);
    z->params = px_calloc(z->n_params ? z->n_params : 1, sizeof *z->params);
    phx_status st = z->params ? PHX_OK : PHX_ENOMEM;
    for (size_t i = 0; st == PHX_OK && i < z->n_params; i++) z->params[i] = phx_module_param(model, i);
    if (st == PHX_OK) st = check_params(z);
    if (st == PHX_OK && d && z->world > 1) {
        /* Reduce-scatter from now on: the partition is the padded buckets. */
        if ((st = px_ddp_zero2_attach(d, o.shard_comm, o.replicate_comm)) == PHX_OK) {
            z->ddp = d;
            z->ddp_mod = model;
            model->refs++;
        }
    }
    if (st == PHX_OK) {
        /* world chunks of this many elements fill the receive buffer */
        size_t gb = o.gather_bytes ? o.gather_bytes : PX_ZERO_GATHER_BYTES;
        int64_t per = (int64_t)(gb / sizeof(float)) / z->world;
        z->chunk = per > 0 ? per : 1;
        size_t cap = o.region_bytes ? o.region_bytes : PX_ZERO_REGION_BYTES;
        int64_t cap_el = (int64_t)(cap / sizeof(float));
        st = z->fsdp ? regions_units(z) : z->ddp ? regions_buckets(z) : regions_flat(z, cap_el > 0 ? cap_el : 1);
    }
    if (st == PHX_OK && z->world > 1) st = check_layout(z);
    if (st == PHX_OK) st = (z->shard_mod = phx_module_new(&shard_vt, NULL)) ? PHX_OK : PHX_ENOMEM;
    for (size_t k = 0; st == PHX_OK && k < z->n_regions; k++) {
        const px_zregion *g = &z->regions[k];
        st = px_zero_for_range(z, k, px_zero_block_lo(g, z->rank), px_zero_block_hi(g, z->rank), add_shard_piece, NULL);
    }
    if (st == PHX_OK) st = px_zero_refresh_grads(z);
    if (st == PHX_OK && z->world > 1 && !z->fsdp) st = px_zero_make_plans(z);
    if (st == PHX_OK && !(z->inner = make(z->shard_mod, arg)))
        st = phx_error(PHX_EINVAL, "phx_zero_optimizer_new: make returned no optimizer for rank %d's shard: %s",
                       z->rank, phx_last_error());
    phx_optimizer *self = NULL;
    if (st == PHX_OK && z->inner && phx_optimizer_model(z->inner) != z->shard_mod)
        st = phx_error(PHX_EINVAL,
                       "phx_zero_optimizer_new: make returned an optimizer over another module than the "
                       "shard it was given");
    /* Stage 3: the optimizer's model is the shard, so that zero_grad and
     * the GradScaler see the shard's gradients (the model's exist only
     * while a unit runs its backward). */
    if (st == PHX_OK) self = phx_optimizer_new(&zero_vt, z, z->fsdp ? z->shard_mod : model);
    if (!self) {
        /* phx_last_error already says why; releasing keeps it. */
        char err[512];
        snprintf(err, sizeof err, "%s", phx_last_error());
        zero_release(z);
        phx_error(st != PHX_OK ? st : PHX_ENOMEM, "%s", err);
        return NULL;
    }
    phx_optimizer_set_lr(self, phx_optimizer_lr(z->inner));
    phx_optimizer_set_steps(self, phx_optimizer_steps(z->inner));
    return self;
}

/* ---- introspection ---------------------------------------------------- */

phx_optimizer *phx_zero_inner(phx_optimizer *zo)
{
    px_zero *z = px_zero_of(zo, "phx_zero_inner");
    return z ? z->inner : NULL;
}

phx_module *phx_zero_shard(phx_optimizer *zo)
{
    px_zero *z = px_zero_of(zo, "phx_zero_shard");
    return z ? z->shard_mod : NULL;
}

size_t phx_zero_shard_source(phx_optimizer *zo, size_t i, int64_t *offset)
{
    px_zero *z = px_zero_of(zo, "phx_zero_shard_source");
    if (!z) return (size_t)-1;
    if (i >= z->n_shard) {
        phx_error(PHX_EINVAL, "phx_zero_shard_source: piece %zu, the shard has %zu", i, z->n_shard);
        return (size_t)-1;
    }
    if (offset) *offset = z->shard[i].piece.off;
    return z->shard[i].piece.param;
}

int64_t phx_zero_rank_numel(phx_optimizer *zo, int rank)
{
    px_zero *z = px_zero_of(zo, "phx_zero_rank_numel");
    if (!z || rank < 0 || rank >= z->world) return 0;
    int64_t n = 0;
    for (size_t k = 0; k < z->n_regions; k++)
        n += px_zero_block_hi(&z->regions[k], rank) - px_zero_block_lo(&z->regions[k], rank);
    return n;
}

size_t phx_zero_num_regions(phx_optimizer *zo)
{
    px_zero *z = px_zero_of(zo, "phx_zero_num_regions");
    return z ? z->n_regions : 0;
}
