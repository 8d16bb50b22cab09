/* phx-comm-duo: a two-rank communicator plugin built on the kit alone
 * (public headers only, as an out-of-tree plugin is), for t/plugin/kit_peer.
 * The ranks are processes joined by one loopback TCP socket (rank 0
 * listens, publishes its port in the store, rank 1 connects); all-reduce
 * sends this rank's buffer, receives the peer's and reduces both in rank
 * order; barrier exchanges a byte. A closed connection is the kit's
 * PHX_EPEER, named with phx_kit_comm_peer: the kit's failure protocol
 * writes the message. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "phalanx/plugin/comm_v1.h"
#include "phalanx/plugin/kit.h"

typedef struct duo {
    int rank, fd;
    phx_kit_comm *kc;
} duo;

/* Sends then receives n bytes; 0, or -1 when the peer is gone. */
static int swap(int fd, const void *out, void *in, size_t n)
{
    for (size_t d = 0; d < n;) {
        ssize_t k = send(fd, (const char *)out + d, n - d, MSG_NOSIGNAL);
        if (k <= 0 && errno != EINTR) return -1;
        d += k > 0 ? (size_t)k : 0;
    }
    for (size_t d = 0; d < n;) {
        ssize_t k = recv(fd, (char *)in + d, n - d, 0);
        if (k == 0 || (k < 0 && errno != EINTR)) return -1;
        d += k > 0 ? (size_t)k : 0;
    }
    return 0;
}

static phx_status duo_run(void *ctx, const phx_kit_op *op, char *msg, size_t len)
{
    duo *s = ctx;
    size_t n = op->kind == PHX_KIT_BARRIER ? 1 : (size_t)op->count * phx_dtype_size(op->dt);
    if (op->kind != PHX_KIT_ALLREDUCE && op->kind != PHX_KIT_BARRIER) {
        snprintf(msg, len, "duo runs all-reduce and barrier only");
        return PHX_EUNSUPPORTED;
    }
    char byte = 0, *theirs = op->kind == PHX_KIT_BARRIER ? &byte : malloc(n ? n : 1);
    if (!theirs) return PHX_ENOMEM;
    phx_status st = PHX_OK;
    errno = 0;
    if (swap(s->fd, op->kind == PHX_KIT_BARRIER ? &byte : op->send, theirs, n)) {
        phx_kit_comm_peer(s->kc, 1 - s->rank, 0);
        snprintf(msg, len, "the connection closed (%s)", errno ? strerror(errno) : "end of stream");
        st = PHX_EPEER;
    } else if (op->kind == PHX_KIT_ALLREDUCE) {
        const void *in[2] = {s->rank ? theirs : op->send, s->rank ? op->send : theirs};
        st = phx_kit_reduce(&op->recv, 1, in, 2, 0, (size_t)op->count, op->dt, op->op, 2);
    }
    if (theirs != &byte) free(theirs);
    return st;
}

/* Rank 0 listens and publishes its port; rank 1 connects. */
static int duo_connect(const phx_comm_init_args *a)
{
    char key[128];
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    snprintf(key, sizeof key, "%sduo/port", a->prefix);
    int fd = socket(AF_INET, SOCK_STREAM, 0), conn = -1;
    if (fd < 0) return -1;
    if (a->rank == 0) {
        if (!bind(fd, (struct sockaddr *)&sa, sizeof sa) && !listen(fd, 1) &&
            !getsockname(fd, (struct sockaddr *)&sa, &sl) &&
            !phx_store_set(a->store, key, &sa.sin_port, sizeof sa.sin_port))
            conn = accept(fd, NULL, NULL);
        close(fd);
        return conn;
    }
    void *v = NULL;
    size_t n = 0;
    if (!phx_store_get(a->store, key, &v, &n, a->timeout_s) && n == sizeof sa.sin_port) {
        memcpy(&sa.sin_port, v, n);
        if (!connect(fd, (struct sockaddr *)&sa, sizeof sa)) conn = fd;
    }
    free(v);
    if (conn < 0) close(fd);
    return conn;
}

static phx_status duo_init(const phx_comm_init_args *a, void **state)
{
    if (a->size != 2) return phx_error(PHX_EINVAL, "duo: a world of %d; duo is a world of two", a->size);
    duo *s = calloc(1, sizeof *s);
    if (!s) return PHX_ENOMEM;
    s->rank = a->rank;
    if ((s->fd = duo_connect(a)) < 0) {
        free(s);
        return phx_error(PHX_EPEER, "duo: rank %d: cannot connect to its peer", a->rank);
    }
    phx_status st = phx_kit_comm_new(a, "duo", duo_run, s, &s->kc);
    if (st) {
        close(s->fd);
        free(s);
        return st;
    }
    *state = s->kc;
    return PHX_OK;
}

static void duo_finalize(void *state)
{
    duo *s = phx_kit_comm_ctx(state);
    phx_kit_comm_free(state);
    close(s->fd);
    free(s);
}

static int duo_probe(const phx_probe_ctx *ctx, char *why, size_t len)
{
    (void)ctx;
    (void)why;
    (void)len;
    return 0;
}

static const phx_comm_v1 duo_vtable = {.init = duo_init, .finalize = duo_finalize, PHX_KIT_COMM_SLOTS};

PHX_PLUGIN_EXPORT const phx_plugin_desc phx_plugin_v1 = PHX_PLUGIN_DESC_INIT(
    PHX_PLUGIN_COMM, "duo", "1.0", "two processes over one loopback socket, on the kit", duo_probe, &duo_vtable);
