// The links: connection, framed messages, spin-then-block waits, and the
// recursive-doubling all-reduce over them.
#include "config.h"

#include "plugins/comm/gloo/gloo-links.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <gloo/transport/tcp/address.h>

namespace pxg
{

namespace
{

using Clock = std::chrono::steady_clock;

// What precedes every message: the op's slot plus the step, and the length.
struct Header {
    uint64_t tag;
    uint64_t bytes;
};

constexpr uint32_t kHello = 0x70686c6b; // "phlk", then the connecting rank

std::string sys_error(const char *what)
{
    return std::string(what) + ": " + std::strerror(errno);
}

int ms_left(Clock::time_point deadline)
{
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return ms < 0 ? 0 : ms > 1000000 ? 1000000 : (int)ms + 1;
}

// Waits until fd is ready for events (or wake is written); false on timeout.
// Throws on a poll error.
bool wait_fd(int fd, short events, int wake, Clock::time_point deadline, bool *woken)
{
    for (;;) {
        struct pollfd p[2] = {{fd, events, 0}, {wake, POLLIN, 0}};
        int left = ms_left(deadline);
        if (left == 0) return false;
        int rv = poll(p, wake >= 0 ? 2 : 1, left);
        if (rv < 0 && errno == EINTR) continue;
        if (rv < 0) throw std::runtime_error(sys_error("poll"));
        if (wake >= 0 && (p[1].revents & POLLIN)) {
            *woken = true;
            return true;
        }
        if (rv > 0) return true;
    }
}

// Connection set-up: reads or writes all n bytes of a nonblocking socket
// before the deadline.
void setup_io(int fd, void *buf, size_t n, bool write, Clock::time_point deadline, const char *what)
{
    uint8_t *p = static_cast<uint8_t *>(buf);
    bool woken = false;
    while (n) {
        ssize_t k = write ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
        } else if (k == 0) {
            throw std::runtime_error(std::string(what) + ": connection closed");
        } else if (errno == EAGAIN || errno == EINTR) {
            if (!wait_fd(fd, write ? POLLOUT : POLLIN, -1, deadline, &woken))
                throw std::runtime_error(std::string(what) + ": timed out");
        } else {
            throw std::runtime_error(sys_error(what));
        }
    }
}

void tune(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
}

// The watchdog's abort: the failure it recorded (under c.mu).
PeerError aborted(Ctx &c, int peer)
{
    std::lock_guard<std::mutex> g(c.mu);
    return PeerError(peer, c.why);
}

std::string timed_out(const Ctx &c, int peer, const char *what)
{
    return "timed out after " + std::to_string(c.timeout.count()) + " ms " + what + " rank " + std::to_string(peer);
}

// What a step receives: n bytes into buf. With piece > 0, buf is a
// window of piece bytes that the data passes through: each time a piece
// (or the last, shorter one) is in, done(arg, off, len) consumes it
// (off: its place in the message) before the window is reused.
struct Sink {
    void *buf = nullptr;
    size_t n = 0;
    size_t piece = 0;
    void (*done)(void *arg, const uint8_t *data, size_t off, size_t len) = nullptr;
    void *arg = nullptr;
};

std::string desync_text(int peer, const Header &h, uint64_t tag, size_t n)
{
    char m[256];
    std::snprintf(m, sizeof m,
                  "rank %d sent %llu bytes tagged %#llx where this rank expected %zu bytes tagged %#llx: the "
                  "ranks issued different collectives",
                  peer, (unsigned long long)h.bytes, (unsigned long long)h.tag, n, (unsigned long long)tag);
    return m;
}

// One step of an algorithm: sends tag's header and sn bytes of sbuf to
// rank `to` while receiving from rank `from` a header that must carry tag
// and the sink's length, then the data (to or from -1: that half is
// skipped). Both halves move on this thread, without blocking, as far as
// the sockets take them, so that two ranks sending each other more than a
// socket buffer holds cannot block each other. When neither moves, the
// thread spins for l.spin_us, then sleeps in poll() on both sockets and
// the watchdog's eventfd. A step fails after the communicator's timeout
// without progress.
void link_step(Ctx &c, Links &l, int to, uint64_t tag, const void *sbuf, size_t sn, int from, const Sink &rx)
{
    Header sh = {tag, sn}, rh = {0, 0};
    const size_t stot = to >= 0 ? sizeof sh + sn : 0, rtot = from >= 0 ? sizeof rh + rx.n : 0;
    const int sfd = to >= 0 ? l.fd[(size_t)to] : -1, rfd = from >= 0 ? l.fd[(size_t)from] : -1;
    size_t sd = 0, rd = 0, consumed = 0; // bytes sent, received, handed to rx.done
    uint8_t *rbuf = static_cast<uint8_t *>(rx.buf);
    auto spin_end = Clock::now() + std::chrono::microseconds(l.spin_us);
    bool spinning = l.spin_us > 0, woken = false;
    unsigned tries = 0;
    while (sd < stot || rd < rtot) {
        bool moved = false;
        if (sd < stot) {
            struct iovec iov[2];
            int n = 0;
            if (sd < sizeof sh) iov[n++] = {reinterpret_cast<uint8_t *>(&sh) + sd, sizeof sh - sd};
            size_t off = sd < sizeof sh ? 0 : sd - sizeof sh;
            if (off < sn) iov[n++] = {const_cast<uint8_t *>(static_cast<const uint8_t *>(sbuf)) + off, sn - off};
            struct msghdr m = {};
            m.msg_iov = iov;
            m.msg_iovlen = (size_t)n;
            ssize_t k = sendmsg(sfd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (k > 0) {
                sd += (size_t)k;
                moved = true;
            } else if (errno != EAGAIN && errno != EINTR) {
                throw PeerError(to, sys_error(("sending to rank " + std::to_string(to)).c_str()));
            }
        }
        if (rd < rtot) {
            void *p;
            size_t want;
            if (rd < sizeof rh) {
                p = reinterpret_cast<uint8_t *>(&rh) + rd;
                want = sizeof rh - rd;
            } else {
                size_t off = rd - sizeof rh, w = rx.piece ? off % rx.piece : off;
                p = rbuf + w;
                want = rx.piece ? std::min(rx.n - off, rx.piece - w) : rx.n - off;
            }
            ssize_t k = recv(rfd, p, want, MSG_DONTWAIT);
            if (k > 0) {
                bool head = rd < sizeof rh;
                rd += (size_t)k;
                moved = true;
                if (head && rd == sizeof rh && (rh.tag != tag || rh.bytes != rx.n))
                    throw PeerError(from, desync_text(from, rh, tag, rx.n), true);
                size_t got = rd > sizeof rh ? rd - sizeof rh : 0;
                if (rx.done && !head && (got == rx.n || got - consumed == rx.piece)) {
                    rx.done(rx.arg, rbuf, consumed, got - consumed);
                    consumed = got;
                }
            } else if (k == 0) {
                throw PeerError(from,
                                "the connection to rank " + std::to_string(from) +
                                    " was closed (that rank died or freed its communicator)");
            } else if (errno != EAGAIN && errno != EINTR) {
                throw PeerError(from, sys_error(("receiving from rank " + std::to_string(from)).c_str()));
            }
        }
        if (moved) {
            tries = 0;
            continue;
        }
        // the clock is read every 16th try: a recv costs about a microsecond
        if (spinning && (++tries % 16 || Clock::now() < spin_end)) continue;
        spinning = false;
        // Nothing moves: sleep until a socket is ready (the receive's peer
        // is the one named when the wait fails, unless only sending is left).
        int peer = rd < rtot ? from : to;
        struct pollfd pf[3];
        int np = 0;
        if (rd < rtot) pf[np++] = {rfd, POLLIN, 0};
        if (sd < stot) {
            if (np && sfd == rfd)
                pf[0].events |= POLLOUT;
            else
                pf[np++] = {sfd, POLLOUT, 0};
        }
        pf[np++] = {l.wake, POLLIN, 0};
        link_waiting(c, peer, true);
        int rv;
        do rv = poll(pf, (nfds_t)np, (int)std::min<long long>(c.timeout.count(), 1000000) + 1);
        while (rv < 0 && errno == EINTR);
        link_waiting(c, peer, false);
        if (rv < 0) throw PeerError(peer, sys_error("poll"));
        if (pf[np - 1].revents & POLLIN) woken = true;
        if (woken) throw aborted(c, peer);
        if (rv == 0) throw PeerError(peer, timed_out(c, peer, rd < rtot ? "waiting for" : "sending to"));
        spin_end = Clock::now() + std::chrono::microseconds(l.spin_us);
        spinning = l.spin_us > 0;
    }
}

// The same step with a plain receive into rbuf.
void link_step(Ctx &c, Links &l, int to, uint64_t tag, const void *sbuf, size_t sn, int from, void *rbuf, size_t rn)
{
    Sink rx;
    rx.buf = rbuf;
    rx.n = rn;
    link_step(c, l, to, tag, sbuf, sn, from, rx);
}

} // namespace

void link_waiting(Ctx &c, int peer, bool on)
{
    std::lock_guard<std::mutex> g(c.mu);
    c.waiting_link = on;
    if (on) {
        c.waiting_peer = peer;
        c.waiting_since = Clock::now();
    }
}

Links::~Links()
{
    for (int f : fd)
        if (f >= 0) close(f);
    if (wake >= 0) close(wake);
}

void Links::abort()
{
    uint64_t one = 1;
    if (wake >= 0 && write(wake, &one, sizeof one) < 0) {
        // a full eventfd counter: a wake is already pending
    }
}

void Links::connect(Ctx &c, phx_store *store, const std::string &key_prefix, double timeout_s)
{
    const int size = c.ctx->size, rank = c.ctx->rank;
    auto deadline = Clock::now() + std::chrono::milliseconds((long long)(timeout_s * 1000.0));
    fd.assign((size_t)size, -1);
    tmp.resize(4096); // the small all-reduces allocate nothing later
    wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake < 0) throw std::runtime_error(sys_error("eventfd"));
    // Listen where this rank's gloo pairs listen: an address its peers reach.
    // (the base class's bytes() are the TCP address's serialised form)
    gloo::transport::tcp::Address self(c.ctx->getPair(rank == 0 ? 1 : 0)->address().bytes());
    struct sockaddr_storage ss = self.getSockaddr();
    if (ss.ss_family == AF_INET)
        reinterpret_cast<struct sockaddr_in *>(&ss)->sin_port = 0;
    else
        reinterpret_cast<struct sockaddr_in6 *>(&ss)->sin6_port = 0;
    socklen_t sl = ss.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    int lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lfd < 0) throw std::runtime_error(sys_error("socket"));
    struct Closer {
        int f;
        ~Closer()
        {
            close(f);
        }
    } closer{lfd};
    if (bind(lfd, reinterpret_cast<struct sockaddr *>(&ss), sl) || listen(lfd, size) ||
        getsockname(lfd, reinterpret_cast<struct sockaddr *>(&ss), &sl))
        throw std::runtime_error(sys_error("listening for links"));
    std::string key = key_prefix + std::to_string(rank);
    if (phx_store_set(store, key.c_str(), &ss, sizeof ss))
        throw std::runtime_error(std::string("store set: ") + phx_last_error());
    // Connect to the lower ranks (their listen queues take us before they
    // accept), then accept the higher ones.
    for (int p = 0; p < rank; p++) {
        void *v = nullptr;
        size_t n = 0;
        int left = ms_left(deadline);
        if (phx_store_get(store, (key_prefix + std::to_string(p)).c_str(), &v, &n, left / 1000.0))
            throw std::runtime_error("rank " + std::to_string(p) + "'s link address: " + phx_last_error());
        struct sockaddr_storage to = {};
        std::memcpy(&to, v, n < sizeof to ? n : sizeof to);
        std::free(v);
        int f = socket(to.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (f < 0) throw std::runtime_error(sys_error("socket"));
        fd[(size_t)p] = f;
        bool woken = false;
        int err = 0;
        socklen_t el = sizeof err;
        if (::connect(f, reinterpret_cast<struct sockaddr *>(&to), sl) && errno != EINPROGRESS)
            throw std::runtime_error(sys_error(("connecting to rank " + std::to_string(p)).c_str()));
        if (!wait_fd(f, POLLOUT, -1, deadline, &woken))
            throw std::runtime_error("connecting to rank " + std::to_string(p) + ": timed out");
        if (getsockopt(f, SOL_SOCKET, SO_ERROR, &err, &el) || err) {
            errno = err;
            throw std::runtime_error(sys_error(("connecting to rank " + std::to_string(p)).c_str()));
        }
        tune(f);
        uint32_t hello[2] = {kHello, (uint32_t)rank};
        setup_io(f, hello, sizeof hello, true, deadline, "link hello");
    }
    for (int k = rank + 1; k < size; k++) {
        bool woken = false;
        if (!wait_fd(lfd, POLLIN, -1, deadline, &woken))
            throw std::runtime_error("waiting for the links of higher ranks: timed out");
        int f = accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (f < 0) throw std::runtime_error(sys_error("accepting a link"));
        uint32_t hello[2] = {0, 0};
        try {
            setup_io(f, hello, sizeof hello, false, deadline, "link hello");
        } catch (...) {
            close(f);
            throw;
        }
        if (hello[0] != kHello || (int)hello[1] <= rank || (int)hello[1] >= size || fd[hello[1]] >= 0) {
            close(f);
            throw std::runtime_error("a link connection that is not from a higher rank of this communicator");
        }
        tune(f);
        fd[hello[1]] = f;
    }
}

namespace
{

// At least bytes of l.tmp (it grows to the largest need and stays).
uint8_t *link_tmp(Links &l, size_t bytes)
{
    if (l.tmp.size() < bytes) l.tmp.resize(bytes);
    return l.tmp.data();
}

void check_alive(Ctx &c)
{
    std::lock_guard<std::mutex> g(c.mu);
    if (c.dead) throw PeerError(-1, c.why);
}

// The reduce-scatter's sink: each received piece of the chunk that starts
// at element lo is folded into buf, the received (earlier ranks') values
// first, as allreduce_ring does.
struct Fold2 {
    uint8_t *buf;
    size_t lo, es;
    phx_dtype dt;
    phx_reduce_op op;
};

void fold_piece(void *arg, const uint8_t *data, size_t off, size_t len)
{
    const Fold2 *f = static_cast<const Fold2 *>(arg);
    uint8_t *out = f->buf + f->lo * f->es + off;
    reduce2(out, data, out, len / f->es, f->dt, f->op);
}

} // namespace

void allreduce_links(Ctx &c, Links &l, void *buf, size_t count, phx_dtype dt, phx_reduce_op op, uint64_t slot)
{
    const size_t bytes = count * phx_dtype_size(dt);
    Fold f(c.ctx->size, c.ctx->rank);
    uint8_t *b = static_cast<uint8_t *>(buf), *tmp = link_tmp(l, bytes);
    check_alive(c);
    if (f.r < 2 * f.rem) { // fold in: the even rank hands its data to the odd one
        if (f.r % 2 == 0) {
            link_step(c, l, f.r + 1, slot, b, bytes, -1, nullptr, 0);
        } else {
            link_step(c, l, -1, slot, nullptr, 0, f.r - 1, tmp, bytes);
            reduce2(b, tmp, b, count, dt, op);
        }
    }
    if (f.nr >= 0) {
        int step = 1;
        for (int d = 1; d < f.p2; d <<= 1, step++) {
            int pn = f.nr ^ d, peer = f.actual(pn);
            link_step(c, l, peer, slot + (uint64_t)step, b, bytes, peer, tmp, bytes);
            if (f.nr < pn)
                reduce2(b, b, tmp, count, dt, op);
            else
                reduce2(b, tmp, b, count, dt, op);
        }
    }
    if (f.r < 2 * f.rem) { // fold out: the odd rank returns the result
        if (f.r % 2 == 1)
            link_step(c, l, f.r - 1, slot + 63, b, bytes, -1, nullptr, 0);
        else
            link_step(c, l, -1, slot + 63, nullptr, 0, f.r + 1, b, bytes);
    }
}

void allreduce_links_ring(Ctx &c, Links &l, void *buf, size_t count, phx_dtype dt, phx_reduce_op op, uint64_t slot)
{
    const int n = c.ctx->size, r = c.ctx->rank, to = (r + 1) % n, from = (r + n - 1) % n;
    const size_t es = phx_dtype_size(dt), piece = kLinkPiece / es * es;
    uint8_t *b = static_cast<uint8_t *>(buf);
    check_alive(c);
    Fold2 fold = {b, 0, es, dt, op};
    Sink rx;
    rx.buf = link_tmp(l, piece);
    rx.piece = piece;
    rx.done = fold_piece;
    rx.arg = &fold;
    uint64_t sl = slot;
    // Reduce-scatter: at step s send chunk r-s (complete up to here) and
    // fold chunk r-s-1 in as it arrives; rank r ends with chunk r+1.
    for (int s = 0; s < n - 1; s++, sl++) {
        size_t slo, shi, rlo, rhi;
        chunk(count, n, (r - s + 2 * n) % n, &slo, &shi);
        chunk(count, n, (r - s - 1 + 2 * n) % n, &rlo, &rhi);
        fold.lo = rlo;
        rx.n = (rhi - rlo) * es;
        link_step(c, l, to, sl, b + slo * es, (shi - slo) * es, from, rx);
    }
    // All-gather: the reduced chunks go around the ring, received in place.
    for (int s = 0; s < n - 1; s++, sl++) {
        size_t slo, shi, rlo, rhi;
        chunk(count, n, (r + 1 - s + 2 * n) % n, &slo, &shi);
        chunk(count, n, (r - s + 2 * n) % n, &rlo, &rhi);
        link_step(c, l, to, sl, b + slo * es, (shi - slo) * es, from, b + rlo * es, (rhi - rlo) * es);
    }
}

} // namespace pxg
