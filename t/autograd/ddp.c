/* DDP over a forward-only model: N ranks (1..3, threads backend and gloo
 * processes) training a forward-only MLP (the core derives its backward
 * from the children's nodes) end, after 12 SGD-momentum steps, with the
 * parameters of one process training the same layers as a Sequential
 * (hand-written backward) on the concatenated batch (1e-6 relative), and
 * every rank's parameters bitwise equal after every step. A forward-only
 * model that skips a layer on some steps trains with find_unused. */
#include "t/tap.h"
#include "t/ddp-util.h"

#define STEPS 12
#define BATCH 5 /* per rank */

static const int64_t sizes[] = {10, 16, 16, 3};

typedef struct fo_mlp {
    size_t n;
    int skip_every; /* > 0: skip the middle block on steps % skip_every == 1 */
    int calls;
} fo_mlp;

static phx_status fo_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    fo_mlp *f = phx_module_ctx(self);
    const phx_tensor *h = x;
    bool skip = f->skip_every && f->calls++ % f->skip_every == 1;
    for (size_t i = 0; i < phx_module_num_children(self); i++) {
        if (skip && (i == 1 || i == 2)) continue; /* Tanh + the middle Linear (16 -> 16) */
        phx_tensor *o = NULL;
        phx_status st = phx_module_forward(phx_module_child(self, i), h, &o);
        if (st) return st;
        h = o;
    }
    *y = (phx_tensor *)h;
    return PHX_OK;
}

static void fo_free(phx_module *self)
{
    free(phx_module_ctx(self));
}

static const phx_module_vtable fo_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE, .type_name = "ForwardOnlyMLP", .forward = fo_forward, .free = fo_free};

/* tu_mlp's layers (same names, order and initial values) under a
 * forward-only parent. */
static phx_module *fo_new(uint64_t seed, int skip_every)
{
    phx_module *seq = tu_mlp(sizes, 4, seed);
    fo_mlp *f = calloc(1, sizeof *f);
    f->skip_every = skip_every;
    phx_module *m = phx_module_new(&fo_vt, f);
    char name[24];
    for (size_t i = 0; i < phx_module_num_children(seq); i++) {
        phx_module *c = phx_module_clone(phx_module_child(seq, i));
        snprintf(name, sizeof name, "%zu", i);
        phx_module_add_child(m, name, c);
    }
    phx_module_free(seq);
    return m;
}

static phx_optimizer *sgd(phx_module *m)
{
    phx_sgd_opts o = PHX_SGD_OPTS_INIT;
    o.lr = 0.05;
    o.momentum = 0.9;
    return phx_sgd_new(m, &o);
}

static int rank_main(int rank, void *arg)
{
    int skip = arg ? *(int *)arg : 0;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    int world = phx_comm_size(c), fails = 0;
    /* Ranks start from different weights: the broadcast must fix that. */
    phx_module *model = fo_new(2000 + (uint64_t)rank, skip);
    phx_module *ref = skip ? fo_new(2000, skip) : tu_mlp(sizes, 4, 2000);
    phx_ddp_opts o = PHX_DDP_OPTS_INIT;
    o.find_unused = skip != 0;
    phx_module *ddp = phx_ddp_new(model, c, &o);
    if (!ddp) {
        printf("# rank %d: phx_ddp_new: %s\n", rank, phx_last_error());
        return 1;
    }
    tu_side d = {ddp, sgd(ddp), phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN), tu_new2(BATCH, sizes[0]),
                 tu_new2(BATCH, sizes[3])};
    tu_side r = {ref, sgd(ref), phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN), tu_new2((int64_t)BATCH * world, sizes[0]),
                 tu_new2((int64_t)BATCH * world, sizes[3])};
    for (int s = 0; s < STEPS && !fails; s++) {
        if (tu_step_both(s, rank, &d, &r) != PHX_OK) {
            printf("# rank %d: step %d: %s\n", rank, s, phx_last_error());
            fails++;
        } else if (!tu_same_bits_across(c, ddp)) {
            printf("# rank %d: parameters differ across ranks after step %d\n", rank, s);
            fails++;
        }
    }
    double e = tu_max_rel(ddp, ref);
    if (!fails && !(e <= 1e-6)) {
        printf("# rank %d of %d: max relative difference to one process on the whole batch %.3g (> 1e-6)\n", rank,
               world, e);
        fails++;
    } else if (!fails && rank == 0)
        printf("# world %d%s: max relative difference %.3g\n", world, skip ? " (find_unused)" : "", e);
    fflush(stdout);
    tu_side_free(&d);
    tu_side_free(&r);
    phx_module_free(model);
    phx_comm_free(c);
    return fails ? 1 : 0;
}

int main(void)
{
    plan(8);
    for (int n = 1; n <= 3; n++)
        tu_spawn_both(n, rank_main, NULL,
                      "DDP of a forward-only MLP equals one process's Sequential on the %d-row batch, ranks "
                      "bitwise equal",
                      n * BATCH);
    int skip = 3;
    tu_spawn_both(2, rank_main, &skip, "a forward-only model skipping a layer every 3rd step trains with find_unused");
    return done_testing();
}
