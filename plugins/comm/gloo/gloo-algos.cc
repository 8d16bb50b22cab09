// Recursive doubling, halving-doubling and ring reduce-scatter over gloo's
// UnboundBuffer transport. Every receive is waited for with the comm's
// timeout; a failure names the peer it was talking to (PeerError).
#include "config.h"

#include "plugins/comm/gloo/gloo-algos.h"

#include <algorithm>
#include <cstring>

#include <gloo/types.h>

#include "phalanx/plugin/kit.h"

namespace pxg
{

using UB = gloo::transport::UnboundBuffer;

uint8_t *Ctx::ensure(size_t bytes)
{
    if (!scratch_ub || scratch.size() < bytes) {
        scratch_ub.reset();
        scratch_send.reset();
        scratch.resize(bytes < 4096 ? 4096 : bytes);
        scratch_ub = ctx->createUnboundBuffer(scratch.data(), scratch.size());
        scratch_send = ctx->createUnboundBuffer(scratch.data(), scratch.size());
    }
    return scratch.data();
}

namespace
{

// Posting fails at once when the pair to that peer is already broken.
void post_send(UB *b, int peer, uint64_t slot, size_t off, size_t n)
{
    try {
        b->send(peer, slot, off, n);
    } catch (const std::exception &e) {
        throw PeerError(peer, e.what());
    }
}

void post_recv(UB *b, int peer, uint64_t slot, size_t off, size_t n)
{
    try {
        b->recv(peer, slot, off, n);
    } catch (const std::exception &e) {
        throw PeerError(peer, e.what());
    }
}

// Waits for b's send or receive, where the watchdog can abort it (then
// the failure another rank published is the message).
void wait_op(Ctx &c, UB *b, int peer, bool send)
{
    {
        std::lock_guard<std::mutex> g(c.mu);
        if (c.dead) throw PeerError(peer, c.why);
        c.waiting = b;
        c.waiting_send = send;
        c.waiting_peer = peer;
        c.waiting_since = std::chrono::steady_clock::now();
    }
    bool done = false;
    try {
        done = send ? b->waitSend(c.timeout) : b->waitRecv(c.timeout);
    } catch (const std::exception &e) {
        std::lock_guard<std::mutex> g(c.mu);
        c.waiting = nullptr;
        throw PeerError(peer, e.what());
    }
    std::lock_guard<std::mutex> g(c.mu);
    c.waiting = nullptr;
    if (!done) throw PeerError(peer, c.why);
}

void wait_recv(Ctx &c, UB *b, int peer)
{
    wait_op(c, b, peer, false);
}

void wait_send(Ctx &c, UB *b, int peer)
{
    wait_op(c, b, peer, true);
}

// Exchanges with peer: send [soff, soff+sn) of sb, receive rn bytes into
// rb at roff. Zero-length halves are skipped on both sides alike.
void exchange(Ctx &c, int peer, uint64_t slot, UB *sb, size_t soff, size_t sn, UB *rb, size_t roff, size_t rn,
              int from = -1)
{
    if (from < 0) from = peer;
    if (rn) post_recv(rb, from, slot, roff, rn);
    if (sn) post_send(sb, peer, slot, soff, sn);
    if (rn) wait_recv(c, rb, from);
    if (sn) wait_send(c, sb, peer);
}

// Folds the extra ranks in (before) or sends them the result (after).
void fold_in(Ctx &c, const Fold &f, UB *ub, uint8_t *buf, size_t count, size_t es, phx_dtype dt, phx_reduce_op op,
             uint64_t slot)
{
    if (f.r >= 2 * f.rem) return;
    size_t bytes = count * es;
    if (f.r % 2 == 0) {
        post_send(ub, f.r + 1, slot, 0, bytes);
        wait_send(c, ub, f.r + 1);
    } else {
        uint8_t *tmp = c.ensure(bytes);
        post_recv(c.scratch_ub.get(), f.r - 1, slot, 0, bytes);
        wait_recv(c, c.scratch_ub.get(), f.r - 1);
        reduce2(buf, tmp, buf, count, dt, op);
    }
}

void fold_out(Ctx &c, const Fold &f, UB *ub, size_t bytes, uint64_t slot)
{
    if (f.r >= 2 * f.rem) return;
    if (f.r % 2 == 1) {
        post_send(ub, f.r - 1, slot, 0, bytes);
        wait_send(c, ub, f.r - 1);
    } else {
        post_recv(ub, f.r + 1, slot, 0, bytes);
        wait_recv(c, ub, f.r + 1);
    }
}

// Four lanes at a time through GCC/Clang vector types: the build's -O2
// (configure's CFLAGS come after the plugin's -O3) does not vectorise the
// plain loops. The additions are the same, element by element.
typedef float v4f __attribute__((vector_size(16)));

inline v4f load4(const float *p)
{
    v4f v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// o = x + y, o may be x or y (whole vectors are loaded before the store).
void add_f32(float *o, const float *x, const float *y, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        v4f r0 = load4(x + i) + load4(y + i), r1 = load4(x + i + 4) + load4(y + i + 4);
        std::memcpy(o + i, &r0, sizeof r0);
        std::memcpy(o + i + 4, &r1, sizeof r1);
    }
    for (; i < n; i++) o[i] = x[i] + y[i];
}

} // namespace

// f32 sums add directly; everything else goes through phx_kit_reduce:
// f16 sums too (an f32 add rounded to nearest f16, in the kit's
// vectorised loops), whose conversions give gloo's cpu_half2float /
// cpu_float2half_rn bits for every value but NaN payloads (checked on all
// 2^32 floats); bf16 has no gloo type.
void reduce2(void *out, const void *a, const void *b, size_t n, phx_dtype dt, phx_reduce_op op)
{
    if (dt == PHX_F32 && op == PHX_SUM) {
        // the kit's f32 sum of two inputs is this one addition per element
        add_f32(static_cast<float *>(out), static_cast<const float *>(a), static_cast<const float *>(b), n);
        return;
    }
    const void *in[2] = {a, b};
    void *outs[1] = {out};
    phx_kit_reduce(outs, 1, in, 2, 0, n, dt, op, 1); // dt and op checked by the core
}

void allreduce_rd(Ctx &c, void *buf, size_t count, phx_dtype dt, phx_reduce_op op, uint64_t slot)
{
    const size_t es = phx_dtype_size(dt), bytes = count * es;
    Fold f(c.ctx->size, c.ctx->rank);
    auto ub = c.ctx->createUnboundBuffer(buf, bytes);
    uint8_t *b = static_cast<uint8_t *>(buf);
    fold_in(c, f, ub.get(), b, count, es, dt, op, slot);
    if (f.nr >= 0) {
        uint8_t *tmp = c.ensure(bytes);
        int step = 1;
        for (int d = 1; d < f.p2; d <<= 1, step++) {
            int pn = f.nr ^ d, peer = f.actual(pn);
            exchange(c, peer, slot + step, ub.get(), 0, bytes, c.scratch_ub.get(), 0, bytes);
            if (f.nr < pn)
                reduce2(b, b, tmp, count, dt, op);
            else
                reduce2(b, tmp, b, count, dt, op);
        }
    }
    fold_out(c, f, ub.get(), bytes, slot + 63);
}

void allreduce_hd(Ctx &c, void *buf, size_t count, phx_dtype dt, phx_reduce_op op, uint64_t slot)
{
    const size_t es = phx_dtype_size(dt), bytes = count * es;
    Fold f(c.ctx->size, c.ctx->rank);
    auto ub = c.ctx->createUnboundBuffer(buf, bytes);
    auto rub = c.ctx->createUnboundBuffer(buf, bytes); // receives: one UB per direction
    uint8_t *b = static_cast<uint8_t *>(buf);
    fold_in(c, f, ub.get(), b, count, es, dt, op, slot);
    if (f.nr >= 0) {
        uint8_t *tmp = c.ensure(bytes / 2 + es);
        size_t lo = 0, hi = count;
        size_t stack_lo[32], stack_hi[32];
        int depth = 0, step = 1;
        // reduce-scatter: halve the segment each step, keep one half
        for (int d = f.p2 / 2; d >= 1; d >>= 1, step++) {
            int pn = f.nr ^ d, peer = f.actual(pn);
            size_t mid = lo + (hi - lo) / 2;
            bool lower = f.nr < pn;
            size_t klo = lower ? lo : mid, khi = lower ? mid : hi;
            size_t slo = lower ? mid : lo, shi = lower ? hi : mid;
            stack_lo[depth] = lo;
            stack_hi[depth++] = hi;
            exchange(c, peer, slot + step, ub.get(), slo * es, (shi - slo) * es, c.scratch_ub.get(), 0,
                     (khi - klo) * es);
            if (lower)
                reduce2(b + klo * es, b + klo * es, tmp, khi - klo, dt, op);
            else
                reduce2(b + klo * es, tmp, b + klo * es, khi - klo, dt, op);
            lo = klo;
            hi = khi;
        }
        // all-gather: undo the halvings, trading the reduced segments
        for (int d = 1; d < f.p2; d <<= 1, step++) {
            int pn = f.nr ^ d, peer = f.actual(pn);
            size_t plo = stack_lo[--depth], phi = stack_hi[depth];
            size_t olo = lo == plo ? hi : plo, ohi = lo == plo ? phi : lo;
            exchange(c, peer, slot + step, ub.get(), lo * es, (hi - lo) * es, rub.get(), olo * es, (ohi - olo) * es);
            lo = plo;
            hi = phi;
        }
    }
    fold_out(c, f, ub.get(), bytes, slot + 63);
}

void chunk(size_t count, int n, int q, size_t *lo, size_t *hi)
{
    size_t per = count / (size_t)n, extra = count % (size_t)n, qq = (size_t)q;
    *lo = qq * per + (qq < extra ? qq : extra);
    *hi = *lo + per + (qq < extra ? 1 : 0);
}

void allreduce_ring(Ctx &c, void *buf, size_t count, phx_dtype dt, phx_reduce_op op, uint64_t slot)
{
    const int n = c.ctx->size, r = c.ctx->rank, to = (r + 1) % n, from = (r + n - 1) % n;
    const size_t es = phx_dtype_size(dt);
    size_t seg = kRingSegment / es; // elements per segment
    uint8_t *b = static_cast<uint8_t *>(buf);
    auto ub = c.ctx->createUnboundBuffer(buf, count * es);
    auto rub = c.ctx->createUnboundBuffer(buf, count * es);
    uint8_t *tmp = c.ensure(2 * seg * es);
    UB *tub = c.scratch_ub.get();
    uint64_t sl = slot;
    // Reduce-scatter: at step s send chunk r-s (complete up to here), receive
    // chunk r-s-1 segment by segment, reducing each while the next arrives.
    // Chunk q gathers ranks q, q+1, ..., q-1 in that order; rank r ends
    // with chunk r+1 reduced over all ranks.
    for (int s = 0; s < n - 1; s++, sl++) {
        size_t slo, shi, rlo, rhi;
        chunk(count, n, (r - s + 2 * n) % n, &slo, &shi);
        chunk(count, n, (r - s - 1 + 2 * n) % n, &rlo, &rhi);
        // gloo matches one send to one receive: both sides cut the chunks
        // into the same segments.
        size_t nrecv = (rhi - rlo + seg - 1) / seg, nsend = (shi - slo + seg - 1) / seg;
        if (nrecv) post_recv(tub, from, sl, 0, std::min(seg, rhi - rlo) * es);
        for (size_t k = 0; k < nsend; k++)
            post_send(ub.get(), to, sl, (slo + k * seg) * es, std::min(seg, shi - slo - k * seg) * es);
        for (size_t k = 0; k < nrecv; k++) {
            size_t lo = rlo + k * seg, m = std::min(seg, rhi - lo);
            if (k + 1 < nrecv) post_recv(tub, from, sl, ((k + 1) % 2) * seg * es, std::min(seg, rhi - lo - m) * es);
            wait_recv(c, tub, from);
            reduce2(b + lo * es, tmp + (k % 2) * seg * es, b + lo * es, m, dt, op);
        }
        for (size_t k = 0; k < nsend; k++) wait_send(c, ub.get(), to);
    }
    // All-gather: pass the reduced chunks around the ring.
    for (int s = 0; s < n - 1; s++, sl++) {
        size_t slo, shi, rlo, rhi;
        chunk(count, n, (r + 1 - s + 2 * n) % n, &slo, &shi);
        chunk(count, n, (r - s + 2 * n) % n, &rlo, &rhi);
        exchange(c, to, sl, ub.get(), slo * es, (shi - slo) * es, rub.get(), rlo * es, (rhi - rlo) * es, from);
    }
}

void broadcast_tree(Ctx &c, void *buf, size_t bytes, int root, uint64_t slot)
{
    const int n = c.ctx->size, v = (c.ctx->rank - root + n) % n;
    auto ub = c.ctx->createUnboundBuffer(buf, bytes);
    int mask = 1;
    // Binomial tree on ranks relative to the root: receive from the parent
    // (v minus its lowest set bit), then send to the children.
    while (mask < n) {
        if (v & mask) {
            int parent = (v - mask + root) % n;
            post_recv(ub.get(), parent, slot, 0, bytes);
            wait_recv(c, ub.get(), parent);
            break;
        }
        mask <<= 1;
    }
    int kids[32], nk = 0;
    for (mask >>= 1; mask > 0; mask >>= 1) {
        if (v + mask < n) {
            kids[nk] = (v + mask + root) % n;
            post_send(ub.get(), kids[nk++], slot, 0, bytes);
        }
    }
    for (int i = 0; i < nk; i++) wait_send(c, ub.get(), kids[i]);
}

void allgather_ring(Ctx &c, const void *send, void *recv, size_t bytes, uint64_t slot)
{
    const int n = c.ctx->size, r = c.ctx->rank, to = (r + 1) % n, from = (r + n - 1) % n;
    uint8_t *out = static_cast<uint8_t *>(recv);
    if (out + (size_t)r * bytes != send) std::memcpy(out + (size_t)r * bytes, send, bytes);
    auto ub = c.ctx->createUnboundBuffer(recv, bytes * (size_t)n);
    auto rub = c.ctx->createUnboundBuffer(recv, bytes * (size_t)n);
    for (int s = 0; s < n - 1; s++) {
        size_t sb = (size_t)((r - s + 2 * n) % n), rb = (size_t)((r - s - 1 + 2 * n) % n);
        exchange(c, to, slot + (uint64_t)s, ub.get(), sb * bytes, bytes, rub.get(), rb * bytes, bytes, from);
    }
}

void reduce_scatter_ring(Ctx &c, const void *send, void *recv, size_t count, phx_dtype dt, phx_reduce_op op,
                         uint64_t slot)
{
    const int n = c.ctx->size, r = c.ctx->rank;
    const size_t es = phx_dtype_size(dt), bytes = count * es;
    const uint8_t *in = static_cast<const uint8_t *>(send);
    if (n == 1) {
        std::memmove(recv, send, bytes);
        return;
    }
    // scratch: [0, bytes) receives, [bytes, 2 bytes) holds the partial sum to forward
    uint8_t *tmp = c.ensure(2 * bytes), *acc = tmp + bytes;
    auto inub = c.ctx->createUnboundBuffer(const_cast<uint8_t *>(in), bytes * (size_t)n);
    const int to = (r + 1) % n, from = (r + n - 1) % n;
    // Block b starts at rank b+1 and travels b+1 -> b+2 -> ... -> b.
    for (int s = 0; s < n - 1; s++) {
        size_t sb = (size_t)((r - 1 - s + 2 * n) % n), rb = (size_t)((r - 2 - s + 2 * n) % n);
        post_recv(c.scratch_ub.get(), from, slot + (uint64_t)s, 0, bytes);
        if (s == 0)
            post_send(inub.get(), to, slot + (uint64_t)s, sb * bytes, bytes);
        else
            post_send(c.scratch_send.get(), to, slot + (uint64_t)s, bytes, bytes);
        wait_recv(c, c.scratch_ub.get(), from);
        wait_send(c, s == 0 ? inub.get() : c.scratch_send.get(), to);
        void *dst = s == n - 2 ? recv : static_cast<void *>(acc);
        reduce2(dst, tmp, in + rb * bytes, count, dt, op);
    }
}

} // namespace pxg
