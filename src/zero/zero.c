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
 * are made once, so a step allocates nothing. doc/sharding.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/zero.h"
#include "phalanx/log.h"
#include "src/ddp/ddp-impl.h"
#include "src/modules/module-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/tensor/device-impl.h"
#include "src/base/util.h"
#include "src/base/abi.h"

#define ZERO_MAGIC 0x5a45524fu /* "ZERO" */
#define ZERO_REGION_BYTES ((size_t)25 << 20)
/* The all-gather's receive buffer (world chunks; the send buffer is one):
 * small beside the state a shard saves. */
#define ZERO_GATHER_BYTES ((size_t)4 << 20)

/* dst <- src, both views made at construction. */
typedef struct zseg {
    phx_tensor *dst, *src;
} zseg;

/* Elements [off, off + len) of parameter param. */
typedef struct zpiece {
    size_t param;
    int64_t off, len;
} zpiece;

/* Elements [off, off + len) of every rank's block of a region: one
 * all-gather through the shared buffers. */
typedef struct zchunk {
    int64_t off, len;
    phx_tensor *send, *recv; /* (len), (world * len): views of the shared buffers */
    zseg *pack, *unpack; /* this rank's elements into send; the others' out of recv */
    size_t n_pack, n_unpack;
} zchunk;

typedef struct zregion {
    zpiece *pieces; /* the region's flat order */
    size_t n_pieces;
    int64_t numel, block;
    zchunk *chunks; /* the block in pieces of at most the gather buffer */
    size_t n_chunks;
} zregion;

/* One piece of this rank's shard. */
typedef struct zshard {
    zpiece piece;
    size_t region;
    phx_param *sp; /* the shard module's parameter */
} zshard;

typedef struct zero {
    unsigned magic;
    phx_module *model;
    phx_comm *comm;
    int rank, world, stage;
    int64_t chunk; /* elements per rank and all-gather */
    phx_module *ddp_mod; /* ZeRO-2: the DDP wrapper (a reference) */
    px_ddp *ddp;
    size_t n_params;
    phx_param **params;
    zregion *regions;
    size_t n_regions;
    phx_tensor *send_buf, *recv_buf;
    zshard *shard;
    size_t n_shard;
    phx_module *shard_mod;
    phx_optimizer *inner;
    /* consolidated state (phx_zero_consolidate) */
    bool consolidated;
    size_t n_kinds, n_full;
    char **full_names;
    phx_tensor **full; /* (n_params * n_kinds), NULL on ranks that do not hold it */
} zero;

static const char zero_type[] = "ZeroRedundancyOptimizer";

static zero *zero_of(phx_optimizer *o, const char *who)
{
    zero *z = o && strcmp(phx_optimizer_type(o), zero_type) == 0 ? phx_optimizer_ctx(o) : NULL;
    if (!z || z->magic != ZERO_MAGIC) {
        phx_error(PHX_EINVAL, "%s: optimizer is %s, expected a ZeroRedundancyOptimizer", who,
                  o ? phx_optimizer_type(o) : "NULL");
        return NULL;
    }
    return z;
}

/* ---- the partition ---------------------------------------------------- */

static phx_status add_piece(zregion *g, size_t param, int64_t off, int64_t len)
{
    zpiece *np = px_realloc(g->pieces, (g->n_pieces + 1) * sizeof *np);
    if (!np) return PHX_ENOMEM;
    g->pieces = np;
    g->pieces[g->n_pieces++] = (zpiece){param, off, len};
    g->numel += len;
    return PHX_OK;
}

static zregion *new_region(zero *z)
{
    zregion *nr = px_realloc(z->regions, (z->n_regions + 1) * sizeof *nr);
    if (!nr) return NULL;
    z->regions = nr;
    memset(&nr[z->n_regions], 0, sizeof *nr);
    return &nr[z->n_regions++];
}

/* ZeRO-1: runs of at most cap elements across parameter boundaries. */
static phx_status regions_flat(zero *z, int64_t cap)
{
    zregion *g = NULL;
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
static phx_status regions_buckets(zero *z)
{
    px_ddp *d = z->ddp;
    for (size_t b = 0; b < d->n_buckets; b++) {
        zregion *g = new_region(z);
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

/* Calls fn for every piece of region g inside [lo, hi) of its flat order:
 * the parameter, the element range in it and where it starts in the
 * region. */
typedef phx_status (*piece_fn)(zero *z, size_t region, const zpiece *part, int64_t at, void *arg);
static phx_status for_range(zero *z, size_t region, int64_t lo, int64_t hi, piece_fn fn, void *arg)
{
    const zregion *g = &z->regions[region];
    int64_t start = 0;
    for (size_t k = 0; k < g->n_pieces; k++) {
        const zpiece *p = &g->pieces[k];
        int64_t a = lo > start ? lo : start, b = hi < start + p->len ? hi : start + p->len;
        if (a < b) {
            zpiece part = {p->param, p->off + (a - start), b - a};
            phx_status st = fn(z, region, &part, a, arg);
            if (st != PHX_OK) return st;
        }
        start += p->len;
    }
    return PHX_OK;
}

static int64_t block_lo(const zregion *g, int r)
{
    int64_t lo = (int64_t)r * g->block;
    return lo < g->numel ? lo : g->numel;
}
static int64_t block_hi(const zregion *g, int r)
{
    return block_lo(g, r + 1);
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
static phx_tensor *piece_view(const zero *z, const zpiece *p, const phx_tensor *t)
{
    int64_t row[2] = {1, p->len};
    bool matrix = phx_tensor_ndim(phx_param_value(z->params[p->param])) >= 2;
    return phx_tensor_view(t, p->off, matrix ? 2 : 1, matrix ? row : row + 1);
}

static phx_status add_shard_piece(zero *z, size_t region, const zpiece *part, int64_t at, void *arg)
{
    (void)arg, (void)at;
    zshard *ns = px_realloc(z->shard, (z->n_shard + 1) * sizeof *ns);
    if (!ns) return PHX_ENOMEM;
    z->shard = ns;
    zshard *s = &z->shard[z->n_shard];
    s->piece = *part;
    s->region = region;
    phx_param *src = z->params[part->param];
    /* The leaf name: the dotted name with '_' for '.', and the offset when
     * the piece is not the whole parameter. */
    const char *dotted = phx_module_param_name(z->model, part->param);
    char name[512];
    bool whole = part->off == 0 && part->len == phx_tensor_numel(phx_param_value(src));
    if (whole)
        snprintf(name, sizeof name, "%s", dotted);
    else
        snprintf(name, sizeof name, "%s_%lld", dotted, (long long)part->off);
    for (char *c = name; *c; c++)
        if (*c == '.') *c = '_';
    phx_tensor *v = piece_view(z, part, phx_param_value(src));
    if (!v) return PHX_ENOMEM;
    phx_param *sp = phx_module_add_param(z->shard_mod, name, v);
    if (!sp) return PHX_ENOMEM;
    sp->owner = src->owner; /* type-based rules see the parameter's module */
    phx_tensor_free(sp->grad);
    sp->grad = NULL;
    s->sp = sp;
    z->n_shard++;
    return PHX_OK;
}

/* Points each piece's gradient at its parameter's current gradient (DDP
 * may have moved it into a new bucket since the last step). */
static phx_status refresh_grads(zero *z)
{
    for (size_t k = 0; k < z->n_shard; k++) {
        zshard *s = &z->shard[k];
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

static phx_status seg_add(zseg **segs, size_t *n, phx_tensor *dst, phx_tensor *src)
{
    zseg *ns = dst && src ? px_realloc(*segs, (*n + 1) * sizeof *ns) : NULL;
    if (!ns) {
        phx_tensor_free(dst);
        phx_tensor_free(src);
        return PHX_ENOMEM;
    }
    *segs = ns;
    ns[(*n)++] = (zseg){dst, src};
    return PHX_OK;
}

/* The flat range of rank q's part of chunk c of region g. */
static void chunk_range(const zregion *g, const zchunk *c, int q, int64_t *lo, int64_t *hi)
{
    int64_t a = (int64_t)q * g->block + c->off, b = a + c->len;
    *lo = a < g->numel ? a : g->numel;
    *hi = b < g->numel ? b : g->numel;
}

typedef struct plan_arg {
    zchunk *c;
    int q; /* the rank whose part is planned */
    int64_t lo; /* where that part starts in the region */
} plan_arg;

static phx_status plan_pack(zero *z, size_t region, const zpiece *part, int64_t at, void *arg)
{
    (void)region;
    plan_arg *a = arg;
    int64_t len = part->len;
    phx_tensor *dst = phx_tensor_view(a->c->send, at - a->lo, 1, &len);
    phx_tensor *src = phx_tensor_view(phx_param_value(z->params[part->param]), part->off, 1, &len);
    return seg_add(&a->c->pack, &a->c->n_pack, dst, src);
}

static phx_status plan_unpack(zero *z, size_t region, const zpiece *part, int64_t at, void *arg)
{
    (void)region;
    plan_arg *a = arg;
    int64_t len = part->len;
    phx_tensor *dst = phx_tensor_view(phx_param_value(z->params[part->param]), part->off, 1, &len);
    phx_tensor *src = phx_tensor_view(a->c->recv, (int64_t)a->q * a->c->len + (at - a->lo), 1, &len);
    return seg_add(&a->c->unpack, &a->c->n_unpack, dst, src);
}

/* The chunks of every region, the shared buffers (one chunk to send,
 * world chunks to receive) and the copy plans through them. */
static phx_status make_plans(zero *z)
{
    int64_t big = 1;
    for (size_t k = 0; k < z->n_regions; k++) {
        zregion *g = &z->regions[k];
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
        zregion *g = &z->regions[k];
        for (size_t j = 0; j < g->n_chunks; j++) {
            zchunk *c = &g->chunks[j];
            int64_t wl = c->len * z->world;
            c->send = phx_tensor_view(z->send_buf, 0, 1, &c->len);
            c->recv = phx_tensor_view(z->recv_buf, 0, 1, &wl);
            if (!c->send || !c->recv) return PHX_ENOMEM;
            for (int q = 0; q < z->world; q++) {
                plan_arg a = {c, q, 0};
                int64_t hi;
                chunk_range(g, c, q, &a.lo, &hi);
                phx_status st = for_range(z, k, a.lo, hi, q == z->rank ? plan_pack : plan_unpack, &a);
                if (st != PHX_OK) return st;
            }
        }
    }
    return PHX_OK;
}

static phx_status run_segs(const zseg *s, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        phx_status st = phx_tensor_copy(s[k].dst, s[k].src);
        if (st != PHX_OK) return st;
    }
    return PHX_OK;
}

/* Every rank's updated blocks to every rank, chunk by chunk. */
static phx_status gather_params(zero *z)
{
    for (size_t k = 0; k < z->n_regions; k++) {
        zregion *g = &z->regions[k];
        for (size_t j = 0; j < g->n_chunks; j++) {
            zchunk *c = &g->chunks[j];
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

/* ---- consolidated state ----------------------------------------------- */

/* All-reduces two host floats through a tensor on the comm's device
 * (blocking; a world of one keeps them). */
static phx_status allreduce_pair(zero *z, float v[2], phx_reduce_op op)
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

static void drop_full(zero *z)
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

/* ---- the optimizer ---------------------------------------------------- */

/* The shard's views are of the parameters as they were at construction:
 * a model changed since (phx_module_to, a parameter added) would be
 * stepped through stale views. O(pieces), no allocation. */
static phx_status check_model(zero *z)
{
    if (phx_module_num_params(z->model) != z->n_params)
        return phx_error(PHX_ESTATE,
                         "ZeroRedundancyOptimizer: the model has %zu parameters, it had %zu when the optimizer was "
                         "made; change the model first",
                         phx_module_num_params(z->model), z->n_params);
    for (size_t k = 0; k < z->n_shard; k++) {
        const zshard *s = &z->shard[k];
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
    zero *z = phx_optimizer_ctx(self);
    drop_full(z);
    /* A changed model is refused on every rank alike (the same model
     * change on each), before any collective. */
    phx_status st = check_model(z);
    if (st != PHX_OK) return st;
    st = refresh_grads(z);
    if (st == PHX_OK) st = phx_optimizer_set_lr(z->inner, phx_optimizer_lr(self));
    if (st == PHX_OK) {
        phx_optimizer_set_steps(z->inner, phx_optimizer_steps(self));
        st = phx_optimizer_step(z->inner);
    }
    char err[512] = "";
    if (st != PHX_OK) snprintf(err, sizeof err, "%s", phx_last_error());
    /* Gathered even after a local failure, keeping the ranks in step. */
    phx_status gs = z->world > 1 ? gather_params(z) : PHX_OK;
    for (size_t i = 0; i < z->n_params; i++) phx_param_touch(z->params[i]);
    if (st != PHX_OK)
        return phx_error(st, "ZeroRedundancyOptimizer: the shard's %s step: %s", phx_optimizer_type(z->inner), err);
    return gs;
}

static size_t zero_state(phx_optimizer *self, const char ***names, phx_tensor ***tensors)
{
    zero *z = phx_optimizer_ctx(self);
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

static void zero_release(zero *z)
{
    if (!z) return;
    drop_full(z);
    phx_optimizer_free(z->inner);
    phx_module_free(z->shard_mod);
    for (size_t k = 0; k < z->n_regions; k++) {
        zregion *g = &z->regions[k];
        for (size_t j = 0; j < g->n_chunks; j++) {
            zchunk *c = &g->chunks[j];
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
    phx_module_free(z->ddp_mod); /* drops the reference taken at construction */
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
static phx_status check_layout(zero *z)
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

static phx_status check_params(zero *z)
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
    if (o.stage < 0 || o.stage > 2) {
        phx_error(PHX_EINVAL, "phx_zero_optimizer_new: stage %d, expected 1 or 2 (0 means 1)", o.stage);
        return NULL;
    }
    px_ddp *d = NULL;
    if (o.stage == 2) {
        if (!(d = px_ddp_of(model, "phx_zero_optimizer_new (stage 2)"))) return NULL;
        if (comm && comm != d->comm) {
            phx_error(PHX_EINVAL, "phx_zero_optimizer_new: stage 2 needs the DDP wrapper's communicator");
            return NULL;
        }
        comm = d->comm;
    }
    zero *z = px_calloc(1, sizeof *z);
    if (!z) return NULL;
    z->magic = ZERO_MAGIC;
    z->model = model;
    z->comm = comm;
    z->rank = phx_comm_rank(comm);
    z->world = phx_comm_size(comm);
    z->stage = o.stage == 2 ? 2 : 1;
    z->n_params = phx_module_num_params(model);
    z->params = px_calloc(z->n_params ? z->n_params : 1, sizeof *z->params);
    phx_status st = z->params ? PHX_OK : PHX_ENOMEM;
    for (size_t i = 0; st == PHX_OK && i < z->n_params; i++) z->params[i] = phx_module_param(model, i);
    if (st == PHX_OK) st = check_params(z);
    if (st == PHX_OK && d && z->world > 1) {
        /* Reduce-scatter from now on: the partition is the padded buckets. */
        if ((st = px_ddp_zero2_attach(d)) == PHX_OK) {
            z->ddp = d;
            z->ddp_mod = model;
            model->refs++;
        }
    }
    if (st == PHX_OK) {
        /* world chunks of this many elements fill the receive buffer */
        size_t gb = o.gather_bytes ? o.gather_bytes : ZERO_GATHER_BYTES;
        int64_t per = (int64_t)(gb / sizeof(float)) / z->world;
        z->chunk = per > 0 ? per : 1;
        size_t cap = o.region_bytes ? o.region_bytes : ZERO_REGION_BYTES;
        int64_t cap_el = (int64_t)(cap / sizeof(float));
        st = z->ddp ? regions_buckets(z) : regions_flat(z, cap_el > 0 ? cap_el : 1);
    }
    if (st == PHX_OK && z->world > 1) st = check_layout(z);
    if (st == PHX_OK) st = (z->shard_mod = phx_module_new(&shard_vt, NULL)) ? PHX_OK : PHX_ENOMEM;
    for (size_t k = 0; st == PHX_OK && k < z->n_regions; k++) {
        const zregion *g = &z->regions[k];
        st = for_range(z, k, block_lo(g, z->rank), block_hi(g, z->rank), add_shard_piece, NULL);
    }
    if (st == PHX_OK) st = refresh_grads(z);
    if (st == PHX_OK && z->world > 1) st = make_plans(z);
    if (st == PHX_OK && !(z->inner = make(z->shard_mod, arg)))
        st = phx_error(PHX_EINVAL, "phx_zero_optimizer_new: make returned no optimizer for rank %d's shard: %s",
                       z->rank, phx_last_error());
    phx_optimizer *self = NULL;
    if (st == PHX_OK && z->inner && phx_optimizer_model(z->inner) != z->shard_mod)
        st = phx_error(PHX_EINVAL,
                       "phx_zero_optimizer_new: make returned an optimizer over another module than the "
                       "shard it was given");
    if (st == PHX_OK) self = phx_optimizer_new(&zero_vt, z, model);
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
    zero *z = zero_of(zo, "phx_zero_inner");
    return z ? z->inner : NULL;
}

phx_module *phx_zero_shard(phx_optimizer *zo)
{
    zero *z = zero_of(zo, "phx_zero_shard");
    return z ? z->shard_mod : NULL;
}

size_t phx_zero_shard_source(phx_optimizer *zo, size_t i, int64_t *offset)
{
    zero *z = zero_of(zo, "phx_zero_shard_source");
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
    zero *z = zero_of(zo, "phx_zero_rank_numel");
    if (!z || rank < 0 || rank >= z->world) return 0;
    int64_t n = 0;
    for (size_t k = 0; k < z->n_regions; k++) n += block_hi(&z->regions[k], rank) - block_lo(&z->regions[k], rank);
    return n;
}

size_t phx_zero_num_regions(phx_optimizer *zo)
{
    zero *z = zero_of(zo, "phx_zero_num_regions");
    return z ? z->n_regions : 0;
}

/* ---- consolidation ---------------------------------------------------- */

/* The shard optimizer's state as kinds per piece: tensors[i * kinds + k]
 * named "<piece leaf>.<kind>" with the piece's numel. 0 kinds for an
 * empty shard or a stateless optimizer; -1 for another layout. */
static long state_kinds(zero *z, const char ***names, phx_tensor ***ts)
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
    zchunk *c;
    int q;
    int64_t lo;
    size_t kind, kinds;
    phx_tensor **ts; /* the shard optimizer's state tensors */
} state_arg;

/* The shard piece holding part (same region and parameter). */
static const zshard *piece_of(const zero *z, size_t region, const zpiece *part, size_t *index)
{
    for (size_t i = 0; i < z->n_shard; i++) {
        const zshard *s = &z->shard[i];
        if (s->region == region && s->piece.param == part->param && s->piece.off <= part->off &&
            part->off + part->len <= s->piece.off + s->piece.len) {
            *index = i;
            return s;
        }
    }
    return NULL;
}

static phx_status pack_state(zero *z, size_t region, const zpiece *part, int64_t at, void *arg)
{
    const state_arg *a = arg;
    size_t i;
    const zshard *s = piece_of(z, region, part, &i);
    if (!s) return phx_error(PHX_EINVAL, "phx_zero_consolidate: no shard piece holds an owned range (internal)");
    int64_t len = part->len;
    phx_tensor *dst = phx_tensor_view(a->c->send, at - a->lo, 1, &len);
    phx_tensor *src = phx_tensor_view(a->ts[i * a->kinds + a->kind], part->off - s->piece.off, 1, &len);
    phx_status st = dst && src ? phx_tensor_copy(dst, src) : PHX_ENOMEM;
    phx_tensor_free(dst);
    phx_tensor_free(src);
    return st;
}

static phx_status unpack_state(zero *z, size_t region, const zpiece *part, int64_t at, void *arg)
{
    (void)region;
    const state_arg *a = arg;
    int64_t len = part->len;
    phx_tensor *dst = phx_tensor_view(z->full[part->param * z->n_kinds + a->kind], part->off, 1, &len);
    phx_tensor *src = phx_tensor_view(a->c->recv, (int64_t)a->q * a->c->len + (at - a->lo), 1, &len);
    phx_status st = dst && src ? phx_tensor_copy(dst, src) : PHX_ENOMEM;
    phx_tensor_free(dst);
    phx_tensor_free(src);
    return st;
}

/* Allocates the full tensors and their names on a holder rank. */
static phx_status alloc_full(zero *z, const char *const *names, size_t kinds)
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
    zero *z = zero_of(zo, "phx_zero_consolidate");
    if (!z) return PHX_EINVAL;
    if (root < -1 || root >= z->world)
        return phx_error(PHX_EINVAL, "phx_zero_consolidate: root %d, expected -1 or 0 .. %d", root, z->world - 1);
    drop_full(z);
    /* A world of one makes its gather buffers only now. */
    if (!z->send_buf && make_plans(z) != PHX_OK)
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
            zregion *rg = &z->regions[g];
            for (size_t j = 0; j < rg->n_chunks; j++) {
                zchunk *c = &rg->chunks[j];
                state_arg a = {c, z->rank, 0, k, K, ts};
                int64_t hi;
                chunk_range(rg, c, z->rank, &a.lo, &hi);
                phx_status ls = st == PHX_OK ? for_range(z, g, a.lo, hi, pack_state, &a) : st;
                phx_status cs = z->world > 1 ? phx_comm_allgather(z->comm, c->send, c->recv, NULL)
                                             : phx_tensor_copy(c->recv, c->send);
                if (cs != PHX_OK)
                    return phx_error(cs, "phx_zero_consolidate: all-gather of region %zu: %s", g, phx_last_error());
                for (int q = 0; q < z->world && hold && ls == PHX_OK; q++) {
                    a.q = q;
                    chunk_range(rg, c, q, &a.lo, &hi);
                    ls = for_range(z, g, a.lo, hi, unpack_state, &a);
                }
                if (st == PHX_OK) st = ls;
            }
        }
    }
    if (st != PHX_OK) {
        drop_full(z);
        return phx_error(st, "phx_zero_consolidate: %s", phx_last_error());
    }
    z->consolidated = hold;
    return PHX_OK;
}

phx_status phx_zero_load_full_state(phx_optimizer *zo)
{
    zero *z = zero_of(zo, "phx_zero_load_full_state");
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
                phx_tensor_view(z->full[z->shard[i].piece.param * z->n_kinds + k], z->shard[i].piece.off, 1, &len);
            phx_tensor *dst = phx_tensor_view(ts[i * kinds + k], 0, 1, &len);
            st = src && dst ? phx_tensor_copy(dst, src) : PHX_ENOMEM;
            phx_tensor_free(src);
            phx_tensor_free(dst);
        }
    return st;
}

/* ---- clipping --------------------------------------------------------- */

phx_status phx_zero_clip_grad_norm(phx_optimizer *zo, double max_norm, double *total_norm)
{
    zero *z = zero_of(zo, "phx_zero_clip_grad_norm");
    if (!z) return PHX_EINVAL;
    if (!(max_norm > 0.0) || isinf(max_norm))
        return phx_error(PHX_EINVAL, "phx_zero_clip_grad_norm: max_norm %g, expected finite and > 0", max_norm);
    phx_status st = check_model(z);
    if (st == PHX_OK) st = refresh_grads(z);
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
