# core — owned by its area; see Makefile.am
libphalanx_la_SOURCES += core/version.c
libphalanx_la_SOURCES += core/util.c core/util.h core/tensor-impl.h
libphalanx_la_SOURCES += core/error.c core/log.c core/tensor.c core/tensor_ops.c \
	core/device.c core/device-impl.h core/device_cpu.c core/rng.c
