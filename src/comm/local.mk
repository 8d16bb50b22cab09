# src/comm — the communicator front end over the comm plugins
# (doc/comm.md). Tests: t/comm_*; plugins: plugins/comm/*.
libphalanx_la_SOURCES += src/comm/comm.c src/comm/comm-work.c src/comm/comm-impl.h

# ---- tests
check_PROGRAMS += t/comm_collectives
t_comm_collectives_SOURCES = t/comm_collectives.c
t_comm_collectives_LDADD = libphalanx.la
check_PROGRAMS += t/comm_store
TESTS += t/comm_store
t_comm_store_SOURCES = t/comm_store.c
t_comm_store_LDADD = libphalanx.la
check_PROGRAMS += t/comm_world
TESTS += t/comm_world
t_comm_world_SOURCES = t/comm_world.c t/env-util.h
t_comm_world_LDADD = libphalanx.la
TESTS += t/comm_phxrun.sh
EXTRA_DIST += t/comm_phxrun.sh
EXTRA_DIST += t/comm_harness.h
check_PROGRAMS += t/comm_spawn
TESTS += t/comm_spawn
t_comm_spawn_SOURCES = t/comm_spawn.c
t_comm_spawn_LDADD = libphalanx.la
check_PROGRAMS += t/comm_async
t_comm_async_SOURCES = t/comm_async.c
t_comm_async_LDADD = libphalanx.la
check_PROGRAMS += t/comm_deadpeer
t_comm_deadpeer_SOURCES = t/comm_deadpeer.c
t_comm_deadpeer_LDADD = libphalanx.la
check_PROGRAMS += t/comm_killtrials
t_comm_killtrials_LDADD = libphalanx.la
TESTS += t/comm_killtrials
check_PROGRAMS += t/comm_stoprank
t_comm_stoprank_LDADD = libphalanx.la
check_PROGRAMS += t/comm_debug
t_comm_debug_SOURCES = t/comm_debug.c
t_comm_debug_LDADD = libphalanx.la
TESTS += t/comm_async t/comm_debug t/comm_deadpeer t/comm_threads.sh
EXTRA_DIST += t/comm_threads.sh t/comm_gloo_123.sh t/comm_gloo_4.sh t/comm_gloo_algos.sh t/comm_phxrun_gloo.sh t/comm_log.sh t/comm_join.sh
if HAVE_GLOO
TESTS += t/comm_gloo_123.sh t/comm_gloo_4.sh t/comm_gloo_algos.sh t/comm_phxrun_gloo.sh t/comm_log.sh t/comm_join.sh
endif

# ---- make bench: all-reduce bandwidth beside torch.distributed gloo
noinst_PROGRAMS += bench/allreduce
bench_allreduce_SOURCES = bench/allreduce.c
bench_allreduce_LDADD = libphalanx.la -lm
bench_programs += bench/allreduce
EXTRA_DIST += bench/torch/allreduce.py
