# core/modules — the module vtable, parameters, hooks and the built-in
# modules (doc/training.md). Tests are registered in core/train/local.mk.
libphalanx_la_SOURCES += core/modules/module.c core/modules/module-impl.h core/modules/common.c \
	core/modules/activation.c core/modules/activation.h \
	core/modules/linear.c core/modules/relu.c core/modules/gelu.c core/modules/tanh.c \
	core/modules/sigmoid.c core/modules/dropout.c core/modules/layernorm.c core/modules/sequential.c
