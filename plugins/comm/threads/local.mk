# plugins/comm/threads — in-process ranks with shared-memory collectives
# (phx_spawn worlds of threads; DataParallel reduces without a communicator).
pkglib_LTLIBRARIES += plugins/comm/threads/phx-comm-threads.la
plugins_comm_threads_phx_comm_threads_la_SOURCES = plugins/comm/threads/threads.c
plugins_comm_threads_phx_comm_threads_la_CFLAGS = $(AM_CFLAGS) -O3
plugins_comm_threads_phx_comm_threads_la_LDFLAGS = $(plugin_ldflags)
plugins_comm_threads_phx_comm_threads_la_LIBADD = libphalanx.la
TEST_PLUGIN_DIRS += $(abs_top_builddir)/plugins/comm/threads/.libs

# Ranks out of step named within 2 s, a late rank not (every backend runs
# the cases of t/comm/desync-cases.h).
EXTRA_DIST += t/comm/desync-cases.h
check_PROGRAMS += t/comm/desync_threads
TESTS += t/comm/desync_threads
t_comm_desync_threads_SOURCES = t/comm/desync_threads.c
t_comm_desync_threads_LDADD = libphalanx.la
# ... and DDP with a skipped backward (threads and gloo).
check_PROGRAMS += t/comm/desync_ddp
TESTS += t/comm/desync_ddp
t_comm_desync_ddp_SOURCES = t/comm/desync_ddp.c
t_comm_desync_ddp_LDADD = libphalanx.la
