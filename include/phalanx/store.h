/* Phalanx — the rendezvous key-value store (like torch.distributed.TCPStore).
 * Rank 0 hosts a TCP server at MASTER_ADDR:MASTER_PORT; every rank (rank 0
 * included) talks to it as a client. An in-process store serves worlds of
 * threads. Protocol: doc/reference/store.md. */
#ifndef PHALANX_STORE_H
#define PHALANX_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "phalanx/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct phx_store phx_store;

/* Limits enforced on every frame (larger is a protocol error). */
#define PHX_STORE_MAX_KEY 4096u
#define PHX_STORE_MAX_VALUE (64u << 20)

/* Connects to host:port. When is_server is true, first starts the server
 * on that address in a background thread of this process (owned by the
 * returned store). Clients retry with backoff until timeout_s (<= 0:
 * PHX_TIMEOUT, default 600; at most 1e6 s, longer is clamped). The job
 * token in PHX_STORE_TOKEN (read here; unset: none) is what the server
 * requires and what the client proves (doc/reference/store.md). Errors: PHX_EIO
 * "port in use" / "cannot resolve host" / a refused or missing token,
 * PHX_ETIMEOUT "no server at host:port after N s", PHX_EINVAL a token
 * over 1024 bytes. */
phx_status phx_store_new(const char *host, int port, bool is_server, double timeout_s, phx_store **out);
/* A store living in this process (for worlds of threads); thread-safe. */
phx_store *phx_store_new_local(void);
/* Another handle on the same store (a new connection for TCP stores;
 * shared for local stores). */
phx_status phx_store_clone(phx_store *s, phx_store **out);
/* Closes the connection; stops the server if this handle owns it. */
void phx_store_free(phx_store *s);
/* Port the server listens on (useful with port 0), or -1. */
int phx_store_port(const phx_store *s);

phx_status phx_store_set(phx_store *s, const char *key, const void *value, size_t len);
/* Waits for key up to timeout_s (<= 0: the store's timeout), then returns a
 * malloc'd copy of the value (caller frees with free()). */
phx_status phx_store_get(phx_store *s, const char *key, void **value, size_t *len, double timeout_s);
/* Atomically adds delta to the integer stored at key (missing = 0) and
 * returns the new value in *result (may be NULL). */
phx_status phx_store_add(phx_store *s, const char *key, int64_t delta, int64_t *result);
/* Waits until all n keys exist; PHX_ETIMEOUT names the first missing key. */
phx_status phx_store_wait(phx_store *s, const char *const *keys, size_t n, double timeout_s);
/* If key holds expected (or is missing and elen == 0), sets it to desired.
 * *actual (malloc'd, may be NULL) receives the value now stored. */
phx_status phx_store_compare_set(phx_store *s, const char *key, const void *expected, size_t elen, const void *desired,
                                 size_t dlen, void **actual, size_t *alen);
/* Deletes key; *deleted (may be NULL) is 1 when it existed. */
phx_status phx_store_delete(phx_store *s, const char *key, int *deleted);
phx_status phx_store_num_keys(phx_store *s, int64_t *count);

/* 1 for a store made by phx_store_new_local (or a clone of one). The
 * threads backend accepts only these: its ranks must share one process. */
int phx_store_is_local(const phx_store *s);
/* The numeric address of this host's end of the connection to the store
 * server ("10.0.0.5", "127.0.0.1"): the interface that reaches rank 0,
 * which network backends bind for rendezvous. PHX_EUNSUPPORTED for an
 * in-process store. */
phx_status phx_store_local_addr(const phx_store *s, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
