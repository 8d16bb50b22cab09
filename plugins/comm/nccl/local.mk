# plugins/comm/nccl — phx-comm-nccl.so: collectives over NCCL on a
# dedicated stream, with a timeout watchdog (doc/guide/gpu.md).
if HAVE_NCCL
pkglib_LTLIBRARIES += plugins/comm/nccl/phx-comm-nccl.la
plugins_comm_nccl_phx_comm_nccl_la_SOURCES = plugins/comm/nccl/nccl.c plugins/device/cuda/visible.c \
	plugins/device/cuda/visible-filter.c plugins/device/cuda/visible.h
plugins_comm_nccl_phx_comm_nccl_la_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS) $(NCCL_CPPFLAGS)
plugins_comm_nccl_phx_comm_nccl_la_LDFLAGS = $(plugin_ldflags) $(CUDA_LDFLAGS) $(NCCL_LDFLAGS)
plugins_comm_nccl_phx_comm_nccl_la_LIBADD = libphalanx.la -lnccl -lcudart
TEST_PLUGIN_DIRS += $(abs_top_builddir)/plugins/comm/nccl/.libs
endif
# phx_comm_split on nccl (ncclCommSplit) on GPUs (skips without one).
check_PROGRAMS += t/cuda/nccl_split
TESTS += t/cuda/nccl_split
t_cuda_nccl_split_LDADD = libphalanx.la
