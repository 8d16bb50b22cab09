/* DDP buckets: the assignment (which parameter in which bucket, in which
 * order) equals PyTorch's compute_bucket_assignment_by_size for known
 * sizes (t/ref/buckets.txt from bench/torch/buckets.py), gradients are
 * views into the flat buckets, and the one rebuild after the first
 * backward follows the order gradients arrived in. One rank, threads. */
#include "t/tap.h"
#include "t/ddp-util.h"

#define MAXP 16

typedef struct expected {
    char name[64];
    size_t first, cap;
    size_t order[MAXP], n_order;
    int64_t numels[MAXP];
    size_t n_numels;
    size_t buckets[MAXP][MAXP], bucket_len[MAXP], n_buckets;
} expected;

static size_t parse_csv(const char *s, const char *key, int64_t *out)
{
    const char *p = strstr(s, key);
    size_t n = 0;
    if (!p) return 0;
    p += strlen(key);
    while (n < MAXP) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p) break;
        out[n++] = v;
        p = end;
        if (*p != ',') break;
        p++;
    }
    return n;
}

static int parse_case(const char *line, expected *e)
{
    memset(e, 0, sizeof *e);
    unsigned long long first, cap;
    if (sscanf(line, "%63s %llu %llu", e->name, &first, &cap) != 3) return 0;
    e->first = first;
    e->cap = cap;
    int64_t tmp[MAXP];
    e->n_order = parse_csv(line, "order=", tmp);
    for (size_t i = 0; i < e->n_order; i++) e->order[i] = (size_t)tmp[i];
    e->n_numels = parse_csv(line, "numels=", e->numels);
    const char *p = strstr(line, " : ");
    if (!p) return 0;
    p += 3;
    while (*p && *p != '\n') {
        char *end;
        long v = strtol(p, &end, 10);
        if (end != p) {
            e->buckets[e->n_buckets][e->bucket_len[e->n_buckets]++] = (size_t)v;
            p = end;
            continue;
        }
        if (*p == '|') e->n_buckets++;
        p++;
    }
    e->n_buckets++;
    return 1;
}

static int read_cases(expected *cases, int max)
{
    const char *top = getenv("top_srcdir");
    char path[4096], line[4096];
    snprintf(path, sizeof path, "%s/t/ref/buckets.txt", top ? top : ".");
    FILE *f = fopen(path, "r");
    int n = 0;
    if (!f) return -1;
    while (n < max && fgets(line, sizeof line, f))
        if (line[0] != '#' && parse_case(line, &cases[n])) n++;
    fclose(f);
    return n;
}

static const expected *find_case(const expected *cases, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(cases[i].name, name)) return &cases[i];
    return NULL;
}

/* 1 when ddp's buckets equal e's; shows the difference otherwise. */
static int same_buckets(phx_module *ddp, const expected *e)
{
    size_t nb = phx_ddp_num_buckets(ddp);
    int same = nb == e->n_buckets;
    for (size_t b = 0; same && b < nb; b++) {
        size_t idx[MAXP];
        size_t n = phx_ddp_bucket_params(ddp, b, idx, MAXP);
        same = n == e->bucket_len[b] && memcmp(idx, e->buckets[b], n * sizeof *idx) == 0;
    }
    if (!same) {
        char got[512] = "", *p = got;
        for (size_t b = 0; b < nb; b++) {
            size_t idx[MAXP], n = phx_ddp_bucket_params(ddp, b, idx, MAXP);
            p += snprintf(p, (size_t)(got + sizeof got - p), "%s", b ? " |" : "");
            for (size_t j = 0; j < n && j < MAXP; j++) p += snprintf(p, (size_t)(got + sizeof got - p), " %zu", idx[j]);
        }
        diag("  %s: got buckets%s", e->name, got);
    }
    return same;
}

/* Gradients of each bucket's members are consecutive views of one storage,
 * in bucket order; different buckets use different storage. */
static int views_ok(phx_module *ddp)
{
    phx_module *m = phx_ddp_model(ddp);
    size_t nb = phx_ddp_num_buckets(ddp);
    const phx_tensor *prev_first = NULL;
    for (size_t b = 0; b < nb; b++) {
        size_t idx[MAXP], n = phx_ddp_bucket_params(ddp, b, idx, MAXP);
        const phx_tensor *g0 = phx_param_grad(phx_module_param(m, idx[0]));
        if (phx_tensor_offset(g0) != 0 || (prev_first && phx_tensor_same_storage(g0, prev_first))) return 0;
        int64_t off = 0;
        for (size_t j = 0; j < n; j++) {
            const phx_tensor *g = phx_param_grad(phx_module_param(m, idx[j]));
            if (!phx_tensor_same_storage(g, g0) || phx_tensor_offset(g) != off) return 0;
            off += phx_tensor_numel(g);
        }
        prev_first = g0;
    }
    return 1;
}

/* ---- a module that reports its gradients in a chosen order ------------ */

typedef struct perm_ctx {
    size_t n;
    const size_t *order; /* parameter indices in the order they are reported */
    phx_tensor *y;
} perm_ctx;

static phx_status perm_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    perm_ctx *c = phx_module_ctx(self);
    if (!c->y) c->y = phx_tensor_new(PHX_F32, phx_tensor_ndim(x), phx_tensor_shape(x), phx_cpu());
    phx_status st = phx_tensor_copy(c->y, x);
    *y = c->y;
    return st;
}

/* Parameter i's gradient gets i + 1 added to each element. */
static phx_status perm_backward(phx_module *self, const phx_tensor *dy, phx_tensor **dx)
{
    (void)dy;
    (void)dx;
    perm_ctx *c = phx_module_ctx(self);
    for (size_t k = 0; k < c->n; k++) {
        size_t i = c->order[k];
        phx_param *p = phx_module_param(self, i);
        phx_tensor *g = phx_param_grad(p);
        int64_t n = phx_tensor_numel(g);
        float *h = malloc((size_t)n * sizeof *h);
        phx_tensor_to_host(g, h);
        for (int64_t j = 0; j < n; j++) h[j] += (float)(i + 1);
        phx_tensor_from_host(g, h);
        free(h);
        phx_param_grad_ready(p);
    }
    return PHX_OK;
}

static void perm_free(phx_module *self)
{
    perm_ctx *c = phx_module_ctx(self);
    phx_tensor_free(c->y);
    free(c);
}

static const phx_module_vtable perm_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "Perm",
    .forward = perm_forward,
    .backward = perm_backward,
    .free = perm_free,
    .set_train = NULL,
    .clone = NULL,
};

static phx_module *perm_new(const int64_t *numels, size_t n, const size_t *order)
{
    perm_ctx *c = calloc(1, sizeof *c);
    c->n = n;
    c->order = order;
    phx_module *m = phx_module_new(&perm_vt, c);
    for (size_t i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "p%zu", i);
        phx_module_add_param(m, name, phx_tensor_zeros(PHX_F32, 1, &numels[i], phx_cpu()));
    }
    return m;
}

/* ---- the test ---------------------------------------------------------- */

static expected cases[32];
static int n_cases;

static phx_module *model_for(const expected *e)
{
    static const int64_t mlp[] = {784, 1024, 1024, 10}, small[] = {10, 20, 30, 5, 1}, seed[] = {10, 1};
    if (!strncmp(e->name, "mlp", 3)) return tu_mlp(mlp, 4, 1);
    if (!strncmp(e->name, "small", 5)) return tu_mlp(small, 5, 1);
    if (!strcmp(e->name, "seed")) return tu_mlp(seed, 2, 1);
    return NULL;
}

static int numels_match(phx_module *m, const expected *e)
{
    if (phx_module_num_params(m) != e->n_numels) return 0;
    for (size_t i = 0; i < e->n_numels; i++)
        if (phx_tensor_numel(phx_param_value(phx_module_param(m, i))) != e->numels[i]) return 0;
    return 1;
}

static void test_pytorch_rule(phx_comm *c)
{
    for (int k = 0; k < n_cases; k++) {
        const expected *e = &cases[k];
        int reverse = 1;
        for (size_t i = 0; i < e->n_order; i++) reverse &= e->order[i] == e->n_order - 1 - i;
        if (!reverse) continue; /* a custom arrival order: test_rebuild */
        phx_module *m = model_for(e);
        phx_ddp_opts o = {.struct_size = sizeof(phx_ddp_opts), .first_bucket_bytes = e->first, .bucket_bytes = e->cap};
        phx_module *ddp = phx_ddp_new(m, c, &o);
        ok(ddp && numels_match(m, e) && same_buckets(ddp, e),
           "%s (first cap %zu, cap %zu): %zu bucket(s) as PyTorch's rule", e->name, e->first, e->cap, e->n_buckets);
        ok(ddp && views_ok(ddp), "%s: gradients are consecutive views of their bucket", e->name);
        phx_module_free(ddp);
        phx_module_free(m);
    }
}

static void test_rebuild(phx_comm *c, bool no_rebuild)
{
    const expected *ord = find_case(cases, n_cases, "small_order");
    const expected *rev = find_case(cases, n_cases, "small_100_500");
    if (!ord || !rev) {
        ok(0, "small_order and small_100_500 in t/ref/buckets.txt");
        return;
    }
    phx_module *m = perm_new(ord->numels, ord->n_numels, ord->order);
    phx_ddp_opts o = {.struct_size = sizeof(phx_ddp_opts),
                      .first_bucket_bytes = ord->first,
                      .bucket_bytes = ord->cap,
                      .no_rebuild = no_rebuild};
    phx_module *ddp = phx_ddp_new(m, c, &o);
    ok(ddp && same_buckets(ddp, rev), "%sbefore the first backward: reverse parameter order",
       no_rebuild ? "no_rebuild, " : "");
    int64_t shape[2] = {2, 3};
    phx_tensor *x = phx_tensor_zeros(PHX_F32, 2, shape, phx_cpu()), *y;
    phx_status st = phx_module_forward(ddp, x, &y);
    if (st == PHX_OK) st = phx_module_backward(ddp, y, NULL);
    is_int(st, PHX_OK, "forward and backward through the wrapper");
    ok(same_buckets(ddp, rev), "after the first backward, before the next forward: unchanged");
    st = phx_module_forward(ddp, x, &y);
    is_int(st, PHX_OK, "second forward");
    ok(same_buckets(ddp, rev), "a forward rebuilds nothing (it runs no collective)");
    st = phx_module_backward(ddp, y, NULL);
    is_int(st, PHX_OK, "second backward");
    if (no_rebuild)
        ok(same_buckets(ddp, rev), "no_rebuild: still reverse parameter order");
    else
        ok(same_buckets(ddp, ord), "rebuilt in arrival order 1,0,5,3,2,4,7,6 as PyTorch's rule");
    ok(views_ok(ddp), "gradients are views of the new buckets");
    int kept = 1;
    for (size_t i = 0; i < ord->n_numels; i++) {
        double v;
        phx_tensor_get(phx_param_grad(phx_module_param(m, i)), 0, &v);
        kept &= v == 2.0 * (double)(i + 1);
    }
    ok(kept, "the gradients of the first backward survive the rebuild (and the second's add to them)");
    phx_ddp_stats s = PHX_DDP_STATS_INIT;
    phx_ddp_get_stats(ddp, &s);
    is_int(s.rebuilds, no_rebuild ? 0 : 1, "stats count %d rebuild(s)", no_rebuild ? 0 : 1);
    phx_tensor_free(x);
    phx_module_free(ddp);
    phx_module_free(m);
}

static void test_api(phx_comm *c)
{
    static const int64_t small[] = {10, 20, 30, 5, 1};
    phx_module *m = tu_mlp(small, 5, 1);
    phx_module *ddp = phx_ddp_new(m, c, NULL);
    is_str(phx_module_type(ddp), "DistributedDataParallel", "type name");
    ok(phx_ddp_model(ddp) == m, "phx_ddp_model gives the model back");
    int names = phx_module_num_params(ddp) == phx_module_num_params(m);
    for (size_t i = 0; names && i < phx_module_num_params(m); i++)
        names = !strcmp(phx_module_param_name(ddp, i), phx_module_param_name(m, i)) &&
            phx_module_param(ddp, i) == phx_module_param(m, i);
    ok(names, "the wrapper's parameters are the model's, under the model's names (%s, ...)",
       phx_module_param_name(ddp, 0));
    is_int(phx_ddp_num_buckets(ddp), 1, "a small model fits one bucket with the default caps");
    phx_module_train(ddp, false);
    ok(!phx_module_is_training(m), "eval mode reaches the model");
    phx_module_train(ddp, true);

    ok(phx_ddp_new(NULL, c, NULL) == NULL, "NULL model is rejected");
    like(phx_last_error(), "model is NULL", "error says so");
    ok(phx_ddp_new(m, NULL, NULL) == NULL, "a model already wrapped is rejected (also in a world of one)");
    like(phx_last_error(), "already held by a wrapper", "error says so");
    ok(phx_ddp_new(ddp, c, NULL) == NULL, "wrapping a wrapper is rejected");
    is_int(phx_ddp_set_no_sync(m, true), PHX_EINVAL, "no_sync on a plain model is EINVAL");
    like(phx_last_error(), "expected a DistributedDataParallel", "error names the expected type");
    is_int(phx_ddp_num_buckets(m), 0, "num_buckets of a plain model is 0");
    is_int(phx_ddp_bucket_params(ddp, 5, NULL, 0), 0, "bucket 5 of 1 does not exist");
    like(phx_last_error(), "bucket 5", "error names the bucket");
    phx_ddp_stats s = PHX_DDP_STATS_INIT;
    is_int(phx_ddp_get_stats(ddp, NULL), PHX_EINVAL, "stats into NULL is EINVAL");
    is_int(phx_ddp_get_stats(ddp, &s), PHX_OK, "stats");
    is_int(s.launches, 0, "no all-reduce before the first backward");
    phx_module_free(ddp);
    /* The model is still whole and usable after the wrapper goes. */
    int64_t shape[2] = {3, 10};
    phx_tensor *x = phx_tensor_zeros(PHX_F32, 2, shape, phx_cpu()), *y;
    is_int(phx_module_forward(m, x, &y), PHX_OK, "the model runs after the wrapper is freed");
    phx_tensor_free(x);
    phx_module_free(m);
    phx_module_free(NULL);
}

static int rank_main(int rank, void *arg)
{
    (void)arg;
    phx_comm *c = tu_comm(rank);
    if (!c) {
        ok(0, "phx_comm_init on one thread rank");
        return 1;
    }
    test_pytorch_rule(c);
    test_rebuild(c, false);
    test_rebuild(c, true);
    test_api(c);
    phx_comm_free(c);
    return 0;
}

int main(void)
{
    n_cases = read_cases(cases, 32);
    if (n_cases < 0) skip_all("t/ref/buckets.txt not found (set top_srcdir)");
    ok(n_cases >= 8, "read %d cases from t/ref/buckets.txt", n_cases);
    phx_status st = tu_spawn("threads", 1, rank_main, NULL);
    is_int(st, PHX_OK, "rank ran: %s", st == PHX_OK ? "" : phx_last_error());
    return done_testing();
}
