# src/tensor — tensors, devices and kernel dispatch (the CPU device: kernels/), RNG
# (doc/reference/tensors.md). Tests: t/tensor/ (of the CPU device's kernels too).
libphalanx_internal_la_SOURCES += src/tensor/tensor.c src/tensor/storage-cache.c src/tensor/tensor-ops.c src/tensor/tensor-impl.h \
	src/tensor/device.c src/tensor/device-impl.h src/tensor/rng.c

# tests
tensor_tests = t/tensor/half t/tensor/gemm t/tensor/tensor t/tensor/device t/tensor/rng t/tensor/act t/tensor/isa t/tensor/ops t/tensor/nn t/tensor/optim t/tensor/torch t/tensor/cuda t/tensor/conv t/tensor/hugepage
check_PROGRAMS += $(tensor_tests)
TESTS += $(tensor_tests)
# The compute-bound kernels on each instruction set this CPU has.
TESTS += t/tensor/isa_env.sh
EXTRA_DIST += t/tensor/isa_env.sh
t_tensor_half_LDADD = libphalanx.la -lm
t_tensor_gemm_SOURCES = t/tensor/gemm.c t/core-util.h
t_tensor_gemm_LDADD = libphalanx-internal.la -lm
TESTS += t/tensor/gemm_isa.sh
EXTRA_DIST += t/tensor/gemm_isa.sh
t_tensor_tensor_LDADD = libphalanx.la -lm
t_tensor_device_LDADD = libphalanx.la $(BLAS_LIBS) $(DNNL_LIBS) -lm
t_tensor_rng_LDADD = libphalanx.la -lm
# The tests that force a kernel's instruction-set path (px_cpu_isa_set) or
# call px_ kernels directly link the internals (one copy of the library).
t_tensor_act_SOURCES = t/tensor/act.c t/core-util.h
t_tensor_act_LDADD = libphalanx-internal.la -lm
t_tensor_hugepage_LDADD = libphalanx-internal.la -lm
t_tensor_isa_SOURCES = t/tensor/isa.c t/core-util.h
t_tensor_isa_LDADD = libphalanx-internal.la -lm
t_tensor_ops_SOURCES = t/tensor/ops.c t/core-util.h
t_tensor_ops_LDADD = libphalanx-internal.la -lm
t_tensor_nn_SOURCES = t/tensor/nn.c t/core-util.h
t_tensor_nn_LDADD = libphalanx.la -lm
t_tensor_optim_SOURCES = t/tensor/optim.c t/core-util.h
t_tensor_optim_LDADD = libphalanx.la -lm
t_tensor_torch_SOURCES = t/tensor/torch.c t/core-util.h
t_tensor_torch_LDADD = libphalanx.la -lm
t_tensor_cuda_SOURCES = t/tensor/cuda.c t/core-util.h
t_tensor_cuda_LDADD = libphalanx.la -lm
t_tensor_conv_SOURCES = t/tensor/conv.c t/core-util.h
t_tensor_conv_LDADD = libphalanx.la -lm
EXTRA_DIST += t/ref/core_kernels.txt bench/torch/core_kernels.py

# make bench: the CPU kernel table beside PyTorch (bench/torch/kernels.py).
noinst_PROGRAMS += bench/kernels
bench_kernels_LDADD = libphalanx.la
bench_programs += bench/kernels
EXTRA_DIST += bench/torch/kernels.py
