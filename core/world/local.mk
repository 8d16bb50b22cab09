# core/world — the world from the environment, the TCP store (client,
# server, key-value table) and phx_spawn (doc/comm.md, doc/store.md).
libphalanx_la_SOURCES += core/world/world.c core/world/spawn.c core/world/free-port.h $(px_store_sources)
# The store alone (tests of its internals and the fuzz target build it in).
px_store_sources = core/world/store.c core/world/store-proto.h core/world/store-server.h \
	core/world/store-server.c core/world/store-conn.c core/world/store-auth.c core/world/store-listen.c \
	core/world/store-kv.c
libphalanx_la_CPPFLAGS += $(CRYPTO_CFLAGS)
libphalanx_la_LIBADD += $(CRYPTO_LIBS)
