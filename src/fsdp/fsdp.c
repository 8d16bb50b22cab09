/* Fully sharded data parallel (ZeRO-3): a module wrapping a model whose
 * wrapping units keep only this rank's shard of their parameters and
 * gradients between uses.
 *
 * Each unit's parameters form one flat f32 space padded to world * block.
 * The parameters' value and gradient tensors are views of two per-unit
 * storages whose memory exists only while the unit is gathered: the
 * all-gather of the shards allocates and fills the values before the
 * unit's forward (and again before its backward under FULL_SHARD); the
 * backward allocates zeroed full gradients, runs the unit's modules, then
 * reduce-scatters (sum of gradients / world, as DDP's average) into the
 * rank's shard gradient, which accumulates across backwards. A nested
 * unit is entered through a wrapper module its subtree's root redirects
 * phx_module_forward and phx_module_backward to, so parents that call
 * their children directly (built-in modules) and recorded graphs
 * (forward-only modules) both reach it. doc/guide/sharding.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "src/fsdp/fsdp-impl.h"
#include "src/modules/module-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/tensor/device-impl.h"
#include "src/base/util.h"
#include "src/base/abi.h"

static const phx_module_vtable fsdp_vt, unit_vt;

typedef struct unit_ctx {
    px_fsdp *f;
    size_t k;
} unit_ctx;

px_fsdp *px_fsdp_get(phx_module *m)
{
    if (!m || phx_module_vtable_of(m) != &fsdp_vt) return NULL;
    px_fsdp *f = phx_module_ctx(m);
    return f && f->magic == PX_FSDP_MAGIC ? f : NULL;
}

static px_fsdp *fsdp_of(phx_module *m, const char *who)
{
    px_fsdp *f = px_fsdp_get(m);
    if (!f)
        phx_error(PHX_EINVAL, "%s: module is %s, expected an FSDP module (phx_fsdp_new)", who,
                  m ? phx_module_type(m) : "NULL");
    return f;
}

/* ---- prefetch --------------------------------------------------------- */

/* Unit k runs (its forward, or its backward): issues the gather of the
 * unit after it (forward) or before it (backward) in the first forward's
 * order. */
static void prefetch(px_fsdp *f, size_t k, bool backward)
{
    if (f->opts.no_prefetch || !f->order_done) return;
    size_t *pos = backward ? &f->bwd_pos : &f->fwd_pos;
    if (*pos >= f->n_order || f->order[*pos] != k) return; /* another order than the first: no guess */
    size_t next;
    if (backward) {
        if (*pos == 0) return;
        next = --*pos;
    } else {
        next = ++*pos;
        if (next >= f->n_order) return;
    }
    px_funit *u = &f->units[f->order[next]];
    if (px_fsdp_gather_start(f, u, true, false) != PHX_OK) {
        /* Reported again when the unit gathers for itself. */
        phx_error_clear();
    }
}

static void record_order(px_fsdp *f, size_t k)
{
    if (f->order_done || f->n_order >= f->n_units) return;
    for (size_t i = 0; i < f->n_order; i++)
        if (f->order[i] == k) return;
    f->order[f->n_order++] = k;
}

/* ---- a unit's forward and backward ------------------------------------ */

static void keep_first(px_fsdp *f, phx_status st)
{
    if (st != PHX_OK && f->pending_status == PHX_OK) {
        f->pending_status = st;
        snprintf(f->pending_err, sizeof f->pending_err, "%s", phx_last_error());
    }
}

static phx_status unit_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    unit_ctx *c = phx_module_ctx(self);
    px_fsdp *f = c->f;
    px_funit *u = &f->units[c->k];
    record_order(f, c->k);
    phx_status st = px_fsdp_gather_wait(f, u);
    if (st != PHX_OK) return st;
    prefetch(f, c->k, false);
    u->inner->redirect_off = true;
    st = phx_module_forward(u->inner, x, y);
    u->inner->redirect_off = false;
    u->forwarded = true;
    if (f->opts.sharding == PHX_FSDP_FULL_SHARD) px_fsdp_reshard(f, u);
    return st;
}

static phx_status unit_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    unit_ctx *c = phx_module_ctx(self);
    px_fsdp *f = c->f;
    px_funit *u = &f->units[c->k];
    phx_status st = px_fsdp_gather_wait(f, u);
    if (st == PHX_OK) prefetch(f, c->k, true);
    if (st == PHX_OK) st = px_fsdp_grads_open(f, u);
    if (st == PHX_OK) {
        u->inner->redirect_off = true;
        st = phx_module_backward(u->inner, dy, dx);
        u->inner->redirect_off = false;
    }
    keep_first(f, st);
    /* Issued whatever happened, keeping the ranks' collectives in step;
     * under no_sync the full gradients stay and accumulate. */
    if (u->full_g->storage->data && !f->no_sync) keep_first(f, px_fsdp_rs_launch(f, u));
    u->backwarded = true;
    px_fsdp_reshard(f, u);
    return st;
}

static void unit_free(phx_module *self)
{
    px_free(phx_module_ctx(self));
}

static const phx_module_vtable unit_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "FSDPUnit",
    .forward = unit_forward,
    .backward = unit_backward,
    .free = unit_free,
};

/* ---- the wrapper ------------------------------------------------------ */

static px_funit *root_of(px_fsdp *f)
{
    return &f->units[f->n_units - 1];
}

static phx_status check_wrapped(phx_module *self, px_fsdp *f)
{
    if (self->n_params || self->n_children || self->n_buffers)
        return phx_error(PHX_ESTATE, "FSDP: a %s was added to the wrapper, which runs only the model",
                         self->n_children     ? "child module"
                             : self->n_params ? "parameter"
                                              : "buffer");
    if (phx_module_num_params(f->model) != f->n_params)
        return phx_error(PHX_ESTATE, "FSDP: the model has %zu parameters, it had %zu when wrapped",
                         phx_module_num_params(f->model), f->n_params);
    if (self->precision != f->model->precision || self->compute_dtype != f->model->compute_dtype) {
        phx_status st = phx_module_set_precision(f->model, self->precision);
        if (st != PHX_OK) return st;
    }
    return PHX_OK;
}

static phx_status fsdp_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    px_fsdp *f = phx_module_ctx(self);
    if (f->summoned)
        return phx_error(PHX_ESTATE,
                         "FSDP: forward while the full parameters are summoned (phx_fsdp_gather_full); call "
                         "phx_fsdp_release_full first");
    phx_status st = check_wrapped(self, f);
    if (st != PHX_OK) return st;
    /* A forward without a backward (evaluation) left units gathered. */
    for (size_t k = 0; k < f->n_units; k++) {
        f->units[k].forwarded = false;
        px_fsdp_reshard(f, &f->units[k]);
    }
    size_t r = f->n_units - 1;
    record_order(f, r);
    f->fwd_pos = 0;
    st = px_fsdp_gather_wait(f, root_of(f));
    if (st != PHX_OK) return st;
    prefetch(f, r, false);
    st = phx_module_forward(f->model, x, y);
    f->order_done = true;
    root_of(f)->forwarded = true;
    /* The root stays gathered for the backward (FSDP's), unless none follows. */
    if (!phx_module_is_training(f->model)) px_fsdp_reshard(f, root_of(f));
    return st;
}

static phx_status fsdp_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    px_fsdp *f = phx_module_ctx(self);
    px_funit *root = root_of(f);
    f->pending_status = PHX_OK;
    f->pending_err[0] = '\0';
    f->in_backward = true;
    f->bwd_pos = f->n_order ? f->n_order - 1 : 0;
    phx_status st = px_fsdp_gather_wait(f, root);
    /* The root's backward comes first: prefetch the last unit to run forward. */
    if (st == PHX_OK && !f->opts.no_prefetch && f->order_done && f->n_order > 1 &&
        px_fsdp_gather_start(f, &f->units[f->order[f->n_order - 1]], true, false) != PHX_OK)
        phx_error_clear(); /* reported again when the unit gathers for itself */
    if (st == PHX_OK) st = px_fsdp_grads_open(f, root);
    if (st == PHX_OK) st = phx_module_backward(f->model, dy, dx);
    keep_first(f, st);
    if (root->full_g->storage->data && !f->no_sync) keep_first(f, px_fsdp_rs_launch(f, root));
    keep_first(f, px_fsdp_rs_finish_all(f));
    for (size_t k = 0; k < f->n_units; k++) {
        px_fsdp_reshard(f, &f->units[k]);
        f->units[k].forwarded = f->units[k].backwarded = false;
    }
    /* No communication under no_sync (the synced backward does both). */
    if (!f->no_sync) {
        keep_first(f, px_fsdp_settle_nonfinite(f));
        keep_first(f, px_fsdp_broadcast_buffers(f));
    } else {
        f->stats.unsynced_backwards++;
    }
    f->in_backward = false;
    if (f->pending_status != PHX_OK) return phx_error(f->pending_status, "%s", f->pending_err);
    return PHX_OK;
}

static phx_status fsdp_set_train(phx_module *self, bool training)
{
    px_fsdp *f = phx_module_ctx(self);
    return phx_module_train(f->model, training);
}

/* Gives tensor t (a parameter's value or gradient) the storage of full at
 * element off, dropping its own. */
static phx_status repoint(phx_tensor *t, phx_tensor *full, int64_t off)
{
    phx_tensor *tmp = px_tensor_view(full, 0, 1, &full->numel);
    if (!tmp) return PHX_ENOMEM;
    px_storage *old = t->storage;
    t->storage = tmp->storage;
    t->offset = off;
    tmp->storage = old;
    tmp->offset = 0;
    phx_tensor_free(tmp);
    return PHX_OK;
}

/* Gives t its own storage again, holding its values when it has some and
 * zeros otherwise. */
static void restore(phx_tensor *t)
{
    phx_tensor *own = phx_tensor_zeros(t->dtype, t->ndim, t->shape, t->storage->device);
    if (!own) return; /* keeps the shared storage, which outlives the wrapper's reference */
    if (t->storage->data) (void)phx_tensor_copy(own, t);
    px_storage *old = t->storage;
    t->storage = own->storage;
    t->offset = 0;
    own->storage = old;
    phx_tensor_free(own);
}

static void units_free(px_fsdp *f)
{
    for (size_t k = 0; k < f->n_units; k++) {
        px_funit *u = &f->units[k];
        if (u->gwork) (void)phx_work_wait(u->gwork, -1), phx_work_free(u->gwork);
        if (u->rwork) (void)phx_work_wait(u->rwork, -1), phx_work_free(u->rwork);
        if (u->wrap) {
            u->inner->redirect = NULL;
            u->inner->redirect_off = false;
            phx_module_free(u->wrap);
        }
    }
    /* The parameters get their own memory back before the full buffers go. */
    for (size_t i = 0; f->units && f->unit_of && i < f->n_params; i++) {
        px_funit *u = &f->units[f->unit_of[i]];
        if (u->full_v && f->params[i]->value->storage == u->full_v->storage) restore(f->params[i]->value);
        if (u->full_g && f->params[i]->grad->storage == u->full_g->storage) restore(f->params[i]->grad);
    }
    for (size_t k = 0; k < f->n_units; k++) {
        px_funit *u = &f->units[k];
        if (u->full_v) px_fsdp_full_free(f, u->full_v, false);
        if (u->full_g) px_fsdp_full_free(f, u->full_g, true);
        if (u->full_lp) px_fsdp_full_free(f, u->full_lp, false);
        if (u->full_g_lp) px_fsdp_full_free(f, u->full_g_lp, true);
        phx_tensor_free(u->shard_lp);
        phx_tensor_free(u->full_lp);
        phx_tensor_free(u->full_g_lp);
        phx_tensor_free(u->rs_lp);
        phx_tensor_free(u->full_v);
        phx_tensor_free(u->full_g);
        phx_tensor_free(u->shard_v);
        phx_tensor_free(u->shard_g);
        phx_tensor_free(u->rs_out);
        px_free(u->params);
        px_free(u->offs);
        px_free(u->path);
    }
    px_free(f->units);
    f->units = NULL;
}

static void fsdp_free(phx_module *self)
{
    px_fsdp *f = phx_module_ctx(self);
    if (!f) return;
    units_free(f);
    phx_tensor_free(f->flag);
    px_free(f->params);
    px_free(f->unit_of);
    px_free(f->order);
    f->magic = 0;
    px_free(f);
}

static const phx_module_vtable fsdp_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "FullyShardedDataParallel",
    .forward = fsdp_forward,
    .backward = fsdp_backward,
    .free = fsdp_free,
    .set_train = fsdp_set_train,
};

/* ---- construction ----------------------------------------------------- */

static phx_status check_params(px_fsdp *f)
{
    if (f->n_params == 0) return phx_error(PHX_EINVAL, "phx_fsdp_new: the model has no parameters");
    phx_device dev = phx_tensor_device(f->params[0]->value);
    for (size_t i = 0; i < f->n_params; i++) {
        const phx_param *p = f->params[i];
        if (p->value->dtype != PHX_F32 || p->grad->dtype != PHX_F32)
            return phx_error(PHX_EINVAL, "phx_fsdp_new: parameter '%s' is %s, expected f32 master weights",
                             phx_module_param_name(f->model, i), phx_dtype_name(p->value->dtype));
        if (!phx_device_equal(phx_tensor_device(p->value), dev) || !phx_device_equal(phx_tensor_device(p->grad), dev))
            return phx_error(PHX_EUNSUPPORTED,
                             "phx_fsdp_new: parameter '%s' is on another device than '%s'; all parameters must "
                             "share one device",
                             phx_module_param_name(f->model, i), phx_module_param_name(f->model, 0));
        for (size_t j = 0; j < i; j++)
            if (f->params[j] == p)
                return phx_error(PHX_EINVAL, "phx_fsdp_new: parameter '%s' appears twice in the model",
                                 phx_module_param_name(f->model, i));
        if (p->value->numel && (!p->value->storage->data || !p->grad->storage->data))
            return phx_error(PHX_EINVAL,
                             "phx_fsdp_new: parameter '%s' holds no memory: part of the model is already sharded "
                             "by another FSDP wrapper",
                             phx_module_param_name(f->model, i));
    }
    return PHX_OK;
}

static phx_status broadcast_params(px_fsdp *f)
{
    if (f->wworld == 1) return PHX_OK;
    for (size_t i = 0; i < f->n_params; i++) {
        phx_status st = phx_comm_broadcast(f->wcomm, f->params[i]->value, 0, NULL);
        if (st != PHX_OK)
            return phx_error(st, "phx_fsdp_new: broadcasting parameter '%s' from rank 0: %s",
                             phx_module_param_name(f->model, i), phx_last_error());
    }
    return px_fsdp_broadcast_buffers(f);
}

/* Unit k's shard (from the parameters' current values) and full buffers;
 * the parameters become views of the full buffers, which are then freed. */
static phx_status shard_unit(px_fsdp *f, size_t k)
{
    px_funit *u = &f->units[k];
    phx_device dev = phx_tensor_device(f->params[0]->value);
    int64_t full = u->block * f->world;
    u->full_v = phx_tensor_zeros(PHX_F32, 1, &full, dev);
    u->full_g = phx_tensor_zeros(PHX_F32, 1, &full, dev);
    u->shard_v = phx_tensor_new(PHX_F32, 1, &u->block, dev);
    u->shard_g = phx_tensor_zeros(PHX_F32, 1, &u->block, dev);
    u->rs_out = phx_tensor_zeros(PHX_F32, 1, &u->block, dev);
    if (!u->full_v || !u->full_g || !u->shard_v || !u->shard_g || !u->rs_out) return PHX_ENOMEM;
    if (f->opts.param_dtype != PHX_F32) {
        u->shard_lp = phx_tensor_new(f->opts.param_dtype, 1, &u->block, dev);
        u->full_lp = phx_tensor_new(f->opts.param_dtype, 1, &full, dev);
        if (!u->shard_lp || !u->full_lp) return PHX_ENOMEM;
        f->stats.gathered_bytes += u->full_lp->storage->bytes; /* uncounted, freed below */
        px_fsdp_full_free(f, u->full_lp, false);
    }
    if (f->opts.reduce_dtype != PHX_F32) {
        u->rs_lp = phx_tensor_new(f->opts.reduce_dtype, 1, &u->block, dev);
        u->full_g_lp = phx_tensor_new(f->opts.reduce_dtype, 1, &full, dev);
        if (!u->rs_lp || !u->full_g_lp) return PHX_ENOMEM;
        f->stats.grad_bytes += u->full_g_lp->storage->bytes;
        px_fsdp_full_free(f, u->full_g_lp, true);
    }
    phx_status st = PHX_OK;
    for (size_t j = 0; j < u->n_params && st == PHX_OK; j++) {
        phx_tensor *v = f->params[u->params[j]]->value;
        phx_tensor *dst = px_tensor_view(u->full_v, u->offs[j], 1, &v->numel);
        st = dst ? phx_tensor_copy(dst, v) : PHX_ENOMEM;
        phx_tensor_free(dst);
    }
    phx_tensor *mine = st == PHX_OK ? px_tensor_view(u->full_v, (int64_t)f->rank * u->block, 1, &u->block) : NULL;
    if (st == PHX_OK) st = mine ? phx_tensor_copy(u->shard_v, mine) : PHX_ENOMEM;
    phx_tensor_free(mine);
    for (size_t j = 0; j < u->n_params && st == PHX_OK; j++) {
        phx_param *p = f->params[u->params[j]];
        st = repoint(p->value, u->full_v, u->offs[j]);
        if (st == PHX_OK) st = repoint(p->grad, u->full_g, u->offs[j]);
    }
    /* The zeros' memory was never counted: free it uncounted. */
    f->stats.gathered_bytes += u->full_v->storage->bytes;
    f->stats.grad_bytes += u->full_g->storage->bytes;
    px_fsdp_full_free(f, u->full_v, false);
    px_fsdp_full_free(f, u->full_g, true);
    return st;
}

static phx_status wrap_unit(px_fsdp *f, size_t k)
{
    px_funit *u = &f->units[k];
    unit_ctx *c = px_calloc(1, sizeof *c);
    if (!c) return PHX_ENOMEM;
    c->f = f;
    c->k = k;
    u->wrap = phx_module_new(&unit_vt, c);
    if (!u->wrap) {
        px_free(c);
        return PHX_ENOMEM;
    }
    u->inner->redirect = u->wrap; /* free of another wrapper: checked before sharding */
    return PHX_OK;
}

phx_module *phx_fsdp_new(phx_module *model, phx_comm *comm, const phx_fsdp_opts *opts)
{
    if (!model) {
        px_error_null("phx_fsdp_new", "model");
        return NULL;
    }
    if (px_fsdp_get(model)) {
        phx_error(PHX_EINVAL, "phx_fsdp_new: the model is already an FSDP module");
        return NULL;
    }
    if (model->wrapped || model->refs > 1 || model->redirect) {
        phx_error(PHX_EINVAL, "phx_fsdp_new: the model is %s; wrap a model once (free the other wrapper first)",
                  model->wrapped ? "itself a wrapper" : "already held by a wrapper");
        return NULL;
    }
    phx_fsdp_opts o = PHX_FSDP_OPTS_INIT;
    if (px_abi_in(&o, sizeof o, opts, "phx_fsdp_new", "phx_fsdp_opts", "PHX_FSDP_OPTS_INIT")) return NULL;
    if (o.sharding != PHX_FSDP_FULL_SHARD && o.sharding != PHX_FSDP_SHARD_GRAD_OP) {
        phx_error(PHX_EINVAL, "phx_fsdp_new: sharding %d, expected PHX_FSDP_FULL_SHARD or PHX_FSDP_SHARD_GRAD_OP",
                  (int)o.sharding);
        return NULL;
    }
    for (int k = 0; k < 2; k++) {
        phx_dtype dt = k ? o.reduce_dtype : o.param_dtype;
        if (dt != PHX_F32 && dt != PHX_BF16 && dt != PHX_F16) {
            phx_error(PHX_EINVAL, "phx_fsdp_new: %s %d, expected PHX_F32 (0), PHX_BF16 or PHX_F16",
                      k ? "reduce_dtype" : "param_dtype", (int)dt);
            return NULL;
        }
    }
    if (o.replicate_comm && !o.shard_comm) {
        phx_error(PHX_EINVAL, "phx_fsdp_new: replicate_comm without shard_comm; hybrid sharding needs both");
        return NULL;
    }
    if (o.shard_comm) {
        int ns = phx_comm_size(o.shard_comm), nr = phx_comm_size(o.replicate_comm), nw = phx_comm_size(comm);
        if (ns * nr != nw) {
            phx_error(PHX_EINVAL,
                      "phx_fsdp_new: hybrid sharding with a shard group of %d ranks and a replicate group of %d "
                      "(%s): expected %d x %d = the world of %d",
                      ns, nr, o.replicate_comm ? "given" : "NULL, a group of one", ns, nw / (ns > 0 ? ns : 1), nw);
            return NULL;
        }
    }
    if (o.min_unit_numel < 0) {
        phx_error(PHX_EINVAL, "phx_fsdp_new: min_unit_numel %lld, expected >= 0 (0: 1e6)", (long long)o.min_unit_numel);
        return NULL;
    }
    px_fsdp *f = px_calloc(1, sizeof *f);
    if (!f) return NULL;
    f->magic = PX_FSDP_MAGIC;
    f->model = model;
    f->wcomm = comm;
    f->wrank = phx_comm_rank(comm);
    f->wworld = phx_comm_size(comm);
    f->comm = o.shard_comm ? o.shard_comm : comm;
    f->rank = phx_comm_rank(f->comm);
    f->world = phx_comm_size(f->comm);
    f->rcomm = o.replicate_comm;
    f->opts = o;
    f->n_params = phx_module_num_params(model);
    phx_module *self = phx_module_new(&fsdp_vt, f);
    if (!self) {
        px_free(f);
        return NULL;
    }
    f->self = self;
    f->params = px_calloc(f->n_params ? f->n_params : 1, sizeof *f->params);
    phx_status st = f->params ? PHX_OK : PHX_ENOMEM;
    for (size_t i = 0; st == PHX_OK && i < f->n_params; i++) f->params[i] = phx_module_param(model, i);
    if (st == PHX_OK) st = px_module_adopt_params(self, model);
    if (st == PHX_OK) st = check_params(f);
    if (st == PHX_OK) st = px_fsdp_find_units(f);
    for (size_t k = 0; st == PHX_OK && k + 1 < f->n_units; k++)
        if (f->units[k].inner->redirect)
            st = phx_error(PHX_EINVAL, "phx_fsdp_new: module '%s' is already a unit of another FSDP wrapper",
                           f->units[k].path);
    if (st == PHX_OK) st = (f->order = px_calloc(f->n_units, sizeof *f->order)) ? PHX_OK : PHX_ENOMEM;
    /* Collectives: reached by every rank with a model of parameters. */
    if (st == PHX_OK) st = px_fsdp_check_layout(f);
    if (st == PHX_OK) st = broadcast_params(f);
    if (st == PHX_OK)
        st = (f->flag = phx_tensor_zeros(PHX_F32, 0, NULL, phx_tensor_device(f->params[0]->value))) ? PHX_OK
                                                                                                    : PHX_ENOMEM;
    for (size_t k = 0; st == PHX_OK && k < f->n_units; k++) st = shard_unit(f, k);
    for (size_t k = 0; st == PHX_OK && k + 1 < f->n_units; k++) st = wrap_unit(f, k);
    if (st != PHX_OK) {
        char err[PX_FSDP_ERR_MAX];
        snprintf(err, sizeof err, "%s", phx_last_error());
        phx_module_free(self);
        phx_error(st, "%s", err);
        return NULL;
    }
    for (size_t k = 0; k < f->n_units; k++) {
        f->stats.shard_bytes += 2 * (uint64_t)f->units[k].block * sizeof(float);
        uint64_t b = (uint64_t)f->units[k].block * (uint64_t)f->world * sizeof(float);
        if (b > f->stats.largest_unit_bytes) f->stats.largest_unit_bytes = b;
    }
    f->stats.units = f->n_units;
    phx_module_train(self, phx_module_is_training(model));
    self->precision = model->precision;
    self->compute_dtype = model->compute_dtype;
    return self;
}

/* ---- the rest of the API ---------------------------------------------- */

phx_module *phx_fsdp_model(phx_module *fsdp)
{
    px_fsdp *f = fsdp_of(fsdp, "phx_fsdp_model");
    return f ? f->model : NULL;
}

size_t phx_fsdp_num_units(phx_module *fsdp)
{
    px_fsdp *f = fsdp_of(fsdp, "phx_fsdp_num_units");
    return f ? f->n_units : 0;
}

const char *phx_fsdp_unit_path(phx_module *fsdp, size_t i, int64_t *numel)
{
    px_fsdp *f = fsdp_of(fsdp, "phx_fsdp_unit_path");
    if (!f) return NULL;
    if (i >= f->n_units) {
        phx_error(PHX_EINVAL, "phx_fsdp_unit_path: unit %zu, there are %zu", i, f->n_units);
        return NULL;
    }
    if (numel) *numel = f->units[i].numel;
    return f->units[i].path;
}

phx_status phx_fsdp_gather_full(phx_module *fsdp)
{
    px_fsdp *f = fsdp_of(fsdp, "phx_fsdp_gather_full");
    if (!f) return PHX_EINVAL;
    if (f->in_backward) return phx_error(PHX_ESTATE, "phx_fsdp_gather_full: a backward is running");
    phx_status st = PHX_OK;
    /* Units left gathered in param_dtype (the root after a forward) are
     * gathered again exactly. */
    for (size_t k = 0; k < f->n_units; k++)
        if (f->units[k].gathered && !f->units[k].exact) px_fsdp_reshard(f, &f->units[k]);
    /* Every unit's all-gather is issued, whatever failed before, keeping
     * the ranks' collectives in step. */
    for (size_t k = 0; k < f->n_units; k++) {
        phx_status s = px_fsdp_gather_wait_as(f, &f->units[k], true);
        if (st == PHX_OK) st = s;
        f->units[k].keep = true;
    }
    f->summoned = true;
    if (st != PHX_OK) {
        char err[PX_FSDP_ERR_MAX];
        snprintf(err, sizeof err, "%s", phx_last_error());
        phx_fsdp_release_full(fsdp);
        return phx_error(st, "phx_fsdp_gather_full: %s", err);
    }
    return PHX_OK;
}

phx_status phx_fsdp_release_full(phx_module *fsdp)
{
    px_fsdp *f = fsdp_of(fsdp, "phx_fsdp_release_full");
    if (!f) return PHX_EINVAL;
    for (size_t k = 0; k < f->n_units; k++) {
        f->units[k].keep = false;
        px_fsdp_reshard(f, &f->units[k]);
    }
    f->summoned = false;
    return PHX_OK;
}

phx_status phx_fsdp_set_no_sync(phx_module *fsdp, bool no_sync)
{
    px_fsdp *f = fsdp_of(fsdp, "phx_fsdp_set_no_sync");
    if (!f) return PHX_EINVAL;
    if (f->in_backward)
        return phx_error(PHX_ESTATE, "phx_fsdp_set_no_sync: a backward is running; set it between backwards");
    f->no_sync = no_sync;
    return PHX_OK;
}

bool px_fsdp_unsynced(const px_fsdp *f)
{
    for (size_t k = 0; k < f->n_units; k++)
        if (f->units[k].full_g->storage->data) return true;
    return false;
}

phx_status phx_fsdp_get_stats(phx_module *fsdp, phx_fsdp_stats *out)
{
    px_fsdp *f = fsdp_of(fsdp, "phx_fsdp_get_stats");
    if (!f) return PHX_EINVAL;
    f->stats.struct_size = sizeof f->stats;
    return px_abi_out(out, &f->stats, sizeof f->stats, "phx_fsdp_get_stats", "phx_fsdp_stats", "PHX_FSDP_STATS_INIT");
}

phx_status phx_fsdp_reset_peak(phx_module *fsdp)
{
    px_fsdp *f = fsdp_of(fsdp, "phx_fsdp_reset_peak");
    if (!f) return PHX_EINVAL;
    f->stats.peak_gathered_bytes = f->stats.gathered_bytes;
    f->stats.peak_grad_bytes = f->stats.grad_bytes;
    return PHX_OK;
}
