/* The PowerSGD communication hook against PyTorch 1.13's powerSGD_hook on
 * gloo (bench/torch/powersgd.py wrote t/ref/powersgd.safetensors): two
 * ranks train Linear(6, 16) - Tanh - Linear(16, 8) - Tanh - Linear(8, 3)
 * for 6 SGD steps with matrix_approximation_rank 1 and 2,
 * start_powerSGD_iter 2 (2 plain steps, then 4 compressed ones with error
 * feedback and warm start; at rank 2 the last weight is all-reduced
 * uncompressed, as torch decides); after every step the parameters equal
 * torch's within 1e-5 (relative to each tensor's largest element). The
 * initial Qs come from the formula the script fed to torch in place of
 * torch.randn, through phx_powersgd_opts.init_q. The same data with
 * fp16_compress_hook gives torch's parameters within 1e-4 (an f32
 * gradient a few ulps from torch's may round to the neighbouring f16;
 * the bits of the hook itself are checked in t/ddp/comm_hook against the
 * formula that torch's hook is checked against here, on torch's own
 * gradients, bit for bit). Threads and gloo processes. */
#include "t/tap.h"
#include "t/ddp-util.h"

#define STEPS 6
static const int64_t sizes[] = {6, 16, 8, 3};
static const char *const names[6] = {"0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"};
static tu_ref ref; /* the reference file */

/* The script's replacement of torch.randn for a (1, cols, r) Q. */
static void init_q(void *user, size_t bucket, size_t param, int64_t cols, int64_t r, float *q)
{
    (void)bucket;
    (void)param;
    (*(int *)user)++;
    for (int64_t k = 0; k < cols * r; k++) q[k] = (float)((k * 7 + cols * 3 + r * 5 + 1) % 13 - 6) / 4.0f;
}

static int rank_main(int rank, void *arg)
{
    int run = *(int *)arg; /* 1, 2: PowerSGD rank; 0: fp16_compress */
    int fails = 0, fed = 0;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    phx_module *model = tu_mlp(sizes, 4, 1);
    for (size_t i = 0; i < 6; i++) {
        phx_tensor *init = tu_ref_find(&ref, "init.%s", names[i]);
        if (!init || phx_tensor_copy(phx_param_value(phx_module_param(model, i)), init) != PHX_OK) return 1;
    }
    phx_module *ddp = phx_ddp_new(model, c, NULL);
    phx_powersgd_opts po = PHX_POWERSGD_OPTS_INIT;
    po.matrix_approximation_rank = run;
    po.start_iter = 2;
    po.init_q = init_q;
    po.init_q_user = &fed;
    phx_powersgd_state *ps = run ? phx_powersgd_state_new(&po) : NULL;
    phx_status st = !ddp || (run && !ps) ? PHX_EINVAL
        : run                            ? phx_ddp_register_comm_hook(ddp, phx_comm_hook_powersgd(), ps)
                                         : phx_ddp_register_comm_hook(ddp, phx_comm_hook_fp16_compress(), NULL);
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.lr = 0.1;
    phx_optimizer *opt = st == PHX_OK ? phx_sgd_new(ddp, &so) : NULL;
    phx_loss *loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    if (!opt) st = PHX_EINVAL;
    char tag[8];
    snprintf(tag, sizeof tag, run ? "psgd%d" : "fp16", run);
    /* fp16: a gradient whose f32 value differs from torch's in the last
     * bits may round to the neighbouring f16 (2^-11 relative): 1e-4. */
    double tol = run ? 1e-5 : 1e-4, worst = 0;
    for (int s = 0; s < STEPS && st == PHX_OK; s++) {
        phx_tensor *x = tu_ref_find(&ref, "x.%d.%d", rank, s), *y = tu_ref_find(&ref, "y.%d.%d", rank, s);
        st = x && y ? tu_step(ddp, opt, loss, x, y) : PHX_ENOTFOUND;
        for (size_t i = 0; i < 6 && st == PHX_OK; i++) {
            phx_tensor *want = tu_ref_find(&ref, "%s.%d.%s", tag, s, names[i]);
            double e = want ? tu_rel(phx_param_value(phx_module_param(model, i)), want) : INFINITY;
            if (!(e <= tol) && !fails++)
                printf("# rank %d, %s: after step %d, %s differs from torch's by %.3g (relative)\n", rank, tag, s,
                       names[i], e);
            worst = fmax(worst, e);
        }
    }
    if (st != PHX_OK) {
        printf("# rank %d: %s\n", rank, phx_last_error());
        fails++;
    }
    if (run && !fails && (fed == 0 || phx_powersgd_iter(ps) != STEPS)) {
        printf("# rank %d: %d initial Qs fed, %lld steps counted (expected > 0 and %d)\n", rank, fed,
               (long long)phx_powersgd_iter(ps), STEPS);
        fails++;
    }
    if (!fails && !tu_same_bits_across(c, model)) {
        printf("# rank %d: parameters differ across ranks\n", rank);
        fails++;
    }
    if (!fails && rank == 0)
        printf("# %s: %d steps, max relative difference to torch %.3g%s\n", tag, STEPS, worst,
               run ? " (2 plain, then PowerSGD)" : "");
    fflush(stdout);
    phx_loss_free(loss);
    phx_optimizer_free(opt);
    phx_module_free(ddp);
    phx_powersgd_state_free(ps);
    phx_module_free(model);
    phx_comm_free(c);
    return fails;
}

/* torch's fp16_compress_hook against the 16-bit formula the Phalanx hook
 * is checked with in t/ddp/comm_hook (16(16(16(g0) / 2) + 16(16(g1) / 2)),
 * the compiler's _Float16 rounding): on torch's own step-0 gradients of
 * both ranks, every gradient the hook left is that value, bit for bit. */
static void torch_fp16_bits(void)
{
#ifdef __FLT16_MAX__
    size_t n = 0, wrong = 0, lossy = 0;
    for (size_t i = 0; i < 6; i++) {
        phx_tensor *l0 = tu_ref_find(&ref, "fp16.local.0.%s", names[i]),
                   *l1 = tu_ref_find(&ref, "fp16.local.1.%s", names[i]),
                   *h = tu_ref_find(&ref, "fp16.hooked.%s", names[i]);
        if (!l0 || !l1 || !h) {
            wrong++;
            break;
        }
        int64_t k = phx_tensor_numel(h);
        float *a = malloc((size_t)k * sizeof *a), *b = malloc((size_t)k * sizeof *b),
              *w = malloc((size_t)k * sizeof *w);
        phx_tensor_to_host(l0, a);
        phx_tensor_to_host(l1, b);
        phx_tensor_to_host(h, w);
        for (int64_t j = 0; j < k; j++) {
            _Float16 e0 = (_Float16)((float)(_Float16)a[j] / 2.0f), e1 = (_Float16)((float)(_Float16)b[j] / 2.0f);
            float want = (float)(_Float16)((float)e0 + (float)e1);
            wrong += memcmp(&want, &w[j], sizeof want) != 0;
            lossy += want != a[j] / 2.0f + b[j] / 2.0f;
        }
        n += (size_t)k;
        free(a);
        free(b);
        free(w);
    }
    ok(wrong == 0 && n > 0 && lossy > 0,
       "torch's fp16_compress_hook on its own gradients equals 16(16(16(g0)/2) + 16(16(g1)/2)) bit for bit "
       "(%zu gradients, %zu wrong, %zu differ from the f32 average)",
       n, wrong, lossy);
#else
    skip(1, "the compiler has no _Float16");
#endif
}

int main(void)
{
    const char *top = getenv("top_srcdir");
    char path[1024];
    snprintf(path, sizeof path, "%s/t/ref/powersgd.safetensors", top ? top : ".");
    if (phx_safetensors_read(path, &ref.names, &ref.t, &ref.n) != PHX_OK) {
        printf("1..0 # SKIP %s\n", phx_last_error());
        return 0;
    }
    plan(7);
    torch_fp16_bits();
    for (int run = 1; run <= 2; run++)
        tu_spawn_both(2, rank_main, &run,
                      "PowerSGD rank %d (start_powerSGD_iter 2, error feedback, warm start): parameters after each of "
                      "%d steps equal torch 1.13's powerSGD_hook within 1e-5",
                      run, STEPS);
    int fp16 = 0;
    tu_spawn_both(2, rank_main, &fp16, "fp16_compress: parameters after each of %d steps equal torch's within 1e-4",
                  STEPS);
    return done_testing();
}
