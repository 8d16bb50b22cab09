# tools — owned by its area; see Makefile.am
# phx-info, the plugin loader's tests and the out-of-tree plugin example
# (doc/plugins.md). The comm area adds tools/phxrun below.

# ---- phx-info: lists the plugins found and why any is rejected.
bin_PROGRAMS += tools/phx-info
tools_phx_info_SOURCES = tools/phx-info.c
tools_phx_info_LDADD = libphalanx.la

# ---- t/plugin_loader: plugins built only for the tests, each t/plugins/fake.c
# with other FAKE_* macros. They live in their own folders (not in
# TEST_PLUGIN_DIRS): only the tests that set PHX_PLUGIN_PATH to them see them.
fake_plugin_ldflags = -module -avoid-version -shared -rpath /nowhere
EXTRA_DIST += t/plugins/fake.c
check_LTLIBRARIES += \
	t/plugins/loader/phx-comm-alpha.la \
	t/plugins/loader/phx-comm-beta.la \
	t/plugins/loader/phx-comm-gamma.la \
	t/plugins/loader/phx-comm-future.la \
	t/plugins/loader/phx-comm-decline.la \
	t/plugins/loader/phx-comm-undef.la \
	t/plugins/loader/phx-comm-nodesc.la \
	t/plugins/loader/phx-comm-tiny.la \
	t/plugins/loader/phx-comm-func.la \
	t/plugins/loader/phx-comm-badmajor.la \
	t/plugins/loader/phx-comm-small.la \
	t/plugins/loader/phx-comm-wrongkind.la \
	t/plugins/loader/phx-comm-wrongname.la \
	t/plugins/loader/phx-comm-novtable.la \
	t/plugins/loader2/phx-comm-alpha.la
t_plugins_loader_phx_comm_alpha_la_SOURCES = t/plugins/fake.c
t_plugins_loader_phx_comm_alpha_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME=alpha -DFAKE_PRIORITY=10
t_plugins_loader_phx_comm_alpha_la_LDFLAGS = $(fake_plugin_ldflags)
t_plugins_loader_phx_comm_beta_la_SOURCES = t/plugins/fake.c
t_plugins_loader_phx_comm_beta_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME=beta -DFAKE_PRIORITY=20
t_plugins_loader_phx_comm_beta_la_LDFLAGS = $(fake_plugin_ldflags)
t_plugins_loader_phx_comm_gamma_la_SOURCES = t/plugins/fake.c
t_plugins_loader_phx_comm_gamma_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME=gamma -DFAKE_PRIORITY=5 -DFAKE_PRIORITY_IN_PROCESS=50
t_plugins_loader_phx_comm_gamma_la_LDFLAGS = $(fake_plugin_ldflags)
t_plugins_loader_phx_comm_future_la_SOURCES = t/plugins/fake.c
t_plugins_loader_phx_comm_future_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME=future -DFAKE_MINOR=7 -DFAKE_PRIORITY=1
t_plugins_loader_phx_comm_future_la_LDFLAGS = $(fake_plugin_ldflags)
t_plugins_loader_phx_comm_decline_la_SOURCES = t/plugins/fake.c
t_plugins_loader_phx_comm_decline_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME=decline -DFAKE_DECLINE=no_frobnicator_on_this_machine -DFAKE_PRIORITY=99
t_plugins_loader_phx_comm_decline_la_LDFLAGS = $(fake_plugin_ldflags)
t_plugins_loader_phx_comm_undef_la_SOURCES = t/plugins/fake.c
t_plugins_loader_phx_comm_undef_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME=undef -DFAKE_UNDEFINED -DFAKE_PRIORITY=99
t_plugins_loader_phx_comm_undef_la_LDFLAGS = $(fake_plugin_ldflags)
t_plugins_loader_phx_comm_nodesc_la_SOURCES = t/plugins/fake.c
t_plugins_loader_phx_comm_nodesc_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME=nodesc -DFAKE_NO_DESC -DFAKE_PRIORITY=99
t_plugins_loader_phx_comm_nodesc_la_LDFLAGS = $(fake_plugin_ldflags)
t_plugins_loader_phx_comm_tiny_la_SOURCES = t/plugins/fake.c
t_plugins_loader_phx_comm_tiny_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME=tiny -DFAKE_TINY_DESC
t_plugins_loader_phx_comm_tiny_la_LDFLAGS = $(fake_plugin_ldflags)
t_plugins_loader_phx_comm_func_la_SOURCES = t/plugins/fake.c
t_plugins_loader_phx_comm_func_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME=func -DFAKE_FUNCTION_DESC
t_plugins_loader_phx_comm_func_la_LDFLAGS = $(fake_plugin_ldflags)
t_plugins_loader_phx_comm_badmajor_la_SOURCES = t/plugins/fake.c
t_plugins_loader_phx_comm_badmajor_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME=badmajor -DFAKE_MAJOR=2 -DFAKE_PRIORITY=99
t_plugins_loader_phx_comm_badmajor_la_LDFLAGS = $(fake_plugin_ldflags)
t_plugins_loader_phx_comm_small_la_SOURCES = t/plugins/fake.c
t_plugins_loader_phx_comm_small_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME=small -DFAKE_SIZE=24 -DFAKE_PRIORITY=99
t_plugins_loader_phx_comm_small_la_LDFLAGS = $(fake_plugin_ldflags)
t_plugins_loader_phx_comm_wrongkind_la_SOURCES = t/plugins/fake.c
t_plugins_loader_phx_comm_wrongkind_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME=wrongkind -DFAKE_KIND=PHX_PLUGIN_PRECISION -DFAKE_PRIORITY=99
t_plugins_loader_phx_comm_wrongkind_la_LDFLAGS = $(fake_plugin_ldflags)
t_plugins_loader_phx_comm_wrongname_la_SOURCES = t/plugins/fake.c
t_plugins_loader_phx_comm_wrongname_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME=other -DFAKE_PRIORITY=99
t_plugins_loader_phx_comm_wrongname_la_LDFLAGS = $(fake_plugin_ldflags)
t_plugins_loader_phx_comm_novtable_la_SOURCES = t/plugins/fake.c
t_plugins_loader_phx_comm_novtable_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME=novtable -DFAKE_NO_VTABLE -DFAKE_PRIORITY=99
t_plugins_loader_phx_comm_novtable_la_LDFLAGS = $(fake_plugin_ldflags)
t_plugins_loader2_phx_comm_alpha_la_SOURCES = t/plugins/fake.c
t_plugins_loader2_phx_comm_alpha_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME=alpha -DFAKE_VERSION=2.0 -DFAKE_PRIORITY=10
t_plugins_loader2_phx_comm_alpha_la_LDFLAGS = $(fake_plugin_ldflags)
# phx-comm-borrow has no descriptor but links a library that has one.
check_LTLIBRARIES += t/plugins/loader/libfakedesc.la t/plugins/loader/phx-comm-borrow.la
t_plugins_loader_libfakedesc_la_SOURCES = t/plugins/fake.c
t_plugins_loader_libfakedesc_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME=borrow
t_plugins_loader_libfakedesc_la_LDFLAGS = -avoid-version -shared -rpath /nowhere
t_plugins_loader_phx_comm_borrow_la_SOURCES = t/plugins/fake.c
t_plugins_loader_phx_comm_borrow_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME=borrow -DFAKE_BORROW
t_plugins_loader_phx_comm_borrow_la_LIBADD = t/plugins/loader/libfakedesc.la
t_plugins_loader_phx_comm_borrow_la_LDFLAGS = $(fake_plugin_ldflags) -Wl,-rpath,'$$ORIGIN'

# ---- the loader's tests (t/plugin_minor builds its own loader, requiring
# plugin ABI minor 1, for the "minor too old" error).
check_PROGRAMS += t/plugin_loader t/plugin_minor
TESTS += t/plugin_loader t/plugin_minor
t_plugin_loader_SOURCES = t/plugin_loader.c
t_plugin_loader_LDADD = libphalanx.la
t_plugin_minor_SOURCES = t/plugin_minor.c core/plugin/plugin.c core/plugin/plugin-find.c core/base/util.c
t_plugin_minor_CPPFLAGS = $(AM_CPPFLAGS) -DPX_PLUGIN_MINOR_REQUIRED=1
t_plugin_minor_LDADD = libphalanx.la

# ---- the out-of-tree plugin: installs into a scratch root, builds
# examples/custom-plugin with its own Makefile, selects it by PHX_COMM.
check_SCRIPTS += t/custom_plugin.sh
TESTS += t/custom_plugin.sh
EXTRA_DIST += t/custom_plugin.sh examples/custom-plugin/solo.c examples/custom-plugin/check-solo.c \
	examples/custom-plugin/Makefile examples/custom-plugin/README.md

# ---- phxrun (comm area, issue 4): the launcher, like torchrun.
bin_PROGRAMS += tools/phxrun
tools_phxrun_SOURCES = tools/phxrun.c core/world/free-port.h

# ---- phx-plot: metrics files (JSON Lines) into PNG curves through gnuplot.
dist_bin_SCRIPTS += tools/phx-plot
TESTS += t/tools_plot.sh t/tools_plot_bench.sh
EXTRA_DIST += t/tools_plot.sh t/tools_plot_bench.sh
