# plugins/comm/mpi — collectives over Open MPI for jobs started by mpirun
# or srun, shared-memory all-reduce within a node (doc/guide/comm.md). Tests:
# t/comm/mpi*, t/ddp/mpi.sh.
EXTRA_DIST += t/comm/mpi.sh t/mpi-util.sh t/comm/mpi_fail.sh t/comm/mpi_async.sh t/ddp/mpi.sh \
	t/comm/mpi_stop.sh t/comm/split_mpi.sh t/comm/desync_mpi.sh
if HAVE_MPI
pkglib_LTLIBRARIES += plugins/comm/mpi/phx-comm-mpi.la
plugins_comm_mpi_phx_comm_mpi_la_SOURCES = plugins/comm/mpi/mpi.c plugins/comm/mpi/mpi-shm.c \
	plugins/comm/mpi/mpi-shm.h
plugins_comm_mpi_phx_comm_mpi_la_CPPFLAGS = $(AM_CPPFLAGS) $(MPI_CFLAGS)
plugins_comm_mpi_phx_comm_mpi_la_CFLAGS = $(AM_CFLAGS) -O3
plugins_comm_mpi_phx_comm_mpi_la_LIBADD = $(MPI_LIBS) libphalanx.la
plugins_comm_mpi_phx_comm_mpi_la_LDFLAGS = $(plugin_ldflags)
TEST_PLUGIN_DIRS += $(abs_top_builddir)/plugins/comm/mpi/.libs
TESTS += t/comm/mpi.sh t/comm/mpi_fail.sh t/comm/mpi_async.sh t/ddp/mpi.sh t/comm/mpi_stop.sh t/comm/split_mpi.sh t/comm/desync_mpi.sh
endif
check_PROGRAMS += t/comm/mpi_fail
t_comm_mpi_fail_SOURCES = t/comm/mpi_fail.c
t_comm_mpi_fail_LDADD = libphalanx.la
check_PROGRAMS += t/comm/mpi_stop
t_comm_mpi_stop_SOURCES = t/comm/mpi_stop.c
t_comm_mpi_stop_LDADD = libphalanx.la
check_PROGRAMS += t/comm/desync_mpi
t_comm_desync_mpi_SOURCES = t/comm/desync_mpi.c
t_comm_desync_mpi_LDADD = libphalanx.la
