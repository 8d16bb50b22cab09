/* DataParallel: one process, a replica of the model per device, PyTorch's
 * torch/nn/parallel semantics (data_parallel.py, scatter_gather.py,
 * replicate.py, parallel_apply.py).
 *
 * forward:  scatter the input along dim 0 in torch.chunk's sizes, bring
 *           the replicas' parameters up to date (CPU: views of the model's
 *           tensors' storage, so only the version is bumped; elsewhere:
 *           copied), run
 *           the replicas on the pool (the caller runs replica 0), gather the
 *           outputs in order on the output device.
 * backward: scatter dy the same way, run the replicas' backwards, sum their
 *           gradients into the model's (src/dp/dp-reduce.c), then fire the
 *           model's gradient-ready hooks in the order replica 0 produced
 *           its gradients.
 * Views, buffers and replicas are made once per batch shape: a steady-state
 * step allocates nothing. With one device the model itself is the replica. */
#include "config.h"
#include <stdio.h>
#include <string.h>
#include "src/dp/dp-impl.h"
#include "src/autograd/autograd-impl.h"
#include "src/base/util.h"
#include "kernels/cpu/cpu.h"

static const phx_module_vtable dp_vtable;

size_t phx_chunk_sizes(int64_t batch, size_t n, int64_t *sizes)
{
    if (batch <= 0 || n == 0 || !sizes) {
        phx_error(PHX_EINVAL, "phx_chunk_sizes: batch %lld into %zu chunks%s: expected batch >= 1, n >= 1",
                  (long long)batch, n, sizes ? "" : " (sizes is NULL)");
        return 0;
    }
    int64_t chunk = (batch + (int64_t)n - 1) / (int64_t)n;
    size_t k = (size_t)((batch + chunk - 1) / chunk);
    for (size_t i = 0; i < k; i++) {
        int64_t left = batch - (int64_t)i * chunk;
        sizes[i] = left < chunk ? left : chunk;
    }
    return k;
}

/* "cpu", "cpu:1" (no such device, but name it as given), "cuda:0". */
static const char *dev_name(phx_device d, char *buf, size_t len)
{
    if (d.kind == PHX_DEVICE_CPU && d.index != 0)
        snprintf(buf, len, "cpu:%d", d.index);
    else
        phx_device_name(d, buf, len);
    return buf;
}

static px_dp *dp_of(phx_module *m, const char *who)
{
    if (!m || phx_module_vtable_of(m) != &dp_vtable) {
        phx_error(PHX_EINVAL, "%s: module %s is not a DataParallel wrapper", who, m ? phx_module_type(m) : "(null)");
        return NULL;
    }
    return phx_module_ctx(m);
}

phx_module *phx_dp_model(phx_module *dp)
{
    px_dp *d = dp_of(dp, "phx_dp_model");
    return d ? d->model : NULL;
}

size_t phx_dp_num_replicas(phx_module *dp)
{
    px_dp *d = dp_of(dp, "phx_dp_num_replicas");
    return d ? d->n : 0;
}

/* ---- keys and row views --------------------------------------------- */

static bool key_same(const px_dp_key *k, const phx_tensor *t)
{
    return k->storage == t->storage && k->offset == t->offset && k->dtype == t->dtype && k->ndim == t->ndim &&
        memcmp(k->shape, t->shape, (size_t)t->ndim * sizeof *t->shape) == 0;
}

static void key_set(px_dp_key *k, const phx_tensor *t)
{
    memset(k, 0, sizeof *k);
    if (!t) return;
    k->storage = t->storage;
    k->offset = t->offset;
    k->dtype = t->dtype;
    k->ndim = t->ndim;
    memcpy(k->shape, t->shape, (size_t)t->ndim * sizeof *t->shape);
}

/* The row views of a pass: into the caller's x / dy (out false) or into
 * the gathered y / dx (out true). */
static phx_tensor **rows_slot(px_dp_rep *r, bool out, int pass)
{
    return out ? &r->out_rows[pass] : &r->in_rows[pass];
}

static void drop_rows(px_dp *d, bool out, int pass)
{
    for (size_t i = 0; i < d->n; i++) {
        phx_tensor **v = rows_slot(&d->reps[i], out, pass);
        phx_tensor_free(*v);
        *v = NULL;
    }
    key_set(out ? &d->out_key[pass] : &d->in_key[pass], NULL);
}

/* Makes each replica's row views of base; keeps them when base is the
 * tensor they were made for. */
static phx_status make_rows(px_dp *d, const phx_tensor *base, bool out, int pass)
{
    px_dp_key *key = out ? &d->out_key[pass] : &d->in_key[pass];
    if (key_same(key, base)) return PHX_OK;
    drop_rows(d, out, pass);
    int64_t row = base->numel / base->shape[0];
    for (size_t i = 0; i < d->k; i++) {
        px_dp_rep *r = &d->reps[i];
        int64_t shape[PHX_MAX_DIMS];
        memcpy(shape, base->shape, sizeof shape);
        shape[0] = r->rows;
        if (!(*rows_slot(r, out, pass) = px_tensor_view(base, r->row0 * row, base->ndim, shape))) return PHX_ENOMEM;
    }
    key_set(key, base);
    return PHX_OK;
}

/* Scatter: each replica's rows of t (x or dy) as views, and the tensor it
 * reads them from: the view itself on its device, else a buffer there that
 * its worker fills. */
static phx_status scatter(px_dp *d, const phx_tensor *t, int pass)
{
    phx_status st = make_rows(d, t, false, pass);
    for (size_t i = 0; i < d->k && st == PHX_OK; i++) {
        px_dp_rep *r = &d->reps[i];
        phx_tensor *src = r->in_rows[pass];
        if (phx_device_equal(src->storage->device, r->dev))
            r->in[pass] = src;
        else
            st = px_buf_get(&r->in_buf[pass], src->dtype, src->ndim, src->shape, r->dev, &r->in[pass]);
    }
    return st;
}

/* ---- parameters ------------------------------------------------------ */

/* Records the order of replica 0's gradients (the hook of its params). */
static void record_ready(phx_param *p, void *user)
{
    px_dp *d = user;
    px_dp_rep *r = &d->reps[0];
    size_t n = d->n_params, j = d->ready_hint < n ? d->ready_hint : 0;
    for (size_t s = 0; s < n && r->params[j] != p; s++) j = j + 1 < n ? j + 1 : 0;
    if (r->params[j] != p || d->n_ready >= n) return;
    d->ready[d->n_ready++] = j;
    d->ready_hint = j ? j - 1 : 0;
}

/* Checks, before anything runs, that the model still is what was wrapped. */
static phx_status check_model(px_dp *d, const char *who)
{
    const phx_module *self = d->self;
    if (self->n_params || self->n_children || self->n_buffers)
        return phx_error(PHX_ESTATE,
                         "%s: a %s was added to the DataParallel wrapper, which runs only the model; add it to "
                         "the model before phx_dp_new",
                         who,
                         self->n_children     ? "child module"
                             : self->n_params ? "parameter"
                                              : "buffer");
    if (phx_module_num_params(d->model) != d->n_params)
        return phx_error(PHX_ESTATE, "%s: the model has %zu parameters, it had %zu when wrapped", who,
                         phx_module_num_params(d->model), d->n_params);
    for (size_t j = 0; j < d->n_params; j++) {
        phx_param *p = d->params[j];
        if (phx_module_param(d->model, j) != p)
            return phx_error(PHX_ESTATE, "%s: parameter %zu of the model changed after wrapping", who, j);
        if (!phx_device_equal(p->value->storage->device, d->devices[0])) {
            char a[32], b[32];
            return phx_error(PHX_EINVAL, "%s: parameter '%s' is on %s, DataParallel needs the model on devices[0] = %s",
                             who, phx_module_param_name(d->model, j),
                             phx_device_name(p->value->storage->device, a, sizeof a),
                             phx_device_name(d->devices[0], b, sizeof b));
        }
    }
    return PHX_OK;
}

/* Caller side of the parameter refresh: which parameters changed since the
 * replicas last saw them, and the mode and precision they must run with. */
static phx_status plan_sync(px_dp *d)
{
    phx_module *self = d->self;
    if (self->precision != d->precision || self->compute_dtype != d->compute_dtype) {
        /* phx_module_set_precision(wrapper): the wrapper has no children,
         * so pass the policy on to the model. */
        phx_status st = phx_module_set_precision(d->model, self->precision);
        if (st != PHX_OK) return st;
        d->precision = self->precision;
        d->compute_dtype = self->compute_dtype;
    }
    for (size_t i = 0; i < d->n; i++) {
        phx_module *m = d->reps[i].m;
        if (m == d->model) continue;
        if (m->precision != d->model->precision || m->compute_dtype != d->model->compute_dtype) {
            phx_status st = phx_module_set_precision(m, d->model->precision);
            if (st != PHX_OK) return st;
        }
        if (m->training != d->model->training) {
            phx_status st = phx_module_train(m, d->model->training);
            if (st != PHX_OK) return st;
        }
    }
    for (size_t j = 0; j < d->n_params; j++) {
        phx_param *p = d->params[j];
        d->dirty[j] = p->version != d->synced[j] || p->value != d->synced_val[j];
    }
    return PHX_OK;
}

/* Replica parameter rp takes a view of the model's value mv: the same
 * storage (the values in step without a copy) in a tensor of its own,
 * whose gradient goes to rp. Handing rp mv itself pointed mv's parameter
 * at the last replica's: every replica's gradient of a forward-only model
 * then went into one buffer from several threads at once (now and then a
 * replica's part was lost), and the model's own went there too. When
 * rp already views mv's storage, it is only touched (new values: a
 * low-precision copy of it is refreshed). */
static phx_status share_value(phx_param *rp, phx_tensor *mv)
{
    if (rp->value->storage == mv->storage && rp->value->offset == mv->offset) {
        phx_param_touch(rp); /* same storage, new values: refresh low-precision copies */
        return PHX_OK;
    }
    phx_tensor *v = px_tensor_view(mv, 0, mv->ndim, mv->shape);
    if (!v) return PHX_ENOMEM;
    phx_status st = phx_param_set_value(rp, v);
    phx_tensor_free(v);
    return st;
}

/* Worker side: replica r takes the model's current values. */
static phx_status sync_replica(px_dp *d, px_dp_rep *r)
{
    if (r->m == d->model) return PHX_OK;
    for (size_t j = 0; j < d->n_params; j++) {
        if (!d->dirty[j]) continue;
        phx_param *mp = d->params[j], *rp = r->params[j];
        phx_status st;
        if (r->shares)
            st = share_value(rp, mp->value); /* bumps the version either way */
        else {
            st = phx_tensor_copy(rp->value, mp->value);
            phx_param_touch(rp);
        }
        if (st != PHX_OK) return st;
    }
    return PHX_OK;
}

static void sync_done(px_dp *d)
{
    for (size_t j = 0; j < d->n_params; j++) {
        d->synced[j] = d->params[j]->version;
        d->synced_val[j] = d->params[j]->value;
    }
}

/* Replica 0 on the model's device adds its gradients straight into the
 * model's: its parameters hold the model's gradient tensors (and its own
 * hook, so the model's hooks still fire only after the sum). Re-pointed
 * when the model's gradient tensors were replaced (phx_param_set_grad). */
static void share_model_grads(px_dp *d)
{
    px_dp_rep *r = &d->reps[0];
    if (r->m == d->model || r->grad) return;
    for (size_t j = 0; j < d->n_params; j++) {
        phx_param *rp = r->params[j];
        phx_tensor *mg = d->params[j]->grad;
        if (rp->grad != mg) {
            phx_tensor_retain(mg);
            phx_tensor_free(rp->grad);
            rp->grad = mg;
        }
    }
}

/* ---- running replicas ------------------------------------------------ */

static void task_result(px_dp_rep *r, phx_status st)
{
    if (st == PHX_OK && r->dev.kind != PHX_DEVICE_CPU) st = phx_device_synchronize(r->dev);
    r->st = st;
    if (st != PHX_OK) snprintf(r->err, sizeof r->err, "%s", phx_last_error());
}

/* Worker side of scatter and gather: the replica's rows copied to its
 * device when they live elsewhere... */
static phx_status stage_in(px_dp_rep *r, int pass)
{
    return r->in[pass] == r->in_rows[pass] ? PHX_OK : phx_tensor_copy(r->in[pass], r->in_rows[pass]);
}

/* ...and its result copied into its rows of the gathered tensor at once,
 * when the views of the last gather fit it (same split, shape, dtype). */
static phx_status put_rows(px_dp_rep *r, int pass)
{
    const phx_tensor *src = r->out[pass], *dst = r->out_rows[pass];
    r->out_done[pass] = false;
    if (!src || !dst || src->dtype != dst->dtype || !phx_tensor_same_shape(src, dst)) return PHX_OK;
    phx_status st = phx_tensor_copy(r->out_rows[pass], src);
    r->out_done[pass] = st == PHX_OK;
    return st;
}

static void forward_task(void *arg, size_t i)
{
    px_dp *d = arg;
    px_dp_rep *r = &d->reps[i];
    phx_status st = sync_replica(d, r);
    if (st == PHX_OK) st = stage_in(r, PX_DP_FWD);
    if (st == PHX_OK) st = phx_module_forward(r->m, r->in[PX_DP_FWD], &r->out[PX_DP_FWD]);
    if (st == PHX_OK) st = put_rows(r, PX_DP_FWD);
    task_result(r, st);
}

static void backward_task(void *arg, size_t i)
{
    px_dp *d = arg;
    px_dp_rep *r = &d->reps[i];
    r->out[PX_DP_BWD] = NULL;
    phx_status st = stage_in(r, PX_DP_BWD);
    /* the wrapper's call, not the user's (on a pool thread: depth 0 there) */
    px_module_backward_depth++;
    if (st == PHX_OK) st = phx_module_backward(r->m, r->in[PX_DP_BWD], d->want_dx ? &r->out[PX_DP_BWD] : NULL);
    px_module_backward_depth--;
    if (st == PHX_OK && d->want_dx && !r->out[PX_DP_BWD])
        st = phx_error(PHX_EINTERNAL, "module %s returned no input gradient", phx_module_type(r->m));
    if (st == PHX_OK) st = put_rows(r, PX_DP_BWD);
    task_result(r, st);
}

/* One replica's task on its own share of the caller's thread budget. */
typedef struct rep_run {
    px_dp *d;
    px_pool_fn task;
    int budget; /* each CPU replica's threads (0: GPU replicas, unchanged) */
    bool retain; /* the caller's backward keeps its graph: so do the replicas' */
} rep_run;

static void rep_task(void *arg, size_t i)
{
    rep_run *r = arg;
    int prev = r->budget ? px_threads_set_local(r->budget) : 0;
    bool kept = px_backward_inherit(r->retain);
    r->task(r->d, i);
    px_backward_inherit(kept);
    if (r->budget) px_threads_set_local(prev);
}

/* Runs task over the k replicas in use; CPU replicas side by side split
 * the caller's thread budget (src/base/threads.h). */
static phx_status run_replicas(px_dp *d, px_pool_fn task, const char *who)
{
    rep_run run = {d, task, d->devices[0].kind == PHX_DEVICE_CPU ? px_threads_share((int)d->k) : 0,
                   px_backward_retaining()};
    px_pool_run(d->pool, d->k, rep_task, &run);
    for (size_t i = 0; i < d->k; i++) {
        px_dp_rep *r = &d->reps[i];
        if (r->st != PHX_OK) {
            char dev[32];
            return phx_error(r->st, "%s: replica %zu on %s (rows %lld..%lld): %s", who, i,
                             phx_device_name(r->dev, dev, sizeof dev), (long long)r->row0,
                             (long long)(r->row0 + r->rows - 1), r->err);
        }
    }
    return PHX_OK;
}

/* Gather: the replicas' results of a pass, in order, in one tensor on dev
 * (rows a worker did not copy already are copied here). A single replica
 * whose result already lies on dev is returned as it is. */
static phx_status gather(px_dp *d, int pass, phx_device dev, phx_tensor **out)
{
    const char *what = pass == PX_DP_FWD ? "output" : "input gradient";
    const phx_tensor *y0 = d->reps[0].out[pass];
    char a[64], b[64];
    for (size_t i = 0; i < d->k; i++) {
        const phx_tensor *y = d->reps[i].out[pass];
        bool fits = y->ndim >= 1 && y->shape[0] == d->reps[i].rows && y->ndim == y0->ndim && y->dtype == y0->dtype;
        for (int j = 1; fits && j < y->ndim; j++) fits = y->shape[j] == y0->shape[j];
        if (!fits)
            return phx_error(PHX_EINVAL,
                             "DataParallel: replica %zu's %s is %s %s for %lld rows (replica 0: %s %s); "
                             "DataParallel needs dim 0 to be the batch and the same trailing shape",
                             i, what, phx_dtype_name(y->dtype), phx_tensor_shape_str(y, a, sizeof a),
                             (long long)d->reps[i].rows, phx_dtype_name(y0->dtype),
                             phx_tensor_shape_str(y0, b, sizeof b));
    }
    if (d->k == 1 && phx_device_equal(y0->storage->device, dev)) {
        /* the last output, gathered into out_buf and kept, stays intact */
        phx_status hs = px_buf_hand_over(&d->out_buf[pass], NULL);
        if (hs == PHX_OK && !d->out_buf[pass].view) drop_rows(d, true, pass);
        *out = (phx_tensor *)y0;
        return hs;
    }
    int64_t shape[PHX_MAX_DIMS];
    memcpy(shape, y0->shape, sizeof shape);
    shape[0] = d->batch;
    phx_tensor *all;
    phx_status st = px_buf_get(&d->out_buf[pass], y0->dtype, y0->ndim, shape, dev, &all);
    /* rows a worker copied went into the views of another tensor */
    bool moved = st == PHX_OK && !key_same(&d->out_key[pass], all);
    if (st == PHX_OK) st = make_rows(d, all, true, pass);
    for (size_t i = 0; i < d->k && st == PHX_OK; i++)
        if (moved || !d->reps[i].out_done[pass]) st = phx_tensor_copy(d->reps[i].out_rows[pass], d->reps[i].out[pass]);
    if (st == PHX_OK && dev.kind != PHX_DEVICE_CPU) st = phx_device_synchronize(dev);
    *out = all;
    return st;
}

/* Splits a batch of b rows over the replicas (torch.chunk sizes). The
 * row views into the gathered tensors belong to the old split: dropped. */
static void plan_batch(px_dp *d, int64_t b)
{
    if (b == d->batch && d->k) return;
    drop_rows(d, true, PX_DP_FWD);
    drop_rows(d, true, PX_DP_BWD);
    d->k = phx_chunk_sizes(b, d->n, d->sizes);
    d->batch = b;
    int64_t row0 = 0;
    for (size_t i = 0; i < d->n; i++) {
        d->reps[i].row0 = row0;
        d->reps[i].rows = i < d->k ? d->sizes[i] : 0;
        row0 += d->reps[i].rows;
    }
}

static phx_status dp_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    static const char who[] = "phx_dp_forward";
    px_dp *d = phx_module_ctx(self);
    char s[64];
    d->forward_ok = false; /* a failed forward leaves nothing to differentiate */
    if (x->ndim < 1 || x->shape[0] < 1)
        return phx_error(PHX_EINVAL, "%s: input %s has no batch rows (dim 0); expected at least 1", who,
                         phx_tensor_shape_str(x, s, sizeof s));
    phx_status st = check_model(d, who);
    if (st == PHX_OK) st = plan_sync(d);
    if (st != PHX_OK) return st;
    plan_batch(d, x->shape[0]);
    /* the last output is kept (by a scope, or for the next call when it is
     * x): the workers must not write their rows into it */
    if (px_module_keeping(d->out_buf[PX_DP_FWD].view)) drop_rows(d, true, PX_DP_FWD);
    if ((st = px_dp_buffers_in(d)) == PHX_OK && (st = scatter(d, x, PX_DP_FWD)) == PHX_OK)
        st = run_replicas(d, forward_task, who);
    if (st == PHX_OK) st = px_dp_buffers_out(d);
    for (size_t i = d->k; i < d->n && st == PHX_OK; i++)
        st = sync_replica(d, &d->reps[i]); /* idle this batch, but current for the next */
    if (st != PHX_OK) return st;
    sync_done(d);
    phx_tensor *out;
    if ((st = gather(d, PX_DP_FWD, d->out_dev, &out)) != PHX_OK) return st;
    d->y_ndim = out->ndim;
    memcpy(d->y_shape, out->shape, sizeof d->y_shape);
    d->y_dtype = out->dtype;
    d->x_dev = x->storage->device;
    d->forward_ok = true;
    *y = out;
    return PHX_OK;
}

static phx_status check_dy(px_dp *d, const phx_tensor *dy, const char *who)
{
    char a[64], b[64];
    if (!d->forward_ok) return phx_error(PHX_ESTATE, "%s: no successful forward to differentiate", who);
    if (dy->ndim >= 1 && dy->shape[0] != d->batch)
        return phx_error(PHX_EINVAL,
                         "%s: dy has %lld rows (dim 0) but the forward's batch had %lld; the loss target "
                         "must have the input's batch size",
                         who, (long long)dy->shape[0], (long long)d->batch);
    bool same = dy->ndim == d->y_ndim && phx_dtype_is_float(dy->dtype);
    for (int j = 0; same && j < dy->ndim; j++) same = dy->shape[j] == d->y_shape[j];
    if (!same)
        return phx_error(PHX_EINVAL, "%s: dy is %s %s, the output of the forward was %s %s", who,
                         phx_dtype_name(dy->dtype), phx_tensor_shape_str(dy, a, sizeof a), phx_dtype_name(d->y_dtype),
                         px_shape_str(d->y_ndim, d->y_shape, b, sizeof b));
    return PHX_OK;
}

static phx_status dp_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    static const char who[] = "phx_dp_backward";
    px_dp *d = phx_module_ctx(self);
    phx_status st = check_dy(d, dy, who);
    if (st == PHX_OK) st = check_model(d, who);
    if (st == PHX_OK) st = scatter(d, dy, PX_DP_BWD);
    if (st != PHX_OK) return st;
    d->want_dx = dx != NULL;
    d->n_ready = 0;
    share_model_grads(d);
    bool clones = d->reps[0].m != d->model;
    st = run_replicas(d, backward_task, who);
    if (st == PHX_OK && dx) st = gather(d, PX_DP_BWD, d->x_dev, dx);
    if (st != PHX_OK) {
        /* Replica 0 may have added into the model's gradients already; the
         * others' are dropped. Only an internal failure gets here: bad
         * input was turned away before any replica ran. */
        px_dp_zero_replica_grads(d);
        return st;
    }
    if (!clones) return PHX_OK; /* one device: the model ran itself and fired its own hooks */
    if ((st = px_dp_reduce(d)) != PHX_OK) return st;
    for (size_t i = 0; i < d->n_ready; i++) phx_param_grad_ready(d->params[d->ready[i]]);
    return PHX_OK;
}

static phx_status dp_set_train(phx_module *self, bool training)
{
    px_dp *d = phx_module_ctx(self);
    phx_status st = phx_module_train(d->model, training);
    for (size_t i = 0; i < d->n && st == PHX_OK; i++)
        if (d->reps[i].m != d->model) st = phx_module_train(d->reps[i].m, training);
    return st;
}

/* ---- construction ---------------------------------------------------- */

static void dp_destroy(px_dp *d);

static void dp_free(phx_module *self)
{
    dp_destroy(phx_module_ctx(self));
}

static const phx_module_vtable dp_vtable = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "DataParallel",
    .forward = dp_forward,
    .backward = dp_backward,
    .free = dp_free,
    .set_train = dp_set_train,
    .clone = NULL,
};

/* Device i of the list: devices[i], or with devices NULL the i-th device
 * of the model's kind (every CPU replica is "cpu"). */
static phx_device device_at(const phx_device *devices, phx_device model_dev, size_t i)
{
    if (devices) return devices[i];
    phx_device d = model_dev;
    if (d.kind != PHX_DEVICE_CPU) d.index = (int)i;
    return d;
}

/* devices NULL: every device of the model's kind. Each must exist, all of
 * one kind, the model on the first; the output device one of them. */
static phx_status pick_devices(const phx_device *devices, size_t n_devices, const phx_device *output_device,
                               phx_device model_dev, phx_device **out, size_t *n_out, phx_device *out_dev)
{
    static const char who[] = "phx_dp_new";
    char a[32], b[32];
    size_t n = n_devices;
    if (devices && n == 0)
        return phx_error(PHX_EINVAL, "%s: n_devices is 0; expected at least one device (or devices NULL for all)", who);
    if (!devices) {
        int c = model_dev.kind == PHX_DEVICE_CPU ? phx_num_threads() : phx_device_count(model_dev.kind);
        if (c < 1)
            return phx_error(PHX_ENOTFOUND, "%s: no %s device to replicate on", who,
                             phx_device_name(model_dev, a, sizeof a));
        n = (size_t)c;
    }
    phx_device first = device_at(devices, model_dev, 0);
    for (size_t i = 0; i < n; i++) {
        phx_device dv = device_at(devices, model_dev, i);
        if (dv.kind != PHX_DEVICE_CPU && dv.kind != PHX_DEVICE_CUDA)
            return phx_error(PHX_EINVAL, "%s: devices[%zu] has unknown kind %d; expected cpu or cuda", who, i, dv.kind);
        int count = phx_device_count(dv.kind);
        if (dv.index < 0 || dv.index >= count)
            return phx_error(PHX_ENOTFOUND, "%s: devices[%zu] = %s does not exist (%d %s device%s here)", who, i,
                             dev_name(dv, a, sizeof a), count, dv.kind == PHX_DEVICE_CPU ? "cpu" : "cuda",
                             count == 1 ? "" : "s");
        if (dv.kind != first.kind)
            return phx_error(PHX_EINVAL, "%s: devices[%zu] = %s, devices[0] = %s: all devices must be of one kind", who,
                             i, dev_name(dv, a, sizeof a), dev_name(first, b, sizeof b));
    }
    if (!phx_device_equal(first, model_dev))
        return phx_error(PHX_EINVAL, "%s: the model's parameters are on %s, they must be on devices[0] = %s", who,
                         dev_name(model_dev, a, sizeof a), dev_name(first, b, sizeof b));
    *out_dev = first;
    if (output_device) {
        size_t i = 0;
        while (i < n && !phx_device_equal(device_at(devices, model_dev, i), *output_device)) i++;
        if (i == n)
            return phx_error(PHX_EINVAL, "%s: output device %s is not one of the %zu devices (devices[0] = %s)", who,
                             dev_name(*output_device, a, sizeof a), n, dev_name(first, b, sizeof b));
        *out_dev = *output_device;
    }
    phx_device *list = px_calloc(n, sizeof *list);
    if (!list) return PHX_ENOMEM;
    for (size_t i = 0; i < n; i++) list[i] = device_at(devices, model_dev, i);
    *out = list;
    *n_out = n;
    return PHX_OK;
}

/* Replica i: the model itself with one device, else a clone on its device
 * whose values are views of the model's own tensors when it shares the
 * model's device. Its gradients are the model's (replica 0 on the model's device)
 * or views of one flat zeroed buffer. */
static phx_status make_replica(px_dp *d, size_t i)
{
    px_dp_rep *r = &d->reps[i];
    r->dev = d->devices[i];
    char a[32];
    if (d->n == 1) {
        r->m = d->model;
    } else {
        phx_status st = PHX_OK;
        if (!(r->m = phx_module_clone(d->model)))
            st = PHX_EUNSUPPORTED; /* no clone slot, or out of memory: the message says which */
        else if (!phx_device_equal(r->dev, d->devices[0]))
            st = phx_module_to(r->m, r->dev);
        if (st != PHX_OK)
            return phx_error(st, "phx_dp_new: cannot replicate the model on %s for replica %zu: %s",
                             phx_device_name(r->dev, a, sizeof a), i, phx_last_error());
    }
    r->shares = phx_device_equal(r->dev, d->devices[0]);
    if (!(r->params = px_calloc(d->n_params ? d->n_params : 1, sizeof *r->params))) return PHX_ENOMEM;
    for (size_t j = 0; j < d->n_params; j++) r->params[j] = phx_module_param(r->m, j);
    if (r->m == d->model) return PHX_OK;
    for (size_t j = 0; j < d->n_params && r->shares; j++) {
        phx_status st = share_value(r->params[j], d->params[j]->value);
        if (st != PHX_OK) return st;
    }
    int64_t total = d->off[d->n_params];
    if (i == 0 && r->shares) {
        share_model_grads(d);
        return PHX_OK;
    }
    if (total > 0 && !(r->grad = phx_tensor_zeros(PHX_F32, 1, &total, r->dev))) return PHX_ENOMEM;
    for (size_t j = 0; j < d->n_params; j++) {
        phx_param *rp = r->params[j];
        phx_tensor *g = px_tensor_view(r->grad, d->off[j], rp->value->ndim, rp->value->shape);
        phx_status st = g ? phx_param_set_grad(rp, g) : PHX_ENOMEM;
        phx_tensor_free(g);
        if (st != PHX_OK) return st;
    }
    return r->grad ? phx_tensor_fill(r->grad, 0.0) : PHX_OK;
}

static phx_status dp_init(px_dp *d)
{
    size_t n = d->n, np = d->n_params ? d->n_params : 1;
    d->reps = px_calloc(n, sizeof *d->reps);
    d->sizes = px_calloc(n, sizeof *d->sizes);
    d->gsrc = px_calloc(n, sizeof *d->gsrc);
    d->params = px_calloc(np, sizeof *d->params);
    d->off = px_calloc(np + 1, sizeof *d->off);
    d->synced = px_calloc(np, sizeof *d->synced);
    d->synced_val = px_calloc(np, sizeof *d->synced_val);
    d->dirty = px_calloc(np, sizeof *d->dirty);
    d->ready = px_calloc(np, sizeof *d->ready);
    if (!d->reps || !d->sizes || !d->gsrc || !d->params || !d->off || !d->synced || !d->synced_val || !d->dirty ||
        !d->ready)
        return PHX_ENOMEM;
    for (size_t j = 0; j < d->n_params; j++) {
        d->params[j] = phx_module_param(d->model, j);
        d->off[j + 1] = d->off[j] + d->params[j]->value->numel;
    }
    for (size_t i = 0; i < n; i++) {
        phx_status st = make_replica(d, i);
        if (st != PHX_OK) return st;
    }
    if (d->reps[0].m != d->model) phx_module_set_grad_hook(d->reps[0].m, record_ready, d);
    phx_status st = px_dp_buffers_share(d);
    if (st != PHX_OK) return st;
    sync_done(d);
    if (!(d->pool = px_pool_new(n))) return PHX_ENOMEM;
    return PHX_OK;
}

phx_module *phx_dp_new(phx_module *model, const phx_device *devices, size_t n_devices, const phx_device *output_device)
{
    if (!model) {
        px_error_null("phx_dp_new", "model");
        return NULL;
    }
    size_t np = phx_module_num_params(model);
    phx_device model_dev = np ? phx_module_param(model, 0)->value->storage->device : phx_cpu();
    for (size_t j = 1; j < np; j++) {
        phx_device dv = phx_module_param(model, j)->value->storage->device;
        if (!phx_device_equal(dv, model_dev)) {
            char a[32], b[32];
            phx_error(PHX_EINVAL, "phx_dp_new: parameter '%s' is on %s, '%s' on %s: the model must be on one device",
                      phx_module_param_name(model, j), dev_name(dv, a, sizeof a), phx_module_param_name(model, 0),
                      phx_device_name(model_dev, b, sizeof b));
            return NULL;
        }
    }
    px_dp *d = px_calloc(1, sizeof *d);
    if (!d) return NULL;
    d->model = model;
    d->n_params = np;
    phx_status st = pick_devices(devices, n_devices, output_device, model_dev, &d->devices, &d->n, &d->out_dev);
    if (st != PHX_OK) {
        px_free(d);
        return NULL;
    }
    phx_module *self = phx_module_new(&dp_vtable, d);
    if (!self) {
        dp_destroy(d);
        return NULL;
    }
    d->self = self;
    self->training = model->training;
    self->precision = d->precision = model->precision;
    self->compute_dtype = d->compute_dtype = model->compute_dtype;
    if ((st = px_module_adopt_params(self, model)) != PHX_OK || (st = dp_init(d)) != PHX_OK) {
        phx_module_free(self);
        return NULL;
    }
    return self;
}

static void dp_destroy(px_dp *d)
{
    if (!d) return;
    px_pool_free(d->pool);
    for (size_t i = 0; d->reps && i < d->n; i++) {
        px_dp_rep *r = &d->reps[i];
        for (int pass = 0; pass < 2; pass++) {
            phx_tensor_free(r->in_rows[pass]);
            phx_tensor_free(r->out_rows[pass]);
            px_buf_free(&r->in_buf[pass]);
        }
        if (r->m != d->model) phx_module_free(r->m);
        phx_tensor_free(r->grad);
        px_free(r->params);
    }
    px_buf_free(&d->out_buf[PX_DP_FWD]);
    px_buf_free(&d->out_buf[PX_DP_BWD]);
    px_buf_free(&d->stage);
    px_free(d->reps);
    px_free(d->devices);
    px_free(d->params);
    px_free(d->off);
    px_free(d->synced);
    px_free(d->synced_val);
    px_free(d->dirty);
    px_free(d->ready);
    px_free(d->sizes);
    px_free(d->gsrc);
    px_free(d);
}
