/* f32 convolutions through oneDNN (doc/cnn.md says when conv.c takes
 * this path): oneDNN picks its blocked layouts (format "any"), the NCHW
 * tensors are reordered in and out, as PyTorch's mkldnn path does. Like
 * gemm-dnnl.c, oneDNN runs on one OpenMP thread per call and the images
 * are split over the BLAS threads' pool; the weight gradient of each part
 * goes to that thread's scratch and is added into dw after. */
#include "config.h"
#include "kernels/cpu/cpu.h"

#ifdef HAVE_DNNL
#include <omp.h>
#include <pthread.h>
#include <string.h>
#include <oneapi/dnnl/dnnl.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static dnnl_engine_t engine;
static pthread_key_t stream_key;

static void stream_destroy(void *s)
{
    dnnl_stream_destroy(s);
}

static void init(void)
{
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) engine = NULL;
    pthread_key_create(&stream_key, stream_destroy);
}

static dnnl_stream_t thread_stream(void)
{
    dnnl_stream_t s = pthread_getspecific(stream_key);
    if (!s && dnnl_stream_create(&s, engine, dnnl_stream_default_flags) == dnnl_success)
        pthread_setspecific(stream_key, s);
    return s;
}

/* One part: images [n0, n0 + n) of the call. */
typedef struct conv_call {
    int pass; /* PX_CONV_FWD, _BWD_DATA, _BWD_WEIGHT */
    const phx_conv2d_desc *d;
    const float *x, *w, *bias, *dy;
    float *y, *dx, *dw, *db;
    int64_t step, parts;
    float *partial; /* backward weights: part i's dW and dB at i (nw + k) */
    size_t nw;
    dnnl_status_t st[64];
} conv_call;

/* The user's plain layouts of n images. */
static void plain_mds(const phx_conv2d_desc *d, int64_t n, dnnl_memory_desc_t *src, dnnl_memory_desc_t *wei,
                      dnnl_memory_desc_t *bia, dnnl_memory_desc_t *dst, dnnl_format_tag_t tag)
{
    dnnl_dims_t s = {n, d->c, d->h, d->w}, o = {n, d->k, d->oh, d->ow}, b = {d->k};
    dnnl_memory_desc_init_by_tag(src, 4, s, dnnl_f32, tag);
    dnnl_memory_desc_init_by_tag(dst, 4, o, dnnl_f32, tag);
    dnnl_memory_desc_init_by_tag(bia, 1, b, dnnl_f32, dnnl_x);
    if (d->groups == 1) {
        dnnl_dims_t wd = {d->k, d->c, d->kh, d->kw};
        dnnl_memory_desc_init_by_tag(wei, 4, wd, dnnl_f32, tag == dnnl_format_tag_any ? tag : dnnl_oihw);
    } else {
        dnnl_dims_t wd = {d->groups, d->k / d->groups, d->c / d->groups, d->kh, d->kw};
        dnnl_memory_desc_init_by_tag(wei, 5, wd, dnnl_f32, tag == dnnl_format_tag_any ? tag : dnnl_goihw);
    }
}

/* A memory of the primitive's layout q for the user's data at p (md u):
 * p itself when the layouts agree, else scratch slot `slot`, filled by a
 * reorder when `in`. *out is the memory the primitive uses, *user the
 * user's (NULL when the same). */
static dnnl_status_t bind(const dnnl_memory_desc_t *u, const dnnl_memory_desc_t *q, void *p, int slot, int in,
                          dnnl_stream_t s, dnnl_memory_t *out, dnnl_memory_t *user)
{
    *out = *user = NULL;
    if (dnnl_memory_desc_equal(u, q)) return dnnl_memory_create(out, u, engine, p);
    void *buf = px_cpu_scratch(slot, dnnl_memory_desc_get_size(q));
    if (!buf) return dnnl_out_of_memory;
    dnnl_status_t st = dnnl_memory_create(user, u, engine, p);
    if (st == dnnl_success) st = dnnl_memory_create(out, q, engine, buf);
    if (st == dnnl_success && in) {
        dnnl_primitive_desc_t rpd;
        dnnl_primitive_t r;
        if ((st = dnnl_reorder_primitive_desc_create(&rpd, u, engine, q, engine, NULL)) != dnnl_success) return st;
        st = dnnl_primitive_create(&r, rpd);
        dnnl_primitive_desc_destroy(rpd);
        if (st != dnnl_success) return st;
        dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, *user}, {DNNL_ARG_TO, *out}};
        st = dnnl_primitive_execute(r, s, 2, a);
        dnnl_primitive_destroy(r);
    }
    return st;
}

/* Copies a primitive's output memory back into the user's layout. */
static dnnl_status_t unbind(dnnl_memory_t out, dnnl_memory_t user, dnnl_stream_t s)
{
    if (!user) return dnnl_success;
    const dnnl_memory_desc_t *q, *u;
    dnnl_memory_get_memory_desc(out, &q);
    dnnl_memory_get_memory_desc(user, &u);
    dnnl_primitive_desc_t rpd;
    dnnl_primitive_t r;
    dnnl_status_t st = dnnl_reorder_primitive_desc_create(&rpd, q, engine, u, engine, NULL);
    if (st != dnnl_success) return st;
    st = dnnl_primitive_create(&r, rpd);
    dnnl_primitive_desc_destroy(rpd);
    if (st != dnnl_success) return st;
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, out}, {DNNL_ARG_TO, user}};
    st = dnnl_primitive_execute(r, s, 2, a);
    dnnl_primitive_destroy(r);
    return st;
}

static const dnnl_memory_desc_t *query(dnnl_primitive_desc_t pd, dnnl_query_t what)
{
    return dnnl_primitive_desc_query_md(pd, what, 0);
}

/* The convolution of n images at image n0 on the calling thread. */
static dnnl_status_t run_part(conv_call *c, int64_t n0, int64_t n)
{
    const phx_conv2d_desc *d = c->d;
    dnnl_memory_desc_t us, uw, ub, ud, as, aw, ab, ad;
    plain_mds(d, n, &us, &uw, &ub, &ud, dnnl_nchw);
    plain_mds(d, n, &as, &aw, &ab, &ad, dnnl_format_tag_any);
    dnnl_dims_t strides = {d->stride_h, d->stride_w}, dil = {d->dil_h - 1, d->dil_w - 1};
    dnnl_dims_t pl = {d->pad_h, d->pad_w};
    dnnl_dims_t pr = {(d->oh - 1) * d->stride_h + (d->kh - 1) * d->dil_h + 1 - d->h - d->pad_h,
                      (d->ow - 1) * d->stride_w + (d->kw - 1) * d->dil_w + 1 - d->w - d->pad_w};
    dnnl_convolution_desc_t fd, bd;
    dnnl_primitive_desc_t fpd = NULL, pd = NULL;
    /* the primitive's scratchpad comes from scratch slot 4, not from a
     * malloc (and fresh pages) at every call */
    dnnl_primitive_attr_t attr = NULL;
    if (dnnl_primitive_attr_create(&attr) != dnnl_success ||
        dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) != dnnl_success) {
        dnnl_primitive_attr_destroy(attr);
        return dnnl_out_of_memory;
    }
    dnnl_status_t st = dnnl_dilated_convolution_forward_desc_init(
        &fd, dnnl_forward_training, dnnl_convolution_direct, &as, &aw, c->bias || c->db ? &ab : NULL, &ad, strides,
        dil, pl, pr);
    if (st == dnnl_success) st = dnnl_primitive_desc_create(&fpd, &fd, NULL, engine, NULL);
    if (st != dnnl_success) return st;
    size_t img = (size_t)(d->c * d->h * d->w), oimg = (size_t)(d->k * d->oh * d->ow);
    if (c->pass == 0) {
        st = dnnl_primitive_desc_create(&pd, &fd, attr, engine, NULL);
    } else if (c->pass == 1) {
        st = dnnl_dilated_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &as, &aw, &ad, strides,
                                                              dil, pl, pr);
        if (st == dnnl_success) st = dnnl_primitive_desc_create(&pd, &bd, attr, engine, fpd);
    } else {
        st = dnnl_dilated_convolution_backward_weights_desc_init(&bd, dnnl_convolution_direct, &as, &aw,
                                                                 c->db ? &ab : NULL, &ad, strides, dil, pl, pr);
        if (st == dnnl_success) st = dnnl_primitive_desc_create(&pd, &bd, attr, engine, fpd);
    }
    dnnl_primitive_desc_destroy(fpd);
    dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success) return st;
    dnnl_stream_t s = thread_stream();
    dnnl_primitive_t prim = NULL;
    dnnl_memory_t m[4] = {0}, u[4] = {0}, sp = NULL;
    if (!s) st = dnnl_runtime_error;
    if (st == dnnl_success) st = dnnl_primitive_create(&prim, pd);
    if (omp_get_max_threads() != 1) omp_set_num_threads(1);
    dnnl_exec_arg_t a[6];
    int na = 0;
    const dnnl_memory_desc_t *spd = query(pd, dnnl_query_scratchpad_md);
    size_t sps = spd ? dnnl_memory_desc_get_size(spd) : 0;
    if (st == dnnl_success && sps) {
        void *buf = px_cpu_scratch(4, sps);
        st = buf ? dnnl_memory_create(&sp, spd, engine, buf) : dnnl_out_of_memory;
        if (st == dnnl_success) a[na++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, sp};
    }
    if (st == dnnl_success && c->pass == 0) {
        if ((st = bind(&us, query(pd, dnnl_query_src_md), (void *)(c->x + n0 * img), 0, 1, s, &m[0], &u[0])) ||
            (st = bind(&uw, query(pd, dnnl_query_weights_md), (void *)c->w, 1, 1, s, &m[1], &u[1])) ||
            (st = bind(&ud, query(pd, dnnl_query_dst_md), c->y + n0 * oimg, 2, 0, s, &m[2], &u[2])))
            goto out;
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, m[0]};
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, m[1]};
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_DST, m[2]};
        if (c->bias) {
            if ((st = dnnl_memory_create(&m[3], &ub, engine, (void *)c->bias))) goto out;
            a[na++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, m[3]};
        }
        if ((st = dnnl_primitive_execute(prim, s, na, a)) == dnnl_success) st = unbind(m[2], u[2], s);
    } else if (st == dnnl_success && c->pass == 1) {
        if ((st = bind(&ud, query(pd, dnnl_query_diff_dst_md), (void *)(c->dy + n0 * oimg), 0, 1, s, &m[0], &u[0])) ||
            (st = bind(&uw, query(pd, dnnl_query_weights_md), (void *)c->w, 1, 1, s, &m[1], &u[1])) ||
            (st = bind(&us, query(pd, dnnl_query_diff_src_md), c->dx + n0 * img, 2, 0, s, &m[2], &u[2])))
            goto out;
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, m[0]};
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, m[1]};
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, m[2]};
        if ((st = dnnl_primitive_execute(prim, s, na, a)) == dnnl_success) st = unbind(m[2], u[2], s);
    } else if (st == dnnl_success) {
        /* this part's dW (plain layout) and dB, summed by the caller */
        float *pw = c->partial + (size_t)(n0 / c->step) * (c->nw + (size_t)d->k), *pb = pw + c->nw;
        if ((st = bind(&us, query(pd, dnnl_query_src_md), (void *)(c->x + n0 * img), 0, 1, s, &m[0], &u[0])) ||
            (st = bind(&ud, query(pd, dnnl_query_diff_dst_md), (void *)(c->dy + n0 * oimg), 1, 1, s, &m[1], &u[1])) ||
            (st = bind(&uw, query(pd, dnnl_query_diff_weights_md), pw, 2, 0, s, &m[2], &u[2])))
            goto out;
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, m[0]};
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, m[1]};
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_WEIGHTS, m[2]};
        if (c->db) {
            if ((st = dnnl_memory_create(&m[3], &ub, engine, pb))) goto out;
            a[na++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_BIAS, m[3]};
        }
        if ((st = dnnl_primitive_execute(prim, s, na, a)) == dnnl_success) st = unbind(m[2], u[2], s);
    }
    if (st == dnnl_success) st = dnnl_stream_wait(s);
out:
    for (int i = 0; i < 4; i++) dnnl_memory_destroy(m[i]), dnnl_memory_destroy(u[i]);
    dnnl_memory_destroy(sp);
    dnnl_primitive_destroy(prim);
    dnnl_primitive_desc_destroy(pd);
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
    pthread_once(&once, init);
    if (!engine) return PHX_EUNSUPPORTED;
    for (int i = 0; i < 2; i++) {
        int64_t k = i ? d->kw : d->kh, in = i ? d->w : d->h, o = i ? d->ow : d->oh, s = i ? d->stride_w : d->stride_h;
        int64_t dl = i ? d->dil_w : d->dil_h, p = i ? d->pad_w : d->pad_h;
        if ((o - 1) * s + (k - 1) * dl + 1 - in - p < 0) return PHX_EUNSUPPORTED; /* negative right padding */
    }
    conv_call c = {pass, d, x, w, bias, dy, y, dx, dw, db, 0, 0, NULL, 0, {0}};
    int threads = px_cpu_blas_get_threads();
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
#endif
