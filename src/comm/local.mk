# src/comm — the communicator front end over the comm plugins
# (doc/guide/comm.md). Tests: t/comm/ (also registered by plugins/comm/*).
libphalanx_internal_la_SOURCES += src/comm/comm.c src/comm/comm-split.c src/comm/comm-work.c src/comm/comm-impl.h

# ---- tests
check_PROGRAMS += t/comm/collectives
t_comm_collectives_SOURCES = t/comm/collectives.c
t_comm_collectives_LDADD = libphalanx.la
EXTRA_DIST += t/comm_harness.h
check_PROGRAMS += t/comm/async
t_comm_async_SOURCES = t/comm/async.c
t_comm_async_LDADD = libphalanx.la
check_PROGRAMS += t/comm/deadpeer
t_comm_deadpeer_SOURCES = t/comm/deadpeer.c
t_comm_deadpeer_LDADD = libphalanx.la
check_PROGRAMS += t/comm/killtrials
t_comm_killtrials_LDADD = libphalanx.la
TESTS += t/comm/killtrials
check_PROGRAMS += t/comm/stoprank
t_comm_stoprank_LDADD = libphalanx.la
check_PROGRAMS += t/comm/rank0_pause
t_comm_rank0_pause_LDADD = libphalanx.la
TESTS += t/comm/rank0_pause
check_PROGRAMS += t/comm/debug
t_comm_debug_SOURCES = t/comm/debug.c
t_comm_debug_LDADD = libphalanx.la
check_PROGRAMS += t/comm/split t/comm/split_plugins
t_comm_split_plugins_SOURCES = t/comm/split_plugins.c
t_comm_split_plugins_LDADD = libphalanx.la
check_LTLIBRARIES += t/plugins/split/phx-comm-ownworld.la
t_plugins_split_phx_comm_ownworld_la_SOURCES = t/plugins/split-ownworld.c
t_plugins_split_phx_comm_ownworld_la_LDFLAGS = $(fake_plugin_ldflags)
TESTS += t/comm/split_plugins
t_comm_split_SOURCES = t/comm/split.c
t_comm_split_LDADD = libphalanx.la -lm
TESTS += t/comm/async t/comm/debug t/comm/deadpeer t/comm/threads.sh t/comm/split_threads.sh
EXTRA_DIST += t/comm/split_threads.sh t/comm/split_gloo.sh t/comm/split_mpi.sh t/comm/split_nodes.sh
EXTRA_DIST += t/comm/threads.sh t/comm/gloo_123.sh t/comm/gloo_4.sh t/comm/gloo_algos.sh t/comm/phxrun_gloo.sh t/comm/log.sh t/comm/join.sh
if HAVE_GLOO
TESTS += t/comm/split_gloo.sh t/comm/split_nodes.sh
TESTS += t/comm/gloo_123.sh t/comm/gloo_4.sh t/comm/gloo_algos.sh t/comm/phxrun_gloo.sh t/comm/log.sh t/comm/join.sh
endif

# ---- make bench: all-reduce bandwidth beside torch.distributed gloo
noinst_PROGRAMS += bench/allreduce
bench_allreduce_SOURCES = bench/allreduce.c
bench_allreduce_LDADD = libphalanx.la -lm
bench_programs += bench/allreduce
EXTRA_DIST += bench/torch/allreduce.py
