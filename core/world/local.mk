# core/world — the world from the environment, the TCP store (client,
# server, key-value table) and phx_spawn (doc/comm.md, doc/store.md).
libphalanx_la_SOURCES += core/world/world.c core/world/store.c core/world/store-server.c \
	core/world/store-kv.c core/world/store-proto.h core/world/spawn.c core/world/free-port.h
