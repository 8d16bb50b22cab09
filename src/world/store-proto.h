/* The store's wire protocol (doc/reference/store.md), its key-value table and its
 * server (internal, px_ prefix). */
#ifndef PHX_CORE_STORE_PROTO_H
#define PHX_CORE_STORE_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "phalanx/store.h"

/* Every frame is an 8-byte header, then `len` bytes of body:
 *     u32 len (little endian), u32 op (request) or status (reply).
 * Body fields: u32 length-prefixed byte strings and i64 integers, all
 * little endian. A request whose len exceeds its op's limit, whose fields
 * do not exactly fill len, or whose key/value exceed PHX_STORE_MAX_KEY /
 * PHX_STORE_MAX_VALUE gets the connection closed. */
#define PX_STORE_MAGIC 0x53584850u /* "PHXS" */
#define PX_STORE_VERSION 2u
#define PX_STORE_HDR 8u
#define PX_STORE_MAX_WAIT_BODY (1u << 20) /* WAIT: all its keys together */
#define PX_STORE_NONCE 32u /* handshake nonces and proofs */
#define PX_STORE_HELLO_BODY (8u + PX_STORE_NONCE)
#define PX_STORE_FLAG_TOKEN 1u /* HELLO reply: the server needs a token */

/* The handshake: HELLO (magic, version, client nonce) -> OK (version,
 * flags, server nonce); when either side has a job token, AUTH (the
 * client's proof) -> OK (the server's proof) or DENIED. Nothing else is
 * accepted before it completes. */
enum px_store_op {
    PX_OP_HELLO = 1, /* u32 magic, u32 version, nonce -> OK u32 version, u32 flags, nonce | VERSION u32 version */
    PX_OP_SET = 2, /* key, value -> OK */
    PX_OP_GET = 3, /* key, i64 timeout_ms -> OK value | TIMEOUT */
    PX_OP_ADD = 4, /* key, i64 delta -> OK i64 | NOTINT */
    PX_OP_WAIT = 5, /* i64 timeout_ms, u32 n, n keys -> OK | TIMEOUT u32 first missing */
    PX_OP_CAS = 6, /* key, expected, desired -> OK value now */
    PX_OP_DELETE = 7, /* key -> OK u32 deleted */
    PX_OP_NUMKEYS = 8, /* -> OK i64 */
    PX_OP_AUTH = 9, /* proof -> OK proof | DENIED */
    PX_OP_MAX = 9
};

enum px_store_reply {
    PX_ST_OK = 0,
    PX_ST_TIMEOUT = 1,
    PX_ST_NOTINT = 2, /* ADD on a value that is not a decimal integer */
    PX_ST_VERSION = 3, /* HELLO of another protocol version: u32 the server's */
    PX_ST_DENIED = 4 /* AUTH: the proof does not match the server's token */
};

/* Largest body a request of that op may have; 0 for an unknown op. */
static inline size_t px_store_max_body(uint32_t op)
{
    const size_t k = 4 + PHX_STORE_MAX_KEY, v = 4 + (size_t)PHX_STORE_MAX_VALUE;
    switch (op) {
    case PX_OP_HELLO: return PX_STORE_HELLO_BODY;
    case PX_OP_SET: return k + v;
    case PX_OP_GET:
    case PX_OP_ADD: return k + 8;
    case PX_OP_WAIT: return PX_STORE_MAX_WAIT_BODY;
    case PX_OP_CAS: return k + 2 * v;
    case PX_OP_DELETE: return k;
    case PX_OP_NUMKEYS: return 0;
    case PX_OP_AUTH: return PX_STORE_NONCE;
    default: return 0;
    }
}

static inline void px_put_u32(uint8_t *p, uint32_t x)
{
    p[0] = (uint8_t)x;
    p[1] = (uint8_t)(x >> 8);
    p[2] = (uint8_t)(x >> 16);
    p[3] = (uint8_t)(x >> 24);
}
static inline uint32_t px_get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline void px_put_i64(uint8_t *p, int64_t x)
{
    px_put_u32(p, (uint32_t)(uint64_t)x);
    px_put_u32(p + 4, (uint32_t)((uint64_t)x >> 32));
}
static inline int64_t px_get_i64(const uint8_t *p)
{
    return (int64_t)((uint64_t)px_get_u32(p) | (uint64_t)px_get_u32(p + 4) << 32);
}

/* A cursor over a received body; every read checks the bytes left. */
typedef struct px_rd {
    const uint8_t *p;
    size_t left;
} px_rd;

static inline int px_rd_u32(px_rd *r, uint32_t *x)
{
    if (r->left < 4) return -1;
    *x = px_get_u32(r->p);
    r->p += 4;
    r->left -= 4;
    return 0;
}
static inline int px_rd_i64(px_rd *r, int64_t *x)
{
    if (r->left < 8) return -1;
    *x = px_get_i64(r->p);
    r->p += 8;
    r->left -= 8;
    return 0;
}
/* A length-prefixed string of at most max bytes (points into the body). */
static inline int px_rd_bytes(px_rd *r, size_t max, const uint8_t **b, size_t *n)
{
    uint32_t len;
    if (px_rd_u32(r, &len) || len > max || len > r->left) return -1;
    *b = r->p;
    *n = len;
    r->p += len;
    r->left -= len;
    return 0;
}

/* ---- The key-value table (server and in-process store). Keys and
 * values are byte strings; counters made by add are decimal text. Values
 * are reference-counted blobs, so the server sends a value to any number
 * of readers without copying it. Not thread-safe: the owner locks. */
typedef struct px_blob {
    int refs; /* the table's (while live) and each pending reply's */
    int live; /* 1 while the table holds it */
    size_t len;
    uint8_t data[]; /* len bytes, then a NUL */
} px_blob;

static inline px_blob *px_blob_ref(px_blob *b)
{
    b->refs++;
    return b;
}
void px_blob_unref(px_blob *b);

typedef struct px_kv px_kv;

px_kv *px_kv_new(void);
void px_kv_free(px_kv *kv);
/* The value, or NULL when missing (pointer valid until the next change). */
const uint8_t *px_kv_get(const px_kv *kv, const void *key, size_t klen, size_t *vlen);
/* The value's blob (no reference taken), or NULL. */
px_blob *px_kv_get_blob(const px_kv *kv, const void *key, size_t klen);
phx_status px_kv_set(px_kv *kv, const void *key, size_t klen, const void *val, size_t vlen);
/* PHX_EINVAL when the value there is not a decimal integer. */
phx_status px_kv_add(px_kv *kv, const void *key, size_t klen, int64_t delta, int64_t *result);
/* Sets desired when the key holds expected (or is missing and elen == 0);
 * *changed (may be NULL) says whether it did. */
phx_status px_kv_cas(px_kv *kv, const void *key, size_t klen, const void *exp, size_t elen, const void *des,
                     size_t dlen, int *changed);
int px_kv_delete(px_kv *kv, const void *key, size_t klen);
int64_t px_kv_count(const px_kv *kv);

/* ---- The TCP server: a thread polling its listening socket and clients. */
typedef struct px_store_server px_store_server;

/* Binds host:port (port 0: any free port) and starts the thread. With a
 * token (token_len > 0) only clients that prove it are served.
 * PHX_EIO "port in use" / "cannot resolve host". */
phx_status px_store_server_start(const char *host, int port, const void *token, size_t token_len,
                                 px_store_server **out);
int px_store_server_port(const px_store_server *s);
/* Waits up to linger_s for every client that completed the handshake to
 * disconnect (connections still in it are not waited for), but no longer
 * than PX_STORE_LINGER_QUIET seconds with none of them heard from (a peer
 * cut off by the network, or stopped, is not waited for: a live one polls
 * or closes), then stops the thread and frees everything. NULL is a no-op. */
#define PX_STORE_LINGER_QUIET 2.0

/* The key where a server started under phxrun records PHX_RESTART_COUNT. */
#define PX_STORE_ATTEMPT_KEY "phx/store/attempt"
void px_store_server_stop(px_store_server *s, double linger_s);

/* Resolves host for a TCP socket (numeric or by name): PHX_EIO "cannot
 * resolve host" on failure; *res is freed with freeaddrinfo. */
struct addrinfo;
phx_status px_store_resolve(const char *who, const char *host, int port, int passive, struct addrinfo **res);

#endif
