/* DDP communication hooks: registration, the wrapper's calls into the
 * registered hook, and the built-in allreduce, fp16_compress and
 * bf16_compress hooks (PyTorch's default_hooks). PowerSGD is in
 * ddp-hook-powersgd.c. */
#include <stdio.h>
#include <string.h>
#include "src/ddp/ddp-impl.h"
#include "src/ddp/ddp-hook.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"
#include "src/base/abi.h"

typedef struct px_ddp_hook {
    phx_comm_hook hook;
    void *state;
    phx_tensor **grads; /* (n_params) scratch: the members' gradients of one bucket */
    bool *launched; /* (n_buckets at launch, grown) the hook's launch of bucket b succeeded */
    size_t n_launched;
    int div; /* divisor of the current backward */
    /* compress hooks: one 16-bit buffer per bucket */
    phx_tensor **half;
    size_t n_half;
} px_ddp_hook;

const char *px_ddp_hook_name(const px_ddp *d)
{
    return !d->hook ? NULL : d->hook->hook.name ? d->hook->hook.name : "(unnamed)";
}

/* ---- built-in: allreduce (the wrapper's own path) -------------------- */

static phx_status allreduce_launch(void *state, const phx_comm_hook_bucket *b, phx_work **work)
{
    (void)state;
    phx_status st = PHX_OK;
    if (b->divisor > 1) st = phx_tensor_axpby(0.0f, NULL, 1.0f / (float)b->divisor, b->buffer);
    if (st == PHX_OK) st = phx_comm_allreduce(b->comm, b->buffer, PHX_SUM, work);
    if (st == PHX_OK && b->bytes) *b->bytes += phx_tensor_nbytes(b->buffer);
    return st;
}

static const phx_comm_hook allreduce_hook = {
    .struct_size = sizeof(phx_comm_hook),
    .name = "allreduce",
    .launch = allreduce_launch,
    .complete = NULL,
};

const phx_comm_hook *phx_comm_hook_allreduce(void)
{
    return &allreduce_hook;
}

/* ---- built-ins: fp16_compress, bf16_compress -------------------------- */

/* The bucket's 16-bit buffer (state: the registration), made on first use
 * and when the bucket's size changes (a rebuild). */
static phx_tensor *half_of(px_ddp_hook *h, const phx_comm_hook_bucket *b, phx_dtype dt)
{
    if (b->index >= h->n_half) {
        phx_tensor **n = px_realloc(h->half, (b->index + 1) * sizeof *n);
        if (!n) return NULL;
        memset(n + h->n_half, 0, (b->index + 1 - h->n_half) * sizeof *n);
        h->half = n;
        h->n_half = b->index + 1;
    }
    phx_tensor **t = &h->half[b->index];
    int64_t numel = phx_tensor_numel(b->buffer);
    if (*t && phx_tensor_numel(*t) != numel) {
        phx_tensor_free(*t);
        *t = NULL;
    }
    if (!*t) *t = phx_tensor_new(dt, 1, &numel, phx_cpu());
    return *t;
}

static phx_status need_cpu(const char *who, const phx_comm_hook_bucket *b)
{
    if (phx_tensor_device(b->buffer).kind != PHX_DEVICE_CPU)
        return phx_error(PHX_EUNSUPPORTED,
                         "%s hook: bucket %zu is not on the CPU; the built-in hooks compress CPU buckets", who,
                         b->index);
    return PHX_OK;
}

/* 16(16(g) / divisor) into the bucket's 16-bit buffer (PyTorch's
 * buffer.to(dtype).div_(world_size): the division in f32, rounded once),
 * then the sum across ranks in that dtype. The f32 bucket serves as the
 * scratch of the division (complete overwrites it), so the casts run
 * through the vectorised cast kernel. */
static phx_status compress_launch(void *state, const phx_comm_hook_bucket *b, phx_work **work, phx_dtype dt)
{
    const char *who = dt == PHX_F16 ? "fp16_compress" : "bf16_compress";
    phx_status st = need_cpu(who, b);
    if (st != PHX_OK) return st;
    phx_tensor *t = half_of(state, b, dt);
    if (!t) return phx_error(PHX_ENOMEM, "%s hook: no memory for bucket %zu's 16-bit copy", who, b->index);
    st = phx_tensor_cast(t, b->buffer);
    if (st == PHX_OK && b->divisor > 1) {
        st = phx_tensor_cast(b->buffer, t);
        float *g = px_tensor_ptr(b->buffer), div = (float)b->divisor;
        int64_t n = phx_tensor_numel(b->buffer);
        for (int64_t i = 0; i < n; i++) g[i] /= div;
        if (st == PHX_OK) st = phx_tensor_cast(t, b->buffer);
    }
    if (st == PHX_OK) st = phx_comm_allreduce(b->comm, t, PHX_SUM, work);
    if (st == PHX_OK && b->bytes) *b->bytes += phx_tensor_nbytes(t);
    return st;
}

/* The sum, cast back into the f32 bucket. */
static phx_status compress_complete(void *state, const phx_comm_hook_bucket *b, phx_dtype dt)
{
    px_ddp_hook *h = state;
    (void)dt;
    if (b->index >= h->n_half || !h->half[b->index])
        return phx_error(PHX_ESTATE, "compress hook: bucket %zu completes without a launch", b->index);
    return phx_tensor_cast(b->buffer, h->half[b->index]);
}

static phx_status fp16_launch(void *state, const phx_comm_hook_bucket *b, phx_work **work)
{
    return compress_launch(state, b, work, PHX_F16);
}
static phx_status fp16_complete(void *state, const phx_comm_hook_bucket *b)
{
    return compress_complete(state, b, PHX_F16);
}
static phx_status bf16_launch(void *state, const phx_comm_hook_bucket *b, phx_work **work)
{
    return compress_launch(state, b, work, PHX_BF16);
}
static phx_status bf16_complete(void *state, const phx_comm_hook_bucket *b)
{
    return compress_complete(state, b, PHX_BF16);
}

static const phx_comm_hook fp16_hook = {
    .struct_size = sizeof(phx_comm_hook),
    .name = "fp16_compress",
    .launch = fp16_launch,
    .complete = fp16_complete,
};
static const phx_comm_hook bf16_hook = {
    .struct_size = sizeof(phx_comm_hook),
    .name = "bf16_compress",
    .launch = bf16_launch,
    .complete = bf16_complete,
};

const phx_comm_hook *phx_comm_hook_fp16_compress(void)
{
    return &fp16_hook;
}

const phx_comm_hook *phx_comm_hook_bf16_compress(void)
{
    return &bf16_hook;
}

/* ---- registration ----------------------------------------------------- */

static bool is_compress(const phx_comm_hook *h)
{
    return h->launch == fp16_launch || h->launch == bf16_launch;
}

phx_status phx_ddp_register_comm_hook(phx_module *ddp, const phx_comm_hook *hook, void *state)
{
    static const char fn[] = "phx_ddp_register_comm_hook";
    if (!ddp || strcmp(phx_module_type(ddp), "DistributedDataParallel") != 0)
        return phx_error(PHX_EINVAL,
                         "%s: module is %s; a communication hook goes on the DistributedDataParallel wrapper "
                         "(phx_ddp_new's result), not on the model",
                         fn, ddp ? phx_module_type(ddp) : "NULL");
    if (!hook) return px_error_null(fn, "hook");
    phx_comm_hook own = PHX_COMM_HOOK_INIT;
    phx_status st = px_abi_in(&own, sizeof own, hook, fn, "phx_comm_hook", "PHX_COMM_HOOK_INIT");
    if (st != PHX_OK) return st;
    const char *name = own.name ? own.name : "(unnamed)";
    if (!own.launch) return phx_error(PHX_EINVAL, "%s: hook '%s' has no launch function (required)", fn, name);
    px_ddp *d = phx_module_ctx(ddp);
    if (d->hook)
        return phx_error(PHX_ESTATE,
                         "%s: hook '%s' is already registered on this wrapper; a hook can be registered once", fn,
                         d->hook->hook.name ? d->hook->hook.name : "(unnamed)");
    if (d->forwarded || d->stats.backwards > 0 || d->n_ready > 0)
        return phx_error(PHX_ESTATE,
                         "%s: the wrapper already ran a forward or backward; register hook '%s' after phx_ddp_new "
                         "and before the first forward",
                         fn, name);
    if (d->join)
        return phx_error(PHX_ESTATE, "%s: inside a join; register hook '%s' before phx_ddp_join_begin", fn, name);
    if (d->zero2)
        return phx_error(PHX_ESTATE,
                         "%s: a ZeRO-2 optimizer reduce-scatters this wrapper's buckets; hook '%s' needs the "
                         "all-reduce of plain DDP or ZeRO-1 (phx_zero_opts.stage = 1)",
                         fn, name);
    bool builtin = is_compress(&own) || own.launch == px_powersgd_launch;
    for (size_t b = 0; builtin && b < d->n_buckets; b++)
        if (phx_tensor_device(d->buckets[b].flat).kind != PHX_DEVICE_CPU)
            return phx_error(PHX_EUNSUPPORTED, "%s: hook '%s' compresses CPU buckets; bucket %zu is on another device",
                             fn, name, b);
    if (own.launch == px_powersgd_launch && (st = px_powersgd_check(state, fn)) != PHX_OK) return st;
    px_ddp_hook *h = px_calloc(1, sizeof *h);
    if (!h) return PHX_ENOMEM;
    h->grads = px_calloc(d->n_params ? d->n_params : 1, sizeof *h->grads);
    if (!h->grads) {
        px_free(h);
        return PHX_ENOMEM;
    }
    h->hook = own;
    /* The compress hooks keep their 16-bit buffers in the registration
     * (their state argument is not used). */
    h->state = is_compress(&own) ? h : state;
    d->hook = h;
    return PHX_OK;
}

void px_ddp_hook_free(px_ddp *d)
{
    px_ddp_hook *h = d->hook;
    if (!h) return;
    for (size_t b = 0; b < h->n_half; b++) phx_tensor_free(h->half[b]);
    px_free(h->half);
    px_free(h->grads);
    px_free(h->launched);
    px_free(h);
    d->hook = NULL;
}

/* ---- the wrapper's calls ---------------------------------------------- */

static void bucket_of(px_ddp *d, size_t b, phx_comm_hook_bucket *out)
{
    px_ddp_hook *h = d->hook;
    px_bucket *k = &d->buckets[b];
    for (size_t j = 0; j < k->n_members; j++) h->grads[j] = phx_param_grad(d->params[k->members[j]]);
    *out = (phx_comm_hook_bucket){
        .struct_size = sizeof *out,
        .buffer = k->flat,
        .comm = d->comm,
        .index = b,
        .is_last = b + 1 == d->n_buckets,
        .divisor = h->div,
        .n_grads = k->n_members,
        .grads = h->grads,
        .params = k->members,
        .bytes = &d->stats.bytes,
    };
}

static phx_status hook_error(px_ddp *d, size_t b, phx_status st, const char *what)
{
    char err[PX_DDP_ERR_MAX];
    snprintf(err, sizeof err, "%s", phx_last_error());
    return phx_error(st, "DistributedDataParallel: communication hook '%s' %s bucket %zu: %s",
                     d->hook->hook.name ? d->hook->hook.name : "(unnamed)", what, b, err);
}

phx_status px_ddp_hook_launch(px_ddp *d, size_t b, int div, phx_work **work)
{
    px_ddp_hook *h = d->hook;
    *work = NULL;
    if (b >= h->n_launched) {
        bool *n = px_realloc(h->launched, d->n_buckets * sizeof *n);
        if (!n) return PHX_ENOMEM;
        memset(n + h->n_launched, 0, (d->n_buckets - h->n_launched) * sizeof *n);
        h->launched = n;
        h->n_launched = d->n_buckets;
    }
    h->div = div;
    phx_comm_hook_bucket hb;
    bucket_of(d, b, &hb);
    h->launched[b] = false;
    phx_status st = h->hook.launch(h->state, &hb, work);
    if (st != PHX_OK) {
        phx_work_free(*work);
        *work = NULL;
        return hook_error(d, b, st, "failed to launch");
    }
    h->launched[b] = true;
    return PHX_OK;
}

phx_status px_ddp_hook_complete(px_ddp *d, size_t b)
{
    px_ddp_hook *h = d->hook;
    if (b >= h->n_launched || !h->launched[b]) return PHX_OK; /* its launch failed and said so */
    h->launched[b] = false;
    if (!h->hook.complete) return PHX_OK;
    phx_comm_hook_bucket hb;
    bucket_of(d, b, &hb);
    phx_status st = h->hook.complete(h->state, &hb);
    return st == PHX_OK ? PHX_OK : hook_error(d, b, st, "failed to complete");
}

phx_status px_ddp_hook_reduce(px_ddp *d, size_t b, int div)
{
    phx_work *w = NULL;
    phx_status st = px_ddp_hook_launch(d, b, div, &w);
    if (st == PHX_OK) st = phx_work_wait(w, -1);
    phx_work_free(w);
    if (st == PHX_OK) st = px_ddp_hook_complete(d, b);
    return st;
}
