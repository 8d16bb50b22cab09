/* no_sync: k backward passes without communication then one synced
 * backward give the step one process takes on all k+1 micro-batches of
 * every rank (gradients accumulate: the step equals one SGD step with
 * (k+1) times the learning rate on the whole batch); no all-reduce is
 * issued while no_sync is on; ordinary steps continue to match after.
 * Two ranks on threads and on gloo. */
#include "t/tap.h"
#include "t/ddp-util.h"

#define K 3 /* no_sync micro-batches before the synced one */
#define BATCH 5 /* rows per rank and micro-batch */
#define LR 0.1

static const int64_t sizes[] = {6, 8, 3};

static int rank_main(int rank, void *arg)
{
    (void)arg;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    int world = phx_comm_size(c), bad = 0;
    phx_module *model = tu_mlp(sizes, 3, 5), *ref = tu_mlp(sizes, 3, 5);
    phx_module *ddp = phx_ddp_new(model, c, NULL);
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.lr = LR;
    phx_optimizer *opt = phx_sgd_new(ddp, &so);
    so.lr = LR * (K + 1);
    phx_optimizer *ropt = phx_sgd_new(ref, &so);
    phx_loss *loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN), *rloss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    phx_tensor *x = tu_new2(BATCH, sizes[0]), *y = tu_new2(BATCH, sizes[2]);
    int64_t all_rows = (int64_t)(K + 1) * world * BATCH;
    phx_tensor *gx = tu_new2(all_rows, sizes[0]), *gy = tu_new2(all_rows, sizes[2]);

    /* The reference batch: micro-batch j's global rows, j = 0..K. */
    float *hx = malloc((size_t)all_rows * sizes[0] * sizeof *hx),
          *hy = malloc((size_t)all_rows * sizes[2] * sizeof *hy);
    for (int j = 0; j <= K; j++)
        for (int64_t i = 0; i < (int64_t)world * BATCH; i++) {
            int64_t row = (int64_t)j * world * BATCH + i;
            tu_row(j, i, sizes[0], sizes[2], hx + row * sizes[0], hy + row * sizes[2]);
        }
    phx_tensor_from_host(gx, hx);
    phx_tensor_from_host(gy, hy);
    free(hx);
    free(hy);

    phx_ddp_stats s0 = PHX_DDP_STATS_INIT, s1 = PHX_DDP_STATS_INIT;
    phx_ddp_get_stats(ddp, &s0);
    phx_ddp_set_no_sync(ddp, true);
    for (int j = 0; j < K && !bad; j++) {
        tu_batch(j, (int64_t)rank * BATCH, BATCH, x, y);
        bad += tu_step(ddp, NULL, loss, x, y) != PHX_OK;
    }
    phx_ddp_get_stats(ddp, &s1);
    if (s1.launches != s0.launches || s1.backwards != s0.backwards + K) {
        printf("# rank %d: %llu all-reduces during %d no_sync backwards\n", rank,
               (unsigned long long)(s1.launches - s0.launches), K);
        bad++;
    }
    phx_ddp_set_no_sync(ddp, false);
    tu_batch(K, (int64_t)rank * BATCH, BATCH, x, y);
    bad += tu_step(ddp, NULL, loss, x, y) != PHX_OK;
    bad += phx_optimizer_step(opt) != PHX_OK;
    phx_optimizer_zero_grad(opt);
    bad += tu_step(ref, NULL, rloss, gx, gy) != PHX_OK;
    bad += phx_optimizer_step(ropt) != PHX_OK;
    phx_optimizer_zero_grad(ropt);
    if (bad) printf("# rank %d: %s\n", rank, phx_last_error());
    double e = tu_max_rel(ddp, ref);
    if (!(e <= 1e-6)) {
        printf("# rank %d: %d no_sync + 1 synced step vs one step on the whole batch: relative "
               "difference %.3g\n",
               rank, K, e);
        bad++;
    } else if (rank == 0) {
        printf("# %d ranks: %d no_sync + 1 synced backward = one step on %lld rows (relative difference %.3g)\n", world,
               K, (long long)all_rows, e);
    }
    if (!tu_same_bits_across(c, ddp)) {
        printf("# rank %d: parameters differ across ranks\n", rank);
        bad++;
    }

    /* Ordinary steps afterwards: one process on the world's batch. */
    so.lr = LR;
    phx_optimizer_free(ropt);
    ropt = phx_sgd_new(ref, &so);
    phx_tensor *wx = tu_new2((int64_t)world * BATCH, sizes[0]), *wy = tu_new2((int64_t)world * BATCH, sizes[2]);
    tu_side d = {ddp, opt, loss, x, y}, w = {ref, ropt, rloss, wx, wy};
    for (int s = 10; s < 13 && !bad; s++) bad += tu_step_both(s, rank, &d, &w) != PHX_OK;
    e = tu_max_rel(ddp, ref);
    if (!(e <= 1e-6)) {
        printf("# rank %d: synced steps after no_sync: relative difference %.3g\n", rank, e);
        bad++;
    }
    tu_side_free(&d); /* the DDP wrapper before the model it wraps */
    tu_side_free(&w);
    phx_tensor_free(gx);
    phx_tensor_free(gy);
    phx_module_free(model);
    phx_comm_free(c);
    return bad ? 1 : 0;
}

int main(void)
{
    plan(2);
    tu_spawn_both(2, rank_main, NULL,
                  "%d no_sync steps + 1 synced == one step on %d times the batch; "
                  "no all-reduce under no_sync",
                  K, K + 1);
    return done_testing();
}
