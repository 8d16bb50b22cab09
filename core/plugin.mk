# core — owned by its area; see Makefile.am
# The plugin loader (doc/plugins.md).
libphalanx_la_SOURCES += core/plugin.c core/plugin-find.c core/plugin-impl.h
