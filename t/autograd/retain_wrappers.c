/* Backwards run again through a kept graph (retain_graph) reach the
 * wrappers as PyTorch's do, and the rules against a second backward of
 * one forward do not stop them:
 * - DataParallel over a Linear: two backwards through one graph both run
 *   (its replicas run on pool threads) and the gradients double;
 * - DDP with find_unused, a model whose rank-1 batch bypasses its Linear
 *   (no gradient there): the second backward all-reduces on every rank
 *   (a rank that skipped it left the other waiting at the collective);
 * - the same over a forward-only model (y = x * w), whose own graph the
 *   wrapper's backward used to free: DataParallel and DDP; and 300 fresh
 *   DataParallel models over it, one backward each, every gradient exact
 *   (both replicas' gradients used to go into one buffer at once);
 * - DDP, rank 1's loss not using the wrapper's output, each backward
 *   followed by the user's phx_ddp_finish_backward: every finish pairs
 *   with the other rank's (a finish skipped as "done" hung rank 0);
 * - DDP, rank 0 running a backward of its own before that finish: still
 *   done (a finish keyed on the thread's backwards ran on rank 0 alone);
 * - DDP without find_unused, rank 1 without gradients: its finish fails,
 *   and a second phx_ddp_finish_backward says so again instead of running
 *   the collectives on that rank alone;
 * - phx_backward through a Linear, then phx_module_backward of the same
 *   forward, and the reverse: the second refused, the gradients kept. */
#include <stdlib.h>
#include <string.h>
#include "t/tap.h"
#include "t/ddp-util.h"

/* sum of y over a kept graph, backward twice; the first bias gradient after each */
static int twice(phx_module *m, const phx_tensor *x, phx_param *bias, double *g1, double *g2)
{
    phx_scope *s = phx_scope_begin();
    phx_tensor *y = NULL;
    phx_status st = phx_module_forward(m, x, &y);
    phx_tensor *loss = st == PHX_OK ? phx_sum(y, 0, NULL, false) : NULL;
    phx_status b1 = loss ? phx_backward_retain(loss, NULL, true) : PHX_EINVAL;
    phx_tensor_get(phx_param_grad(bias), 0, g1);
    phx_status b2 = b1 == PHX_OK ? phx_backward(loss) : b1;
    phx_tensor_get(phx_param_grad(bias), 0, g2);
    if (b2 != PHX_OK) diag("%s", phx_last_error());
    phx_scope_end(s);
    return b2 == PHX_OK;
}

/* The gate: rank 0's batch goes through lin, rank 1's around it. */
typedef struct gate {
    phx_module *lin;
    int use;
    phx_tensor *buf;
} gate;

static phx_status gate_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    gate *g = phx_module_ctx(self);
    if (g->use) return phx_module_forward(g->lin, x, y);
    if (!g->buf) g->buf = phx_tensor_new(phx_tensor_dtype(x), phx_tensor_ndim(x), phx_tensor_shape(x), phx_cpu());
    *y = g->buf;
    return g->buf ? phx_tensor_copy(g->buf, x) : PHX_ENOMEM;
}

static phx_status gate_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    gate *g = phx_module_ctx(self);
    if (g->use) return phx_module_backward(g->lin, dy, dx);
    if (dx) *dx = NULL;
    return PHX_OK;
}

static void gate_free(phx_module *self)
{
    gate *g = phx_module_ctx(self);
    phx_tensor_free(g->buf);
    free(g);
}

static const phx_module_vtable gate_vt = {.struct_size = PHX_MODULE_VTABLE_SIZE,
                                          .type_name = "Gate",
                                          .forward = gate_forward,
                                          .backward = gate_backward,
                                          .free = gate_free};

/* the gate of rank: its Linear(2, 2) as child "lin", used on rank 0 only */
static phx_module *gate_new(int rank, phx_rng *rng)
{
    gate *g = calloc(1, sizeof *g);
    g->use = rank == 0;
    g->lin = phx_linear_new(2, 2, true, rng);
    phx_module *m = phx_module_new(&gate_vt, g);
    phx_module_add_child(m, "lin", g->lin);
    return m;
}

static int gate_rank(int rank, void *arg)
{
    (void)arg;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    phx_rng *rng = phx_rng_new(1);
    phx_module *m = gate_new(rank, rng);
    phx_ddp_opts o = PHX_DDP_OPTS_INIT;
    o.find_unused = true;
    phx_module *ddp = phx_ddp_new(m, c, &o);
    int64_t xs[2] = {3, 2};
    phx_tensor *x = phx_tensor_zeros(PHX_F32, 2, xs, phx_cpu());
    phx_tensor_fill(x, 1.0);
    double g1 = 0, g2 = 0;
    int good = ddp && twice(ddp, x, phx_module_param(m, 1), &g1, &g2);
    phx_ddp_stats s = PHX_DDP_STATS_INIT;
    if (good) phx_ddp_get_stats(ddp, &s);
    /* both backwards all-reduced; the bias gradient is the average of
     * rank 0's 3 rows and rank 1's none, each time: 1.5, then 3 */
    good = good && s.synced == 2 && g1 == 1.5 && g2 == 3.0;
    if (!good)
        printf("# rank %d: synced %llu, bias gradient %g then %g (want 2, 1.5, 3)\n", rank,
               (unsigned long long)s.synced, g1, g2);
    phx_tensor_free(x);
    phx_module_free(ddp), phx_module_free(m);
    phx_rng_free(rng);
    phx_comm_free(c);
    return !good;
}

/* A forward-only y = x * w (w: one row, broadcast) */
static phx_status mulw_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    *y = phx_mul(x, phx_param_value(phx_module_param(self, 0)));
    return *y ? PHX_OK : PHX_EINVAL;
}

static void no_ctx(phx_module *self)
{
    (void)self;
}

static const phx_module_vtable mulw_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE, .type_name = "MulW", .forward = mulw_forward, .free = no_ctx};

static phx_module *mulw_new(int64_t width)
{
    phx_module *m = phx_module_new(&mulw_vt, NULL);
    phx_tensor *w = phx_tensor_zeros(PHX_F32, 1, &width, phx_cpu());
    phx_tensor_fill(w, 2.0);
    phx_module_add_param(m, "w", w);
    return m;
}

/* DDP over the forward-only model: two retain_graph backwards, w's
 * gradient sum(x) = 3 per element each time, averaged: 3, then 6 */
static int fo_rank(int rank, void *arg)
{
    (void)arg;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    phx_module *m = mulw_new(2), *ddp = phx_ddp_new(m, c, NULL);
    int64_t xs[2] = {3, 2};
    phx_tensor *x = phx_tensor_zeros(PHX_F32, 2, xs, phx_cpu());
    phx_tensor_fill(x, 1.0);
    double g1 = 0, g2 = 0;
    int good = ddp && twice(ddp, x, phx_module_param(m, 0), &g1, &g2) && g1 == 3.0 && g2 == 6.0;
    if (!good) printf("# rank %d: w gradient %g then %g (want 3, 6)\n", rank, g1, g2);
    phx_tensor_free(x);
    phx_module_free(ddp), phx_module_free(m);
    phx_comm_free(c);
    return !good;
}

/* rank 1's loss uses only a leaf of its own, not the wrapper's output */
static int nonode_rank(int rank, void *arg)
{
    (void)arg;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    phx_rng *rng = phx_rng_new(1);
    phx_module *lin = phx_linear_new(2, 2, true, rng);
    phx_ddp_opts o = PHX_DDP_OPTS_INIT;
    o.find_unused = true;
    /* the bucket rebuild after the first backward runs in the wrapper's
     * backward, which rank 1 never reaches: it would have no partner */
    o.no_rebuild = true;
    phx_module *ddp = phx_ddp_new(lin, c, &o);
    int64_t xs[2] = {3, 2};
    phx_tensor *x = phx_tensor_zeros(PHX_F32, 2, xs, phx_cpu()), *y = NULL;
    phx_tensor *aux = phx_tensor_zeros(PHX_F32, 2, xs, phx_cpu());
    phx_tensor_fill(x, 1.0);
    phx_tensor_set_requires_grad(aux, true);
    phx_scope *s = phx_scope_begin();
    int good = ddp && phx_module_forward(ddp, x, &y) == PHX_OK;
    phx_tensor *loss = rank == 0 ? phx_sum(phx_add(y, aux), 0, NULL, false) : phx_sum(aux, 0, NULL, false);
    for (int k = 1; k <= 2 && good; k++) {
        phx_status st = k == 1 ? phx_backward_retain(loss, NULL, true) : phx_backward(loss);
        phx_status f = st == PHX_OK ? phx_ddp_finish_backward(ddp) : st;
        phx_ddp_stats ds = PHX_DDP_STATS_INIT;
        phx_ddp_get_stats(ddp, &ds);
        good = f == PHX_OK && ds.synced == (uint64_t)k;
        if (!good)
            printf("# rank %d: backward %d: %s, synced %llu: %s\n", rank, k, phx_status_name(f),
                   (unsigned long long)ds.synced, phx_last_error());
    }
    phx_scope_end(s);
    phx_tensor_free(x), phx_tensor_free(aux);
    phx_module_free(ddp), phx_module_free(lin);
    phx_rng_free(rng);
    phx_comm_free(c);
    return !good;
}

/* the gate without find_unused: rank 1's finish fails, and says so again */
static int refinish_rank(int rank, void *arg)
{
    (void)arg;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    phx_rng *rng = phx_rng_new(1);
    phx_module *m = gate_new(rank, rng);
    phx_module *ddp = phx_ddp_new(m, c, NULL);
    int64_t xs[2] = {3, 2};
    phx_tensor *x = phx_tensor_zeros(PHX_F32, 2, xs, phx_cpu()), *y = NULL;
    phx_tensor_fill(x, 1.0);
    phx_scope *s = phx_scope_begin();
    int good = ddp && phx_module_forward(ddp, x, &y) == PHX_OK;
    phx_tensor *loss = good ? phx_sum(y, 0, NULL, false) : NULL;
    phx_status b = loss ? phx_backward(loss) : PHX_EINVAL;
    char first[200];
    snprintf(first, sizeof first, "%s", phx_last_error());
    phx_status f = phx_ddp_finish_backward(ddp);
    if (rank == 0)
        good = good && b == PHX_OK && f == PHX_OK;
    else
        good = good && b == PHX_ESTATE && strstr(first, "received no gradient") && f == PHX_ESTATE &&
            strstr(phx_last_error(), "received no gradient");
    if (!good)
        printf("# rank %d: backward %s, finish again %s: %s\n", rank, phx_status_name(b), phx_status_name(f),
               phx_last_error());
    phx_scope_end(s);
    phx_tensor_free(x);
    phx_module_free(ddp), phx_module_free(m);
    phx_rng_free(rng);
    phx_comm_free(c);
    return !good;
}

/* rank 0 runs a backward of its own (a probe through no wrapper) between
 * phx_backward through the wrapper and phx_ddp_finish_backward: the
 * finish stays done on both ranks (a finish keyed on any backward of the
 * thread ran the all-reduces on rank 0 alone) */
static int aux_rank(int rank, void *arg)
{
    (void)arg;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    phx_module *m = mulw_new(2), *ddp = phx_ddp_new(m, c, NULL);
    int64_t xs[2] = {3, 2};
    phx_tensor *x = phx_tensor_zeros(PHX_F32, 2, xs, phx_cpu()), *y = NULL;
    phx_tensor *probe = phx_tensor_zeros(PHX_F32, 2, xs, phx_cpu());
    phx_tensor_fill(x, 1.0);
    phx_tensor_set_requires_grad(probe, true);
    phx_scope *s = phx_scope_begin();
    phx_status st = ddp ? phx_module_forward(ddp, x, &y) : PHX_ENOMEM;
    phx_tensor *loss = st == PHX_OK ? phx_sum(y, 0, NULL, false) : NULL;
    st = loss ? phx_backward(loss) : PHX_EINVAL;
    if (st == PHX_OK && rank == 0) st = phx_backward(phx_sum(probe, 0, NULL, false));
    phx_status f = st == PHX_OK ? phx_ddp_finish_backward(ddp) : st;
    phx_ddp_stats ds = PHX_DDP_STATS_INIT;
    phx_ddp_get_stats(ddp, &ds);
    int good = f == PHX_OK && ds.synced == 1;
    if (!good)
        printf("# rank %d: finish %s, synced %llu: %s\n", rank, phx_status_name(f), (unsigned long long)ds.synced,
               phx_last_error());
    phx_scope_end(s);
    phx_tensor_free(x), phx_tensor_free(probe);
    phx_module_free(ddp), phx_module_free(m);
    phx_comm_free(c);
    return !good;
}

/* rank 0 evaluates alone between phx_backward through the wrapper and
 * phx_ddp_finish_backward, with grad mode off at step 1 of 4 and in eval
 * mode with grad mode on at step 2: the finish
 * stays done on both ranks (a forward cleared it and rank 0 ran an extra
 * all-reduce: every later step paired rank 0's step k with rank 1's k+1) */
static int evalgap_rank(int rank, void *arg)
{
    (void)arg;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    phx_rng *rng = phx_rng_new(1);
    phx_module *lin = phx_linear_new(2, 2, true, rng), *ddp = phx_ddp_new(lin, c, NULL);
    int64_t xs[2] = {3, 2};
    phx_tensor *x = phx_tensor_zeros(PHX_F32, 2, xs, phx_cpu()), *y = NULL, *ye = NULL;
    phx_tensor_fill(x, rank + 1.0);
    int good = ddp != NULL;
    for (int step = 0; step < 4 && good; step++) {
        phx_module_zero_grad(ddp);
        phx_scope *s = phx_scope_begin();
        phx_status st = phx_module_forward(ddp, x, &y);
        if (st == PHX_OK) st = phx_backward(phx_sum(y, 0, NULL, false));
        if (st == PHX_OK && rank == 0 && (step == 1 || step == 2)) {
            /* step 1: grad mode off (training mode kept); step 2: eval mode with grad mode on */
            bool g = phx_set_grad_enabled(step != 1);
            if (step == 2) phx_module_train(ddp, false);
            st = phx_module_forward(ddp, x, &ye);
            phx_module_train(ddp, true);
            phx_set_grad_enabled(g);
        }
        phx_status f = st == PHX_OK ? phx_ddp_finish_backward(ddp) : st;
        /* d(sum y)/dW[0][0] = x's column sum averaged over the ranks: 3 and 6 */
        double gw = 0;
        phx_tensor_get(phx_param_grad(phx_module_find_param(lin, "weight")), 0, &gw);
        phx_ddp_stats ds = PHX_DDP_STATS_INIT;
        phx_ddp_get_stats(ddp, &ds);
        good = f == PHX_OK && gw == (3.0 + 6.0) / 2 && ds.synced == (unsigned long long)step + 1;
        if (!good)
            printf("# rank %d step %d: finish %s, synced %llu, weight grad %g (want 4.5): %s\n", rank, step,
                   phx_status_name(f), (unsigned long long)ds.synced, gw, phx_last_error());
        phx_scope_end(s);
    }
    phx_tensor_free(x);
    phx_module_free(ddp), phx_module_free(lin);
    phx_rng_free(rng);
    phx_comm_free(c);
    return !good;
}

int main(void)
{
    plan(18);
    setenv("PHX_TIMEOUT", "30", 1); /* a rank left waiting fails the test, not the suite's clock */
    phx_set_num_threads(2);
    phx_rng *rng = phx_rng_new(0);
    int64_t xs[2] = {8, 4};
    phx_tensor *x = phx_tensor_zeros(PHX_F32, 2, xs, phx_cpu());
    phx_tensor_fill(x, 0.5);

    phx_module *lin = phx_linear_new(4, 3, true, rng), *dp = phx_dp_new(lin, NULL, 0, NULL);
    double g1 = 0, g2 = 0;
    int ran = dp && twice(dp, x, phx_module_find_param(lin, "bias"), &g1, &g2);
    ok(ran && g1 == 8.0 && g2 == 16.0, "DataParallel (%zu replicas): retain_graph backwards both run (bias %g, %g)",
       dp ? phx_dp_num_replicas(dp) : 0, g1, g2);
    phx_module_free(dp), phx_module_free(lin);

    tu_spawn_both(2, gate_rank, NULL,
                  "DDP, find_unused, rank 1 without gradients: the retain_graph backward all-reduces on both ranks");

    /* DataParallel over a forward-only model: the replicas' values were the
     * model's own tensor, whose parameter pointed at the last replica, so
     * both replicas' gradients went into one buffer from two threads and
     * about one backward in 300 lost a replica's part: 300 fresh models,
     * one backward each, every gradient exact */
    phx_module *fo = mulw_new(4), *dpfo = phx_dp_new(fo, NULL, 0, NULL);
    ran = dpfo && twice(dpfo, x, phx_module_param(fo, 0), &g1, &g2);
    ok(ran && g1 == 4.0 && g2 == 8.0,
       "DataParallel over a forward-only model: retain_graph backwards both run (w %g, %g)", g1, g2);
    phx_module_free(dpfo), phx_module_free(fo);
    int exact = 0;
    for (int it = 0; it < 300; it++) {
        phx_module *f1 = mulw_new(4), *d1 = phx_dp_new(f1, NULL, 0, NULL);
        phx_scope *s1 = phx_scope_begin();
        phx_tensor *y1 = NULL;
        double gw = 0;
        if (d1 && phx_module_forward(d1, x, &y1) == PHX_OK && phx_backward(phx_sum(y1, 0, NULL, false)) == PHX_OK &&
            phx_tensor_get(phx_param_grad(phx_module_param(f1, 0)), 0, &gw) == PHX_OK && gw == 4.0)
            exact++;
        phx_scope_end(s1);
        phx_module_free(d1), phx_module_free(f1);
    }
    ok(exact == 300, "DataParallel over a forward-only model: %d of 300 fresh models' gradients exact", exact);
    /* and the model run alone beside its DataParallel still gets its own
     * gradient (its value's parameter pointed at a replica's: 0 here) */
    phx_module *f2 = mulw_new(4), *d2 = phx_dp_new(f2, NULL, 0, NULL);
    phx_scope *s2 = phx_scope_begin();
    phx_tensor *y2 = NULL;
    double alone = 0;
    if (d2 && phx_module_forward(f2, x, &y2) == PHX_OK && phx_backward(phx_sum(y2, 0, NULL, false)) == PHX_OK)
        phx_tensor_get(phx_param_grad(phx_module_param(f2, 0)), 0, &alone);
    ok(alone == 4.0, "the model alone beside its DataParallel: its own gradient (w %g)", alone);
    phx_scope_end(s2);
    phx_module_free(d2), phx_module_free(f2);
    tu_spawn_both(2, fo_rank, NULL, "DDP over a forward-only model: retain_graph backwards both run");
    tu_spawn_both(2, nonode_rank, NULL,
                  "DDP, rank 1's loss not through the wrapper, phx_ddp_finish_backward after each of two backwards: "
                  "every finish pairs up");
    tu_spawn_both(2, aux_rank, NULL,
                  "DDP, rank 0 runs a backward of its own before phx_ddp_finish_backward: the finish stays done");
    tu_spawn_both(2, refinish_rank, NULL,
                  "DDP, a finish that failed on rank 1: phx_ddp_finish_backward again says so, runs nothing");
    tu_spawn_both(2, evalgap_rank, NULL,
                  "DDP: rank 0 evaluates alone (grad off; eval mode) between phx_backward and phx_ddp_finish_backward: "
                  "4 steps in step, gradients exact");

    phx_module *l2 = phx_linear_new(4, 3, true, rng);
    phx_param *b = phx_module_find_param(l2, "bias");
    phx_scope *s = phx_scope_begin();
    phx_tensor *y = NULL;
    phx_status st = phx_module_forward(l2, x, &y);
    phx_tensor *loss = st == PHX_OK ? phx_sum(y, 0, NULL, false) : NULL;
    st = loss ? phx_backward(loss) : PHX_EINVAL;
    double before = 0, after = 0;
    phx_tensor_get(phx_param_grad(b), 0, &before);
    phx_tensor *dy = phx_tensor_zeros(PHX_F32, 2, (int64_t[]){8, 3}, phx_cpu());
    phx_tensor_fill(dy, 1.0);
    phx_status again = st == PHX_OK ? phx_module_backward(l2, dy, NULL) : st;
    phx_tensor_get(phx_param_grad(b), 0, &after);
    ok(st == PHX_OK && again == PHX_ESTATE && before == 8.0 && after == 8.0,
       "phx_backward, then phx_module_backward of the same forward: refused, the gradient kept (%g): %s", after,
       phx_last_error());
    phx_scope_end(s);
    /* the reverse order */
    s = phx_scope_begin();
    st = phx_module_forward(l2, x, &y);
    loss = st == PHX_OK ? phx_sum(y, 0, NULL, false) : NULL;
    if (st == PHX_OK) st = phx_module_backward(l2, dy, NULL);
    phx_tensor_get(phx_param_grad(b), 0, &before);
    again = st == PHX_OK && loss ? phx_backward(loss) : st;
    phx_tensor_get(phx_param_grad(b), 0, &after);
    ok(st == PHX_OK && again == PHX_ESTATE && before == 16.0 && after == 16.0,
       "phx_module_backward, then phx_backward through the same forward: refused, the gradient kept (%g): %s", after,
       phx_last_error());
    phx_scope_end(s);
    phx_tensor_free(dy);
    phx_module_free(l2);
    phx_tensor_free(x);
    phx_rng_free(rng);
    return done_testing();
}
