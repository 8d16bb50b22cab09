/* Devices: names, parsing, PHX_DEVICE selection (lists, ^exclusions,
 * clear errors, never a silent fallback), counts, memory statistics, and
 * PHX_NUM_THREADS reaching the BLAS. On a machine with a GPU the
 * "no CUDA" checks are skipped. */
#include "config.h"
#include <stdlib.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "phalanx/plugin/device_v1.h"
#include "t/tap.h"

#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
int openblas_get_num_threads(void);
#endif

int main(void)
{
    plan(40);
    /* before any device use: the BLAS thread count comes from PHX_NUM_THREADS */
    setenv("PHX_NUM_THREADS", "1", 1);
    unsetenv("PHX_DEVICE");
    is_int(phx_num_threads(), 1, "PHX_NUM_THREADS=1 gives 1 thread");
    const phx_device_v1 *cpu = phx_device_table(phx_cpu());
    ok(cpu && cpu->kernels && cpu->kind == PHX_DEVICE_CPU, "the CPU table and its kernels");
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
    is_int(openblas_get_num_threads(), 1, "OpenBLAS runs with PHX_NUM_THREADS threads");
#else
    skip(1, "the BLAS is not OpenBLAS");
#endif
    is_int(phx_set_num_threads(2), PHX_OK, "phx_set_num_threads(2)");
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
    is_int(openblas_get_num_threads(), 2, "OpenBLAS follows phx_set_num_threads");
#else
    skip(1, "the BLAS is not OpenBLAS");
#endif
    is_int(phx_num_threads(), 2, "phx_num_threads reports the set value");
    is_int(phx_set_num_threads(0), PHX_EINVAL, "phx_set_num_threads(0): EINVAL");
    like(phx_last_error(), "n=0, expected >= 1", "message names the value");

    /* names */
    char buf[32];
    phx_device d = phx_cpu(), c3 = {PHX_DEVICE_CUDA, 3};
    is_str(phx_device_name(d, buf, sizeof buf), "cpu", "name of the CPU");
    is_str(phx_device_name(c3, buf, sizeof buf), "cuda:3", "name of cuda:3");
    ok(phx_device_equal(d, phx_cpu()) && !phx_device_equal(d, c3), "device equality");

    /* parsing */
    phx_device out = c3;
    is_int(phx_device_parse("cpu", &out), PHX_OK, "parse cpu");
    ok(out.kind == PHX_DEVICE_CPU && out.index == 0, "cpu is {cpu, 0}");
    is_int(phx_device_parse("cpu:0", &out), PHX_OK, "parse cpu:0");
    is_int(phx_device_parse("cpu:1", &out), PHX_ENOTFOUND, "cpu:1: ENOTFOUND");
    is_int(phx_device_parse("tpu", &out), PHX_EINVAL, "tpu: EINVAL");
    like(phx_last_error(), "device 'tpu': expected cpu, cuda or cuda:N", "message gives the syntax");
    is_int(phx_device_parse("cuda:x", &out), PHX_EINVAL, "cuda:x: EINVAL");
    is_int(phx_device_parse("cuda:", &out), PHX_EINVAL, "cuda: (no index): EINVAL");

    /* CUDA absent (skipped where a GPU is present) */
    int ngpu = phx_device_count(PHX_DEVICE_CUDA);
    is_int(phx_device_count(PHX_DEVICE_CPU), 1, "one CPU device");
    if (ngpu == 0) {
        is_int(phx_device_parse("cuda", &out), PHX_ENOTFOUND, "cuda without a GPU: ENOTFOUND");
        like(phx_last_error(), "cuda", "the message says why cuda is unusable");
        diag("cuda: %s", phx_last_error());
        ok(phx_device_table(c3) == NULL, "no table for cuda:3");
        phx_device dd = c3;
        is_int(phx_device_default(&dd), PHX_OK, "PHX_DEVICE unset, no GPU: default succeeds");
        ok(dd.kind == PHX_DEVICE_CPU, "and is the CPU");
        setenv("PHX_DEVICE", "cuda", 1);
        is_int(phx_device_default(&dd), PHX_ENOTFOUND, "PHX_DEVICE=cuda without a GPU: ENOTFOUND, no fallback");
        like(phx_last_error(),
             "PHX_DEVICE='cuda' asked for a device that is not usable (cuda: ", "message names the setting and why");
        setenv("PHX_DEVICE", "cuda,cpu", 1);
        dd = c3;
        ok(phx_device_default(&dd) == PHX_OK && dd.kind == PHX_DEVICE_CPU,
           "PHX_DEVICE=cuda,cpu: the first usable, cpu");
        setenv("PHX_DEVICE", "^cuda", 1);
        dd = c3;
        ok(phx_device_default(&dd) == PHX_OK && dd.kind == PHX_DEVICE_CPU, "PHX_DEVICE=^cuda: cpu");
        setenv("PHX_DEVICE", "^cpu", 1);
        is_int(phx_device_default(&dd), PHX_ENOTFOUND, "PHX_DEVICE=^cpu without a GPU: ENOTFOUND");
        like(phx_last_error(), "no device left", "message says nothing is left");
    } else {
        skip(11, "a CUDA device is present");
    }
    setenv("PHX_DEVICE", "cpu", 1);
    ok(phx_device_default(&out) == PHX_OK && out.kind == PHX_DEVICE_CPU, "PHX_DEVICE=cpu");
    setenv("PHX_DEVICE", "npu", 1);
    is_int(phx_device_default(&out), PHX_EINVAL, "PHX_DEVICE=npu: EINVAL");
    like(phx_last_error(), "PHX_DEVICE='npu'", "message names the setting");
    const char *empty[] = {"cpu,", ",cpu", "cuda,,cpu"};
    for (int i = 0; i < 3; i++) {
        setenv("PHX_DEVICE", empty[i], 1);
        ok(phx_device_default(&out) == PHX_EINVAL && strstr(phx_last_error(), "has an empty entry"),
           "PHX_DEVICE='%s': EINVAL, an empty entry (as PHX_COMM's)", empty[i]);
    }
    unsetenv("PHX_DEVICE");

    /* statistics */
    phx_memory_stats a = PHX_MEMORY_STATS_INIT, b = PHX_MEMORY_STATS_INIT;
    phx_device_memory_stats(phx_cpu(), &a);
    int64_t s[1] = {1000};
    phx_tensor *t = phx_tensor_new(PHX_F32, 1, s, phx_cpu());
    phx_device_memory_stats(phx_cpu(), &b);
    ok(b.in_use_bytes - a.in_use_bytes == 4000 && b.alloc_calls == a.alloc_calls + 1 && b.peak_bytes >= b.in_use_bytes,
       "memory stats: +4000 bytes in use, one more call, peak >= in use");
    phx_tensor_free(t);
    phx_device_memory_stats(phx_cpu(), &a);
    ok(a.in_use_bytes == b.in_use_bytes - 4000 && a.peak_bytes == b.peak_bytes, "freed: in use drops, peak stays");
    is_int(phx_device_synchronize(phx_cpu()), PHX_OK, "synchronize the CPU: a no-op");
    return done_testing();
}
