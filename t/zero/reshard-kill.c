/* A rank killed in the middle of a sharded save leaves the previous
 * checkpoint loadable (PHX_TIMEOUT=5). Three gloo processes, forked here,
 * share a ZeRO-1 AdamW (no DDP: every rank computes the gradients of the
 * same rows, so they agree); after 2 steps they save generation 1, step
 * once more and save again, and rank 2's shard optimizer kills itself
 * (SIGKILL) when the second save asks for its state: it first joins the
 * save's opening agreement itself (as t/zero/peer.c joins the all-gather)
 * so that ranks 0 and 1 write their shards of generation 2, then dies
 * before writing its own. The survivors' save must
 * fail (PHX_EPEER or PHX_ETIMEOUT) in under 10 s without writing the
 * index; afterwards index.json is still generation 1 and
 * phx_zero_checkpoint_load_full of the folder gives the parameters and
 * step count of a plain AdamW after 2 steps (within 1e-6). */
#include <stdio.h>
#include <stdlib.h>
#include <ftw.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "t/comm_harness.h"
#include "t/gloo-procs.h"
#include "t/ddp-util.h"

#define N 3
#define ROWS 6

static h_shared *H;
static char dir[64];
static volatile int armed;
static phx_comm *g_comm;
static const int64_t sizes[] = {5, 9, 4};

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb, (void)flag, (void)f;
    return remove(p);
}

typedef struct dying {
    phx_optimizer *adam;
} dying;

static phx_status dying_step(phx_optimizer *self)
{
    dying *d = phx_optimizer_ctx(self);
    phx_optimizer_set_lr(d->adam, phx_optimizer_lr(self));
    phx_optimizer_set_steps(d->adam, phx_optimizer_steps(self));
    return phx_optimizer_step(d->adam);
}

static size_t dying_state(phx_optimizer *self, const char ***names, phx_tensor ***ts)
{
    dying *d = phx_optimizer_ctx(self);
    if (armed) {
        /* Join the save's opening agreement as the save would (2 state
         * kinds, no failure, rank 0's and the fewest kinds: 4 floats, MAX;
         * then the index's generation, 1, and rank 0's name for the save,
         * to which the others send 0, as two i64, MAX), so that ranks 0
         * and 1 go on to write their shards of generation 2; then die
         * before this rank writes its own. */
        float v[4] = {2, 0, 0, -2};
        int64_t four = 4, two = 2, gen[2] = {1, 0};
        phx_tensor *t = phx_tensor_from_data(PHX_F32, 1, &four, v);
        phx_comm_allreduce(g_comm, t, PHX_MAX, NULL);
        phx_tensor *g = phx_tensor_from_data(PHX_I64, 1, &two, gen);
        phx_comm_allreduce(g_comm, g, PHX_MAX, NULL);
        usleep(500000); /* the others write their shards and wait for this one */
        raise(SIGKILL);
    }
    return phx_optimizer_state(d->adam, names, ts);
}

static void dying_free(phx_optimizer *self)
{
    dying *d = phx_optimizer_ctx(self);
    phx_optimizer_free(d->adam);
    free(d);
}

static const phx_optimizer_vtable dying_vt = {
    .struct_size = PHX_OPTIMIZER_VTABLE_SIZE,
    .type_name = "AdamW",
    .step = dying_step,
    .state = dying_state,
    .free = dying_free,
};

static phx_optimizer *make_adamw(phx_module *m, void *arg)
{
    (void)arg;
    phx_adam_opts o = PHX_ADAMW_OPTS_INIT;
    o.lr = 1e-2;
    return phx_adam_new(m, &o);
}

static phx_optimizer *make(phx_module *shard, void *arg)
{
    int rank = *(const int *)arg;
    phx_optimizer *adam = make_adamw(shard, NULL);
    if (!adam || rank != 2) return adam;
    dying *d = calloc(1, sizeof *d);
    d->adam = adam;
    phx_optimizer *opt = phx_optimizer_new(&dying_vt, d, shard);
    if (opt) phx_optimizer_set_lr(opt, phx_optimizer_lr(adam));
    return opt;
}

static phx_status train(phx_module *m, phx_optimizer *o, int first, int steps)
{
    phx_loss *loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    phx_tensor *x = tu_new2(ROWS, sizes[0]), *y = tu_new2(ROWS, sizes[2]);
    phx_status st = PHX_OK;
    for (int s = first; s < first + steps && st == PHX_OK; s++) {
        tu_batch(s, 0, ROWS, x, y);
        st = tu_step(m, o, loss, x, y);
    }
    phx_tensor_free(x);
    phx_tensor_free(y);
    phx_loss_free(loss);
    return st;
}

static int gloo_rank(int rank)
{
    phx_comm *c = NULL;
    phx_comm_opts co = PHX_COMM_OPTS_INIT;
    co.backend = "gloo";
    if (phx_comm_init(&co, &c)) {
        fprintf(stderr, "rank %d: %s\n", rank, phx_last_error());
        return 1;
    }
    g_comm = c;
    phx_module *m = tu_mlp(sizes, 3, 5);
    phx_zero_opts zo = PHX_ZERO_OPTS_INIT;
    zo.region_bytes = 100;
    phx_optimizer *z = phx_zero_optimizer_new(m, c, make, &rank, &zo);
    phx_status st = z ? train(m, z, 0, 2) : PHX_EINVAL;
    if (st == PHX_OK) st = phx_zero_checkpoint_save(dir, m, z, NULL);
    h_check(H, rank, st == PHX_OK, phx_last_error(), "2 steps and the first save");
    if (st == PHX_OK) st = train(m, z, 2, 1);
    armed = 1;
    double t0 = gp_now();
    phx_status s2 = st == PHX_OK ? phx_zero_checkpoint_save(dir, m, z, NULL) : st;
    double dt = gp_now() - t0;
    char why[400];
    snprintf(why, sizeof why, "%s after %.2f s: %s", phx_status_name(s2), dt, phx_last_error());
    h_check(H, rank, s2 == PHX_EPEER || s2 == PHX_ETIMEOUT, why,
            "the survivors' second save fails with PHX_EPEER or PHX_ETIMEOUT");
    h_check(H, rank, s2 != PHX_OK && dt < 10.0, why, "... in under 10 s");
    if (rank == 0) snprintf(H->r[0].why[H_MAX_CHECKS - 1], sizeof H->r[0].why[0], "%.190s", why);
    phx_optimizer_free(z);
    phx_module_free(m);
    phx_comm_free(c);
    return 0;
}

int main(void)
{
    setenv("PHX_TIMEOUT", "5", 1);
    plan(9);
    if (!h_have("gloo")) {
        skip(9, "no gloo plugin in this build");
        return done_testing();
    }
    snprintf(dir, sizeof dir, "/tmp/phx-reshard-kill-XXXXXX");
    if (!mkdtemp(dir)) skip_all("cannot create a temporary folder");
    H = h_new(N);
    gp_run_rank2_killed(gloo_rank, "", "mid-save", 0);
    H->nranks = 2; /* the survivors' checks */
    h_print(H, 0, "");
    diag("rank 0: %s", H->r[0].why[H_MAX_CHECKS - 1]);

    char p[128];
    struct stat sb;
    snprintf(p, sizeof p, "%s/shard-0-of-3.g2.safetensors", dir);
    int new0 = stat(p, &sb) == 0;
    snprintf(p, sizeof p, "%s/shard-2-of-3.g2.safetensors", dir);
    int new2 = stat(p, &sb) == 0;
    ok(new0 && !new2, "the killed save got as far as rank 0's shard of generation 2, not rank 2's");

    /* the folder still loads: generation 1, the state after 2 steps */
    phx_module *m = tu_mlp(sizes, 3, 99), *ref = tu_mlp(sizes, 3, 5);
    phx_optimizer *o = make_adamw(m, NULL), *ro = make_adamw(ref, NULL);
    phx_status st = phx_zero_checkpoint_load_full(dir, m, o, NULL);
    phx_status rs = train(ref, ro, 0, 2);
    double e = st == PHX_OK && rs == PHX_OK ? tu_max_rel(m, ref) : INFINITY;
    ok(st == PHX_OK && e <= 1e-6 && phx_optimizer_steps(o) == 2,
       "the previous checkpoint still loads: parameters after 2 steps (max rel error %.3g, step %lld) %s", e,
       (long long)phx_optimizer_steps(o), st ? phx_last_error() : "");
    /* and both continue alike (the optimizer state came back too) */
    st = st == PHX_OK ? train(m, o, 2, 3) : st;
    rs = train(ref, ro, 2, 3);
    e = st == PHX_OK && rs == PHX_OK ? tu_max_rel(m, ref) : INFINITY;
    ok(st == PHX_OK && e <= 1e-6, "... and 3 more steps agree with the uninterrupted run (max rel error %.3g)", e);
    /* a later save (world 1) replaces generation 1 and clears the dead
     * save's shards */
    phx_optimizer *z1 = phx_zero_optimizer_new(m, NULL, make_adamw, NULL, NULL);
    st = z1 ? phx_zero_checkpoint_save(dir, m, z1, NULL) : PHX_EINVAL;
    int left_over = 0;
    for (int r = 0; r < N; r++)
        for (int g = 1; g <= 2; g++) {
            snprintf(p, sizeof p, "%s/shard-%d-of-3.g%d.safetensors", dir, r, g);
            left_over += stat(p, &sb) == 0;
        }
    snprintf(p, sizeof p, "%s/shard-0-of-1.g2.safetensors", dir);
    ok(st == PHX_OK && left_over == 0 && stat(p, &sb) == 0,
       "a later save writes generation 2 at world 1 and removes the others (%d left) %s", left_over,
       st ? phx_last_error() : "");
    phx_optimizer_free(z1);
    phx_optimizer_free(o);
    phx_optimizer_free(ro);
    phx_module_free(m);
    phx_module_free(ref);
    nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
    return done_testing();
}
