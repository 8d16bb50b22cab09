/* Unused parameters: without find_unused a backward in which a parameter
 * got no gradient fails naming it (and the ranks stay in step: nobody
 * hangs); with find_unused it counts as a zero gradient on that rank and
 * training matches one process. Two ranks on threads and on gloo. */
#include "t/tap.h"
#include "t/ddp-util.h"

#define BATCH 4

/* y = x * w (w one scalar) when use_w, else y = x; parameter "unused" (3)
 * never receives a gradient. */
typedef struct gate {
    bool use_w;
    const phx_tensor *x; /* input of the last forward */
    phx_tensor *y, *dx;
} gate;

static float scalar(const phx_tensor *t)
{
    double v = 0;
    phx_tensor_get(t, 0, &v);
    return (float)v;
}

static phx_status gate_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    gate *g = phx_module_ctx(self);
    int64_t n = phx_tensor_numel(x);
    if (!g->y) {
        g->y = phx_tensor_new(PHX_F32, phx_tensor_ndim(x), phx_tensor_shape(x), phx_cpu());
        g->dx = phx_tensor_new(PHX_F32, phx_tensor_ndim(x), phx_tensor_shape(x), phx_cpu());
    }
    float w = g->use_w ? scalar(phx_param_value(phx_module_param(self, 0))) : 1.0f;
    const float *px = phx_tensor_data(x);
    float *py = phx_tensor_data(g->y);
    for (int64_t i = 0; i < n; i++) py[i] = px[i] * w;
    g->x = x;
    *y = g->y;
    return PHX_OK;
}

static phx_status gate_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    gate *g = phx_module_ctx(self);
    int64_t n = phx_tensor_numel(dy);
    const float *pdy = phx_tensor_data(dy), *px = phx_tensor_data(g->x);
    float *pdx = phx_tensor_data(g->dx);
    phx_param *w = phx_module_param(self, 0);
    float wv = g->use_w ? scalar(phx_param_value(w)) : 1.0f;
    if (g->use_w) {
        double dw = 0;
        for (int64_t i = 0; i < n; i++) dw += (double)pdy[i] * px[i];
        float *gw = phx_tensor_data(phx_param_grad(w));
        gw[0] += (float)dw;
        phx_param_grad_ready(w);
    }
    for (int64_t i = 0; i < n; i++) pdx[i] = pdy[i] * wv;
    if (dx) *dx = g->dx;
    return PHX_OK;
}

static void gate_free(phx_module *self)
{
    gate *g = phx_module_ctx(self);
    phx_tensor_free(g->y);
    phx_tensor_free(g->dx);
    free(g);
}

static const phx_module_vtable gate_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "Gate",
    .forward = gate_forward,
    .backward = gate_backward,
    .free = gate_free,
    .set_train = NULL,
    .clone = NULL,
};

/* Sequential(Linear(4, 4), Gate): "0.weight", "0.bias", "1.w" and, with
 * with_unused, "1.unused". */
static phx_module *net(bool use_w, bool with_unused)
{
    static const int64_t sizes[] = {4, 4};
    phx_module *m = tu_mlp(sizes, 2, 11);
    gate *g = calloc(1, sizeof *g);
    g->use_w = use_w;
    phx_module *gm = phx_module_new(&gate_vt, g);
    int64_t one = 1, three = 3;
    phx_tensor *w = phx_tensor_from_data(PHX_F32, 1, &one, &(float){1.5f});
    phx_module_add_param(gm, "w", w);
    if (with_unused) phx_module_add_param(gm, "unused", phx_tensor_zeros(PHX_F32, 1, &three, phx_cpu()));
    phx_sequential_add(m, gm);
    return m;
}

static int expect_error(int rank, phx_status st, const char *name)
{
    if (st != PHX_ESTATE || !strstr(phx_last_error(), name) || !strstr(phx_last_error(), "find_unused")) {
        printf("# rank %d: expected PHX_ESTATE naming %s, got %s: %s\n", rank, name, phx_status_name(st),
               phx_last_error());
        return 1;
    }
    if (rank == 0) printf("# %s\n", phx_last_error());
    return 0;
}

static int rank_main(int rank, void *arg)
{
    (void)arg;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    int world = phx_comm_size(c), bad = 0;
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.lr = 0.05;
    phx_loss *loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    phx_tensor *x = tu_new2(BATCH, 4), *y = tu_new2(BATCH, 4);
    phx_tensor *gx = tu_new2((int64_t)BATCH * world, 4), *gy = tu_new2((int64_t)BATCH * world, 4);
    phx_status st;

    /* 1. Unused everywhere, find_unused off: an error naming it, twice
     * (the second proves the ranks stayed in step). */
    phx_module *m = net(true, true);
    phx_module *ddp = phx_ddp_new(m, c, NULL);
    phx_optimizer *opt = phx_sgd_new(ddp, &so);
    for (int s = 0; s < 2; s++) {
        tu_batch(s, (int64_t)rank * BATCH, BATCH, x, y);
        st = tu_step(ddp, opt, loss, x, y);
        bad += expect_error(rank, st, "'1.unused'");
    }
    phx_optimizer_free(opt);
    phx_module_free(ddp);
    phx_module_free(m);

    /* 2. find_unused: training matches one process; "unused" stays put. */
    m = net(true, true);
    phx_module *ref = net(true, true);
    phx_ddp_opts o = {.struct_size = sizeof(phx_ddp_opts), .find_unused = true};
    ddp = phx_ddp_new(m, c, &o);
    opt = phx_sgd_new(ddp, &so);
    phx_optimizer *ropt = phx_sgd_new(ref, &so);
    tu_side d = {ddp, opt, loss, x, y}, r = {ref, ropt, loss, gx, gy};
    for (int s = 0; s < 5 && !bad; s++) {
        if (tu_step_both(s, rank, &d, &r) != PHX_OK) {
            printf("# rank %d: find_unused step %d: %s\n", rank, s, phx_last_error());
            bad++;
        }
    }
    double e = tu_max_rel(ddp, ref);
    if (!(e <= 1e-6)) {
        printf("# rank %d: find_unused: relative difference to one process %.3g\n", rank, e);
        bad++;
    }
    double u;
    phx_tensor_get(phx_param_value(phx_module_find_param(m, "1.unused")), 0, &u);
    if (u != 0) {
        printf("# rank %d: the unused parameter moved to %g\n", rank, u);
        bad++;
    }
    phx_optimizer_free(opt);
    phx_optimizer_free(ropt);
    phx_module_free(ddp);
    phx_module_free(m);
    phx_module_free(ref);

    /* 3. w unused on the last rank only. Without find_unused that rank
     * fails naming '1.w' and the others go on; with it, w's gradient
     * counts as zero there and all ranks agree bit for bit. */
    bool last = rank == world - 1;
    for (int fu = 0; fu <= 1 && world > 1; fu++) {
        m = net(!last, false);
        o.find_unused = fu;
        ddp = phx_ddp_new(m, c, &o);
        opt = phx_sgd_new(ddp, &so);
        tu_batch(7, (int64_t)rank * BATCH, BATCH, x, y);
        st = tu_step(ddp, opt, loss, x, y);
        int good = st == PHX_OK;
        if (!fu && last)
            bad += expect_error(rank, st, "'1.w'");
        else if (!good) {
            printf("# rank %d: w unused on rank %d, find_unused %d: %s\n", rank, world - 1, fu, phx_last_error());
            bad++;
        }
        if (fu && !tu_same_bits_across(c, ddp)) {
            printf("# rank %d: parameters differ across ranks with a rank-local unused parameter\n", rank);
            bad++;
        }
        phx_optimizer_free(opt);
        phx_module_free(ddp);
        phx_module_free(m);
    }
    phx_tensor_free(x);
    phx_tensor_free(y);
    phx_tensor_free(gx);
    phx_tensor_free(gy);
    phx_loss_free(loss);
    phx_comm_free(c);
    return bad ? 1 : 0;
}

int main(void)
{
    plan(2);
    tu_spawn_both(2, rank_main, NULL, "unused parameter named without find_unused, zero with it");
    return done_testing();
}
