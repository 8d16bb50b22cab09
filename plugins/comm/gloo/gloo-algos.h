// The gloo plugin's collectives, built on gloo's transport (UnboundBuffer
// send/recv between the pairs of a connected gloo::Context): all-reduce by
// recursive doubling, halving-doubling or ring, binomial broadcast, ring
// all-gather and reduce-scatter. Owning them (rather than calling gloo's
// collectives) means every wait knows the peer it waits on, so a failure
// names that rank, and every reduction uses phx_kit_reduce
// (phalanx/plugin/kit.h).
#ifndef PHX_PLUGINS_GLOO_ALGOS_H
#define PHX_PLUGINS_GLOO_ALGOS_H

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include "phalanx/tensor.h"

namespace pxg
{

constexpr size_t kRingSegment = 1u << 20; // bytes received per piece in the ring (as gloo's own ring)

// A transport failure while talking to one known peer.
// desync: the peer sent another collective than this rank's (the links'
// headers disagree).
struct PeerError : std::runtime_error {
    PeerError(int peer, const std::string &what, bool desync = false)
        : std::runtime_error(what), peer(peer), desync(desync)
    {
    }
    int peer;
    bool desync;
};

// Per-communicator state the algorithms share: the gloo context, the
// timeout and a scratch buffer that grows to the largest need and stays
// (so a steady training step allocates nothing there).
struct Ctx {
    std::shared_ptr<gloo::Context> ctx;
    std::chrono::milliseconds timeout;
    std::vector<uint8_t> scratch;
    // Two handles on the scratch memory: receives go through scratch_ub,
    // sends through scratch_send (a gloo UnboundBuffer with a send and a
    // receive pending at once answers its waits late).
    std::unique_ptr<gloo::transport::UnboundBuffer> scratch_ub, scratch_send;

    // At least bytes of scratch, registered with the transport.
    uint8_t *ensure(size_t bytes);

    // The wait in progress, for the watchdog (gloo.cc): when another rank
    // has published that a peer failed, it aborts this wait, so a rank
    // whose own pair has not noticed the death (a send gloo still holds
    // for the dead peer's receive) fails at once instead of after the
    // timeout. All under mu; dead/why stay set once set.
    std::mutex mu;
    gloo::transport::UnboundBuffer *waiting = nullptr;
    bool waiting_link = false; // a wait on a link (gloo-links.h) instead
    bool waiting_send = false;
    int waiting_peer = -1;
    std::chrono::steady_clock::time_point waiting_since;
    bool dead = false;
    std::string why;
};

// out[0..n) = a op b (a from the lower rank); out may be a or b.
void reduce2(void *out, const void *a, const void *b, size_t n, phx_dtype dt, phx_reduce_op op);

// The ranks of a non-power-of-two world: the first 2*rem fold in pairs
// (even into odd), leaving p2 participants numbered 0..p2-1 (nr; -1 for
// a rank folded out).
struct Fold {
    int n, r, p2, rem, nr;
    Fold(int size, int rank) : n(size), r(rank), p2(1), rem(0), nr(0)
    {
        while (p2 * 2 <= n) p2 *= 2;
        rem = n - p2;
        nr = r < 2 * rem ? (r % 2 ? r / 2 : -1) : r - rem;
    }
    int actual(int v) const
    {
        return v < rem ? 2 * v + 1 : v + rem;
    }
};

// Chunk q of count elements split n ways (element ranges [lo, hi)): the
// ring's blocks, the first count % n one element longer.
void chunk(size_t count, int n, int q, size_t *lo, size_t *hi);

// In-place all-reduce of count elements, the sum (or max/min) over ranks;
// op PHX_AVG is not handled here (the caller sums, then divides).
// Recursive doubling: log2(n) exchanges of the whole buffer; both
// partners compute lower-rank-first, so all ranks hold identical bits.
void allreduce_rd(Ctx &c, void *buf, size_t count, phx_dtype dt, phx_reduce_op op, uint64_t slot);
// Halving-doubling (Rabenseifner): recursive-halving reduce-scatter then
// recursive-doubling all-gather; each element is reduced on one rank.
// Worlds that are not a power of two fold the extra ranks in first.
void allreduce_hd(Ctx &c, void *buf, size_t count, phx_dtype dt, phx_reduce_op op, uint64_t slot);
// Ring reduce-scatter: send holds size*count elements, recv gets block
// `rank` reduced over all ranks (op PHX_AVG: the caller divides).
// Ring all-reduce (bandwidth-optimal): reduce-scatter then all-gather
// around the ring, receiving in kRingSegment pieces so that reducing one
// overlaps receiving the next. Each chunk is reduced on one rank.
void allreduce_ring(Ctx &c, void *buf, size_t count, phx_dtype dt, phx_reduce_op op, uint64_t slot);
// Binomial-tree broadcast of bytes from root.
void broadcast_tree(Ctx &c, void *buf, size_t bytes, int root, uint64_t slot);
// Ring all-gather: recv holds size blocks of bytes; block rank = send
// (which may already be that block: in place).
void allgather_ring(Ctx &c, const void *send, void *recv, size_t bytes, uint64_t slot);
void reduce_scatter_ring(Ctx &c, const void *send, void *recv, size_t count, phx_dtype dt, phx_reduce_op op,
                         uint64_t slot);

} // namespace pxg

#endif
