/* ZeRO API: bad input refused without change, a world of one (NULL comm)
 * equal to the plain optimizer bitwise, the shard's pieces covering the
 * model, no allocation in a steady-state step, consolidation and
 * reloading the state through a checkpoint. */
#include <unistd.h>
#include "t/tap.h"
#include "t/ddp-util.h"

static const int64_t sizes[] = {5, 9, 3};

static phx_optimizer *make_null(phx_module *m, void *arg)
{
    (void)m, (void)arg;
    phx_error(PHX_EINVAL, "test: no optimizer");
    return NULL;
}

/* max |a - b| over two f32 tensors; INFINITY when the sizes differ. */
static double max_diff(const phx_tensor *a, const phx_tensor *b)
{
    int64_t n = phx_tensor_numel(a);
    if (n != phx_tensor_numel(b)) return INFINITY;
    float *ha = malloc((size_t)(n ? n : 1) * sizeof *ha), *hb = malloc((size_t)(n ? n : 1) * sizeof *hb);
    double e = 0;
    if (phx_tensor_to_host(a, ha) != PHX_OK || phx_tensor_to_host(b, hb) != PHX_OK) e = INFINITY;
    for (int64_t i = 0; i < n && e != INFINITY; i++) e = fmax(e, fabs((double)ha[i] - hb[i]));
    free(ha);
    free(hb);
    return e;
}

static phx_status train(phx_module *m, phx_optimizer *o, int steps, int first)
{
    phx_loss *loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    phx_tensor *x = tu_new2(4, sizes[0]), *y = tu_new2(4, sizes[2]);
    phx_status st = PHX_OK;
    for (int s = first; s < first + steps && st == PHX_OK; s++) {
        tu_batch(s, 0, 4, x, y);
        st = tu_step(m, o, loss, x, y);
    }
    phx_tensor_free(x);
    phx_tensor_free(y);
    phx_loss_free(loss);
    return st;
}

/* ZeRO-2 on 2 thread ranks: hybrid groups whose sizes do not multiply
 * to the world are refused, leaving the wrapper as it was; a join is
 * refused while it reduce-scatters; after the optimizer is freed the
 * wrapper all-reduces again (every rank's gradients equal). */
static int zero2_rank(int rank, void *arg)
{
    (void)arg;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    int fails = 0;
    phx_module *m = tu_mlp(sizes, 3, 7);
    phx_module *ddp = phx_ddp_new(m, c, NULL);
    phx_zero_opts zo = PHX_ZERO_OPTS_INIT;
    zo.stage = 2;
    phx_zero_opts hy = zo;
    hy.shard_comm = c;
    hy.replicate_comm = c; /* 2 x 2 is not the world of 2 */
    if (!ddp || phx_zero_optimizer_new(ddp, c, tu_make_adamw, NULL, &hy) != NULL ||
        !strstr(phx_last_error(), "hybrid stage 2 with a shard group of 2 ranks and a replicate group of 2")) {
        printf("# rank %d: hybrid groups of the wrong size: %s\n", rank, phx_last_error());
        fails++;
    }
    phx_optimizer *z = ddp ? phx_zero_optimizer_new(ddp, c, tu_make_adamw, NULL, &zo) : NULL;
    if (!z || phx_ddp_join_begin(ddp, true) != PHX_EUNSUPPORTED || !strstr(phx_last_error(), "ZeRO-2")) {
        printf("# rank %d: join under ZeRO-2: %s\n", rank, phx_last_error());
        fails++;
    }
    phx_optimizer_free(z);
    phx_loss *loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    phx_tensor *x = tu_new2(2, sizes[0]), *y = tu_new2(2, sizes[2]);
    tu_batch(0, 2 * rank, 2, x, y); /* other rows on each rank */
    if (tu_step(ddp, NULL, loss, x, y) != PHX_OK) fails++;
    /* the gradients, as values of a copy, compared across ranks */
    phx_module *g = tu_mlp(sizes, 3, 7);
    for (size_t i = 0; i < phx_module_num_params(g); i++)
        phx_tensor_copy(phx_param_value(phx_module_param(g, i)), phx_param_grad(phx_module_param(ddp, i)));
    if (!tu_same_bits_across(c, g)) {
        printf("# rank %d: gradients differ across ranks after the ZeRO-2 optimizer was freed\n", rank);
        fails++;
    }
    phx_module_free(g);
    phx_tensor_free(x);
    phx_tensor_free(y);
    phx_loss_free(loss);
    phx_module_free(ddp);
    phx_module_free(m);
    phx_comm_free(c);
    return fails ? 1 : 0;
}

int main(void)
{
    plan(16);
    phx_module *m = tu_mlp(sizes, 3, 7), *ref = tu_mlp(sizes, 3, 7);

    ok(phx_zero_optimizer_new(NULL, NULL, tu_make_adamw, NULL, NULL) == NULL && strstr(phx_last_error(), "model"),
       "NULL model refused: %s", phx_last_error());
    phx_zero_opts bad = PHX_ZERO_OPTS_INIT;
    bad.stage = 3;
    ok(phx_zero_optimizer_new(m, NULL, tu_make_adamw, NULL, &bad) == NULL && strstr(phx_last_error(), "stage 3"),
       "stage 3 refused: %s", phx_last_error());
    bad.stage = 2;
    ok(phx_zero_optimizer_new(m, NULL, tu_make_adamw, NULL, &bad) == NULL &&
           strstr(phx_last_error(), "DistributedDataParallel"),
       "stage 2 without a DDP module refused: %s", phx_last_error());
    ok(phx_zero_optimizer_new(m, NULL, make_null, NULL, NULL) == NULL && strstr(phx_last_error(), "no optimizer"),
       "a failing make is reported: %s", phx_last_error());
    phx_zero_opts unset;
    memset(&unset, 0, sizeof unset);
    ok(phx_zero_optimizer_new(m, NULL, tu_make_adamw, NULL, &unset) == NULL && strstr(phx_last_error(), "struct_size"),
       "options without struct_size refused: %s", phx_last_error());
    ok(phx_zero_inner(NULL) == NULL && phx_zero_consolidate(NULL, 0) == PHX_EINVAL, "NULL optimizer refused");
    phx_zero_opts half = PHX_ZERO_OPTS_INIT;
    half.replicate_comm = (phx_comm *)1; /* never read: refused first */
    ok(phx_zero_optimizer_new(m, NULL, tu_make_adamw, NULL, &half) == NULL &&
           strstr(phx_last_error(), "replicate_comm without shard_comm"),
       "replicate_comm without shard_comm refused: %s", phx_last_error());

    phx_zero_opts zo = PHX_ZERO_OPTS_INIT;
    zo.region_bytes = 40; /* 10 floats: pieces cut across parameters */
    zo.gather_bytes = 12; /* 3 floats: chunked gathers in the consolidation */
    phx_optimizer *z = phx_zero_optimizer_new(m, NULL, tu_make_adamw, NULL, &zo);
    phx_optimizer *plain = tu_make_adamw(ref, NULL);
    int64_t total = 0;
    for (size_t i = 0; i < phx_module_num_params(m); i++)
        total += phx_tensor_numel(phx_param_value(phx_module_param(m, i)));
    /* The pieces cover the model exactly once, in order. */
    phx_module *shard = phx_zero_shard(z);
    int64_t covered = 0;
    int contiguous = 1;
    size_t prev = 0;
    int64_t next_off = 0;
    for (size_t i = 0; shard && i < phx_module_num_params(shard); i++) {
        int64_t off;
        size_t src = phx_zero_shard_source(z, i, &off);
        int64_t len = phx_tensor_numel(phx_param_value(phx_module_param(shard, i)));
        if (src != prev) next_off = 0, prev = src;
        contiguous = contiguous && off == next_off;
        next_off = off + len;
        covered += len;
    }
    ok(z && covered == total && contiguous && phx_zero_rank_numel(z, 0) == total &&
           phx_zero_num_regions(z) == (size_t)((total + 9) / 10),
       "world of one: %zu pieces in %zu regions cover the %lld elements", shard ? phx_module_num_params(shard) : 0,
       z ? phx_zero_num_regions(z) : 0, (long long)total);

    phx_status st = z && plain ? train(m, z, 3, 0) : PHX_EINVAL;
    if (st == PHX_OK) st = train(ref, plain, 3, 0);
    /* Step 3 of both, the plain side first (it warms the new loss's
     * buffers), counting the allocations of the ZeRO side's. */
    phx_loss *loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    phx_tensor *x = tu_new2(4, sizes[0]), *y = tu_new2(4, sizes[2]);
    tu_batch(3, 0, 4, x, y);
    phx_status s2 = st == PHX_OK ? tu_step(ref, plain, loss, x, y) : st;
    uint64_t a0 = phx_alloc_count();
    if (s2 == PHX_OK) s2 = tu_step(m, z, loss, x, y);
    uint64_t a1 = phx_alloc_count();
    is_int((long long)(a1 - a0), 0, "no allocation in a steady-state step (forward, backward, ZeRO step)");
    phx_tensor_free(x);
    phx_tensor_free(y);
    phx_loss_free(loss);
    double e = tu_max_rel(m, ref);
    ok(st == PHX_OK && s2 == PHX_OK && e == 0, "world of one: 4 AdamW steps bitwise equal to the plain optimizer (%g)",
       e);

    /* Checkpoint: consolidated state equals the plain optimizer's, and
     * reloading it into a fresh ZeRO optimizer continues identically. */
    const char **zn, **pn;
    phx_tensor **zt, **pt;
    ok(phx_optimizer_state(z, &zn, &zt) == 0, "unconsolidated state lists nothing");
    st = phx_zero_consolidate(z, 0);
    size_t nz = phx_optimizer_state(z, &zn, &zt), np = phx_optimizer_state(plain, &pn, &pt);
    double es = nz == np ? 0 : INFINITY;
    for (size_t i = 0; i < nz && nz == np; i++) {
        if (strcmp(zn[i], pn[i]) != 0) es = INFINITY;
        es = fmax(es, max_diff(zt[i], pt[i]));
    }
    ok(st == PHX_OK && nz == np && es == 0, "consolidated state: %zu tensors named and valued as AdamW's (%g)", nz, es);

    char path[256];
    snprintf(path, sizeof path, "zero-api-%d.safetensors", (int)getpid());
    st = phx_checkpoint_save(path, m, z, NULL, NULL, 0);
    phx_module *m2 = tu_mlp(sizes, 3, 99);
    phx_optimizer *z2 = phx_zero_optimizer_new(m2, NULL, tu_make_adamw, NULL, &zo);
    if (st == PHX_OK) st = phx_zero_consolidate(z2, -1);
    if (st == PHX_OK) st = phx_checkpoint_load(path, m2, z2, NULL);
    if (st == PHX_OK) st = phx_zero_load_full_state(z2);
    if (st == PHX_OK) st = train(m2, z2, 2, 4);
    if (st == PHX_OK) st = train(ref, plain, 2, 4);
    e = tu_max_rel(m2, ref);
    ok(st == PHX_OK && e == 0, "saved, loaded into a fresh ZeRO optimizer, 2 more steps: equal to the plain one (%g)",
       e);
    if (st != PHX_OK) diag("%s", phx_last_error());
    ok(phx_zero_load_full_state(z2) == PHX_ESTATE, "loading without a consolidated state refused: %s",
       phx_last_error());
    unlink(path);
    /* A parameter added to the model after the optimizer was made. */
    int64_t three = 3;
    phx_module_add_param(m2, "extra", phx_tensor_zeros(PHX_F32, 1, &three, phx_cpu()));
    st = phx_optimizer_step(z2);
    ok(st == PHX_ESTATE && strstr(phx_last_error(), "parameters"), "a model changed after construction refused: %s",
       phx_last_error());
    phx_optimizer_free(z2);
    phx_module_free(m2);
    phx_optimizer_free(z);
    phx_optimizer_free(plain);
    phx_module_free(m);
    phx_module_free(ref);
    phx_status zs = tu_spawn("threads", 2, zero2_rank, NULL);
    ok(zs == PHX_OK,
       "ZeRO-2 on 2 ranks: wrong hybrid group sizes and a join refused; freed, the DDP wrapper "
       "all-reduces again");
    if (zs != PHX_OK) diag("%s", phx_last_error());
    return done_testing();
}
