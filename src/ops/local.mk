# src/ops — the tensor API: shape, elementwise, reduction, matrix and
# indexing operations and their gradients (doc/tensors.md). Tests: t/ops/.
libphalanx_internal_la_SOURCES += src/ops/ops-impl.h src/ops/common.c src/ops/cast.c
