/* GEMM through oneDNN's matmul: bf16 operands straight from the tensors
 * (no f32 copies) into oneDNN's brgemm kernels, which multiply with
 * AVX512-BF16 (vdpbf16ps) or AMX and accumulate in f32. alpha is an
 * output scale and beta a sum post-op, so C = alpha op(A) op(B) + beta C
 * is one pass; beta = 0 has no post-op and never reads C.
 *
 * oneDNN's primitive cache keeps a primitive per shape, so creating one
 * per call costs microseconds once warm. The engine is made once per
 * process and never changes; each thread has its own stream (a stream
 * is not shared between threads). oneDNN runs on OpenMP: before each
 * call the calling thread's OpenMP thread count is set to the BLAS
 * thread count, so phx_set_num_threads and DataParallel's one thread
 * per replica hold for both libraries. */
#include "config.h"
#include "kernels/cpu/cpu.h"

#ifdef HAVE_DNNL
#include <omp.h>
#include <pthread.h>
#include <oneapi/dnnl/dnnl.h>

static pthread_once_t dnnl_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t dnnl_engine;
static int dnnl_bf16_isa;
static pthread_key_t dnnl_stream_key;

static void stream_destroy(void *s)
{
    dnnl_stream_destroy(s);
}

static void dnnl_init(void)
{
    if (dnnl_engine_create(&dnnl_engine, dnnl_cpu, 0) != dnnl_success) dnnl_engine = NULL;
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(), bf16 = (unsigned)dnnl_cpu_isa_avx512_core_bf16;
    dnnl_bf16_isa = (isa & bf16) == bf16;
    pthread_key_create(&dnnl_stream_key, stream_destroy);
}

int px_cpu_dnnl_bf16_native(void)
{
    pthread_once(&dnnl_once, dnnl_init);
    return dnnl_engine && dnnl_bf16_isa;
}

static dnnl_data_type_t dnnl_type(phx_dtype dt)
{
    return dt == PHX_BF16 ? dnnl_bf16 : dt == PHX_F16 ? dnnl_f16 : dnnl_f32;
}

/* rows x cols, row-major with leading dim ld, or its transpose in place */
static dnnl_status_t matrix_desc(dnnl_memory_desc_t *md, int trans, int64_t rows, int64_t cols, int64_t ld,
                                 phx_dtype dt)
{
    dnnl_dims_t dims = {rows, cols}, strides = {trans ? 1 : ld, trans ? ld : 1};
    return dnnl_memory_desc_init_by_strides(md, 2, dims, dnnl_type(dt), strides);
}

static phx_status dnnl_fail(const char *what, dnnl_status_t s)
{
    return phx_error(PHX_EINTERNAL, "gemm: oneDNN %s failed (dnnl_status_t %d)", what, (int)s);
}

phx_status px_cpu_gemm_dnnl(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void *a,
                            int64_t lda, const void *b, int64_t ldb, phx_dtype adt, float beta, void *c, int64_t ldc,
                            phx_dtype cdt)
{
    pthread_once(&dnnl_once, dnnl_init);
    if (!dnnl_engine) return PHX_EUNSUPPORTED;
    dnnl_memory_desc_t ad, bd, cd;
    dnnl_matmul_desc_t desc;
    if (matrix_desc(&ad, trans_a, m, k, lda, adt) || matrix_desc(&bd, trans_b, k, n, ldb, adt) ||
        matrix_desc(&cd, 0, m, n, ldc, cdt) || dnnl_matmul_desc_init(&desc, &ad, &bd, NULL, &cd))
        return PHX_EUNSUPPORTED;

    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t ops = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t s = dnnl_primitive_attr_create(&attr);
    if (s == dnnl_success && alpha != 1.0f) s = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha);
    if (s == dnnl_success && beta != 0.0f) {
        s = dnnl_post_ops_create(&ops);
        if (s == dnnl_success) s = dnnl_post_ops_append_sum(ops, beta);
        if (s == dnnl_success) s = dnnl_primitive_attr_set_post_ops(attr, ops);
        dnnl_post_ops_destroy(ops);
    }
    /* no implementation for these dtypes or strides: the caller widens */
    if (s == dnnl_success && dnnl_primitive_desc_create(&pd, &desc, attr, dnnl_engine, NULL) != dnnl_success) {
        dnnl_primitive_attr_destroy(attr);
        return PHX_EUNSUPPORTED;
    }
    dnnl_primitive_attr_destroy(attr);
    if (s != dnnl_success) return dnnl_fail("attributes", s);

    dnnl_primitive_t prim = NULL;
    dnnl_memory_t am = NULL, bm = NULL, cm = NULL;
    s = dnnl_primitive_create(&prim, pd);
    dnnl_primitive_desc_destroy(pd);
    if (s != dnnl_success) return dnnl_fail("primitive", s);
    dnnl_stream_t stream = pthread_getspecific(dnnl_stream_key);
    if (!stream && (s = dnnl_stream_create(&stream, dnnl_engine, dnnl_stream_default_flags)) == dnnl_success)
        pthread_setspecific(dnnl_stream_key, stream);
    if (s == dnnl_success) s = dnnl_memory_create(&am, &ad, dnnl_engine, (void *)a);
    if (s == dnnl_success) s = dnnl_memory_create(&bm, &bd, dnnl_engine, (void *)b);
    if (s == dnnl_success) s = dnnl_memory_create(&cm, &cd, dnnl_engine, c);
    if (s == dnnl_success) {
        int threads = px_cpu_blas_get_threads();
        if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
        s = dnnl_primitive_execute(prim, stream, 3, args);
        if (s == dnnl_success) s = dnnl_stream_wait(stream);
    }
    dnnl_memory_destroy(am);
    dnnl_memory_destroy(bm);
    dnnl_memory_destroy(cm);
    dnnl_primitive_destroy(prim);
    return s == dnnl_success ? PHX_OK : dnnl_fail("matmul", s);
}
#else
int px_cpu_dnnl_bf16_native(void)
{
    return 0;
}

phx_status px_cpu_gemm_dnnl(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void *a,
                            int64_t lda, const void *b, int64_t ldb, phx_dtype adt, float beta, void *c, int64_t ldc,
                            phx_dtype cdt)
{
    (void)trans_a, (void)trans_b, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb;
    (void)adt, (void)beta, (void)c, (void)ldc, (void)cdt;
    return PHX_EUNSUPPORTED;
}
#endif
