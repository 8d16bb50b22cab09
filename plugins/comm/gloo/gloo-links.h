// The links of the gloo plugin: one plain TCP socket per peer, read and
// written by the thread that runs the op, for every all-reduce except
// halving-doubling (and the barrier). gloo's own transport (UnboundBuffer)
// is a rendezvous: a receive-ready and a send-ready notice before the
// data, written and read by gloo's loop thread and handed over through a
// condition variable, about 115 us per 4-byte exchange at world 2 on a
// 2-core machine against 30 us for a socket written and read by the
// caller, and a rendezvous per ring segment for large messages
// (doc/guide/ddp.md, "Profile"). A link message is a header (the op's slot and
// step, the length) and the data: a rank that receives another header
// than the one it expects knows at once that the ranks went out of step.
//
// A step sends and receives at once on the one thread, without blocking,
// as far as the sockets take the data; when neither moves, it spins (recv
// without blocking) for spin_us, then blocks in poll() on the sockets and
// on an eventfd that the watchdog writes to abort it; it fails after the
// communicator's timeout without progress.
#ifndef PHX_PLUGINS_GLOO_LINKS_H
#define PHX_PLUGINS_GLOO_LINKS_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "phalanx/store.h"
#include "plugins/comm/gloo/gloo-algos.h"

namespace pxg
{

// bytes: the ring's reduce-scatter receives through a window this large,
// folding each piece into the result as it completes (the socket's own
// buffer holds what arrives meanwhile), so the received data is reduced
// while it is still in cache
constexpr size_t kLinkPiece = 256u << 10;

struct Links {
    std::vector<int> fd; // (size): the socket to each peer, -1 for this rank
    int wake = -1; // eventfd: the watchdog's abort
    int spin_us = 0; // how long a wait polls without blocking
    std::vector<uint8_t> tmp; // receives; grows to the largest need and stays

    Links() = default;
    Links(const Links &) = delete;
    Links &operator=(const Links &) = delete;
    ~Links();

    // Connects a full mesh of sockets: each rank listens on the address of
    // its gloo pairs (port chosen by the kernel), publishes it in the store
    // under key_prefix + rank, connects to the lower ranks and accepts the
    // higher ones, all within timeout_s. Throws std::runtime_error.
    void connect(Ctx &c, phx_store *store, const std::string &key_prefix, double timeout_s);

    // Aborts a wait in progress and every later one (thread-safe).
    void abort();
};

// Registers (or clears) this thread's wait on a link (or on the
// same-host segment, gloo-shm.h) for the watchdog (gloo.cc).
void link_waiting(Ctx &c, int peer, bool on);

// In-place all-reduce of count elements over the links by recursive
// doubling, with the fold of a non-power-of-two world: the same order of
// operations as allreduce_rd, so the same bits.
void allreduce_links(Ctx &c, Links &l, void *buf, size_t count, phx_dtype dt, phx_reduce_op op, uint64_t slot);

// In-place ring all-reduce over the links: the chunks, steps and order of
// operations of allreduce_ring (so the same bits), each step's send and
// receive interleaved on this thread and the reduce-scatter's pieces
// reduced as they arrive.
void allreduce_links_ring(Ctx &c, Links &l, void *buf, size_t count, phx_dtype dt, phx_reduce_op op, uint64_t slot);

} // namespace pxg

#endif
