// Recursive doubling, halving-doubling and ring reduce-scatter over gloo's
// UnboundBuffer transport. Every receive is waited for with the comm's
// timeout; a failure names the peer it was talking to (PeerError).
#include "config.h"

#include "plugins/comm/gloo/gloo-algos.h"

#include <cstring>

#include "plugins/comm/reduce.h"

namespace pxg {

using UB = gloo::transport::UnboundBuffer;

uint8_t *Ctx::ensure(size_t bytes)
{
    if (!scratch_ub || scratch.size() < bytes) {
        scratch_ub.reset();
        scratch.resize(bytes < 4096 ? 4096 : bytes);
        scratch_ub = ctx->createUnboundBuffer(scratch.data(), scratch.size());
    }
    return scratch.data();
}

namespace {

void wait_recv(const Ctx &c, UB *b, int peer)
{
    try {
        b->waitRecv(c.timeout);
    } catch (const std::exception &e) {
        throw PeerError(peer, e.what());
    }
}

void wait_send(const Ctx &c, UB *b, int peer)
{
    try {
        b->waitSend(c.timeout);
    } catch (const std::exception &e) {
        throw PeerError(peer, e.what());
    }
}

// out[0..n) = a op b (a from the lower rank), out may be a or b.
void reduce2(void *out, const void *a, const void *b, size_t n, phx_dtype dt, phx_reduce_op op)
{
    const void *in[2] = {a, b};
    px_reduce_n(out, in, 2, 0, n, dt, op, 1);
}

// Exchanges with peer: send [soff, soff+sn) of sb, receive rn bytes into
// rb at roff. Zero-length halves are skipped on both sides alike.
void exchange(const Ctx &c, int peer, uint64_t slot, UB *sb, size_t soff, size_t sn, UB *rb, size_t roff,
              size_t rn)
{
    if (rn) rb->recv(peer, slot, roff, rn);
    if (sn) sb->send(peer, slot, soff, sn);
    if (rn) wait_recv(c, rb, peer);
    if (sn) wait_send(c, sb, peer);
}

// The ranks of a non-power-of-two world: the first 2*rem fold in pairs
// (even into odd), leaving p2 participants numbered 0..p2-1.
struct Fold {
    int n, r, p2, rem, nr;
    Fold(int size, int rank) : n(size), r(rank), p2(1), rem(0), nr(0)
    {
        while (p2 * 2 <= n) p2 *= 2;
        rem = n - p2;
        nr = r < 2 * rem ? (r % 2 ? r / 2 : -1) : r - rem;
    }
    int actual(int v) const { return v < rem ? 2 * v + 1 : v + rem; }
};

// Folds the extra ranks in (before) or sends them the result (after).
void fold_in(Ctx &c, const Fold &f, UB *ub, uint8_t *buf, size_t count, size_t es, phx_dtype dt, phx_reduce_op op,
             uint64_t slot)
{
    if (f.r >= 2 * f.rem) return;
    size_t bytes = count * es;
    if (f.r % 2 == 0) {
        ub->send(f.r + 1, slot, 0, bytes);
        wait_send(c, ub, f.r + 1);
    } else {
        uint8_t *tmp = c.ensure(bytes);
        c.scratch_ub->recv(f.r - 1, slot, 0, bytes);
        wait_recv(c, c.scratch_ub.get(), f.r - 1);
        reduce2(buf, tmp, buf, count, dt, op);
    }
}

void fold_out(Ctx &c, const Fold &f, UB *ub, size_t bytes, uint64_t slot)
{
    if (f.r >= 2 * f.rem) return;
    if (f.r % 2 == 1) {
        ub->send(f.r - 1, slot, 0, bytes);
        wait_send(c, ub, f.r - 1);
    } else {
        ub->recv(f.r + 1, slot, 0, bytes);
        wait_recv(c, ub, f.r + 1);
    }
}

} // namespace

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
            if (f.nr < pn) reduce2(b, b, tmp, count, dt, op);
            else reduce2(b, tmp, b, count, dt, op);
        }
    }
    fold_out(c, f, ub.get(), bytes, slot + 63);
}

void allreduce_hd(Ctx &c, void *buf, size_t count, phx_dtype dt, phx_reduce_op op, uint64_t slot)
{
    const size_t es = phx_dtype_size(dt), bytes = count * es;
    Fold f(c.ctx->size, c.ctx->rank);
    auto ub = c.ctx->createUnboundBuffer(buf, bytes);
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
            if (lower) reduce2(b + klo * es, b + klo * es, tmp, khi - klo, dt, op);
            else reduce2(b + klo * es, tmp, b + klo * es, khi - klo, dt, op);
            lo = klo;
            hi = khi;
        }
        // all-gather: undo the halvings, trading the reduced segments
        for (int d = 1; d < f.p2; d <<= 1, step++) {
            int pn = f.nr ^ d, peer = f.actual(pn);
            size_t plo = stack_lo[--depth], phi = stack_hi[depth];
            size_t olo = lo == plo ? hi : plo, ohi = lo == plo ? phi : lo;
            exchange(c, peer, slot + step, ub.get(), lo * es, (hi - lo) * es, ub.get(), olo * es, (ohi - olo) * es);
            lo = plo;
            hi = phi;
        }
    }
    fold_out(c, f, ub.get(), bytes, slot + 63);
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
        c.scratch_ub->recv(from, slot + (uint64_t)s, 0, bytes);
        if (s == 0) inub->send(to, slot + (uint64_t)s, sb * bytes, bytes);
        else c.scratch_ub->send(to, slot + (uint64_t)s, bytes, bytes);
        wait_recv(c, c.scratch_ub.get(), from);
        wait_send(c, s == 0 ? inub.get() : c.scratch_ub.get(), to);
        void *dst = s == n - 2 ? recv : static_cast<void *>(acc);
        reduce2(dst, tmp, in + rb * bytes, count, dt, op);
    }
}

} // namespace pxg
