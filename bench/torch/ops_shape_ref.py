#!/usr/bin/python3
"""Reference data of the shape and index operations (torch 1.13, float64)
for t/ops/shape and t/ops/index, and of torch's tensor printing for
t/ops/print. Writes t/ref/ops_shape.txt (default) in lines of
whitespace-separated tokens:

    case NAME OP NARGS ARG...     the operation and its integer arguments
    in f NDIM SHAPE... [perm P...] : VALUES...
                                  a float input; with perm, the operation
                                  reads base.permute(P) (base holds VALUES)
    in i NDIM SHAPE... : VALUES...   an i64 input (indices)
    out NDIM SHAPE... : VALUES...    the result
    w : VALUES...                 the weight: the loss is sum(out * w)
    grad K : VALUES...            d loss / d (float input K's base)
    end

and, for printing:

    print NAME DTYPE REQ NDIM SHAPE... : VALUES...   (REQ: requires_grad)
    expect LINE                   one line of repr(t), in order
    endprint
    arange START END STEP DTYPE : VALUES...   torch.arange
    eye N M : VALUES...

Inputs are float32 values (written exactly) computed on in float64.
Usage: /usr/bin/python3 bench/torch/ops_shape_ref.py [t/ref/ops_shape.txt]
"""
import sys
import torch

G = torch.Generator().manual_seed(1234)


def f32(*shape, scale=1.0):
    """Random values exactly representable in float32, as float64."""
    return (torch.randn(tuple(shape), generator=G) * scale).float().double()


def fmt(vals):
    return " ".join("%.17g" % v for v in vals.reshape(-1).tolist())


def shape_str(t):
    return "%d %s" % (t.dim(), " ".join(str(s) for s in t.shape))


class Case:
    def __init__(self, name, op, args, fn, inputs):
        """inputs: list of (kind, tensor, perm or None); fn(*operands)."""
        self.name, self.op, self.args, self.fn, self.inputs = name, op, args, fn, inputs

    def write(self, out):
        operands, leaves = [], []
        for kind, t, perm in self.inputs:
            if kind == "f":
                leaf = t.clone().requires_grad_(True)
                leaves.append(leaf)
                operands.append(leaf.permute(*perm) if perm else leaf)
            else:
                operands.append(t)
        y = self.fn(*operands)
        out.write("case %s %s %d %s\n" % (self.name, self.op, len(self.args), " ".join(str(a) for a in self.args)))
        for kind, t, perm in self.inputs:
            p = (" perm " + " ".join(str(q) for q in perm)) if perm else ""
            out.write("in %s %s%s : %s\n" % (kind, shape_str(t), p, fmt(t)))
        out.write("out %s : %s\n" % (shape_str(y), fmt(y.detach())))
        if y.dtype.is_floating_point and y.requires_grad:
            w = f32(*y.shape)
            out.write("w : %s\n" % fmt(w))
            grads = torch.autograd.grad((y * w).sum(), leaves, allow_unused=True)
            for k, g in enumerate(grads):
                g = torch.zeros_like(leaves[k]) if g is None else g
                out.write("grad %d : %s\n" % (k, fmt(g)))
        out.write("end\n")


def F(*shape, perm=None):
    return ("f", f32(*shape), perm)


def I(values):
    return ("i", torch.tensor(values, dtype=torch.int64), None)


def cases():
    c = []
    # Views: reshape (with -1), flatten, squeeze, unsqueeze; permuted inputs
    # make the view's input a copy, size-1 dims appear throughout.
    c.append(Case("reshape", "reshape", [2, 3, -1], lambda x: x.reshape(3, -1), [F(2, 3, 2)]))
    c.append(Case("reshape_perm", "reshape", [1, -1], lambda x: x.reshape(-1), [F(3, 4, perm=(1, 0))]))
    c.append(Case("reshape_0d", "reshape", [0], lambda x: x.reshape(()), [F(1, 1)]))
    c.append(Case("flatten", "flatten", [1, 3], lambda x: x.flatten(1, 3), [F(2, 3, 1, 2)]))
    c.append(Case("flatten_all", "flatten", [0, -1], lambda x: x.flatten(), [F(2, 1, 3)]))
    c.append(Case("squeeze", "squeeze", [1], lambda x: x.squeeze(1), [F(3, 1, 2)]))
    c.append(Case("squeeze_keep", "squeeze", [0], lambda x: x.squeeze(0), [F(3, 1, 2)]))
    c.append(Case("squeeze_neg", "squeeze", [-1], lambda x: x.squeeze(-1), [F(2, 3, 1)]))
    c.append(Case("unsqueeze", "unsqueeze", [0], lambda x: x.unsqueeze(0), [F(3, 2)]))
    c.append(Case("unsqueeze_end", "unsqueeze", [-1], lambda x: x.unsqueeze(-1), [F(3, 2, perm=(1, 0))]))
    # Copies.
    c.append(Case("permute", "permute", [3, 2, 0, 1], lambda x: x.permute(2, 0, 1), [F(2, 3, 4)]))
    c.append(Case("permute4", "permute", [4, 3, 1, 0, 2], lambda x: x.permute(3, 1, 0, 2), [F(2, 1, 3, 2)]))
    c.append(Case("permute_perm", "permute", [2, 1, 0], lambda x: x.permute(1, 0), [F(3, 4, perm=(1, 0))]))
    c.append(Case("transpose", "transpose", [0, -1], lambda x: x.transpose(0, -1), [F(2, 3, 4)]))
    c.append(Case("narrow_view", "narrow", [0, 1, 2], lambda x: x.narrow(0, 1, 2), [F(4, 3)]))
    c.append(Case("narrow_view1", "narrow", [1, 1, 2], lambda x: x.narrow(1, 1, 2), [F(1, 4, 3)]))
    c.append(Case("narrow_inner", "narrow", [1, 1, 2], lambda x: x.narrow(1, 1, 2), [F(3, 4, 2)]))
    c.append(Case("narrow_neg", "narrow", [-1, -3, 2], lambda x: x.narrow(-1, -3, 2), [F(2, 5)]))
    c.append(Case("narrow_perm", "narrow", [0, 1, 2], lambda x: x.narrow(0, 1, 2), [F(3, 4, perm=(1, 0))]))
    c.append(Case("slice_step", "slice", [1, 1, 7, 2], lambda x: x[:, 1:7:2], [F(2, 8)]))
    c.append(Case("slice_neg", "slice", [0, -4, -1, 1], lambda x: x[-4:-1], [F(5, 2)]))
    c.append(Case("slice_clamp", "slice", [2, 2, 100, 3], lambda x: x[:, :, 2:100:3], [F(2, 1, 9)]))
    c.append(Case("slice_empty", "slice", [0, 3, 1, 1], lambda x: x[3:1], [F(4, 2)]))
    c.append(Case("cat0", "cat", [0], lambda a, b: torch.cat([a, b], 0), [F(2, 3), F(1, 3)]))
    c.append(Case("cat1", "cat", [1], lambda a, b, d: torch.cat([a, b, d], 1),
                  [F(2, 1, 2), F(3, 2, 2, perm=(1, 0, 2)), F(2, 2, 2)]))
    c.append(Case("cat_neg", "cat", [-1], lambda a, b: torch.cat([a, b], -1), [F(3, 2), F(3, 1)]))
    c.append(Case("stack0", "stack", [0], lambda a, b: torch.stack([a, b], 0), [F(2, 3), F(2, 3)]))
    c.append(Case("stack_mid", "stack", [1], lambda a, b, d: torch.stack([a, b, d], 1),
                  [F(2, 3), F(3, 2, perm=(1, 0)), F(2, 3)]))
    c.append(Case("stack_end", "stack", [-1], lambda a, b: torch.stack([a, b], -1), [F(2, 2), F(2, 2)]))
    c.append(Case("split_last", "split", [2, 1, 2], lambda x: torch.split(x, 2, 1)[2], [F(2, 5)]))
    c.append(Case("split_first", "split", [3, 0, 0], lambda x: torch.split(x, 3, 0)[0], [F(7, 2)]))
    c.append(Case("chunk", "chunk", [3, 0, 1], lambda x: torch.chunk(x, 3, 0)[1], [F(7, 2)]))
    c.append(Case("chunk_few", "chunk", [4, 1, 2], lambda x: torch.chunk(x, 4, 1)[2], [F(2, 6)]))
    c.append(Case("expand", "expand", [2, 3, 4], lambda x: x.expand(3, 4), [F(1, 4)]))
    c.append(Case("expand_new", "expand", [3, 2, -1, 3], lambda x: x.expand(2, -1, 3), [F(4, 1)]))
    c.append(Case("expand_perm", "expand", [3, 2, 3, 4], lambda x: x.expand(2, 3, 4), [F(4, 1, perm=(1, 0))]))
    c.append(Case("expand_both", "expand", [4, 2, 3, 2, 5], lambda x: x.expand(2, 3, 2, 5), [F(3, 1, 1)]))
    c.append(Case("contiguous", "contiguous", [], lambda x: x.contiguous(), [F(3, 2, perm=(1, 0))]))
    # Indexing (repeated indices accumulate in the gradient).
    c.append(Case("index_select0", "index_select", [0], lambda x, i: x.index_select(0, i),
                  [F(4, 3), I([2, 0, 2, 3])]))
    c.append(Case("index_select1", "index_select", [1], lambda x, i: x.index_select(1, i),
                  [F(2, 2, 5, perm=(0, 2, 1)), I([4, 4, 1])]))
    c.append(Case("index_select_last", "index_select", [-1], lambda x, i: x.index_select(-1, i),
                  [F(2, 3), I([1])]))
    c.append(Case("gather1", "gather", [1], lambda x, i: x.gather(1, i),
                  [F(3, 4), I([[0, 0, 3], [1, 2, 1], [3, 3, 3]])]))
    c.append(Case("gather0", "gather", [0], lambda x, i: x.gather(0, i),
                  [F(3, 2, perm=(1, 0)), I([[1, 0, 1], [0, 0, 0], [1, 1, 0], [0, 1, 1]])]))
    c.append(Case("scatter_add1", "scatter_add", [1], lambda x, i, s: x.scatter_add(1, i, s),
                  [F(2, 4), I([[0, 3, 0], [2, 2, 1]]), F(2, 3)]))
    c.append(Case("scatter_add0", "scatter_add", [0], lambda x, i, s: x.scatter_add(0, i, s),
                  [F(3, 2), I([[2, 0], [2, 2]]), F(2, 2, perm=(1, 0))]))
    c.append(Case("one_hot", "one_hot", [4], lambda i: torch.nn.functional.one_hot(i, 4).float(),
                  [I([[1, 3], [0, 1]])]))
    c.append(Case("one_hot_infer", "one_hot", [-1], lambda i: torch.nn.functional.one_hot(i, -1).float(),
                  [I([2, 0, 5])]))
    return c


def prints():
    """(name, dtype, requires_grad, tensor): repr() after torch's rules."""
    p = []
    p.append(("vec", torch.float32, False, torch.tensor([1.0, -2.5, 3.25])))
    p.append(("ints_as_float", torch.float32, False, torch.tensor([[1.0, 2.0], [-3.0, 40.0]])))
    p.append(("zeros", torch.float32, False, torch.zeros(2, 2)))
    p.append(("scalar", torch.float32, False, torch.tensor(1.5)))
    p.append(("sci", torch.float32, False, torch.tensor([1e-5, 1.0, 12345.0])))
    p.append(("sci_int", torch.float32, False, torch.tensor([1.0, 1e9])))
    p.append(("nonfinite", torch.float32, False, torch.tensor([float("nan"), float("inf"), -float("inf"), 0.5])))
    p.append(("i64", torch.int64, False, torch.tensor([[1, -20], [300, 4]])))
    p.append(("i32", torch.int32, False, torch.tensor([7, 8, 9], dtype=torch.int32)))
    p.append(("f16", torch.float16, False, torch.tensor([0.1, 2.0], dtype=torch.float16)))
    p.append(("bf16", torch.bfloat16, False, torch.tensor([0.1, 2.0], dtype=torch.bfloat16)))
    p.append(("leaf", torch.float32, True, torch.tensor([1.0, 2.0])))
    p.append(("wrap", torch.float32, False, f32(30).float()))
    p.append(("cube", torch.float32, False, f32(2, 3, 4).float()))
    p.append(("elided", torch.float32, False, f32(40, 30).float()))
    p.append(("elided3", torch.float32, False, f32(12, 10, 11).float()))
    p.append(("elided_int", torch.int64, False, torch.arange(2000).reshape(2, 1000)))
    p.append(("empty", torch.float32, False, torch.zeros(0, 3)))
    p.append(("empty1", torch.int64, False, torch.zeros(0, dtype=torch.int64)))
    return p


def aranges():
    """(start, end, step, dtype) of torch.arange, incl. inexact steps."""
    return [(0, 1, 0.1, torch.float32), (1, 2.5, 0.5, torch.float32), (5, -3, -1.5, torch.float32),
            (0, 10, 3, torch.int64), (-2.5, 2.5, 1, torch.int64),
            (0.5, 4, 0.7, torch.bfloat16)]


def main():
    out = open(sys.argv[1] if len(sys.argv) > 1 else "t/ref/ops_shape.txt", "w")
    out.write("# generated by bench/torch/ops_shape_ref.py with torch %s\n" % torch.__version__)
    for case in cases():
        case.write(out)
    for name, dt, req, t in prints():
        t = t.to(dt)
        if req:
            t.requires_grad_(True)
        vals = t.detach().double().reshape(-1)
        out.write("print %s %s %d %s : %s\n" % (name, str(dt).replace("torch.", ""), int(req), shape_str(t),
                                               " ".join(repr(v) for v in vals.tolist())))
        for line in repr(t).split("\n"):
            out.write("expect %s\n" % line)
        out.write("endprint\n")
    for start, end, step, dt in aranges():
        t = torch.arange(start, end, step, dtype=dt)
        out.write("arange %r %r %r %s : %s\n" % (start, end, step, str(dt).replace("torch.", ""),
                                                 " ".join(repr(v) for v in t.double().tolist())))
    out.write("eye 3 4 : %s\n" % fmt(torch.eye(3, 4)))
    out.write("eye 4 2 : %s\n" % fmt(torch.eye(4, 2)))


if __name__ == "__main__":
    main()
