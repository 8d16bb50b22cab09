// The gloo plugin's same-host path: when every rank of a communicator
// runs on one host (same hostname, boot id and network namespace), large
// all-reduces, reduce-scatters and all-gathers go through a shared-memory
// segment instead of the TCP links (or gloo's transport).
//
// The segment (shm_open, created by rank 0, opened by the others and
// unlinked as soon as all have it) holds a slot per rank, each of kShmBufs
// buffers of kShmRound bytes, and a header with a few counters per rank.
// An all-reduce walks the message in rounds of kShmRound bytes, each
// round's elements split into `size` sub-slices (the ring's chunk rule):
//
//   copy-in   rank r copies the round's sub-slices j != r into its slot;
//   reduce    rank r reduces sub-slice r over all ranks (its own values
//             from its buffer, the others' from their slots) into its slot
//             and its buffer;
//   copy-out  rank r copies the reduced sub-slices j != r from slot j
//             (with non-temporal stores from kShmStream bytes on).
//
// Each step publishes a per-rank counter (the rounds done); a rank waits
// for the counters it needs by spinning a short while (the links'
// spin_us), then yielding the core (up to 2000 times or 1 ms), then
// sleeping on a futex in the segment, checking its
// deadline, the watchdog's abort and its peers' link sockets (a closed
// socket: the peer died) every few milliseconds. A round's copy-in of the
// next round runs before the copy-out of this one, and kShmBufs buffers
// per slot let the ranks drift apart by that many rounds.
// Reduce-scatter and all-gather (below) run the same rounds without a
// copy-out or a reduce; every op publishes each round's out counter once
// it no longer reads that round's buffers, which is what a copy-in waits
// for before it reuses them.
//
// Reduction order: element i of an all-reduce of count elements lies in
// the ring's chunk q (chunk(count, size, q)); it is reduced as the ring
// reduces it, left to right over ranks q, q+1, ..., q+size-1 (mod size),
// each step reduce2(acc, acc, next). So the bits are those of the ring
// over the links (or gloo's transport), which is what the TCP path runs
// at the sizes the segment takes (gloo.cc).
#ifndef PHX_PLUGINS_GLOO_SHM_H
#define PHX_PLUGINS_GLOO_SHM_H

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "phalanx/store.h"
#include "plugins/comm/gloo/gloo-algos.h"
#include "plugins/comm/gloo/gloo-links.h"

namespace pxg
{

// Bytes of the message per round: 2 MiB (a round's slot and its slice of
// the buffer stay in the caches; on the 2-core Xeon development VM 2 MiB
// rounds cost less CPU per all-reduce than 1 MiB or smaller, whose extra
// waits cost more than the smaller working set saves).
constexpr size_t kShmRound = 2u << 20;
// All-reduces of this many bytes and more copy out with non-temporal
// stores (the output goes to memory, not through the caches it could not
// stay in): about 7% less CPU per 64 MiB all-reduce there, none of the
// gain at 8-16 MiB, where the output still fits in the caches.
constexpr size_t kShmStream = 32u << 20;
constexpr int kShmBufs = 4; // buffers per slot: how many rounds ranks may drift apart

struct ShmHeader;

struct Shm {
    int rank = 0, size = 1;
    void *base = nullptr; // the mapping (len bytes)
    size_t len = 0;
    ShmHeader *hdr = nullptr;
    uint8_t *data = nullptr; // slots: (size, kShmBufs, kShmRound)
    uint32_t round = 0; // the next round's number, the same on every rank
    int spin_us = 0;
    const char *what = "an all-reduce"; // the op in progress, for the messages
    std::atomic<bool> stop{false}; // set by abort()

    Shm() = default;
    Shm(const Shm &) = delete;
    Shm &operator=(const Shm &) = delete;
    ~Shm();

    // Collective over the communicator's ranks (through the store, keys
    // under key_prefix): exchanges the host keys and, when every rank
    // shares this host and has the segment enabled (want), maps the
    // segment. Returns "" when the segment is in use, else why not (the
    // same answer on every rank; then nothing is mapped). Throws
    // std::runtime_error when the store fails.
    std::string setup(phx_store *store, const std::string &key_prefix, int rank, int size, bool want, double timeout_s);

    bool on() const
    {
        return base != nullptr;
    }

    // Ends a wait in progress and every later one (thread-safe).
    void abort();
};

// This host's identity for the segment: hostname, boot id, network
// namespace. Ranks with equal keys can share memory.
std::string host_key();

// In-place all-reduce of count elements through the segment, in the
// ring's order of operations (see above); div > 1: each result is then
// divided by div (as phx_kit_divide). tag: the op's slot (gloo.cc), which
// every rank compares with its peers' to find ranks out of step. Throws
// PeerError.
void allreduce_shm(Ctx &c, Links &l, Shm &s, void *buf, size_t count, phx_dtype dt, phx_reduce_op op, int div,
                   uint64_t tag);

// Reduce-scatter through the segment: send holds size blocks of count
// elements, recv gets block `rank` reduced over the ranks in the TCP
// ring's order (reduce_scatter_ring: block b's left fold starts at rank
// b+1 and runs b+2, ..., b), then divided by div when div > 1. Rounds of
// kShmRound / size bytes of every block: copy-in (rank r copies its
// blocks j != r into its slot), reduce (rank r folds block r from the
// others' slots and its own send buffer into recv). Throws PeerError.
void reduce_scatter_shm(Ctx &c, Links &l, Shm &s, const void *send, void *recv, size_t count, phx_dtype dt,
                        phx_reduce_op op, int div, uint64_t tag);

// All-gather through the segment: recv holds size blocks of bytes, block
// `rank` = send (which may already be that block: in place). Rounds of
// kShmRound bytes of the block: copy-in (its piece into its slot),
// copy-out (the others' pieces from their slots). Throws PeerError.
void allgather_shm(Ctx &c, Links &l, Shm &s, const void *send, void *recv, size_t bytes, uint64_t tag);

} // namespace pxg

#endif
