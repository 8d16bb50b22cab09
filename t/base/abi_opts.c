/* The named-option constructors that replace positional ones (doc/maint/abi.md):
 * each gives what its positional form gives for the same values, NULL
 * options are the initialiser's (PyTorch's defaults), and a struct
 * without its size, or with a size no struct has, is refused naming the
 * initialiser. */
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

static int same_indices(phx_sampler *a, phx_sampler *b)
{
    size_t na = 0, nb = 0;
    const int64_t *ia = phx_sampler_indices(a, &na), *ib = phx_sampler_indices(b, &nb);
    return na == nb && na > 0 && memcmp(ia, ib, na * sizeof *ia) == 0;
}

int main(void)
{
    plan(10);
    phx_sampler_opts so = PHX_SAMPLER_OPTS_INIT;
    so.num_replicas = 3, so.rank = 2, so.seed = 7, so.drop_last = true;
    phx_sampler *a = phx_sampler_new_opts(20, &so), *b = phx_sampler_new(20, 3, 2, true, 7, true);
    ok(a && b && same_indices(a, b), "sampler: named options give the positional form's indices");
    phx_sampler_set_epoch(a, 4), phx_sampler_set_epoch(b, 4);
    ok(a && b && same_indices(a, b), "... in another epoch too");
    phx_sampler_free(a), phx_sampler_free(b);
    a = phx_sampler_new_opts(10, NULL), b = phx_sampler_new(10, 1, 0, true, 0, false);
    ok(a && b && same_indices(a, b), "sampler: NULL options are DistributedSampler's defaults (shuffled, one replica)");
    phx_sampler_free(a), phx_sampler_free(b);
    phx_sampler_opts zero = {0};
    a = phx_sampler_new_opts(10, &zero);
    ok(!a && strstr(phx_last_error(), "PHX_SAMPLER_OPTS_INIT"), "sampler: struct_size 0 refused: %s", phx_last_error());

    phx_module *bn = phx_batchnorm2d_new_opts(4, NULL);
    ok(bn && phx_module_num_params(bn) == 2 && phx_module_num_buffers(bn) == 3 &&
           !strcmp(phx_module_type(bn), "BatchNorm2d"),
       "batchnorm2d: NULL options are affine and tracking (2 parameters, 3 buffers)");
    phx_module_free(bn);
    phx_batchnorm_opts bo = PHX_BATCHNORM_OPTS_INIT;
    bo.affine = false, bo.track_running_stats = false;
    bn = phx_batchnorm1d_new_opts(4, &bo);
    ok(bn && phx_module_num_params(bn) == 0 && phx_module_num_buffers(bn) == 0 &&
           !strcmp(phx_module_type(bn), "BatchNorm1d"),
       "batchnorm1d: affine and tracking off from the options");
    phx_module_free(bn);
    bo = (phx_batchnorm_opts)PHX_BATCHNORM_OPTS_INIT;
    bo.eps = 0;
    bn = phx_batchnorm2d_new_opts(4, &bo);
    ok(!bn && strstr(phx_last_error(), "eps"), "batchnorm: eps 0 refused as the positional form refuses it: %s",
       phx_last_error());
    phx_batchnorm_opts bz = {0};
    bn = phx_batchnorm2d_new_opts(4, &bz);
    ok(!bn && strstr(phx_last_error(), "phx_batchnorm2d_new_opts") &&
           strstr(phx_last_error(), "PHX_BATCHNORM_OPTS_INIT"),
       "batchnorm: struct_size 0 refused: %s", phx_last_error());
    /* an uninitialised struct's garbage size: refused before any byte past
     * the caller's struct is read */
    phx_sampler_opts big = PHX_SAMPLER_OPTS_INIT;
    big.struct_size = 4097;
    a = phx_sampler_new_opts(10, &big);
    ok(!a && strstr(phx_last_error(), "4097") && strstr(phx_last_error(), "at most 4096") &&
           strstr(phx_last_error(), "PHX_SAMPLER_OPTS_INIT"),
       "sampler: struct_size 4097 refused: %s", phx_last_error());
    phx_memory_stats ms = PHX_MEMORY_STATS_INIT;
    ms.struct_size = (size_t)-1;
    ok(phx_device_memory_stats(phx_cpu(), &ms) == PHX_EABI && strstr(phx_last_error(), "at most 4096"),
       "memory stats (an output struct): a huge struct_size refused: %s", phx_last_error());
    return done_testing();
}
