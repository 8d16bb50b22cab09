/* The machine's sgemm peak, as bench/dp and bench/step measure it: one
 * thread running single-threaded phx_gemm (our packed GEMM where the
 * kernels use AVX-512, else OpenBLAS) on 256x1024x1024 f32 products,
 * then two threads at once (each with one BLAS thread), best of 3 rounds.
 * Two at once is the 2-core peak the training steps are held to; it is
 * also the BLAS concurrency check of bench/dp (do concurrent
 * single-threaded GEMM calls really run in parallel?).
 * Include after bench/bench-util.h. */
#ifndef PHX_BENCH_PEAK_H
#define PHX_BENCH_PEAK_H

#include <pthread.h>

enum { BENCH_PEAK_M = 256, BENCH_PEAK_K = 1024, BENCH_PEAK_N = 1024, BENCH_PEAK_REPS = 10 };

typedef struct bench_peak {
    double serial_ms, parallel_ms; /* 2 x REPS products: one after the other, two threads at once */
    double one_gflops, two_gflops; /* one thread's rate, two threads' rate */
} bench_peak;

typedef struct bench_peak_job {
    phx_tensor *a, *b, *c;
} bench_peak_job;

static void *bench_peak_run(void *arg)
{
    bench_peak_job *j = arg;
    for (int r = 0; r < BENCH_PEAK_REPS; r++)
        if (phx_gemm(false, true, 1.0f, j->a, j->b, 0.0f, j->c) != PHX_OK) bench_die("phx_gemm");
    return NULL;
}

/* Measures at one BLAS thread (and leaves the thread count there). */
static inline bench_peak bench_sgemm_peak(void)
{
    bench_peak_job j[2];
    int64_t as[2] = {BENCH_PEAK_M, BENCH_PEAK_K}, bs[2] = {BENCH_PEAK_N, BENCH_PEAK_K},
            cs[2] = {BENCH_PEAK_M, BENCH_PEAK_N};
    phx_rng *rng = phx_rng_new(1);
    for (int i = 0; i < 2; i++) {
        j[i].a = phx_tensor_new(PHX_F32, 2, as, phx_cpu());
        j[i].b = phx_tensor_new(PHX_F32, 2, bs, phx_cpu());
        j[i].c = phx_tensor_new(PHX_F32, 2, cs, phx_cpu());
        if (!j[i].a || !j[i].b || !j[i].c) bench_die("sgemm peak: tensors");
        phx_rng_uniform(rng, j[i].a, -1, 1);
        phx_rng_uniform(rng, j[i].b, -1, 1);
    }
    phx_set_num_threads(1);
    bench_peak_run(&j[0]);
    double serial = 1e30, par = 1e30;
    for (int round = 0; round < 3; round++) {
        double t0 = bench_now();
        bench_peak_run(&j[0]);
        bench_peak_run(&j[1]);
        double t1 = bench_now();
        pthread_t th[2];
        for (int i = 0; i < 2; i++)
            if (pthread_create(&th[i], NULL, bench_peak_run, &j[i])) bench_die("sgemm peak: pthread_create");
        for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
        double t2 = bench_now();
        serial = t1 - t0 < serial ? t1 - t0 : serial;
        par = t2 - t1 < par ? t2 - t1 : par;
    }
    for (int i = 0; i < 2; i++) {
        phx_tensor_free(j[i].a);
        phx_tensor_free(j[i].b);
        phx_tensor_free(j[i].c);
    }
    phx_rng_free(rng);
    double gf = 2.0 * 2 * BENCH_PEAK_REPS * BENCH_PEAK_M * BENCH_PEAK_N * (double)BENCH_PEAK_K * 1e-9;
    return (bench_peak){serial * 1e3, par * 1e3, gf / serial, gf / par};
}

#endif
