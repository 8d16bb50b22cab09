# core/world — the world from the environment, the TCP store (client,
# server, key-value table) and phx_spawn (doc/comm.md, doc/store.md).
libphalanx_la_SOURCES += core/world/world.c core/world/world-impl.h core/world/spawn.c core/world/free-port.h $(px_store_sources)
# The store alone (tests of its internals and the fuzz target build it in).
px_store_sources = core/world/store.c core/world/store-impl.h core/world/store-local.c core/world/store-tcp.c \
	core/world/store-proto.h core/world/store-server.h \
	core/world/store-server.c core/world/store-conn.c core/world/store-auth.c core/world/store-listen.c \
	core/world/store-kv.c
libphalanx_la_CPPFLAGS += $(CRYPTO_CFLAGS)
libphalanx_la_LIBADD += $(CRYPTO_LIBS)

# ---- tests (doc/store.md). t/store_limits builds the store in, for the
# server's counters.
check_PROGRAMS += t/store_limits t/store_token t/store_env t/store_client
TESTS += t/store_limits t/store_token t/store_env t/store_phxrun_token.sh
EXTRA_DIST += t/store_phxrun_token.sh
t_store_limits_SOURCES = t/store_limits.c $(px_store_sources) core/base/util.c
t_store_limits_CPPFLAGS = $(AM_CPPFLAGS) $(CRYPTO_CFLAGS)
t_store_limits_LDADD = libphalanx.la $(CRYPTO_LIBS)
t_store_token_SOURCES = t/store_token.c
t_store_token_LDADD = libphalanx.la
t_store_env_SOURCES = t/store_env.c
t_store_env_LDADD = libphalanx.la
t_store_client_SOURCES = t/store_client.c
t_store_client_LDADD = libphalanx.la

# ---- make bench: the store server under attack (bench/store_attack.sh)
noinst_PROGRAMS += bench/store_attack
bench_store_attack_SOURCES = bench/store_attack.c
bench_store_attack_LDADD = libphalanx.la
bench_programs += bench/store_attack
EXTRA_DIST += bench/store_attack.sh

# Slurm: MASTER_ADDR from the node list, a batch script told to use srun.
check_PROGRAMS += t/world_slurm
TESTS += t/world_slurm
t_world_slurm_SOURCES = t/world_slurm.c t/env-util.h
t_world_slurm_LDADD = libphalanx.la
