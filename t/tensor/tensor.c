/* Tensors: metadata, views sharing storage, freeing in any order (run
 * under valgrind too), reference counts across threads, copies, casts,
 * fill/axpby/reduce/get, and the error messages. */
#include "config.h"
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

static uint64_t in_use(void)
{
    phx_memory_stats ms = PHX_MEMORY_STATS_INIT;
    phx_device_memory_stats(phx_cpu(), &ms);
    return ms.in_use_bytes;
}

static void *churn(void *arg)
{
    phx_tensor *t = arg;
    for (int i = 0; i < 100000; i++) phx_tensor_free(phx_tensor_retain(t));
    for (int i = 0; i < 1000; i++) {
        int64_t s[1] = {4};
        phx_tensor_free(phx_tensor_view(t, i % 60, 1, s));
    }
    return NULL;
}

int main(void)
{
    plan(66);
    char buf[64];
    uint64_t base_use = in_use();

    /* 1-9: metadata */
    int64_t s34[2] = {3, 4};
    phx_tensor *t = phx_tensor_new(PHX_F32, 2, s34, phx_cpu());
    ok(t != NULL, "new f32 (3, 4)");
    is_int(phx_tensor_ndim(t), 2, "ndim");
    is_int(phx_tensor_numel(t), 12, "numel");
    is_int(phx_tensor_nbytes(t), 48, "nbytes");
    is_int(phx_tensor_dim(t, -1), 4, "dim(-1)");
    is_int(phx_tensor_dim(t, 2), 0, "dim out of range is 0");
    is_str(phx_tensor_shape_str(t, buf, sizeof buf), "(3, 4)", "shape string");
    is_int((uintptr_t)phx_tensor_data(t) % 64, 0, "CPU storage is 64-byte aligned");
    is_int(in_use() - base_use, 48, "memory stats count the storage bytes");

    /* 10-12: scalar and empty */
    phx_tensor *sc = phx_tensor_zeros(PHX_I64, 0, NULL, phx_cpu());
    int64_t s0[2] = {5, 0};
    phx_tensor *em = phx_tensor_zeros(PHX_BF16, 2, s0, phx_cpu());
    is_int(phx_tensor_numel(sc), 1, "a 0-dim tensor holds one element");
    is_str(phx_tensor_shape_str(sc, buf, sizeof buf), "()", "scalar shape string");
    ok(em && phx_tensor_numel(em) == 0, "a (5, 0) tensor is empty");

    /* 13-20: views share storage */
    float init[12];
    for (int i = 0; i < 12; i++) init[i] = (float)i;
    phx_tensor_from_host(t, init);
    int64_t s2[1] = {2}, s22[2] = {2, 2};
    phx_tensor *v = phx_tensor_view(t, 5, 2, s22);
    ok(v && phx_tensor_same_storage(v, t), "view shares the base's storage");
    is_int(phx_tensor_offset(v), 5, "view offset");
    ok((char *)phx_tensor_data(v) == (char *)phx_tensor_data(t) + 20, "view data = base data + 5 elements");
    phx_tensor *vv = phx_tensor_view(v, 1, 1, s2);
    is_int(phx_tensor_offset(vv), 6, "view of a view: offsets add");
    phx_tensor_fill(vv, -1.0);
    double g;
    phx_tensor_get(t, 6, &g);
    ok(g == -1.0, "writing through the view of a view changes the base (got %g)", g);
    phx_tensor_get(t, 8, &g);
    ok(g == 8.0, "elements outside the view are untouched");
    is_str(phx_tensor_shape_str(vv, buf, sizeof buf), "(2,)", "1-D shape string");
    ok(!phx_tensor_same_storage(t, sc), "different tensors do not share storage");

    /* 21-25: freeing in any order */
    uint64_t use_before = in_use();
    phx_tensor_free(t); /* base first: the views keep the storage */
    phx_tensor_get(vv, 0, &g);
    ok(g == -1.0 && in_use() == use_before, "base freed first: the view still reads its data, storage kept");
    phx_tensor_free(vv);
    ok(in_use() == use_before, "storage kept while one view remains");
    phx_tensor_retain(v);
    phx_tensor_free(v);
    phx_tensor_get(v, 3, &g);
    ok(g == 8.0, "retain + free leaves the handle valid (got %g)", g);
    phx_tensor_free(v);
    is_int(use_before - in_use(), 48, "the last view frees the storage");
    /* many views, freed in a shuffled order */
    int64_t s100[1] = {100}, s10[1] = {10};
    phx_tensor *big = phx_tensor_zeros(PHX_F16, 1, s100, phx_cpu());
    phx_tensor *views[10];
    for (int i = 0; i < 10; i++) views[i] = phx_tensor_view(big, 10 * i, 1, s10);
    phx_tensor_free(big);
    int order[10] = {7, 2, 9, 0, 4, 1, 8, 3, 6, 5};
    for (int i = 0; i < 10; i++) phx_tensor_free(views[order[i]]);
    phx_tensor_free(NULL);
    ok(in_use() == use_before - 48, "ten views freed in shuffled order after their base: storage released once");

    /* 26-27: reference counts from two threads */
    int64_t s64[1] = {64};
    phx_tensor *shared = phx_tensor_zeros(PHX_F32, 1, s64, phx_cpu());
    uint64_t u0 = in_use();
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, churn, shared);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    ok(in_use() == u0, "two threads retaining/freeing handles and views: storage alive");
    phx_tensor_free(shared);
    ok(in_use() == u0 - 256, "then freed by the last reference");

    /* 28-37: bad arguments */
    int64_t bad[2] = {3, -1}, five[5] = {1, 1, 1, 1, 1};
    ok(phx_tensor_new(PHX_F32, 2, bad, phx_cpu()) == NULL, "negative dim: NULL");
    like(phx_last_error(), "dim 1 is -1, expected >= 0", "message names the dim and value");
    ok(phx_tensor_new(PHX_F32, 5, five, phx_cpu()) == NULL, "5 dims: NULL");
    like(phx_last_error(), "ndim 5, expected 0..4", "message names ndim");
    ok(phx_tensor_new((phx_dtype)9, 1, s2, phx_cpu()) == NULL, "bad dtype: NULL");
    like(phx_last_error(), "dtype 9", "message names the dtype");
    phx_tensor *b12 = phx_tensor_zeros(PHX_F32, 2, s34, phx_cpu());
    int64_t s8[1] = {8};
    ok(phx_tensor_view(b12, 5, 1, s8) == NULL, "a view past the end: NULL");
    like(phx_last_error(), "8 elements at offset 5 do not fit in base (3, 4) of 12 elements",
         "message names offset, size and base");
    ok(phx_tensor_view(b12, -1, 1, s2) == NULL, "negative view offset: NULL");
    phx_device nodev = {7, 0};
    ok(phx_tensor_new(PHX_F32, 1, s2, nodev) == NULL && strstr(phx_last_error(), "device kind 7"),
       "unknown device kind: NULL, named");

    /* 38-45: copy, cast, host transfers */
    float src12[12], out12[12];
    for (int i = 0; i < 12; i++) src12[i] = 0.5f * (float)i - 2.0f;
    phx_tensor *a = phx_tensor_from_data(PHX_F32, 2, s34, src12);
    is_int(phx_tensor_copy(b12, a), PHX_OK, "copy f32 -> f32");
    phx_tensor_to_host(b12, out12);
    ok(memcmp(out12, src12, sizeof out12) == 0, "copy reproduces the data");
    int64_t s12[1] = {12};
    phx_tensor *flat = phx_tensor_new(PHX_F32, 1, s12, phx_cpu());
    is_int(phx_tensor_copy(flat, a), PHX_OK, "copy between shapes of equal numel");
    /* overlapping views of one storage */
    int64_t s6[1] = {6};
    phx_tensor *lo = phx_tensor_view(b12, 0, 1, s6), *hi = phx_tensor_view(b12, 3, 1, s6);
    phx_tensor_copy(hi, lo);
    phx_tensor_to_host(b12, out12);
    ok(out12[3] == src12[0] && out12[8] == src12[5], "overlapping copy within one storage behaves like memmove");
    phx_tensor *h = phx_tensor_new(PHX_F16, 2, s34, phx_cpu());
    is_int(phx_tensor_copy(h, a), PHX_EINVAL, "copy f32 -> f16: EINVAL");
    like(phx_last_error(), "dst is f16, src is f32", "message names both dtypes");
    phx_tensor *c5 = phx_tensor_new(PHX_F32, 1, s2, phx_cpu());
    is_int(phx_tensor_copy(c5, a), PHX_EINVAL, "copy 12 -> 2 elements: EINVAL");
    like(phx_last_error(), "dst (2,) has 2 elements, src (3, 4) has 12", "message names both shapes");

    /* 46-48: cast */
    phx_tensor_cast(h, a);
    phx_tensor_get(h, 5, &g);
    ok(g == 0.5, "cast f32 -> f16 (element 5 = %g)", g);
    phx_tensor *i64 = phx_tensor_new(PHX_I64, 2, s34, phx_cpu());
    phx_tensor_cast(i64, a);
    phx_tensor_get(i64, 1, &g);
    ok(g == -1.0, "cast f32 -> i64 truncates toward zero (-1.5 -> %g)", g);
    is_int(phx_tensor_cast(c5, a), PHX_EINVAL, "cast with different numel: EINVAL");

    /* 49-55: fill, axpby, reduce */
    phx_tensor *x = phx_tensor_from_data(PHX_F32, 2, s34, src12);
    phx_tensor *y = phx_tensor_new(PHX_F32, 2, s34, phx_cpu());
    phx_tensor_fill(y, NAN);
    phx_tensor_axpby(2.0f, x, 0.0f, y); /* beta = 0 ignores the NaN in y */
    phx_tensor_axpby(1.0f, x, -0.5f, y);
    phx_tensor_to_host(y, out12);
    int good = 1;
    for (int i = 0; i < 12; i++) good &= out12[i] == (float)(1.0 * src12[i] - 0.5 * (2.0 * src12[i]));
    ok(good, "axpby: y = x - 0.5 (2x), with beta = 0 ignoring NaN first");
    phx_tensor_axpby(0.0f, NULL, 3.0f, y);
    double sum, mx, mn, avg;
    phx_tensor_reduce(x, PHX_SUM, &sum);
    phx_tensor_reduce(x, PHX_MAX, &mx);
    phx_tensor_reduce(x, PHX_MIN, &mn);
    phx_tensor_reduce(x, PHX_AVG, &avg);
    ok(sum == 9.0 && mx == 3.5 && mn == -2.0 && avg == 0.75, "reduce sum/max/min/avg = %g %g %g %g (9, 3.5, -2, 0.75)",
       sum, mx, mn, avg);
    phx_tensor_reduce(y, PHX_SUM, &sum);
    ok(sum == 0.0, "axpby with x NULL scales y (sum %g)", sum);
    phx_tensor_fill(i64, 3e9);
    phx_tensor_reduce(i64, PHX_SUM, &sum);
    ok(sum == 36e9, "fill/reduce i64 beyond 32 bits (sum %.0f)", sum);
    is_int(phx_tensor_axpby(1.0f, x, 1.0f, i64), PHX_EINVAL, "axpby into i64: EINVAL");
    like(phx_last_error(), "y is i64, expected f32, f16 or bf16", "message names the dtype");
    is_int(phx_tensor_reduce(em, PHX_MAX, &mx), PHX_EINVAL, "max of an empty tensor: EINVAL");

    /* 56-62: get, NULL arguments, dtype helpers */
    is_int(phx_tensor_get(x, 12, &g), PHX_EINVAL, "get past the end: EINVAL");
    like(phx_last_error(), "index 12, expected 0 <= index < 12", "message names the index");
    is_int(phx_tensor_copy(NULL, x), PHX_EINVAL, "copy into NULL: EINVAL");
    is_int(phx_dtype_size(PHX_BF16), 2, "bf16 is 2 bytes");
    is_str(phx_dtype_name(PHX_I64), "i64", "dtype name");
    ok(phx_dtype_is_float(PHX_F16) && !phx_dtype_is_float(PHX_I32), "is_float");
    phx_tensor *all[] = {sc, em, b12, a, flat, lo, hi, h, c5, i64, x, y};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) phx_tensor_free(all[i]);
    is_int(in_use(), base_use, "every storage released at the end");

    /* 63-66 (after the storage count: operations keep a cache of result
     * storage): a view records no gradient, so a base that requires one
     * is refused in grad mode (PyTorch's view would carry it); without
     * grad mode, or of a detached base, it is a plain view; phx_narrow is
     * the differentiable one */
    {
        phx_scope *vs = phx_scope_begin();
        phx_tensor *r = phx_tensor_zeros(PHX_F32, 2, s34, phx_cpu());
        phx_tensor_set_requires_grad(r, true);
        phx_tensor *v = phx_tensor_view(r, 4, 1, s2);
        ok(!v && strstr(phx_last_error(), "requires a gradient") && strstr(phx_last_error(), "phx_narrow"),
           "view of a leaf that requires a gradient, grad mode on: refused naming the alternatives: %s",
           phx_last_error());
        bool prev = phx_set_grad_enabled(false);
        v = phx_tensor_view(r, 4, 1, s2);
        phx_set_grad_enabled(prev);
        ok(v && !phx_tensor_requires_grad(v) && phx_tensor_same_storage(v, r), "the same view with grad mode off");
        phx_tensor_free(v);
        v = phx_tensor_view(phx_tensor_detach(r), 4, 1, s2);
        ok(v && !phx_tensor_requires_grad(v), "a view of phx_tensor_detach(base)");
        phx_tensor_free(v);
        phx_tensor *n = phx_narrow(phx_reshape(r, 1, s12), 0, 4, 2);
        double g4 = 0, g6 = 1;
        if (n && phx_backward(phx_sum(n, 0, NULL, false)) == PHX_OK) {
            phx_tensor_get(phx_tensor_grad(r), 4, &g4);
            phx_tensor_get(phx_tensor_grad(r), 6, &g6);
        }
        ok(g4 == 1 && g6 == 0, "phx_narrow of the base is differentiable: its gradient reaches the base");
        phx_tensor_free(r);
        phx_scope_end(vs);
    }
    return done_testing();
}
