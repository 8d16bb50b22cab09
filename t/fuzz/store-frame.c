/* Fuzz target: the store server's frame parser and request engine
 * (src/world/store-conn.c), driven without sockets. The input is
 *
 *     u8 mode          bit 0: the server has a job token
 *                      bit 1: a 1 KiB stale-value budget
 *                      bit 2: clients read replies only when told
 *     records          u8 what, u16 n (little endian), then:
 *       what & 0xc0 == 0x00   n bytes from client (what & 3)
 *       what & 0xc0 == 0x40   client (what & 3) sends a valid AUTH
 *       what & 0xc0 == 0x80   client (what & 3) reads n reply bytes
 *       what == 0xff          n milliseconds pass
 *
 * A dropped client is replaced by a new one in its slot. After every
 * record the target checks the engine's invariants and aborts when one
 * breaks: the byte counters match the buffers, nothing but a handshake's
 * bytes is held before the handshake ends, a client is never read while
 * it has a reply pending or a parked request, every reply frame is
 * well-formed, and old values held for unread replies stay within budget. */
#include "config.h"
#include <stdio.h>
#include <stdlib.h>
#include "src/world/store-server.h"

#define NCLIENTS 4

typedef struct client {
    px_conn *c;
    uint8_t hdr[PX_STORE_HDR]; /* the reply frame being read back */
    size_t hdr_got, body_left;
} client;

static const uint8_t token[] = "fuzz-job-token";

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "store-frame: invariant broken: %s\n", what);
        abort();
    }
}

static size_t slot_of(const px_store_core *k, const px_conn *c)
{
    for (size_t i = 0; i < k->nconns; i++)
        if (k->conns[i] == c) return i;
    check(0, "a client is missing from the server's list");
    return 0;
}

/* Reads up to n reply bytes of cl, checking the frames as they go. */
static void drain(px_store_core *k, client *cl, size_t n, double now)
{
    struct iovec iov[2];
    int parts;
    while (n && (parts = px_conn_output(cl->c, iov)) > 0) {
        size_t take = iov[0].iov_len < n ? iov[0].iov_len : n;
        const uint8_t *p = iov[0].iov_base;
        for (size_t i = 0; i < take; i++) {
            if (cl->hdr_got < PX_STORE_HDR) {
                cl->hdr[cl->hdr_got++] = p[i];
                if (cl->hdr_got == PX_STORE_HDR) {
                    cl->body_left = px_get_u32(cl->hdr);
                    check(px_get_u32(cl->hdr + 4) <= PX_ST_DENIED, "a reply has an unknown status");
                    check(cl->body_left <= (size_t)PHX_STORE_MAX_VALUE + 8, "a reply frame is too long");
                    if (!cl->body_left) cl->hdr_got = 0;
                }
            } else if (--cl->body_left == 0) {
                cl->hdr_got = 0;
            }
        }
        px_conn_sent(k, cl->c, take, now);
        n -= take;
    }
}

static void feed(px_store_core *k, px_conn *c, const uint8_t *p, size_t n, double now)
{
    while (n) {
        uint8_t *dst;
        size_t want;
        px_conn_want(k, c, &dst, &want);
        if (!want) return; /* not reading: the rest stays in the "socket" */
        size_t take = want < n ? want : n;
        memcpy(dst, p, take);
        px_conn_got(k, c, take, now);
        p += take;
        n -= take;
    }
}

static void send_auth(px_store_core *k, px_conn *c, double now)
{
    uint8_t f[PX_STORE_HDR + PX_STORE_NONCE];
    px_put_u32(f, PX_STORE_NONCE);
    px_put_u32(f + 4, PX_OP_AUTH);
    if (px_store_proof(token, sizeof token - 1, "client", c->cnonce, c->snonce, f + PX_STORE_HDR)) abort();
    feed(k, c, f, sizeof f, now);
}

static void invariants(const px_store_core *k)
{
    size_t body = 0, out = 0, stale = 0;
    for (size_t i = 0; i < k->nconns; i++) {
        const px_conn *c = k->conns[i];
        struct iovec iov[2];
        body += c->body_cap;
        out += c->out_cap;
        check(c->body_got <= c->body_cap && c->body_cap <= c->body_len, "a body buffer is inconsistent");
        if (c->state == PX_CONN_HELLO || c->state == PX_CONN_AUTH)
            check(c->body_cap <= PX_STORE_HELLO_BODY, "more than a handshake held before the handshake");
        if (px_conn_reading(c)) check(!c->parked && !px_conn_output(c, iov), "reading with a reply pending");
        if (c->parked) check(c->wait_idx < c->wait_n, "a parked request has no missing key");
        if (c->blob && !c->blob->live && !c->why[0]) stale += c->blob->len;
    }
    check(body == k->stats.body_bytes, "the request byte counter drifted");
    check(out == k->stats.out_bytes, "the reply byte counter drifted");
    check(stale <= k->max_stale, "old values held for unread replies beyond the budget");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    uint8_t mode = data[0];
    px_store_core k;
    if (px_core_init(&k, token, (mode & 1) ? sizeof token - 1 : 0)) return 0;
    k.fixed_nonces = 1;
    if (mode & 2) k.max_stale = 1024;
    client cl[NCLIENTS];
    memset(cl, 0, sizeof cl);
    for (int i = 0; i < NCLIENTS; i++)
        if (!(cl[i].c = px_core_add(&k, -1, "fuzz"))) {
            px_core_destroy(&k);
            return 0;
        }
    double now = 1000.0;
    size_t off = 1;
    while (off + 3 <= size) {
        uint8_t what = data[off];
        size_t n = (size_t)data[off + 1] | (size_t)data[off + 2] << 8;
        off += 3;
        client *me = &cl[what & 3];
        if (what == 0xff) {
            now += (double)n / 1000.0;
        } else if ((what & 0xc0) == 0x40) {
            send_auth(&k, me->c, now);
        } else if ((what & 0xc0) == 0x80) {
            drain(&k, me, n, now);
        } else {
            if (n > size - off) n = size - off;
            feed(&k, me->c, data + off, n, now);
            off += n;
        }
        px_core_expire(&k, now);
        if (!(mode & 4))
            for (int i = 0; i < NCLIENTS; i++) drain(&k, &cl[i], SIZE_MAX, now);
        invariants(&k);
        for (int i = 0; i < NCLIENTS; i++) {
            if (!cl[i].c->why[0] && !cl[i].c->gone) continue;
            px_core_remove(&k, slot_of(&k, cl[i].c));
            memset(&cl[i], 0, sizeof cl[i]);
            check((cl[i].c = px_core_add(&k, -1, "fuzz")) != NULL, "out of memory for a client");
        }
    }
    px_core_destroy(&k);
    return 0;
}
