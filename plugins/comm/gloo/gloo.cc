// The gloo communicator: a C++ shim over Debian's libgloo exposed through
// the C plugin ABI (phx_comm_v1).
//
// Rendezvous: a gloo::rendezvous::Store over phx_store (keys under the
// comm's prefix), a TCP device bound to the address this host uses to
// reach the store server (127.0.0.1 on one machine), and a full mesh.
//
// Every collective runs on one worker thread per communicator, in issue
// order (the kit's communicator, phalanx/plugin/kit.h), so compute overlaps
// communication; small all-reduces run on the caller's thread when the
// queue is idle. All-reduces by recursive doubling or the ring (any size)
// and the barrier go over the links (gloo-links.h: one plain TCP socket
// per peer, read and written by the thread that runs the op, a short spin
// before blocking); halving-doubling, broadcast, all-gather and
// reduce-scatter use gloo's transport (gloo-algos.cc). When every rank
// runs on this host, the all-reduces that take the ring and every
// reduce-scatter and all-gather go through a shared-memory segment
// instead (gloo-shm.h; PHX_GLOO_SHM=0 keeps TCP), with the ring's order
// of operations.
// All-reduce picks its algorithm by
// message size (doc/guide/comm.md): recursive doubling for small messages
// (latency: log2 n exchanges), a pipelined ring for large ones
// (bandwidth), halving-doubling in between for large worlds. f16 and
// bf16 (gloo has none), max and min use phx_kit_reduce
// (phalanx/plugin/kit.h: f32 arithmetic, rounded per step); avg = sum
// then divide. A gloo exception becomes PHX_EPEER or PHX_ETIMEOUT with its
// message and the rank of the peer the failed wait was on, and the kit's
// failure protocol names the op, tells ranks out of step from a hung one
// (PHX_EDESYNC) and follows a timeout to the rank that stopped; the
// communicator is then broken and later collectives fail at once.
#include "config.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include "phalanx/log.h"
#include "phalanx/plugin/comm_v1.h"
#include "plugins/comm/gloo/gloo-algos.h"
#include "plugins/comm/gloo/gloo-links.h"
#include "plugins/comm/gloo/gloo-shm.h"
#include "phalanx/plugin/kit.h"

namespace
{

// All-reduce algorithm choice (bytes; doc/guide/comm.md has the measurements):
// recursive doubling up to 64 KiB (log2 n latency-bound exchanges);
// above that the ring (bandwidth-optimal, 2 (n-1) pipelined steps), except
// halving-doubling between 64 KiB and 1 MiB in worlds of 8 or more, where
// its 2 log2 n steps beat the ring's 2 (n-1). PHX_GLOO_ALGO forces one.
constexpr size_t kRdMax = 64u << 10;
constexpr size_t kHdMax = 1u << 20;
constexpr int kHdMinWorld = 8;
constexpr uint64_t kSlotPrefix = 0x70; // our own algorithms' slots (gloo's use 0x01..0x08)

enum Algo { AUTO, RING, HD, RD };

// gloo's Store interface over a phx_store; every key lives under prefix.
class PhxStore : public gloo::rendezvous::Store
{
  public:
    PhxStore(phx_store *s, std::string prefix, double timeout_s) : s_(s), prefix_(std::move(prefix)), t_(timeout_s) {}

    void set(const std::string &key, const std::vector<char> &data) override
    {
        if (phx_store_set(s_, (prefix_ + key).c_str(), data.data(), data.size()))
            throw gloo::IoException(std::string("store set: ") + phx_last_error());
    }

    std::vector<char> get(const std::string &key) override
    {
        void *v;
        size_t n;
        if (phx_store_get(s_, (prefix_ + key).c_str(), &v, &n, t_))
            throw gloo::IoException(std::string("store get: ") + phx_last_error());
        std::vector<char> out(static_cast<char *>(v), static_cast<char *>(v) + n);
        std::free(v);
        return out;
    }

    void wait(const std::vector<std::string> &keys) override
    {
        wait(keys, std::chrono::milliseconds(0));
    }

    void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &timeout) override
    {
        std::vector<std::string> full;
        std::vector<const char *> ptrs;
        for (const auto &k : keys) full.push_back(prefix_ + k);
        for (const auto &k : full) ptrs.push_back(k.c_str());
        double t = timeout.count() > 0 ? (double)timeout.count() / 1000.0 : t_;
        if (phx_store_wait(s_, ptrs.data(), ptrs.size(), t))
            throw gloo::IoException(std::string("store wait: ") + phx_last_error());
    }

  private:
    phx_store *s_;
    std::string prefix_;
    double t_;
};

using Op = phx_kit_op;

struct State {
    phx_kit_comm *kit = nullptr; // the slots' state: queue and failure protocol
    int rank = 0, size = 1;
    double timeout_s = 600;
    Algo algo = AUTO;
    pxg::Ctx c;
    pxg::Links links; // connected when use_links
    bool use_links = false;
    pxg::Shm shm; // mapped when every rank runs on this host (gloo-shm.h)
    uint64_t seq = 0; // ops run (tags and slots)
    int32_t token = 0; // the barrier's one-element all-reduce
    // The watchdog: while a wait lasts, polls the store every 50 ms for a
    // failure another rank published (phx_kit_comm_failure) and aborts the
    // wait (pxg::Ctx::waiting).
    std::thread dog;
    std::unique_ptr<gloo::transport::UnboundBuffer> probe; // the pair probe's 1-byte receive
    uint8_t probe_byte = 0;
    std::mutex dog_mu;
    std::condition_variable dog_cv;
    bool dog_stop = false;
};

// An op's slot: our prefix, 16 bits of its signature (kind, count, dtype,
// reduction, root) and 24 bits of its sequence number; the low 16 bits
// number the algorithm's steps. Ranks that issue different collectives at
// the same point (a different number of steps) then post to different
// slots and time out, where one slot with two sizes made gloo's I/O thread
// abort the process (EnforceNotMet: op.preamble.length <= op.nbytes).
uint64_t op_slot(const State &s, const Op &o)
{
    uint64_t h = 1469598103934665603ull;
    const int64_t f[] = {o.kind, o.count, o.dt,
                         o.kind == PHX_KIT_ALLREDUCE || o.kind == PHX_KIT_REDUCE_SCATTER ? o.op : 0,
                         o.kind == PHX_KIT_BROADCAST ? o.root : 0};
    for (int64_t v : f) h = (h ^ (uint64_t)v) * 1099511628211ull;
    return (kSlotPrefix << 56) | ((h & 0xffffu) << 40) | ((s.seq & 0xffffffu) << 16);
}

// All-reduces up to this size run on the calling thread when nothing is
// queued: they are latency-bound (no compute to overlap) and skipping the
// hand-off to the worker and back saves two thread wake-ups per op.
constexpr size_t kInlineMax = 4096;

Algo pick(const State &s, size_t bytes)
{
    if (s.algo != AUTO) return s.algo;
    if (bytes <= kRdMax) return RD;
    return bytes <= kHdMax && s.size >= kHdMinWorld ? HD : RING;
}

void run_allreduce(State &s, const Op &o)
{
    size_t n = (size_t)o.count, bytes = n * phx_dtype_size(o.dt);
    phx_reduce_op rop = o.op == PHX_AVG ? PHX_SUM : o.op;
    uint64_t slot = op_slot(s, o);
    if (s.size > 1) {
        switch (pick(s, bytes)) {
        case RD:
            if (s.use_links)
                pxg::allreduce_links(s.c, s.links, o.recv, n, o.dt, rop, slot);
            else
                pxg::allreduce_rd(s.c, o.recv, n, o.dt, rop, slot);
            break;
        case HD: pxg::allreduce_hd(s.c, o.recv, n, o.dt, rop, slot); break;
        default:
            if (s.shm.on()) {
                // the ring's order of operations, the average divided there
                pxg::allreduce_shm(s.c, s.links, s.shm, o.recv, n, o.dt, rop, o.op == PHX_AVG ? s.size : 1, slot);
                return;
            }
            if (s.use_links)
                pxg::allreduce_links_ring(s.c, s.links, o.recv, n, o.dt, rop, slot);
            else
                pxg::allreduce_ring(s.c, o.recv, n, o.dt, rop, slot);
            break;
        }
    }
    if (o.op == PHX_AVG) phx_kit_divide(o.recv, n, o.dt, s.size);
}

// Every reduce-scatter and all-gather goes through the segment when it
// is mapped: measured at world 2 and 4 (2 cores), it beats gloo's
// transport at every size, 4 KiB (6 us against 60 at world 2) to 64 MiB.
bool shm_takes(const State &s)
{
    return s.size > 1 && s.shm.on();
}

void run_op(State &s, const Op &o)
{
    size_t n = (size_t)o.count, es = phx_dtype_size(o.dt);
    uint64_t slot = op_slot(s, o);
    switch (o.kind) {
    case PHX_KIT_ALLREDUCE:
        if (n) run_allreduce(s, o);
        break;
    case PHX_KIT_BROADCAST:
        if (n && s.size > 1) pxg::broadcast_tree(s.c, o.recv, n * es, o.root, slot);
        break;
    case PHX_KIT_ALLGATHER:
        if (!n) break;
        if (shm_takes(s))
            pxg::allgather_shm(s.c, s.links, s.shm, o.send, o.recv, n * es, slot);
        else
            pxg::allgather_ring(s.c, o.send, o.recv, n * es, slot);
        break;
    case PHX_KIT_REDUCE_SCATTER:
        if (!n) break;
        if (shm_takes(s)) {
            // the ring's order of operations, the average divided there
            pxg::reduce_scatter_shm(s.c, s.links, s.shm, o.send, o.recv, n, o.dt, o.op == PHX_AVG ? PHX_SUM : o.op,
                                    o.op == PHX_AVG ? s.size : 1, slot);
            break;
        }
        pxg::reduce_scatter_ring(s.c, o.send, o.recv, n, o.dt, o.op == PHX_AVG ? PHX_SUM : o.op, slot);
        if (o.op == PHX_AVG) phx_kit_divide(o.recv, n, o.dt, s.size);
        break;
    case PHX_KIT_BARRIER:
        /* everyone has arrived when a one-element all-reduce completes */
        if (s.size > 1 && s.use_links)
            pxg::allreduce_links(s.c, s.links, &s.token, 1, PHX_I32, PHX_SUM, slot);
        else if (s.size > 1)
            pxg::allreduce_rd(s.c, &s.token, 1, PHX_I32, PHX_SUM, slot);
        break;
    }
}

// gloo reports timeouts only in its messages ("Timed out", "timeout").
bool says_timeout(const std::string &m)
{
    return m.find("imed out") != std::string::npos || m.find("imeout") != std::string::npos;
}

// The slot of the pair probe: never sent to (our slots are 0x70...).
constexpr uint64_t kProbeSlot = 0x71ull << 56;

// Whether the pair to peer is broken. gloo does not fail a send that is
// waiting for a dead peer's receive notice, even after the pair saw the
// connection close; posting anything on a broken pair throws at once.
// The probe posts a 1-byte receive on kProbeSlot (which no rank sends on:
// it stays pending, a few bytes on both sides).
std::string probe_pair(State &s, int peer)
{
    try {
        if (!s.probe) s.probe = s.c.ctx->createUnboundBuffer(&s.probe_byte, 1);
        s.probe->recv(peer, kProbeSlot, 0, 1);
    } catch (const std::exception &e) {
        return "the connection to rank " + std::to_string(peer) + " is broken: " + e.what();
    }
    return "";
}

// Marks the communicator dead with why and aborts the wait in progress
// (under c.mu); every later wait then fails at once. links: abort the
// links even when no link wait runs now (the next one ends at once).
void stop_waits(State &s, const std::string &why, bool links)
{
    if (!s.c.dead) {
        s.c.dead = true;
        s.c.why = why;
    }
    if (links || s.c.waiting_link) s.links.abort();
    s.shm.abort();
    if (s.c.waiting) {
        if (s.c.waiting_send)
            s.c.waiting->abortWaitSend();
        else
            s.c.waiting->abortWaitRecv();
    }
}

void watchdog(State *s)
{
    std::unique_lock<std::mutex> lk(s->dog_mu);
    int probed_peer = -1;
    std::chrono::steady_clock::time_point probed_since;
    const double kQuiet = 0.25; // seconds into a wait before the first poll and probe
    double next_probe = kQuiet; // doubles up to 5 s
    while (!s->dog_stop) {
        s->dog_cv.wait_for(lk, std::chrono::milliseconds(50));
        if (s->dog_stop) break;
        int peer;
        double age;
        {
            std::lock_guard<std::mutex> g(s->c.mu);
            if ((!s->c.waiting && !s->c.waiting_link) || s->c.dead) continue;
            peer = s->c.waiting_peer;
            if (peer != probed_peer || s->c.waiting_since != probed_since) {
                probed_peer = peer;
                probed_since = s->c.waiting_since;
                next_probe = kQuiet;
            }
            age = std::chrono::duration<double>(std::chrono::steady_clock::now() - s->c.waiting_since).count();
        }
        // A wait shorter than that is a collective at work: nothing is
        // polled (steady-state collectives make no allocation).
        if (age < kQuiet) continue;
        // A long wait: say what this rank issued, so that after a timeout
        // the ranks' desync checks find each other's answer at once.
        phx_kit_comm_publish_running(s->kit);
        char why[512];
        std::string m = phx_kit_comm_failure(s->kit, why, sizeof why) ? why : "";
        if (m.empty() && peer >= 0 && age >= next_probe) {
            next_probe = next_probe * 2 < 5 ? next_probe * 2 : 5;
            m = probe_pair(*s, peer);
            if (!m.empty()) phx_kit_comm_report(s->kit, ("gloo: rank " + std::to_string(s->rank) + ": " + m).c_str());
        }
        if (m.empty()) continue;
        std::lock_guard<std::mutex> g(s->c.mu);
        stop_waits(*s, "another rank reported a failure: " + m, false);
    }
}

// The kit's abort function (the stall check found the ranks out of
// step): ends the running op's wait and every later one.
void abort_run(void *ctx, phx_status st, const char *msg)
{
    (void)st;
    State *s = static_cast<State *>(ctx);
    std::lock_guard<std::mutex> g(s->c.mu);
    stop_waits(*s, msg, true);
}

// The kit's run function: one op, on the kit's queue thread (or inline),
// any exception turned into a status, its message and the peer (the kit's
// failure protocol does the rest).
phx_status run_job(void *ctx, const phx_kit_op *o, char *msg, size_t len)
{
    State &s = *static_cast<State *>(ctx);
    phx_status st = PHX_OK;
    std::string m;
    try {
        run_op(s, *o);
    } catch (const pxg::PeerError &e) {
        m = e.what();
        phx_kit_comm_peer(s.kit, e.peer, e.desync);
        st = PHX_EPEER;
    } catch (const std::exception &e) {
        m = e.what();
        st = PHX_EPEER;
    } catch (...) {
        m = "unknown exception";
        st = PHX_EINTERNAL;
    }
    s.seq++;
    if (st == PHX_EPEER && says_timeout(m)) st = PHX_ETIMEOUT;
    if (st) std::snprintf(msg, len, "%s", m.c_str());
    return st;
}

// The address this host uses to reach the store server: peers can reach
// us there too. PHX_GLOO_IFACE names an interface instead, or torch's
// GLOO_SOCKET_IFNAME (its first entry: gloo's TCP device takes one).
gloo::transport::tcp::attr device_attr(phx_store *store)
{
    gloo::transport::tcp::attr a;
    const char *iface = std::getenv("PHX_GLOO_IFACE");
    std::string torch_iface;
    if ((!iface || !*iface) && (iface = std::getenv("GLOO_SOCKET_IFNAME")) && *iface) {
        torch_iface = iface;
        size_t comma = torch_iface.find(',');
        if (comma != std::string::npos) {
            phx_log(PHX_LOG_WARN, "gloo: GLOO_SOCKET_IFNAME='%s' lists several interfaces; using the first, '%s'",
                    iface, torch_iface.substr(0, comma).c_str());
            torch_iface.resize(comma);
        }
        iface = torch_iface.c_str();
    }
    char addr[128];
    if (iface && *iface)
        a.iface = iface;
    else if (phx_store_local_addr(store, addr, sizeof addr) == PHX_OK)
        a.hostname = addr;
    else
        a.hostname = "127.0.0.1";
    return a;
}

// How long a wait on a link spins before it blocks (microseconds):
// PHX_GLOO_SPIN_US, or by default kSpinUs while this host runs no more
// ranks than it has cores for this process, and 0 otherwise (a spinning
// rank would take the core its peer needs). -1 on a bad value.
constexpr int kSpinUs = 50;

int spin_us(const phx_comm_init_args *a)
{
    const char *e = std::getenv("PHX_GLOO_SPIN_US");
    if (e && *e && std::strcmp(e, "auto")) {
        char *end;
        long v = std::strtol(e, &end, 10);
        return *e < '0' || *e > '9' || *end || v < 0 || v > 1000000 ? -1 : (int)v;
    }
    cpu_set_t set;
    int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    if (cores < 1) cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    int local = a->local_size > 0 ? a->local_size : a->size;
    return local <= cores ? kSpinUs : 0;
}

phx_status g_init(const phx_comm_init_args *a, void **state)
{
    if (a->device.kind != PHX_DEVICE_CPU)
        return phx_error(PHX_EUNSUPPORTED, "gloo: buffers on device kind %d; this gloo build moves CPU memory only",
                         a->device.kind);
    const char *algo = std::getenv("PHX_GLOO_ALGO");
    Algo al = AUTO;
    if (algo && *algo && std::strcmp(algo, "auto")) {
        if (!std::strcmp(algo, "ring"))
            al = RING;
        else if (!std::strcmp(algo, "hd"))
            al = HD;
        else if (!std::strcmp(algo, "rd"))
            al = RD;
        else
            return phx_error(PHX_EINVAL, "gloo: PHX_GLOO_ALGO='%s': expected auto, ring, hd or rd", algo);
    }
    const char *links = std::getenv("PHX_GLOO_LINKS");
    bool use_links = !links || !*links || !std::strcmp(links, "1");
    if (links && *links && std::strcmp(links, "0") && std::strcmp(links, "1"))
        return phx_error(PHX_EINVAL, "gloo: PHX_GLOO_LINKS='%s': expected 1 (small all-reduces over the links) or 0",
                         links);
    const char *shm = std::getenv("PHX_GLOO_SHM");
    if (shm && *shm && std::strcmp(shm, "0") && std::strcmp(shm, "1"))
        return phx_error(PHX_EINVAL,
                         "gloo: PHX_GLOO_SHM='%s': expected 1 (large all-reduces through shared memory when all "
                         "ranks share this host) or 0",
                         shm);
    const bool want_shm = !shm || !*shm || !std::strcmp(shm, "1");
    int spin = spin_us(a);
    if (spin < 0)
        return phx_error(PHX_EINVAL, "gloo: PHX_GLOO_SPIN_US='%s': expected microseconds (0 to 1000000) or auto",
                         std::getenv("PHX_GLOO_SPIN_US"));
    State *s = new (std::nothrow) State;
    if (!s) return phx_error(PHX_ENOMEM, "gloo: out of memory");
    s->rank = a->rank;
    s->size = a->size;
    s->timeout_s = a->timeout_s;
    s->algo = al;
    s->c.timeout = std::chrono::milliseconds((long long)(a->timeout_s * 1000.0));
    std::string where, shm_why = "a world of one";
    // gloo writes to sockets without MSG_NOSIGNAL: a dead peer would kill
    // this process with SIGPIPE. Its loop thread and our worker inherit
    // this thread's mask, so block SIGPIPE while they are created (writes
    // then fail with EPIPE, which gloo reports).
    sigset_t pipe_set, old_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
    try {
        auto attr = device_attr(a->store);
        where = attr.iface.empty() ? attr.hostname : "interface " + attr.iface;
        auto dev = gloo::transport::tcp::CreateDevice(attr);
        auto ctx = std::make_shared<gloo::rendezvous::Context>(a->rank, a->size);
        ctx->setTimeout(s->c.timeout);
        PhxStore store(a->store, std::string(a->prefix) + "gloo/", a->timeout_s);
        ctx->connectFullMesh(store, dev);
        s->c.ctx = ctx;
        if (use_links && a->size > 1) {
            s->links.spin_us = spin;
            s->links.connect(s->c, a->store, std::string(a->prefix) + "gloo/links/", a->timeout_s);
            s->use_links = true;
            s->shm.spin_us = spin;
            shm_why =
                s->shm.setup(a->store, std::string(a->prefix) + "gloo/shm/", a->rank, a->size, want_shm, a->timeout_s);
        } else if (a->size > 1) {
            shm_why = "the links are off (PHX_GLOO_LINKS=0)";
        }
    } catch (const std::exception &e) {
        pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
        delete s;
        std::string m = e.what();
        phx_status st = m.find("not set after") != std::string::npos || says_timeout(m) ? PHX_ETIMEOUT : PHX_EPEER;
        return phx_error(st, "gloo: rank %d of %d: connecting the full mesh on %s failed: %s", a->rank, a->size,
                         where.c_str(), m.c_str());
    }
    phx_status qst = phx_kit_comm_new(a, "gloo", run_job, s, &s->kit);
    if (!qst) {
        phx_kit_comm_set_inline(s->kit, kInlineMax);
        phx_kit_comm_set_abort(s->kit, abort_run);
        try {
            s->dog = std::thread(watchdog, s);
        } catch (const std::exception &e) {
            qst = phx_error(PHX_ENOMEM, "gloo: cannot start the watchdog thread: %s", e.what());
            phx_kit_comm_free(s->kit);
        }
    }
    pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
    if (qst) {
        delete s;
        return qst;
    }
    phx_log(PHX_LOG_INFO, "gloo: rank %d of %d connected on %s (links: %s, spin %d us)", a->rank, a->size,
            where.c_str(), s->use_links ? "on" : "off", spin);
    if (s->shm.on())
        phx_log(PHX_LOG_INFO,
                "gloo: rank %d: all-reduces above %zu bytes, all reduce-scatters and all-gathers go "
                "through shared memory (all %d ranks on this host)",
                a->rank, a->size >= kHdMinWorld ? kHdMax : kRdMax, a->size);
    else
        phx_log(PHX_LOG_INFO, "gloo: rank %d: all-reduces over TCP only, no shared memory: %s", a->rank,
                shm_why.c_str());
    *state = s->kit;
    return PHX_OK;
}

void g_finalize(void *state)
{
    State *s = static_cast<State *>(phx_kit_comm_ctx(static_cast<phx_kit_comm *>(state)));
    if (!s) return;
    phx_kit_comm_drain(s->kit); // runs what is queued first, the watchdog helping
    {
        std::lock_guard<std::mutex> g(s->dog_mu);
        s->dog_stop = true;
    }
    s->dog_cv.notify_all();
    if (s->dog.joinable()) s->dog.join();
    phx_kit_comm_free(s->kit);
    try {
        s->c.scratch_ub.reset();
        s->c.scratch_send.reset();
        s->c.ctx.reset();
        s->probe.reset();
    } catch (...) {
    }
    delete s;
}

int g_probe(const phx_probe_ctx *ctx, char *why, size_t len)
{
    (void)why;
    (void)len;
    // Any CPU world; in-process worlds prefer threads.
    return ctx && ctx->in_process ? 10 : 50;
}

const phx_comm_v1 vtable = {
    .init = g_init,
    .finalize = g_finalize,
    PHX_KIT_COMM_SLOTS,
    .world = nullptr, // the environment's world and the TCP store
    .split = nullptr, // the core's: init (a new context) over the group's ranks
};

} // namespace

extern "C" {
extern PHX_PLUGIN_EXPORT const phx_plugin_desc phx_plugin_v1;
const phx_plugin_desc phx_plugin_v1 = PHX_PLUGIN_DESC_INIT(
    PHX_PLUGIN_COMM, "gloo", "1.0", "CPU collectives over libgloo's TCP transport", g_probe, &vtable);
}
