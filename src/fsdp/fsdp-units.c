/* FSDP's wrapping units: which subtrees the wrap policy makes units, which
 * parameters each holds, and the check that every rank cut the same. */
#include <stdio.h>
#include <string.h>
#include "src/fsdp/fsdp-impl.h"
#include "src/modules/module-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"

typedef struct walk_state {
    px_fsdp *f;
    phx_module **mods; /* the unit roots found, children before parents */
    char **paths;
    size_t n, cap;
    phx_status st;
} walk_state;

static int64_t own_numel(const phx_module *m)
{
    int64_t n = 0;
    for (size_t i = 0; i < m->n_params; i++) n += m->params[i]->value->numel;
    return n;
}

static bool policy(px_fsdp *f, const phx_module *m, const char *path, int64_t numel)
{
    if (f->opts.wrap) return f->opts.wrap(m, path, numel, f->opts.wrap_arg);
    int64_t min = f->opts.min_unit_numel > 0 ? f->opts.min_unit_numel : PX_FSDP_MIN_UNIT_NUMEL;
    return m->n_children > 0 && numel >= min;
}

static phx_status add_unit(walk_state *w, phx_module *m, const char *path)
{
    if (w->n == w->cap) {
        size_t nc = w->cap ? 2 * w->cap : 8;
        phx_module **nm = px_realloc(w->mods, nc * sizeof *nm);
        if (!nm) return PHX_ENOMEM;
        w->mods = nm;
        char **np = px_realloc(w->paths, nc * sizeof *np);
        if (!np) return PHX_ENOMEM;
        w->paths = np;
        w->cap = nc;
    }
    if (!(w->paths[w->n] = px_strdup(path))) return PHX_ENOMEM;
    w->mods[w->n++] = m;
    return PHX_OK;
}

/* Post-order: returns the elements of m's subtree not in a nested unit. */
static int64_t walk(walk_state *w, phx_module *m, const char *path, bool root)
{
    int64_t n = own_numel(m);
    for (size_t i = 0; i < m->n_children && w->st == PHX_OK; i++) {
        char sub[1024];
        snprintf(sub, sizeof sub, "%s%s%s", path, *path ? "." : "", m->children[i].name);
        n += walk(w, m->children[i].m, sub, false);
    }
    if (w->st != PHX_OK || root) return n;
    if (n > 0 && policy(w->f, m, path, n)) {
        w->st = add_unit(w, m, path);
        return 0;
    }
    return n;
}

/* The unit holding parameter p: its owner's nearest ancestor that is a
 * unit root (the model's root unit when none). */
static size_t unit_of_param(const px_fsdp *f, const walk_state *w, const phx_param *p)
{
    for (const phx_module *m = p->owner; m && m != f->model; m = m->parent)
        for (size_t k = 0; k < w->n; k++)
            if (w->mods[k] == m) return k;
    return w->n - 1; /* the root, added last */
}

phx_status px_fsdp_find_units(px_fsdp *f)
{
    walk_state w = {.f = f};
    walk(&w, f->model, "", true);
    phx_status st = w.st;
    if (st == PHX_OK) st = add_unit(&w, f->model, "");
    if (st == PHX_OK) {
        f->n_units = w.n;
        f->units = px_calloc(w.n, sizeof *f->units);
        f->unit_of = px_calloc(f->n_params ? f->n_params : 1, sizeof *f->unit_of);
        if (!f->units || !f->unit_of) st = PHX_ENOMEM;
    }
    for (size_t k = 0; st == PHX_OK && k < w.n; k++) {
        f->units[k].inner = w.mods[k];
        f->units[k].path = w.paths[k];
        w.paths[k] = NULL;
        f->units[k].params = px_calloc(f->n_params ? f->n_params : 1, sizeof *f->units[k].params);
        f->units[k].offs = px_calloc(f->n_params ? f->n_params : 1, sizeof *f->units[k].offs);
        if (!f->units[k].params || !f->units[k].offs) st = PHX_ENOMEM;
    }
    for (size_t i = 0; st == PHX_OK && i < f->n_params; i++) {
        size_t k = unit_of_param(f, &w, f->params[i]);
        px_funit *u = &f->units[k];
        f->unit_of[i] = k;
        u->params[u->n_params] = i;
        u->offs[u->n_params++] = u->numel;
        u->numel += f->params[i]->value->numel;
    }
    for (size_t k = 0; k < w.n; k++) px_free(w.paths[k]);
    px_free(w.paths);
    px_free(w.mods);
    for (size_t k = 0; st == PHX_OK && k < f->n_units; k++) {
        px_funit *u = &f->units[k];
        u->block = (u->numel + f->world - 1) / f->world;
        if (u->block == 0) u->block = 1; /* an empty root still takes part in the collectives */
    }
    return st;
}

/* Exchanges rows of k int64 values; NULL on failure (*st and the error set). */
static int64_t *exchange(px_fsdp *f, const int64_t *mine, int64_t k, phx_status *stp)
{
    int64_t all_n = k * f->wworld;
    phx_device dev = phx_comm_device(f->wcomm);
    phx_tensor *hin = phx_tensor_from_data(PHX_I64, 1, &k, (void *)mine);
    phx_tensor *in = phx_tensor_new(PHX_I64, 1, &k, dev), *all = phx_tensor_new(PHX_I64, 1, &all_n, dev);
    int64_t *out = px_calloc((size_t)all_n, sizeof *out);
    phx_tensor *host = phx_tensor_new(PHX_I64, 1, &all_n, phx_cpu());
    phx_status st = hin && in && all && host && out ? PHX_OK : PHX_ENOMEM;
    if (st == PHX_OK) st = phx_tensor_copy(in, hin);
    if (st == PHX_OK) st = phx_comm_allgather(f->wcomm, in, all, NULL);
    if (st == PHX_OK) st = phx_tensor_copy(host, all);
    if (st == PHX_OK) memcpy(out, phx_tensor_data(host), (size_t)all_n * sizeof *out);
    phx_tensor_free(hin);
    phx_tensor_free(in);
    phx_tensor_free(all);
    phx_tensor_free(host);
    if (st != PHX_OK) {
        *stp = phx_error(st, "phx_fsdp_new: exchanging the unit layout: %s", phx_last_error());
        px_free(out);
        return NULL;
    }
    return out;
}

phx_status px_fsdp_check_layout(px_fsdp *f)
{
    if (f->wworld == 1) return PHX_OK;
    int64_t total = 0;
    for (size_t i = 0; i < f->n_params; i++) total += f->params[i]->value->numel;
    int64_t head[3] = {(int64_t)f->n_params, total, (int64_t)f->n_units};
    phx_status st = PHX_OK;
    int64_t *all = exchange(f, head, 3, &st);
    if (!all) return st;
    static const char *const what[3] = {"parameters", "parameter elements", "units"};
    for (int r = 1; r < f->wworld && st == PHX_OK; r++)
        for (int k = 0; k < 3 && st == PHX_OK; k++)
            if (all[r * 3 + k] != all[k])
                st = phx_error(PHX_EDESYNC,
                               "phx_fsdp_new: rank %d has %lld %s, rank 0 has %lld (this rank, %d: %lld); every "
                               "rank must wrap the same model with the same policy",
                               r, (long long)all[r * 3 + k], what[k], (long long)all[k], f->wrank, (long long)head[k]);
    px_free(all);
    if (st != PHX_OK) return st;
    /* Per unit: its elements, parameters and path (its first bytes). */
    enum { PATH_WORDS = 8, REC = 2 + PATH_WORDS };
    int64_t k = REC * (int64_t)f->n_units;
    int64_t *mine = px_calloc((size_t)k, sizeof *mine);
    if (!mine) return PHX_ENOMEM;
    for (size_t u = 0; u < f->n_units; u++) {
        mine[REC * u] = f->units[u].numel;
        mine[REC * u + 1] = (int64_t)f->units[u].n_params;
        strncpy((char *)&mine[REC * u + 2], f->units[u].path, PATH_WORDS * sizeof(int64_t) - 1);
    }
    all = exchange(f, mine, k, &st);
    if (!all) {
        px_free(mine);
        return st;
    }
    for (size_t u = 0; u < f->n_units && st == PHX_OK; u++)
        for (int r = 1; r < f->wworld && st == PHX_OK; r++) {
            const int64_t *a = &all[r * k + REC * (int64_t)u], *z = &all[REC * (int64_t)u];
            if (memcmp(a, z, REC * sizeof *a) == 0) continue;
            char pa[PATH_WORDS * 8 + 1] = "", pz[PATH_WORDS * 8 + 1] = "";
            memcpy(pa, a + 2, PATH_WORDS * 8);
            memcpy(pz, z + 2, PATH_WORDS * 8);
            st = phx_error(PHX_EDESYNC,
                           "phx_fsdp_new: unit %zu differs between rank 0 and rank %d: '%s' (%lld parameters, %lld "
                           "elements) on rank 0, '%s' (%lld parameters, %lld elements) on rank %d; every rank must "
                           "wrap the same model with the same policy",
                           u, r, pz[0] ? pz : "(root)", (long long)z[1], (long long)z[0], pa[0] ? pa : "(root)",
                           (long long)a[1], (long long)a[0], r);
        }
    px_free(all);
    px_free(mine);
    return st;
}
