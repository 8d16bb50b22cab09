/* check-solo: joins a world of one through phx_comm_init, which picks the
 * backend named by PHX_COMM (run it with PHX_COMM=solo and
 * PHX_PLUGIN_PATH=<folder of phx-comm-solo.so>), then runs each collective
 * and checks the result. Prints one line per check; exit 0 when all pass. */
#include <stdio.h>
#include <string.h>
#include <phalanx/phalanx.h>

static int failed;

static void check(int cond, const char *what)
{
    printf("%s %s\n", cond ? "ok" : "FAILED", what);
    failed += !cond;
}

static int same(const phx_tensor *t, const float *want, int n)
{
    float got[8];
    if (phx_tensor_to_host(t, got) != PHX_OK) return 0;
    return memcmp(got, want, (size_t)n * sizeof *got) == 0;
}

int main(void)
{
    const float x[4] = {1.5f, -2.0f, 3.25f, 1e30f};
    const int64_t n4 = 4;
    phx_comm *c;
    phx_work *w;
    phx_comm_opts o = PHX_COMM_OPTS_INIT;
    o.rank = 0; /* a world of one, whatever the environment says */
    o.size = 1;
    o.local_rank = 0;
    o.local_size = 1;
    if (phx_comm_init(&o, &c) != PHX_OK) {
        printf("FAILED phx_comm_init: %s\n", phx_last_error());
        return 1;
    }
    printf("backend %s, rank %d of %d\n", phx_comm_backend(c), phx_comm_rank(c), phx_comm_size(c));
    phx_tensor *t = phx_tensor_from_data(PHX_F32, 1, &n4, x);
    phx_tensor *out = phx_tensor_zeros(PHX_F32, 1, &n4, phx_cpu());
    check(t && out, "tensors");
    check(phx_comm_allreduce(c, t, PHX_SUM, NULL) == PHX_OK && same(t, x, 4), "allreduce sum is the identity");
    check(phx_comm_allreduce(c, t, PHX_AVG, &w) == PHX_OK && phx_work_wait(w, -1) == PHX_OK && same(t, x, 4),
          "async allreduce avg is the identity");
    phx_work_free(w);
    check(phx_comm_broadcast(c, t, 0, NULL) == PHX_OK && same(t, x, 4), "broadcast from 0 is the identity");
    check(phx_comm_allgather(c, t, out, NULL) == PHX_OK && same(out, x, 4), "allgather copies the one block");
    phx_comm_barrier(c, NULL);
    phx_tensor_free(out);
    out = phx_tensor_zeros(PHX_F32, 1, &n4, phx_cpu());
    check(phx_comm_reduce_scatter(c, t, out, PHX_MAX, NULL) == PHX_OK && same(out, x, 4),
          "reduce_scatter copies the one block");
    check(phx_comm_barrier(c, NULL) == PHX_OK, "barrier");
    check(phx_comm_broadcast(c, t, 1, NULL) != PHX_OK && strstr(phx_last_error(), "root 1") != NULL,
          "broadcast from root 1 is refused");
    /* solo has no split slot: the core's split inits it again, over the
     * group (here of one), under a store prefix of its own */
    phx_comm *g = NULL, *none = NULL;
    check(phx_comm_split(c, 3, 0, &g) == PHX_OK && g && phx_comm_size(g) == 1 &&
              strcmp(phx_comm_backend(g), "solo") == 0,
          "split: a group of one on solo");
    check(g && phx_comm_allreduce(g, t, PHX_SUM, NULL) == PHX_OK && same(t, x, 4), "the group's allreduce");
    check(phx_comm_split(c, PHX_COMM_SPLIT_UNDEFINED, 0, &none) == PHX_OK && none == NULL,
          "split with PHX_COMM_SPLIT_UNDEFINED: no group");
    phx_comm_free(g);
    phx_tensor_free(t);
    phx_tensor_free(out);
    phx_comm_free(c);
    return failed ? 1 : 0;
}
