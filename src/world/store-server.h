/* The store server's parts (internal): the protocol engine that turns a
 * connection's bytes into requests and replies (store-conn.c, no sockets:
 * the fuzz target drives it directly), the job token's proofs
 * (store-auth.c), the listening socket (store-listen.c) and the thread
 * that polls the sockets (store-server.c). Limits: doc/reference/store.md. */
#ifndef PHX_CORE_STORE_SERVER_H
#define PHX_CORE_STORE_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include "src/world/store-proto.h"

/* A request body grows with the bytes received, from this size up. */
#define PX_STORE_BODY_CHUNK ((size_t)64 << 10)
/* A connection's reply buffer (headers, small values) is freed after a
 * flush when it grew beyond this. */
#define PX_STORE_OUT_KEEP ((size_t)64 << 10)
/* Bytes of values no longer in the table that pending replies may keep
 * alive, all clients together; beyond it the clients that read least
 * recently are disconnected. */
#define PX_STORE_MAX_STALE ((size_t)256 << 20)
/* Largest timeout a request may carry (the server clamps longer ones). */
#define PX_STORE_MAX_TIMEOUT_MS ((int64_t)1000 * 1000 * 1000)
/* Largest job token (PHX_STORE_TOKEN), in bytes. */
#define PX_STORE_MAX_TOKEN 1024u
/* Seconds a connection has, from its accept, to complete the handshake
 * (HELLO, and AUTH when the server has a token); the server closes it
 * then. A Phalanx client sends HELLO as soon as it connects, so only a
 * stranger (or a client stuck for seconds) is closed; until then it is
 * not a client the server's stop waits for. */
#define PX_STORE_HANDSHAKE_S 5.0

enum px_conn_state { PX_CONN_HELLO, PX_CONN_AUTH, PX_CONN_READY, PX_CONN_CLOSING };

typedef struct px_conn {
    int fd; /* -1 when driven without a socket */
    int state; /* enum px_conn_state */
    char why[160]; /* set: drop it now (logged as a warning) */
    char closing[160]; /* CLOSING: why, once the reply is sent */
    char denied[160]; /* set: HELLO is answered DENIED with this text */
    int gone; /* set: close it quietly (peer hung up) */
    int joined; /* completed the handshake (reached READY) */
    double since; /* when it was accepted (the handshake deadline) */
    char peer[64]; /* "addr:port" for log lines */
    uint8_t cnonce[PX_STORE_NONCE], snonce[PX_STORE_NONCE];
    /* the request being received */
    uint8_t hdr[PX_STORE_HDR];
    size_t hdr_got;
    uint32_t op;
    uint8_t *body; /* body_cap bytes, body_got received */
    size_t body_len, body_got, body_cap;
    /* a GET/WAIT parked until its keys exist or its deadline */
    int parked;
    double deadline; /* < 0: forever */
    uint32_t wait_n, wait_idx; /* keys; index of the first missing one */
    size_t wait_off; /* body offset of that key's length */
    /* the reply being sent: out[out_off..out_len), then blob[blob_off..) */
    uint8_t *out;
    size_t out_len, out_off, out_cap;
    px_blob *blob; /* a value sent without copying (a reference) */
    size_t blob_off;
    double progress; /* when the peer last took reply bytes */
} px_conn;

/* Counters a test or a benchmark reads (px_store_server_stats). */
typedef struct px_store_stats {
    uint64_t wake_checks; /* parked keys looked up after a change */
    uint64_t stalled_drops; /* clients dropped for not reading */
    uint64_t refused; /* clients refused at the handshake */
    uint64_t accept_backoffs; /* accept() out of descriptors: paused */
    size_t body_bytes; /* request bytes allocated now */
    size_t out_bytes; /* reply buffers allocated now */
    size_t stale_bytes; /* old values pending replies keep alive */
    size_t clients; /* connections open now */
} px_store_stats;

typedef struct px_store_core {
    px_kv *kv;
    px_conn **conns;
    size_t nconns, capconns;
    uint8_t token[PX_STORE_MAX_TOKEN];
    size_t token_len; /* 0: no token, the handshake ends at HELLO */
    int local_only; /* no token: serve only this user's processes on this host */
    size_t max_stale; /* PX_STORE_MAX_STALE (tests lower it) */
    uint64_t nonce_seq; /* fixed_nonces: deterministic nonces */
    int fixed_nonces; /* the fuzz target: no randomness */
    px_store_stats stats;
} px_store_core;

/* ---- store-conn.c: the protocol engine */
phx_status px_core_init(px_store_core *k, const void *token, size_t token_len);
void px_core_destroy(px_store_core *k);
/* A new connection (fd -1 without a socket); NULL when out of memory. */
px_conn *px_core_add(px_store_core *k, int fd, const char *peer);
/* When a client past the handshake last sent or took bytes (0: none). */
double px_core_heard(const px_store_core *k);
/* Frees connection i (does not close its fd); the last one takes slot i. */
void px_core_remove(px_store_core *k, size_t i);
/* Where the next received bytes go: at most *n bytes at *dst (never 0
 * while the connection reads). */
void px_conn_want(px_store_core *k, px_conn *c, uint8_t **dst, size_t *n);
/* n bytes arrived at the place px_conn_want gave: checks the header as
 * soon as it is complete and runs every complete request. */
void px_conn_got(px_store_core *k, px_conn *c, size_t n, double now);
/* 1 when the connection should be polled for reading (no reply pending,
 * no parked request, not closing). */
int px_conn_reading(const px_conn *c);
/* The reply bytes still to send (at most 2 pieces); 0 when none. */
int px_conn_output(const px_conn *c, struct iovec iov[2]);
/* n reply bytes went out; frees what was sent. */
void px_conn_sent(px_store_core *k, px_conn *c, size_t n, double now);
/* Answers parked requests whose deadline passed; returns the earliest
 * deadline still ahead (< 0: none). */
double px_core_expire(px_store_core *k, double now);
/* The connections that have not completed the handshake: with now >= 0,
 * fails those accepted PX_STORE_HANDSHAKE_S or more before now; returns
 * the earliest handshake deadline of the others (any, with now < 0),
 * < 0 when none. */
double px_core_handshakes(px_store_core *k, double now);
/* Connections that completed the handshake (the clients a stop waits
 * for). */
size_t px_core_joined(const px_store_core *k);
/* Drops (sets why on) the clients that read least recently while old
 * values held for them exceed max_stale. */
void px_core_budget(px_store_core *k);

/* ---- store-auth.c: the job token */
/* The job token into buf: PHX_STORE_TOKEN, else the secret in
 * ~/.phalanx/job-token (created on first use, 0600 in a 0700 folder).
 * src gets where it came from ("PHX_STORE_TOKEN", "the job token from
 * <path>"), or with *len 0 why there is none (HOME unset or not
 * writable). PHX_EINVAL: PHX_STORE_TOKEN longer than PX_STORE_MAX_TOKEN;
 * PHX_EIO: a job-token file others may read, of another owner, or empty. */
phx_status px_store_token(const char *who, uint8_t *buf, size_t *len, char *src, size_t srclen);
/* PHX_STORE_INSECURE=1: a store without a secret serves every peer, and a
 * multi-node job may start without one. */
int px_store_insecure(void);
/* Random bytes for a nonce; PHX_EIO when the system has none. */
phx_status px_store_nonce(uint8_t *out, size_t n);
/* The proof one side gives: HMAC-SHA256(token, label, client nonce,
 * server nonce); label "client" or "server". -1 when libcrypto fails. */
int px_store_proof(const uint8_t *token, size_t tlen, const char *label, const uint8_t *cnonce, const uint8_t *snonce,
                   uint8_t out[PX_STORE_NONCE]);
/* Constant-time comparison of two proofs: 1 when equal. */
int px_store_proof_eq(const uint8_t *a, const uint8_t *b);

/* ---- store-listen.c: the listening socket */
/* Binds host:port (loopback stays loopback; any other address listens on
 * every interface of its family: *everywhere = 1) and listens; returns
 * the fd and the port bound, or -1 with phx_error set. */
int px_store_listen(const char *host, int port, int *bound, int *everywhere);
/* Accepts what is waiting; returns the number of new connections, or -1
 * when the process is out of file descriptors (the caller stops polling
 * the socket for a while instead of spinning). */
int px_store_accept(px_store_core *k, int lfd);
/* Whether the peer of the TCP connection fd is a socket of this host
 * owned by this process's user (its entry in /proc/net/tcp[6]): 1 yes;
 * 0 no, with the reason in why. */
int px_store_peer_is_mine(int fd, char *why, size_t len);
/* Whether host names an address of this machine (it can be bound). */
int px_store_addr_is_local(const char *host);

/* ---- store-tcp.c: the server a TCP handle started (NULL: none) */
px_store_server *px_store_server_of(phx_store *s);

/* ---- store-server.c */
/* The server's counters (a copy taken at the end of its last round). */
void px_store_server_stats(px_store_server *s, px_store_stats *out);
/* Changes the stale-value budget (tests); the server takes it at the end
 * of its current round (after the next event). */
void px_store_server_set_max_stale(px_store_server *s, size_t bytes);

#endif
