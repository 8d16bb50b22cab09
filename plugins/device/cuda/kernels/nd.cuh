/* Strided layouts of the tensor-API slots (minor 4) on the GPU: the
 * slot's host arrays (shape, each operand's strides in elements) checked
 * and packed into a px_nd passed to the kernel by value. The host side
 * drops dimensions of size 1 and merges neighbours every operand steps
 * through as one (a contiguous operand becomes one dimension), so the
 * common cases cost no division per element. Internal to the plugin. */
#ifndef PHX_KERNELS_CUDA_ND_CUH
#define PHX_KERNELS_CUDA_ND_CUH

#include "plugins/device/cuda/kernels/common.cuh"

#define PX_ND_OPS 4 /* operands addressed per element: where's out, cond, a, b */

struct px_nd {
    int ndim; /* 0 .. PHX_MAX_DIMS */
    int64_t shape[PHX_MAX_DIMS];
    int64_t st[PX_ND_OPS][PHX_MAX_DIMS]; /* (operand, dim), in elements */
};

/* Packs ndim, shape and nops operands' strides (strides[k] NULL: that
 * operand is contiguous in shape) into d, coalesced; *n <- the number of
 * elements. PHX_EINVAL naming the kernel for a bad ndim, a missing shape
 * or a negative or overflowing size. */
static inline phx_status px_nd_make(const char *name, int ndim, const int64_t *shape, int nops,
                                    const int64_t *const *strides, px_nd *d, int64_t *n)
{
    if (ndim < 0 || ndim > PHX_MAX_DIMS)
        return phx_error(PHX_EINVAL, "%s: %d dims, expected 0 .. %d", name, ndim, PHX_MAX_DIMS);
    if (ndim > 0 && !shape) return phx_error(PHX_EINVAL, "%s: %d dims and no shape", name, ndim);
    int64_t total = 1;
    for (int k = 0; k < ndim; k++) {
        if (shape[k] < 0) return phx_error(PHX_EINVAL, "%s: dim %d has size %lld", name, k, (long long)shape[k]);
        if (shape[k] > 0 && total > INT64_MAX / shape[k])
            return phx_error(PHX_EINVAL, "%s: more than 2^63 elements", name);
        total *= shape[k];
    }
    *n = total;
    /* every operand's strides, contiguous ones made here */
    int64_t st[PX_ND_OPS][PHX_MAX_DIMS];
    for (int op = 0; op < nops; op++) {
        int64_t c = 1;
        for (int k = ndim - 1; k >= 0; k--) {
            st[op][k] = strides[op] ? strides[op][k] : c;
            c *= shape[k];
        }
    }
    /* from the innermost dim outwards: skip size 1, merge dim k into the
     * one inside it when every operand's stride of k is its size times
     * the inner stride */
    int m = 0; /* dims kept, innermost first in d (reversed below) */
    for (int k = ndim - 1; k >= 0; k--) {
        if (shape[k] == 1) continue;
        int merge = m > 0;
        for (int op = 0; op < nops && merge; op++) merge = st[op][k] == d->st[op][m - 1] * d->shape[m - 1];
        if (merge) {
            d->shape[m - 1] *= shape[k];
            continue;
        }
        d->shape[m] = shape[k];
        for (int op = 0; op < nops; op++) d->st[op][m] = st[op][k];
        m++;
    }
    for (int a = 0, b = m - 1; a < b; a++, b--) {
        int64_t t = d->shape[a];
        d->shape[a] = d->shape[b];
        d->shape[b] = t;
        for (int op = 0; op < nops; op++) {
            t = d->st[op][a];
            d->st[op][a] = d->st[op][b];
            d->st[op][b] = t;
        }
    }
    for (int k = m; k < PHX_MAX_DIMS; k++) {
        d->shape[k] = 1;
        for (int op = 0; op < PX_ND_OPS; op++) d->st[op][k] = 0;
    }
    for (int op = nops; op < PX_ND_OPS; op++)
        for (int k = 0; k < m; k++) d->st[op][k] = 0;
    d->ndim = m;
    return PHX_OK;
}

/* off[op] <- the element offset of flat (row-major) index i of d's shape
 * in operand op, for the first NOPS operands. */
template <int NOPS> __device__ __forceinline__ void px_nd_at(const px_nd &d, int64_t i, int64_t *off)
{
#pragma unroll
    for (int op = 0; op < NOPS; op++) off[op] = 0;
#pragma unroll
    for (int k = PHX_MAX_DIMS - 1; k > 0; k--) {
        if (k >= d.ndim) continue;
        int64_t q = i / d.shape[k], c = i - q * d.shape[k];
#pragma unroll
        for (int op = 0; op < NOPS; op++) off[op] += c * d.st[op][k];
        i = q;
    }
    if (d.ndim > 0) {
#pragma unroll
        for (int op = 0; op < NOPS; op++) off[op] += i * d.st[op][0];
    }
}

/* Whether operand op of d is contiguous (one dimension of stride 1, or a
 * single element). */
static inline int px_nd_flat(const px_nd *d, int op)
{
    return d->ndim == 0 || (d->ndim == 1 && d->st[op][0] == 1);
}

/* An unsigned integer type of each element size, for kernels that move
 * elements without looking at them. */
template <int BYTES> struct px_word;
template <> struct px_word<2> {
    typedef uint16_t T;
};
template <> struct px_word<4> {
    typedef uint32_t T;
};
template <> struct px_word<8> {
    typedef uint64_t T;
};

/* Runs CALL with the constant BYTES the element size of dt (any dtype),
 * else PHX_EINVAL. */
#define PX_BYTES_DISPATCH(name, dt, CALL) \
    do { \
        switch (phx_dtype_size(dt)) { \
        case 2: { \
            const int BYTES = 2; \
            CALL; \
            break; \
        } \
        case 4: { \
            const int BYTES = 4; \
            CALL; \
            break; \
        } \
        case 8: { \
            const int BYTES = 8; \
            CALL; \
            break; \
        } \
        default: return phx_error(PHX_EINVAL, "%s: dtype %d, expected f32, f16, bf16, i32 or i64", name, (int)(dt)); \
        } \
    } while (0)

#endif
