// The same-host segment: set-up, the waits and the all-reduce over it.
#include "config.h"

#include "plugins/comm/gloo/gloo-shm.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__SSE2__)
#include <immintrin.h>
#endif

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>

#include "phalanx/plugin/kit.h"

namespace pxg
{

// One cache-line pair per rank (no false sharing between the ranks'
// counters, nor with the adjacent-line prefetcher).
struct alignas(128) ShmRank {
    std::atomic<uint32_t> in; // rounds whose copy-in this rank finished
    std::atomic<uint32_t> red; // rounds whose reduce this rank finished
    std::atomic<uint32_t> out; // rounds whose copy-out this rank finished
    // the op this rank runs, set at its first round's copy-in in that
    // round's buffer's entry (which no rank reuses before every rank has
    // finished that round, so a fast rank's next op cannot overwrite it)
    std::atomic<uint64_t> tag[kShmBufs];
};

struct alignas(128) ShmHeader {
    std::atomic<uint32_t> bell; // the futex: bumped after every counter update
    std::atomic<uint32_t> waiters; // ranks asleep (or about to sleep) on bell
};

static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "the segment's counters must be lock-free to be shared between processes");

namespace
{

using Clock = std::chrono::steady_clock;

constexpr auto kCheckEvery = std::chrono::milliseconds(2); // a sleeping wait's checks
constexpr unsigned kYields = 2000; // a wait's yields before it sleeps ...
constexpr auto kYieldFor = std::chrono::milliseconds(1); // ... or this long

enum Field { IN, RED, OUT };

size_t header_bytes(int size)
{
    size_t b = sizeof(ShmHeader) + (size_t)size * sizeof(ShmRank);
    return (b + 4095) & ~(size_t)4095;
}

ShmRank *rank_line(Shm &s, int r)
{
    return reinterpret_cast<ShmRank *>(reinterpret_cast<uint8_t *>(s.hdr) + sizeof(ShmHeader)) + r;
}

std::atomic<uint32_t> &counter(Shm &s, int r, Field f)
{
    ShmRank *l = rank_line(s, r);
    return f == IN ? l->in : f == RED ? l->red : l->out;
}

// v has reached want (the counters wrap: compared as a signed distance)
bool reached(uint32_t v, uint32_t want)
{
    return (int32_t)(v - want) >= 0;
}

// The first other rank whose counter f is short of want, or -1.
int behind(Shm &s, Field f, uint32_t want)
{
    for (int i = 0; i < s.size; i++)
        if (i != s.rank && !reached(counter(s, i, f).load(std::memory_order_acquire), want)) return i;
    return -1;
}

long futex(std::atomic<uint32_t> *addr, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, reinterpret_cast<uint32_t *>(addr), op, val, ts, nullptr, 0);
}

void publish(Shm &s, Field f, uint32_t v)
{
    counter(s, s.rank, f).store(v, std::memory_order_seq_cst);
    s.hdr->bell.fetch_add(1, std::memory_order_seq_cst);
    if (s.hdr->waiters.load(std::memory_order_seq_cst)) futex(&s.hdr->bell, FUTEX_WAKE, INT_MAX, nullptr);
}

inline void cpu_relax()
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

PeerError aborted(Ctx &c, int peer)
{
    std::lock_guard<std::mutex> g(c.mu);
    return PeerError(peer, c.why.empty() ? std::string("the communicator was aborted") : c.why);
}

// A peer died when its link socket reads end-of-file (the kernel closes a
// dead process's sockets); the watchdog's eventfd says the wait is aborted.
void check_peers(Ctx &c, Links &l, Shm &s, int waited)
{
    struct pollfd pf[1];
    if (l.wake >= 0) {
        pf[0] = {l.wake, POLLIN, 0};
        if (poll(pf, 1, 0) > 0 && (pf[0].revents & POLLIN)) throw aborted(c, waited);
    }
    for (int i = 0; i < s.size; i++) {
        if (i == s.rank || (size_t)i >= l.fd.size() || l.fd[(size_t)i] < 0) continue;
        pf[0] = {l.fd[(size_t)i], POLLIN | POLLRDHUP, 0};
        if (poll(pf, 1, 0) <= 0) continue;
        char b;
        ssize_t k = recv(l.fd[(size_t)i], &b, 1, MSG_PEEK | MSG_DONTWAIT);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR))
            throw PeerError(i,
                            "the connection to rank " + std::to_string(i) + " was closed during " + s.what +
                                " in shared memory (that rank died or freed its communicator)");
    }
}

// Clears the watchdog's view of the wait when it ends, thrown or not.
struct Waiting {
    Ctx &c;
    bool on = false;
    explicit Waiting(Ctx &ctx) : c(ctx) {}
    void mark(int peer)
    {
        link_waiting(c, peer, true);
        on = true;
    }
    ~Waiting()
    {
        if (on) link_waiting(c, -1, false);
    }
};

// Waits until every other rank's counter f reaches want: a spin of
// s.spin_us, then futex sleeps of kCheckEvery with the checks between.
void wait_for(Ctx &c, Links &l, Shm &s, Field f, uint32_t want)
{
    int peer = behind(s, f, want);
    if (peer < 0) return;
    if (s.spin_us > 0) {
        auto end = Clock::now() + std::chrono::microseconds(s.spin_us);
        for (unsigned k = 1;; k++) {
            cpu_relax();
            if ((peer = behind(s, f, want)) < 0) return;
            if (k % 64 == 0 && Clock::now() >= end) break;
        }
    }
    // Then yield the core a while, staying runnable: a peer that is a
    // little late (its thread handing the op over, or preempted) is met
    // without a futex round trip, which on a busy host costs a wake-up and
    // a wait for a core (the mpi plugin's window waits do the same).
    const auto start = Clock::now();
    for (unsigned k = 1; k <= kYields; k++) {
        sched_yield();
        if ((peer = behind(s, f, want)) < 0) return;
        if (k % 16 == 0 && Clock::now() - start >= kYieldFor) break;
    }
    Waiting w(c);
    w.mark(peer);
    ShmHeader *h = s.hdr;
    for (;;) {
        h->waiters.fetch_add(1, std::memory_order_seq_cst);
        uint32_t bell = h->bell.load(std::memory_order_seq_cst);
        peer = behind(s, f, want);
        if (peer >= 0 && !s.stop.load()) {
            struct timespec ts = {0, (long)std::chrono::nanoseconds(kCheckEvery).count()};
            futex(&h->bell, FUTEX_WAIT, bell, &ts);
            peer = behind(s, f, want);
        }
        h->waiters.fetch_sub(1, std::memory_order_seq_cst);
        if (peer < 0) return;
        if (s.stop.load()) throw aborted(c, peer);
        check_peers(c, l, s, peer);
        if (Clock::now() - start > c.timeout)
            throw PeerError(peer,
                            "timed out after " + std::to_string(c.timeout.count()) + " ms waiting for rank " +
                                std::to_string(peer) + " (" + s.what + " in shared memory)");
    }
}

std::string read_line(const char *path)
{
    std::ifstream f(path);
    std::string s;
    std::getline(f, s);
    return s;
}

std::string store_get(phx_store *store, const std::string &key, double timeout_s)
{
    void *v = nullptr;
    size_t n = 0;
    if (phx_store_get(store, key.c_str(), &v, &n, timeout_s))
        throw std::runtime_error("store get " + key + ": " + phx_last_error());
    std::string out(static_cast<char *>(v), n);
    std::free(v);
    return out;
}

void store_set(phx_store *store, const std::string &key, const std::string &val)
{
    if (phx_store_set(store, key.c_str(), val.data(), val.size()))
        throw std::runtime_error("store set " + key + ": " + phx_last_error());
}

// Maps the segment's descriptor; "" or why not.
std::string map_fd(Shm &s, int fd, size_t len)
{
    struct stat st;
    if (fstat(fd, &st)) return std::string("fstat: ") + std::strerror(errno);
    if ((size_t)st.st_size != len)
        return "the segment has " + std::to_string(st.st_size) + " bytes, expected " + std::to_string(len);
    void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) return std::string("mmap: ") + std::strerror(errno);
    s.base = p;
    s.len = len;
    return "";
}

} // namespace

std::string host_key()
{
    char host[256] = "";
    if (gethostname(host, sizeof host - 1)) host[0] = 0;
    char net[128] = "";
    ssize_t n = readlink("/proc/self/ns/net", net, sizeof net - 1);
    net[n > 0 ? n : 0] = 0;
    std::string boot = read_line("/proc/sys/kernel/random/boot_id");
    return std::string(host) + "|" + boot + "|" + net;
}

Shm::~Shm()
{
    if (base) munmap(base, len);
}

void Shm::abort()
{
    stop.store(true);
    if (hdr) {
        hdr->bell.fetch_add(1, std::memory_order_seq_cst);
        futex(&hdr->bell, FUTEX_WAKE, INT_MAX, nullptr);
    }
}

std::string Shm::setup(phx_store *store, const std::string &key_prefix, int r, int n, bool want, double timeout_s)
{
    rank = r;
    size = n;
    const std::string mine = want ? host_key() : "";
    store_set(store, key_prefix + "key/" + std::to_string(r), mine);
    std::string why;
    for (int i = 0; i < n && why.empty(); i++) {
        std::string k = i == r ? mine : store_get(store, key_prefix + "key/" + std::to_string(i), timeout_s);
        if (k.empty())
            why = "PHX_GLOO_SHM=0 on rank " + std::to_string(i);
        else if (k != mine && !mine.empty())
            why = "rank " + std::to_string(i) + " runs on another host or network namespace";
    }
    if (!mine.empty() && why.empty()) {
        // every key equal and set: the same decision on every rank
    } else {
        return why.empty() ? "PHX_GLOO_SHM=0 on rank " + std::to_string(r) : why;
    }
    const size_t hb = header_bytes(n), total = hb + (size_t)n * kShmBufs * kShmRound;
    std::string name, err;
    if (r == 0) {
        std::random_device rd;
        char buf[96];
        std::snprintf(buf, sizeof buf, "/phx-gloo-%d-%08x%08x", (int)getpid(), rd(), rd());
        name = buf;
        int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0) {
            err = "shm_open " + name + ": " + std::strerror(errno);
        } else {
            if (ftruncate(fd, (off_t)total))
                err = std::string("ftruncate: ") + std::strerror(errno);
            else
                err = map_fd(*this, fd, total);
            close(fd);
        }
        try {
            store_set(store, key_prefix + "name", err.empty() ? name : "!" + err);
        } catch (...) {
            shm_unlink(name.c_str());
            throw;
        }
        if (!err.empty()) shm_unlink(name.c_str());
    } else {
        name = store_get(store, key_prefix + "name", timeout_s);
        if (!name.empty() && name[0] == '!') {
            err = "rank 0: " + name.substr(1);
        } else {
            int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
            if (fd < 0) {
                err = "shm_open " + name + ": " + std::strerror(errno);
            } else {
                err = map_fd(*this, fd, total);
                close(fd);
            }
        }
    }
    // Everyone says whether it mapped the segment; rank 0 unlinks it once
    // all have answered (from then on only the mappings hold it).
    std::string fail;
    try {
        store_set(store, key_prefix + "ok/" + std::to_string(r), err.empty() ? "1" : "0" + err);
        for (int i = 0; i < n; i++) {
            std::string ok = store_get(store, key_prefix + "ok/" + std::to_string(i), timeout_s);
            if (fail.empty() && ok != "1")
                fail = "rank " + std::to_string(i) + " could not map the segment: " + (ok.empty() ? "" : ok.substr(1));
        }
    } catch (...) {
        if (r == 0 && err.empty()) shm_unlink(name.c_str());
        throw;
    }
    if (r == 0 && err.empty()) shm_unlink(name.c_str());
    if (!fail.empty()) {
        if (base) munmap(base, len);
        base = nullptr;
        len = 0;
        return fail;
    }
    hdr = static_cast<ShmHeader *>(base);
    data = static_cast<uint8_t *>(base) + hb;
    return "";
}

namespace
{

constexpr int kMaxFused = 16; // inputs of the fused reduce (the kit's n-input fold)

// The ring's chunk that holds element i of count split n ways (chunk()).
int ring_chunk(size_t count, int n, size_t i)
{
    size_t base = count / (size_t)n, extra = count % (size_t)n, big = extra * (base + 1);
    return i < big ? (int)(i / (base + 1)) : (int)(extra + (i - big) / base);
}

// Buffer g % kShmBufs of rank i's slot.
uint8_t *slot(Shm &s, int i, uint32_t g)
{
    return s.data + ((size_t)i * kShmBufs + g % kShmBufs) * kShmRound;
}

// Starts an op of `rounds` rounds: fails at once on a broken communicator,
// else returns the first round's number (the same on every rank).
uint32_t begin(Ctx &c, Shm &s, size_t rounds, const char *what)
{
    {
        std::lock_guard<std::mutex> g(c.mu);
        if (c.dead) throw PeerError(-1, c.why);
    }
    if (s.stop.load()) throw aborted(c, -1);
    s.what = what;
    const uint32_t g0 = s.round;
    s.round += (uint32_t)rounds; // a failed op breaks the communicator: no rank reuses these numbers
    return g0;
}

// Copy-in's first step: every rank is done with this buffer's last round
// (the OUT counter: every op publishes it once it no longer reads the
// round's buffers), and on the op's first round this rank's tag is set.
void claim(Ctx &c, Links &l, Shm &s, uint32_t g, bool first, uint64_t tag)
{
    wait_for(c, l, s, OUT, g + 1 - kShmBufs);
    if (first) rank_line(s, s.rank)->tag[g % kShmBufs].store(tag, std::memory_order_relaxed);
}

// After the first round's (g) copy-ins: every rank runs the op tagged tag.
void check_tags(Shm &s, uint32_t g, uint64_t tag, size_t count, const char *unit)
{
    for (int i = 0; i < s.size; i++) {
        uint64_t t = rank_line(s, i)->tag[g % kShmBufs].load(std::memory_order_relaxed);
        if (t == tag) continue;
        char msg[256];
        std::snprintf(msg, sizeof msg,
                      "rank %d runs the op tagged %#llx in shared memory where this rank runs %#llx "
                      "(%s of %zu %s): the ranks issued different collectives",
                      i, (unsigned long long)t, (unsigned long long)tag, s.what, count, unit);
        throw PeerError(i, msg, true);
    }
}

// Reduces len elements of n operands, src(t) the t-th (t = 0..n-1), as
// the ring does: the left fold reduce2(acc, acc, src(t)), then the
// division by div (div > 1), into out and, when keep, into scratch too;
// scratch (len elements, not aliasing any operand) holds the chain.
// The f32 sum of n operands (then / div when div > 1) in one pass per
// vector, into out and, when keep is not null, keep: the kit's left fold
// and division element by element (the same bits), without its block
// buffer and copies. out may be one of the operands (in place).
#if defined(__x86_64__)
__attribute__((target("avx512f"))) void sum_f32_avx512(float *out, float *keep, const float *const *src, int n,
                                                       size_t len, int div)
{
    const __m512 d = _mm512_set1_ps((float)div);
    size_t i = 0;
    for (; i + 16 <= len; i += 16) {
        __m512 a = _mm512_loadu_ps(src[0] + i);
        for (int t = 1; t < n; t++) a = _mm512_add_ps(a, _mm512_loadu_ps(src[t] + i));
        if (div > 1) a = _mm512_div_ps(a, d);
        _mm512_storeu_ps(out + i, a);
        if (keep) _mm512_storeu_ps(keep + i, a);
    }
    for (; i < len; i++) {
        float a = src[0][i];
        for (int t = 1; t < n; t++) a += src[t][i];
        if (div > 1) a /= (float)div;
        out[i] = a;
        if (keep) keep[i] = a;
    }
}
#endif

// sum_f32_avx512 runs here (else the kit's fold)
bool have_avx512()
{
#if defined(__x86_64__)
    static const bool v = __builtin_cpu_supports("avx512f");
    return v;
#else
    return false;
#endif
}

template <class Src>
void fold(uint8_t *scratch, uint8_t *out, bool keep, Src src, int n, size_t len, phx_dtype dt, phx_reduce_op op,
          int div)
{
    // the kit's n-input fold is reduce2's chain for f32 and integers
    // (one rounding per step either way); f16 and bf16 round once there
    if (n <= kMaxFused && dt != PHX_F16 && dt != PHX_BF16) {
        // one pass, the outputs written from the accumulator (the f32
        // sum's AVX-512 loop, else the kit's): the same left fold (and
        // division) as the chain below
        const void *in[kMaxFused];
        for (int t = 0; t < n; t++) in[t] = src(t);
#if defined(__x86_64__)
        if (dt == PHX_F32 && (op == PHX_SUM || op == PHX_AVG) && have_avx512()) {
            sum_f32_avx512(reinterpret_cast<float *>(out), keep ? reinterpret_cast<float *>(scratch) : nullptr,
                           reinterpret_cast<const float *const *>(in), n, len, div);
            return;
        }
#endif
        void *outs[2] = {out, scratch};
        phx_kit_reduce(outs, keep ? 2 : 1, in, n, 0, len, dt, div > 1 ? PHX_AVG : op, div);
        return;
    }
    const size_t es = phx_dtype_size(dt);
    reduce2(scratch, src(0), src(1), len, dt, op);
    for (int t = 2; t < n; t++) reduce2(scratch, scratch, src(t), len, dt, op);
    if (div > 1) phx_kit_divide(scratch, len, dt, div);
    std::memcpy(out, scratch, len * es);
}

// One round of an op: its number g (the same on every rank) and the
// units [e0, e0 + m) of the message it covers (elements or bytes).
struct Round {
    size_t k, e0, m;
    uint32_t g;
};

// memcpy with non-temporal stores (the destination's lines go to memory
// without being read first or kept in the caches): the all-reduce's
// copy-out of messages of kShmStream bytes and more.
void copy_nt(uint8_t *dst, const uint8_t *src, size_t n)
{
#if defined(__SSE2__)
    size_t head = (64 - ((uintptr_t)dst & 63)) & 63;
    if (head > n) head = n;
    std::memcpy(dst, src, head);
    dst += head;
    src += head;
    n -= head;
    size_t body = n & ~(size_t)63;
    for (size_t i = 0; i < body; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(src + i)), b = _mm_loadu_si128((const __m128i *)(src + i + 16)),
                c = _mm_loadu_si128((const __m128i *)(src + i + 32)),
                d = _mm_loadu_si128((const __m128i *)(src + i + 48));
        _mm_stream_si128((__m128i *)(dst + i), a);
        _mm_stream_si128((__m128i *)(dst + i + 16), b);
        _mm_stream_si128((__m128i *)(dst + i + 32), c);
        _mm_stream_si128((__m128i *)(dst + i + 48), d);
    }
    std::memcpy(dst + body, src + body, n - body);
    _mm_sfence(); // the streamed lines ordered before the counters that follow
#else
    std::memcpy(dst, src, n);
#endif
}

void copy(uint8_t *dst, const uint8_t *src, size_t n)
{
    std::memcpy(dst, src, n);
}

// f(j, lo, hi) for every other rank j's sub-slice [lo, hi) of m elements.
template <class F> void others(const Shm &s, size_t m, F f)
{
    for (int j = 0; j < s.size; j++) {
        size_t lo, hi;
        chunk(m, s.size, j, &lo, &hi);
        if (j != s.rank) f(j, lo, hi);
    }
}

void (*const kNoReduce)(const Round &) = nullptr; // rounds() without a reduce step

// The round skeleton of the three ops: `total` units in rounds of `per`.
// Round k's copy-in claims its buffers (every rank done with them) and
// runs fill(round, this rank's slot), then publishes IN. Once every rank's
// copy-in is in (the tags checked at the first round), an op with a
// reduce (reduce != nullptr) runs it and publishes RED, then runs the
// next round's copy-in and waits for every rank's RED; an op without one
// runs the next round's copy-in first. Then drain(round) reads the
// others' slots, and OUT says this rank is done with the round's buffers.
template <class Fill, class Reduce, class Drain>
void rounds(Ctx &c, Links &l, Shm &s, size_t total, size_t per, uint64_t tag, const char *what, const char *unit,
            Fill fill, Reduce *reduce, Drain drain)
{
    const size_t nr = (total + per - 1) / per;
    const uint32_t g0 = begin(c, s, nr, what);
    auto at = [&](size_t k) {
        const size_t e0 = k * per;
        return Round{k, e0, total - e0 < per ? total - e0 : per, g0 + (uint32_t)k};
    };
    auto copy_in = [&](const Round &q) {
        claim(c, l, s, q.g, q.k == 0, tag);
        fill(q, slot(s, s.rank, q.g));
        publish(s, IN, q.g + 1);
    };
    auto inputs = [&](const Round &q) {
        wait_for(c, l, s, IN, q.g + 1);
        if (q.k == 0) check_tags(s, q.g, tag, total, unit);
    };
    if (nr) copy_in(at(0));
    for (size_t k = 0; k < nr; k++) {
        const Round q = at(k);
        if (reduce) {
            inputs(q);
            (*reduce)(q);
            publish(s, RED, q.g + 1);
        }
        if (k + 1 < nr) copy_in(at(k + 1));
        if (reduce)
            wait_for(c, l, s, RED, q.g + 1);
        else
            inputs(q);
        drain(q);
        if (!reduce) counter(s, s.rank, RED).store(q.g + 1, std::memory_order_seq_cst);
        publish(s, OUT, q.g + 1);
    }
}

} // namespace

void allreduce_shm(Ctx &c, Links &l, Shm &s, void *buf, size_t count, phx_dtype dt, phx_reduce_op op, int div,
                   uint64_t tag)
{
    const int n = s.size, r = s.rank;
    const size_t es = phx_dtype_size(dt);
    uint8_t *b = static_cast<uint8_t *>(buf);
    // copy-in: the round's sub-slices j != r, from the buffer into the slot
    auto fill = [&](const Round &q, uint8_t *mine) {
        others(s, q.m,
               [&](int, size_t lo, size_t hi) { std::memcpy(mine + lo * es, b + (q.e0 + lo) * es, (hi - lo) * es); });
    };
    // reduce: sub-slice r over every rank, into the slot and the buffer
    auto reduce = [&](const Round &q) {
        size_t lo, hi;
        chunk(q.m, n, r, &lo, &hi);
        const size_t e0 = q.e0;
        uint8_t *dst = slot(s, r, q.g) + lo * es;
        for (size_t x = e0 + lo; x < e0 + hi;) {
            const int p = ring_chunk(count, n, x);
            size_t plo, phi;
            chunk(count, n, p, &plo, &phi);
            const size_t end = phi < e0 + hi ? phi : e0 + hi, len = end - x;
            // element x of the message: this rank's from its buffer, the
            // others' from their slots; ranks p, p+1, ... in turn
            auto src = [&](int t) -> const uint8_t * {
                const int i = (p + t) % n;
                return i == r ? b + x * es : slot(s, i, q.g) + (x - e0) * es;
            };
            fold(dst + (x - e0 - lo) * es, b + x * es, true, src, n, len, dt, op, div);
            x = end;
        }
    };
    // copy-out: the reduced sub-slices j != r, from slot j into the buffer
    // (streamed past the caches when the message is too big to stay there)
    const bool stream = count * es >= kShmStream;
    auto drain = [&](const Round &q) {
        others(s, q.m, [&](int j, size_t lo, size_t hi) {
            (stream ? copy_nt : copy)(b + (q.e0 + lo) * es, slot(s, j, q.g) + lo * es, (hi - lo) * es);
        });
    };
    rounds(c, l, s, count, kShmRound / es, tag, "an all-reduce", "elements", fill, &reduce, drain);
}

void reduce_scatter_shm(Ctx &c, Links &l, Shm &s, const void *send, void *recv, size_t count, phx_dtype dt,
                        phx_reduce_op op, int div, uint64_t tag)
{
    const int n = s.size, r = s.rank;
    // per round: per elements of every block, block j's at j * per in the slot
    const size_t es = phx_dtype_size(dt), per = kShmRound / es / (size_t)n;
    const uint8_t *in = static_cast<const uint8_t *>(send);
    uint8_t *out = static_cast<uint8_t *>(recv);
    auto fill = [&](const Round &q, uint8_t *mine) {
        for (int j = 0; j < n; j++)
            if (j != r) std::memcpy(mine + (size_t)j * per * es, in + ((size_t)j * count + q.e0) * es, q.m * es);
    };
    // block r travels the ring from rank r+1: ranks r+1, ..., r in turn;
    // this rank's own part of its slot is the chain's scratch
    auto drain = [&](const Round &q) {
        auto src = [&](int t) -> const uint8_t * {
            const int i = (r + 1 + t) % n;
            return i == r ? in + ((size_t)r * count + q.e0) * es : slot(s, i, q.g) + (size_t)r * per * es;
        };
        fold(slot(s, r, q.g) + (size_t)r * per * es, out + q.e0 * es, false, src, n, q.m, dt, op, div);
    };
    rounds(c, l, s, count, per, tag, "a reduce-scatter", "elements", fill, kNoReduce, drain);
}

void allgather_shm(Ctx &c, Links &l, Shm &s, const void *send, void *recv, size_t bytes, uint64_t tag)
{
    const int n = s.size, r = s.rank;
    const uint8_t *in = static_cast<const uint8_t *>(send);
    uint8_t *out = static_cast<uint8_t *>(recv);
    auto fill = [&](const Round &q, uint8_t *mine) { std::memcpy(mine, in + q.e0, q.m); };
    auto drain = [&](const Round &q) {
        for (int j = 0; j < n; j++)
            if (j != r) std::memcpy(out + (size_t)j * bytes + q.e0, slot(s, j, q.g), q.m);
    };
    rounds(c, l, s, bytes, kShmRound, tag, "an all-gather", "bytes", fill, kNoReduce, drain);
    if (out + (size_t)r * bytes != in) std::memcpy(out + (size_t)r * bytes, in, bytes);
}

} // namespace pxg
