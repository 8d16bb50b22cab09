/* Creation: arange and eye against torch 1.13 (t/ref/ops_shape.txt), full,
 * rand against the Philox stream (phx_philox_uniform), randn's moments,
 * results owned by the open scope, and argument errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

static int dtype_of(const char *s, phx_dtype *dt)
{
    static const char *const names[] = {"float32", "float16", "bfloat16", "int32", "int64"};
    static const phx_dtype dts[] = {PHX_F32, PHX_F16, PHX_BF16, PHX_I32, PHX_I64};
    for (int i = 0; i < 5; i++)
        if (!strcmp(s, names[i])) return *dt = dts[i], 1;
    return 0;
}

/* 1 when t holds exactly the n values after ":" in save. */
static int same_values(const phx_tensor *t, char **save, int64_t *count)
{
    char *tok;
    int64_t n = 0;
    int same = 1;
    while ((tok = strtok_r(NULL, " \n", save))) {
        double v = NAN;
        same &= n < phx_tensor_numel(t) && phx_tensor_get(t, n, &v) == PHX_OK && v == strtod(tok, NULL);
        n++;
    }
    *count = n;
    return same && n == phx_tensor_numel(t);
}

int main(void)
{
    const char *top = getenv("top_srcdir");
    char path[4096];
    snprintf(path, sizeof path, "%s/t/ref/ops_shape.txt", top ? top : ".");
    FILE *f = fopen(path, "r");
    if (!f) skip_all("t/ref/ops_shape.txt not found (set top_srcdir)");
    char *line = NULL, *save;
    size_t cap = 0;
    int n_ref = 0;
    while (getline(&line, &cap, f) > 0) {
        char *k = strtok_r(line, " \n", &save);
        if (!k || (strcmp(k, "arange") && strcmp(k, "eye"))) continue;
        phx_tensor *t;
        char what[128];
        if (!strcmp(k, "arange")) {
            double a = strtod(strtok_r(NULL, " \n", &save), NULL), b = strtod(strtok_r(NULL, " \n", &save), NULL),
                   c = strtod(strtok_r(NULL, " \n", &save), NULL);
            phx_dtype dt;
            if (!dtype_of(strtok_r(NULL, " \n", &save), &dt)) continue;
            t = phx_arange(a, b, c, dt, phx_cpu());
            snprintf(what, sizeof what, "arange(%g, %g, %g) %s", a, b, c, phx_dtype_name(dt));
        } else {
            int64_t n = atoll(strtok_r(NULL, " \n", &save)), m = atoll(strtok_r(NULL, " \n", &save));
            t = phx_eye(n, m, PHX_F32, phx_cpu());
            snprintf(what, sizeof what, "eye(%lld, %lld)", (long long)n, (long long)m);
        }
        strtok_r(NULL, " \n", &save); /* ":" */
        int64_t count = 0;
        int same = t && same_values(t, &save, &count);
        ok(same, "%s equals torch's %lld values%s", what, (long long)count, t ? "" : phx_last_error());
        phx_tensor_free(t);
        n_ref++;
    }
    free(line);
    fclose(f);
    ok(n_ref >= 8, "%d creation reference cases", n_ref);

    /* full */
    int64_t s23[2] = {2, 3};
    phx_tensor *fl = phx_full(2, s23, -2.5, PHX_BF16, phx_cpu());
    double v = 0, sum = 0;
    int good = fl && phx_tensor_dtype(fl) == PHX_BF16 && phx_tensor_reduce(fl, PHX_SUM, &sum) == PHX_OK;
    ok(good && sum == -15, "full((2, 3), -2.5) bf16 sums to -15 (%g)", sum);
    phx_tensor_free(fl);

    /* rand: the Philox stream from the generator's offset, which advances. */
    phx_rng *rng = phx_rng_new(77);
    phx_rng_set_offset(rng, 5);
    int64_t s1000[1] = {1000};
    phx_tensor *r = phx_rand(1, s1000, rng, PHX_F32, phx_cpu());
    int same = r != NULL;
    for (int i = 0; same && i < 1000; i++) {
        phx_tensor_get(r, i, &v);
        same = v == phx_philox_uniform(77, 5 + (uint64_t)i) && v >= 0 && v < 1;
    }
    ok(same, "rand gives U[0, 1) draws i = 5.. of seed 77's stream");
    ok(phx_rng_offset(rng) == 1005, "and advances the offset by 1000 (%llu)", (unsigned long long)phx_rng_offset(rng));
    phx_tensor_free(r);
    int64_t s10k[1] = {20000};
    phx_tensor *g = phx_randn(1, s10k, rng, PHX_F32, phx_cpu());
    double mean = 0, m2 = 0;
    for (int i = 0; g && i < 20000; i++) {
        phx_tensor_get(g, i, &v);
        mean += v / 20000;
        m2 += v * v / 20000;
    }
    ok(g && fabs(mean) < 0.03 && fabs(m2 - mean * mean - 1) < 0.05, "randn: mean %.4f, variance %.4f", mean,
       m2 - mean * mean);
    phx_tensor_free(g);
    phx_tensor *h = phx_rand(1, s1000, rng, PHX_F16, phx_cpu());
    ok(h && phx_tensor_dtype(h) == PHX_F16, "rand in f16");
    phx_tensor_free(h);

    /* Ownership: results of creation belong to the open scope. */
    phx_scope *sc = phx_scope_begin();
    phx_tensor *a = phx_arange(0, 4, 1, PHX_I64, phx_cpu());
    ok(a && phx_tensor_numel(a) == 4, "arange inside a scope (freed by it)");
    phx_scope_end(sc);

    /* Errors. */
    ok(!phx_arange(0, 1, 0, PHX_F32, phx_cpu()) && strstr(phx_last_error(), "step 0"), "arange step 0: %s",
       phx_last_error());
    ok(!phx_arange(0, 5, -1, PHX_F32, phx_cpu()) && strstr(phx_last_error(), "sign"), "arange wrong sign: %s",
       phx_last_error());
    ok(!phx_rand(1, s1000, rng, PHX_I64, phx_cpu()) && strstr(phx_last_error(), "i64"), "rand of i64: %s",
       phx_last_error());
    ok(!phx_rand(1, s1000, NULL, PHX_F32, phx_cpu()) && strstr(phx_last_error(), "rng is NULL"), "rand, NULL rng: %s",
       phx_last_error());
    ok(!phx_eye(-1, 2, PHX_F32, phx_cpu()) && strstr(phx_last_error(), "phx_eye"), "eye(-1, 2): %s", phx_last_error());
    int64_t neg[1] = {-3};
    ok(!phx_full(1, neg, 0, PHX_F32, phx_cpu()) && strstr(phx_last_error(), "phx_full"), "full of size -3: %s",
       phx_last_error());
    phx_rng_free(rng);
    return done_testing();
}
