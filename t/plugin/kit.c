/* The plugin author's kit (phalanx/plugin/kit.h): reductions of every
 * dtype (f16/bf16 accumulate in f32 and round once), divide, the abort
 * key; the records the stall check compares (phx_kit_record_compare,
 * phx_kit_record_exchange); the ordered queue through a comm plugin built on it
 * (t/plugins/abi-comm.c with ABI_KIT), with hundreds of asynchronous
 * collectives in flight, some run inline. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "phalanx/plugin/kit.h"
#include "t/tap.h"

#define OPS 300

/* Each rank issues OPS all-reduces without waiting (sizes alternate 4,
 * inline-eligible, and 64 elements, queued), then waits for all: op i of
 * rank r holds (i+1)(r+1) + j, so op i's sum is (i+1) * 3 + 2 j in a world
 * of 2 only when both ranks ran their ops in the same order. */
static int async_ops(int rank, void *arg)
{
    (void)arg;
    phx_comm_opts o = PHX_COMM_OPTS_INIT;
    o.backend = "kit";
    phx_comm *c = NULL;
    if (phx_comm_init(&o, &c)) {
        printf("# rank %d: %s\n", rank, phx_last_error());
        return 100;
    }
    phx_tensor *t[OPS];
    phx_work *w[OPS];
    int bad = 0;
    for (int i = 0; i < OPS; i++) {
        int64_t n = i % 2 ? 64 : 4;
        float v[64];
        for (int j = 0; j < n; j++) v[j] = (float)((i + 1) * (rank + 1) + j);
        t[i] = phx_tensor_new(PHX_F32, 1, &n, phx_cpu());
        if (phx_tensor_from_host(t[i], v) || phx_comm_allreduce(c, t[i], PHX_SUM, &w[i])) {
            printf("# rank %d op %d: %s\n", rank, i, phx_last_error());
            return 101;
        }
    }
    for (int i = OPS - 1; i >= 0; i--) { /* the last first: it completes after the rest */
        float v[64];
        if (phx_work_wait(w[i], 60) || phx_tensor_to_host(t[i], v)) bad++;
        for (int j = 0; j < (i % 2 ? 64 : 4); j++)
            if (v[j] != (float)((i + 1) * 3 + 2 * j)) {
                if (!bad) printf("# rank %d op %d [%d] = %g, expected %d\n", rank, i, j, v[j], (i + 1) * 3 + 2 * j);
                bad++;
            }
        phx_work_free(w[i]);
        phx_tensor_free(t[i]);
    }
    /* f16 average through the kit's reduction: (1 + 2) / 2 = 1.5 */
    int64_t one = 1;
    phx_tensor *h = phx_tensor_zeros(PHX_F16, 1, &one, phx_cpu());
    double got = 0;
    if (phx_tensor_fill(h, rank + 1) || phx_comm_allreduce(c, h, PHX_AVG, NULL) || phx_tensor_get(h, 0, &got) ||
        got != 1.5)
        bad++, printf("# f16 avg: %g (%s)\n", got, phx_last_error());
    phx_tensor_free(h);
    phx_comm_free(c);
    return bad;
}

int main(void)
{
    char dir[PATH_MAX];
    const char *b = getenv("top_builddir");
    snprintf(dir, sizeof dir, "%s/t/plugins/abi/.libs", b ? b : ".");
    setenv("PHX_PLUGIN_PATH", dir, 1);
    setenv("PHX_PLUGIN_PATH_ONLY", "1", 1);
    plan(25);

    /* f32, three inputs, two outputs, an offset */
    float a[5] = {1, 2, 3, 4, 5}, bb[5] = {10, 20, 30, 40, 50}, cc[5] = {100, 200, 300, 400, 500};
    float o1[2], o2[2];
    const void *in3[3] = {a, bb, cc};
    void *outs[2] = {o1, o2};
    is_int(phx_kit_reduce(outs, 2, in3, 3, 3, 2, PHX_F32, PHX_SUM, 1), PHX_OK, "f32 sum of 3 inputs into 2 outputs");
    ok(o1[0] == 444 && o1[1] == 555 && o2[0] == 444 && o2[1] == 555, "from offset 3: 444 555 in both outputs");

    /* f16: 2048 + 1 + 1. Rounded per step it stays 2048 (2049 is a tie,
     * to even); accumulated in f32 and rounded once it is 2050 (0x6801). */
    uint16_t h2048 = 0x6800, h1 = 0x3C00, hout;
    const void *hin[3] = {&h2048, &h1, &h1};
    void *hp = &hout;
    phx_kit_reduce(&hp, 1, hin, 3, 0, 1, PHX_F16, PHX_SUM, 1);
    is_int(hout, 0x6801, "f16 2048 + 1 + 1 = 2050: accumulated in f32, rounded once");
    /* bf16: 256 + 1 + 1 = 258 (0x4381); per step it would stay 256 */
    uint16_t b256 = 0x4380, b1 = 0x3F80;
    const void *bin[3] = {&b256, &b1, &b1};
    phx_kit_reduce(&hp, 1, bin, 3, 0, 1, PHX_BF16, PHX_SUM, 1);
    is_int(hout, 0x4381, "bf16 256 + 1 + 1 = 258");
    /* avg divides the f32 sum once: (1 + 2) / 2 = 1.5 (f16 0x3E00) */
    uint16_t h2 = 0x4000;
    const void *avg_in[2] = {&h1, &h2};
    phx_kit_reduce(&hp, 1, avg_in, 2, 0, 1, PHX_F16, PHX_AVG, 2);
    is_int(hout, 0x3E00, "f16 avg of 1 and 2 = 1.5");
    /* integers wrap; averages truncate toward zero */
    int32_t imax = INT32_MAX, ione = 1, iout;
    const void *iin[2] = {&imax, &ione};
    void *ip = &iout;
    phx_kit_reduce(&ip, 1, iin, 2, 0, 1, PHX_I32, PHX_SUM, 1);
    ok(iout == INT32_MIN, "i32 INT32_MAX + 1 wraps to INT32_MIN");
    int64_t l7 = -7, l8 = -8, lout;
    const void *lin[2] = {&l7, &l8};
    void *lp = &lout;
    phx_kit_reduce(&lp, 1, lin, 2, 0, 1, PHX_I64, PHX_AVG, 2);
    ok(lout == -7, "i64 avg of -7 and -8 = -7 (truncated toward zero)");
    /* max propagates NaN; min picks the least */
    float fx[2] = {1, NAN}, fy[2] = {NAN, -3}, fo[2];
    const void *fin[2] = {fx, fy};
    void *fp = fo;
    phx_kit_reduce(&fp, 1, fin, 2, 0, 2, PHX_F32, PHX_MAX, 1);
    ok(isnan(fo[0]) && isnan(fo[1]), "max with a NaN is NaN, whichever input holds it");
    float gx[1] = {2}, gy[1] = {-3};
    const void *gin[2] = {gx, gy};
    phx_kit_reduce(&fp, 1, gin, 2, 0, 1, PHX_F32, PHX_MIN, 1);
    ok(fo[0] == -3, "min");
    /* in place: an output that is an input */
    float y[3] = {1, 2, 3}, z[3] = {4, 5, 6};
    const void *yz[2] = {y, z};
    void *yp = y;
    phx_kit_reduce(&yp, 1, yz, 2, 0, 3, PHX_F32, PHX_SUM, 1);
    ok(y[0] == 5 && y[1] == 7 && y[2] == 9, "in place into the first input");
    uint16_t d = 0x4200; /* 3.0 */
    is_int(phx_kit_divide(&d, 1, PHX_F16, 2), PHX_OK, "divide");
    is_int(d, 0x3E00, "f16 3 / 2 = 1.5");
    is_int(phx_kit_reduce(&yp, 1, yz, 2, 0, 3, (phx_dtype)9, PHX_SUM, 1), PHX_EINVAL, "dtype 9: PHX_EINVAL");
    like(phx_last_error(), "phx_kit_reduce: dtype 9, expected f32, f16, bf16, i32 or i64", "... saying so");
    is_int(phx_kit_reduce(&yp, 1, yz, 2, 0, 3, PHX_F32, (phx_reduce_op)7, 1), PHX_EINVAL, "op 7: PHX_EINVAL");

    /* the abort key */
    phx_store *st = phx_store_new_local();
    char why[64] = "unchanged";
    ok(!phx_kit_aborted(st, why, sizeof why) && strcmp(why, "unchanged") == 0, "no abort key: 0, why untouched");
    phx_store_set(st, PHX_KIT_ABORT_KEY, "rank 3 returned 1", 17);
    ok(phx_kit_aborted(st, why, sizeof why) && strcmp(why, "rank 3 returned 1") == 0,
       "abort key set: 1 and its value (%s)", why);
    phx_store_free(st);

    /* records of what ranks issued: the stall check's comparison. The
     * texts are made by phx_kit_op_text, as the kit makes them. */
    {
        phx_kit_op ar = {.kind = PHX_KIT_ALLREDUCE, .count = 8, .dt = PHX_F32, .op = PHX_SUM};
        phx_kit_op bc = {.kind = PHX_KIT_BROADCAST, .count = 8, .dt = PHX_F32, .root = 1};
        char t_ar[160], t_bc[160], r0[1024], r1[1024], late[1024], msg[1024] = "";
        phx_kit_op_text(&ar, t_ar, sizeof t_ar);
        phx_kit_op_text(&bc, t_bc, sizeof t_bc);
        snprintf(r0, sizeof r0, "phx-kit-record 0 3 1\n0 %s\n1 %s\n2 %s\n", t_ar, t_ar, t_ar);
        snprintf(r1, sizeof r1, "phx-kit-record 1 3 1\n0 %s\n1 %s\n2 %s\n", t_ar, t_ar, t_bc);
        snprintf(late, sizeof late, "phx-kit-record 1 2 0\n0 %s\n1 %s\n", t_ar, t_ar);
        char want[400];
        snprintf(want, sizeof want,
                 "rank 0 issued %s as collective #2 but rank 1 issued %s: the ranks went out of step", t_ar, t_bc);
        ok(phx_kit_record_compare(0, r0, 1, r1, msg, sizeof msg) == 1 && strstr(msg, want),
           "records differing at #2: 1, naming both collectives (%s)", msg);
        ok(phx_kit_record_compare(0, r0, 1, late, msg, sizeof msg) == 0,
           "a peer that has not issued #2 yet (late) does not differ");
        ok(phx_kit_record_compare(0, r0, 1, r0, msg, sizeof msg) == 0, "equal records do not differ");
        ok(phx_kit_record_compare(0, r0, 1, "garbage\n2 x\n", msg, sizeof msg) == 0, "a malformed record: 0");
        /* through a store, as the kit's monitor exchanges them */
        phx_store *rs = phx_store_new_local();
        int64_t gen = -1;
        ok(phx_kit_record_exchange(rs, "c0/t/", 1, 2, r1, 1, &gen, msg, sizeof msg) == 0,
           "the first rank to publish finds nobody to compare with");
        ok(phx_kit_record_exchange(rs, "c0/t/", 0, 2, r0, 1, &gen, msg, sizeof msg) == 1 && strstr(msg, want),
           "the second finds the first's record and the collective that differs");
        phx_store_free(rs);
    }

    /* the queue, through a plugin built on it */
    char so[PATH_MAX + 32];
    snprintf(so, sizeof so, "%s/phx-comm-kit.so", dir);
    if (access(so, R_OK) != 0) {
        skip(2, "phx-comm-kit.so not built");
        return done_testing();
    }
    is_int(phx_spawn(2, async_ops, NULL), PHX_OK, "%d asynchronous all-reduces per rank, in order, all right", OPS);
    is_int(phx_spawn(1, async_ops, NULL) == PHX_OK, 0, "a world of 1 gives other sums: the check can fail");
    return done_testing();
}
