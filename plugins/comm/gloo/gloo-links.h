// Small-message links of the gloo plugin: one plain TCP socket per peer,
// read and written on the caller's thread, for the all-reduces that are
// latency-bound (up to kLinkMax bytes). gloo's own transport
// (UnboundBuffer) is a rendezvous: a receive-ready and a send-ready notice
// before the data, written and read by gloo's loop thread and handed over
// through a condition variable, about 115 us per 4-byte exchange at world
// 2 on a 2-core machine against 30 us for a socket written and read by the
// caller (doc/ddp.md, "Profile"). A link message is a header (the op's
// slot and step, the length) and the data: a rank that receives another
// header than the one it expects knows at once that the ranks went out of
// step.
//
// A wait first spins (recv without blocking) for spin_us, then blocks in
// poll() on the socket and on an eventfd that the watchdog writes to abort
// it; it fails after the communicator's timeout.
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

constexpr size_t kLinkMax = 4096; // bytes: the largest all-reduce sent over the links

struct Links {
    std::vector<int> fd; // (size): the socket to each peer, -1 for this rank
    int wake = -1; // eventfd: the watchdog's abort
    int spin_us = 0; // how long a wait polls without blocking
    std::vector<uint8_t> tmp; // (kLinkMax): receives

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

// In-place all-reduce of count elements (at most kLinkMax bytes) over the
// links by recursive doubling, with the fold of a non-power-of-two world:
// the same order of operations as allreduce_rd, so the same bits.
void allreduce_links(Ctx &c, Links &l, void *buf, size_t count, phx_dtype dt, phx_reduce_op op, uint64_t slot);

} // namespace pxg

#endif
