# kernels — the CPU device (cpu/device.c) and its kernels, compiled into
# libphalanx; math.h is the per-element math the CPU and CUDA kernels share
# (the CUDA device and its kernels: plugins/device/cuda). Tests: t/tensor/.
libphalanx_internal_la_SOURCES += kernels/cpu/device.c
# The CPU kernels are a convenience library inside libphalanx so they can
# take -fno-math-errno (sqrtf in the Adam update may then vectorise; the
# library never reads errno after a math call).
noinst_LTLIBRARIES += kernels/libphx-kernels-cpu.la
kernels_libphx_kernels_cpu_la_SOURCES = kernels/math.h kernels/gemm-check.h kernels/cpu/cpu.h kernels/cpu/scratch.c kernels/cpu/hugepage.c \
	kernels/cpu/table.c kernels/cpu/gemm.c kernels/cpu/gemm-avx512.h kernels/cpu/gemm-avx512.c kernels/cpu/gemm-dnnl.c kernels/cpu/half.c kernels/cpu/gemm-loop.c kernels/cpu/cast.c \
	kernels/cpu/elementwise.c kernels/cpu/strided.c kernels/cpu/broadcast.c kernels/cpu/reduce-dim.c kernels/cpu/activation.c kernels/cpu/activation-avx512.c \
	kernels/cpu/cast-x86.c kernels/cpu/isa.c kernels/cpu/dropout.c kernels/cpu/layernorm.c \
	kernels/cpu/loss.c kernels/cpu/optim.c kernels/cpu/reduce.c kernels/cpu/rng.c \
	kernels/cpu/attention.c kernels/cpu/softmax.c kernels/cpu/embedding.c kernels/cpu/residual.c \
	kernels/cpu/conv.c kernels/cpu/conv-avx512.h kernels/cpu/half-x86.h kernels/cpu/conv-avx512.c kernels/cpu/conv-winograd.c kernels/cpu/conv-small.c kernels/cpu/conv-dnnl.c kernels/cpu/batchnorm.c kernels/cpu/pool.c kernels/cpu/parallel.c
kernels_libphx_kernels_cpu_la_CPPFLAGS = $(AM_CPPFLAGS) $(BLAS_CFLAGS)
kernels_libphx_kernels_cpu_la_CFLAGS = $(AM_CFLAGS) -fno-math-errno
libphalanx_internal_la_LIBADD += kernels/libphx-kernels-cpu.la
