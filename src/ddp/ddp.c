/* DistributedDataParallel: a module wrapping a model whose backward
 * all-reduces gradient buckets while the model's backward still runs.
 *
 * The reducer follows PyTorch's (torch/csrc/distributed/c10d/reducer.cpp):
 * each parameter's gradient is a view into a flat bucket; the model's
 * gradient-ready hook marks parameters ready; a bucket whose members are
 * all ready is divided by the world size and all-reduced (sum) at once, in
 * strict bucket order so every rank issues the same collectives in the same
 * order; the wrapper's backward then waits for all. After the first
 * backward the buckets are rebuilt once in the order gradients arrived on
 * rank 0. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "src/ddp/ddp-impl.h"
#include "src/modules/module-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"
#include "src/base/abi.h"
#include "phalanx/autograd.h"
#include "phalanx/log.h"

static const phx_module_vtable ddp_vtable;

static px_ddp *ddp_of(phx_module *m, const char *who)
{
    if (!m || phx_module_vtable_of(m) != &ddp_vtable) {
        phx_error(PHX_EINVAL, "%s: module is %s, expected a DistributedDataParallel module", who,
                  m ? phx_module_type(m) : "NULL");
        return NULL;
    }
    return phx_module_ctx(m);
}

px_ddp *px_ddp_of(phx_module *ddp, const char *who)
{
    return ddp_of(ddp, who);
}

/* ---- trace ---------------------------------------------------------- */

static void trace(px_ddp *d, int kind, size_t index)
{
    if (d->trace_restart) {
        /* First event of a new backward: the last one's trace goes. */
        d->trace_restart = false;
        d->trace_len = 0;
        d->t0 = px_now();
    }
    if (d->trace_len < d->trace_cap) {
        phx_ddp_event *e = &d->trace[d->trace_len++];
        e->kind = kind;
        e->index = index;
        e->t = px_now() - d->t0;
    }
}

/* ---- launching ------------------------------------------------------ */

static void hook_fail(px_ddp *d, phx_status st)
{
    if (d->hook_status == PHX_OK) {
        d->hook_status = st;
        snprintf(d->hook_err, sizeof d->hook_err, "%s", phx_last_error());
    }
}

/* Average: divide by the world size, then sum across ranks. Dividing
 * first (as PyTorch does) keeps half-precision sums in range and gives
 * every rank the same bits, since the sum is computed once per element. */
static void launch(px_ddp *d, size_t b)
{
    px_bucket *k = &d->buckets[b];
    phx_status st = PHX_OK;
    /* The average over the ranks; under a join without
     * divide_by_initial_world_size, over the ranks still training. */
    int div = d->join && !d->join_initial && d->join_syncing > 0 ? d->join_syncing : d->world;
    if (d->hook && !d->zero2) {
        st = px_ddp_hook_launch(d, b, div, &k->work); /* counts its own bytes */
    } else {
        if (div > 1) st = phx_tensor_axpby(0.0f, NULL, 1.0f / (float)div, k->flat);
        if (st == PHX_OK)
            st = d->zero2 ? phx_comm_reduce_scatter(d->zero_comm, k->flat, k->out, PHX_SUM, &k->work)
                          : phx_comm_allreduce(d->comm, k->flat, PHX_SUM, &k->work);
        d->stats.bytes += (uint64_t)k->numel * sizeof(float);
    }
    if (st != PHX_OK) {
        k->work = NULL;
        hook_fail(d, st);
    }
    d->stats.launches++;
    if (d->n_ready < d->n_params) d->stats.early_launches++;
    trace(d, PHX_DDP_EV_LAUNCH, b);
}

/* Launches every complete bucket from next_launch on, stopping at the
 * first incomplete one (strict bucket order). */
static void launch_ready(px_ddp *d)
{
    while (d->next_launch < d->n_buckets && d->buckets[d->next_launch].pending == 0) launch(d, d->next_launch++);
}

static size_t param_index(px_ddp *d, const phx_param *p)
{
    size_t lo = 0, hi = d->n_params;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if ((uintptr_t)d->by_addr[mid] < (uintptr_t)p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < d->n_params && d->by_addr[lo] == p ? d->by_addr_idx[lo] : (size_t)-1;
}

/* Marks parameter i ready; launches what became complete. */
static void mark_ready(px_ddp *d, size_t i)
{
    d->ready[i] = true;
    d->n_ready++;
    if (d->recording) d->arrival[d->n_arrival++] = i;
    trace(d, PHX_DDP_EV_READY, i);
    if (d->no_sync || d->opts.no_overlap) return;
    d->buckets[d->bucket_of[i]].pending--;
    launch_ready(d);
}

/* The model's gradient-ready hook (runs on the thread doing backward). */
static void on_grad_ready(phx_param *p, void *user)
{
    px_ddp *d = user;
    size_t i = param_index(d, p);
    if (i == (size_t)-1) return;
    d->finished = false;
    if (d->ready[i]) {
        phx_error(PHX_ESTATE,
                  "DistributedDataParallel: parameter '%s' was marked ready twice in one "
                  "backward (a parameter used twice must report its gradient once)",
                  phx_module_param_name(d->model, i));
        hook_fail(d, PHX_ESTATE);
        return;
    }
    mark_ready(d, i);
}

/* ---- finishing a backward ------------------------------------------- */

static void reset_backward(px_ddp *d)
{
    memset(d->ready, 0, d->n_params * sizeof *d->ready);
    d->n_ready = 0;
    d->next_launch = 0;
    for (size_t b = 0; b < d->n_buckets; b++) d->buckets[b].pending = d->buckets[b].n_members;
    d->hook_status = PHX_OK;
    d->hook_err[0] = '\0';
    d->trace_restart = true;
}

/* Parameters that got no gradient: appended to the arrival order in
 * reverse parameter order (as they would have arrived), and marked ready
 * so the remaining buckets are launched and every rank issues the same
 * collectives. Returns the first such parameter, or n_params. */
static size_t settle_unused(px_ddp *d, size_t *count)
{
    size_t first = d->n_params;
    *count = 0;
    for (size_t k = d->n_params; k-- > 0;) {
        if (d->ready[k]) continue;
        first = k;
        (*count)++;
        mark_ready(d, k);
    }
    return first;
}

static phx_status finish(px_ddp *d);

static phx_status check_usable(px_ddp *d)
{
    if (d->broken != PHX_OK)
        return phx_error(d->broken,
                         "phx_ddp_finish_backward: the wrapper is unusable after a failed bucket "
                         "rebuild");
    return PHX_OK;
}

phx_status phx_ddp_finish_backward(phx_module *ddp)
{
    px_ddp *d = ddp_of(ddp, "phx_ddp_finish_backward");
    if (!d) return PHX_EINVAL;
    phx_status st = check_usable(d);
    if (st != PHX_OK) return st;
    /* The wrapper's own backward (phx_backward through its output) finished
     * this one already: its collectives ran on every rank that ran it, and
     * running them again here would run them on this rank alone. The
     * outcome stands, an error included, until the wrapper's next training forward with grad mode on,
     * gradient or backward. */
    if (d->finished) {
        if (d->finish_status != PHX_OK) return phx_error(d->finish_status, "%s", d->finish_err);
        phx_log(PHX_LOG_INFO,
                "phx_ddp_finish_backward: this backward is finished already (the wrapper's "
                "backward finishes its own): nothing to do");
        return PHX_OK;
    }
    return finish(d);
}

/* The wrapper's backward's finish: as a user's, and remembered (with its
 * outcome) for a user's call after it. */
static phx_status finish_own(px_ddp *d)
{
    phx_status st = check_usable(d);
    if (st != PHX_OK) return st;
    st = finish(d);
    d->finished = true;
    d->finish_status = st;
    snprintf(d->finish_err, sizeof d->finish_err, "%s", st != PHX_OK ? phx_last_error() : "");
    return st;
}

/* The finish itself: the bucket all-reduces (or none under no_sync), the
 * ZeRO-2 settle and the buffer broadcast. */
static phx_status finish(px_ddp *d)
{
    size_t n_unused = 0, unused = settle_unused(d, &n_unused);
    phx_status st = d->hook_status;
    char err[PX_DDP_ERR_MAX];
    snprintf(err, sizeof err, "%s", d->hook_err);
    if (d->recording) {
        d->recording = false;
        d->rebuild_due = !d->opts.no_rebuild && !d->opts.no_overlap;
    }
    d->stats.backwards++;
    if (d->no_sync) {
        reset_backward(d);
        if (st != PHX_OK) return phx_error(st, "%s", err);
        return PHX_OK;
    }
    if (d->opts.no_overlap)
        for (size_t b = 0; b < d->n_buckets; b++) d->buckets[b].pending = 0;
    launch_ready(d);
    double t = px_now();
    for (size_t b = 0; b < d->n_buckets; b++) {
        px_bucket *k = &d->buckets[b];
        if (!k->work && !d->hook) continue;
        phx_status ws = phx_work_wait(k->work, -1);
        if (ws == PHX_OK && d->hook) ws = px_ddp_hook_complete(d, b);
        if (ws != PHX_OK && st == PHX_OK) {
            st = ws;
            snprintf(err, sizeof err,
                     "DistributedDataParallel: backward #%llu (counting from 0): all-reduce of "
                     "bucket %zu failed: %s",
                     (unsigned long long)d->stats.backwards - 1, b, phx_last_error());
        }
        phx_work_free(k->work);
        k->work = NULL;
        trace(d, PHX_DDP_EV_DONE, b);
    }
    d->stats.wait_s += px_now() - t;
    d->stats.synced++;
    reset_backward(d);
    /* ZeRO-2: issued even after an error, as the broadcast below. */
    if (d->zero2) {
        phx_status zs = px_ddp_zero2_settle(d);
        if (zs != PHX_OK && st == PHX_OK) {
            st = zs;
            snprintf(err, sizeof err, "%s", phx_last_error());
        }
    }
    /* The step's end: every rank takes rank 0's buffers now, so the next
     * forward (training or evaluation, on any subset of the ranks) needs
     * no collective. Issued even after an error, keeping the ranks'
     * collectives in step. Under a join the ranks that ran out of data
     * would not take part: phx_ddp_join_end synchronises them instead. */
    if (!d->opts.no_broadcast_buffers && !d->join) {
        phx_status bs = px_ddp_broadcast_buffers(d, 0);
        if (bs != PHX_OK && st == PHX_OK) {
            st = bs;
            snprintf(err, sizeof err, "%s", phx_last_error());
        }
    }
    if (st != PHX_OK) return phx_error(st, "%s", err);
    if (n_unused > 0 && !d->opts.find_unused)
        return phx_error(PHX_ESTATE,
                         "DistributedDataParallel: parameter '%s'%s received no gradient in this "
                         "backward; set phx_ddp_opts.find_unused when parts of the model may be unused",
                         phx_module_param_name(d->model, unused), n_unused > 1 ? " (and others)" : "");
    return PHX_OK;
}

/* ---- the module ----------------------------------------------------- */

static phx_status rebuild_if_due(px_ddp *d)
{
    if (!d->rebuild_due) return PHX_OK;
    return px_ddp_rebuild(d);
}

/* What a call on the wrapper or on its model after phx_ddp_new would have
 * broken silently is found before each forward (local, O(parameters)):
 * a policy set on the wrapper is passed on to the model (and one set on
 * the model shows on the wrapper); a module, parameter or buffer added to
 * the wrapper, a model whose parameters changed, a gradient hook replaced
 * (phx_module_set_grad_hook) or a gradient that is no longer a view of
 * its bucket (phx_module_to, phx_param_set_grad) is an error that says
 * what to do instead. */
static phx_status check_wrapped(phx_module *self, px_ddp *d)
{
    static const char who[] = "DistributedDataParallel";
    if (d->broken != PHX_OK)
        return phx_error(d->broken, "%s: the wrapper is unusable after a failed bucket rebuild", who);
    if (self->n_params || self->n_children || self->n_buffers)
        return phx_error(PHX_ESTATE,
                         "%s: a %s was added to the wrapper, which runs only the model; add it to the model "
                         "before phx_ddp_new",
                         who,
                         self->n_children     ? "child module"
                             : self->n_params ? "parameter"
                                              : "buffer");
    phx_module *m = d->model;
    if (self->precision != d->precision || self->compute_dtype != d->compute_dtype) {
        phx_status st = phx_module_set_precision(m, self->precision);
        if (st != PHX_OK) return st;
    } else if (m->precision != d->precision || m->compute_dtype != d->compute_dtype) {
        self->precision = m->precision;
        self->compute_dtype = m->compute_dtype;
    }
    d->precision = m->precision;
    d->compute_dtype = m->compute_dtype;
    if (phx_module_num_params(m) != d->n_params)
        return phx_error(PHX_ESTATE,
                         "%s: the model has %zu parameters, it had %zu when wrapped; change the model before "
                         "phx_ddp_new",
                         who, phx_module_num_params(m), d->n_params);
    for (size_t i = 0; i < d->n_params; i++) {
        phx_param *p = d->params[i];
        if (phx_module_param(m, i) != p)
            return phx_error(PHX_ESTATE,
                             "%s: parameter %zu ('%s') of the model changed after wrapping; change the model "
                             "before phx_ddp_new",
                             who, i, phx_module_param_name(m, i));
        if (p->hook != on_grad_ready || p->hook_user != d)
            return phx_error(PHX_ESTATE,
                             "%s: the gradient hook of parameter '%s' was replaced after phx_ddp_new "
                             "(phx_module_set_grad_hook on the wrapper or the model); the wrapper all-reduces "
                             "through that hook and owns it",
                             who, phx_module_param_name(m, i));
        if (d->n_buckets && p->grad->storage != d->buckets[d->bucket_of[i]].flat->storage)
            return phx_error(PHX_ESTATE,
                             "%s: the gradient of parameter '%s' is no longer a view of its bucket "
                             "(phx_module_to or phx_param_set_grad on the wrapper or the model after "
                             "phx_ddp_new); move the model with phx_module_to before phx_ddp_new",
                             who, phx_module_param_name(m, i));
    }
    return PHX_OK;
}

/* A forward runs no collective of its own (buffers are synchronised at the
 * end of each step, the bucket rebuild waits for the next backward), so
 * one rank may evaluate alone. Only inside a join does a training-mode
 * forward count the ranks still training, as PyTorch's does. */
static phx_status ddp_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    px_ddp *d = phx_module_ctx(self);
    phx_status st = check_wrapped(self, d);
    if (st == PHX_OK && d->join && phx_module_is_training(d->model)) st = px_ddp_join_step(d);
    if (st != PHX_OK) return st;
    d->forwarded = true;
    /* a training forward that records starts a new backward pass
     * (PyTorch's DDP prepares for backward only with grad enabled too);
     * an evaluation in between (rank 0 alone, after phx_backward and before
     * the user's finish; eval mode or grad mode off) leaves it done */
    if (phx_grad_enabled() && phx_module_is_training(d->model)) d->finished = false;
    return phx_module_forward(d->model, x, y);
}

static phx_status ddp_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    px_ddp *d = phx_module_ctx(self);
    /* the wrapper's own backward always finishes one (a graph kept with
     * retain_graph runs it again: every rank must take part again) */
    d->finished = false;
    /* the user ran the model's backward for this forward already */
    phx_module *in = d->model;
    if (in->vt->backward) {
        phx_status st = px_module_refuse_second_backward(in, in->calls, true, "backward of DistributedDataParallel");
        if (st != PHX_OK) return st;
    }
    phx_status st = rebuild_if_due(d);
    if (st != PHX_OK) return st;
    st = phx_module_backward(d->model, dy, dx);
    trace(d, PHX_DDP_EV_MODEL_DONE, 0);
    if (st != PHX_OK) {
        /* Keep the ranks in step (the others may have finished fine), then
         * report the model's error. */
        char err[PX_DDP_ERR_MAX];
        snprintf(err, sizeof err, "%s", phx_last_error());
        bool fu = d->opts.find_unused;
        d->opts.find_unused = true;
        (void)finish_own(d);
        d->opts.find_unused = fu;
        return phx_error(st, "%s", err);
    }
    return finish_own(d);
}

static phx_status ddp_set_train(phx_module *self, bool training)
{
    px_ddp *d = phx_module_ctx(self);
    return phx_module_train(d->model, training);
}

static void ddp_free(phx_module *self)
{
    px_ddp *d = phx_module_ctx(self);
    if (!d) return;
    if (d->model) phx_module_set_grad_hook(d->model, NULL, NULL);
    px_ddp_hook_free(d);
    px_ddp_buckets_free(d);
    phx_tensor_free(d->join_flag);
    phx_tensor_free(d->zero_flag);
    px_free(d->params);
    px_free(d->buffers);
    px_free(d->by_addr);
    px_free(d->by_addr_idx);
    px_free(d->bucket_members);
    px_free(d->bucket_of);
    px_free(d->ready);
    px_free(d->arrival);
    px_free(d->trace);
    px_free(d);
}

static const phx_module_vtable ddp_vtable = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "DistributedDataParallel",
    .forward = ddp_forward,
    .backward = ddp_backward,
    .free = ddp_free,
    .set_train = ddp_set_train,
    .clone = NULL,
};

typedef struct addr_idx {
    phx_param *p;
    size_t i;
} addr_idx;

static int cmp_addr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const addr_idx *)a)->p, y = (uintptr_t)((const addr_idx *)b)->p;
    return x < y ? -1 : x > y;
}

static phx_status ddp_init(px_ddp *d)
{
    size_t n = d->n_params, m = n ? n : 1;
    d->params = px_calloc(m, sizeof *d->params);
    d->by_addr = px_calloc(m, sizeof *d->by_addr);
    d->by_addr_idx = px_calloc(m, sizeof *d->by_addr_idx);
    d->bucket_members = px_calloc(m, sizeof *d->bucket_members);
    d->bucket_of = px_calloc(m, sizeof *d->bucket_of);
    d->ready = px_calloc(m, sizeof *d->ready);
    d->arrival = px_calloc(m, sizeof *d->arrival);
    d->trace_cap = 3 * n + 8; /* n ready + per bucket launch and done + model done */
    d->trace = px_calloc(d->trace_cap, sizeof *d->trace);
    if (!d->params || !d->by_addr || !d->by_addr_idx || !d->bucket_members || !d->bucket_of || !d->ready ||
        !d->arrival || !d->trace)
        return PHX_ENOMEM;
    /* Sorted (address, index) pairs: the hook's binary search yields the index. */
    addr_idx *pairs = px_malloc(m * sizeof *pairs);
    if (!pairs) return PHX_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        d->params[i] = pairs[i].p = phx_module_param(d->model, i);
        pairs[i].i = i;
    }
    qsort(pairs, n, sizeof *pairs, cmp_addr);
    phx_status st = PHX_OK;
    for (size_t k = 0; k < n; k++) {
        if (k > 0 && pairs[k].p == pairs[k - 1].p) {
            st = phx_error(PHX_EINVAL, "phx_ddp_new: a parameter appears twice in the model");
            break;
        }
        d->by_addr[k] = pairs[k].p;
        d->by_addr_idx[k] = pairs[k].i;
    }
    px_free(pairs);
    return st;
}

phx_module *phx_ddp_new(phx_module *model, phx_comm *comm, const phx_ddp_opts *opts)
{
    if (!model) {
        px_error_null("phx_ddp_new", "model");
        return NULL;
    }
    if (phx_module_vtable_of(model) == &ddp_vtable) {
        phx_error(PHX_EINVAL, "phx_ddp_new: the model is already a DistributedDataParallel module");
        return NULL;
    }
    if (model->wrapped || model->refs > 1) {
        /* A second wrapper would take over the gradient hook of the first. */
        phx_error(PHX_EINVAL, "phx_ddp_new: the model is %s; wrap a model once (free the other wrapper first)",
                  model->wrapped ? "itself a wrapper (DataParallel)" : "already held by a wrapper");
        return NULL;
    }
    phx_ddp_opts o = PHX_DDP_OPTS_INIT;
    if (px_abi_in(&o, sizeof o, opts, "phx_ddp_new", "phx_ddp_opts", "PHX_DDP_OPTS_INIT")) return NULL;
    px_ddp *d = px_calloc(1, sizeof *d);
    if (!d) return NULL;
    d->model = model;
    d->comm = comm; /* NULL: a world of one, whose collectives keep their input */
    d->rank = phx_comm_rank(comm);
    d->world = phx_comm_size(comm);
    d->opts = o;
    if (!d->opts.first_bucket_bytes) d->opts.first_bucket_bytes = PX_DDP_FIRST_BUCKET_BYTES;
    if (!d->opts.bucket_bytes) d->opts.bucket_bytes = PX_DDP_BUCKET_BYTES;
    d->n_params = phx_module_num_params(model);
    d->recording = true;
    phx_module *self = phx_module_new(&ddp_vtable, d);
    if (!self) {
        px_free(d);
        return NULL;
    }
    phx_status st = ddp_init(d);
    if (st == PHX_OK) st = px_module_adopt_params(self, model);
    /* Collectives: every rank reaches these with the same model count. */
    if (st == PHX_OK) st = px_ddp_check_models(d);
    if (st == PHX_OK) st = px_ddp_broadcast_params(d);
    if (st == PHX_OK) {
        size_t *rev = px_malloc((d->n_params ? d->n_params : 1) * sizeof *rev);
        px_assignment a = {0};
        if (!rev) st = PHX_ENOMEM;
        for (size_t k = 0; rev && k < d->n_params; k++) rev[k] = d->n_params - 1 - k;
        /* no_overlap: one bucket, reduced after the backward. */
        size_t big = (size_t)-1;
        if (st == PHX_OK)
            st = px_ddp_assign(d, rev, d->opts.no_overlap ? big : d->opts.first_bucket_bytes,
                               d->opts.no_overlap ? big : d->opts.bucket_bytes, &a);
        px_free(rev);
        if (st == PHX_OK) st = px_ddp_install(d, &a);
        px_assignment_free(&a);
    }
    if (st == PHX_OK) {
        reset_backward(d);
        st = phx_module_set_grad_hook(model, on_grad_ready, d);
    }
    if (st != PHX_OK) {
        phx_module_free(self);
        return NULL;
    }
    phx_module_train(self, phx_module_is_training(model));
    /* The wrapper reports the model's policy (phx_module_compute_dtype). */
    self->precision = d->precision = model->precision;
    self->compute_dtype = d->compute_dtype = model->compute_dtype;
    return self;
}

phx_module *phx_ddp_model(phx_module *ddp)
{
    px_ddp *d = ddp_of(ddp, "phx_ddp_model");
    return d ? d->model : NULL;
}

phx_status phx_ddp_set_no_sync(phx_module *ddp, bool no_sync)
{
    px_ddp *d = ddp_of(ddp, "phx_ddp_set_no_sync");
    if (!d) return PHX_EINVAL;
    if (d->n_ready > 0)
        return phx_error(PHX_ESTATE,
                         "phx_ddp_set_no_sync: a backward is in progress (%zu of %zu gradients "
                         "ready); switch between backward passes",
                         d->n_ready, d->n_params);
    d->no_sync = no_sync;
    return PHX_OK;
}

size_t phx_ddp_num_buckets(phx_module *ddp)
{
    px_ddp *d = ddp_of(ddp, "phx_ddp_num_buckets");
    return d ? d->n_buckets : 0;
}

size_t phx_ddp_bucket_params(phx_module *ddp, size_t b, size_t *idx, size_t max)
{
    px_ddp *d = ddp_of(ddp, "phx_ddp_bucket_params");
    if (!d) return 0;
    if (b >= d->n_buckets) {
        phx_error(PHX_EINVAL, "phx_ddp_bucket_params: bucket %zu, there are %zu", b, d->n_buckets);
        return 0;
    }
    const px_bucket *k = &d->buckets[b];
    for (size_t j = 0; idx && j < k->n_members && j < max; j++) idx[j] = k->members[j];
    return k->n_members;
}

phx_status phx_ddp_get_stats(phx_module *ddp, phx_ddp_stats *out)
{
    px_ddp *d = ddp_of(ddp, "phx_ddp_get_stats");
    if (!d) return PHX_EINVAL;
    return px_abi_out(out, &d->stats, sizeof d->stats, "phx_ddp_get_stats", "phx_ddp_stats", "PHX_DDP_STATS_INIT");
}

size_t phx_ddp_trace(phx_module *ddp, phx_ddp_event *ev, size_t max)
{
    px_ddp *d = ddp_of(ddp, "phx_ddp_trace");
    if (!d) return 0;
    for (size_t i = 0; ev && i < d->trace_len && i < max; i++) ev[i] = d->trace[i];
    return d->trace_len;
}
