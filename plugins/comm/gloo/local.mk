# plugins/comm/gloo — C++ shim over libgloo's TCP transport. Tests:
# t/comm/desync, t/comm/gloo_*.
if HAVE_GLOO
pkglib_LTLIBRARIES += plugins/comm/gloo/phx-comm-gloo.la
plugins_comm_gloo_phx_comm_gloo_la_SOURCES = plugins/comm/gloo/gloo.cc plugins/comm/gloo/gloo-algos.cc \
	plugins/comm/gloo/gloo-algos.h plugins/comm/gloo/gloo-links.cc plugins/comm/gloo/gloo-links.h \
	plugins/comm/gloo/gloo-shm.cc plugins/comm/gloo/gloo-shm.h
plugins_comm_gloo_phx_comm_gloo_la_CPPFLAGS = $(AM_CPPFLAGS) $(GLOO_CPPFLAGS)
plugins_comm_gloo_phx_comm_gloo_la_CXXFLAGS = $(AM_CXXFLAGS) -O3
plugins_comm_gloo_phx_comm_gloo_la_LIBADD = $(GLOO_LIBS) libphalanx.la
plugins_comm_gloo_phx_comm_gloo_la_LDFLAGS = $(plugin_ldflags) -Wl,--version-script=$(srcdir)/plugins/comm/gloo/gloo.map
EXTRA_DIST += plugins/comm/gloo/gloo.map
plugins_comm_gloo_phx_comm_gloo_la_DEPENDENCIES = $(srcdir)/plugins/comm/gloo/gloo.map libphalanx.la
TEST_PLUGIN_DIRS += $(abs_top_builddir)/plugins/comm/gloo/.libs
endif

# Ranks out of step: PHX_EDESYNC naming both collectives, not an abort.
if HAVE_GLOO
check_PROGRAMS += t/comm/desync
TESTS += t/comm/desync
t_comm_desync_SOURCES = t/comm/desync.c
t_comm_desync_LDADD = libphalanx.la
check_PROGRAMS += t/comm/desync_gloo
TESTS += t/comm/desync_gloo
t_comm_desync_gloo_SOURCES = t/comm/desync_gloo.c
t_comm_desync_gloo_LDADD = libphalanx.la

# The links: the same bits as gloo's transport, desync and peer death at
# once, the timeout kept, bad settings refused.
check_PROGRAMS += t/comm/gloo_links
TESTS += t/comm/gloo_links
t_comm_gloo_links_SOURCES = t/comm/gloo_links.c
t_comm_gloo_links_LDADD = libphalanx.la
endif

# The same-host segment: TCP's bits at worlds 2-4, the path chosen, a
# peer killed mid-all-reduce; ranks in two network namespaces keep TCP.
EXTRA_DIST += t/comm/shm_netns.sh
if HAVE_GLOO
check_PROGRAMS += t/comm/shm
TESTS += t/comm/shm
t_comm_shm_SOURCES = t/comm/shm.c
t_comm_shm_LDADD = libphalanx.la
TESTS += t/comm/shm_netns.sh
endif
