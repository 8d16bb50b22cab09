/* FSDP's no_sync (phx_fsdp_set_no_sync) against DDP's: on every rank a
 * DDP model stepped by AdamW and an FSDP model of the same start (two
 * units: the first Linear and the root) stepped by the ZeRO-3 AdamW
 * train side by side for STEPS steps of two micro-batches each, the first
 * backward under no_sync on both sides, the second synced. Checked on
 * every rank: the no_sync backward reduce-scatters nothing, counts one
 * unsynced backward and keeps the full gradients; a step right after it
 * is refused with PHX_ESTATE naming no_sync and changes nothing; setting
 * no_sync on a module that is not FSDP is refused; and after the steps
 * the two models agree within 1e-6 (relative, per tensor). Worlds 2 and
 * 3 (parameter counts not divisible by either), threads and gloo. */
#include "t/tap.h"
#include "t/ddp-util.h"

#define STEPS 5
#define ROWS 3 /* per rank and micro-batch */

static const int64_t sizes[] = {7, 13, 5};

static bool wrap_first(const phx_module *m, const char *path, int64_t numel, void *arg)
{
    (void)m, (void)numel, (void)arg;
    return strcmp(path, "0") == 0;
}

/* Forward and backward of m on micro-batch mb of step s (this rank's rows). */
static phx_status fwd_bwd(phx_module *m, phx_loss *loss, int s, int mb, int rank, phx_tensor *x, phx_tensor *y)
{
    phx_tensor *out = NULL;
    float l;
    tu_batch(2 * s + mb, (int64_t)rank * ROWS, ROWS, x, y);
    phx_status st = phx_module_forward(m, x, &out);
    if (st == PHX_OK) st = phx_loss_forward(loss, out, y, &l);
    if (st == PHX_OK) st = phx_module_backward(m, phx_loss_grad(loss), NULL);
    return st;
}

#define CHECK(cond, ...) \
    do { \
        if (!(cond)) { \
            printf("# rank %d: ", rank); \
            printf(__VA_ARGS__); \
            printf("\n"); \
            fails++; \
        } \
    } while (0)

static int rank_fn(int rank, void *arg)
{
    (void)arg;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    int fails = 0;
    phx_module *a = tu_mlp(sizes, 3, 11), *b = tu_mlp(sizes, 3, 11);
    phx_module *ddp = a ? phx_ddp_new(a, c, NULL) : NULL;
    phx_fsdp_opts fo = PHX_FSDP_OPTS_INIT;
    fo.wrap = wrap_first;
    phx_module *fs = b ? phx_fsdp_new(b, c, &fo) : NULL;
    phx_optimizer *oa = ddp ? tu_make_adamw(ddp, NULL) : NULL;
    phx_zero_opts zo = PHX_ZERO_OPTS_INIT;
    zo.stage = 3;
    phx_optimizer *ob = fs ? phx_zero_optimizer_new(fs, c, tu_make_adamw, NULL, &zo) : NULL;
    phx_loss *loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    phx_tensor *x = tu_new2(ROWS, sizes[0]), *y = tu_new2(ROWS, sizes[2]);
    phx_status st = oa && ob && loss && x && y ? PHX_OK : PHX_ENOMEM;
    if (st != PHX_OK) printf("# rank %d: setup: %s\n", rank, phx_last_error());
    fails += st != PHX_OK;
    phx_status ns = phx_fsdp_set_no_sync(ddp, true);
    CHECK(ns == PHX_EINVAL, "phx_fsdp_set_no_sync of a DDP module: %s (%s)", phx_status_name(ns), phx_last_error());
    for (int s = 0; s < STEPS && st == PHX_OK; s++) {
        phx_fsdp_stats before = PHX_FSDP_STATS_INIT, after = PHX_FSDP_STATS_INIT;
        st = phx_fsdp_get_stats(fs, &before);
        if (st == PHX_OK) st = phx_ddp_set_no_sync(ddp, true);
        if (st == PHX_OK) st = phx_fsdp_set_no_sync(fs, true);
        if (st == PHX_OK) st = fwd_bwd(ddp, loss, s, 0, rank, x, y);
        if (st == PHX_OK) st = fwd_bwd(fs, loss, s, 0, rank, x, y);
        if (st == PHX_OK) st = phx_fsdp_get_stats(fs, &after);
        if (st != PHX_OK) break;
        CHECK(after.reduce_scatters == before.reduce_scatters &&
                  after.unsynced_backwards == before.unsynced_backwards + 1 && after.grad_bytes > 0,
              "step %d: the no_sync backward ran %llu reduce-scatters, %llu unsynced backwards, kept %llu gradient "
              "bytes (expected 0, 1, > 0)",
              s, (unsigned long long)(after.reduce_scatters - before.reduce_scatters),
              (unsigned long long)(after.unsynced_backwards - before.unsynced_backwards),
              (unsigned long long)after.grad_bytes);
        if (s == 0) {
            phx_status ps = phx_optimizer_step(ob);
            CHECK(ps == PHX_ESTATE && strstr(phx_last_error(), "no_sync"),
                  "a step after a no_sync backward: %s (%s), expected PHX_ESTATE naming no_sync", phx_status_name(ps),
                  phx_last_error());
        }
        st = phx_ddp_set_no_sync(ddp, false);
        if (st == PHX_OK) st = phx_fsdp_set_no_sync(fs, false);
        if (st == PHX_OK) st = fwd_bwd(ddp, loss, s, 1, rank, x, y);
        if (st == PHX_OK) st = fwd_bwd(fs, loss, s, 1, rank, x, y);
        if (st == PHX_OK) st = phx_fsdp_get_stats(fs, &after);
        if (st == PHX_OK)
            CHECK(after.grad_bytes == 0, "step %d: %llu full gradient bytes left after the synced backward", s,
                  (unsigned long long)after.grad_bytes);
        if (st == PHX_OK) st = phx_optimizer_step(oa);
        if (st == PHX_OK) st = phx_optimizer_step(ob);
        if (st == PHX_OK) st = phx_optimizer_zero_grad(oa);
        if (st == PHX_OK) st = phx_optimizer_zero_grad(ob);
    }
    if (st != PHX_OK) printf("# rank %d: %s\n", rank, phx_last_error());
    fails += st != PHX_OK;
    if (st == PHX_OK && (st = phx_fsdp_gather_full(fs)) == PHX_OK) {
        double e = tu_max_rel(b, a);
        CHECK(e <= 1e-6, "FSDP with no_sync differs from DDP with no_sync by %.3g (relative)", e);
        if (rank == 0) printf("# largest relative difference to DDP: %.3g\n", e);
        phx_fsdp_release_full(fs);
    }
    fflush(stdout);
    phx_tensor_free(x);
    phx_tensor_free(y);
    phx_loss_free(loss);
    phx_optimizer_free(ob);
    phx_optimizer_free(oa);
    phx_module_free(fs);
    phx_module_free(ddp);
    phx_module_free(b);
    phx_module_free(a);
    phx_comm_free(c);
    return fails;
}

int main(void)
{
    plan(4);
    for (int world = 2; world <= 3; world++)
        tu_spawn_both(world, rank_fn, NULL,
                      "FSDP no_sync accumulation (%d steps of 2 micro-batches): nothing reduced under no_sync, "
                      "a step before the synced backward refused, equal to DDP's no_sync within 1e-6",
                      STEPS);
    return done_testing();
}
