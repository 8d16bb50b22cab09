/* Strided copies and indexing over (outer, n, inner) layouts: the kernels
 * behind permute, narrow, expand, cat, index_select, gather and their
 * gradients. */
#include "config.h"
#include "kernels/cpu/cpu.h"

phx_status px_cpu_copy_strided(int dev, phx_dtype dt, int ndim, const int64_t *shape, void *dst, const int64_t *dst_strides, const void *src, const int64_t *src_strides)
{
    (void)dev;
    (void)dt;
    (void)ndim;
    (void)shape;
    (void)dst;
    (void)dst_strides;
    (void)src;
    (void)src_strides;
    return phx_error(PHX_EUNSUPPORTED, "cpu: kernel copy_strided is not written yet");
}

phx_status px_cpu_index_select(int dev, phx_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *x, const int64_t *idx, int64_t m, void *y)
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
    return phx_error(PHX_EUNSUPPORTED, "cpu: kernel index_select is not written yet");
}

phx_status px_cpu_index_add(int dev, phx_dtype dt, int64_t outer, int64_t n, int64_t inner, void *x, const int64_t *idx, int64_t m, const void *src)
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
    return phx_error(PHX_EUNSUPPORTED, "cpu: kernel index_add is not written yet");
}

phx_status px_cpu_gather(int dev, phx_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *x, const int64_t *idx, int64_t m, void *y)
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
    return phx_error(PHX_EUNSUPPORTED, "cpu: kernel gather is not written yet");
}

phx_status px_cpu_scatter_add(int dev, phx_dtype dt, int64_t outer, int64_t n, int64_t inner, void *x, const int64_t *idx, int64_t m, const void *src)
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
    return phx_error(PHX_EUNSUPPORTED, "cpu: kernel scatter_add is not written yet");
}
