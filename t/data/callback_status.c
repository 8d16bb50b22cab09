/* A dataset or collate callback that returns anything but PHX_OK is an
 * error: phx_loader_next_batch returns a negative phx_status whose
 * message names the sample, with 0, 1, 2 and 3 workers, and never hands
 * out a batch that was not filled. Four callbacks fail at sample 17:
 * get returning 1 with no message (after sample 3 left an unrelated
 * message behind and returned PHX_OK), get returning PHX_EIO with its own
 * message, get_batch returning 1, and collate returning 1. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

enum { LEN = 40, BATCH = 8, BAD = 17, WIDTH = 3 };

typedef enum { GET_POSITIVE, GET_EIO, GET_BATCH_POSITIVE, COLLATE_POSITIVE, N_KINDS } kind;
static const char *const kind_name[] = {"get returns 1", "get returns PHX_EIO", "get_batch returns 1",
                                        "collate returns 1"};

static void write_row(int64_t i, float *row)
{
    for (int c = 0; c < WIDTH; c++) row[c] = (float)i + 0.25f * (float)c;
}

static phx_status get(void *ctx, int64_t i, void *const *out)
{
    kind k = *(const kind *)ctx;
    write_row(i, out[0]);
    if (i == 3) phx_error(PHX_ENOTFOUND, "an unrelated message from sample 3");
    if (i != BAD || k == COLLATE_POSITIVE) return PHX_OK;
    if (k == GET_EIO) return phx_error(PHX_EIO, "my reader failed on record %d", BAD);
    return (phx_status)1;
}

static phx_status get_batch(void *ctx, const int64_t *idx, int64_t n, void *const *out)
{
    bool bad = false;
    for (int64_t j = 0; j < n; j++) {
        write_row(idx[j], (float *)out[0] + j * WIDTH);
        bad = bad || idx[j] == BAD;
    }
    (void)ctx;
    return bad ? (phx_status)1 : PHX_OK;
}

static phx_status collate(void *user, int64_t n, const void *const *samples, void *const *out)
{
    const float *in = samples[0];
    bool bad = false;
    for (int64_t j = 0; j < n; j++) bad = bad || in[j * WIDTH] == (float)BAD;
    memcpy(out[0], in, (size_t)n * WIDTH * sizeof(float));
    (void)user;
    return bad ? (phx_status)1 : PHX_OK;
}

int main(void)
{
    plan(N_KINDS * 4 * 3);
    static const phx_dataset_vtable vt = {.struct_size = PHX_DATASET_VTABLE_SIZE, .type_name = "probe", .get = get};
    static const phx_dataset_vtable vtb = {
        .struct_size = PHX_DATASET_VTABLE_SIZE, .type_name = "probe", .get = get, .get_batch = get_batch};
    phx_field f = {.dtype = PHX_F32, .ndim = 1, .shape = {WIDTH}};
    for (kind k = 0; k < N_KINDS; k++) {
        for (int workers = 0; workers <= 3; workers++) {
            kind ctx = k;
            phx_dataset *ds = phx_dataset_new(k == GET_BATCH_POSITIVE ? &vtb : &vt, &ctx, LEN, 1, &f);
            phx_loader_opts o = PHX_LOADER_OPTS_INIT;
            o.batch = BATCH;
            o.workers = workers;
            if (k == COLLATE_POSITIVE) {
                o.collate = collate;
                o.collate_fields = &f;
                o.n_collate_fields = 1;
            }
            phx_loader *l = phx_loader_new_opts(ds, &o);
            int errors = 0, good = 0, stale = 0, bad_status = 0;
            char msg[1024] = "";
            phx_status err = PHX_OK;
            for (int b = 0; l && b < LEN / BATCH; b++) {
                phx_tensor *x = NULL;
                int r = phx_loader_next_batch(l, &x, 1);
                if (r < 0) {
                    errors++;
                    err = (phx_status)r;
                    bad_status += b != BAD / BATCH;
                    snprintf(msg, sizeof msg, "%s", phx_last_error());
                    continue;
                }
                if (r != 1) {
                    bad_status++;
                    continue;
                }
                good++;
                /* Every row is the sample it should be, never a leftover
                 * (a "batch" without a tensor is all leftover). */
                const float *p = x ? phx_tensor_data(x) : NULL;
                stale += !p;
                for (int j = 0; p && j < BATCH; j++)
                    for (int c = 0; c < WIDTH; c++) stale += p[j * WIDTH + c] != (float)(b * BATCH + j) + 0.25f * c;
                bad_status += b == BAD / BATCH;
            }
            ok(l && errors == 1 && good == LEN / BATCH - 1 && stale == 0 && bad_status == 0,
               "%s, %d workers: batch %d is an error, the other %d are good (errors %d, good %d, stale values %d)",
               kind_name[k], workers, BAD / BATCH, LEN / BATCH - 1, errors, good, stale);
            ok(err == (k == GET_EIO ? PHX_EIO : PHX_EINVAL), "... with %s (got %s)",
               k == GET_EIO ? "PHX_EIO" : "PHX_EINVAL", phx_status_name(err));
            const char *want = k == GET_EIO ? "get of sample 17: my reader failed on record 17"
                : k == GET_POSITIVE         ? "get of sample 17: returned 1, which is neither PHX_OK nor "
                                              "an error status (it set no message)"
                : k == GET_BATCH_POSITIVE   ? "(sample 16 first): returned 1"
                                            : "collate callback on 8 samples (sample 16 first): returned 1";
            ok(strstr(msg, want) && !strstr(msg, "unrelated"), "... and the message says '%s' (%s)", want, msg);
            phx_loader_free(l);
            phx_dataset_free(ds);
        }
    }
    return done_testing();
}
