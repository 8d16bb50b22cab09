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

#include <chrono>
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

// Registers (or clears) this thread's wait on a link for the watchdog.
void mark_waiting(Ctx &c, int peer, bool on)
{
    std::lock_guard<std::mutex> g(c.mu);
    c.waiting_link = on;
    if (on) {
        c.waiting_peer = peer;
        c.waiting_since = Clock::now();
    }
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

// Sends header + n bytes to peer (the socket's buffer takes a small
// message at once; a full buffer is waited for).
void link_send(Ctx &c, Links &l, int peer, uint64_t tag, const void *buf, size_t n)
{
    Header h = {tag, n};
    struct iovec iov[2] = {{&h, sizeof h}, {const_cast<void *>(buf), n}};
    struct msghdr m = {};
    m.msg_iov = iov;
    m.msg_iovlen = 2;
    size_t left = sizeof h + n;
    auto deadline = Clock::now() + c.timeout;
    bool woken = false;
    while (left) {
        ssize_t k = sendmsg(l.fd[(size_t)peer], &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && errno != EAGAIN)
            throw PeerError(peer, sys_error(("sending to rank " + std::to_string(peer)).c_str()));
        if (k < 0) {
            mark_waiting(c, peer, true);
            bool ready = wait_fd(l.fd[(size_t)peer], POLLOUT, l.wake, deadline, &woken);
            mark_waiting(c, peer, false);
            if (woken) throw aborted(c, peer);
            if (!ready) throw PeerError(peer, timed_out(c, peer, "sending to"));
            continue;
        }
        left -= (size_t)k;
        while (k > 0) { // advance the iovecs past what was written
            size_t step = (size_t)k < m.msg_iov->iov_len ? (size_t)k : m.msg_iov->iov_len;
            m.msg_iov->iov_base = static_cast<uint8_t *>(m.msg_iov->iov_base) + step;
            m.msg_iov->iov_len -= step;
            k -= (ssize_t)step;
            if (m.msg_iov->iov_len == 0 && m.msg_iovlen > 1) {
                m.msg_iov++;
                m.msg_iovlen--;
            }
        }
    }
}

// Reads exactly n bytes from peer: spins for l.spin_us, then blocks.
void link_read(Ctx &c, Links &l, int peer, void *buf, size_t n)
{
    uint8_t *p = static_cast<uint8_t *>(buf);
    int fd = l.fd[(size_t)peer];
    auto start = Clock::now(), spin_end = start + std::chrono::microseconds(l.spin_us);
    auto deadline = start + c.timeout;
    bool spinning = l.spin_us > 0, woken = false;
    unsigned tries = 0;
    while (n) {
        ssize_t k = recv(fd, p, n, MSG_DONTWAIT);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
            continue;
        }
        if (k == 0)
            throw PeerError(peer,
                            "the connection to rank " + std::to_string(peer) +
                                " was closed (that rank died or freed its communicator)");
        if (errno == EINTR) continue;
        if (errno != EAGAIN) throw PeerError(peer, sys_error(("receiving from rank " + std::to_string(peer)).c_str()));
        // the clock is read every 16th try: a recv costs about a microsecond
        if (spinning && (++tries % 16 || Clock::now() < spin_end)) continue;
        spinning = false;
        mark_waiting(c, peer, true);
        bool ready = wait_fd(fd, POLLIN, l.wake, deadline, &woken);
        mark_waiting(c, peer, false);
        if (woken) throw aborted(c, peer);
        if (!ready) throw PeerError(peer, timed_out(c, peer, "waiting for"));
    }
}

// Receives the message tagged tag of n bytes from peer into buf.
void link_recv(Ctx &c, Links &l, int peer, uint64_t tag, void *buf, size_t n)
{
    Header h;
    link_read(c, l, peer, &h, sizeof h);
    if (h.tag != tag || h.bytes != n) {
        char m[256];
        std::snprintf(m, sizeof m,
                      "rank %d sent %llu bytes tagged %#llx where this rank expected %zu bytes tagged %#llx: the "
                      "ranks issued different collectives",
                      peer, (unsigned long long)h.bytes, (unsigned long long)h.tag, n, (unsigned long long)tag);
        throw PeerError(peer, m, true);
    }
    link_read(c, l, peer, buf, n);
}

} // namespace

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
    tmp.resize(kLinkMax);
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

void allreduce_links(Ctx &c, Links &l, void *buf, size_t count, phx_dtype dt, phx_reduce_op op, uint64_t slot)
{
    const size_t bytes = count * phx_dtype_size(dt);
    Fold f(c.ctx->size, c.ctx->rank);
    uint8_t *b = static_cast<uint8_t *>(buf), *tmp = l.tmp.data();
    {
        std::lock_guard<std::mutex> g(c.mu);
        if (c.dead) throw PeerError(-1, c.why);
    }
    if (f.r < 2 * f.rem) { // fold in: the even rank hands its data to the odd one
        if (f.r % 2 == 0) {
            link_send(c, l, f.r + 1, slot, b, bytes);
        } else {
            link_recv(c, l, f.r - 1, slot, tmp, bytes);
            reduce2(b, tmp, b, count, dt, op);
        }
    }
    if (f.nr >= 0) {
        int step = 1;
        for (int d = 1; d < f.p2; d <<= 1, step++) {
            int pn = f.nr ^ d, peer = f.actual(pn);
            link_send(c, l, peer, slot + (uint64_t)step, b, bytes);
            link_recv(c, l, peer, slot + (uint64_t)step, tmp, bytes);
            if (f.nr < pn)
                reduce2(b, b, tmp, count, dt, op);
            else
                reduce2(b, tmp, b, count, dt, op);
        }
    }
    if (f.r < 2 * f.rem) { // fold out: the odd rank returns the result
        if (f.r % 2 == 1)
            link_send(c, l, f.r - 1, slot + 63, b, bytes);
        else
            link_recv(c, l, f.r + 1, slot + 63, b, bytes);
    }
}

} // namespace pxg
