/* PHX_DEBUG=detail: ranks that issue different collectives (count, dtype,
 * kind) all get PHX_EDESYNC naming the first rank that differs; matching
 * collectives still work, before and after. Both backends, world 3. */
#include <stdlib.h>
#include "phalanx/phalanx.h"
#include "t/comm_harness.h"

static h_shared *H;

static int rank_main(int rank, void *arg)
{
    const char *be = arg;
    phx_comm *c;
    if (phx_comm_init(NULL, &c)) {
        h_check(H, rank, 0, phx_last_error(), "%s: init", be);
        return 1;
    }
    int64_t n20 = 20, n10 = 10;
    phx_tensor *a = phx_tensor_zeros(PHX_F32, 1, &n20, phx_cpu()), *b = phx_tensor_zeros(PHX_F32, 1, &n10, phx_cpu());
    phx_tensor *i20 = phx_tensor_zeros(PHX_I32, 1, &n20, phx_cpu());
    phx_tensor_fill(a, 1.0);
    double x = 0;
    phx_status st = phx_comm_allreduce(c, a, PHX_SUM, NULL);
    phx_tensor_get(a, 19, &x);
    h_check(H, rank, st == PHX_OK && x == 3.0, phx_last_error(), "%s: matching all-reduce works under PHX_DEBUG=detail",
            be);

    /* rank 2 all-reduces 10 elements, the others 20 */
    st = phx_comm_allreduce(c, rank == 2 ? b : a, PHX_SUM, NULL);
    h_check(H, rank, st == PHX_EDESYNC, phx_last_error(), "%s: a count mismatch is PHX_EDESYNC on every rank", be);
    h_check(H, rank,
            strstr(phx_last_error(),
                   "rank 0 issued allreduce(count=20, f32, sum), rank 2 issued "
                   "allreduce(count=10, f32, sum)") != NULL,
            phx_last_error(), "%s: ... naming rank 2 and both calls", be);

    /* rank 1 uses i32, then rank 1 broadcasts instead */
    st = phx_comm_allreduce(c, rank == 1 ? i20 : a, PHX_MAX, NULL);
    h_check(H, rank, st == PHX_EDESYNC && strstr(phx_last_error(), "rank 1 issued allreduce(count=20, i32, max)"),
            phx_last_error(), "%s: a dtype mismatch names rank 1", be);
    st = rank == 1 ? phx_comm_broadcast(c, a, 0, NULL) : phx_comm_allreduce(c, a, PHX_SUM, NULL);
    h_check(H, rank, st == PHX_EDESYNC && strstr(phx_last_error(), "rank 1 issued broadcast(count=20, f32, root=0)"),
            phx_last_error(), "%s: a different collective names rank 1", be);

    /* nothing was issued: the communicator is still in step */
    phx_tensor_fill(a, rank + 1.0);
    st = phx_comm_allreduce(c, a, PHX_SUM, NULL);
    phx_tensor_get(a, 0, &x);
    h_check(H, rank, st == PHX_OK && x == 6.0, phx_last_error(), "%s: after the mismatches, collectives still work",
            be);
    phx_tensor_free(a);
    phx_tensor_free(b);
    phx_tensor_free(i20);
    phx_comm_free(c);
    return 0;
}

int main(void)
{
    const char *bes[] = {"threads", "gloo"};
    int nb = 2;
    plan(6 * nb);
    setenv("PHX_DEBUG", "detail", 1);
    setenv("PHX_LOG", "error", 1);
    H = h_new(3);
    for (int i = 0; i < nb; i++) {
        if (!h_have(bes[i])) {
            skip(6, "no gloo plugin in this build");
            continue;
        }
        h_reset(H, 3);
        setenv("PHX_COMM", bes[i], 1);
        phx_status st = phx_spawn(3, rank_main, (void *)bes[i]);
        if (st) diag("phx_spawn: %s", phx_last_error());
        int k = h_print(H, 0, "");
        while (k++ < 6) ok(0, "%s: check not reached", bes[i]);
    }
    return done_testing();
}
