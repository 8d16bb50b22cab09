#!/usr/bin/python3
"""PyTorch's side of bench/kernels: the same CPU ops at the same sizes,
one thread (torch.set_num_threads). Prints "RESULT <name> <ms>" per op,
the best of --repeats timed runs of at least --seconds each."""
import argparse
import time

import torch
import torch.nn.functional as F


def ops():
    torch.manual_seed(0)
    n = 1 << 22
    x = torch.randn(n)
    dy = torch.randn(n)
    y = torch.empty(n)
    a = torch.randn(1024, 1024)
    b = torch.randn(1024, 1024)
    c = torch.empty(1024, 1024)
    ab, bb = a.bfloat16(), b.bfloat16()
    h = torch.randn(4096, 1024)
    hd = torch.randn(4096, 1024)
    bias = torch.randn(1024)
    w = torch.ones(1024, requires_grad=True)
    bln = torch.zeros(1024, requires_grad=True)
    hx = h.clone().requires_grad_(True)
    logits = torch.randn(4096, 1000, requires_grad=True)
    labels = torch.randint(0, 1000, (4096,))
    p = torch.nn.Parameter(torch.randn(n))
    p.grad = torch.randn(n)
    adam = torch.optim.Adam([p], lr=1e-3, foreach=False)
    xr = x.clone().requires_grad_(True)
    # The GPT's shapes (bench/kernels.c): batch 16 x 4 heads, T 128, head dim 32.
    q = torch.randn(64, 128, 32)
    k = torch.randn(64, 128, 32)
    scale = 32 ** -0.5
    att = torch.randn(64, 128, 128)
    datt = torch.randn(64, 128, 128)
    scores = torch.empty(64, 128, 128)
    causal = torch.ones(128, 128).triu(1).bool()
    table = torch.randn(4096, 256)
    tok = torch.randint(0, 4096, (8192,))
    demb = torch.randn(8192, 256)

    def softmax_fb():
        # nanoGPT's eager attention: scale, mask, softmax; then its backward.
        yy = F.softmax((att * scale).masked_fill(causal, float("-inf")), dim=-1)
        torch._softmax_backward_data(datt, yy, -1, yy.dtype)

    def embedding_fb():
        F.embedding(tok, table)
        torch.ops.aten.embedding_dense_backward(demb, tok, 4096, -1, False)
    xb, xh = x.bfloat16(), x.half()

    # examples/cnn's layers at batch 128 (bench/kernels.c): forward, and
    # forward + backward (data unless the input is the image, weight, bias).
    def conv(n, c, h, k, kern, pad):
        cx = torch.randn(n, c, h, h)
        cw = torch.randn(k, c, kern, kern)
        cb = torch.randn(k)
        oh = h + 2 * pad - kern + 1
        cdy = torch.randn(n, k, oh, oh)
        fwd = lambda: F.conv2d(cx, cw, cb, padding=pad)

        def fb():
            F.conv2d(cx, cw, cb, padding=pad)
            torch.ops.aten.convolution_backward(cdy, cx, cw, [k], [1, 1], [pad, pad], [1, 1], False, [0, 0], 1,
                                                [c > 1, True, True])
        return fwd, fb
    conv1, conv1_fb = conv(128, 1, 28, 32, 3, 0)
    conv2, conv2_fb = conv(128, 32, 13, 64, 3, 0)
    conv3, conv3_fb = conv(32, 64, 28, 64, 3, 1)
    conv11, conv11_fb = conv(128, 64, 14, 128, 1, 0)
    bx = torch.randn(128, 64, 11, 11, requires_grad=True)
    bdy = torch.randn(128, 64, 11, 11)
    bw = torch.ones(64, requires_grad=True)
    bbias = torch.zeros(64, requires_grad=True)
    rm, rv = torch.zeros(64), torch.ones(64)

    def bn_fb():
        out = F.batch_norm(bx, rm, rv, bw, bbias, training=True)
        out.backward(bdy)
        bx.grad = bw.grad = bbias.grad = None
    mdy = torch.randn(128, 64, 5, 5)

    def maxpool_fb():
        out = F.max_pool2d(bx, 2)
        out.backward(mdy)
        bx.grad = None

    def gelu_bwd():
        yy = F.gelu(xr)
        yy.backward(dy)
        xr.grad = None

    def ln():
        out = F.layer_norm(hx, (1024,), w, bln, 1e-5)
        out.backward(hd)
        hx.grad = w.grad = bln.grad = None

    def xent():
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        logits.grad = None

    return [
        ("gemm_f32_1024", lambda: torch.mm(a, b, out=c)),
        ("gemm_bf16_1024", lambda: torch.mm(ab, bb)),
        ("relu_4M", lambda: torch.clamp_min(x, 0, out=y)),
        ("gelu_4M", lambda: torch._C._nn.gelu(x, out=y)),
        ("gelu_fwd_bwd_4M", gelu_bwd),
        ("gelu_tanh_4M", lambda: torch._C._nn.gelu(x, approximate="tanh", out=y)),
        ("tanh_4M", lambda: torch.tanh(x, out=y)),
        ("sigmoid_4M", lambda: torch.sigmoid(x, out=y)),
        ("axpby_4M", lambda: y.mul_(0.5).add_(x, alpha=2.0)),
        ("bias_add_4096x1024", lambda: h.add_(bias)),
        ("bias_grad_4096x1024", lambda: hd.sum(0)),
        ("layernorm_fwd_bwd_4096x1024", ln),
        ("xent_fwd_bwd_4096x1000", xent),
        ("adam_4M", adam.step),
        ("cast_f32_bf16_4M", lambda: x.bfloat16()),
        ("cast_f32_f16_4M", lambda: x.half()),
        ("cast_bf16_f32_4M", lambda: xb.float()),
        ("cast_f16_f32_4M", lambda: xh.float()),
        ("uniform_4M", lambda: y.uniform_(-1, 1)),
        ("gemm_batched_64x128x128x32", lambda: torch.baddbmm(att, q, k.transpose(1, 2), beta=0, alpha=scale, out=scores)),
        ("softmax_causal_fwd_bwd_8192x128", softmax_fb),
        ("embedding_fwd_bwd_8192x256", embedding_fb),
        ("conv3x3_fwd_128x1x28x28_32", conv1),
        ("conv3x3_fwd_bwd_128x1x28x28_32", conv1_fb),
        ("conv3x3_fwd_128x32x13x13_64", conv2),
        ("conv3x3_fwd_bwd_128x32x13x13_64", conv2_fb),
        ("conv3x3_fwd_32x64x28x28_64", conv3),
        ("conv3x3_fwd_bwd_32x64x28x28_64", conv3_fb),
        ("conv1x1_fwd_128x64x14x14_128", conv11),
        ("conv1x1_fwd_bwd_128x64x14x14_128", conv11_fb),
        ("batchnorm_fwd_bwd_128x64x11x11", bn_fb),
        ("maxpool2_fwd_bwd_128x64x11x11", maxpool_fb),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=0.25)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name, fn in ops():
        if args.only and args.only not in name:
            continue
        fn()
        best = float("inf")
        for _ in range(args.repeats):
            k, t0 = 0, time.perf_counter()
            while True:
                fn()
                k += 1
                dt = time.perf_counter() - t0
                if dt >= args.seconds:
                    break
            best = min(best, dt / k)
        print("RESULT %s %.6f" % (name, best * 1e3), flush=True)


if __name__ == "__main__":
    main()
