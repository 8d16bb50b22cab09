/* GEMM through oneDNN's matmul: bf16 operands straight from the tensors
 * (no f32 copies) into oneDNN's brgemm kernels, which multiply with
 * AVX512-BF16 (vdpbf16ps) or AMX and accumulate in f32. alpha is an
 * output scale and beta a sum post-op, so C = alpha op(A) op(B) + beta C
 * is one pass; beta = 0 has no post-op and never reads C.
 *
 * Threads: oneDNN runs on OpenMP, whose idle workers spin while the
 * BLAS's threads run the f32 work of the same step (and the other way
 * round): on a machine with as many threads as cores each library then
 * loses half its cores. So oneDNN always runs on one OpenMP thread, and
 * with a thread budget of n (src/base/threads.h) C is cut into n blocks
 * of rows or of columns (whichever moves fewer bytes: split_by_rows) run
 * on the calling thread's pool of n - 1 workers that sleep when idle; a
 * block's strided operands are copied dense first (dense()). DataParallel's replicas,
 * with a budget of one thread each, call oneDNN directly.
 *
 * oneDNN's primitive cache keeps a primitive per shape, so creating one
 * per call costs microseconds once warm. The engine is made once per
 * process and never changes; each thread has its own stream. */
#include "config.h"
#include "kernels/cpu/cpu.h"

#ifdef HAVE_DNNL
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <oneapi/dnnl/dnnl.h>
#include "src/base/threads.h"

#define PX_DNNL_MAX_BLOCKS 256

static pthread_once_t dnnl_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t dnnl_engine;
static int dnnl_bf16_isa, dnnl_amx_isa;
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
    dnnl_amx_isa = (isa & (unsigned)dnnl_cpu_isa_avx512_core_amx) == (unsigned)dnnl_cpu_isa_avx512_core_amx;
    pthread_key_create(&dnnl_stream_key, stream_destroy);
}

int px_cpu_dnnl_bf16_native(void)
{
    pthread_once(&dnnl_once, dnnl_init);
    return dnnl_engine && dnnl_bf16_isa;
}

int px_cpu_dnnl_amx_bf16(void)
{
    pthread_once(&dnnl_once, dnnl_init);
    return dnnl_engine && dnnl_amx_isa;
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

typedef struct {
    int trans_a, trans_b;
    int64_t m, n, k, lda, ldb, ldc;
    float alpha, beta;
    const char *a, *b;
    char *c;
    phx_dtype adt, cdt;
    /* where not NULL: C is f32 scratch standing for out (dtype odt,
     * leading dim ldo), and each block is rounded into out by the thread
     * that computed it, while it is in that core's cache (widened from
     * out first where beta != 0) */
    char *out;
    int64_t ldo;
    phx_dtype odt;
} gemm_args;

typedef struct {
    dnnl_primitive_desc_t pd;
    dnnl_memory_desc_t ad, bd, cd;
} matmul_pd;

/* The primitive descriptor of an m x n block; dnnl_unimplemented when
 * oneDNN has no kernel for these dtypes and strides. */
static dnnl_status_t block_pd(const gemm_args *g, int64_t m, int64_t n, int64_t lda, int64_t ldb, int64_t ldc,
                              matmul_pd *p)
{
    dnnl_matmul_desc_t desc;
    dnnl_status_t s;
    if ((s = matrix_desc(&p->ad, g->trans_a, m, g->k, lda, g->adt)) ||
        (s = matrix_desc(&p->bd, g->trans_b, g->k, n, ldb, g->adt)) ||
        (s = matrix_desc(&p->cd, 0, m, n, ldc, g->cdt)) ||
        (s = dnnl_matmul_desc_init(&desc, &p->ad, &p->bd, NULL, &p->cd)))
        return s;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t ops = NULL;
    s = dnnl_primitive_attr_create(&attr);
    /* the scratchpad (packed operand blocks) comes from thread scratch,
     * not from an allocation at every call, as for the convolutions */
    if (s == dnnl_success) s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (s == dnnl_success && g->alpha != 1.0f) s = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &g->alpha);
    if (s == dnnl_success && g->beta != 0.0f && (s = dnnl_post_ops_create(&ops)) == dnnl_success) {
        s = dnnl_post_ops_append_sum(ops, g->beta);
        if (s == dnnl_success) s = dnnl_primitive_attr_set_post_ops(attr, ops);
        dnnl_post_ops_destroy(ops);
    }
    if (s == dnnl_success) s = dnnl_primitive_desc_create(&p->pd, &desc, attr, dnnl_engine, NULL);
    dnnl_primitive_attr_destroy(attr);
    return s;
}

/* rows x cols at p with leading dim *ld, or a dense copy of it in
 * scratch slot (*ld then cols). oneDNN 2.6's AMX and AVX512-BF16 matmul
 * (brgemm) takes dense operands only: given a strided one (a column block
 * of C, a row block of a transposed A) it fell back to its gemm:jit, which
 * took 0.35 ms for half of the MLP's 256x784x512 bf16 product where brgemm
 * took 0.29 ms for all of it (ONEDNN_VERBOSE). */
static char *dense(const char *p, int64_t rows, int64_t cols, int64_t *ld, phx_dtype dt, int slot, int fill)
{
    int64_t from = *ld;
    *ld = cols;
    if (from == cols || rows == 1) return (char *)p;
    char *d = px_cpu_scratch(slot, (size_t)(rows * cols) * phx_dtype_size(dt));
    /* a copy of one dtype fails only on a NULL pointer: none here */
    if (d && fill) (void)px_cpu_cast_rows(d, dt, cols, p, dt, from, rows, cols);
    return d;
}

/* C rows i0 .. i0+m-1, columns j0 .. j0+n-1 on the calling thread, each
 * operand made dense first where it is not (slots 10-12: the split's
 * A' and B' in slots 0 and 1 are being read by the other blocks) */
static dnnl_status_t block_run(const gemm_args *g, int64_t i0, int64_t m, int64_t j0, int64_t n)
{
    size_t ea = phx_dtype_size(g->adt), ec = phx_dtype_size(g->cdt);
    int64_t lda = g->lda, ldb = g->ldb, ldc = g->ldc;
    const char *a = dense(g->a + (size_t)(g->trans_a ? i0 : i0 * lda) * ea, g->trans_a ? g->k : m,
                          g->trans_a ? m : g->k, &lda, g->adt, 10, 1);
    const char *b = dense(g->b + (size_t)(g->trans_b ? j0 * ldb : j0) * ea, g->trans_b ? n : g->k,
                          g->trans_b ? g->k : n, &ldb, g->adt, 11, 1);
    char *c0 = g->c + (size_t)(i0 * ldc + j0) * ec;
    char *c = dense(c0, m, n, &ldc, g->cdt, 12, g->beta != 0.0f);
    if (!a || !b || !c) return dnnl_out_of_memory;
    matmul_pd p;
    /* one OpenMP thread before the primitive is made (oneDNN fixes its
     * thread count then; conv-dnnl.c) */
    if (omp_get_max_threads() != 1) omp_set_num_threads(1);
    dnnl_status_t s = block_pd(g, m, n, lda, ldb, ldc, &p);
    if (s != dnnl_success) return s;
    dnnl_primitive_t prim = NULL;
    dnnl_memory_t am = NULL, bm = NULL, cm = NULL, sm = NULL;
    s = dnnl_primitive_create(&prim, p.pd);
    const dnnl_memory_desc_t *spd = dnnl_primitive_desc_query_md(p.pd, dnnl_query_scratchpad_md, 0);
    size_t sp_bytes = spd ? dnnl_memory_desc_get_size(spd) : 0;
    if (s == dnnl_success && sp_bytes) {
        void *buf = px_cpu_scratch(4, sp_bytes); /* slot 4: the convolutions' too; the calls do not nest */
        s = buf ? dnnl_memory_create(&sm, spd, dnnl_engine, buf) : dnnl_out_of_memory;
    }
    dnnl_primitive_desc_destroy(p.pd);
    dnnl_stream_t stream = pthread_getspecific(dnnl_stream_key);
    if (s == dnnl_success && !stream &&
        (s = dnnl_stream_create(&stream, dnnl_engine, dnnl_stream_default_flags)) == dnnl_success)
        pthread_setspecific(dnnl_stream_key, stream);
    if (s == dnnl_success) s = dnnl_memory_create(&am, &p.ad, dnnl_engine, (void *)a);
    if (s == dnnl_success) s = dnnl_memory_create(&bm, &p.bd, dnnl_engine, (void *)b);
    if (s == dnnl_success) s = dnnl_memory_create(&cm, &p.cd, dnnl_engine, c);
    if (s == dnnl_success) {
        dnnl_exec_arg_t args[4] = {
            {DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}, {DNNL_ARG_SCRATCHPAD, sm}};
        s = dnnl_primitive_execute(prim, stream, sm ? 4 : 3, args);
        if (s == dnnl_success) s = dnnl_stream_wait(stream);
    }
    dnnl_memory_destroy(am);
    dnnl_memory_destroy(bm);
    dnnl_memory_destroy(cm);
    dnnl_memory_destroy(sm);
    dnnl_primitive_destroy(prim);
    if (s == dnnl_success && c != c0) (void)px_cpu_cast_rows(c0, g->cdt, g->ldc, c, g->cdt, n, m, n);
    return s;
}

/* block_run, with the block's rounding into g->out (and widening first
 * where C is read) */
static dnnl_status_t block_exec(const gemm_args *g, int64_t i0, int64_t m, int64_t j0, int64_t n)
{
    if (!g->out) return block_run(g, i0, m, j0, n);
    size_t eo = phx_dtype_size(g->odt);
    float *c = (float *)g->c + i0 * g->ldc + j0;
    char *o = g->out + (size_t)(i0 * g->ldo + j0) * eo;
    /* f16 <-> f32 casts fail only on a dtype they lack, which odt is not */
    if (g->beta != 0.0f && px_cpu_half_cast_rows(c, PHX_F32, g->ldc, o, g->odt, g->ldo, m, n) != PHX_OK)
        return dnnl_runtime_error;
    dnnl_status_t s = block_run(g, i0, m, j0, n);
    if (s == dnnl_success && px_cpu_half_cast_rows(o, g->odt, g->ldo, c, PHX_F32, g->ldc, m, n) != PHX_OK)
        return dnnl_runtime_error;
    return s;
}

typedef struct {
    const gemm_args *g;
    int by_rows;
    int64_t step;
    dnnl_status_t st[PX_DNNL_MAX_BLOCKS];
} block_job;

static void block_task(void *arg, size_t i)
{
    block_job *j = arg;
    const gemm_args *g = j->g;
    int64_t total = j->by_rows ? g->m : g->n, lo = (int64_t)i * j->step;
    int64_t len = total - lo < j->step ? total - lo : j->step;
    j->st[i] = j->by_rows ? block_exec(g, lo, len, 0, g->n) : block_exec(g, 0, g->m, lo, len);
}

/* Bytes one block of a split of C into `blocks` moves besides the
 * product: its operands' dense copies (dense(); C's both ways where beta
 * reads it) and brgemm's own packing of B (all of B in each block of rows,
 * its part in a block of columns) and of a transposed A. */
static double block_bytes(const gemm_args *g, int by_rows, int64_t blocks)
{
    double ea = (double)phx_dtype_size(g->adt), ec = (double)phx_dtype_size(g->cdt);
    double m = (double)g->m, n = (double)g->n, k = (double)g->k;
    double mb = by_rows ? m / (double)blocks : m, nb = by_rows ? n : n / (double)blocks;
    int a_dense = g->trans_a ? g->lda == (int64_t)mb : g->lda == g->k;
    int b_dense = g->trans_b ? g->ldb == g->k : g->ldb == (int64_t)nb;
    int c_dense = g->ldc == (int64_t)nb;
    double bytes = k * nb * ea; /* B packed */
    if (!a_dense || g->trans_a) bytes += mb * k * ea; /* copied, or a transposed A packed by brgemm */
    if (!b_dense) bytes += k * nb * ea;
    if (!c_dense) bytes += mb * nb * ec * (g->beta != 0.0f ? 2 : 1);
    return bytes;
}

/* Blocks of rows or of columns of C, whichever moves fewer bytes besides
 * the product (block_bytes), with at least 32 rows or columns in each.
 * The bf16 MLP's products at 2 threads, 256x784x512 and its gradients:
 * rows for dX and dW (a transposed A copied, not C and B), columns for
 * the forward one (B^T's columns are dense rows). */
static int split_by_rows(const gemm_args *g, int threads)
{
    int64_t rb = g->m / 32 < threads ? g->m / 32 : threads, cb = g->n / 32 < threads ? g->n / 32 : threads;
    if (rb < 2 || cb < 2) return rb >= cb;
    return block_bytes(g, 1, rb) <= block_bytes(g, 0, cb);
}

static phx_status matmul_run(gemm_args g)
{
    int64_t m = g.m, n = g.n;

    /* blocks of at least 32 rows (or columns), at most one per thread of the budget */
    int threads = px_threads_budget();
    if (threads > PX_DNNL_MAX_BLOCKS) threads = PX_DNNL_MAX_BLOCKS;
    int by_rows = split_by_rows(&g, threads);
    int64_t span = by_rows ? m : n, blocks = span / 32;
    if (blocks > threads) blocks = threads;
    px_pool *pool = blocks > 1 ? px_threads_pool() : NULL;
    dnnl_status_t s;
    if (!pool) {
        /* no kernel for these dtypes or strides: the caller widens */
        s = block_exec(&g, 0, m, 0, n);
        if (s == dnnl_unimplemented) return PHX_EUNSUPPORTED;
    } else {
        /* the same check before any block writes C */
        matmul_pd probe;
        s = block_pd(&g, m, n, g.lda, g.ldb, g.ldc, &probe);
        if (s == dnnl_unimplemented) return PHX_EUNSUPPORTED;
        if (s != dnnl_success)
            return phx_error(PHX_EINTERNAL, "gemm: oneDNN matmul setup failed (dnnl_status_t %d)", (int)s);
        dnnl_primitive_desc_destroy(probe.pd);
        block_job job;
        job.g = &g, job.by_rows = by_rows;
        job.step = (span + blocks - 1) / blocks;
        job.step = (job.step + 15) / 16 * 16;
        blocks = (span + job.step - 1) / job.step;
        px_pool_run(pool, (size_t)blocks, block_task, &job);
        for (int64_t i = 0; i < blocks && s == dnnl_success; i++) s = job.st[i];
    }
    return s == dnnl_success ? PHX_OK
                             : phx_error(PHX_EINTERNAL, "gemm: oneDNN matmul failed (dnnl_status_t %d)", (int)s);
}

/* f16 products on the bf16 matmul (AMX here), "split bf16": an f16 value
 * x is hi + lo exactly, hi = bf16(x) (round to nearest even, 8
 * significant bits) and lo = x - hi, a multiple of x's f16 ulp below half
 * of hi's bf16 ulp: at most 3 significant bits, so lo is a bf16 too (and
 * never a bf16 subnormal, which AMX would read as zero: f16's smallest
 * ulp is 2^-24). Then
 *   x y = hi_x hi_y + hi_x lo_y + lo_x hi_y + lo_x lo_y,
 * each product exact in f32, so an f16 GEMM is one bf16 GEMM over
 * K' = 3k (A' = [hi hi lo], B' = [hi; lo; hi], dropping lo lo, at most
 * 2^-16 |x y|) or 4k (A' = [hi hi lo lo], B' = [hi; lo; hi; lo]: every
 * product exact, only the f32 accumulation rounds) with f32 accumulation.
 * PHX_CPU_F16_SPLIT=3 (the default: 1.2-1.4x the f32 GEMM here, within
 * 2^-16 sum |a b| more than f32 arithmetic on the f16 values) or 4 (f32's
 * accuracy, about the f32 GEMM's speed here) picks the term count. An operand
 * holding inf or NaN declines (PHX_EUNSUPPORTED, nothing written): the
 * caller's widening path then gives f32's infinities, where hi lo = inf 0
 * would give NaN. A' and B' live in scratch slots 0 and 1, an f16 C in f32
 * scratch (slot 2) rounded once. */
static int split_terms(void)
{
    const char *e = getenv("PHX_CPU_F16_SPLIT");
    return e && !strcmp(e, "4") ? 4 : 3;
}

/* hi and lo of n f16 values, hi also into hi2 and lo into lo2 where not
 * NULL (the operand's second copies, written here rather than copied
 * after); nonzero when one of them is inf or NaN */
static int split_row_c(uint16_t *hi, uint16_t *hi2, uint16_t *lo, uint16_t *lo2, const uint16_t *x, int64_t n)
{
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        bad |= (x[i] & 0x7c00) == 0x7c00;
        float v = phx_f16_to_f32(x[i]);
        uint32_t u;
        memcpy(&u, &v, 4);
        uint32_t h = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        float hv, l;
        memcpy(&hv, &h, 4);
        l = v - hv;
        memcpy(&u, &l, 4);
        hi[i] = (uint16_t)(h >> 16);
        lo[i] = (uint16_t)(u >> 16);
        if (hi2) hi2[i] = hi[i];
        if (lo2) lo2[i] = lo[i];
    }
    return bad;
}

/* rows x cols of src (leading dim ld) into dst as terms copies of each
 * value: hi, or lo at the positions of lo_mask (bit p: copy p). With
 * k_in_rows the copies are stacked as row blocks (dst (terms rows) x
 * cols), else side by side in each row (dst rows x (terms cols)). */
typedef struct split_job {
    uint16_t *dst;
    const uint16_t *src;
    int64_t rows, cols, ld;
    int k_in_rows, terms;
    unsigned lo_mask;
    atomic_int bad;
} split_job;

/* the hi, hi2, lo and lo2 destinations of row r (hi2, lo2 NULL where the
 * terms have one copy) */
static inline void split_dests(const split_job *j, int64_t r, uint16_t **d)
{
    uint16_t *his[2] = {NULL, NULL}, *los[2] = {NULL, NULL};
    int nh = 0, nl = 0;
    for (int p = 0; p < j->terms; p++) {
        uint16_t *at = j->k_in_rows ? j->dst + (p * j->rows + r) * j->cols : j->dst + (r * j->terms + p) * j->cols;
        if (j->lo_mask >> p & 1u)
            los[nl++] = at;
        else
            his[nh++] = at;
    }
    d[0] = his[0], d[1] = his[1], d[2] = los[0], d[3] = los[1];
}

#if PX_HAVE_X86
#include <immintrin.h>
__attribute__((target("avx512f,avx512dq,f16c"))) static inline int
split_row_512(uint16_t *hi, uint16_t *hi2, uint16_t *lo, uint16_t *lo2, const uint16_t *x, int64_t n)
{
    __mmask16 bad = 0;
    const __m512i half = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
    const __m512i top = _mm512_set1_epi32((int)0xffff0000u);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i)));
        bad |= _mm512_fpclass_ps_mask(v, 0x99); /* QNaN, +inf, -inf, SNaN */
        __m512i u = _mm512_castps_si512(v);
        __m512i h = _mm512_and_si512(
            _mm512_add_epi32(u, _mm512_add_epi32(half, _mm512_and_si512(_mm512_srli_epi32(u, 16), one))), top);
        __m512 l = _mm512_sub_ps(v, _mm512_castsi512_ps(h));
        __m256i hv = _mm512_cvtepi32_epi16(_mm512_srli_epi32(h, 16));
        __m256i lv = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(l), 16));
        _mm256_storeu_si256((__m256i *)(hi + i), hv);
        _mm256_storeu_si256((__m256i *)(lo + i), lv);
        if (hi2) _mm256_storeu_si256((__m256i *)(hi2 + i), hv);
        if (lo2) _mm256_storeu_si256((__m256i *)(lo2 + i), lv);
    }
    return (bad != 0) | split_row_c(hi + i, hi2 ? hi2 + i : NULL, lo + i, lo2 ? lo2 + i : NULL, x + i, n - i);
}

/* rows lo .. hi - 1 in one call: the AVX-512 code is entered once per
 * part, not once per row (entered per row of 128 values, half of the
 * split's samples in the fp16 GPT step fell on the entry) */
__attribute__((target("avx512f,avx512dq,f16c"))) static int split_rows_512(const split_job *j, int64_t lo, int64_t hi)
{
    int bad = 0;
    for (int64_t r = lo; r < hi && !bad; r++) {
        uint16_t *d[4];
        split_dests(j, r, d);
        bad = split_row_512(d[0], d[1], d[2], d[3], j->src + r * j->ld, j->cols);
    }
    return bad;
}
#endif

/* rows lo .. hi - 1 of a split_operand (a part of px_cpu_parallel_for) */
static void split_part(void *arg, int64_t lo, int64_t hi)
{
    split_job *j = arg;
    int bad = 0;
#if PX_HAVE_X86
    if (px_cpu_isa() == PX_ISA_AVX512)
        bad = split_rows_512(j, lo, hi);
    else
#endif
        for (int64_t r = lo; r < hi && !bad; r++) {
            uint16_t *d[4];
            split_dests(j, r, d);
            bad = split_row_c(d[0], d[1], d[2], d[3], j->src + r * j->ld, j->cols);
        }
    if (bad) atomic_store(&j->bad, 1);
}

/* rows x cols of src (leading dim ld) into dst as terms copies of each
 * value: hi, or lo at the positions of lo_mask (bit p: copy p). With
 * k_in_rows the copies are stacked as row blocks (dst (terms rows) x
 * cols), else side by side in each row (dst rows x (terms cols)). Rows
 * are split over the thread budget's pool (oneDNN runs there next, so no
 * other library's threads wait for the cores). Nonzero when a value is
 * inf or NaN. */
static int split_operand(uint16_t *dst, const uint16_t *src, int64_t rows, int64_t cols, int64_t ld, int k_in_rows,
                         int terms, unsigned lo_mask)
{
    split_job j = {dst, src, rows, cols, ld, k_in_rows, terms, lo_mask, 0};
    int64_t grain = cols > 0 && cols < 65536 ? 65536 / cols : 1;
    px_cpu_parallel_for(rows, grain, split_part, &j);
    return atomic_load(&j.bad);
}

/* One block of an f16 GEMM: C (m x n, f32 or rounded into f16 via f32
 * scratch slot 2) = alpha A B + beta C over k, A and B split here. */
static phx_status split_block(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t *a,
                              int64_t lda, const uint16_t *b, int64_t ldb, float beta, void *c, int64_t ldc,
                              phx_dtype cdt, int split_b)
{
    int t = split_terms();
    int64_t kk = t * k;
    /* A' = [hi hi lo (lo)], B' = [hi; lo; hi; (lo)] */
    unsigned a_lo = t == 4 ? 0xcu : 0x4u, b_lo = t == 4 ? 0xau : 0x2u;
    uint16_t *sa = px_cpu_scratch(0, (size_t)(m * kk) * 2), *sb = px_cpu_scratch(1, (size_t)(kk * n) * 2);
    if (!sa || !sb) return PHX_ENOMEM;
    if (split_operand(sa, a, trans_a ? k : m, trans_a ? m : k, lda, trans_a, t, a_lo) ||
        (split_b && split_operand(sb, b, trans_b ? n : k, trans_b ? k : n, ldb, !trans_b, t, b_lo)))
        return PHX_EUNSUPPORTED;
    gemm_args g = {.trans_a = trans_a,
                   .trans_b = trans_b,
                   .m = m,
                   .n = n,
                   .k = kk,
                   .lda = trans_a ? m : kk,
                   .ldb = trans_b ? kk : n,
                   .ldc = ldc,
                   .alpha = alpha,
                   .beta = beta,
                   .a = (const char *)sa,
                   .b = (const char *)sb,
                   .c = c,
                   .adt = PHX_BF16,
                   .cdt = cdt};
    if (cdt == PHX_F32) return matmul_run(g);
    float *sc = px_cpu_scratch(2, (size_t)(m * n) * sizeof(float));
    if (!sc) return PHX_ENOMEM;
    g.out = c, g.ldo = ldc, g.odt = cdt;
    g.c = (char *)sc, g.ldc = n, g.cdt = PHX_F32;
    return matmul_run(g);
}

/* nonzero when one of rows x cols f16 values (leading dim ld) is inf or NaN */
static int any_nonfinite(const uint16_t *x, int64_t rows, int64_t cols, int64_t ld)
{
    int bad = 0;
    for (int64_t r = 0; r < rows && !bad; r++)
        for (int64_t i = 0; i < cols; i++) bad |= (x[r * ld + i] & 0x7c00) == 0x7c00;
    return bad;
}

/* The split operands are 3 (or 4) times the f16 ones in bytes; whole, an
 * activation's (2048 x 512 values: 6 MiB split) is out of the 2 MiB L2
 * before oneDNN reads it back. So a long k (a weight gradient, k =
 * tokens) is split and multiplied in blocks of PX_SPLIT_KC, each block's
 * product added into an f32 copy of C (scratch slot 3) that is written to
 * C once at the end; a long A in blocks of rows whose A' fits
 * PX_SPLIT_BLOCK bytes, B' made once (the fp16 GPT step at 1 thread,
 * alternating rounds: 16,490-16,593 tokens/s blocked, 14,955-15,837
 * whole). The blocks depend on the shape only, so the bits do not depend
 * on the thread count. An operand with inf or NaN still declines before
 * C is written: a row block after the first would find it late, so with
 * beta != 0 (C read) A is checked first. */
#define PX_SPLIT_BLOCK ((int64_t)1 << 20)
#define PX_SPLIT_KC 256

static phx_status gemm_f16_split(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void *a,
                                 int64_t lda, const void *b, int64_t ldb, float beta, void *c, int64_t ldc,
                                 phx_dtype cdt)
{
    const uint16_t *a16 = a, *b16 = b;
    phx_status st;
    if (m == 0 || n == 0) return PHX_OK;
    if (k >= 4 * PX_SPLIT_KC) {
        float *acc = px_cpu_scratch(3, (size_t)(m * n) * sizeof(float));
        if (!acc) return PHX_ENOMEM;
        if (beta != 0.0f && (st = px_cpu_half_cast_rows(acc, PHX_F32, n, c, cdt, ldc, m, n)) != PHX_OK) return st;
        for (int64_t k0 = 0; k0 < k; k0 += PX_SPLIT_KC) {
            int64_t kc = k - k0 < PX_SPLIT_KC ? k - k0 : PX_SPLIT_KC;
            const uint16_t *ak = a16 + (trans_a ? k0 * lda : k0), *bk = b16 + (trans_b ? k0 : k0 * ldb);
            if ((st = split_block(trans_a, trans_b, m, n, kc, alpha, ak, lda, bk, ldb, k0 ? 1.0f : beta, acc, n,
                                  PHX_F32, 1)) != PHX_OK)
                return st;
        }
        return px_cpu_half_cast_rows(c, cdt, ldc, acc, PHX_F32, n, m, n);
    }
    int64_t rows = PX_SPLIT_BLOCK / ((int64_t)split_terms() * 2 * (k > 0 ? k : 1)) / 16 * 16;
    if (rows < 64) rows = 64;
    if (m > rows && beta != 0.0f && any_nonfinite(a16, trans_a ? k : m, trans_a ? m : k, lda)) return PHX_EUNSUPPORTED;
    for (int64_t i0 = 0; i0 == 0 || i0 < m; i0 += rows) {
        int64_t mb = m - i0 < rows ? m - i0 : rows;
        const uint16_t *ai = a16 + (trans_a ? i0 : i0 * lda);
        char *ci = (char *)c + (size_t)(i0 * ldc) * phx_dtype_size(cdt);
        if ((st = split_block(trans_a, trans_b, mb, n, k, alpha, ai, lda, b16, ldb, beta, ci, ldc, cdt, i0 == 0)) !=
            PHX_OK)
            return st;
    }
    return PHX_OK;
}

phx_status px_cpu_gemm_dnnl(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void *a,
                            int64_t lda, const void *b, int64_t ldb, phx_dtype adt, float beta, void *c, int64_t ldc,
                            phx_dtype cdt)
{
    pthread_once(&dnnl_once, dnnl_init);
    if (!dnnl_engine) return PHX_EUNSUPPORTED;
    if (adt == PHX_F16) return gemm_f16_split(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, cdt);
    gemm_args g = {trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta, a, b, c, adt, cdt, .out = NULL};
    return matmul_run(g);
}
#else
int px_cpu_dnnl_amx_bf16(void)
{
    return 0;
}

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
