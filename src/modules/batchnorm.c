/* BatchNorm1d/2d and SyncBatchNorm, PyTorch's algorithm (doc/guide/cnn.md):
 *   training: per-channel batch mean and biased variance normalise x;
 *     running_mean/var move towards the mean and the unbiased variance
 *     by momentum (momentum < 0: a cumulative average over
 *     num_batches_tracked); synchronized, the per-rank (mean, var, count)
 *     are all-gathered and combined, and backward all-reduces the two
 *     per-channel sums (sum dy, sum dy (x - mean)).
 *   eval: the running estimates (the batch's without tracking).
 * Statistics are f32 whatever the compute dtype. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "src/modules/module-impl.h"
#include "src/modules/cnn-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"
#include "src/base/abi.h"
#include "phalanx/cnn.h"
#include "phalanx/comm.h"

typedef struct batchnorm {
    int64_t c;
    int dims; /* 1: (N, C) or (N, C, L); 2: (N, C, H, W) */
    float eps, momentum;
    phx_param *w, *b;
    px_buffer *rmean, *rvar, *nbt; /* NULL without tracking */
    bool sync; /* SyncBatchNorm */
    phx_comm *comm; /* SyncBatchNorm's; NULL: a world of one */
    px_io io;
    /* The statistics of the last forward: (2C + 1) f32, mean, biased
     * variance and this rank's count, what SyncBatchNorm all-gathers;
     * mean and var are views of it. Allocated at the first forward. */
    phx_tensor *stats, *mean, *var;
    px_buf sums; /* (2C) sum_dy, sum_dy_xmu */
    px_buf gathered; /* (world, 2C + 1) */
    float *host; /* world (2C + 1) floats: the gathered rows */
    size_t host_n;
    int64_t n, hw; /* of the last forward */
    double count; /* values per channel behind mean/var (all ranks) */
    bool batch_stats; /* the last forward normalised with batch statistics */
} batchnorm;

static const char *who_fwd(const phx_module *self)
{
    const batchnorm *B = phx_module_ctx(self);
    return B->sync     ? "phx_sync_batchnorm_forward"
        : B->dims == 2 ? "phx_batchnorm2d_forward"
                       : "phx_batchnorm1d_forward";
}

static phx_status bn_shape(const phx_module *self, const phx_tensor *x, int64_t *n, int64_t *hw)
{
    const batchnorm *B = phx_module_ctx(self);
    const char *who = who_fwd(self);
    if (B->dims == 2) {
        phx_status st = px_check_nchw(who, x, B->c, "num_features");
        if (st != PHX_OK) return st;
    } else if ((x->ndim != 2 && x->ndim != 3) || x->shape[1] != B->c) {
        char s[64];
        return phx_error(PHX_EINVAL, "%s: input is %s, expected (N, %lld) or (N, %lld, L)", who,
                         phx_tensor_shape_str(x, s, sizeof s), (long long)B->c, (long long)B->c);
    }
    *n = x->shape[0];
    *hw = x->numel / (x->shape[0] ? x->shape[0] : 1) / B->c;
    return PHX_OK;
}

/* Combines every rank's (mean, var, count) row of B->stats into the
 * global mean and biased variance (Chan et al.'s parallel formula, f64 on
 * the host), written back into B->stats; *count becomes the world's. */
static phx_status sync_stats(batchnorm *B, double *count)
{
    int world = phx_comm_size(B->comm);
    int64_t c = B->c, row = 2 * c + 1, total = world * row;
    phx_tensor *all;
    phx_status st = px_buf_get(&B->gathered, PHX_F32, 1, &total, B->stats->storage->device, &all);
    if (st != PHX_OK) return st;
    if (B->host_n < (size_t)total) {
        float *h = px_realloc(B->host, (size_t)total * sizeof *h);
        if (!h) return PHX_ENOMEM;
        B->host = h, B->host_n = (size_t)total;
    }
    float *h = B->host;
    if ((st = phx_comm_allgather(B->comm, B->stats, all, NULL)) != PHX_OK ||
        (st = phx_tensor_to_host(all, h)) != PHX_OK)
        return st;
    double n = 0.0;
    for (int r = 0; r < world; r++) n += h[r * row + 2 * c];
    /* row 0 is rank 0's: overwritten in place, column by column */
    for (int64_t j = 0; j < c; j++) {
        double m = 0.0, q = 0.0;
        for (int r = 0; r < world; r++) m += h[r * row + 2 * c] * (double)h[r * row + j];
        m = n > 0 ? m / n : 0.0;
        for (int r = 0; r < world; r++) {
            double nr = h[r * row + 2 * c], d = h[r * row + j] - m;
            q += nr * ((double)h[r * row + c + j] + d * d);
        }
        h[j] = (float)m;
        h[c + j] = n > 0 ? (float)(q / n) : 0.0f;
    }
    h[2 * c] = (float)n;
    *count = n;
    return phx_tensor_from_host(B->stats, h);
}

/* B->stats and its mean and var views on dev. */
static phx_status ensure_stats(batchnorm *B, phx_device dev)
{
    if (B->stats && phx_device_equal(B->stats->storage->device, dev)) return PHX_OK;
    phx_tensor_free(B->mean), phx_tensor_free(B->var), phx_tensor_free(B->stats);
    B->mean = B->var = NULL;
    int64_t row = 2 * B->c + 1;
    if (!(B->stats = phx_tensor_zeros(PHX_F32, 1, &row, dev)) || !(B->mean = px_tensor_view(B->stats, 0, 1, &B->c)) ||
        !(B->var = px_tensor_view(B->stats, B->c, 1, &B->c)))
        return PHX_ENOMEM;
    return PHX_OK;
}

/* running <- (1 - f) running + f batch, with the unbiased variance; f is
 * momentum, or 1 / num_batches_tracked for a cumulative average. */
static phx_status update_running(batchnorm *B)
{
    double tracked = 0.0;
    phx_status st = phx_tensor_get(B->nbt->t, 0, &tracked);
    if (st != PHX_OK || (st = phx_tensor_fill(B->nbt->t, tracked + 1.0)) != PHX_OK) return st;
    float f = B->momentum < 0.0f ? (float)(1.0 / (tracked + 1.0)) : B->momentum;
    float unbias = (float)(B->count / (B->count - 1.0));
    if ((st = phx_tensor_axpby(f, B->mean, 1.0f - f, B->rmean->t)) != PHX_OK) return st;
    return phx_tensor_axpby(f * unbias, B->var, 1.0f - f, B->rvar->t);
}

static bool synced(const batchnorm *B)
{
    return B->comm && phx_comm_size(B->comm) > 1;
}

static phx_status bn_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    batchnorm *B = phx_module_ctx(self);
    const char *who = who_fwd(self);
    int64_t n = 0, hw = 0;
    phx_status st = px_check_float_input(who, x);
    if (st != PHX_OK || (st = bn_shape(self, x, &n, &hw)) != PHX_OK) return st;
    if (B->w && (st = px_check_same_device(who, x, B->w->value)) != PHX_OK) return st;
    phx_device dev = x->storage->device;
    const phx_kernels_v1 *k = px_device_kernels(dev);
    if (!k) return PHX_ENOTFOUND;
    PX_NEED_SLOT(who, dev, k, batchnorm_stats);
    phx_dtype dt = phx_module_compute_dtype(self);
    bool training = phx_module_is_training(self);
    const phx_tensor *xin;
    phx_tensor *out;
    if ((st = px_io_forward(&B->io, x, dt, -1, &xin, &out)) != PHX_OK || (st = ensure_stats(B, dev)) != PHX_OK)
        return st;
    B->batch_stats = training || !B->rmean;
    B->count = (double)(n * hw);
    float *mean = px_tensor_ptr(B->mean), *var = px_tensor_ptr(B->var);
    if (B->batch_stats) {
        st = k->batchnorm_stats(dev.index, n, B->c, hw, px_tensor_ptr(xin), dt, mean, var);
        if (st == PHX_OK && synced(B) && (st = k->fill(dev.index, var + B->c, PHX_F32, 1, B->count)) == PHX_OK)
            st = sync_stats(B, &B->count);
        if (st != PHX_OK) return st;
        if (training && B->count <= 1.0) {
            char s[64];
            return phx_error(PHX_EINVAL, "%s: expected more than 1 value per channel when training, got input %s%s",
                             who, phx_tensor_shape_str(x, s, sizeof s), synced(B) ? " on every rank together" : "");
        }
        if (training && B->rmean && (st = update_running(B)) != PHX_OK) return st;
    } else if ((st = phx_tensor_copy(B->mean, B->rmean->t)) != PHX_OK ||
               (st = phx_tensor_copy(B->var, B->rvar->t)) != PHX_OK) {
        return st;
    }
    st = k->batchnorm_apply(dev.index, n, B->c, hw, px_tensor_ptr(xin), mean, var, B->eps,
                            B->w ? px_tensor_ptr(B->w->value) : NULL, B->b ? px_tensor_ptr(B->b->value) : NULL,
                            px_tensor_ptr(out), dt);
    if (st != PHX_OK) return st;
    B->n = n, B->hw = hw;
    px_io_keep(&B->io, xin);
    *y = out;
    return PHX_OK;
}

static phx_status bn_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    batchnorm *B = phx_module_ctx(self);
    if (!B->io.x) return phx_error(PHX_ESTATE, "phx_batchnorm_backward: no forward to differentiate");
    const phx_tensor *x = B->io.x;
    if (!px_dy_fits(dy, x)) return px_dy_mismatch("phx_batchnorm_backward", dy, x);
    phx_device dev = x->storage->device;
    const phx_kernels_v1 *k = px_device_kernels(dev);
    if (!k) return PHX_ENOTFOUND;
    const phx_tensor *g;
    phx_tensor *d, *sums;
    int64_t two = 2 * B->c;
    phx_status st;
    if ((st = px_io_backward(&B->io, dy, &g, &d)) != PHX_OK ||
        (st = px_buf_get(&B->sums, PHX_F32, 1, &two, dev, &sums)) != PHX_OK)
        return st;
    float *sum_dy = px_tensor_ptr(sums), *sum_dy_xmu = sum_dy + B->c;
    const float *mean = px_tensor_ptr(B->mean), *var = px_tensor_ptr(B->var);
    st = k->batchnorm_backward_reduce(dev.index, B->n, B->c, B->hw, px_tensor_ptr(x), px_tensor_ptr(g), x->dtype, mean,
                                      var, B->eps, sum_dy, sum_dy_xmu, B->w ? px_tensor_ptr(B->w->grad) : NULL,
                                      B->b ? px_tensor_ptr(B->b->grad) : NULL);
    if (st != PHX_OK) return st;
    if (B->w) phx_param_grad_ready(B->w);
    if (B->b) phx_param_grad_ready(B->b);
    if (!dx) return PHX_OK;
    if (B->batch_stats && synced(B) && (st = phx_comm_allreduce(B->comm, sums, PHX_SUM, NULL)) != PHX_OK) return st;
    st = k->batchnorm_backward_apply(dev.index, B->n, B->c, B->hw, px_tensor_ptr(x), px_tensor_ptr(g), x->dtype, mean,
                                     var, B->eps, B->w ? px_tensor_ptr(B->w->value) : NULL,
                                     B->batch_stats ? sum_dy : NULL, B->batch_stats ? sum_dy_xmu : NULL, B->count,
                                     px_tensor_ptr(d));
    if (st == PHX_OK) *dx = d;
    return st;
}

static void bn_free(phx_module *self)
{
    batchnorm *B = phx_module_ctx(self);
    if (!B) return;
    px_io_free(&B->io);
    phx_tensor_free(B->mean);
    phx_tensor_free(B->var);
    phx_tensor_free(B->stats);
    px_free(B->host);
    px_buf_free(&B->sums);
    px_buf_free(&B->gathered);
    px_free(B);
}

static phx_module *bn_clone(const phx_module *self);

static const phx_module_vtable bn1d_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "BatchNorm1d",
    .forward = bn_forward,
    .backward = bn_backward,
    .free = bn_free,
    .clone = bn_clone,
};
static const phx_module_vtable bn2d_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "BatchNorm2d",
    .forward = bn_forward,
    .backward = bn_backward,
    .free = bn_free,
    .clone = bn_clone,
};
static const phx_module_vtable sync_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "SyncBatchNorm",
    .forward = bn_forward,
    .backward = bn_backward,
    .free = bn_free,
    .clone = bn_clone,
};

static phx_module *bn_new(int dims, int64_t c, float eps, float momentum, bool affine, bool track)
{
    if (c < 1 || !(eps > 0.0f) || !(momentum <= 1.0f)) {
        phx_error(PHX_EINVAL,
                  "phx_batchnorm%dd_new: num_features %lld, eps %g, momentum %g: expected >= 1, > 0 and "
                  "<= 1 (< 0 for a cumulative average)",
                  dims, (long long)c, (double)eps, (double)momentum);
        return NULL;
    }
    batchnorm *B;
    phx_module *m = px_module_alloc(dims == 2 ? &bn2d_vt : &bn1d_vt, sizeof *B, (void **)&B);
    if (!m) return NULL;
    B->c = c, B->dims = dims, B->eps = eps, B->momentum = momentum;
    if ((affine &&
         (!(B->w = px_add_filled_param(m, "weight", c, 1.0)) || !(B->b = px_add_filled_param(m, "bias", c, 0.0)))) ||
        (track &&
         (!(B->rmean = px_module_add_buffer(m, "running_mean", px_filled(1, &c, 0.0))) ||
          !(B->rvar = px_module_add_buffer(m, "running_var", px_filled(1, &c, 1.0))) ||
          !(B->nbt = px_module_add_buffer(m, "num_batches_tracked", phx_tensor_zeros(PHX_I64, 0, NULL, phx_cpu())))))) {
        phx_module_free(m);
        return NULL;
    }
    return m;
}

phx_module *phx_batchnorm2d_new(int64_t num_features, float eps, float momentum, bool affine, bool track_running_stats)
{
    return bn_new(2, num_features, eps, momentum, affine, track_running_stats);
}

phx_module *phx_batchnorm1d_new(int64_t num_features, float eps, float momentum, bool affine, bool track_running_stats)
{
    return bn_new(1, num_features, eps, momentum, affine, track_running_stats);
}

static phx_module *bn_new_opts(int dims, int64_t c, const phx_batchnorm_opts *opts, const char *who)
{
    phx_batchnorm_opts o = PHX_BATCHNORM_OPTS_INIT;
    if (px_abi_in(&o, sizeof o, opts, who, "phx_batchnorm_opts", "PHX_BATCHNORM_OPTS_INIT")) return NULL;
    return bn_new(dims, c, o.eps, o.momentum, o.affine, o.track_running_stats);
}

phx_module *phx_batchnorm2d_new_opts(int64_t num_features, const phx_batchnorm_opts *opts)
{
    return bn_new_opts(2, num_features, opts, "phx_batchnorm2d_new_opts");
}

phx_module *phx_batchnorm1d_new_opts(int64_t num_features, const phx_batchnorm_opts *opts)
{
    return bn_new_opts(1, num_features, opts, "phx_batchnorm1d_new_opts");
}

static phx_module *bn_clone(const phx_module *self)
{
    const batchnorm *B = phx_module_ctx(self);
    phx_module *c =
        px_module_clone_values(bn_new(B->dims, B->c, B->eps, B->momentum, B->w != NULL, B->rmean != NULL), self);
    if (c && B->sync) {
        ((batchnorm *)phx_module_ctx(c))->sync = true;
        ((batchnorm *)phx_module_ctx(c))->comm = B->comm;
        px_module_set_vtable(c, &sync_vt);
    }
    return c;
}

static size_t convert(phx_module *m, phx_comm *comm)
{
    size_t n = 0;
    if (m->type == &bn1d_vt || m->type == &bn2d_vt || m->type == &sync_vt) {
        ((batchnorm *)m->ctx)->sync = true;
        ((batchnorm *)m->ctx)->comm = comm;
        px_module_set_vtable(m, &sync_vt);
        n++;
    }
    for (size_t i = 0; i < m->n_children; i++) n += convert(m->children[i].m, comm);
    return n;
}

phx_status phx_sync_batchnorm_convert(phx_module *model, phx_comm *comm, size_t *n)
{
    if (!model) return phx_error(PHX_EINVAL, "phx_sync_batchnorm_convert: model is NULL");
    /* Through a DDP wrapper the model is converted, as PyTorch's
     * convert_sync_batchnorm reaches into DDP's module; a DataParallel
     * wrapper's replicas were cloned from the model already. */
    if (model->wrapped && strcmp(phx_module_type(model), "DistributedDataParallel") == 0)
        model = model->wrapped;
    else if (model->wrapped)
        return phx_error(PHX_EINVAL,
                         "phx_sync_batchnorm_convert: the module is a %s wrapper, whose replicas were "
                         "copied from the model when it was made; call phx_sync_batchnorm_convert on the "
                         "model before wrapping it",
                         phx_module_type(model));
    size_t k = convert(model, comm);
    if (n) *n = k;
    return PHX_OK;
}
