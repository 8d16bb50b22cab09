# src/zero — ZeRO-1 and ZeRO-2 sharded optimizers (doc/guide/sharding.md). Tests: t/zero/.
libphalanx_internal_la_SOURCES += src/zero/zero.c src/zero/zero-state.c src/zero/zero-ckpt.c src/zero/zero-impl.h

zero_tests = t/zero/equiv t/zero/api t/zero/peer t/zero/torch t/zero/hybrid t/zero/reshard t/zero/reshard-kill \
	t/zero/ckpt_bad
check_PROGRAMS += $(zero_tests)
TESTS += $(zero_tests) t/zero/hybrid_nodes.sh
EXTRA_DIST += t/zero/hybrid_nodes.sh
zero_test_cppflags = $(AM_CPPFLAGS)
if HAVE_GLOO
zero_test_cppflags += -DHAVE_GLOO=1
endif
t_zero_equiv_LDADD = libphalanx.la -lm
t_zero_equiv_CPPFLAGS = $(zero_test_cppflags)
t_zero_hybrid_LDADD = libphalanx.la -lm
t_zero_hybrid_CPPFLAGS = $(zero_test_cppflags)
t_zero_api_LDADD = libphalanx.la -lm
t_zero_api_CPPFLAGS = $(zero_test_cppflags)
t_zero_peer_LDADD = libphalanx.la
t_zero_peer_CPPFLAGS = $(zero_test_cppflags)
t_zero_torch_LDADD = libphalanx.la -lm
t_zero_torch_CPPFLAGS = $(zero_test_cppflags)
t_zero_reshard_LDADD = libphalanx.la -lm
t_zero_reshard_CPPFLAGS = $(zero_test_cppflags)
t_zero_reshard_kill_LDADD = libphalanx.la -lm
t_zero_reshard_kill_CPPFLAGS = $(zero_test_cppflags)
t_zero_ckpt_bad_SOURCES = t/zero/ckpt_bad.c t/file-util.h
t_zero_ckpt_bad_LDADD = libphalanx.la $(JANSSON_LIBS) -lm
EXTRA_DIST += bench/torch/zero1.py t/ref/zero1.safetensors t/gloo-procs.h t/shard-util.h
# bench/zero: per-rank memory and step time, DDP vs ZeRO-1/2 (make bench).
noinst_PROGRAMS += bench/zero
bench_zero_LDADD = libphalanx.la -lm
# ZeRO under mpirun (PHX_COMM=mpi): t/zero/mpi.sh drives t/zero/mpi.
check_PROGRAMS += t/zero/mpi
TESTS += t/zero/mpi.sh
EXTRA_DIST += t/zero/mpi.sh
t_zero_mpi_LDADD = libphalanx.la -lm
t_zero_mpi_CPPFLAGS = $(zero_test_cppflags)
