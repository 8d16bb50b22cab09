/* The store handle and its backends (internal): phx_store is the common
 * head of every handle, and px_store_ops the backend's table (c10d's
 * Store with its HashStore and TCPStore). store.c checks the arguments of
 * the public calls and dispatches through s->ops; store-local.c is the
 * in-process store, store-tcp.c the TCP client. */
#ifndef PHX_CORE_STORE_IMPL_H
#define PHX_CORE_STORE_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include "phalanx/store.h"

typedef struct px_store_ops px_store_ops;

/* The head of every handle; a backend's handle starts with it. */
struct phx_store {
    const px_store_ops *ops;
    double timeout_s; /* for calls that pass no timeout */
    char host_of[40]; /* " (rank 0)": who hosts the server, for messages */
};

/* A backend. Every slot is required. The operations get their arguments
 * checked (keys and values within the limits of doc/reference/store.md), who (the
 * public function's name, for messages), the key's length kl and, for
 * the waiting ones, the timeout t in seconds already resolved. Each sets
 * phx_last_error with the same message whichever the backend. */
struct px_store_ops {
    int in_process; /* 1: phx_store_is_local */
    phx_status (*set)(phx_store *s, const char *who, const char *key, size_t kl, const void *value, size_t len);
    /* *value: a px_malloc'd copy with a NUL after it (not counted) */
    phx_status (*get)(phx_store *s, const char *who, const char *key, size_t kl, double t, void **value, size_t *len);
    /* result may be NULL */
    phx_status (*add)(phx_store *s, const char *who, const char *key, size_t kl, int64_t delta, int64_t *result);
    phx_status (*wait)(phx_store *s, const char *who, const char *const *keys, size_t n, double t);
    /* On PHX_OK: *nlen the length of the value now stored (0 when none)
     * and, when want is set, *now a px_malloc'd copy of it with a NUL
     * after it; without want *now may be set too (the caller frees it). */
    phx_status (*compare_set)(phx_store *s, const char *who, const char *key, size_t kl, const void *expected,
                              size_t elen, const void *desired, size_t dlen, int want, uint8_t **now, size_t *nlen);
    /* deleted may be NULL */
    phx_status (*del)(phx_store *s, const char *who, const char *key, size_t kl, int *deleted);
    phx_status (*num_keys)(phx_store *s, const char *who, int64_t *count);
    /* A new handle on the same store (its own connection for TCP). */
    phx_status (*clone)(phx_store *s, phx_store **out);
    void (*free)(phx_store *s);
    int (*port)(const phx_store *s); /* -1: none */
    phx_status (*local_addr)(const phx_store *s, char *buf, size_t len);
};

/* ---- store.c: what both backends share */
/* A px_malloc'd copy of v[0..len) with a NUL after it; NULL when out of
 * memory. */
void *px_store_dup_value(const void *v, size_t len);
/* The body of a WAIT request for these keys, in bytes (the protocol's
 * limit applies to both backends). */
size_t px_store_wait_size(const char *const *keys, size_t n);
/* PHX_ETIMEOUT: key not set after t seconds. */
phx_status px_store_not_set(const char *who, const char *key, double t);
/* PHX_EINVAL: key holds a value that add cannot count on. */
phx_status px_store_not_int(const char *who, const char *key);
/* Names who hosts the store's server ("rank 0") in the handle's messages
 * (a TCP handle's: "the store server at h:p (rank 0) stopped answering");
 * clones keep it. */
void px_store_set_host(phx_store *s, const char *who);
#endif
