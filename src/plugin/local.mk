# src/plugin — the plugin loader (doc/plugins.md). Tests: t/plugin_*.
libphalanx_la_SOURCES += src/plugin/plugin.c src/plugin/plugin-find.c src/plugin/plugin-impl.h
libphalanx_la_SOURCES += src/plugin/plugin-abi.c src/plugin/plugin-abi.h
# The plugin author's kit (include/phalanx/plugin/kit.h): exported for
# plugins. The reductions are a convenience library built with -O3
# (kit-reduce.c vectorises its loops with a pragma; -O3 follows the default
# -O2, see OPT_CFLAGS in configure.ac).
libphalanx_la_SOURCES += src/plugin/kit-queue.c src/plugin/kit-abort.c src/plugin/kit-op.c \
	src/plugin/kit-issued.c src/plugin/kit-comm.c src/plugin/kit-slots.c src/plugin/kit-impl.h
noinst_LTLIBRARIES += src/plugin/libphx-kit-reduce.la
src_plugin_libphx_kit_reduce_la_SOURCES = src/plugin/kit-reduce.c
src_plugin_libphx_kit_reduce_la_CFLAGS = $(AM_CFLAGS) -O3
libphalanx_la_LIBADD += src/plugin/libphx-kit-reduce.la
