/* The loader over datasets: batches equal to PyTorch's DataLoader +
 * DistributedSampler index lists (t/ref/loader.txt, made by
 * bench/torch/loader.py) with 0, 1 and 4 workers; the same bytes with and
 * without workers over several epochs; the built-in datasets (tensors,
 * IDX decoded per sample, text windows); a collate callback; a dataset
 * error surfacing at the next call with its message; an early stop;
 * no allocation in steady state; bad options refused with a message. */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include "t/tap.h"
#include "phalanx/phalanx.h"

/* ---- a dataset of its own indices (and a value derived from them) ---- */

typedef struct index_ctx {
    int64_t fail_at; /* get fails for this index (-1: never) */
    atomic_int calls;
    useconds_t delay_us; /* per sample, to let workers interleave */
} index_ctx;

static phx_status index_get(void *ctx, int64_t i, void *const *out)
{
    index_ctx *c = ctx;
    atomic_fetch_add(&c->calls, 1);
    if (c->delay_us) usleep(c->delay_us);
    if (i == c->fail_at) return phx_error(PHX_EIO, "index dataset: sample %lld is unreadable", (long long)i);
    *(int64_t *)out[0] = i;
    float *v = out[1];
    v[0] = (float)i * 0.5f;
    v[1] = -(float)i;
    return PHX_OK;
}

static const phx_dataset_vtable index_vtable = {
    .struct_size = PHX_DATASET_VTABLE_SIZE, .type_name = "index", .get = index_get};

static phx_dataset *index_dataset(int64_t n, index_ctx *c)
{
    phx_field f[2] = {{.dtype = PHX_I64, .ndim = 0}, {.dtype = PHX_F32, .ndim = 1, .shape = {2}}};
    return phx_dataset_new(&index_vtable, c, n, 2, f);
}

/* Runs one epoch of l into text "b0 | b1 | ..." of field 0, checking that
 * field 1 matches field 0 in every row. Returns 0 on success. */
static int epoch_text(phx_loader *l, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    phx_tensor *b[2];
    int r, first = 1;
    while ((r = phx_loader_next_batch(l, b, 2)) == 1) {
        const int64_t *ix = phx_tensor_data(b[0]);
        const float *v = phx_tensor_data(b[1]);
        int64_t n = phx_tensor_dim(b[0], 0);
        if (phx_tensor_dim(b[1], 0) != n) return -1;
        len += (size_t)snprintf(buf + len, cap - len, "%s", first ? "" : " | ");
        for (int64_t k = 0; k < n; k++) {
            if (v[2 * k] != (float)ix[k] * 0.5f || v[2 * k + 1] != -(float)ix[k]) return -1;
            len += (size_t)snprintf(buf + len, cap - len, "%s%lld", k ? " " : "", (long long)ix[k]);
        }
        first = 0;
        if (len >= cap - 1) return -1;
    }
    return r;
}

static FILE *open_data(const char *name)
{
    char path[4096];
    const char *top = getenv("top_srcdir");
    snprintf(path, sizeof path, "%s/t/ref/%s", top ? top : ".", name);
    return fopen(path, "r");
}

#define MAX_LINE 16384

static void torch_lists(void)
{
    FILE *f = open_data("loader.txt");
    if (!f) {
        skip(21, "t/ref/loader.txt not found (set top_srcdir)");
        return;
    }
    static char line[MAX_LINE], got[MAX_LINE];
    int configs = 0;
    index_ctx ic = {.fail_at = -1};
    phx_dataset *ds = index_dataset(1, &ic);
    while (fgets(line, sizeof line, f)) {
        long long n, R, r, sh, seed, sdl, batch, dl, epoch;
        int used = 0;
        if (sscanf(line, "loader %lld %lld %lld %lld %lld %lld %lld %lld %lld : %n", &n, &R, &r, &sh, &seed, &sdl,
                   &batch, &dl, &epoch, &used) != 9)
            continue;
        char *want = line + used;
        want[strcspn(want, "\n")] = '\0';
        phx_dataset_free(ds);
        ds = index_dataset(n, &ic);
        static const int workers[] = {0, 1, 4};
        for (int w = 0; w < 3; w++) {
            phx_loader_opts o = {.struct_size = sizeof(phx_loader_opts),
                                 .batch = batch,
                                 .shuffle = sh,
                                 .seed = (uint64_t)seed,
                                 .drop_last = dl,
                                 .num_replicas = (int)R,
                                 .rank = (int)r,
                                 .sampler_drop_last = sdl,
                                 .workers = workers[w],
                                 .prefetch = w == 2 ? 3 : 0};
            phx_loader *l = phx_loader_new_opts(ds, &o);
            int rc = -1;
            if (l) {
                phx_loader_set_epoch(l, epoch);
                rc = epoch_text(l, got, sizeof got);
            }
            ok(l && rc == 0 && !strcmp(got, want),
               "n %lld, rank %lld of %lld, shuffle %lld seed %lld%s, batch %lld%s, epoch %lld, %d workers: "
               "torch's batches",
               n, r, R, sh, seed, sdl ? " sampler drop_last" : "", batch, dl ? " drop_last" : "", epoch, workers[w]);
            if (!l || rc != 0 || strcmp(got, want))
                diag("expected %.200s\n#      got %.200s (%s)", want, got, l ? "" : phx_last_error());
            phx_loader_free(l);
        }
        configs++;
    }
    fclose(f);
    phx_dataset_free(ds);
    if (configs != 7) diag("loader.txt had %d configurations, expected 7", configs);
}

/* ---- same bytes with and without workers ------------------------------ */

static uint64_t epoch_hash(phx_loader *l, size_t *batches)
{
    uint64_t h = 1469598103934665603ull;
    phx_tensor *xb, *yb;
    *batches = 0;
    while (phx_loader_next(l, &xb, &yb) == 1) {
        const unsigned char *p = phx_tensor_data(xb), *q = phx_tensor_data(yb);
        for (size_t i = 0; i < phx_tensor_nbytes(xb); i++) h = (h ^ p[i]) * 1099511628211ull;
        for (size_t i = 0; i < phx_tensor_nbytes(yb); i++) h = (h ^ q[i]) * 1099511628211ull;
        (*batches)++;
    }
    return h;
}

static void determinism(void)
{
    int64_t xs[3] = {103, 3, 5}, ys[1] = {103};
    phx_tensor *x = phx_tensor_new(PHX_F32, 3, xs, phx_cpu()), *y = phx_tensor_new(PHX_I64, 1, ys, phx_cpu());
    float *px = phx_tensor_data(x);
    int64_t *py = phx_tensor_data(y);
    for (int64_t i = 0; i < 103 * 15; i++) px[i] = (float)i * 0.25f;
    for (int64_t i = 0; i < 103; i++) py[i] = i * 7;
    phx_tensor *t[2] = {x, y};
    phx_dataset *ds = phx_dataset_tensors(t, 2);
    ok(ds && phx_dataset_len(ds) == 103 && phx_dataset_field(ds, 0)->ndim == 2 && phx_dataset_field(ds, 1)->ndim == 0,
       "tensors dataset: 103 samples of (3, 5) f32 and a scalar i64");
    uint64_t h[3][3];
    size_t nb[3][3];
    static const int workers[] = {0, 2, 4};
    for (int w = 0; w < 3; w++) {
        phx_loader_opts o = {
            .struct_size = sizeof(phx_loader_opts), .batch = 10, .shuffle = true, .seed = 99, .workers = workers[w]};
        phx_loader *l = phx_loader_new_opts(ds, &o);
        for (int e = 0; e < 3; e++) h[w][e] = l ? epoch_hash(l, &nb[w][e]) : (uint64_t)w;
        phx_loader_free(l);
    }
    ok(nb[0][0] == 11 && nb[0][2] == 11, "103 samples, batch 10: 11 batches per epoch");
    ok(h[0][0] != h[0][1] && h[0][1] != h[0][2], "each epoch has its own order");
    ok(!memcmp(h[0], h[1], sizeof h[0]) && !memcmp(h[0], h[2], sizeof h[0]),
       "3 epochs: the same bytes with 0, 2 and 4 workers");
    /* The shape and contents of a partial batch. */
    phx_loader_opts o = {.struct_size = sizeof(phx_loader_opts), .batch = 10, .workers = 2};
    phx_loader *l = phx_loader_new_opts(ds, &o);
    phx_tensor *xb = NULL, *yb = NULL;
    int k = 0;
    while (phx_loader_next(l, &xb, &yb) == 1 && ++k < 11)
        ;
    ok(k == 11 && phx_tensor_dim(xb, 0) == 3 && phx_tensor_dim(xb, 1) == 3 && phx_tensor_dim(xb, 2) == 5 &&
           ((int64_t *)phx_tensor_data(yb))[2] == 102 * 7 &&
           ((float *)phx_tensor_data(xb))[2 * 15 + 14] == (102 * 15 + 14) * 0.25f,
       "unshuffled: the last batch is rows 100..102, shaped (3, 3, 5)");
    phx_loader_free(l);
    phx_dataset_free(ds);
    phx_tensor_free(x);
    phx_tensor_free(y);
}

/* ---- built-in datasets ------------------------------------------------ */

static void write_gz(const char *path, const void *b, size_t n)
{
    gzFile g = gzopen(path, "wb");
    gzwrite(g, b, (unsigned)n);
    gzclose(g);
}

static void builtins(void)
{
    char dir[] = "/tmp/phx-data-XXXXXX", img[256], lab[256], lab2[256], txt[256];
    if (!mkdtemp(dir)) {
        skip(9, "mkdtemp failed");
        return;
    }
    snprintf(img, sizeof img, "%s/img.gz", dir);
    snprintf(lab, sizeof lab, "%s/lab", dir);
    snprintf(lab2, sizeof lab2, "%s/lab2", dir);
    snprintf(txt, sizeof txt, "%s/t.txt", dir);
    unsigned char ib[16 + 5 * 6] = {0, 0, 8, 3, 0, 0, 0, 5, 0, 0, 0, 2, 0, 0, 0, 3};
    for (int i = 0; i < 30; i++) ib[16 + i] = (unsigned char)(i * 8);
    unsigned char lb[8 + 5] = {0, 0, 8, 1, 0, 0, 0, 5, 4, 3, 2, 1, 0};
    unsigned char lb2[8 + 4] = {0, 0, 8, 1, 0, 0, 0, 4, 4, 3, 2, 1};
    write_gz(img, ib, sizeof ib);
    FILE *f = fopen(lab, "wb");
    fwrite(lb, 1, sizeof lb, f);
    fclose(f);
    f = fopen(lab2, "wb");
    fwrite(lb2, 1, sizeof lb2, f);
    fclose(f);
    phx_dataset *ds = phx_dataset_idx(img, lab);
    phx_tensor *ref = NULL;
    ok(ds && phx_dataset_len(ds) == 5 && phx_field_bytes(phx_dataset_field(ds, 0)) == 6 * 4,
       "IDX dataset: 5 samples of 6 pixels (%s)", ds ? "" : phx_last_error());
    int same = ds && phx_idx_read(img, &ref) == PHX_OK;
    float px[6];
    int64_t y = -1;
    void *out[2] = {px, &y};
    for (int64_t i = 0; same && i < 5; i++)
        same = phx_dataset_get(ds, i, out) == PHX_OK && !memcmp(px, (float *)phx_tensor_data(ref) + i * 6, sizeof px) &&
            y == 4 - i;
    ok(same, "IDX dataset: each sample equals phx_idx_read's row, labels decoded");
    ok(ds && phx_dataset_get(ds, 5, out) == PHX_EINVAL && strstr(phx_last_error(), "outside [0, 5)"),
       "index 5 of 5 refused: %s", phx_last_error());
    phx_tensor_free(ref);
    phx_dataset_free(ds);
    ok(!phx_dataset_idx(img, lab2) && strstr(phx_last_error(), "5 images") && strstr(phx_last_error(), "4 labels"),
       "images and labels of different counts: %s", phx_last_error());
    ok(!phx_dataset_idx(lab, NULL) && strstr(phx_last_error(), "expected u8 images"), "labels given as images: %s",
       phx_last_error());
    ok(!phx_dataset_idx("/nonexistent/i.gz", NULL) && strstr(phx_last_error(), "/nonexistent/i.gz"),
       "missing file named: %s", phx_last_error());

    f = fopen(txt, "wb");
    fputs("hello world", f);
    fclose(f);
    ds = phx_dataset_text(txt, 4, 3);
    int64_t x4[4], y4[4];
    void *o2[2] = {x4, y4};
    ok(ds && phx_dataset_len(ds) == 3 && phx_dataset_get(ds, 2, o2) == PHX_OK && x4[0] == 'w' && x4[3] == 'l' &&
           y4[0] == 'o' && y4[3] == 'd',
       "text dataset: 11 bytes, context 4, stride 3: 3 windows, window 2 is 'worl' -> 'orld'");
    phx_dataset_free(ds);
    ok(!phx_dataset_text(txt, 11, 1) && strstr(phx_last_error(), "needs at least 12"), "text shorter than a window: %s",
       phx_last_error());
    /* not a regular file: /dev/zero (read until out of memory before), a
     * folder, a FIFO nobody writes (waited on before) */
    char fifo[sizeof txt + 8];
    snprintf(fifo, sizeof fifo, "%s.fifo", txt);
    alarm(10); /* a hang ends the test */
    int made = mkfifo(fifo, 0600) == 0;
    ok(!phx_dataset_text("/dev/zero", 4, 1) && strstr(phx_last_error(), "not a regular file") &&
           !phx_dataset_text("/tmp", 4, 1) && strstr(phx_last_error(), "not a regular file") && made &&
           !phx_dataset_text(fifo, 4, 1) && strstr(phx_last_error(), "not a regular file"),
       "text from /dev/zero, a folder or a FIFO: refused at once (%s)", phx_last_error());
    alarm(0);
    unlink(fifo);
    ok(!phx_dataset_new(&(phx_dataset_vtable){.struct_size = PHX_DATASET_VTABLE_SIZE, .type_name = "broken"}, NULL, 3,
                        1, &(phx_field){.dtype = PHX_F32, .ndim = 0}) &&
           strstr(phx_last_error(), "get is required"),
       "a vtable without get refused: %s", phx_last_error());
    unlink(img);
    unlink(lab);
    unlink(lab2);
    unlink(txt);
    rmdir(dir);
}

/* ---- collate ---------------------------------------------------------- */

/* Output: (n, 1) f32 = index + v[0] + v[1] = 0.5 * index. */
static phx_status half_collate(void *user, int64_t n, const void *const *samples, void *const *out)
{
    (void)user;
    const int64_t *ix = samples[0];
    const float *v = samples[1];
    float *o = out[0];
    for (int64_t k = 0; k < n; k++) o[k] = (float)ix[k] + v[2 * k] + v[2 * k + 1];
    return PHX_OK;
}

static void collate(void)
{
    index_ctx ic = {.fail_at = -1};
    phx_dataset *ds = index_dataset(9, &ic);
    phx_field of = {.dtype = PHX_F32, .ndim = 1, .shape = {1}};
    phx_loader_opts o = {.struct_size = sizeof(phx_loader_opts),
                         .batch = 4,
                         .workers = 2,
                         .collate = half_collate,
                         .collate_fields = &of,
                         .n_collate_fields = 1};
    phx_loader *l = phx_loader_new_opts(ds, &o);
    phx_tensor *b;
    float sum = 0;
    int n = 0, shapes = 1;
    while (l && phx_loader_next_batch(l, &b, 1) == 1) {
        shapes &= phx_tensor_ndim(b) == 2 && phx_tensor_dim(b, 1) == 1;
        for (int64_t k = 0; k < phx_tensor_dim(b, 0); k++) sum += ((float *)phx_tensor_data(b))[k];
        n++;
    }
    ok(l && n == 3 && shapes && sum == 18.0f, "collate on the workers: 3 batches of (n, 1), sum of 0.5 i = 18 (got %g)",
       (double)sum);
    phx_loader_free(l);
    phx_dataset_free(ds);
}

/* ---- errors, early stop, allocations ---------------------------------- */

static void errors(void)
{
    index_ctx ic = {.fail_at = 13};
    phx_dataset *ds = index_dataset(40, &ic);
    for (int w = 0; w <= 3; w += 3) {
        phx_loader_opts o = {.struct_size = sizeof(phx_loader_opts), .batch = 5, .workers = w};
        phx_loader *l = phx_loader_new_opts(ds, &o);
        phx_tensor *b[2];
        int r[5];
        for (int k = 0; k < 5; k++) r[k] = phx_loader_next_batch(l, b, 2);
        /* batch 2 holds samples 10..14 */
        ok(r[0] == 1 && r[1] == 1 && r[3] == 1 && r[4] == 1 && ((int64_t *)phx_tensor_data(b[0]))[0] == 20,
           "%d workers: batches before and after the failing one are delivered", w);
        phx_loader_set_epoch(l, 0);
        phx_loader_next_batch(l, b, 2);
        phx_loader_next_batch(l, b, 2);
        int e = phx_loader_next_batch(l, b, 2);
        ok(e == PHX_EIO && strstr(phx_last_error(), "batch 2 of epoch 0") &&
               strstr(phx_last_error(), "sample 13 is unreadable"),
           "%d workers: the dataset's error at the next call: %s", w, phx_last_error());
        phx_loader_free(l); /* mid-epoch, workers running */
    }
    ok(1, "freed mid-epoch with workers busy (leaks: t/data/valgrind.sh)");

    /* Steady state allocates nothing, workers included. */
    ic.fail_at = -1;
    ic.delay_us = 0;
    phx_loader_opts o = {
        .struct_size = sizeof(phx_loader_opts), .batch = 4, .shuffle = true, .seed = 3, .workers = 3, .prefetch = 4};
    phx_loader *l = phx_loader_new_opts(ds, &o);
    phx_tensor *b[2];
    for (int k = 0; k < 12; k++) phx_loader_next_batch(l, b, 2);
    uint64_t a0 = phx_alloc_count();
    int fails = 0;
    for (int k = 0; k < 200; k++) fails += phx_loader_next_batch(l, b, 2) < 0;
    uint64_t a1 = phx_alloc_count();
    ok(fails == 0 && a1 == a0, "200 next calls over 20 epochs with 3 workers: %llu allocations",
       (unsigned long long)(a1 - a0));
    phx_loader_free(l);

    /* Slow samples: workers really run ahead of the consumer. */
    ic.delay_us = 2000;
    atomic_store(&ic.calls, 0);
    phx_loader_opts so = {.struct_size = sizeof(phx_loader_opts), .batch = 2, .workers = 2, .prefetch = 4};
    l = phx_loader_new_opts(ds, &so);
    usleep(200000);
    int ahead = atomic_load(&ic.calls);
    ok(ahead == 8, "before the first next, 2 workers fetched the 4 prefetched batches (%d samples, expected 8)", ahead);
    phx_loader_free(l);

    o = (phx_loader_opts){.struct_size = sizeof(phx_loader_opts), .batch = 0};
    ok(!phx_loader_new_opts(ds, &o) && strstr(phx_last_error(), "batch 0"), "batch 0: %s", phx_last_error());
    o = (phx_loader_opts){.struct_size = sizeof(phx_loader_opts), .batch = 2, .workers = -1};
    ok(!phx_loader_new_opts(ds, &o) && strstr(phx_last_error(), "workers -1"), "workers -1: %s", phx_last_error());
    o = (phx_loader_opts){.struct_size = sizeof(phx_loader_opts), .batch = 2, .num_replicas = 2, .rank = 2};
    ok(!phx_loader_new_opts(ds, &o) && strstr(phx_last_error(), "rank 2 of 2"), "rank 2 of 2: %s", phx_last_error());
    int64_t bad = 40;
    o = (phx_loader_opts){.struct_size = sizeof(phx_loader_opts), .batch = 2, .indices = &bad, .n_indices = 1};
    ok(!phx_loader_new_opts(ds, &o) && strstr(phx_last_error(), "indices[0] = 40"), "index 40 of 40: %s",
       phx_last_error());
    phx_field of = {.dtype = PHX_F32};
    o = (phx_loader_opts){
        .struct_size = sizeof(phx_loader_opts), .batch = 2, .collate_fields = &of, .n_collate_fields = 1};
    ok(!phx_loader_new_opts(ds, &o) && strstr(phx_last_error(), "without a collate"), "collate fields alone: %s",
       phx_last_error());
    /* An explicit subset, shuffled by the sampler over its positions. */
    int64_t sub[6] = {39, 1, 38, 2, 37, 3};
    o = (phx_loader_opts){
        .struct_size = sizeof(phx_loader_opts), .batch = 6, .indices = sub, .n_indices = 6, .shuffle = true, .seed = 5};
    l = phx_loader_new_opts(ds, &o);
    int64_t perm[6];
    phx_randperm(6, 5, perm);
    int good = l && phx_loader_next_batch(l, b, 1) == 1;
    for (int k = 0; good && k < 6; k++) good = ((int64_t *)phx_tensor_data(b[0]))[k] == sub[perm[k]];
    ok(good, "a subset is shuffled by torch.randperm over its positions");
    phx_tensor *xb, *yb;
    ok(phx_loader_next(l, &xb, &yb) == 0 && phx_loader_next(l, &xb, &yb) == 1 && phx_loader_epoch(l) == 1,
       "after the end of epoch 0 the next call starts epoch 1");
    phx_loader_free(l);
    phx_dataset_free(ds);
}

int main(void)
{
    plan(21 + 5 + 9 + 1 + 15);
    torch_lists();
    determinism();
    builtins();
    collate();
    errors();
    return done_testing();
}
