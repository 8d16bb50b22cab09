# src/precision — precision policies (loaded from the plugins), the loss
# scaler, their tests, and the mixed-precision example.
libphalanx_la_SOURCES += src/precision/precision.c src/precision/scaler.c src/precision/precision-impl.h

amp_tests = t/amp_policy t/amp_scaler t/amp_gemm t/amp_overflow t/amp_checkpoint t/amp_ddp t/amp_mnist
check_PROGRAMS += $(amp_tests)
TESTS += $(amp_tests) t/amp_example.sh
t_amp_policy_LDADD = libphalanx.la
t_amp_scaler_LDADD = libphalanx.la
t_amp_gemm_LDADD = libphalanx.la -lm
t_amp_overflow_LDADD = libphalanx.la -lm
t_amp_checkpoint_LDADD = libphalanx.la
t_amp_ddp_LDADD = libphalanx.la -lm
t_amp_mnist_LDADD = libphalanx.la -lm
EXTRA_DIST += t/amp_example.sh t/data/amp_scales.txt bench/torch/scaler.py

# The seed's mixed-precision program (make demo runs it).
noinst_PROGRAMS += examples/amp
examples_amp_LDADD = libphalanx.la
demo_programs += examples/amp

# make bench: policies side by side, beside PyTorch fp32 / CPU autocast bf16.
noinst_PROGRAMS += bench/amp
bench_amp_LDADD = libphalanx.la
bench_programs += bench/amp
EXTRA_DIST += bench/torch/amp.py
