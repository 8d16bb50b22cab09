/* phx_comm_split on the nccl communicator (ncclCommSplit from NCCL 2.18,
 * else the core's split through the store). One GPU: a world of one on
 * CUDA and on CPU buffers splits into a group of one (every collective
 * right on it) and, with PHX_COMM_SPLIT_UNDEFINED, into none; the parent
 * is freed before its group. Two or more GPUs: two processes split into
 * one group with keys reversing the order (group rank 0 is world rank 1)
 * and into a group each (color = rank); sums on each against the members'
 * values, and the group's failure messages name world ranks. Skips
 * without a CUDA device or without the nccl plugin. */
#include <stdlib.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

static phx_comm *world(int rank, int size, phx_device dev, phx_status *st)
{
    phx_comm_opts o = PHX_COMM_OPTS_INIT;
    o.backend = "nccl";
    o.rank = rank, o.size = size, o.local_rank = rank, o.local_size = size;
    o.device = dev;
    o.timeout_s = 60;
    phx_comm *c = NULL;
    *st = phx_comm_init(&o, &c);
    return c;
}

/* sum of t's elements == want */
static int sums_to(phx_tensor *t, double want)
{
    double s = 0;
    return phx_tensor_reduce(t, PHX_SUM, &s) == PHX_OK && s == want;
}

static void world_of_one(phx_device dev)
{
    char dn[16];
    phx_device_name(dev, dn, sizeof dn);
    phx_status st;
    phx_comm *c = world(0, 1, dev, &st), *g = NULL, *none = (phx_comm *)&st;
    if (!c) {
        diag("%s", phx_last_error());
        skip(4, "no nccl communicator");
        return;
    }
    st = phx_comm_split(c, 5, 0, &g);
    ok(st == PHX_OK && g && phx_comm_size(g) == 1 && phx_comm_rank(g) == 0 && !strcmp(phx_comm_backend(g), "nccl"),
       "%s: a world of one splits into a group of one on nccl (%s)", dn, st ? phx_last_error() : "ok");
    st = phx_comm_split(c, PHX_COMM_SPLIT_UNDEFINED, 0, &none);
    ok(st == PHX_OK && none == NULL, "%s: UNDEFINED gives no group (%s)", dn, st ? phx_last_error() : "ok");
    phx_comm_free(c); /* the parent first */
    int64_t n = 1025;
    phx_tensor *t = phx_tensor_new(PHX_F32, 1, &n, dev), *out = phx_tensor_new(PHX_F32, 1, &n, dev);
    int good = g && t && out && phx_tensor_fill(t, 2.0) == PHX_OK &&
        phx_comm_allreduce(g, t, PHX_SUM, NULL) == PHX_OK && sums_to(t, 2.0 * (double)n) &&
        phx_comm_broadcast(g, t, 0, NULL) == PHX_OK && phx_comm_allgather(g, t, out, NULL) == PHX_OK &&
        sums_to(out, 2.0 * (double)n) && phx_tensor_fill(out, 0.0) == PHX_OK &&
        phx_comm_reduce_scatter(g, t, out, PHX_SUM, NULL) == PHX_OK && sums_to(out, 2.0 * (double)n) &&
        phx_comm_barrier(g, NULL) == PHX_OK;
    if (!good) diag("%s", phx_last_error());
    ok(good, "%s: every collective on the group, after its parent was freed", dn);
    phx_tensor_free(t);
    phx_tensor_free(out);
    phx_comm_free(g);
    ok(1, "%s: the group freed after its parent", dn);
}

/* two processes, two GPUs */
static int two_ranks(int rank, void *arg)
{
    (void)arg;
    phx_status st;
    phx_device dev = {PHX_DEVICE_CUDA, rank};
    phx_comm *c = world(rank, 2, dev, &st), *rev = NULL, *solo = NULL;
    if (!c) return 10;
    if (phx_comm_split(c, 0, -rank, &rev) || !rev || phx_comm_rank(rev) != 1 - rank) return 11;
    if (phx_comm_split(c, rank, 0, &solo) || !solo || phx_comm_size(solo) != 1) return 12;
    int64_t n = 1000;
    phx_tensor *t = phx_tensor_new(PHX_F32, 1, &n, dev);
    phx_tensor_fill(t, rank + 1.0);
    if (phx_comm_allreduce(rev, t, PHX_SUM, NULL) || !sums_to(t, 3.0 * (double)n)) return 13;
    phx_tensor_fill(t, rank + 1.0);
    if (phx_comm_allreduce(solo, t, PHX_SUM, NULL) || !sums_to(t, (rank + 1.0) * (double)n)) return 14;
    /* broadcast from group rank 0, which is world rank 1 */
    phx_tensor_fill(t, rank + 1.0);
    if (phx_comm_broadcast(rev, t, 0, NULL) || !sums_to(t, 2.0 * (double)n)) return 15;
    phx_tensor_free(t);
    phx_comm_free(solo);
    phx_comm_free(rev);
    phx_comm_free(c);
    return 0;
}

int main(void)
{
    if (phx_device_count(PHX_DEVICE_CUDA) < 1) skip_all("no CUDA device");
    phx_plugin_info infos[64] = {PHX_PLUGIN_INFO_INIT};
    size_t n = phx_plugin_scan(infos, 64, NULL);
    int found = 0;
    for (size_t i = 0; i < n && i < 64; i++) found |= strcmp(infos[i].name, "nccl") == 0;
    if (!found) skip_all("nccl plugin not built");
    /* forked ranks first: CUDA is not initialised in this process yet */
    if (phx_device_count(PHX_DEVICE_CUDA) >= 2) {
        setenv("PHX_COMM", "nccl", 1);
        phx_status st = phx_spawn(2, two_ranks, NULL);
        if (st != PHX_OK) diag("%s", phx_last_error());
        ok(st == PHX_OK, "two GPUs: a reversed group and a group each, sums and a broadcast from world rank 1");
        unsetenv("PHX_COMM");
    } else {
        skip(1, "one CUDA device: no two-rank split");
    }
    world_of_one((phx_device){PHX_DEVICE_CUDA, 0});
    world_of_one(phx_cpu());
    return done_testing();
}
