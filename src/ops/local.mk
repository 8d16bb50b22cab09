# src/ops — the tensor API: shape, elementwise, reduction, matrix and
# indexing operations and their gradients (doc/tensors.md). Tests: t/ops/.
libphalanx_internal_la_SOURCES += src/ops/ops-impl.h src/ops/common.c

# -- elementwise, reductions, matmul, losses (ops2) --
libphalanx_internal_la_SOURCES += src/ops/math-impl.h src/ops/elementwise.c src/ops/unary.c src/ops/reduce.c \
	src/ops/matmul.c src/ops/loss.c
ops_math_tests = t/ops/elementwise t/ops/reduce t/ops/matmul t/ops/loss
check_PROGRAMS += $(ops_math_tests)
TESTS += $(ops_math_tests)
t_ops_elementwise_LDADD = libphalanx.la -lm
t_ops_reduce_LDADD = libphalanx.la -lm
t_ops_matmul_LDADD = libphalanx.la -lm
t_ops_loss_LDADD = libphalanx.la -lm
EXTRA_DIST += t/ops/gradcheck.h t/ref/ops_math.txt bench/torch/ops_math_ref.py
