# core/comm — world from env, rendezvous store, comm front end, spawn
# (issue 4). Tests: t/comm_*; plugins: plugins/comm/{threads,gloo}.
libphalanx_la_SOURCES += core/world.c core/store.c core/store-server.c core/store-kv.c \
	core/store-proto.h core/comm.c core/comm-work.c core/comm-impl.h core/spawn.c

# ---- tests
check_PROGRAMS += t/comm_collectives
t_comm_collectives_SOURCES = t/comm_collectives.c
t_comm_collectives_LDADD = libphalanx.la
