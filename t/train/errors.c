/* Errors that name the cause: a constructor's error survives the call that
 * receives its NULL, optimizer options name the bad value, and a PyTorch
 * torch.save() file given to the checkpoint loader is recognised. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <unistd.h>

#include "phalanx/phalanx.h"
#include "t/tap.h"

static void test_constructor_error_survives(void)
{
    phx_rng *rng = phx_rng_new(0);
    phx_module *seq = phx_sequential_new();
    is_int(phx_sequential_add(seq, phx_linear_new(-3, 4, true, rng)), PHX_EINVAL, "adding a failed Linear fails");
    like(phx_last_error(), "phx_sequential_add: module is NULL", "the call names itself");
    like(phx_last_error(), "in_features -3", "and keeps the constructor's cause");
    is_int(phx_module_num_params(seq), 0, "nothing added");

    phx_error_clear();
    is_int(phx_sequential_add(seq, NULL), PHX_EINVAL, "plain NULL");
    is_str(phx_last_error(), "phx_sequential_add: module is NULL", "no stale cause when none was set");

    ok(phx_adam_new(phx_linear_new(0, 2, true, rng), NULL) == NULL, "Adam on a failed model");
    like(phx_last_error(), "phx_adam_new: model is NULL", "Adam names itself");
    like(phx_last_error(), "in_features 0", "and the constructor's cause");

    /* the layers made first, the failed one added later: the cause stays
     * (the words say it may be older than the call) */
    phx_module *bad = phx_linear_new(-1, 2, true, rng), *fine = phx_linear_new(2, 2, true, rng);
    is_int(phx_sequential_add(seq, bad), PHX_EINVAL, "a failed Linear added after another was made");
    like(phx_last_error(), "in_features -1", "its cause is still named");
    like(phx_last_error(), "the last error on this thread", "as the thread's last error");
    phx_module_free(fine);
    phx_module_free(seq);
    phx_rng_free(rng);
}

static void test_option_names(void)
{
    phx_rng *rng = phx_rng_new(0);
    phx_module *m = phx_linear_new(3, 2, true, rng);
    phx_adam_opts a = PHX_ADAMW_OPTS_INIT;
    a.eps = -1e-8;
    ok(phx_adam_new(m, &a) == NULL, "Adam eps < 0 refused");
    is_str(phx_last_error(), "phx_adam_new: eps -1e-08 must be finite and >= 0", "names eps alone");
    a = phx_adamw_defaults();
    a.weight_decay = NAN;
    ok(phx_adam_new(m, &a) == NULL, "Adam weight_decay NaN refused");
    like(phx_last_error(), "weight_decay nan", "names weight_decay");
    phx_sgd_opts s = PHX_SGD_OPTS_INIT;
    s.momentum = -0.5;
    ok(phx_sgd_new(m, &s) == NULL, "SGD momentum < 0 refused");
    is_str(phx_last_error(), "phx_sgd_new: momentum -0.5 must be finite and >= 0", "names momentum alone");
    s = phx_sgd_defaults();
    s.lr = INFINITY;
    ok(phx_sgd_new(m, &s) == NULL, "SGD lr inf refused");
    like(phx_last_error(), "lr inf", "names lr");
    phx_module_free(m);
    phx_rng_free(rng);
}

/* The first bytes of what torch.save writes: a zip archive (PyTorch >= 1.6)
 * or a pickle (protocol 2, the legacy format). */
static void test_torch_save_file(void)
{
    static const unsigned char zip[] = "PK\x03\x04\x00\x00\x08\x08\x00\x00archive/data.pkl........";
    static const unsigned char pkl[] = "\x80\x02\x8a\x0al\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.....";
    const struct {
        const unsigned char *bytes;
        size_t n;
        const char *want;
    } cases[] = {{zip, sizeof zip - 1, "zip archive, which looks like a PyTorch torch.save()"},
                 {pkl, sizeof pkl - 1, "Python pickle, which looks like a PyTorch torch.save()"}};
    char path[64];
    snprintf(path, sizeof path, "t/errors-%d.pt", (int)getpid());
    phx_rng *rng = phx_rng_new(0);
    phx_module *m = phx_linear_new(3, 2, true, rng);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        FILE *f = fopen(path, "wb");
        fwrite(cases[i].bytes, 1, cases[i].n, f);
        fclose(f);
        is_int(phx_checkpoint_load(path, m, NULL, NULL), PHX_EIO, "case %zu refused", i);
        like(phx_last_error(), cases[i].want, "case %zu: says what the file is", i);
        like(phx_last_error(), "not a safetensors file", "case %zu: says it is not safetensors", i);
    }
    unlink(path);
    phx_module_free(m);
    phx_rng_free(rng);
}

int main(void)
{
    test_constructor_error_survives();
    test_option_names();
    test_torch_save_file();
    return done_testing();
}
