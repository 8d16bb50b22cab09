# src/fsdp — fully sharded data parallel (ZeRO-3, doc/guide/sharding.md). Tests: t/fsdp/.
libphalanx_internal_la_SOURCES += src/fsdp/fsdp.c src/fsdp/fsdp-comm.c src/fsdp/fsdp-units.c src/fsdp/fsdp-impl.h

fsdp_tests = t/fsdp/equiv t/fsdp/reshard t/fsdp/peer t/fsdp/api t/fsdp/nosync
check_PROGRAMS += $(fsdp_tests)
TESTS += $(fsdp_tests)
fsdp_test_cppflags = $(AM_CPPFLAGS)
if HAVE_GLOO
fsdp_test_cppflags += -DHAVE_GLOO=1
endif
t_fsdp_equiv_LDADD = libphalanx.la -lm
t_fsdp_equiv_CPPFLAGS = $(fsdp_test_cppflags)
t_fsdp_reshard_LDADD = libphalanx.la -lm
t_fsdp_reshard_CPPFLAGS = $(fsdp_test_cppflags)
t_fsdp_peer_LDADD = libphalanx.la
t_fsdp_peer_CPPFLAGS = $(fsdp_test_cppflags)
t_fsdp_api_LDADD = libphalanx.la -lm
t_fsdp_api_CPPFLAGS = $(fsdp_test_cppflags)
# FSDP's gathers on the NCCL path (skips without a CUDA device or the nccl plugin).
check_PROGRAMS += t/cuda/fsdp_gather
TESTS += t/cuda/fsdp_gather
t_cuda_fsdp_gather_LDADD = libphalanx.la -lm
EXTRA_DIST += t/fsdp/fsdp-util.h t/reshard-util.h
# ZeRO-3 under mpirun (PHX_COMM=mpi): t/fsdp/mpi.sh drives t/fsdp/mpi.
check_PROGRAMS += t/fsdp/mpi
TESTS += t/fsdp/mpi.sh t/fsdp/hybrid_nodes.sh
EXTRA_DIST += t/fsdp/mpi.sh t/fsdp/hybrid_nodes.sh
t_fsdp_mpi_LDADD = libphalanx.la -lm
t_fsdp_mpi_CPPFLAGS = $(fsdp_test_cppflags)
t_fsdp_nosync_LDADD = libphalanx.la -lm
t_fsdp_nosync_CPPFLAGS = $(fsdp_test_cppflags)
