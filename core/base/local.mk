# core/base — errors, logging, version, small helpers every area uses.
libphalanx_la_SOURCES += core/base/version.c core/base/util.c core/base/util.h \
	core/base/error.c core/base/log.c
