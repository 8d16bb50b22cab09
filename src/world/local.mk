# src/world — the world from the environment, the TCP store (client,
# server, key-value table) and phx_spawn (doc/guide/comm.md, doc/reference/store.md).
# Tests: t/world/.
libphalanx_internal_la_SOURCES += src/world/world.c src/world/world-impl.h src/world/spawn.c src/world/free-port.h \
	src/world/master-addr.h $(px_store_sources)
# The store: public calls, the backends, the server.
px_store_sources = src/world/store.c src/world/store-impl.h src/world/store-local.c src/world/store-tcp.c \
	src/world/store-proto.h src/world/store-server.h \
	src/world/store-server.c src/world/store-conn.c src/world/store-auth.c src/world/store-listen.c \
	src/world/store-kv.c
libphalanx_internal_la_CPPFLAGS += $(CRYPTO_CFLAGS)
libphalanx_internal_la_LIBADD += $(CRYPTO_LIBS)

# ---- tests (doc/reference/store.md): t/world/. The store through its public calls,
# the world from the environment, phx_spawn.
check_PROGRAMS += t/world/store
TESTS += t/world/store
t_world_store_SOURCES = t/world/store.c
t_world_store_LDADD = libphalanx.la
check_PROGRAMS += t/world/world
TESTS += t/world/world
t_world_world_SOURCES = t/world/world.c t/env-util.h
t_world_world_LDADD = libphalanx.la
check_PROGRAMS += t/world/spawn
TESTS += t/world/spawn
t_world_spawn_SOURCES = t/world/spawn.c
t_world_spawn_LDADD = libphalanx.la
# More tests (doc/reference/store.md). t/world/store_limits links the internals, for
# the server's counters.
check_PROGRAMS += t/world/store_limits t/world/store_token t/world/store_env t/world/store_client
TESTS += t/world/store_limits t/world/store_token t/world/store_env t/world/store_phxrun_token.sh \
	t/world/store_token_join.sh t/world/store_home_token.sh t/world/store_home_token_mpirun.sh
EXTRA_DIST += t/world/store_phxrun_token.sh t/world/store_token_join.sh t/world/store_home_token.sh \
	t/world/store_home_token_mpirun.sh
t_world_store_limits_CPPFLAGS = $(AM_CPPFLAGS) $(CRYPTO_CFLAGS)
t_world_store_limits_LDADD = libphalanx-internal.la
t_world_store_token_SOURCES = t/world/store_token.c
t_world_store_token_LDADD = libphalanx.la
t_world_store_env_SOURCES = t/world/store_env.c
t_world_store_env_LDADD = libphalanx.la
t_world_store_client_SOURCES = t/world/store_client.c
t_world_store_client_LDADD = libphalanx.la
# An idle stranger on the port: not waited for at stop, closed after the
# handshake deadline (links the internals, for the server's counters).
check_PROGRAMS += t/world/store_stranger
TESTS += t/world/store_stranger
t_world_store_stranger_CPPFLAGS = $(AM_CPPFLAGS) $(CRYPTO_CFLAGS)
t_world_store_stranger_LDADD = libphalanx-internal.la
# A store that closes connections before the handshake (stopping): tried
# again within the timeout.
check_PROGRAMS += t/world/store_stopping
TESTS += t/world/store_stopping
t_world_store_stopping_SOURCES = t/world/store_stopping.c
t_world_store_stopping_LDADD = libphalanx.la

# ---- make bench: the store server under attack (bench/store_attack.sh)
noinst_PROGRAMS += bench/store_attack
bench_store_attack_SOURCES = bench/store_attack.c
bench_store_attack_LDADD = libphalanx.la
bench_programs += bench/store_attack
EXTRA_DIST += bench/store_attack.sh

# Slurm: MASTER_ADDR from the node list, a batch script told to use srun.
check_PROGRAMS += t/world/slurm
TESTS += t/world/slurm
t_world_slurm_SOURCES = t/world/slurm.c t/env-util.h
t_world_slurm_LDADD = libphalanx.la
# srun --mpi=pmi2 with an Open MPI without PMI-2: the mpi backend left out.
check_PROGRAMS += t/world/slurm_pmi2
TESTS += t/world/slurm_pmi2
t_world_slurm_pmi2_SOURCES = t/world/slurm_pmi2.c t/env-util.h
t_world_slurm_pmi2_LDADD = libphalanx.la

# ---- multi-node (doc/guide/multinode.md): t/multinode/ runs jobs across network
# namespaces on a bridge (root; skipped elsewhere), t/slurm/ under a
# one-node Slurm of its own (skipped without slurm-wlm).
check_PROGRAMS += t/multinode/loop
t_multinode_loop_SOURCES = t/multinode/loop.c
t_multinode_loop_LDADD = libphalanx.la
TESTS += t/multinode/run.sh t/multinode/faults.sh t/multinode/misconfig.sh \
	t/multinode/outage.sh t/multinode/restart.sh t/multinode/mpirun.sh t/multinode/resume.sh
EXTRA_DIST += t/multinode/lib.sh t/multinode/run.sh t/multinode/faults.sh t/multinode/misconfig.sh \
	t/multinode/outage.sh t/multinode/restart.sh t/multinode/mpirun.sh t/multinode/resume.sh \
	t/multinode/cut_at_save.py
TESTS += t/slurm/slurm.sh t/slurm/slurm2.sh t/slurm/token.sh
EXTRA_DIST += t/slurm/lib.sh t/slurm/slurm.sh t/slurm/slurm2.sh t/slurm/token.sh t/slurm/intruder.py
