#!/usr/bin/env python3
"""Reference data for the elementwise, reduction, matmul and loss tensor
operations (t/ops/*.c): for each case, f32 inputs (drawn here, stored
exactly), a weight w of the output's shape, the output and the gradients
of sum(out * w) with respect to each float input, computed by PyTorch 1.13
in float64 from the f32 inputs.

Run with /usr/bin/python3 (torch 1.13):
    /usr/bin/python3 bench/torch/ops_math_ref.py > t/ref/ops_math.txt
Format: see t/ops/gradcheck.h."""
import sys
import torch

torch.manual_seed(29)
out = sys.stdout


def emit(role, name, t):
    t = t.detach()
    if t.dtype == torch.int64:
        dt, vals = "i64", " ".join(str(int(v)) for v in t.reshape(-1).tolist())
    else:
        dt = "f32"
        vals = " ".join("%.9g" % v for v in t.double().reshape(-1).tolist())
    dims = " ".join(str(d) for d in t.shape)
    out.write("%s %s %s %d %s %s\n" % (role, name, dt, t.dim(), dims, vals))


def f32(*shape, lo=None, hi=None, away=None):
    x = torch.randn(*shape)
    if lo is not None:
        x = torch.rand(*shape) * (hi - lo) + lo
    if away is not None:  # keep |x| >= away (kinks at 0)
        x = torch.where(x.abs() < away, torch.sign(x + 1e-9) * away + x, x)
    return x.float()


def case(name, fn, ins, grad_of=None, args=()):
    """ins: list of (name, tensor); tensors that are float and listed in
    grad_of (default: every float input) get gradients. args: (name,
    tensor) pairs written as "arg" lines for the test (fn has them bound)."""
    out.write("case %s\n" % name)
    xs = []
    for n, t in args:
        emit("arg", n, t)
    for n, t in ins:
        emit("in", n, t)
        if t.dtype == torch.float32:
            want = grad_of is None or n in grad_of
            xs.append(t.double().requires_grad_(want))
        else:
            xs.append(t)
    y = fn(*xs)
    if isinstance(y, tuple):
        y, extra = y
        emit("out", "indices", extra)
    w = torch.randn(y.shape, dtype=torch.float64).float().double()
    emit("w", "w", w)
    emit("out", "out", y)
    if y.dtype.is_floating_point and any(x.requires_grad for x in xs if torch.is_tensor(x) and x.dtype == torch.float64):
        (y * w).sum().backward()
        for (n, _), x in zip(ins, xs):
            if x.dtype == torch.float64 and x.requires_grad:
                emit("grad", n, x.grad if x.grad is not None else torch.zeros_like(x))
    out.write("end\n")


def main():
    out.write("# made by bench/torch/ops_math_ref.py with torch %s (float64 from f32 inputs)\n" % torch.__version__)
    # ---- elementwise, broadcasting in both operands and size-1 dims
    case("add", lambda a, b: a + b, [("a", f32(2, 1, 4)), ("b", f32(3, 1))])
    case("sub", lambda a, b: a - b, [("a", f32(4)), ("b", f32(3, 1))])
    case("mul", lambda a, b: a * b, [("a", f32(2, 3, 1)), ("b", f32(1, 4))])
    case("div", lambda a, b: a / b, [("a", f32(3, 4)), ("b", f32(4, lo=0.5, hi=2.0))])
    case("pow", lambda a, b: a ** b, [("a", f32(3, 4, lo=0.5, hi=2.0)), ("b", f32(3, 1, lo=-1.5, hi=2.5))])
    a = f32(3, 4)
    b = f32(4)
    a[0, 1] = b[1]
    a[2, 3] = b[3]  # ties: the gradient splits half and half
    case("maximum_ties", torch.maximum, [("a", a), ("b", b)])
    case("minimum_ties", torch.minimum, [("a", a), ("b", b)])
    case("maximum", torch.maximum, [("a", f32(2, 3, 4)), ("b", f32(3, 1))])
    case("minimum", torch.minimum, [("a", f32(3, 1)), ("b", f32(2, 1, 4))])
    cond = (torch.rand(3, 1) > 0.5).float()
    cond[0, 0], cond[1, 0] = 1, 0
    case("where", lambda c, a, b: torch.where(c != 0, a, b), [("cond", cond), ("a", f32(3, 4)), ("b", f32(4))], grad_of=["a", "b"])
    c1, c2 = f32(2, 3), f32(3)
    c2[1] = c1[0, 1]
    for op in ["eq", "ne", "lt", "le", "gt", "ge"]:
        case(op, lambda a, b, op=op: getattr(torch, op)(a, b).double(), [("a", c1), ("b", c2)], grad_of=[])
    # scalar variants
    case("add_scalar", lambda a: a + 2.5, [("a", f32(2, 3))])
    case("sub_scalar", lambda a: a - 2.5, [("a", f32(2, 3))])
    case("mul_scalar", lambda a: a * -1.5, [("a", f32(2, 3))])
    case("div_scalar", lambda a: a / 3.0, [("a", f32(2, 3))])
    case("rsub_scalar", lambda a: 2.0 - a, [("a", f32(2, 3))])
    case("pow_scalar", lambda a: a ** 3.0, [("a", f32(2, 3))])
    case("pow_scalar_half", lambda a: a ** 0.5, [("a", f32(2, 3, lo=0.5, hi=2.0))])
    case("gt_scalar", lambda a: (a > 0.25).double(), [("a", f32(2, 3))], grad_of=[])
    # unary
    case("neg", lambda a: -a, [("a", f32(2, 3))])
    case("exp", torch.exp, [("a", f32(2, 3))])
    case("ln", torch.log, [("a", f32(2, 3, lo=0.2, hi=3.0))])
    case("sqrt", torch.sqrt, [("a", f32(2, 3, lo=0.2, hi=3.0))])
    case("rsqrt", torch.rsqrt, [("a", f32(2, 3, lo=0.2, hi=3.0))])
    case("abs", torch.abs, [("a", f32(2, 3, away=0.05))])
    x = f32(3, 4)
    x = torch.where((x + 0.5).abs() < 0.05, x + 0.1, x)
    x = torch.where((x - 0.5).abs() < 0.05, x + 0.1, x)
    case("clamp", lambda a: torch.clamp(a, -0.5, 0.5), [("a", x)])
    case("clamp_lo", lambda a: torch.clamp(a, min=-0.5), [("a", x)])
    case("relu", torch.relu, [("a", f32(3, 4, away=0.05))])
    case("gelu", torch.nn.functional.gelu, [("a", f32(3, 4))])
    case("gelu_tanh", lambda a: torch.nn.functional.gelu(a, approximate="tanh"), [("a", f32(3, 4))])
    case("tanh", torch.tanh, [("a", f32(3, 4))])
    case("sigmoid", torch.sigmoid, [("a", f32(3, 4))])
    # ---- reductions
    x = f32(2, 3, 4)
    case("sum_d1", lambda a: a.sum(1), [("a", x)])
    case("sum_d02_keep", lambda a: a.sum((0, 2), keepdim=True), [("a", x)])
    case("sum_all", lambda a: a.sum(), [("a", x)])
    case("mean_dm1", lambda a: a.mean(-1), [("a", x)])
    case("mean_d01_keep", lambda a: a.mean((0, 1), keepdim=True), [("a", x)])
    case("var_d1", lambda a: a.var(1), [("a", x)])
    case("var_all_c0", lambda a: a.var(unbiased=False), [("a", x)])
    case("logsumexp_d1", lambda a: torch.logsumexp(a, 1), [("a", x)])
    case("logsumexp_d02_keep", lambda a: torch.logsumexp(a, (0, 2), keepdim=True), [("a", x)])
    case("max_d1", lambda a: torch.max(a, 1), [("a", x)])
    case("min_d0_keep", lambda a: torch.min(a, 0, keepdim=True), [("a", x)])
    case("max_d2", lambda a: torch.max(a, 2), [("a", x)])
    case("softmax_d0", lambda a: torch.softmax(a, 0), [("a", x)])
    case("softmax_d1", lambda a: torch.softmax(a, 1), [("a", x)])
    case("softmax_d2", lambda a: torch.softmax(a, 2), [("a", x)])
    case("log_softmax_d1", lambda a: torch.log_softmax(a, 1), [("a", x)])
    case("log_softmax_d2", lambda a: torch.log_softmax(a, 2), [("a", x)])
    case("sum_size1", lambda a: a.sum(1), [("a", f32(3, 1, 2))])
    # ---- matmul (torch.matmul's cases)
    mm = [("dot", (4,), (4,)), ("vecmat", (3,), (3, 4)), ("matvec", (2, 3), (3,)), ("mm", (2, 3), (3, 4)),
          ("bmm", (2, 2, 3), (2, 3, 4)), ("bcast", (2, 1, 2, 3), (3, 3, 4)), ("fold", (2, 2, 3), (3, 4)),
          ("vec_batched", (3,), (2, 3, 4)), ("batched_vec", (2, 2, 3), (3,)), ("bcast_left", (2, 3), (2, 3, 4)),
          ("bcast_one", (1, 2, 3), (2, 3, 4))]
    for name, sa, sb in mm:
        case("matmul_" + name, torch.matmul, [("a", f32(*sa)), ("b", f32(*sb))])
    # ---- losses
    case("cross_entropy", lambda a, t: torch.nn.functional.cross_entropy(a, t),
         [("a", f32(4, 5)), ("target", torch.tensor([1, 0, 4, 2]))])
    case("mse_loss", lambda a, t: torch.nn.functional.mse_loss(a, t), [("a", f32(3, 4)), ("target", f32(3, 4))],
         grad_of=["a"])
    # ---- cross_entropy with its keyword arguments (t/ops/cross_entropy.c):
    # weight, ignore_index, reduction, label_smoothing, alone and together
    ce_cases()


REDUCTIONS = {"mean": 0, "sum": 1, "none": 2}  # phx_reduction


def ce_case(name, logits, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """F.cross_entropy(logits, target, ...); the options as arg lines
    (ignore_index and reduction i64, label_smoothing f32), the weight as an
    input without a gradient."""
    args = [("ignore_index", torch.tensor(ignore_index)), ("reduction", torch.tensor(REDUCTIONS[reduction])),
            ("label_smoothing", torch.tensor(label_smoothing, dtype=torch.float32))]
    ins = [("a", logits), ("target", target)] + ([("weight", weight)] if weight is not None else [])

    def fn(a, t, w=None):
        return torch.nn.functional.cross_entropy(a, t, weight=w, ignore_index=ignore_index, reduction=reduction,
                                                 label_smoothing=label_smoothing)

    case(name, fn, ins, grad_of=["a"], args=args)


def ce_cases():
    x = f32(6, 5)
    t = torch.tensor([1, -100, 4, 0, -100, 2])
    tk = torch.tensor([3, 0, 4, 0, 1, 2])  # no -100: weights and smoothing alone
    w = f32(5, lo=0.2, hi=2.0)
    ce_case("ce_default", x, tk)
    for red in ("mean", "sum", "none"):
        ce_case("ce_ignore_" + red, x, t, reduction=red)
        ce_case("ce_weight_" + red, x, tk, weight=w, reduction=red)
        ce_case("ce_weight_ignore_" + red, x, t, weight=w, reduction=red)
        ce_case("ce_smooth_" + red, x, tk, reduction=red, label_smoothing=0.1)
        ce_case("ce_smooth_ignore_" + red, x, t, reduction=red, label_smoothing=0.15)
        ce_case("ce_combined_" + red, x, t, weight=w, reduction=red, label_smoothing=0.2)
    ce_case("ce_smooth_weight_mean", x, tk, weight=w, label_smoothing=0.3)
    ce_case("ce_smooth_one", x, t, weight=w, label_smoothing=1.0)
    # ignore_index a real class (0, the usual padding token)
    ce_case("ce_ignore_class0", x, tk, weight=w, ignore_index=0, label_smoothing=0.1)
    # every target ignored: mean is NaN (0/0) with a zero gradient; sum 0
    ti = torch.full((6,), -100)
    ce_case("ce_every_ignored_mean", x, ti)
    ce_case("ce_every_ignored_smooth_weight_mean", x, ti, weight=w, label_smoothing=0.2)
    ce_case("ce_every_ignored_sum", x, ti, reduction="sum", label_smoothing=0.2)
    # PyTorch's K-dim form (n, classes, d1, ...) and the unbatched (classes)
    xk = f32(2, 4, 3)
    tk3 = torch.tensor([[1, -100, 3], [0, 2, -100]])
    wk = f32(4, lo=0.2, hi=2.0)
    ce_case("ce_kdim_mean", xk, tk3, weight=wk, label_smoothing=0.1)
    ce_case("ce_kdim_none", xk, tk3, weight=wk, reduction="none", label_smoothing=0.1)
    ce_case("ce_kdim2_sum", f32(2, 3, 2, 2), torch.tensor([[[0, 2], [1, -100]], [[2, 2], [0, 1]]]), reduction="sum",
            label_smoothing=0.05)
    ce_case("ce_unbatched", f32(5), torch.tensor(3), weight=w, label_smoothing=0.1)
    ce_case("ce_unbatched_none", f32(5), torch.tensor(-100), reduction="none")
    # the mean divides once: kept weights summing to 0 give +-inf, and
    # denormal weights with smoothing stay finite
    ce_case("ce_weight_sum_zero_mean", f32(3, 3), torch.tensor([0, 1, 2]), weight=torch.tensor([1.0, -1.0, 0.0]))
    ce_case("ce_denormal_weight_smooth_mean", f32(2, 2), torch.tensor([0, 1]),
            weight=torch.tensor([1e-40, 1e-40]), label_smoothing=1.0)
    # a den of 0 with smoothing: PyTorch divides each part, then weighs
    ce_case("ce_weight_zero_smooth_mean", f32(4, 3), torch.tensor([1, 1, 1, 1]),
            weight=torch.tensor([1.0, 0.0, 3.0]), label_smoothing=0.3)
    ce_case("ce_weight_sum_zero_smooth_one", f32(4, 3), torch.tensor([0, 1, 2, 2]),
            weight=torch.tensor([1.0, -1.0, 0.0]), label_smoothing=1.0)


main()
