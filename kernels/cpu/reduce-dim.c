/* Reductions and softmax over one dim of an (outer, n, inner) layout. */
#include "config.h"
#include "kernels/cpu/cpu.h"

phx_status px_cpu_reduce_dim(int dev, int op, phx_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *x, void *y, int64_t *idx)
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
    return phx_error(PHX_EUNSUPPORTED, "cpu: kernel reduce_dim is not written yet");
}

phx_status px_cpu_softmax_dim(int dev, int log, phx_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *x, void *y)
{
    (void)dev;
    (void)log;
    (void)dt;
    (void)outer;
    (void)n;
    (void)inner;
    (void)x;
    (void)y;
    return phx_error(PHX_EUNSUPPORTED, "cpu: kernel softmax_dim is not written yet");
}

phx_status px_cpu_softmax_dim_backward(int dev, int log, phx_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *y, const void *dy, void *dx)
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
    return phx_error(PHX_EUNSUPPORTED, "cpu: kernel softmax_dim_backward is not written yet");
}
