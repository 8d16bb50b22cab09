/* A rank that dies during an FSDP all-gather does not hang the others
 * (PHX_TIMEOUT=5, as t/zero/peer.c): three gloo processes, forked here,
 * train an FSDP model of two units of 4 MiB each (Linear(1024, 1024));
 * between the units sits a module that, on rank 2's third forward, dies
 * by SIGKILL while the second unit's all-gather (prefetched by the first
 * unit's forward) is in flight. Ranks 0 and 1 must get PHX_EPEER (or
 * PHX_ETIMEOUT) from that step's forward or backward in under 10 s, with
 * a message naming the all-gather or reduce-scatter, and exit normally. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "t/comm_harness.h"
#include "t/gloo-procs.h"

#define N 3
#define WIDTH 1024

static h_shared *H;
static int g_rank;

static phx_status bomb_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    int *calls = phx_module_ctx(self);
    if (g_rank == 2 && ++*calls == 3) {
        usleep(2000); /* the second unit's gather, issued by the first unit's forward, is in flight */
        raise(SIGKILL);
    }
    *y = (phx_tensor *)x;
    return PHX_OK;
}

static void bomb_free(phx_module *self)
{
    free(phx_module_ctx(self));
}

static const phx_module_vtable bomb_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE, .type_name = "Bomb", .forward = bomb_forward, .free = bomb_free};

static bool wrap_linears(const phx_module *m, const char *path, int64_t numel, void *arg)
{
    (void)m, (void)numel, (void)arg;
    return strcmp(path, "0") == 0 || strcmp(path, "2") == 0;
}

static phx_optimizer *make(phx_module *shard, void *arg)
{
    (void)arg;
    phx_adam_opts o = PHX_ADAMW_OPTS_INIT;
    return phx_adam_new(shard, &o);
}

static int gloo_rank(int rank)
{
    phx_comm *c;
    g_rank = rank;
    phx_comm_opts o = PHX_COMM_OPTS_INIT;
    o.backend = "gloo";
    if (phx_comm_init(&o, &c)) {
        fprintf(stderr, "rank %d: %s\n", rank, phx_last_error());
        return 1;
    }
    phx_rng *r = phx_rng_new(1);
    phx_module *m = phx_sequential_new();
    phx_sequential_add(m, phx_linear_new(WIDTH, WIDTH, true, r));
    phx_sequential_add(m, phx_module_new(&bomb_vt, calloc(1, sizeof(int))));
    phx_sequential_add(m, phx_linear_new(WIDTH, WIDTH, true, r));
    phx_rng_free(r);
    phx_fsdp_opts fo = PHX_FSDP_OPTS_INIT;
    fo.wrap = wrap_linears;
    phx_module *f = phx_fsdp_new(m, c, &fo);
    phx_zero_opts zo = PHX_ZERO_OPTS_INIT;
    zo.stage = 3;
    phx_optimizer *z = f ? phx_zero_optimizer_new(f, c, make, NULL, &zo) : NULL;
    if (!h_check(H, rank, z != NULL, phx_last_error(), "FSDP + ZeRO-3 over 3 gloo processes made")) return 1;
    int64_t shape[2] = {4, WIDTH};
    phx_tensor *x = phx_tensor_zeros(PHX_F32, 2, shape, phx_cpu()), *out;
    phx_status st = PHX_OK;
    double dt = 0;
    int s;
    for (s = 0; s < 5 && st == PHX_OK; s++) {
        double t0 = gp_now();
        st = phx_module_forward(f, x, &out);
        if (st == PHX_OK) st = phx_module_backward(f, out, NULL);
        if (st == PHX_OK) st = phx_optimizer_step(z);
        if (st == PHX_OK) st = phx_optimizer_zero_grad(z);
        dt = gp_now() - t0;
    }
    char why[300];
    snprintf(why, sizeof why, "%s after %.2f s at step %d: %s", phx_status_name(st), dt, s - 1, phx_last_error());
    h_check(H, rank, (st == PHX_EPEER || st == PHX_ETIMEOUT) && (s - 1 == 2 || s - 1 == 3), why,
            "survivors' third or fourth FSDP step fails with PHX_EPEER or PHX_ETIMEOUT");
    h_check(H, rank, st != PHX_OK && dt < 10.0, why, "... in under 10 s");
    h_check(H, rank, strstr(phx_last_error(), "all-gather") || strstr(phx_last_error(), "reduce-scatter"), why,
            "... naming the all-gather or reduce-scatter");
    if (rank == 0) snprintf(H->r[0].why[H_MAX_CHECKS - 1], sizeof H->r[0].why[0], "%.190s", why);
    phx_tensor_free(x);
    phx_optimizer_free(z);
    phx_module_free(f);
    phx_module_free(m);
    phx_comm_free(c);
    return 0;
}

int main(void)
{
    setenv("PHX_TIMEOUT", "5", 1);
    plan(7);
    if (!h_have("gloo")) {
        skip(7, "no gloo plugin in this build");
        return done_testing();
    }
    H = h_new(N);
    gp_run_rank2_killed(gloo_rank, "", "mid-all-gather", 1);
    H->nranks = 2;
    h_print(H, 0, "");
    diag("rank 0: %s", H->r[0].why[H_MAX_CHECKS - 1]);
    return done_testing();
}
