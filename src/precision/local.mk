# src/precision — precision policies (loaded from the plugins), the loss
# scaler and the mixed-precision example. Tests: t/precision/.
libphalanx_internal_la_SOURCES += src/precision/precision.c src/precision/scaler.c src/precision/precision-impl.h

amp_tests = t/precision/policy t/precision/scaler t/precision/gemm t/precision/overflow t/precision/checkpoint t/precision/ddp t/precision/mnist t/precision/half_nn t/precision/half_rows t/precision/half_bn t/precision/half_ln
check_PROGRAMS += $(amp_tests)
TESTS += $(amp_tests) t/precision/example.sh
t_precision_policy_LDADD = libphalanx.la
t_precision_scaler_LDADD = libphalanx.la
t_precision_gemm_LDADD = libphalanx.la -lm
t_precision_overflow_LDADD = libphalanx.la -lm
t_precision_checkpoint_LDADD = libphalanx.la
t_precision_ddp_LDADD = libphalanx.la -lm
t_precision_mnist_LDADD = libphalanx.la -lm
# calls the px_ kernels and forces their ISA path: links the internals
t_precision_half_nn_SOURCES = t/precision/half_nn.c t/core-util.h
t_precision_half_nn_LDADD = libphalanx-internal.la -lm
t_precision_half_rows_SOURCES = t/precision/half_rows.c t/core-util.h
t_precision_half_rows_LDADD = libphalanx-internal.la -lm
t_precision_half_bn_SOURCES = t/precision/half_bn.c t/core-util.h
t_precision_half_bn_LDADD = libphalanx-internal.la -lm
t_precision_half_ln_SOURCES = t/precision/half_ln.c t/core-util.h
t_precision_half_ln_LDADD = libphalanx-internal.la -lm
EXTRA_DIST += t/precision/example.sh t/ref/amp_scales.txt bench/torch/scaler.py

# The seed's mixed-precision program (make demo runs it).
noinst_PROGRAMS += examples/amp
examples_amp_LDADD = libphalanx.la
demo_programs += examples/amp

# make bench: policies side by side, beside PyTorch fp32 / CPU autocast bf16.
noinst_PROGRAMS += bench/amp
bench_amp_LDADD = libphalanx.la
bench_programs += bench/amp
EXTRA_DIST += bench/torch/amp.py
