/* Phalanx — the tensor API: shape, elementwise, reduction, matrix and
 * indexing operations with PyTorch's semantics and names (doc/reference/tensors.md).
 *
 * Every operation here returns a new tensor handle, or NULL with
 * phx_last_error() naming the operation, the operands' shapes and what was
 * expected. An input that is NULL makes the operation return NULL and keep
 * the error that produced it, so a forward may chain calls and check once:
 *
 *     phx_tensor *h = phx_relu(phx_add(phx_matmul(x, w), b));
 *     if (!h) return phx_error(...)  // or: return PHX_EINVAL with the message kept
 *
 * Ownership: the result belongs to the innermost open scope
 * (phx_scope_begin/phx_scope_end in phalanx/autograd.h; every module's
 * forward runs in one) and goes when that scope ends; phx_tensor_retain it
 * to keep it longer. With no scope open, the caller owns the result and
 * frees it with phx_tensor_free.
 *
 * Layout: every tensor is contiguous and row-major (at most PHX_MAX_DIMS
 * dims). reshape, flatten, squeeze, unsqueeze, and narrow along the first
 * dim whose size is not 1 return views that share storage (no copy);
 * permute, transpose, expand, narrow along an inner dim, cat and stack
 * return contiguous copies (doc/reference/tensors.md says why).
 *
 * Autograd: while grad mode is on (phalanx/autograd.h) and an input
 * requires a gradient, each differentiable operation records how to
 * differentiate it; its result then requires a gradient too. Comparison,
 * argmax, one_hot and the creation functions are not differentiable.
 *
 * Dims may be negative (counting from the end, as in PyTorch). Float
 * operations accept f32, f16 and bf16 (math in f32, one rounding on store);
 * binary operations need one dtype and one device on both sides. */
#ifndef PHALANX_OPS_H
#define PHALANX_OPS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "phalanx/tensor.h"
#include "phalanx/loss.h"
#include "phalanx/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Shape ---- */

/* Same elements in a new shape (one dim may be -1: inferred). A view. */
phx_tensor *phx_reshape(const phx_tensor *t, int ndim, const int64_t *shape);
/* Dims start..end (inclusive, negative allowed) merged into one. A view. */
phx_tensor *phx_flatten(const phx_tensor *t, int start_dim, int end_dim);
/* Dim `dim` removed if its size is 1 (else the same shape). A view. */
phx_tensor *phx_squeeze(const phx_tensor *t, int dim);
/* A dim of size 1 inserted at `dim` (in -(ndim+1) .. ndim). A view. */
phx_tensor *phx_unsqueeze(const phx_tensor *t, int dim);
/* Dims reordered: result dim i is t's dim dims[i] (a permutation of
 * 0..ndim-1). A copy. */
phx_tensor *phx_permute(const phx_tensor *t, int ndim, const int *dims);
/* Dims d0 and d1 swapped. A copy. */
phx_tensor *phx_transpose(const phx_tensor *t, int d0, int d1);
/* t itself, with one more reference handed to the scope (every tensor is
 * contiguous): for code written against PyTorch's idiom. */
phx_tensor *phx_contiguous(const phx_tensor *t);
/* Elements start .. start+length-1 along dim; start in -size .. size (a
 * negative start counts from the end), 0 <= length <= size - start. A
 * view when every dim before dim has size 1, else a copy. */
phx_tensor *phx_narrow(const phx_tensor *t, int dim, int64_t start, int64_t length);
/* Every step-th element from start up to end (exclusive) along dim, as
 * t[..., start:end:step] (negative start/end count from the end; step
 * >= 1). A copy unless step is 1 and narrow would give a view. */
phx_tensor *phx_slice(const phx_tensor *t, int dim, int64_t start, int64_t end, int64_t step);
/* The n tensors joined along dim (same shape except along dim), of one
 * dtype; inside a forward-only module under fp16 or bf16, float inputs of
 * several dtypes join in the widest (autocast's promote list; so does
 * phx_stack). */
phx_tensor *phx_cat(int n, const phx_tensor *const *ts, int dim);
/* The n tensors (one shape) stacked along a new dim. */
phx_tensor *phx_stack(int n, const phx_tensor *const *ts, int dim);
/* Pieces of split_size along dim (the last may be smaller) written to
 * out[0 .. count-1]; returns count (> max_out: nothing written, -1 with
 * phx_last_error), -1 on error. Each piece is phx_narrow's. */
int phx_split(const phx_tensor *t, int64_t split_size, int dim, phx_tensor **out, int max_out);
/* `chunks` pieces as torch.chunk (ceil(size / chunks) each, maybe fewer
 * pieces); returns the count, -1 on error. */
int phx_chunk(const phx_tensor *t, int chunks, int dim, phx_tensor **out, int max_out);
/* t broadcast to shape (ndim >= t's; -1 keeps a dim), NumPy's rules. A
 * copy; its gradient sums over the broadcast dims. */
phx_tensor *phx_expand(const phx_tensor *t, int ndim, const int64_t *shape);

/* ---- Elementwise, with NumPy broadcasting ---- */

phx_tensor *phx_add(const phx_tensor *a, const phx_tensor *b);
phx_tensor *phx_sub(const phx_tensor *a, const phx_tensor *b);
phx_tensor *phx_mul(const phx_tensor *a, const phx_tensor *b);
phx_tensor *phx_div(const phx_tensor *a, const phx_tensor *b);
/* a^b elementwise. */
phx_tensor *phx_pow(const phx_tensor *a, const phx_tensor *b);
/* Elementwise max/min; NaN in either operand gives NaN (PyTorch's
 * maximum/minimum). */
phx_tensor *phx_maximum(const phx_tensor *a, const phx_tensor *b);
phx_tensor *phx_minimum(const phx_tensor *a, const phx_tensor *b);
/* cond ? a : b, all three broadcast together; cond of any dtype (nonzero
 * is true); differentiable in a and b. */
phx_tensor *phx_where(const phx_tensor *cond, const phx_tensor *a, const phx_tensor *b);
/* Comparisons: masks of 1 and 0 in the operands' dtype (Phalanx has no
 * bool dtype). Not differentiable. */
phx_tensor *phx_eq(const phx_tensor *a, const phx_tensor *b);
phx_tensor *phx_ne(const phx_tensor *a, const phx_tensor *b);
phx_tensor *phx_lt(const phx_tensor *a, const phx_tensor *b);
phx_tensor *phx_le(const phx_tensor *a, const phx_tensor *b);
phx_tensor *phx_gt(const phx_tensor *a, const phx_tensor *b);
phx_tensor *phx_ge(const phx_tensor *a, const phx_tensor *b);

/* Scalar variants: t op s. */
phx_tensor *phx_add_scalar(const phx_tensor *t, double s);
phx_tensor *phx_sub_scalar(const phx_tensor *t, double s);
phx_tensor *phx_mul_scalar(const phx_tensor *t, double s);
phx_tensor *phx_div_scalar(const phx_tensor *t, double s);
/* s - t (PyTorch's rsub). */
phx_tensor *phx_rsub_scalar(const phx_tensor *t, double s);
/* t^s. */
phx_tensor *phx_pow_scalar(const phx_tensor *t, double s);
phx_tensor *phx_eq_scalar(const phx_tensor *t, double s);
phx_tensor *phx_ne_scalar(const phx_tensor *t, double s);
phx_tensor *phx_lt_scalar(const phx_tensor *t, double s);
phx_tensor *phx_le_scalar(const phx_tensor *t, double s);
phx_tensor *phx_gt_scalar(const phx_tensor *t, double s);
phx_tensor *phx_ge_scalar(const phx_tensor *t, double s);

/* Unary. phx_ln is the natural logarithm (torch.log: phx_log is the
 * library's logging function). */
phx_tensor *phx_neg(const phx_tensor *t);
phx_tensor *phx_exp(const phx_tensor *t);
phx_tensor *phx_ln(const phx_tensor *t);
phx_tensor *phx_sqrt(const phx_tensor *t);
phx_tensor *phx_rsqrt(const phx_tensor *t);
phx_tensor *phx_abs(const phx_tensor *t);
/* min(max(t, lo), hi); NAN for a bound means none. The gradient passes
 * where lo <= t <= hi. */
phx_tensor *phx_clamp(const phx_tensor *t, double lo, double hi);
/* Activations (the kernels of the built-in modules). relu is 0 where
 * t <= 0 and keeps a NaN (PyTorch's relu); its gradient is 0 where
 * t <= 0 and passes at a NaN. */
phx_tensor *phx_relu(const phx_tensor *t);
phx_tensor *phx_gelu(const phx_tensor *t, bool tanh_approx);
phx_tensor *phx_tanh(const phx_tensor *t);
phx_tensor *phx_sigmoid(const phx_tensor *t);

/* ---- Reductions over dims (ndim 0: every dim), keepdim as PyTorch ----
 *
 * Here a 0-dim t takes dim 0 or -1 as PyTorch: the result is 0-dim (the
 * value itself; index 0; softmax 1, log_softmax 0). */

phx_tensor *phx_sum(const phx_tensor *t, int ndim, const int *dims, bool keepdim);
phx_tensor *phx_mean(const phx_tensor *t, int ndim, const int *dims, bool keepdim);
/* Variance with `correction` (1: unbiased, PyTorch's default; 0: biased):
 * the sum of squared deviations over max(0, N - correction), so a
 * correction of N or more gives inf (NaN where the deviations are all 0,
 * and for an empty reduction), as PyTorch. */
phx_tensor *phx_var(const phx_tensor *t, int ndim, const int *dims, int64_t correction, bool keepdim);
/* log(sum(exp(t))) over the dims, computed stably. */
phx_tensor *phx_logsumexp(const phx_tensor *t, int ndim, const int *dims, bool keepdim);
/* Max/min along one dim: the values; *indices (i64, same shape; NULL: not
 * wanted) the position of each (the first on ties). The gradient flows to
 * the selected positions. */
phx_tensor *phx_max_dim(const phx_tensor *t, int dim, bool keepdim, phx_tensor **indices);
phx_tensor *phx_min_dim(const phx_tensor *t, int dim, bool keepdim, phx_tensor **indices);
/* Index of the maximum along dim (i64). Not differentiable. */
phx_tensor *phx_argmax(const phx_tensor *t, int dim, bool keepdim);
/* Softmax / log-softmax over any dim. */
phx_tensor *phx_softmax(const phx_tensor *t, int dim);
phx_tensor *phx_log_softmax(const phx_tensor *t, int dim);

/* ---- Matrices and indexing ---- */

/* torch.matmul: 1-D and 2-D operands as dot/matrix products; batched
 * operands (ndim > 2) broadcast their batch dims. An empty contracted dim
 * gives zeros ((2,0) @ (0,3): (2,3) zeros; (0) @ (0): a 0-dim 0). */
phx_tensor *phx_matmul(const phx_tensor *a, const phx_tensor *b);
/* Entries idx[j] (i64, 1-D) along dim. */
phx_tensor *phx_index_select(const phx_tensor *t, int dim, const phx_tensor *idx);
/* out[..i..] = t[..idx[..i..]..] along dim; idx (i64) has t's shape except
 * along dim. */
phx_tensor *phx_gather(const phx_tensor *t, int dim, const phx_tensor *idx);
/* t with src added at idx along dim (out of place; idx and src one shape,
 * equal to t's except along dim); repeated indices accumulate. */
phx_tensor *phx_scatter_add(const phx_tensor *t, int dim, const phx_tensor *idx, const phx_tensor *src);
/* idx (i64, any shape) -> f32 (..., num_classes) of 1 at each index. */
phx_tensor *phx_one_hot(const phx_tensor *idx, int64_t num_classes);

/* ---- Losses as tensor operations (0-dim results but for reduction none) ---- */

/* Mean cross entropy of logits (n, classes) against i64 targets (n). */
phx_tensor *phx_cross_entropy(const phx_tensor *logits, const phx_tensor *target);

/* F.cross_entropy's keyword arguments (phx_cross_entropy_ex).
 *
 * ignore_index is the one field whose default is not zero: PyTorch's
 * -100, which the initialiser writes. Zero could not stand for -100
 * without making class 0, the usual padding token, impossible to ignore;
 * and the zero-default rule is for fields appended in later minors (an
 * older library must read a newer caller's untouched tail as zeros), not
 * for the layout's first fields, which take PyTorch's defaults from the
 * initialiser as phx_conv2d_opts' stride does. A zeroed struct is
 * refused (struct_size 0), but one zeroed and given only its struct_size
 * ignores class 0: always start from PHX_CROSS_ENTROPY_OPTS_INIT. */
typedef struct phx_cross_entropy_opts {
    size_t struct_size; /* sizeof (phx_cross_entropy_opts): PHX_CROSS_ENTROPY_OPTS_INIT sets it */
    /* (classes) f32 on the logits' device: class c's weight, as
     * weight=; NULL: every class weighs 1. A constant: it must not
     * require a gradient while grad mode is on (PyTorch refuses it too). */
    const phx_tensor *weight;
    /* Targets equal to it add nothing to the loss or the gradient and do
     * not count in the mean; any value, a class in [0, classes) too.
     * -100 (the initialiser's). */
    int64_t ignore_index;
    phx_reduction reduction; /* PHX_REDUCE_MEAN (0), PHX_REDUCE_SUM or PHX_REDUCE_NONE */
    double label_smoothing; /* in [0, 1]; 0 */
} phx_cross_entropy_opts;
#define PHX_CROSS_ENTROPY_OPTS_INIT \
    { \
        .struct_size = sizeof(phx_cross_entropy_opts), .ignore_index = -100 \
    }

/* F.cross_entropy(logits, target, weight, ignore_index, reduction,
 * label_smoothing) with class-index targets, for logits (n, classes) and
 * target (n), PyTorch's K-dimensional form logits (n, classes, d1, ...)
 * with target (n, d1, ...) (classes in dim 1, up to PHX_MAX_DIMS dims),
 * and the unbatched logits (classes) with a 0-dim target. opts NULL:
 * PHX_CROSS_ENTROPY_OPTS_INIT's values. Each position i with target t_i
 * not ignore_index gives
 *     l_i = (1 - s) w[t_i] (-log p_i[t_i]) + (s / classes) sum_c w[c] (-log p_i[c])
 * (p_i = softmax over the classes, s = label_smoothing, w = weight or 1);
 * an ignored position gives 0. PHX_REDUCE_NONE returns the l_i in
 * target's shape; PHX_REDUCE_SUM their sum; PHX_REDUCE_MEAN their sum
 * divided by sum w[t_i] over the positions not ignored (their count
 * without weight), so a batch whose every target is ignored gives NaN
 * and a zero gradient, as PyTorch 1.13 does. The result is f32 (f16 and
 * bf16 logits are widened first; their gradient is converted back),
 * differentiable in logits. With the defaults and no ignored target it
 * is phx_cross_entropy (one fused node). NULL with phx_last_error naming
 * the operand and what was expected for: a NULL or non-float logits, a
 * target that is not i64 or not of the matching shape, a target outside
 * [0, classes) that is not ignore_index (its value and position named),
 * a weight not (classes) f32 on the logits' device, label_smoothing
 * outside [0, 1], an unknown reduction, no position at all; PHX_EABI for a
 * struct_size of 0 or a newer layout's unknown field set. */
phx_tensor *phx_cross_entropy_ex(const phx_tensor *logits, const phx_tensor *target,
                                 const phx_cross_entropy_opts *opts);
/* Mean squared error of y against target (one shape). */
phx_tensor *phx_mse_loss(const phx_tensor *y, const phx_tensor *target);

/* ---- Creation (not recorded; results follow the ownership rule) ---- */

/* start, start+step, ... below end (step != 0), as torch.arange. */
phx_tensor *phx_arange(double start, double end, double step, phx_dtype dt, phx_device dev);
phx_tensor *phx_full(int ndim, const int64_t *shape, double value, phx_dtype dt, phx_device dev);
/* U[0, 1) / N(0, 1) draws from rng (f32 and converted). */
phx_tensor *phx_rand(int ndim, const int64_t *shape, phx_rng *rng, phx_dtype dt, phx_device dev);
phx_tensor *phx_randn(int ndim, const int64_t *shape, phx_rng *rng, phx_dtype dt, phx_device dev);
/* (n, m) with ones on the diagonal (m -1: n, as torch.eye(n)). */
phx_tensor *phx_eye(int64_t n, int64_t m, phx_dtype dt, phx_device dev);

/* ---- Conversion ---- */

/* t converted to dt (torch's t.to(dtype)): f32 -> f16/bf16 rounds to
 * nearest even. Between float dtypes the gradient is converted back to t's
 * dtype; to or from an integer dtype nothing is recorded. t itself (one
 * more reference, owned as a result) when it already has dt. */
phx_tensor *phx_to_dtype(const phx_tensor *t, phx_dtype dt);

/* ---- Debugging ---- */

/* Prints t as PyTorch 1.13's repr does ("tensor([[1.0000, 2.0000], ...]")
 * with its suffixes: device off the CPU, dtype other than f32 and i64,
 * grad_fn (Phalanx's operation name) or requires_grad; more than 1000
 * elements are elided in the middle of each dim (the first and last 3)
 * and then the size follows too. Copies device tensors to the host. */
phx_status phx_tensor_print(const phx_tensor *t, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
