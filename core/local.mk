# core — owned by its area; see Makefile.am
libphalanx_la_SOURCES += core/version.c
