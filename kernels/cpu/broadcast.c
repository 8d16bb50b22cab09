/* Elementwise kernels with broadcasting: binary ops and where read each
 * operand through its strides; unary ops over flat arrays. */
#include "config.h"
#include "kernels/cpu/cpu.h"

phx_status px_cpu_binary(int dev, int op, phx_dtype dt, int ndim, const int64_t *shape, void *out, const void *a, const int64_t *a_strides, const void *b, const int64_t *b_strides)
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
    return phx_error(PHX_EUNSUPPORTED, "cpu: kernel binary is not written yet");
}

phx_status px_cpu_unary(int dev, int op, phx_dtype dt, int64_t n, void *y, const void *x, float alpha, float beta)
{
    (void)dev;
    (void)op;
    (void)dt;
    (void)n;
    (void)y;
    (void)x;
    (void)alpha;
    (void)beta;
    return phx_error(PHX_EUNSUPPORTED, "cpu: kernel unary is not written yet");
}

phx_status px_cpu_where(int dev, phx_dtype dt, int ndim, const int64_t *shape, void *out, const void *cond, phx_dtype cdt, const int64_t *c_strides, const void *a, const int64_t *a_strides, const void *b, const int64_t *b_strides)
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
    return phx_error(PHX_EUNSUPPORTED, "cpu: kernel where is not written yet");
}
