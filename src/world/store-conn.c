/* The store server's protocol engine: a connection's bytes become frames,
 * frames become requests, requests become replies. No sockets here: the
 * server thread (store-server.c) and the fuzz target feed it bytes.
 *
 * Memory stays bounded by what the clients are entitled to: nothing but
 * the handshake is read before it completes (a 40-byte HELLO, a 32-byte
 * AUTH), a request body grows with the bytes that actually arrive, a
 * value is sent by reference instead of being copied per reader, a reply
 * buffer that grew is freed once sent, and old values kept alive only by
 * replies nobody reads are capped (px_core_budget).
 *
 * A parked GET/WAIT remembers its first missing key: a write looks only at
 * the parked requests waiting for that very key, so a SET costs
 * O(parked requests), not O(parked requests x their keys). */
#include "config.h"
#include <stdarg.h>
#include <stdio.h>
#include "src/world/store-server.h"
#include "src/base/util.h"
#include "phalanx/log.h"

phx_status px_core_init(px_store_core *k, const void *token, size_t token_len)
{
    memset(k, 0, sizeof *k);
    if (token_len > PX_STORE_MAX_TOKEN)
        return phx_error(PHX_EINVAL, "store server: job token is %zu bytes long, at most %u allowed", token_len,
                         PX_STORE_MAX_TOKEN);
    if (!(k->kv = px_kv_new())) return PHX_ENOMEM;
    if (token_len) memcpy(k->token, token, token_len);
    k->token_len = token_len;
    k->max_stale = PX_STORE_MAX_STALE;
    return PHX_OK;
}

void px_core_destroy(px_store_core *k)
{
    while (k->nconns) px_core_remove(k, k->nconns - 1);
    px_free(k->conns);
    px_kv_free(k->kv);
    memset(k, 0, sizeof *k);
}

px_conn *px_core_add(px_store_core *k, int fd, const char *peer)
{
    if (k->nconns == k->capconns) {
        size_t cap = k->capconns ? 2 * k->capconns : 16;
        px_conn **cs = px_realloc(k->conns, cap * sizeof *cs);
        if (!cs) return NULL;
        k->conns = cs;
        k->capconns = cap;
    }
    px_conn *c = px_calloc(1, sizeof *c);
    if (!c) return NULL;
    c->fd = fd;
    c->state = PX_CONN_HELLO;
    snprintf(c->peer, sizeof c->peer, "%s", peer ? peer : "?");
    k->conns[k->nconns++] = c;
    return c;
}

static void free_body(px_store_core *k, px_conn *c)
{
    px_free(c->body);
    k->stats.body_bytes -= c->body_cap;
    c->body = NULL;
    c->body_cap = c->body_len = c->body_got = 0;
}

static void free_out(px_store_core *k, px_conn *c)
{
    px_free(c->out);
    k->stats.out_bytes -= c->out_cap;
    c->out = NULL;
    c->out_cap = c->out_len = c->out_off = 0;
}

void px_core_remove(px_store_core *k, size_t i)
{
    px_conn *c = k->conns[i];
    free_body(k, c);
    free_out(k, c);
    px_blob_unref(c->blob);
    px_free(c);
    k->conns[i] = k->conns[--k->nconns];
}

/* Marks c for disconnection with a reason (the first reason wins). */
static void fail(px_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(px_conn *c, const char *fmt, ...)
{
    if (c->why[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why, sizeof c->why, fmt, ap);
    va_end(ap);
    c->state = PX_CONN_CLOSING;
}

/* ------------------------------------------------------------- replies */

/* Appends a reply frame whose body is a then b (copied). */
static void reply(px_store_core *k, px_conn *c, uint32_t status, const void *a, size_t alen, const void *b, size_t blen)
{
    size_t need = c->out_len + PX_STORE_HDR + alen + blen;
    if (need > c->out_cap) {
        uint8_t *o = px_realloc(c->out, need);
        if (!o) {
            fail(c, "out of memory for a %zu-byte reply", need);
            return;
        }
        k->stats.out_bytes += need - c->out_cap;
        c->out = o;
        c->out_cap = need;
    }
    uint8_t *p = c->out + c->out_len;
    px_put_u32(p, (uint32_t)(alen + blen));
    px_put_u32(p + 4, status);
    if (alen) memcpy(p + PX_STORE_HDR, a, alen);
    if (blen) memcpy(p + PX_STORE_HDR + alen, b, blen);
    c->out_len = need;
}

static void reply_u32(px_store_core *k, px_conn *c, uint32_t status, uint32_t x)
{
    uint8_t b[4];
    px_put_u32(b, x);
    reply(k, c, status, b, 4, NULL, 0);
}

/* A value as the reply body, sent from the table's blob (no copy). */
static void reply_blob(px_store_core *k, px_conn *c, px_blob *v)
{
    if (!v || v->len == 0) {
        reply(k, c, PX_ST_OK, NULL, 0, NULL, 0);
        return;
    }
    reply(k, c, PX_ST_OK, NULL, 0, NULL, 0);
    px_put_u32(c->out + c->out_len - PX_STORE_HDR, (uint32_t)v->len);
    c->blob = px_blob_ref(v);
    c->blob_off = 0;
}

int px_conn_output(const px_conn *c, struct iovec iov[2])
{
    int n = 0;
    if (c->out_off < c->out_len) iov[n++] = (struct iovec){c->out + c->out_off, c->out_len - c->out_off};
    if (c->blob && c->blob_off < c->blob->len)
        iov[n++] = (struct iovec){c->blob->data + c->blob_off, c->blob->len - c->blob_off};
    return n;
}

void px_conn_sent(px_store_core *k, px_conn *c, size_t n, double now)
{
    if (n) c->progress = now;
    size_t a = c->out_len - c->out_off;
    if (n < a) {
        c->out_off += n;
        return;
    }
    n -= a;
    c->out_off = c->out_len;
    if (c->blob) {
        c->blob_off += n;
        if (c->blob_off < c->blob->len) return;
        px_blob_unref(c->blob);
        c->blob = NULL;
    }
    c->out_off = c->out_len = 0;
    if (c->out_cap > PX_STORE_OUT_KEEP) free_out(k, c);
    if (c->state == PX_CONN_CLOSING && !c->why[0]) fail(c, "%s", c->closing);
}

int px_conn_reading(const px_conn *c)
{
    return c->state != PX_CONN_CLOSING && !c->why[0] && !c->gone && !c->parked && c->out_len == 0 && !c->blob;
}

/* ------------------------------------------------------ parked requests */

/* The request is answered: forget it. */
static void request_done(px_store_core *k, px_conn *c)
{
    free_body(k, c);
    c->hdr_got = 0;
    c->parked = 0;
}

/* The key at body offset off (validated when the request arrived). */
static const uint8_t *key_at(const px_conn *c, size_t off, size_t *kl)
{
    *kl = px_get_u32(c->body + off);
    return c->body + off + 4;
}

/* Moves a parked request past the keys that exist now; answers it when
 * none is missing. */
static void advance(px_store_core *k, px_conn *c)
{
    size_t kl;
    while (c->wait_idx < c->wait_n) {
        const uint8_t *key = key_at(c, c->wait_off, &kl);
        k->stats.wake_checks++;
        px_blob *v = px_kv_get_blob(k->kv, key, kl);
        if (!v) return;
        if (c->op == PX_OP_GET) {
            reply_blob(k, c, v);
            request_done(k, c);
            return;
        }
        c->wait_idx++;
        c->wait_off += 4 + kl;
    }
    reply(k, c, PX_ST_OK, NULL, 0, NULL, 0);
    request_done(k, c);
}

/* A write made key exist: look at the requests waiting for it. */
static void wake_key(px_store_core *k, const uint8_t *key, size_t klen)
{
    size_t kl;
    for (size_t i = 0; i < k->nconns; i++) {
        px_conn *c = k->conns[i];
        if (!c->parked) continue;
        const uint8_t *want = key_at(c, c->wait_off, &kl);
        if (kl == klen && memcmp(want, key, kl) == 0) advance(k, c);
    }
}

/* A key was deleted: parked waits start over from their first key. */
static void rewind_waits(px_store_core *k)
{
    for (size_t i = 0; i < k->nconns; i++) {
        px_conn *c = k->conns[i];
        if (!c->parked || c->op != PX_OP_WAIT) continue;
        c->wait_idx = 0;
        c->wait_off = 12;
        advance(k, c);
    }
}

double px_core_expire(px_store_core *k, double now)
{
    double next = -1;
    for (size_t i = 0; i < k->nconns; i++) {
        px_conn *c = k->conns[i];
        if (!c->parked || c->deadline < 0) continue;
        if (now >= c->deadline) {
            reply_u32(k, c, PX_ST_TIMEOUT, c->op == PX_OP_GET ? 0 : c->wait_idx);
            request_done(k, c);
        } else if (next < 0 || c->deadline < next) {
            next = c->deadline;
        }
    }
    return next;
}

double px_core_handshakes(px_store_core *k, double now)
{
    double next = -1;
    for (size_t i = 0; i < k->nconns; i++) {
        px_conn *c = k->conns[i];
        if (c->joined || c->why[0] || c->gone) continue;
        double due = c->since + PX_STORE_HANDSHAKE_S;
        if (now >= 0 && now >= due)
            fail(c, "no handshake within %.0f s of connecting", PX_STORE_HANDSHAKE_S);
        else if (next < 0 || due < next)
            next = due;
    }
    return next;
}

size_t px_core_joined(const px_store_core *k)
{
    size_t n = 0;
    for (size_t i = 0; i < k->nconns; i++) n += k->conns[i]->joined != 0;
    return n;
}

double px_core_heard(const px_store_core *k)
{
    double t = 0;
    for (size_t i = 0; i < k->nconns; i++)
        if (k->conns[i]->joined && k->conns[i]->progress > t) t = k->conns[i]->progress;
    return t;
}

/* GET or WAIT: validates every key once, then answers or parks. */
static int start_wait(px_store_core *k, px_conn *c, double now)
{
    px_rd r = {c->body, c->body_len};
    const uint8_t *key;
    size_t kl;
    int64_t tmo;
    uint32_t n;
    if (c->op == PX_OP_GET) {
        if (px_rd_bytes(&r, PHX_STORE_MAX_KEY, &key, &kl) || px_rd_i64(&r, &tmo) || r.left) return -1;
        c->wait_n = 1;
        c->wait_off = 0;
    } else {
        if (px_rd_i64(&r, &tmo) || px_rd_u32(&r, &n)) return -1;
        for (uint32_t i = 0; i < n; i++)
            if (px_rd_bytes(&r, PHX_STORE_MAX_KEY, &key, &kl)) return -1;
        if (r.left) return -1;
        c->wait_n = n;
        c->wait_off = 12;
    }
    c->wait_idx = 0;
    c->parked = 1;
    if (tmo > PX_STORE_MAX_TIMEOUT_MS) tmo = PX_STORE_MAX_TIMEOUT_MS;
    c->deadline = tmo < 0 ? -1.0 : now + (double)tmo / 1000.0;
    advance(k, c);
    if (c->parked && tmo == 0) px_core_expire(k, now);
    return 0;
}

/* ----------------------------------------------------------- requests */

/* A write is about to replace or remove key's value: when replies still
 * hold it, the stale-value budget must be checked afterwards. */
static int pinned(px_store_core *k, const uint8_t *key, size_t kl)
{
    px_blob *v = px_kv_get_blob(k->kv, key, kl);
    return v && v->refs > 1;
}

static void budget_after(px_store_core *k, int was_pinned)
{
    if (was_pinned) px_core_budget(k);
}

static void hello(px_store_core *k, px_conn *c)
{
    px_rd r = {c->body, c->body_len};
    uint32_t magic, version;
    if (px_rd_u32(&r, &magic) || px_rd_u32(&r, &version) || magic != PX_STORE_MAGIC) {
        fail(c, "not a Phalanx store client (bad handshake)");
        return;
    }
    if (version != PX_STORE_VERSION) {
        reply_u32(k, c, PX_ST_VERSION, PX_STORE_VERSION);
        c->state = PX_CONN_CLOSING;
        snprintf(c->closing, sizeof c->closing, "client speaks store protocol version %u, this server %u", version,
                 PX_STORE_VERSION);
        return;
    }
    if (r.left != PX_STORE_NONCE) {
        fail(c, "malformed handshake (%zu-byte nonce)", r.left);
        return;
    }
    memcpy(c->cnonce, r.p, PX_STORE_NONCE);
    if (c->denied[0]) {
        k->stats.refused++;
        reply(k, c, PX_ST_DENIED, c->denied, strlen(c->denied), NULL, 0);
        c->state = PX_CONN_CLOSING;
        snprintf(c->closing, sizeof c->closing, "refused: %s", c->denied);
        return;
    }
    if (k->fixed_nonces) {
        memset(c->snonce, 0, sizeof c->snonce);
        px_put_i64(c->snonce, (int64_t)++k->nonce_seq);
    } else if (px_store_nonce(c->snonce, sizeof c->snonce) != PHX_OK) {
        fail(c, "%s", phx_last_error());
        return;
    }
    uint8_t b[8];
    px_put_u32(b, PX_STORE_VERSION);
    px_put_u32(b + 4, k->token_len ? PX_STORE_FLAG_TOKEN : 0);
    reply(k, c, PX_ST_OK, b, 8, c->snonce, PX_STORE_NONCE);
    c->state = k->token_len ? PX_CONN_AUTH : PX_CONN_READY;
    c->joined = !k->token_len;
}

static void auth(px_store_core *k, px_conn *c)
{
    uint8_t want[PX_STORE_NONCE];
    if (c->body_len != PX_STORE_NONCE) {
        fail(c, "malformed token proof");
        return;
    }
    if (px_store_proof(k->token, k->token_len, "client", c->cnonce, c->snonce, want) ||
        !px_store_proof_eq(want, c->body)) {
        k->stats.refused++;
        reply(k, c, PX_ST_DENIED, NULL, 0, NULL, 0);
        c->state = PX_CONN_CLOSING;
        snprintf(c->closing, sizeof c->closing,
                 "refused: its proof does not match this job's token (PHX_STORE_TOKEN differs)");
        return;
    }
    if (px_store_proof(k->token, k->token_len, "server", c->cnonce, c->snonce, want)) {
        fail(c, "cannot compute the token proof (OpenSSL HMAC failed)");
        return;
    }
    reply(k, c, PX_ST_OK, want, sizeof want, NULL, 0);
    c->state = PX_CONN_READY;
    c->joined = 1;
}

/* Runs the complete request in c->body; a malformed one fails c. */
static void handle(px_store_core *k, px_conn *c, double now)
{
    px_rd r = {c->body, c->body_len};
    const uint8_t *key, *v, *e;
    size_t kl, vl, el;
    int64_t x, res;
    int was, changed;
    if (c->state == PX_CONN_HELLO) {
        hello(k, c);
        return;
    }
    if (c->state == PX_CONN_AUTH) {
        auth(k, c);
        return;
    }
    switch (c->op) {
    case PX_OP_SET:
        if (px_rd_bytes(&r, PHX_STORE_MAX_KEY, &key, &kl) || px_rd_bytes(&r, PHX_STORE_MAX_VALUE, &v, &vl) || r.left)
            break;
        was = pinned(k, key, kl);
        if (px_kv_set(k->kv, key, kl, v, vl)) {
            fail(c, "out of memory storing a %zu-byte value", vl);
            return;
        }
        reply(k, c, PX_ST_OK, NULL, 0, NULL, 0);
        wake_key(k, key, kl);
        budget_after(k, was);
        return;
    case PX_OP_GET:
    case PX_OP_WAIT:
        if (start_wait(k, c, now) < 0) break;
        return;
    case PX_OP_ADD:
        if (px_rd_bytes(&r, PHX_STORE_MAX_KEY, &key, &kl) || px_rd_i64(&r, &x) || r.left) break;
        was = pinned(k, key, kl);
        if (px_kv_add(k->kv, key, kl, x, &res) != PHX_OK) {
            reply(k, c, PX_ST_NOTINT, NULL, 0, NULL, 0);
            return;
        }
        uint8_t b[8];
        px_put_i64(b, res);
        reply(k, c, PX_ST_OK, b, 8, NULL, 0);
        wake_key(k, key, kl);
        budget_after(k, was);
        return;
    case PX_OP_CAS:
        if (px_rd_bytes(&r, PHX_STORE_MAX_KEY, &key, &kl) || px_rd_bytes(&r, PHX_STORE_MAX_VALUE, &e, &el) ||
            px_rd_bytes(&r, PHX_STORE_MAX_VALUE, &v, &vl) || r.left)
            break;
        was = pinned(k, key, kl);
        if (px_kv_cas(k->kv, key, kl, e, el, v, vl, &changed)) {
            fail(c, "out of memory in compare_set");
            return;
        }
        reply_blob(k, c, px_kv_get_blob(k->kv, key, kl));
        if (changed) wake_key(k, key, kl);
        budget_after(k, was && changed);
        return;
    case PX_OP_DELETE:
        if (px_rd_bytes(&r, PHX_STORE_MAX_KEY, &key, &kl) || r.left) break;
        was = pinned(k, key, kl);
        changed = px_kv_delete(k->kv, key, kl);
        reply_u32(k, c, PX_ST_OK, (uint32_t)changed);
        if (changed) rewind_waits(k);
        budget_after(k, was);
        return;
    case PX_OP_NUMKEYS:
        if (r.left) break;
        uint8_t nb[8];
        px_put_i64(nb, px_kv_count(k->kv));
        reply(k, c, PX_ST_OK, nb, 8, NULL, 0);
        return;
    default: break;
    }
    fail(c, "malformed request (type %u, %zu bytes)", c->op, c->body_len);
}

/* ------------------------------------------------------------- frames */

static const char *const op_names[] = {"?", "HELLO", "SET", "GET", "ADD", "WAIT", "CAS", "DELETE", "NUMKEYS", "AUTH"};

/* The header is complete: check it before allocating anything. */
static void header(px_store_core *k, px_conn *c, double now)
{
    c->body_len = px_get_u32(c->hdr);
    c->op = px_get_u32(c->hdr + 4);
    if (c->op == 0 || c->op > PX_OP_MAX) {
        fail(c, "unknown request type %u", c->op);
        return;
    }
    uint32_t expect = c->state == PX_CONN_HELLO ? PX_OP_HELLO : c->state == PX_CONN_AUTH ? PX_OP_AUTH : 0;
    if (expect && c->op != expect) {
        fail(c, "%s before the %s", op_names[c->op],
             expect == PX_OP_HELLO ? "handshake (HELLO)" : "job token proof (AUTH)");
        return;
    }
    if (!expect && (c->op == PX_OP_HELLO || c->op == PX_OP_AUTH)) {
        fail(c, "%s after the handshake", op_names[c->op]);
        return;
    }
    if (c->body_len > px_store_max_body(c->op)) {
        fail(c, "%s frame of %zu bytes exceeds the limit for its type (%zu)", op_names[c->op], c->body_len,
             px_store_max_body(c->op));
        return;
    }
    c->body_got = 0;
    if (c->body_len == 0) {
        handle(k, c, now);
        if (!c->parked) request_done(k, c);
        return;
    }
    c->body_cap = c->body_len < PX_STORE_BODY_CHUNK ? c->body_len : PX_STORE_BODY_CHUNK;
    if (!(c->body = px_malloc(c->body_cap))) {
        c->body_cap = 0;
        fail(c, "out of memory for a %zu-byte request", c->body_len);
        return;
    }
    k->stats.body_bytes += c->body_cap;
}

void px_conn_want(px_store_core *k, px_conn *c, uint8_t **dst, size_t *n)
{
    *dst = NULL;
    *n = 0;
    if (!px_conn_reading(c)) return;
    if (c->hdr_got < PX_STORE_HDR) {
        *dst = c->hdr + c->hdr_got;
        *n = PX_STORE_HDR - c->hdr_got;
        return;
    }
    if (c->body_got == c->body_cap) {
        /* The body grows with what arrives: a client announcing 64 MiB
         * and sending 10 bytes holds 64 KiB, not 64 MiB. */
        size_t cap = c->body_cap * 2 < c->body_len ? c->body_cap * 2 : c->body_len;
        uint8_t *b = px_realloc(c->body, cap);
        if (!b) {
            fail(c, "out of memory for a %zu-byte request", c->body_len);
            return;
        }
        k->stats.body_bytes += cap - c->body_cap;
        c->body = b;
        c->body_cap = cap;
    }
    *dst = c->body + c->body_got;
    *n = c->body_cap - c->body_got;
}

void px_conn_got(px_store_core *k, px_conn *c, size_t n, double now)
{
    c->progress = now;
    if (c->hdr_got < PX_STORE_HDR) {
        c->hdr_got += n;
        if (c->hdr_got == PX_STORE_HDR) header(k, c, now);
        return;
    }
    c->body_got += n;
    if (c->body_got < c->body_len) return;
    handle(k, c, now);
    if (!c->parked) request_done(k, c);
}

/* ------------------------------------------------------------- budget */

void px_core_budget(px_store_core *k)
{
    size_t stale = 0;
    for (size_t i = 0; i < k->nconns; i++) {
        px_conn *c = k->conns[i];
        if (c->blob && !c->blob->live && !c->why[0]) stale += c->blob->len;
    }
    while (stale > k->max_stale) {
        px_conn *worst = NULL;
        for (size_t i = 0; i < k->nconns; i++) {
            px_conn *c = k->conns[i];
            if (c->blob && !c->blob->live && !c->why[0] && (!worst || c->progress < worst->progress)) worst = c;
        }
        if (!worst) break;
        stale -= worst->blob->len;
        k->stats.stalled_drops++;
        fail(worst,
             "does not read its reply (%zu bytes of an overwritten value pending; the server keeps at most "
             "%zu such bytes for all clients)",
             worst->blob->len - worst->blob_off, k->max_stale);
    }
    k->stats.stale_bytes = stale;
}
