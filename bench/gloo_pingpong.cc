// The latency of one exchange of N bytes between two processes on this
// host, over the transports the gloo plugin could use (doc/guide/ddp.md,
// "Profile"): gloo's UnboundBuffer send/recv (what the plugin's large
// collectives use), gloo's Buffer API on a pair in sync mode, with and
// without busy-polling, and a plain TCP socket, blocking or spinning (what
// the plugin's links use for small all-reduces). Rank 0 prints the mean
// time per exchange of the second of two passes.
//
//   bench/gloo_pingpong ub|sync|busy|tcp|tcpbusy [BYTES [EXCHANGES]]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

namespace
{

size_t g_bytes = 4;
int g_exchanges = 20000;

double now()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Two passes of fn (the first warms up); rank 0 prints the second's mean.
template <typename F> void timed(int rank, const char *name, F fn)
{
    for (int pass = 0; pass < 2; pass++) {
        double t = now();
        for (int i = 0; i < g_exchanges; i++) fn();
        if (pass && rank == 0) printf("%-28s %8.1f us per exchange\n", name, (now() - t) / g_exchanges * 1e6);
    }
}

std::shared_ptr<gloo::rendezvous::Context> gloo_pair(int rank, const char *dir, bool sync, bool busy)
{
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, 2);
    ctx->setTimeout(std::chrono::seconds(30));
    gloo::rendezvous::FileStore store(dir);
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    ctx->connectFullMesh(store, dev);
    if (sync) ctx->getPair(1 - rank)->setSync(true, busy);
    return ctx;
}

void unbound(int rank, const char *dir)
{
    auto ctx = gloo_pair(rank, dir, false, false);
    std::vector<char> s(g_bytes), r(g_bytes);
    auto sb = ctx->createUnboundBuffer(s.data(), g_bytes), rb = ctx->createUnboundBuffer(r.data(), g_bytes);
    int peer = 1 - rank;
    timed(rank, "gloo UnboundBuffer", [&] {
        rb->recv(peer, 7, 0, g_bytes);
        sb->send(peer, 7, 0, g_bytes);
        rb->waitRecv();
        sb->waitSend();
    });
}

void sync_mode(int rank, const char *dir, bool busy)
{
    auto ctx = gloo_pair(rank, dir, true, busy);
    std::vector<char> s(g_bytes), r(g_bytes);
    auto &pair = ctx->getPair(1 - rank);
    auto rb = pair->createRecvBuffer(3, r.data(), g_bytes);
    auto sb = pair->createSendBuffer(3, s.data(), g_bytes);
    timed(rank, busy ? "gloo Buffer, sync, busy-poll" : "gloo Buffer, sync", [&] {
        sb->send();
        rb->waitRecv();
        sb->waitSend();
    });
}

// A connected loopback socket: rank 0 listens on port, rank 1 connects.
int tcp_connect(int rank, int port)
{
    int one = 1, fd = -1;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (rank == 0) {
        int l = socket(AF_INET, SOCK_STREAM, 0);
        setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(l, (sockaddr *)&a, sizeof a) || listen(l, 1)) perror("bench/gloo_pingpong: listen");
        fd = accept(l, nullptr, nullptr);
        close(l);
    } else {
        for (int tries = 0; tries < 100; tries++) {
            fd = socket(AF_INET, SOCK_STREAM, 0);
            if (!::connect(fd, (sockaddr *)&a, sizeof a)) break;
            close(fd);
            fd = -1;
            usleep(20000);
        }
    }
    if (fd < 0) {
        perror("bench/gloo_pingpong: connect");
        exit(1);
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

void tcp(int rank, int port, bool spin)
{
    int fd = tcp_connect(rank, port);
    std::vector<char> s(g_bytes), r(g_bytes);
    timed(rank, spin ? "TCP socket, spinning" : "TCP socket, blocking", [&] {
        if (write(fd, s.data(), g_bytes) != (ssize_t)g_bytes) perror("bench/gloo_pingpong: write");
        for (size_t got = 0; got < g_bytes;) {
            ssize_t k = recv(fd, r.data() + got, g_bytes - got, spin ? MSG_DONTWAIT : 0);
            if (k > 0)
                got += (size_t)k;
            else if (k == 0 || errno != EAGAIN) {
                perror("bench/gloo_pingpong: recv");
                exit(1);
            }
        }
    });
    close(fd);
}

} // namespace

int main(int argc, char **argv)
{
    const std::string modes = " ub sync busy tcp tcpbusy ";
    if (argc < 2 || modes.find(" " + std::string(argv[1]) + " ") == std::string::npos) {
        fprintf(stderr, "usage: %s ub|sync|busy|tcp|tcpbusy [BYTES [EXCHANGES]]\n", argv[0]);
        return 2;
    }
    std::string mode = argv[1];
    if (argc > 2) g_bytes = (size_t)atol(argv[2]);
    if (argc > 3) g_exchanges = atoi(argv[3]);
    if (g_bytes < 1 || g_exchanges < 1) {
        fprintf(stderr, "bench/gloo_pingpong: BYTES and EXCHANGES must be >= 1\n");
        return 2;
    }
    char dir[] = "/tmp/phx-pingpong-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("bench/gloo_pingpong: mkdtemp");
        return 1;
    }
    int port = 20000 + getpid() % 20000;
    pid_t kid = fork();
    int rank = kid == 0 ? 1 : 0;
    if (mode == "ub")
        unbound(rank, dir);
    else if (mode == "sync" || mode == "busy")
        sync_mode(rank, dir, mode == "busy");
    else
        tcp(rank, port, mode == "tcpbusy");
    if (kid == 0) _exit(0);
    waitpid(kid, nullptr, 0);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    return 0;
}
