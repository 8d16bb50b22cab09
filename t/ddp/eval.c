/* DDP with buffers (a BatchNorm CNN) on 2 ranks, threads and gloo:
 *  - each rank's forward updates its own running statistics (the ranks'
 *    buffers differ between forward and backward); at the end of every
 *    step each rank holds rank 0's, bit for bit;
 *  - then only rank 0 evaluates through the wrapper, in eval mode and in
 *    training mode without a backward: no collective, so it finishes in
 *    well under PHX_TIMEOUT (set to 30 s here) while rank 1 waits in a
 *    barrier;
 *  - rank 1 then evaluates the same batch through its wrapper and gets
 *    rank 0's output bit for bit (the same buffers);
 *  - training goes on afterwards with the ranks' collectives in step. */
#include <time.h>
#include "t/ddp-util.h"

enum { PER_RANK = 4, STEPS = 3 };

/* 1 when t equals rank 0's t bit for bit on every rank (collective). */
static int same_as_rank0(phx_comm *c, const phx_tensor *t)
{
    phx_tensor *z = phx_tensor_new(phx_tensor_dtype(t), phx_tensor_ndim(t), phx_tensor_shape(t), phx_cpu());
    phx_tensor_copy(z, t);
    phx_comm_broadcast(c, z, 0, NULL);
    size_t nb = phx_tensor_nbytes(t);
    char *h0 = malloc(nb), *h1 = malloc(nb);
    phx_tensor_to_host(z, h0);
    phx_tensor_to_host(t, h1);
    int same = memcmp(h0, h1, nb) == 0;
    free(h0), free(h1);
    phx_tensor_free(z);
    int64_t one = 1;
    phx_tensor *f = phx_tensor_new(PHX_F32, 1, &one, phx_cpu());
    phx_tensor_fill(f, same ? 0.0 : 1.0);
    phx_comm_allreduce(c, f, PHX_SUM, NULL);
    double bad = 1;
    phx_tensor_get(f, 0, &bad);
    phx_tensor_free(f);
    return bad == 0;
}

static int buffers_same(phx_comm *c, phx_module *m)
{
    int same = 1;
    for (size_t i = 0; i < phx_module_num_buffers(m); i++) same &= same_as_rank0(c, phx_module_buffer(m, i));
    return same;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define FAIL(...) \
    do { \
        printf("# rank %d: ", rank); \
        printf(__VA_ARGS__); \
        printf("\n"); \
        fails++; \
    } while (0)

static int eval_rank(int rank, void *arg)
{
    (void)arg;
    int fails = 0;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    phx_module *model = tu_small_cnn();
    phx_module *ddp = phx_ddp_new(model, c, NULL);
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.lr = 0.1;
    phx_optimizer *opt = ddp ? phx_sgd_new(ddp, &so) : NULL;
    phx_loss *loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    if (!ddp || !opt || !loss) {
        printf("# rank %d: setup: %s\n", rank, phx_last_error());
        return 1;
    }
    if (!buffers_same(c, model)) FAIL("buffers differ right after phx_ddp_new");
    for (int s = 0; s < STEPS; s++) {
        phx_tensor *x, *t, *out;
        float l;
        tu_cnn_batch(s, rank * PER_RANK, PER_RANK, &x, &t);
        phx_status st = phx_module_forward(ddp, x, &out);
        /* Each rank's batch moved its own statistics. */
        if (st == PHX_OK && buffers_same(c, model)) FAIL("step %d: buffers equal after the forward already", s);
        if (st == PHX_OK) st = phx_loss_forward(loss, out, t, &l);
        if (st == PHX_OK) st = phx_module_backward(ddp, phx_loss_grad(loss), NULL);
        if (st == PHX_OK) st = phx_optimizer_step(opt);
        if (st == PHX_OK) st = phx_optimizer_zero_grad(opt);
        if (st != PHX_OK)
            FAIL("step %d: %s", s, phx_last_error());
        else if (!buffers_same(c, model))
            FAIL("step %d: buffers differ from rank 0's after the step", s);
        phx_tensor_free(x), phx_tensor_free(t);
    }
    if (fails) return fails;

    /* Rank 0 alone: eval mode, then a training-mode forward without a
     * backward. Rank 1 meanwhile waits in a barrier. */
    phx_tensor *ex, *et, *y;
    tu_cnn_batch(99, 0, 6, &ex, &et);
    int64_t ys[2] = {6, 5};
    phx_tensor *y0 = phx_tensor_new(PHX_F32, 2, ys, phx_cpu());
    phx_module_train(ddp, false);
    if (rank == 0) {
        double t0 = now();
        phx_status st = phx_module_forward(ddp, ex, &y);
        if (st == PHX_OK) st = phx_tensor_copy(y0, y);
        for (int k = 0; k < 3 && st == PHX_OK; k++) st = phx_module_forward(ddp, ex, &y);
        double t_eval = now() - t0;
        phx_module_train(ddp, true);
        t0 = now();
        if (st == PHX_OK) st = phx_module_forward(ddp, ex, &y);
        double t_train = now() - t0;
        phx_module_train(ddp, false);
        if (st != PHX_OK)
            FAIL("rank 0 alone: forward through the wrapper: %s", phx_last_error());
        else if (t_eval > 5.0 || t_train > 5.0)
            FAIL("rank 0 alone: 4 eval forwards took %.3g s, a training forward %.3g s (PHX_TIMEOUT 30 s)", t_eval,
                 t_train);
        else
            printf("# rank 0 alone: 4 eval forwards %.3g s, a training-mode forward %.3g s\n", t_eval, t_train);
    }
    if (phx_comm_barrier(c, NULL) != PHX_OK) FAIL("barrier after rank 0's evaluation: %s", phx_last_error());
    if (fails) return fails;

    /* Rank 1 evaluates the same batch: rank 0's buffers, rank 0's output.
     * (Rank 0's training-mode forward moved its own statistics; its eval
     * output y0 came before that.) */
    phx_tensor *y1 = phx_tensor_new(PHX_F32, 2, ys, phx_cpu());
    phx_status st = PHX_OK;
    if (rank != 0) {
        st = phx_module_forward(ddp, ex, &y);
        if (st == PHX_OK) st = phx_tensor_copy(y1, y);
    } else {
        st = phx_tensor_copy(y1, y0);
    }
    if (st != PHX_OK) FAIL("rank %d's evaluation: %s", rank, phx_last_error());
    if (!same_as_rank0(c, y1)) FAIL("the eval outputs differ from rank 0's");

    /* Training goes on in step; the step's end evens out rank 0's extra
     * training-mode forward. */
    phx_module_train(ddp, true);
    phx_tensor *x, *t;
    tu_cnn_batch(STEPS, rank * PER_RANK, PER_RANK, &x, &t);
    st = tu_step(ddp, opt, loss, x, t);
    if (st != PHX_OK)
        FAIL("a step after the evaluation: %s", phx_last_error());
    else if (!buffers_same(c, model))
        FAIL("buffers differ after the step that followed the evaluation");
    else if (!tu_same_bits_across(c, model))
        FAIL("parameters differ across ranks");
    phx_tensor_free(x), phx_tensor_free(t);
    phx_tensor_free(ex), phx_tensor_free(et), phx_tensor_free(y0), phx_tensor_free(y1);
    phx_loss_free(loss);
    phx_optimizer_free(opt);
    phx_module_free(ddp), phx_module_free(model);
    phx_comm_free(c);
    fflush(stdout);
    return fails;
}

/* A join with buffers: rank 0 has 3 batches, rank 1 has 2. Rank 1's
 * joined state takes no part in step-end broadcasts, so none happens
 * inside the join; at the end every rank holds the buffers (and the
 * parameters) of rank 0, the rank that joined last. */
static int join_rank(int rank, void *arg)
{
    (void)arg;
    int fails = 0;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    phx_module *model = tu_small_cnn();
    phx_module *ddp = phx_ddp_new(model, c, NULL);
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.lr = 0.1;
    phx_optimizer *opt = ddp ? phx_sgd_new(ddp, &so) : NULL;
    phx_loss *loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    phx_status st = ddp && opt && loss ? phx_ddp_join_begin(ddp, true) : PHX_ENOMEM;
    int steps = rank == 0 ? 3 : 2;
    for (int s = 0; s < steps && st == PHX_OK; s++) {
        phx_tensor *x, *t;
        tu_cnn_batch(s, rank * PER_RANK, PER_RANK, &x, &t);
        st = tu_step(ddp, opt, loss, x, t);
        phx_tensor_free(x), phx_tensor_free(t);
    }
    /* rank 0's buffers just before the end: what every rank must hold */
    size_t nb = phx_module_num_buffers(model);
    phx_tensor *mine[8] = {0};
    for (size_t i = 0; i < nb && i < 8; i++) {
        phx_tensor *b = phx_module_buffer(model, i);
        mine[i] = phx_tensor_new(phx_tensor_dtype(b), phx_tensor_ndim(b), phx_tensor_shape(b), phx_cpu());
        phx_tensor_copy(mine[i], b);
    }
    if (st == PHX_OK) st = phx_ddp_join_end(ddp);
    if (st != PHX_OK) {
        FAIL("join: %s", phx_last_error());
    } else {
        if (!buffers_same(c, model)) FAIL("after the join the buffers differ from rank 0's");
        if (!tu_same_bits_across(c, model)) FAIL("after the join the parameters differ");
        int kept = 1; /* rank 0, the last to join, kept its own */
        for (size_t i = 0; rank == 0 && i < nb && i < 8; i++) {
            size_t n = phx_tensor_nbytes(mine[i]);
            char *a = malloc(n), *b = malloc(n);
            phx_tensor_to_host(mine[i], a);
            phx_tensor_to_host(phx_module_buffer(model, i), b);
            kept &= memcmp(a, b, n) == 0;
            free(a), free(b);
        }
        if (!kept) FAIL("rank 0 (the last to join) did not keep its buffers");
    }
    for (size_t i = 0; i < 8; i++) phx_tensor_free(mine[i]);
    phx_loss_free(loss);
    phx_optimizer_free(opt);
    phx_module_free(ddp), phx_module_free(model);
    phx_comm_free(c);
    fflush(stdout);
    return fails;
}

int main(void)
{
    plan(4);
    setenv("PHX_TIMEOUT", "30", 1);
    tu_spawn_both(2, eval_rank, NULL,
                  "a BatchNorm CNN under DDP: buffers equal rank 0's after each step; rank 0 evaluates alone "
                  "through the wrapper in well under PHX_TIMEOUT; rank 1's evaluation equals it");
    tu_spawn_both(2, join_rank, NULL,
                  "a join with a BatchNorm CNN (3 and 2 batches): no hang; every rank ends with the buffers and "
                  "parameters of the rank that joined last");
    return done_testing();
}
