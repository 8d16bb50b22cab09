# core/plugin — the plugin loader (doc/plugins.md). Tests: t/plugin_*.
libphalanx_la_SOURCES += core/plugin/plugin.c core/plugin/plugin-find.c core/plugin/plugin-impl.h
libphalanx_la_SOURCES += core/plugin/plugin-abi.c core/plugin/plugin-abi.h
