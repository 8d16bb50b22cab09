# plugins/comm/threads — in-process ranks with shared-memory collectives
# (phx_spawn worlds of threads; DataParallel reduces without a communicator).
pkglib_LTLIBRARIES += plugins/comm/threads/phx-comm-threads.la
plugins_comm_threads_phx_comm_threads_la_SOURCES = plugins/comm/threads/threads.c
plugins_comm_threads_phx_comm_threads_la_CFLAGS = $(AM_CFLAGS) -O3
plugins_comm_threads_phx_comm_threads_la_LDFLAGS = $(plugin_ldflags)
plugins_comm_threads_phx_comm_threads_la_LIBADD = libphalanx.la
TEST_PLUGIN_DIRS += $(abs_top_builddir)/plugins/comm/threads/.libs
