/* phx_comm_split on plugins without the split slot:
 *   abi10, a comm plugin built against the frozen ABI 1.0 headers that
 *     meets its peers through the store: the core's split (init over the
 *     group under a prefix of its own) works, worlds of 3 processes;
 *   ownworld, an ABI 1.1 plugin that makes its own world (comm_v1.world)
 *     and has no split: PHX_EUNSUPPORTED naming the plugin, and the
 *     communicator still works. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "t/comm_harness.h"

static h_shared *H;

static int abi10_rank(int rank, void *arg)
{
    (void)arg;
    phx_comm_opts o = PHX_COMM_OPTS_INIT;
    o.backend = "abi10";
    phx_comm *c = NULL, *g = NULL;
    if (phx_comm_init(&o, &c)) {
        h_check(H, rank, 0, phx_last_error(), "abi10: init");
        return 1;
    }
    phx_status st = phx_comm_split(c, rank % 2, -rank, &g);
    int n = phx_comm_size(c), m = (n - rank % 2 + 1) / 2;
    /* keys -rank: the highest world rank of my parity is group rank 0 */
    int want_rank = 0;
    for (int r = rank % 2; r < n; r += 2)
        if (r > rank) want_rank++;
    char why[300];
    snprintf(why, sizeof why, "%s; rank %d of %d, expected %d of %d", st ? phx_last_error() : "ok", phx_comm_rank(g),
             phx_comm_size(g), want_rank, m);
    h_check(H, rank, !st && g && phx_comm_rank(g) == want_rank && phx_comm_size(g) == m, why,
            "abi10 (ABI 1.0, no split slot): the core's split gives group rank and size");
    int64_t k = 4;
    phx_tensor *t = phx_tensor_zeros(PHX_F32, 1, &k, phx_cpu());
    float *x = phx_tensor_data(t);
    for (int i = 0; i < 4; i++) x[i] = (float)(rank + 1) * (float)(i + 1);
    st = g ? phx_comm_allreduce(g, t, PHX_SUM, NULL) : PHX_EINVAL;
    double want = 0;
    for (int r = rank % 2; r < n; r += 2) want += (r + 1) * 4.0;
    snprintf(why, sizeof why, "%s; element 3 is %g, expected %g", st ? phx_last_error() : "ok", x[3], want);
    h_check(H, rank, !st && x[3] == want, why, "abi10: the group's all-reduce sums its members only");
    phx_tensor_free(t);
    phx_comm_free(c); /* the parent first */
    phx_comm_free(g);
    return 0;
}

int main(void)
{
    char dirs[2 * PATH_MAX + 2];
    const char *b = getenv("top_builddir");
    if (!b) b = ".";
    snprintf(dirs, sizeof dirs, "%s/t/plugins/abi/.libs:%s/t/plugins/split/.libs", b, b);
    setenv("PHX_PLUGIN_PATH", dirs, 1);
    setenv("PHX_PLUGIN_PATH_ONLY", "1", 1);
    if (!getenv("PHX_TIMEOUT")) setenv("PHX_TIMEOUT", "30", 1);
    plan(6);

    H = h_new(3);
    phx_status st = phx_spawn(3, abi10_rank, NULL);
    ok(st == PHX_OK, "abi10: world of 3 processes ran (%s)", st ? phx_last_error() : "ok");
    h_print(H, 0, "");

    phx_comm_opts o = PHX_COMM_OPTS_INIT;
    o.backend = "ownworld";
    phx_comm *c = NULL, *g = (phx_comm *)&st;
    st = phx_comm_init(&o, &c);
    if (st) diag("ownworld: %s", phx_last_error());
    st = c ? phx_comm_split(c, 0, 0, &g) : PHX_EINVAL;
    ok(st == PHX_EUNSUPPORTED && g == NULL, "ownworld (own world, no split slot): PHX_EUNSUPPORTED, sub NULL (got %s)",
       phx_status_name(st));
    like(phx_last_error(), "comm plugin 'ownworld' (ABI 1.1) makes its own world and has no split slot",
         "... and the message names the plugin and its ABI");
    int64_t k = 2;
    phx_tensor *t = phx_tensor_zeros(PHX_F32, 1, &k, phx_cpu());
    ok(c && phx_comm_allreduce(c, t, PHX_SUM, NULL) == PHX_OK, "ownworld: the communicator still works");
    phx_tensor_free(t);
    phx_comm_free(c);
    return done_testing();
}
