# plugins/comm/gloo — C++ shim over libgloo's TCP transport (issue 4).
if HAVE_GLOO
pkglib_LTLIBRARIES += plugins/comm/gloo/phx-comm-gloo.la
plugins_comm_gloo_phx_comm_gloo_la_SOURCES = plugins/comm/gloo/gloo.cc plugins/comm/gloo/gloo-algos.cc \
	plugins/comm/gloo/gloo-algos.h
plugins_comm_gloo_phx_comm_gloo_la_CPPFLAGS = $(AM_CPPFLAGS) $(GLOO_CPPFLAGS)
plugins_comm_gloo_phx_comm_gloo_la_CXXFLAGS = $(AM_CXXFLAGS) -O3
plugins_comm_gloo_phx_comm_gloo_la_LIBADD = $(GLOO_LIBS)
plugins_comm_gloo_phx_comm_gloo_la_LDFLAGS = $(plugin_ldflags)
TEST_PLUGIN_DIRS += $(abs_top_builddir)/plugins/comm/gloo/.libs
endif
