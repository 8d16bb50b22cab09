# src/tensor — tensors, devices and kernel dispatch (the CPU device: kernels/), RNG
# (doc/tensors.md). Tests: t/core_*.
libphalanx_la_SOURCES += src/tensor/tensor.c src/tensor/tensor-ops.c src/tensor/tensor-impl.h \
	src/tensor/device.c src/tensor/device-impl.h src/tensor/rng.c

# core tests
core_tests = t/core_half t/core_gemm t/core_tensor t/core_device t/core_error t/core_rng t/core_act t/core_isa t/core_ops t/core_nn t/core_optim t/core_torch t/core_cuda
check_PROGRAMS += $(core_tests)
TESTS += $(core_tests)
# The compute-bound kernels on each instruction set this CPU has.
TESTS += t/core_isa_env.sh
EXTRA_DIST += t/core_isa_env.sh
t_core_half_LDADD = libphalanx.la -lm
t_core_gemm_SOURCES = t/core_gemm.c t/core-util.h kernels/cpu/gemm-loop.c
t_core_gemm_LDADD = libphalanx.la -lm
TESTS += t/core_gemm_isa.sh
EXTRA_DIST += t/core_gemm_isa.sh
t_core_tensor_LDADD = libphalanx.la -lm
t_core_device_LDADD = libphalanx.la $(BLAS_LIBS) $(DNNL_LIBS) -lm
t_core_error_LDADD = libphalanx.la -lm
t_core_rng_LDADD = libphalanx.la -lm
t_core_act_SOURCES = t/core_act.c t/core-util.h $(core_isa_kernels)
t_core_act_LDADD = libphalanx.la -lm
# the kernels whose instruction-set path the tests force (px_cpu_isa_set;
# t/core_ops adds elementwise.c)
core_isa_kernels = kernels/cpu/isa.c kernels/cpu/half.c kernels/cpu/activation.c kernels/cpu/activation-avx512.c \
	kernels/cpu/cast.c kernels/cpu/cast-x86.c kernels/cpu/scratch.c src/base/util.c
t_core_isa_SOURCES = t/core_isa.c t/core-util.h $(core_isa_kernels) kernels/cpu/softmax.c kernels/cpu/layernorm.c \
	kernels/cpu/residual.c
t_core_isa_LDADD = libphalanx.la -lm
t_core_ops_SOURCES = t/core_ops.c t/core-util.h $(core_isa_kernels) kernels/cpu/elementwise.c
t_core_ops_LDADD = libphalanx.la -lm
t_core_nn_SOURCES = t/core_nn.c t/core-util.h
t_core_nn_LDADD = libphalanx.la -lm
t_core_optim_SOURCES = t/core_optim.c t/core-util.h
t_core_optim_LDADD = libphalanx.la -lm
t_core_torch_SOURCES = t/core_torch.c t/core-util.h
t_core_torch_LDADD = libphalanx.la -lm
t_core_cuda_SOURCES = t/core_cuda.c t/core-util.h
t_core_cuda_LDADD = libphalanx.la -lm
EXTRA_DIST += t/data/core_kernels.txt bench/torch/core_kernels.py

# make bench: the CPU kernel table beside PyTorch (bench/torch/kernels.py).
noinst_PROGRAMS += bench/kernels
bench_kernels_LDADD = libphalanx.la
bench_programs += bench/kernels
EXTRA_DIST += bench/torch/kernels.py
