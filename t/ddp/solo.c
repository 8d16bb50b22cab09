/* A world of one, as PyTorch's: a NULL communicator is rank 0 of 1 whose
 * collectives keep or copy their input; phx_ddp_new and
 * phx_sync_batchnorm_convert accept it (and a size-1 communicator), and a
 * BatchNorm CNN trained through them equals the bare model bit for bit. */
#include "t/ddp-util.h"

enum { STEPS = 3, ROWS = 6 };

/* Trains m (through net) for STEPS SGD steps. */
static phx_status train(phx_module *net)
{
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.lr = 0.1;
    so.momentum = 0.9;
    phx_optimizer *opt = phx_sgd_new(net, &so);
    phx_loss *loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    phx_status st = opt && loss ? PHX_OK : PHX_ENOMEM;
    for (int s = 0; s < STEPS && st == PHX_OK; s++) {
        phx_tensor *x, *t;
        tu_cnn_batch(s, 0, ROWS, &x, &t);
        st = tu_step(net, opt, loss, x, t);
        phx_tensor_free(x), phx_tensor_free(t);
    }
    phx_optimizer_free(opt);
    phx_loss_free(loss);
    return st;
}

/* Parameters and buffers of a and b bitwise equal. */
static int same_state(phx_module *a, phx_module *b)
{
    if (tu_max_rel(a, b) != 0.0) return 0;
    if (phx_module_num_buffers(a) != phx_module_num_buffers(b)) return 0;
    for (size_t i = 0; i < phx_module_num_buffers(a); i++) {
        phx_tensor *x = phx_module_buffer(a, i), *y = phx_module_buffer(b, i);
        size_t n = phx_tensor_nbytes(x);
        char *hx = malloc(n), *hy = malloc(n);
        phx_tensor_to_host(x, hx);
        phx_tensor_to_host(y, hy);
        int same = n == phx_tensor_nbytes(y) && memcmp(hx, hy, n) == 0;
        free(hx), free(hy);
        if (!same) return 0;
    }
    return 1;
}

static void test_null_comm(void)
{
    is_int(phx_comm_rank(NULL), 0, "a NULL communicator is rank 0");
    is_int(phx_comm_size(NULL), 1, "... of a world of 1");
    is_str(phx_comm_backend(NULL), "none", "... with backend \"none\"");
    float v[4] = {1, -2, 3.5f, 7}, out[4] = {0};
    int64_t four = 4, eight = 8;
    phx_tensor *t = phx_tensor_from_data(PHX_F32, 1, &four, v), *o = phx_tensor_zeros(PHX_F32, 1, &four, phx_cpu());
    phx_tensor *big = phx_tensor_zeros(PHX_F32, 1, &eight, phx_cpu());
    phx_work *w = (phx_work *)&w;
    int kept = 1;
    for (int op = PHX_SUM; op <= PHX_MIN; op++) {
        kept &= phx_comm_allreduce(NULL, t, (phx_reduce_op)op, NULL) == PHX_OK;
        phx_tensor_to_host(t, out);
        kept &= memcmp(out, v, sizeof v) == 0;
    }
    ok(kept, "allreduce (sum, avg, max, min) keeps the tensor");
    is_int(phx_comm_allreduce(NULL, t, PHX_SUM, &w), PHX_OK, "an async allreduce");
    ok(w == NULL, "... gives a NULL work");
    is_int(phx_work_wait(w, -1), PHX_OK, "... which waits as complete");
    ok(phx_work_test(w) == 1, "... and tests complete");
    phx_work_free(w);
    is_int(phx_comm_broadcast(NULL, t, 0, NULL), PHX_OK, "broadcast from rank 0");
    phx_tensor_to_host(t, out);
    ok(memcmp(out, v, sizeof v) == 0, "... keeps the tensor");
    is_int(phx_comm_broadcast(NULL, t, 1, NULL), PHX_EINVAL, "broadcast from rank 1 of a world of 1");
    like(phx_last_error(), "root 1 is not a rank of this world of 1", "... says so");
    is_int(phx_comm_allgather(NULL, t, o, NULL), PHX_OK, "allgather");
    phx_tensor_to_host(o, out);
    ok(memcmp(out, v, sizeof v) == 0, "... copies the input");
    is_int(phx_comm_allgather(NULL, t, big, NULL), PHX_EINVAL, "allgather into 8 elements from 4");
    like(phx_last_error(), "expected 1 x 4 = 4", "... names the sizes");
    phx_tensor_fill(o, 0.0);
    is_int(phx_comm_reduce_scatter(NULL, t, o, PHX_AVG, NULL), PHX_OK, "reduce_scatter");
    phx_tensor_to_host(o, out);
    ok(memcmp(out, v, sizeof v) == 0, "... copies the input");
    is_int(phx_comm_barrier(NULL, NULL), PHX_OK, "barrier");
    is_int(phx_comm_allreduce(NULL, NULL, PHX_SUM, NULL), PHX_EINVAL, "a NULL tensor is still an error");
    phx_tensor_free(t), phx_tensor_free(o), phx_tensor_free(big);
}

/* DDP and SyncBatchNorm on comm (NULL or size 1) train as the bare model. */
static int solo_equals_bare(phx_comm *c, const char *what)
{
    int fails = 0;
    phx_module *model = tu_small_cnn(), *ref = tu_small_cnn();
    size_t n = 99;
    phx_status st = phx_sync_batchnorm_convert(model, c, &n);
    if (st != PHX_OK || n != 1) {
        printf("# %s: phx_sync_batchnorm_convert: %s, %zu converted: %s\n", what, phx_status_name(st), n,
               phx_last_error());
        fails++;
    }
    if (strcmp(phx_module_type(phx_module_child(model, 1)), "SyncBatchNorm") != 0) {
        printf("# %s: the BatchNorm is a %s\n", what, phx_module_type(phx_module_child(model, 1)));
        fails++;
    }
    phx_module *ddp = phx_ddp_new(model, c, NULL);
    if (!ddp) {
        printf("# %s: phx_ddp_new: %s\n", what, phx_last_error());
        phx_module_free(model), phx_module_free(ref);
        return fails + 1;
    }
    st = train(ddp);
    if (st == PHX_OK) st = train(ref);
    if (st != PHX_OK) {
        printf("# %s: training: %s\n", what, phx_last_error());
        fails++;
    } else if (!same_state(model, ref)) {
        printf("# %s: parameters or buffers differ from the bare model's (%.3g)\n", what, tu_max_rel(model, ref));
        fails++;
    }
    phx_ddp_stats s = PHX_DDP_STATS_INIT;
    phx_ddp_get_stats(ddp, &s);
    if (s.backwards != STEPS) {
        printf("# %s: the wrapper saw %llu backwards, expected %d\n", what, (unsigned long long)s.backwards, STEPS);
        fails++;
    }
    /* no_sync and a join work alone too */
    if (phx_ddp_set_no_sync(ddp, true) != PHX_OK || phx_ddp_set_no_sync(ddp, false) != PHX_OK ||
        phx_ddp_join_begin(ddp, true) != PHX_OK || train(ddp) != PHX_OK || phx_ddp_join_end(ddp) != PHX_OK) {
        printf("# %s: no_sync / join: %s\n", what, phx_last_error());
        fails++;
    }
    phx_module_free(ddp), phx_module_free(model), phx_module_free(ref);
    return fails;
}

/* phx_backward from the wrapper's output finishes the backward; a
 * phx_ddp_finish_backward after it does nothing (it used to report every
 * parameter as having received no gradient), and after the next forward
 * it finishes again. */
static void test_finish_after_phx_backward(void)
{
    static const int64_t sizes[] = {4, 6, 2};
    phx_module *model = tu_mlp(sizes, 3, 7), *ddp = phx_ddp_new(model, NULL, NULL);
    phx_tensor *x = tu_new2(3, 4), *t = tu_new2(3, 2), *y = NULL;
    phx_tensor_fill(x, 1.0), phx_tensor_fill(t, 2.0);
    phx_status st = ddp ? phx_module_forward(ddp, x, &y) : PHX_ENOMEM;
    phx_tensor *loss = st == PHX_OK ? phx_mse_loss(y, t) : NULL;
    st = loss ? phx_backward(loss) : PHX_EINVAL;
    phx_ddp_stats a = PHX_DDP_STATS_INIT, b = PHX_DDP_STATS_INIT;
    float g1[64], g2[64];
    phx_tensor *gw = phx_param_grad(phx_module_param(model, 0));
    if (st == PHX_OK) st = phx_ddp_get_stats(ddp, &a);
    if (st == PHX_OK) st = phx_tensor_to_host(gw, g1);
    phx_status again = st == PHX_OK ? phx_ddp_finish_backward(ddp) : st;
    phx_ddp_get_stats(ddp, &b);
    phx_tensor_to_host(gw, g2);
    ok(st == PHX_OK && again == PHX_OK && a.synced == 1 && b.synced == 1 && b.backwards == a.backwards &&
           !memcmp(g1, g2, (size_t)phx_tensor_numel(gw) * sizeof *g1),
       "phx_ddp_finish_backward after phx_backward: PHX_OK, nothing all-reduced again (%s)",
       again ? phx_last_error() : "ok");
    /* the next step: a forward, the model's own backward, then finish */
    st = phx_module_forward(ddp, x, &y);
    if (st == PHX_OK) st = phx_module_backward(model, y, NULL); /* dy: any tensor of y's shape */
    phx_status fin = st == PHX_OK ? phx_ddp_finish_backward(ddp) : st;
    phx_ddp_get_stats(ddp, &b);
    ok(fin == PHX_OK && b.synced == 2, "after the next forward it finishes again (synced %llu)",
       (unsigned long long)b.synced);
    phx_tensor_free(loss), phx_tensor_free(x), phx_tensor_free(t);
    phx_module_free(ddp), phx_module_free(model);
}

static int size1_rank(int rank, void *arg)
{
    (void)arg;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    int fails = phx_comm_size(c) == 1 ? solo_equals_bare(c, "a size-1 communicator") : 1;
    phx_comm_free(c);
    fflush(stdout);
    return fails;
}

int main(void)
{
    plan(25);
    test_null_comm();
    test_finish_after_phx_backward();
    fflush(stdout);
    ok(solo_equals_bare(NULL, "comm NULL") == 0,
       "comm NULL: SyncBatchNorm convert (1 converted) + DDP train a BatchNorm CNN as the bare model, bit for bit");
    tu_spawn_both(1, size1_rank, NULL, "a size-1 communicator: the same");
    return done_testing();
}
