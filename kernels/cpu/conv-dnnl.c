/* f32 (and native bf16) convolutions through oneDNN (doc/maint/kernels.md
 * says when conv.c takes this path): oneDNN picks its blocked layouts (format "any"), the NCHW
 * tensors are reordered in and out, as PyTorch's mkldnn path does. Like
 * gemm-dnnl.c, oneDNN runs on one OpenMP thread per call and the images
 * are split over the thread budget's pool (src/base/threads.h); the
 * weight gradient of each part goes to that thread's scratch and is added
 * into dw after. In bf16, x, w, y, dy and dx are bf16 and the bias, dw
 * and db f32: oneDNN multiplies bf16 in hardware (AVX512-BF16, AMX) with
 * f32 accumulation and rounds each output once. */
#include "config.h"
#include "kernels/cpu/cpu.h"

#ifdef HAVE_DNNL
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <oneapi/dnnl/dnnl.h>
#include "src/base/threads.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static dnnl_engine_t engine;
static pthread_key_t plans_key;

/* What fixes a part's primitive: the pass, the window, the part's image
 * count and whether there is a bias (gradient). Zeroed before filling, so
 * keys compare with memcmp. */
typedef struct conv_key {
    int64_t pass, n, bias, dt;
    phx_conv2d_desc d;
} conv_key;

/* A part's oneDNN objects, made once per key and thread: the primitive,
 * and for each of its three tensors (slot 0, 1: inputs; slot 2: the
 * output) the primitive's memory m, and when oneDNN chose a layout other
 * than the user's plain one, the user's memory u and the reorder between
 * them (u -> m for inputs, m -> u for the output; m then lives in scratch
 * slot blocked_slot[pass][i]). Each call only points the memories at its data. */
typedef struct conv_plan {
    conv_key key;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim, re[3];
    dnnl_memory_t m[3], u[3], bias, sp;
    size_t bytes[3], sp_bytes;
    dnnl_exec_arg_t args[6];
    int nargs;
} conv_plan;

/* The scratch slot of each pass's tensor i in oneDNN's layout: slot 0
 * for those shaped like the output image (y, dy), 1 like the input (x,
 * dx), 2 the weights, so the forward's blocked y and the backward's
 * blocked dy share one buffer, still in the cache (in
 * conv3x3_fwd_bwd_128x1x28x28_32 each is 11 MB; the L3 here is 32 MB). */
static const int blocked_slot[3][3] = {{1, 2, 0}, {0, 2, 1}, {1, 0, 2}};

/* The plans of one thread (most recent shapes; a CNN step has a few per
 * layer), and its stream. */
#define CONV_PLANS 16
typedef struct conv_plans {
    conv_plan p[CONV_PLANS];
    int used, next;
    dnnl_stream_t s;
} conv_plans;

static void plan_destroy(conv_plan *p)
{
    for (int i = 0; i < 3; i++) {
        dnnl_primitive_destroy(p->re[i]);
        dnnl_memory_destroy(p->m[i]);
        dnnl_memory_destroy(p->u[i]);
    }
    dnnl_memory_destroy(p->bias);
    dnnl_memory_destroy(p->sp);
    dnnl_primitive_destroy(p->prim);
    dnnl_primitive_desc_destroy(p->pd);
    memset(p, 0, sizeof *p);
}

static void plans_destroy(void *v)
{
    conv_plans *ps = v;
    for (int i = 0; i < ps->used; i++) plan_destroy(&ps->p[i]);
    dnnl_stream_destroy(ps->s);
    free(ps);
}

static void init(void)
{
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) engine = NULL;
    pthread_key_create(&plans_key, plans_destroy);
}

static conv_plans *thread_plans(void)
{
    conv_plans *ps = pthread_getspecific(plans_key);
    if (ps) return ps;
    if (!(ps = calloc(1, sizeof *ps))) return NULL;
    if (dnnl_stream_create(&ps->s, engine, dnnl_stream_default_flags) != dnnl_success) {
        free(ps);
        return NULL;
    }
    pthread_setspecific(plans_key, ps);
    return ps;
}

/* One part: images [n0, n0 + n) of the call. */
typedef struct conv_call {
    int pass; /* 0 forward, 1 backward data, 2 backward weight (cpu.h) */
    const phx_conv2d_desc *d;
    const char *x, *w, *dy; /* in dt */
    const float *bias;
    char *y, *dx; /* in dt */
    float *dw, *db;
    phx_dtype dt;
    int64_t step, parts;
    float *partial; /* backward weights: part i's dW and dB at i (nw + k) */
    size_t nw;
    dnnl_status_t st[64];
} conv_call;

/* The user's plain layouts of n images: the images in dt, the weights
 * in wdt. */
static void plain_mds(const phx_conv2d_desc *d, int64_t n, dnnl_data_type_t dt, dnnl_data_type_t wdt,
                      dnnl_memory_desc_t *src, dnnl_memory_desc_t *wei, dnnl_memory_desc_t *bia,
                      dnnl_memory_desc_t *dst, dnnl_format_tag_t tag)
{
    dnnl_dims_t s = {n, d->c, d->h, d->w}, o = {n, d->k, d->oh, d->ow}, b = {d->k};
    dnnl_memory_desc_init_by_tag(src, 4, s, dt, tag);
    dnnl_memory_desc_init_by_tag(dst, 4, o, dt, tag);
    dnnl_memory_desc_init_by_tag(bia, 1, b, dnnl_f32, dnnl_x);
    if (d->groups == 1) {
        dnnl_dims_t wd = {d->k, d->c, d->kh, d->kw};
        dnnl_memory_desc_init_by_tag(wei, 4, wd, wdt, tag == dnnl_format_tag_any ? tag : dnnl_oihw);
    } else {
        dnnl_dims_t wd = {d->groups, d->k / d->groups, d->c / d->groups, d->kh, d->kw};
        dnnl_memory_desc_init_by_tag(wei, 5, wd, wdt, tag == dnnl_format_tag_any ? tag : dnnl_goihw);
    }
}

static const dnnl_memory_desc_t *query(dnnl_primitive_desc_t pd, dnnl_query_t what)
{
    return dnnl_primitive_desc_query_md(pd, what, 0);
}

/* Slot i of plan p: the user's layout u against the primitive's q. */
static dnnl_status_t plan_slot(conv_plan *p, int i, const dnnl_memory_desc_t *u, const dnnl_memory_desc_t *q)
{
    dnnl_status_t st = dnnl_memory_create(&p->m[i], q, engine, DNNL_MEMORY_NONE);
    if (st != dnnl_success || dnnl_memory_desc_equal(u, q)) return st;
    p->bytes[i] = dnnl_memory_desc_get_size(q);
    dnnl_primitive_desc_t rpd;
    if ((st = dnnl_memory_create(&p->u[i], u, engine, DNNL_MEMORY_NONE)) != dnnl_success) return st;
    st = i < 2 ? dnnl_reorder_primitive_desc_create(&rpd, u, engine, q, engine, NULL)
               : dnnl_reorder_primitive_desc_create(&rpd, q, engine, u, engine, NULL);
    if (st != dnnl_success) return st;
    st = dnnl_primitive_create(&p->re[i], rpd);
    dnnl_primitive_desc_destroy(rpd);
    return st;
}

/* Whether the primitive works on the user's plain NCHW layouts (oneDNN
 * then runs its GEMM-based convolution, no reorders) rather than layouts
 * of its choosing (its direct convolutions on channel-blocked copies).
 * Chosen by measurement at one thread (doc/maint/kernels.md): plain for 1x1
 * convolutions with stride 1 and no padding, which are GEMMs on NCHW as
 * it stands (128x64x14x14 -> 128: forward 4.75-5.00 ms against 6.59-7.42
 * blocked, forward and backward 17.4-17.7 against 21.3-23.2); blocked
 * elsewhere (3x3: 1.0-1.7x faster blocked). A fixed rule, so a shape
 * always takes the same path and gives the same bits. */
static int plain_layouts(const conv_key *k)
{
    const phx_conv2d_desc *d = &k->d;
    return d->groups == 1 && d->kh == 1 && d->kw == 1 && d->stride_h == 1 && d->stride_w == 1 && !d->pad_h && !d->pad_w;
}

/* Makes the plan for key k (the part's primitive and reorders). */
static dnnl_status_t plan_make(conv_plan *p, const conv_key *k)
{
    const phx_conv2d_desc *d = &k->d;
    int pass = (int)k->pass;
    p->key = *k;
    /* bf16 images and weights; the weight gradient f32 */
    dnnl_data_type_t dt = k->dt == PHX_BF16 ? dnnl_bf16 : dnnl_f32, wdt = pass == 2 ? dnnl_f32 : dt;
    dnnl_format_tag_t tag = plain_layouts(k) ? dnnl_nchw : dnnl_format_tag_any;
    dnnl_memory_desc_t us, uw, ub, ud, as, aw, ab, ad, fs, fw, fb, fdst;
    plain_mds(d, k->n, dt, wdt, &us, &uw, &ub, &ud, dnnl_nchw);
    plain_mds(d, k->n, dt, wdt, &as, &aw, &ab, &ad, tag);
    plain_mds(d, k->n, dt, dt, &fs, &fw, &fb, &fdst, tag); /* the forward (hint) */
    dnnl_dims_t strides = {d->stride_h, d->stride_w}, dil = {d->dil_h - 1, d->dil_w - 1};
    dnnl_dims_t pl = {d->pad_h, d->pad_w};
    dnnl_dims_t pr = {(d->oh - 1) * d->stride_h + (d->kh - 1) * d->dil_h + 1 - d->h - d->pad_h,
                      (d->ow - 1) * d->stride_w + (d->kw - 1) * d->dil_w + 1 - d->w - d->pad_w};
    dnnl_convolution_desc_t fd, bd;
    dnnl_primitive_desc_t fpd = NULL;
    /* the primitive's scratchpad comes from scratch slot 4, not from a
     * malloc (and fresh pages) at every call */
    dnnl_primitive_attr_t attr = NULL;
    if (dnnl_primitive_attr_create(&attr) != dnnl_success ||
        dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) != dnnl_success) {
        dnnl_primitive_attr_destroy(attr);
        return dnnl_out_of_memory;
    }
    dnnl_status_t st =
        dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &fs, &fw,
                                                   k->bias ? &fb : NULL, &fdst, strides, dil, pl, pr);
    if (st == dnnl_success) st = dnnl_primitive_desc_create(&fpd, &fd, NULL, engine, NULL);
    if (st == dnnl_success && pass == 0) {
        st = dnnl_primitive_desc_create(&p->pd, &fd, attr, engine, NULL);
    } else if (st == dnnl_success && pass == 1) {
        st = dnnl_dilated_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &as, &aw, &ad, strides, dil,
                                                              pl, pr);
        if (st == dnnl_success) st = dnnl_primitive_desc_create(&p->pd, &bd, attr, engine, fpd);
    } else if (st == dnnl_success) {
        st = dnnl_dilated_convolution_backward_weights_desc_init(&bd, dnnl_convolution_direct, &as, &aw,
                                                                 k->bias ? &ab : NULL, &ad, strides, dil, pl, pr);
        if (st == dnnl_success) st = dnnl_primitive_desc_create(&p->pd, &bd, attr, engine, fpd);
    }
    dnnl_primitive_desc_destroy(fpd);
    dnnl_primitive_attr_destroy(attr);
    if (st == dnnl_success) st = dnnl_primitive_create(&p->prim, p->pd);
    if (st != dnnl_success) return st;
    /* the three tensors' slots and argument names, per pass */
    static const dnnl_query_t q[3][3] = {{dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md},
                                         {dnnl_query_diff_dst_md, dnnl_query_weights_md, dnnl_query_diff_src_md},
                                         {dnnl_query_src_md, dnnl_query_diff_dst_md, dnnl_query_diff_weights_md}};
    static const int arg[3][4] = {{DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS},
                                  {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC, 0},
                                  {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_BIAS}};
    const dnnl_memory_desc_t *user[3][3] = {{&us, &uw, &ud}, {&ud, &uw, &us}, {&us, &ud, &uw}};
    for (int i = 0; i < 3 && st == dnnl_success; i++) {
        st = plan_slot(p, i, user[pass][i], query(p->pd, q[pass][i]));
        p->args[p->nargs++] = (dnnl_exec_arg_t){arg[pass][i], p->m[i]};
    }
    if (st == dnnl_success && k->bias && pass != 1) {
        st = dnnl_memory_create(&p->bias, &ub, engine, DNNL_MEMORY_NONE);
        p->args[p->nargs++] = (dnnl_exec_arg_t){arg[pass][3], p->bias};
    }
    const dnnl_memory_desc_t *spd = query(p->pd, dnnl_query_scratchpad_md);
    p->sp_bytes = spd ? dnnl_memory_desc_get_size(spd) : 0;
    if (st == dnnl_success && p->sp_bytes) {
        st = dnnl_memory_create(&p->sp, spd, engine, DNNL_MEMORY_NONE);
        p->args[p->nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, p->sp};
    }
    return st;
}

/* This thread's plan for key k: a kept one, or a new one in the oldest
 * place. NULL with *st on failure. */
static conv_plan *plan_get(const conv_key *k, dnnl_stream_t *s, dnnl_status_t *st)
{
    conv_plans *ps = thread_plans();
    *st = dnnl_out_of_memory;
    if (!ps) return NULL;
    *s = ps->s;
    *st = dnnl_success;
    for (int i = 0; i < ps->used; i++)
        if (!memcmp(&ps->p[i].key, k, sizeof *k)) return &ps->p[i];
    conv_plan *p = &ps->p[ps->next];
    ps->next = (ps->next + 1) % CONV_PLANS;
    if (ps->used < CONV_PLANS)
        ps->used++;
    else
        plan_destroy(p);
    if ((*st = plan_make(p, k)) == dnnl_success) return p;
    plan_destroy(p); /* an empty key, never matched: memcmp needs pass 0..2 and n >= 1 */
    return NULL;
}

/* The convolution of n images at image n0 on the calling thread. */
static dnnl_status_t run_part(conv_call *c, int64_t n0, int64_t n)
{
    const phx_conv2d_desc *d = c->d;
    conv_key k;
    memset(&k, 0, sizeof k);
    k.pass = c->pass, k.n = n, k.d = *d, k.dt = c->dt;
    k.bias = c->pass == 0 ? c->bias != NULL : c->pass == 2 ? c->db != NULL : 0;
    k.d.n = 0; /* the part's count is k.n */
    /* one OpenMP thread, set before the primitive is made: oneDNN fixes a
     * primitive's thread count when it creates it, and a plan made at 2
     * would keep running on 2 OpenMP threads beside the BLAS threads */
    if (omp_get_max_threads() != 1) omp_set_num_threads(1);
    dnnl_stream_t s;
    dnnl_status_t st;
    conv_plan *p = plan_get(&k, &s, &st);
    if (!p) return st;
    size_t es = phx_dtype_size(c->dt), img = (size_t)(d->c * d->h * d->w) * es,
           oimg = (size_t)(d->k * d->oh * d->ow) * es;
    void *data[3];
    if (c->pass == 0) {
        data[0] = (void *)(c->x + n0 * img), data[1] = (void *)c->w, data[2] = c->y + n0 * oimg;
        if (p->bias) dnnl_memory_set_data_handle(p->bias, (void *)c->bias);
    } else if (c->pass == 1) {
        data[0] = (void *)(c->dy + n0 * oimg), data[1] = (void *)c->w, data[2] = c->dx + n0 * img;
    } else {
        /* this part's dW (plain layout) and dB, summed by the caller */
        float *pw = c->partial + (size_t)(n0 / c->step) * (c->nw + (size_t)d->k);
        data[0] = (void *)(c->x + n0 * img), data[1] = (void *)(c->dy + n0 * oimg), data[2] = pw;
        if (p->bias) dnnl_memory_set_data_handle(p->bias, pw + c->nw);
    }
    for (int i = 0; i < 3; i++) {
        if (!p->u[i]) {
            dnnl_memory_set_data_handle(p->m[i], data[i]);
            continue;
        }
        void *buf = px_cpu_scratch(blocked_slot[c->pass][i], p->bytes[i]);
        if (!buf) return dnnl_out_of_memory;
        dnnl_memory_set_data_handle(p->u[i], data[i]);
        dnnl_memory_set_data_handle(p->m[i], buf);
    }
    if (p->sp) {
        void *buf = px_cpu_scratch(4, p->sp_bytes);
        if (!buf) return dnnl_out_of_memory;
        dnnl_memory_set_data_handle(p->sp, buf);
    }
    for (int i = 0; i < 2 && st == dnnl_success; i++)
        if (p->re[i]) {
            dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, p->u[i]}, {DNNL_ARG_TO, p->m[i]}};
            st = dnnl_primitive_execute(p->re[i], s, 2, a);
        }
    if (st == dnnl_success) st = dnnl_primitive_execute(p->prim, s, p->nargs, p->args);
    if (st == dnnl_success && p->re[2]) {
        dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, p->m[2]}, {DNNL_ARG_TO, p->u[2]}};
        st = dnnl_primitive_execute(p->re[2], s, 2, a);
    }
    if (st == dnnl_success) st = dnnl_stream_wait(s);
    return st;
}

/* parts lo .. hi - 1 (px_cpu_parallel_for cuts the part list; part i
 * always covers images i step .. (i + 1) step - 1) */
static void parts_run(void *arg, int64_t lo, int64_t hi)
{
    conv_call *c = arg;
    for (int64_t i = lo; i < hi; i++) {
        int64_t n0 = i * c->step, n = c->d->n - n0 < c->step ? c->d->n - n0 : c->step;
        c->st[i] = run_part(c, n0, n);
    }
}

phx_status px_cpu_conv2d_dnnl(int pass, const phx_conv2d_desc *d, const float *x, const float *w, const float *bias,
                              const float *dy, float *y, float *dx, float *dw, float *db)
{
    return px_cpu_conv2d_dnnl_dt(pass, d, PHX_F32, x, w, bias, dy, y, dx, dw, db);
}

phx_status px_cpu_conv2d_dnnl_dt(int pass, const phx_conv2d_desc *d, phx_dtype dt, const void *x, const void *w,
                                 const float *bias, const void *dy, void *y, void *dx, float *dw, float *db)
{
    pthread_once(&once, init);
    if (!engine || (dt != PHX_F32 && dt != PHX_BF16)) return PHX_EUNSUPPORTED;
    for (int i = 0; i < 2; i++) {
        int64_t k = i ? d->kw : d->kh, in = i ? d->w : d->h, o = i ? d->ow : d->oh, s = i ? d->stride_w : d->stride_h;
        int64_t dl = i ? d->dil_w : d->dil_h, p = i ? d->pad_w : d->pad_h;
        if ((o - 1) * s + (k - 1) * dl + 1 - in - p < 0) return PHX_EUNSUPPORTED; /* negative right padding */
    }
    conv_call c = {pass, d, x, w, dy, bias, y, dx, dw, db, dt, 0, 0, NULL, 0, {0}};
    int threads = px_threads_budget();
    if (threads > 64) threads = 64;
    int64_t parts = d->n < threads ? d->n : threads;
    if (parts < 1) parts = 1;
    c.step = (d->n + parts - 1) / parts;
    c.parts = (d->n + c.step - 1) / c.step;
    c.nw = (size_t)(d->k * (d->c / d->groups) * d->kh * d->kw);
    if (pass == 2 && !(c.partial = px_cpu_scratch(3, (size_t)c.parts * (c.nw + (size_t)d->k) * sizeof(float))))
        return PHX_ENOMEM;
    px_cpu_parallel_for(c.parts, 1, parts_run, &c);
    for (int64_t i = 0; i < c.parts; i++) {
        if (c.st[i] == dnnl_unimplemented) return PHX_EUNSUPPORTED; /* nothing written: the caller uses im2col */
        if (c.st[i] != dnnl_success)
            return phx_error(PHX_EINTERNAL, "conv2d: oneDNN convolution failed (dnnl_status_t %d)", (int)c.st[i]);
    }
    /* the parts' weight gradients, added in part order (the same sums
     * whatever the thread timing) */
    for (int64_t i = 0; pass == 2 && i < c.parts; i++) {
        const float *pw = c.partial + (size_t)i * (c.nw + (size_t)d->k);
        for (size_t j = 0; j < c.nw; j++) dw[j] += pw[j];
        for (int64_t j = 0; db && j < d->k; j++) db[j] += pw[c.nw + j];
    }
    return PHX_OK;
}
#else
phx_status px_cpu_conv2d_dnnl(int pass, const phx_conv2d_desc *d, const float *x, const float *w, const float *bias,
                              const float *dy, float *y, float *dx, float *dw, float *db)
{
    (void)pass, (void)d, (void)x, (void)w, (void)bias, (void)dy, (void)y, (void)dx, (void)dw, (void)db;
    return PHX_EUNSUPPORTED;
}

phx_status px_cpu_conv2d_dnnl_dt(int pass, const phx_conv2d_desc *d, phx_dtype dt, const void *x, const void *w,
                                 const float *bias, const void *dy, void *y, void *dx, float *dw, float *db)
{
    (void)pass, (void)d, (void)dt, (void)x, (void)w, (void)bias, (void)dy, (void)y, (void)dx, (void)dw, (void)db;
    return PHX_EUNSUPPORTED;
}
#endif
