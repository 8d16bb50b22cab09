/* The tensor-API kernel slots (minor 4) not yet written for CUDA: each
 * answers PHX_EUNSUPPORTED naming itself. */
#include "config.h"
#include "plugins/device/cuda/kernels/kernels.h"

phx_status px_cuda_copy_strided(int dev, phx_dtype dt, int ndim, const int64_t *shape, void *dst, const int64_t *dst_strides, const void *src, const int64_t *src_strides)
{
    (void)dev;
    (void)dt;
    (void)ndim;
    (void)shape;
    (void)dst;
    (void)dst_strides;
    (void)src;
    (void)src_strides;
    return phx_error(PHX_EUNSUPPORTED, "cuda: kernel copy_strided is not written yet");
}

phx_status px_cuda_binary(int dev, int op, phx_dtype dt, int ndim, const int64_t *shape, void *out, const void *a, const int64_t *a_strides, const void *b, const int64_t *b_strides)
{
    (void)dev;
    (void)op;
    (void)dt;
    (void)ndim;
    (void)shape;
    (void)out;
    (void)a;
    (void)a_strides;
    (void)b;
    (void)b_strides;
    return phx_error(PHX_EUNSUPPORTED, "cuda: kernel binary is not written yet");
}

phx_status px_cuda_unary(int dev, int op, phx_dtype dt, int64_t n, void *y, const void *x, float alpha, float beta)
{
    (void)dev;
    (void)op;
    (void)dt;
    (void)n;
    (void)y;
    (void)x;
    (void)alpha;
    (void)beta;
    return phx_error(PHX_EUNSUPPORTED, "cuda: kernel unary is not written yet");
}

phx_status px_cuda_where(int dev, phx_dtype dt, int ndim, const int64_t *shape, void *out, const void *cond, phx_dtype cdt, const int64_t *c_strides, const void *a, const int64_t *a_strides, const void *b, const int64_t *b_strides)
{
    (void)dev;
    (void)dt;
    (void)ndim;
    (void)shape;
    (void)out;
    (void)cond;
    (void)cdt;
    (void)c_strides;
    (void)a;
    (void)a_strides;
    (void)b;
    (void)b_strides;
    return phx_error(PHX_EUNSUPPORTED, "cuda: kernel where is not written yet");
}

phx_status px_cuda_reduce_dim(int dev, int op, phx_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *x, void *y, int64_t *idx)
{
    (void)dev;
    (void)op;
    (void)dt;
    (void)outer;
    (void)n;
    (void)inner;
    (void)x;
    (void)y;
    (void)idx;
    return phx_error(PHX_EUNSUPPORTED, "cuda: kernel reduce_dim is not written yet");
}

phx_status px_cuda_softmax_dim(int dev, int log, phx_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *x, void *y)
{
    (void)dev;
    (void)log;
    (void)dt;
    (void)outer;
    (void)n;
    (void)inner;
    (void)x;
    (void)y;
    return phx_error(PHX_EUNSUPPORTED, "cuda: kernel softmax_dim is not written yet");
}

phx_status px_cuda_softmax_dim_backward(int dev, int log, phx_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *y, const void *dy, void *dx)
{
    (void)dev;
    (void)log;
    (void)dt;
    (void)outer;
    (void)n;
    (void)inner;
    (void)y;
    (void)dy;
    (void)dx;
    return phx_error(PHX_EUNSUPPORTED, "cuda: kernel softmax_dim_backward is not written yet");
}

phx_status px_cuda_index_select(int dev, phx_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *x, const int64_t *idx, int64_t m, void *y)
{
    (void)dev;
    (void)dt;
    (void)outer;
    (void)n;
    (void)inner;
    (void)x;
    (void)idx;
    (void)m;
    (void)y;
    return phx_error(PHX_EUNSUPPORTED, "cuda: kernel index_select is not written yet");
}

phx_status px_cuda_index_add(int dev, phx_dtype dt, int64_t outer, int64_t n, int64_t inner, void *x, const int64_t *idx, int64_t m, const void *src)
{
    (void)dev;
    (void)dt;
    (void)outer;
    (void)n;
    (void)inner;
    (void)x;
    (void)idx;
    (void)m;
    (void)src;
    return phx_error(PHX_EUNSUPPORTED, "cuda: kernel index_add is not written yet");
}

phx_status px_cuda_gather(int dev, phx_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *x, const int64_t *idx, int64_t m, void *y)
{
    (void)dev;
    (void)dt;
    (void)outer;
    (void)n;
    (void)inner;
    (void)x;
    (void)idx;
    (void)m;
    (void)y;
    return phx_error(PHX_EUNSUPPORTED, "cuda: kernel gather is not written yet");
}

phx_status px_cuda_scatter_add(int dev, phx_dtype dt, int64_t outer, int64_t n, int64_t inner, void *x, const int64_t *idx, int64_t m, const void *src)
{
    (void)dev;
    (void)dt;
    (void)outer;
    (void)n;
    (void)inner;
    (void)x;
    (void)idx;
    (void)m;
    (void)src;
    return phx_error(PHX_EUNSUPPORTED, "cuda: kernel scatter_add is not written yet");
}
