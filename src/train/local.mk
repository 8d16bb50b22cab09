# src/train — losses, optimizers, LR schedules, clipping, metrics; the
# first examples and the step benchmark (doc/guide/training.md). Tests: t/train/.
libphalanx_internal_la_SOURCES += src/train/loss.c src/train/optim.c src/train/optim-impl.h \
	src/train/sgd.c src/train/adam.c src/train/metrics.c src/train/tensorboard.c src/train/tensorboard.h \
	src/train/progress.c src/train/metrics-impl.h
# training-loop tools (doc/guide/training.md)
libphalanx_internal_la_SOURCES += src/train/schedule.c src/train/clip.c

train_tests = t/train/parity t/train/api t/train/alloc t/train/sched
check_PROGRAMS += $(train_tests)
TESTS += $(train_tests) t/train/examples.sh
EXTRA_DIST += t/train/examples.sh
t_train_parity_LDADD = libphalanx.la -lm
t_train_api_LDADD = libphalanx.la -lm
t_train_alloc_LDADD = libphalanx.la
# LR schedules against PyTorch (t/ref/gpt_sched.safetensors).
t_train_sched_LDADD = libphalanx.la -lm

# The first examples (make demo runs them through examples/demo.sh).
train_examples = examples/linear_regression examples/fashion_mnist examples/custom_module
noinst_PROGRAMS += $(train_examples)
demo_programs += $(train_examples)
examples_linear_regression_LDADD = libphalanx.la
examples_fashion_mnist_LDADD = libphalanx.la
examples_custom_module_LDADD = libphalanx.la -lm

# make bench: training steps/s beside PyTorch (bench/run.sh).
noinst_PROGRAMS += bench/step
bench_programs += bench/step
bench_step_LDADD = libphalanx.la
# make bench: DDP efficiency at 8-512 ranks on paper, from the measured
# all-reduce and bench/step's GPT and CNN (doc/maint/bench.md).
noinst_PROGRAMS += bench/scale
bench_programs += bench/scale
bench_scale_LDADD = libphalanx.la -lm
# Helpers the bench programs include (bench/step, scale, ddp, dp, amp, gpu).
EXTRA_DIST += bench/bench-util.h bench/bench-tsv.h bench/bench-peak.h bench/bench-models.h

# PyTorch scripts and the reference data they wrote (t/ref).
EXTRA_DIST += bench/torch/st_io.py bench/torch/parity.py bench/torch/ckpt_interop.py bench/torch/step.py \
	t/ref/parity_sgd.safetensors t/ref/parity_adamw.safetensors t/ref/parity_adam_ams.safetensors \
	t/ref/parity_gelu_ln.safetensors t/ref/torch_ckpt.safetensors t/ref/torch_ckpt_io.safetensors \
	t/ref/torch_ckpt_pkg.safetensors t/ref/torch_ckpt_f16.safetensors t/ref/torch_ckpt_bf16.safetensors \
	t/ref/torch_ckpt_f64.safetensors

# Metrics as JSON Lines (include/phalanx/metrics.h); the test reads them
# back with jansson.
check_PROGRAMS += t/train/metrics
TESTS += t/train/metrics
t_train_metrics_CPPFLAGS = $(AM_CPPFLAGS) $(JANSSON_CFLAGS)
t_train_metrics_LDADD = libphalanx.la $(JANSSON_LIBS)

# Errors that name the cause (constructors, options, foreign files).
check_PROGRAMS += t/train/errors
TESTS += t/train/errors
t_train_errors_LDADD = libphalanx.la -lm

# The README's complete program, extracted, compiled and run.
TESTS += t/train/readme_program.sh
EXTRA_DIST += t/train/readme_program.sh

# TensorBoard event files: CRC-32C, framing and records decoded by the test
# (links the internals for px_crc32c); TensorBoard's own reader reads what
# examples/fashion_mnist --tensorboard writes (skips without tensorboard).
check_PROGRAMS += t/train/tensorboard
TESTS += t/train/tensorboard t/train/tensorboard_read.sh
EXTRA_DIST += t/train/tensorboard_read.sh t/train/tb_read.py
t_train_tensorboard_LDADD = libphalanx-internal.la

# The progress helper (include/phalanx/progress.h): lines, records, resume.
check_PROGRAMS += t/train/progress
TESTS += t/train/progress
t_train_progress_CPPFLAGS = $(AM_CPPFLAGS) $(JANSSON_CFLAGS)
t_train_progress_LDADD = libphalanx.la $(JANSSON_LIBS)
