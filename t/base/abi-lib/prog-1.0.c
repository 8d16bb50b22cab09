/* A program built against the 1.0 headers (t/base/abi-lib-1.0, commit 274f127,
 * before public structs carried struct_size) and linked against a library
 * without symbol versions, as every program of that release was; run on
 * today's library it must still read and write the 1.0 layouts. Each
 * check uses a value that the 1.0 layout puts at one place and today's
 * at another, so a misread shows. */
#include <stdlib.h>
#include <string.h>
#include <phalanx/phalanx.h>
#include "t/tap.h"

/* User vtables in the 1.0 layout (no struct_size). */
static int calls[4];
static phx_status mine_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    (void)self;
    calls[0]++;
    *y = (phx_tensor *)x;
    return PHX_OK;
}
static phx_status mine_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    (void)self, (void)dy;
    if (dx) *dx = NULL;
    return PHX_OK;
}
static void mine_free(phx_module *self)
{
    (void)self;
    calls[1]++;
}
static const phx_module_vtable mine_vt = {
    .type_name = "Mine", .forward = mine_forward, .backward = mine_backward, .free = mine_free};
static phx_status opt_step(phx_optimizer *self)
{
    (void)self;
    calls[2]++;
    return PHX_OK;
}
static void opt_free(phx_optimizer *self)
{
    (void)self;
}
static const phx_optimizer_vtable opt_vt = {.type_name = "MyOpt", .step = opt_step, .free = opt_free};
static phx_status ds_get(void *ctx, int64_t i, void *const *out)
{
    (void)ctx;
    calls[3]++;
    *(float *)out[0] = (float)(10 * i);
    return PHX_OK;
}
static const phx_dataset_vtable ds_vt = {.type_name = "tens", .get = ds_get};

static void user_vtables(void)
{
    phx_module *m = phx_module_new(&mine_vt, NULL);
    phx_tensor *x = phx_tensor_zeros(PHX_F32, 1, (const int64_t[]){3}, phx_cpu()), *y = NULL;
    phx_status st = m ? phx_module_forward(m, x, &y) : PHX_EINVAL;
    ok(st == PHX_OK && y == x && calls[0] == 1 && !strcmp(phx_module_type(m), "Mine") &&
           phx_module_vtable_of(m) == &mine_vt,
       "a 1.0 module vtable: forward called, type \"%s\", vtable_of gives it back", m ? phx_module_type(m) : "");
    phx_optimizer *o = m ? phx_optimizer_new(&opt_vt, NULL, m) : NULL;
    st = o ? phx_optimizer_step(o) : PHX_EINVAL;
    ok(st == PHX_OK && calls[2] == 1, "a 1.0 optimizer vtable: step called");
    phx_optimizer_free(o);
    phx_module_free(m);
    ok(calls[1] == 1, "the 1.0 module's free called once");
    phx_field f = {.dtype = PHX_F32, .ndim = 0};
    phx_dataset *ds = phx_dataset_new(&ds_vt, NULL, 5, 1, &f);
    float v = -1;
    void *out[1] = {&v};
    st = ds ? phx_dataset_get(ds, 3, out) : PHX_EINVAL;
    ok(st == PHX_OK && v == 30.0f && calls[3] == 1 && !strcmp(phx_dataset_type(ds), "tens"),
       "a 1.0 dataset vtable: get(3) = %g", v);
    phx_dataset_free(ds);
    phx_tensor_free(x);
}

int main(void)
{
    plan(20);
    user_vtables();
    int maj = 0, min = 0;
    phx_version(&maj, &min);
    diag("headers ABI %d.%d, library ABI %d.%d", PHX_ABI_VERSION_MAJOR, PHX_ABI_VERSION_MINOR, maj, min);

    setenv("RANK", "0", 1), setenv("WORLD_SIZE", "1", 1), setenv("MASTER_PORT", "29611", 1);
    phx_world w;
    memset(&w, 0x5a, sizeof w);
    phx_status wst = phx_world_from_env(&w);
    ok(wst == PHX_OK && w.rank == 0 && w.size == 1 && w.local_size == 1 && !strcmp(w.master_addr, "127.0.0.1") &&
           w.master_port == 29611,
       "phx_world_from_env fills the 1.0 phx_world (size %d, port %d, addr %.20s)", w.size, w.master_port,
       w.master_addr);

    /* Options read from their 1.0 places. */
    phx_rng *rng = phx_rng_new(1);
    phx_conv2d_opts co = phx_conv2d_opts_default();
    ok(co.stride[0] == 1 && co.dilation[1] == 1 && co.groups == 1 && co.bias, "conv2d defaults in the 1.0 layout");
    co.stride[0] = co.stride[1] = 2;
    co.bias = false;
    phx_module *conv = phx_conv2d_new(3, 4, 3, 3, &co, rng);
    phx_tensor *img = phx_tensor_zeros(PHX_F32, 4, (const int64_t[]){1, 3, 9, 9}, phx_cpu()), *y = NULL;
    phx_status fst = conv ? phx_module_forward(conv, img, &y) : PHX_EINVAL;
    ok(fst == PHX_OK && phx_tensor_dim(y, 2) == 4 && phx_tensor_dim(y, 3) == 4 && phx_module_num_params(conv) == 1,
       "conv2d stride 2 without bias from 1.0 opts: 9x9 -> %lldx%lld, %zu parameter(s)",
       y ? (long long)phx_tensor_dim(y, 2) : -1LL, y ? (long long)phx_tensor_dim(y, 3) : -1LL,
       conv ? phx_module_num_params(conv) : 0);

    phx_module *lin = phx_linear_new(4, 2, true, rng);
    phx_sgd_opts so = phx_sgd_defaults();
    ok(so.lr == 0.01 && so.momentum == 0.0, "sgd defaults in the 1.0 layout (lr %g)", so.lr);
    so.lr = 0.25;
    phx_optimizer *sgd = phx_sgd_new(lin, &so);
    ok(sgd && phx_optimizer_lr(sgd) == 0.25, "sgd lr 0.25 read from the 1.0 opts (%g)",
       sgd ? phx_optimizer_lr(sgd) : -1);
    phx_adam_opts ao = phx_adamw_defaults();
    ok(ao.decoupled && ao.weight_decay == 1e-2 && ao.beta2 == 0.999, "adamw defaults in the 1.0 layout");
    ao.lr = 3e-4;
    phx_optimizer *adam = phx_adam_new(lin, &ao);
    ok(adam && phx_optimizer_lr(adam) == 3e-4, "adam lr 3e-4 read from the 1.0 opts");

    phx_scaler_opts sc = {1024, 0, 0, 0};
    phx_precision *fp16 = NULL;
    phx_status pst = phx_precision_new("fp16", &fp16);
    phx_scaler *scaler = pst == PHX_OK ? phx_scaler_new(fp16, &sc) : NULL;
    ok(scaler && phx_scaler_get_scale(scaler) == 1024, "scaler init_scale 1024 from the 1.0 opts (%g)",
       scaler ? phx_scaler_get_scale(scaler) : -1);

    phx_schedule_opts sch = {.kind = PHX_SCHED_STEP, .step_size = 2, .gamma = 0.5};
    phx_schedule *s = phx_schedule_new(sgd, &sch);
    ok(s && phx_schedule_lr(s, 0) == 0.25 && phx_schedule_lr(s, 2) == 0.125, "step schedule from the 1.0 opts");

    phx_gpt_config g = phx_gpt_defaults();
    ok(g.vocab_size == 65 && g.n_layer == 4 && g.init_std == 0.02, "gpt defaults in the 1.0 layout");
    g.n_layer = 1, g.d_model = 32, g.n_head = 2, g.block_size = 8, g.vocab_size = 11;
    phx_module *gpt = phx_gpt_new(&g, rng);
    ok(gpt && phx_module_num_params(gpt) > 0, "a 1-layer GPT from the 1.0 config");

    /* The loader: batch 3 of 7 rows. */
    float xs[7] = {0, 1, 2, 3, 4, 5, 6}, ys[7] = {0};
    phx_tensor *tx = phx_tensor_from_data(PHX_F32, 2, (const int64_t[]){7, 1}, xs);
    phx_tensor *ty = phx_tensor_from_data(PHX_F32, 2, (const int64_t[]){7, 1}, ys);
    phx_tensor *xy[2] = {tx, ty};
    phx_dataset *ds = phx_dataset_tensors(xy, 2);
    phx_loader_opts lo = {.batch = 3, .drop_last = true};
    phx_loader *ld = phx_loader_new_opts(ds, &lo);
    phx_tensor *xb = NULL, *yb = NULL;
    int batches = 0;
    while (ld && phx_loader_next(ld, &xb, &yb) == 1) batches++;
    ok(ld && batches == 2, "loader batch 3, drop_last from the 1.0 opts: %d batches of 7 rows", batches);

    /* DDP on a world of one, its options and counters in the 1.0 layout. */
    phx_comm_opts cop = phx_comm_opts_default();
    ok(cop.rank == -1 && cop.size == -1 && cop.backend == NULL, "comm defaults in the 1.0 layout (-1 sentinels)");
    cop.rank = 0, cop.size = 1, cop.backend = "threads";
    phx_comm *comm = NULL;
    phx_status cst = phx_comm_init(&cop, &comm);
    ok(cst == PHX_OK && phx_comm_size(comm) == 1, "phx_comm_init from 1.0 opts: %s",
       cst ? phx_last_error() : phx_comm_backend(comm));
    phx_ddp_opts dopt = {.first_bucket_bytes = 64, .bucket_bytes = 64, .no_rebuild = true};
    phx_module *ddp = comm ? phx_ddp_new(lin, comm, &dopt) : NULL;
    phx_ddp_stats st;
    memset(&st, 0x5a, sizeof st);
    phx_status dst = ddp ? phx_ddp_get_stats(ddp, &st) : PHX_EINVAL;
    ok(dst == PHX_OK && st.backwards == 0 && st.rebuilds == 0 && st.wait_s == 0.0,
       "phx_ddp_get_stats writes the 1.0 phx_ddp_stats");

    phx_plugin_info infos[8];
    size_t n = phx_plugin_scan(infos, 8, NULL), good = 0;
    for (size_t i = 0; i < n && i < 8; i++)
        good += infos[i].name[0] && strstr(infos[i].path, infos[i].name) && strstr(infos[i].path, infos[i].kind);
    ok(n > 0 && good == (n < 8 ? n : 8), "phx_plugin_scan fills 1.0 phx_plugin_info (%zu of %zu sane)", good, n);

    phx_module_free(ddp);
    phx_comm_free(comm);
    phx_loader_free(ld);
    phx_dataset_free(ds);
    phx_tensor_free(tx), phx_tensor_free(ty), phx_tensor_free(img); /* y: the conv's own output */
    phx_module_free(gpt);
    phx_schedule_free(s);
    phx_scaler_free(scaler);
    phx_precision_free(fp16);
    phx_optimizer_free(adam), phx_optimizer_free(sgd);
    phx_module_free(lin), phx_module_free(conv);
    phx_rng_free(rng);
    return done_testing();
}
