#!/usr/bin/python3
"""Reference scale sequences for t/precision/scaler.c: PyTorch 1.13's own
torch.cuda.amp.GradScaler (its step/unscale_/update logic, unchanged),
driven on the CPU.

torch 1.13 ships the two AMP kernels for CUDA only, and GradScaler
disables itself without CUDA. So this script (1) tells GradScaler that AMP
is available, (2) lets its per-device replicator accept CPU tensors, and
(3) supplies the two kernels as line-for-line ports of ATen's CUDA code
(aten/src/ATen/native/cuda/AmpKernels.cu, 1.13). Everything else --
inv_scale in double, the skip decision, the update's call order -- is
GradScaler's own code.

Each step: zero the grads, set every gradient to 0.25 * scale (what a
backward of the scaled loss would give), plant inf or NaN in one element
on overflow steps, scaler.step(opt), scaler.update(). Printed per step:
the event, whether the optimizer stepped, the scale and growth tracker
after update, and weight[0, 0] after the step (long runs print only their
first and last steps).

Usage: bench/torch/scaler.py > t/ref/amp_scales.txt
"""
import math
import torch
import torch.cuda.amp.grad_scaler as gs


def non_finite_check_and_unscale_(grads, found_inf, inv_scale):
    # _amp_non_finite_check_and_unscale_cuda_: found_inf = 1 if any value is
    # not finite; every value is multiplied by inv_scale (unless it is 1).
    inv = inv_scale.item()
    for g in grads:
        if not bool(torch.isfinite(g).all()):
            found_inf.fill_(1.0)
        if inv != 1.0:
            g.mul_(inv_scale)


def update_scale_(scale, tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    # amp_update_scale_cuda_kernel: factors are double, the scale is float.
    if found_inf.item():
        scale.fill_(scale.item() * backoff_factor)
        tracker.fill_(0)
    else:
        successful = tracker.item() + 1
        if successful == growth_interval:
            new_scale = torch.tensor(scale.item() * growth_factor, dtype=torch.float32)
            if bool(torch.isfinite(new_scale)):
                scale.copy_(new_scale)
            tracker.fill_(0)
        else:
            tracker.fill_(successful)
    return scale


class CpuReplicator(gs._MultiDeviceReplicator):
    def __init__(self, master_tensor):
        self.master = master_tensor
        self._per_device_tensors = {}


gs.amp_definitely_not_available = lambda: False
gs._MultiDeviceReplicator = CpuReplicator
torch._amp_foreach_non_finite_check_and_unscale_ = non_finite_check_and_unscale_
torch._amp_update_scale_ = update_scale_

# c: clean, i: inf planted, n: NaN planted
PATTERN = "ccccccciccnccccccciiccccccccccnicccccc"
CONFIGS = [
    # init_scale, growth_factor, backoff_factor, growth_interval, pattern
    (65536.0, 2.0, 0.5, 3, PATTERN),
    (65536.0, 3.0, 0.3, 4, PATTERN),          # factors that need f32 rounding
    (2.0 ** 126, 2.0, 0.5, 1, "cccccicccc"),  # growth stops short of inf
    (1.0, 2.0, 0.5, 2000, "c" * 1999 + "cc" + "i"),  # PyTorch defaults, one growth
]


def run(init_scale, growth, backoff, interval, pattern):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    with torch.no_grad():
        model.weight.copy_(torch.arange(8, dtype=torch.float32).reshape(2, 4) / 8)
        model.bias.zero_()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = gs.GradScaler(init_scale=init_scale, growth_factor=growth,
                           backoff_factor=backoff, growth_interval=interval)
    assert scaler.is_enabled()
    scaler._lazy_init_scale_growth_tracker(torch.device("cpu"))
    print("config %.17g %.17g %.17g %d %d" % (init_scale, growth, backoff, interval, len(pattern)))
    for i, ev in enumerate(pattern):
        opt.zero_grad(set_to_none=False)
        w0_before = model.weight[0, 0].item()
        for p in model.parameters():
            p.grad = torch.full_like(p, 0.25) * scaler._scale  # scale(loss).backward()
        if ev == "i":
            model.bias.grad[1] = math.inf
        elif ev == "n":
            model.weight.grad[1, 2] = math.nan
        scaler.step(opt)
        stepped = model.weight[0, 0].item() != w0_before
        scaler.update()
        if len(pattern) > 100 and 3 <= i < len(pattern) - 6:
            continue  # long runs: the ends are what matter
        print("%d %s %d %.17g %d %.9g" % (i, ev, int(stepped), scaler.get_scale(),
                                          scaler._get_growth_tracker(), model.weight[0, 0].item()))


if __name__ == "__main__":
    print("# bench/torch/scaler.py, torch %s: step event stepped scale tracker weight[0,0]" % torch.__version__)
    for c in CONFIGS:
        run(*c)
