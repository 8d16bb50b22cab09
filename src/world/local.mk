# src/world — the world from the environment, the TCP store (client,
# server, key-value table) and phx_spawn (doc/comm.md, doc/store.md).
libphalanx_la_SOURCES += src/world/world.c src/world/world-impl.h src/world/spawn.c src/world/free-port.h $(px_store_sources)
# The store alone (tests of its internals and the fuzz target build it in).
px_store_sources = src/world/store.c src/world/store-impl.h src/world/store-local.c src/world/store-tcp.c \
	src/world/store-proto.h src/world/store-server.h \
	src/world/store-server.c src/world/store-conn.c src/world/store-auth.c src/world/store-listen.c \
	src/world/store-kv.c
libphalanx_la_CPPFLAGS += $(CRYPTO_CFLAGS)
libphalanx_la_LIBADD += $(CRYPTO_LIBS)

# ---- tests (doc/store.md). t/store_limits builds the store in, for the
# server's counters.
check_PROGRAMS += t/store_limits t/store_token t/store_env t/store_client
TESTS += t/store_limits t/store_token t/store_env t/store_phxrun_token.sh
EXTRA_DIST += t/store_phxrun_token.sh
t_store_limits_SOURCES = t/store_limits.c $(px_store_sources) src/base/util.c
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
