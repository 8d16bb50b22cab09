# src/plugin — the plugin loader and the kit (doc/guide/plugins.md). Tests:
# t/plugin/, with the plugins they load built from t/plugins/.
libphalanx_internal_la_SOURCES += src/plugin/plugin.c src/plugin/plugin-find.c src/plugin/plugin-impl.h
libphalanx_internal_la_SOURCES += src/plugin/plugin-abi.c src/plugin/plugin-abi.h
# The plugin author's kit (include/phalanx/plugin/kit.h): exported for
# plugins. The reductions are a convenience library built with -O3
# (kit-reduce.c vectorises its loops with a pragma; -O3 follows the default
# -O2, see OPT_CFLAGS in configure.ac).
libphalanx_internal_la_SOURCES += src/plugin/kit-queue.c src/plugin/kit-abort.c src/plugin/kit-op.c \
	src/plugin/kit-issued.c src/plugin/kit-comm.c src/plugin/kit-slots.c src/plugin/kit-impl.h
noinst_LTLIBRARIES += src/plugin/libphx-kit-reduce.la
src_plugin_libphx_kit_reduce_la_SOURCES = src/plugin/kit-reduce.c
src_plugin_libphx_kit_reduce_la_CFLAGS = $(AM_CFLAGS) -O3
libphalanx_internal_la_LIBADD += src/plugin/libphx-kit-reduce.la

# ---- t/plugin/loader: plugins built only for the tests, each t/plugins/fake.c
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
t_plugins_loader_phx_comm_badmajor_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME=badmajor -DFAKE_MAJOR=2 -DFAKE_MINOR=0 -DFAKE_PRIORITY=99
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

# ---- the loader's tests (t/plugin/minor builds its own loader, requiring
# plugin ABI minor 2 or newer, for the "minor too old" error).
check_PROGRAMS += t/plugin/loader t/plugin/minor
TESTS += t/plugin/loader t/plugin/minor
t_plugin_loader_SOURCES = t/plugin/loader.c
t_plugin_loader_LDADD = libphalanx.la
t_plugin_minor_SOURCES = t/plugin/minor.c src/plugin/plugin.c src/plugin/plugin-find.c src/base/util.c src/base/abi.c
t_plugin_minor_CPPFLAGS = $(AM_CPPFLAGS) -DPX_PLUGIN_MINOR_OLDEST='(PHX_PLUGIN_ABI_MINOR + 1)'
t_plugin_minor_LDADD = libphalanx.la

# ---- the out-of-tree plugin: installs into a scratch root, builds
# examples/custom-plugin with its own Makefile, selects it by PHX_COMM.
check_SCRIPTS += t/plugin/custom_plugin.sh
TESTS += t/plugin/custom_plugin.sh
EXTRA_DIST += t/plugin/custom_plugin.sh examples/custom-plugin/solo.c examples/custom-plugin/check-solo.c \
	examples/custom-plugin/Makefile examples/custom-plugin/README.md

# ---- t/plugin/abi: plugins built against the frozen ABI 1.0 headers
# (t/plugin/abi-1.0, searched before include/) load and work under this core;
# 1.1 plugins with an optional slot NULL, a required slot NULL, major 2.
abi10_cppflags = -I$(top_srcdir)/t/plugin/abi-1.0 $(AM_CPPFLAGS)
EXTRA_DIST += t/plugin/abi-1.0 t/plugins/abi-comm.c t/plugins/abi-device.c
check_LTLIBRARIES += \
	t/plugins/abi/phx-comm-abi10.la \
	t/plugins/abi/phx-comm-nobarrier.la \
	t/plugins/abi/phx-comm-nobcast.la \
	t/plugins/abi/phx-comm-major2.la \
	t/plugins/abidev/phx-device-cuda.la
t_plugins_abi_phx_comm_abi10_la_SOURCES = t/plugins/abi-comm.c
t_plugins_abi_phx_comm_abi10_la_CPPFLAGS = $(abi10_cppflags) -DABI_NAME=abi10
t_plugins_abi_phx_comm_abi10_la_LDFLAGS = $(fake_plugin_ldflags)
t_plugins_abi_phx_comm_nobarrier_la_SOURCES = t/plugins/abi-comm.c
t_plugins_abi_phx_comm_nobarrier_la_CPPFLAGS = $(AM_CPPFLAGS) -DABI_NAME=nobarrier -DABI_NO_BARRIER
t_plugins_abi_phx_comm_nobarrier_la_LDFLAGS = $(fake_plugin_ldflags)
t_plugins_abi_phx_comm_nobcast_la_SOURCES = t/plugins/abi-comm.c
t_plugins_abi_phx_comm_nobcast_la_CPPFLAGS = $(AM_CPPFLAGS) -DABI_NAME=nobcast -DABI_NO_BROADCAST
t_plugins_abi_phx_comm_nobcast_la_LDFLAGS = $(fake_plugin_ldflags)
t_plugins_abi_phx_comm_major2_la_SOURCES = t/plugins/abi-comm.c
t_plugins_abi_phx_comm_major2_la_CPPFLAGS = $(AM_CPPFLAGS) -DABI_NAME=major2 -DABI_MAJOR=2
t_plugins_abi_phx_comm_major2_la_LDFLAGS = $(fake_plugin_ldflags)
t_plugins_abidev_phx_device_cuda_la_SOURCES = t/plugins/abi-device.c
t_plugins_abidev_phx_device_cuda_la_CPPFLAGS = $(abi10_cppflags)
t_plugins_abidev_phx_device_cuda_la_LDFLAGS = $(fake_plugin_ldflags)
check_PROGRAMS += t/plugin/abi
TESTS += t/plugin/abi
t_plugin_abi_SOURCES = t/plugin/abi.c
t_plugin_abi_LDADD = libphalanx-internal.la -ldl
# the plugins it loads take the library's phx_ functions from the program
t_plugin_abi_LDFLAGS = -export-dynamic
# t/plugin/kit: the kit's reductions and abort key, and its queue through
# a comm plugin built on it.
check_LTLIBRARIES += t/plugins/abi/phx-comm-kit.la
t_plugins_abi_phx_comm_kit_la_SOURCES = t/plugins/abi-comm.c
t_plugins_abi_phx_comm_kit_la_CPPFLAGS = $(AM_CPPFLAGS) -DABI_NAME=kit -DABI_KIT
t_plugins_abi_phx_comm_kit_la_LDFLAGS = $(fake_plugin_ldflags)
check_PROGRAMS += t/plugin/kit
TESTS += t/plugin/kit
t_plugin_kit_SOURCES = t/plugin/kit.c
t_plugin_kit_LDADD = libphalanx.la -lm
# t/plugin/kit_peer: the kit's failure protocol in a two-rank plugin built
# on the kit alone, as an out-of-tree one is (a peer that leaves is
# PHX_EPEER naming its rank).
check_LTLIBRARIES += t/plugins/kit/phx-comm-duo.la
t_plugins_kit_phx_comm_duo_la_SOURCES = t/plugins/kit-duo.c
t_plugins_kit_phx_comm_duo_la_LDFLAGS = $(fake_plugin_ldflags)
check_PROGRAMS += t/plugin/kit_peer
TESTS += t/plugin/kit_peer
t_plugin_kit_peer_SOURCES = t/plugin/kit_peer.c t/comm_harness.h
t_plugin_kit_peer_LDADD = libphalanx.la
