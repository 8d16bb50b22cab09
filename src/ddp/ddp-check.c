/* DDP construction: every rank must wrap the same model (names, shapes,
 * dtypes); then rank 0's values are copied to all.
 *
 * The check costs one all-gather of two numbers when the models agree.
 * When they do not, every rank learns the same facts through two more
 * all-gathers (per-parameter hashes, then the description of the first
 * differing parameter on each rank), so every rank fails with the same
 * message naming the parameter and the ranks, and none is left waiting. */
#include <stdio.h>
#include <string.h>
#include "src/ddp/ddp-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"

#define DESC_WORDS 32 /* a parameter's description: 256 bytes as i64 words */

/* "0.weight f32 (4, 8)" */
static void describe(px_ddp *d, size_t i, char *buf, size_t len)
{
    char shape[96];
    const phx_tensor *v = phx_param_value(d->params[i]);
    snprintf(buf, len, "'%s' %s %s", phx_module_param_name(d->model, i), phx_dtype_name(phx_tensor_dtype(v)),
             phx_tensor_shape_str(v, shape, sizeof shape));
}

static int64_t fnv1a(const char *s, uint64_t h)
{
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return (int64_t)(h & 0x7fffffffffffffffull); /* never -1: that marks "absent" */
}

#define FNV_SEED 14695981039346656037ull

/* All-gathers `words` i64 values from every rank into out (world * words). */
static phx_status gather_i64(px_ddp *d, const int64_t *mine, size_t words, int64_t *out)
{
    int64_t n_in = (int64_t)words, n_out = (int64_t)words * d->world;
    phx_device dev = phx_comm_device(d->comm);
    phx_tensor *in = phx_tensor_new(PHX_I64, 1, &n_in, dev);
    phx_tensor *all = phx_tensor_new(PHX_I64, 1, &n_out, dev);
    phx_status st = in && all ? PHX_OK : PHX_ENOMEM;
    if (st == PHX_OK) st = phx_tensor_from_host(in, mine);
    if (st == PHX_OK) st = phx_comm_allgather(d->comm, in, all, NULL);
    if (st == PHX_OK) st = phx_tensor_to_host(all, out);
    phx_tensor_free(in);
    phx_tensor_free(all);
    if (st != PHX_OK) return phx_error(st, "phx_ddp_new: comparing the models across ranks: %s", phx_last_error());
    return PHX_OK;
}

/* The ranks whose description equals desc[ref], as "rank 2" / "ranks 0, 3". */
static void rank_list(const char *desc, size_t stride, int world, int ref, char *buf, size_t len, bool *taken)
{
    size_t used = 0;
    int count = 0;
    for (int r = 0; r < world; r++) count += strcmp(desc + (size_t)r * stride, desc + (size_t)ref * stride) == 0;
    used += (size_t)snprintf(buf, len, "%s", count > 1 ? "ranks " : "rank ");
    bool first = true;
    for (int r = 0; r < world; r++) {
        if (strcmp(desc + (size_t)r * stride, desc + (size_t)ref * stride) != 0) continue;
        taken[r] = true; /* even when the list no longer fits */
        if (used < len) used += (size_t)snprintf(buf + used, len - used, "%s%d", first ? "" : ", ", r);
        first = false;
    }
}

/* Builds the EDESYNC message from every rank's description of parameter
 * `at` (or its absence): ranks with the same description are listed
 * together. */
static phx_status report(px_ddp *d, size_t at, const char *desc)
{
    char msg[PX_DDP_ERR_MAX * 2];
    size_t used = 0, stride = DESC_WORDS * sizeof(int64_t);
    bool *taken = px_calloc((size_t)d->world, sizeof *taken);
    if (!taken) return PHX_ENOMEM;
    used += (size_t)snprintf(msg, sizeof msg,
                             "phx_ddp_new: the ranks wrap different models; first difference at "
                             "parameter %zu: ",
                             at);
    bool first = true;
    for (int r = 0; r < d->world && used < sizeof msg; r++) {
        if (taken[r]) continue;
        char who[160];
        rank_list(desc, stride, d->world, r, who, sizeof who, taken);
        used += (size_t)snprintf(msg + used, sizeof msg - used, "%s%s %s %s", first ? "" : "; ", who,
                                 strchr(who, ',') ? "have" : "has", desc + (size_t)r * stride);
        first = false;
    }
    px_free(taken);
    return phx_error(PHX_EDESYNC, "%s", msg);
}

phx_status px_ddp_check_models(px_ddp *d)
{
    if (d->world == 1) return PHX_OK;
    size_t n = d->n_params, w = (size_t)d->world;
    char buf[256];
    int64_t *hashes = px_malloc((n ? n : 1) * sizeof *hashes);
    int64_t *all = px_malloc(2 * w * sizeof *all);
    if (!hashes || !all) {
        px_free(hashes);
        px_free(all);
        return PHX_ENOMEM;
    }
    uint64_t h = FNV_SEED;
    for (size_t i = 0; i < n; i++) {
        describe(d, i, buf, sizeof buf);
        hashes[i] = fnv1a(buf, FNV_SEED);
        h = (uint64_t)fnv1a(buf, h);
    }
    int64_t mine[2] = {(int64_t)h, (int64_t)n};
    phx_status st = gather_i64(d, mine, 2, all);
    bool agree = true;
    size_t max_n = n;
    for (size_t r = 0; st == PHX_OK && r < w; r++) {
        agree &= all[2 * r] == all[0] && all[2 * r + 1] == all[1];
        if ((size_t)all[2 * r + 1] > max_n) max_n = (size_t)all[2 * r + 1];
    }
    if (st != PHX_OK || agree) {
        px_free(hashes);
        px_free(all);
        return st;
    }
    /* Per-parameter hashes, padded with -1 to the longest model. */
    int64_t *mine_h = px_malloc(max_n * sizeof *mine_h);
    int64_t *all_h = px_malloc(max_n * w * sizeof *all_h);
    int64_t *mine_d = px_calloc(DESC_WORDS, sizeof *mine_d);
    char *all_d = px_calloc(w, DESC_WORDS * sizeof(int64_t));
    if (!mine_h || !all_h || !mine_d || !all_d) st = PHX_ENOMEM;
    if (st == PHX_OK) {
        for (size_t i = 0; i < max_n; i++) mine_h[i] = i < n ? hashes[i] : -1;
        st = gather_i64(d, mine_h, max_n, all_h);
    }
    size_t at = max_n;
    for (size_t i = 0; st == PHX_OK && i < max_n && at == max_n; i++)
        for (size_t r = 1; r < w; r++)
            if (all_h[r * max_n + i] != all_h[i]) at = i;
    if (st == PHX_OK && at == max_n) at = 0; /* hashes collided on the whole but agree one by one: cannot happen */
    if (st == PHX_OK) {
        char *s = (char *)mine_d;
        if (at < n)
            describe(d, at, s, DESC_WORDS * sizeof(int64_t));
        else
            snprintf(s, DESC_WORDS * sizeof(int64_t), "no such parameter (%zu in all)", n);
        st = gather_i64(d, mine_d, DESC_WORDS, (int64_t *)all_d);
    }
    if (st == PHX_OK) {
        for (size_t r = 0; r < w; r++) /* a peer's text may lack its NUL */
            all_d[(r + 1) * DESC_WORDS * sizeof(int64_t) - 1] = '\0';
        st = report(d, at, all_d);
    }
    px_free(mine_h);
    px_free(all_h);
    px_free(mine_d);
    px_free(all_d);
    px_free(hashes);
    px_free(all);
    return st;
}

/* Broadcasts n tensors from root: all issued, then waited for
 * (collectives complete in issue order). */
static phx_status broadcast_all(px_ddp *d, phx_tensor *const *ts, size_t n, int root)
{
    phx_status st = PHX_OK;
    size_t issued = 0;
    phx_work **works = px_calloc(n ? n : 1, sizeof *works);
    if (!works) return PHX_ENOMEM;
    for (size_t i = 0; i < n && st == PHX_OK; i++, issued++) st = phx_comm_broadcast(d->comm, ts[i], root, &works[i]);
    for (size_t i = 0; i < issued; i++) {
        if (works[i]) {
            phx_status ws = phx_work_wait(works[i], -1);
            if (st == PHX_OK) st = ws;
            phx_work_free(works[i]);
        }
    }
    px_free(works);
    return st;
}

phx_status px_ddp_broadcast_params(px_ddp *d)
{
    if (d->world == 1) return PHX_OK;
    phx_tensor **ts = px_calloc(d->n_params ? d->n_params : 1, sizeof *ts);
    if (!ts) return PHX_ENOMEM;
    for (size_t i = 0; i < d->n_params; i++) ts[i] = phx_param_value(d->params[i]);
    phx_status st = broadcast_all(d, ts, d->n_params, 0);
    px_free(ts);
    if (st != PHX_OK) return phx_error(st, "phx_ddp_new: broadcasting parameters from rank 0: %s", phx_last_error());
    for (size_t i = 0; i < d->n_params; i++) phx_param_touch(d->params[i]);
    return px_ddp_broadcast_buffers(d, 0);
}

phx_status px_ddp_broadcast_buffers(px_ddp *d, int root)
{
    size_t n = phx_module_num_buffers(d->model);
    if (d->world == 1 || n == 0) return PHX_OK;
    if (!d->buffers) {
        if (!(d->buffers = px_calloc(n, sizeof *d->buffers))) return PHX_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) d->buffers[i] = phx_module_buffer(d->model, i);
    phx_status st = broadcast_all(d, d->buffers, n, root);
    if (st != PHX_OK)
        return phx_error(st, "DistributedDataParallel: broadcasting buffers from rank %d: %s", root, phx_last_error());
    return PHX_OK;
}
