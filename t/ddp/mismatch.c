/* Ranks wrapping different models: phx_ddp_new fails on every rank with
 * PHX_EDESYNC and the same message naming the first differing parameter
 * and the ranks on each side; nobody hangs, and the communicator stays
 * usable. Three ranks on threads, and on gloo processes. */
#include "t/tap.h"
#include "t/ddp-util.h"

/* Each rank checks its own failure; returns the number of problems. */
static int expect_desync(phx_comm *c, phx_module *m, const char *const *needles, int n_needles)
{
    int rank = phx_comm_rank(c), bad = 0;
    phx_module *ddp = phx_ddp_new(m, c, NULL);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", phx_last_error());
    if (ddp) {
        printf("# rank %d: phx_ddp_new succeeded on mismatched models\n", rank);
        phx_module_free(ddp);
        return 1;
    }
    for (int i = 0; i < n_needles; i++)
        if (!strstr(msg, needles[i])) {
            printf("# rank %d: message lacks \"%s\": %s\n", rank, needles[i], msg);
            bad++;
        }
    if (!strstr(msg, "different models")) {
        printf("# rank %d: unexpected error: %s\n", rank, msg);
        bad++;
    }
    if (rank == 0 && !bad) printf("# %s\n", msg);
    /* The same message on every rank: compare a hash of it. */
    double h = 0;
    for (const char *p = msg; *p; p++) h = fmod(h * 131 + (unsigned char)*p, 1e9);
    int64_t one = 1, all_n = phx_comm_size(c);
    phx_tensor *t = phx_tensor_from_data(PHX_F32, 1, &one, &(float){(float)h});
    phx_tensor *all = phx_tensor_zeros(PHX_F32, 1, &all_n, phx_cpu());
    if (phx_comm_allgather(c, t, all, NULL) != PHX_OK) {
        printf("# rank %d: the communicator is unusable after the failure: %s\n", rank, phx_last_error());
        bad++;
    } else {
        for (int r = 0; r < phx_comm_size(c); r++) {
            double v;
            phx_tensor_get(all, r, &v);
            if (v != (double)(float)h) {
                printf("# rank %d: rank %d's message differs from mine\n", rank, r);
                bad++;
            }
        }
    }
    phx_tensor_free(t);
    phx_tensor_free(all);
    return bad;
}

static int rank_main(int rank, void *arg)
{
    (void)arg;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    int bad = 0;

    /* Rank 1's first layer is wider. */
    static const int64_t a[] = {4, 4, 2}, a1[] = {4, 5, 2};
    phx_module *m = tu_mlp(rank == 1 ? a1 : a, 3, 7);
    const char *shape_needles[] = {"parameter 0", "rank 1 has '0.weight' f32 (5, 4)",
                                   "ranks 0, 2 have '0.weight' f32 (4, 4)"};
    bad += expect_desync(c, m, shape_needles, 3);
    phx_module_free(m);

    /* Rank 2 has one layer more. */
    static const int64_t b2[] = {4, 4, 2, 3};
    m = tu_mlp(rank == 2 ? b2 : a, rank == 2 ? 4 : 3, 7);
    const char *count_needles[] = {"parameter 4", "ranks 0, 1 have no such parameter (4 in all)",
                                   "rank 2 has '4.weight' f32 (3, 2)"};
    bad += expect_desync(c, m, count_needles, 3);
    phx_module_free(m);

    /* Matching models still work on the same communicator afterwards. */
    m = tu_mlp(a, 3, 7 + (uint64_t)rank);
    phx_module *ddp = phx_ddp_new(m, c, NULL);
    if (!ddp) {
        printf("# rank %d: matching models rejected: %s\n", rank, phx_last_error());
        bad++;
    } else if (!tu_same_bits_across(c, ddp)) {
        printf("# rank %d: parameters differ after the broadcast\n", rank);
        bad++;
    }
    phx_module_free(ddp);
    phx_module_free(m);
    phx_comm_free(c);
    return bad ? 1 : 0;
}

int main(void)
{
    plan(2);
    tu_spawn_both(3, rank_main, NULL,
                  "mismatched shapes and counts fail on every rank with the same message; "
                  "the comm stays usable");
    return done_testing();
}
