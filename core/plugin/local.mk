# core/plugin — the plugin loader (doc/plugins.md). Tests: t/plugin_*.
libphalanx_la_SOURCES += core/plugin/plugin.c core/plugin/plugin-find.c core/plugin/plugin-impl.h
libphalanx_la_SOURCES += core/plugin/plugin-abi.c core/plugin/plugin-abi.h
# The plugin author's kit (include/phalanx/plugin/kit.h): exported for
# plugins. The reductions are a convenience library (kit-reduce.c vectorises
# its loops with a pragma: this -O3 comes before configure's CFLAGS and loses).
libphalanx_la_SOURCES += core/plugin/kit-queue.c core/plugin/kit-abort.c core/plugin/kit-op.c \
	core/plugin/kit-issued.c core/plugin/kit-comm.c core/plugin/kit-slots.c core/plugin/kit-impl.h
noinst_LTLIBRARIES += core/plugin/libphx-kit-reduce.la
core_plugin_libphx_kit_reduce_la_SOURCES = core/plugin/kit-reduce.c
core_plugin_libphx_kit_reduce_la_CFLAGS = $(AM_CFLAGS) -O3
libphalanx_la_LIBADD += core/plugin/libphx-kit-reduce.la
