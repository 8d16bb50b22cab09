# kernels — owned by its area; see Makefile.am
libphalanx_la_SOURCES += kernels/math.h kernels/cpu/cpu.h kernels/cpu/scratch.c kernels/cpu/table.c \
	kernels/cpu/gemm.c kernels/cpu/gemm_loop.c kernels/cpu/cast.c kernels/cpu/elementwise.c kernels/cpu/activation.c \
	kernels/cpu/dropout.c kernels/cpu/layernorm.c kernels/cpu/loss.c kernels/cpu/optim.c \
	kernels/cpu/reduce.c kernels/cpu/rng.c
