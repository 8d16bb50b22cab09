/* Overlap is real: the event trace of a backward shows bucket all-reduces
 * issued while the model's backward still runs (before the first layer's
 * gradient is ready, before the model's backward returns), in strict
 * bucket order, each after all of its members became ready; with
 * no_overlap the one all-reduce comes after the backward. A steady-state
 * step allocates nothing. Two ranks on threads. */
#include "t/tap.h"
#include "t/ddp-util.h"

#define STEPS 6
#define BATCH 8

static const int64_t sizes[] = {32, 64, 64, 64, 8};

typedef struct result {
    /* filled by rank 0 */
    size_t n_buckets;
    size_t first_launch, first_layer_ready, model_done, n_events;
    int launches_in_order, launch_after_members, dones_after_model;
    phx_ddp_stats stats;
    uint64_t steady_allocs;
    int ok;
} result;

static result res[2]; /* [0]: overlapped, [1]: no_overlap */

static void analyse(phx_module *ddp, result *r)
{
    phx_ddp_event ev[256];
    size_t n = phx_ddp_trace(ddp, ev, 256);
    phx_module *m = phx_ddp_model(ddp);
    size_t np = phx_module_num_params(m);
    r->n_events = n;
    r->n_buckets = phx_ddp_num_buckets(ddp);
    r->first_launch = r->first_layer_ready = r->model_done = (size_t)-1;
    r->launches_in_order = r->launch_after_members = r->dones_after_model = 1;
    size_t next_bucket = 0;
    int ready[64] = {0};
    for (size_t k = 0; k < n && k < 256; k++) {
        switch (ev[k].kind) {
        case PHX_DDP_EV_READY:
            if (ev[k].index < np && ev[k].index < 64) ready[ev[k].index] = 1;
            if (ev[k].index == 0) r->first_layer_ready = k;
            break;
        case PHX_DDP_EV_LAUNCH: {
            if (r->first_launch == (size_t)-1) r->first_launch = k;
            r->launches_in_order &= ev[k].index == next_bucket++;
            size_t idx[64], nm = phx_ddp_bucket_params(ddp, ev[k].index, idx, 64);
            for (size_t j = 0; j < nm; j++) r->launch_after_members &= ready[idx[j]];
            break;
        }
        case PHX_DDP_EV_MODEL_DONE: r->model_done = k; break;
        case PHX_DDP_EV_DONE: r->dones_after_model &= r->model_done != (size_t)-1; break;
        }
    }
    r->launches_in_order &= next_bucket == r->n_buckets;
}

static int rank_main(int rank, void *arg)
{
    int variant = *(int *)arg;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    phx_module *model = tu_mlp(sizes, 5, 3);
    /* 64 floats first, then 4 KiB: several buckets for this model. */
    phx_ddp_opts o = {.struct_size = sizeof(phx_ddp_opts),
                      .first_bucket_bytes = 256,
                      .bucket_bytes = 4096,
                      .no_overlap = variant == 1};
    phx_module *ddp = phx_ddp_new(model, c, &o);
    if (!ddp) {
        printf("# rank %d: phx_ddp_new: %s\n", rank, phx_last_error());
        return 1;
    }
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.momentum = 0.9;
    phx_optimizer *opt = phx_sgd_new(ddp, &so);
    phx_loss *loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    phx_tensor *x = tu_new2(BATCH, sizes[0]), *y = tu_new2(BATCH, sizes[4]);
    tu_batch(0, (int64_t)rank * BATCH, BATCH, x, y);
    int good = 1;
    uint64_t a0 = 0;
    for (int s = 0; s < STEPS && good; s++) {
        if (s == 3) {
            phx_comm_barrier(c, NULL);
            a0 = phx_alloc_count();
        }
        good = tu_step(ddp, opt, loss, x, y) == PHX_OK;
        if (!good) printf("# rank %d step %d: %s\n", rank, s, phx_last_error());
    }
    uint64_t a1 = phx_alloc_count();
    phx_comm_barrier(c, NULL);
    if (rank == 0 && good) {
        result *r = &res[variant];
        analyse(ddp, r);
        r->stats.struct_size = sizeof r->stats;
        phx_ddp_get_stats(ddp, &r->stats);
        r->steady_allocs = a1 - a0;
        r->ok = 1;
    }
    phx_tensor_free(x);
    phx_tensor_free(y);
    phx_loss_free(loss);
    phx_optimizer_free(opt);
    phx_module_free(ddp);
    phx_module_free(model);
    phx_comm_free(c);
    return good ? 0 : 1;
}

int main(void)
{
    plan(15);
    int variant = 0;
    phx_status st = tu_spawn("threads", 2, rank_main, &variant);
    is_int(st, PHX_OK, "two thread ranks train %d steps with 256 B / 4 KiB buckets", STEPS);
    result *r = &res[0];
    diag("%zu buckets, %zu events in the last backward: first launch #%zu, first layer's weight ready "
         "#%zu, model backward done #%zu; %llu of %llu launches early",
         r->n_buckets, r->n_events, r->first_launch, r->first_layer_ready, r->model_done,
         (unsigned long long)r->stats.early_launches, (unsigned long long)r->stats.launches);
    ok(r->ok && r->n_buckets >= 3, "several buckets (%zu)", r->n_buckets);
    ok(r->ok && r->first_launch < r->first_layer_ready,
       "a bucket's all-reduce was issued before the first layer's gradient was ready");
    ok(r->ok && r->first_launch < r->model_done, "... and before the model's backward returned");
    ok(r->ok && r->stats.early_launches >= (uint64_t)STEPS, "every step launched early (%llu early launches)",
       (unsigned long long)r->stats.early_launches);
    ok(r->ok && r->launches_in_order, "buckets were launched strictly in bucket order, each once");
    ok(r->ok && r->launch_after_members, "each bucket was launched only after all its gradients were ready");
    ok(r->ok && r->dones_after_model, "finish_backward waited for the all-reduces after the model's backward");
    is_int(r->stats.synced, STEPS, "every backward was synced");
    is_int(r->stats.rebuilds, 1, "one rebuild after the first iteration");
    is_int(r->steady_allocs, 0, "steps 4-%d allocate nothing (both ranks)", STEPS);

    variant = 1;
    st = tu_spawn("threads", 2, rank_main, &variant);
    is_int(st, PHX_OK, "no_overlap: trains");
    r = &res[1];
    is_int(r->n_buckets, 1, "no_overlap: one bucket");
    ok(r->ok && r->first_launch > r->model_done, "no_overlap: the all-reduce comes after the backward");
    is_int(r->stats.early_launches, 0, "no_overlap: no early launch");
    return done_testing();
}
