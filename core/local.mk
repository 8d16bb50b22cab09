# core — owned by its area; see Makefile.am
libphalanx_la_SOURCES += core/version.c
libphalanx_la_SOURCES += core/util.c core/util.h core/tensor-impl.h
