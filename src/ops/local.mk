# src/ops — the tensor API: shape, elementwise, reduction, matrix and
# indexing operations and their gradients (doc/reference/tensors.md). Tests: t/ops/.
libphalanx_internal_la_SOURCES += src/ops/ops-impl.h src/ops/common.c src/ops/cast.c

# Shape, indexing, creation and printing (shape.c ... print.c).
libphalanx_internal_la_SOURCES += src/ops/shape.c src/ops/index.c src/ops/create.c src/ops/print.c
EXTRA_DIST += t/ops/ref-cases.h t/ref/ops_shape.txt bench/torch/ops_shape_ref.py
ops_shape_tests = t/ops/shape t/ops/index t/ops/create t/ops/print
check_PROGRAMS += $(ops_shape_tests)
TESTS += $(ops_shape_tests)
t_ops_shape_LDADD = libphalanx.la -lm
t_ops_index_LDADD = libphalanx.la -lm
t_ops_create_LDADD = libphalanx.la -lm
t_ops_print_LDADD = libphalanx.la -lm

# -- elementwise, reductions, matmul, losses (ops2) --
libphalanx_internal_la_SOURCES += src/ops/math-impl.h src/ops/elementwise.c src/ops/unary.c src/ops/reduce.c \
	src/ops/matmul.c src/ops/loss.c
ops_math_tests = t/ops/elementwise t/ops/reduce t/ops/matmul t/ops/loss t/ops/cross_entropy
check_PROGRAMS += $(ops_math_tests)
TESTS += $(ops_math_tests)
t_ops_elementwise_LDADD = libphalanx.la -lm
t_ops_reduce_LDADD = libphalanx.la -lm
t_ops_matmul_LDADD = libphalanx.la -lm
t_ops_loss_LDADD = libphalanx.la -lm
t_ops_cross_entropy_LDADD = libphalanx.la -lm
EXTRA_DIST += t/ops/gradcheck.h t/ref/ops_math.txt bench/torch/ops_math_ref.py
