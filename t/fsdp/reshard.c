/* Reshardable FSDP (ZeRO-3) checkpoints. An uninterrupted world-1 run
 * (plain AdamW, the whole global batch) gives the reference losses of
 * steps 0..9. Deterministic data: step s's global batch is rows
 * 0..ROWS-1 of tu_batch(s, ...), and a world of W ranks gives rank r the
 * rows r*ROWS/W .. (r+1)*ROWS/W-1 (ROWS divisible by 1, 2, 3 and 4), so
 * the mean of the ranks' losses is the global batch's loss. Four thread
 * ranks (FSDP, two units, ZeRO-3 AdamW) train steps 0..4 and save with
 * phx_zero_checkpoint_save; then, from models initialised differently,
 * steps 5..9 continue from it under FSDP at world 4, 2, 3 (threads; and 3
 * gloo processes) and 1 (no comm), under ZeRO-1 at world 2, and in a
 * plain AdamW through phx_zero_checkpoint_load_full: every loss equals the
 * reference's within 1e-6. Under hybrid sharding one replica's group
 * writes, once (hybrid_saves); a BatchNorm CNN's f32 and i64 buffers
 * round-trip bitwise. phx_checkpoint_save of the resharded FSDP
 * model is refused with a message saying what to do, and works after
 * phx_fsdp_gather_full. */
#include <dirent.h>
#include <sys/mman.h>
#include <unistd.h>
#include "t/tap.h"
#include "t/reshard-util.h"

static char dir[64];

static bool wrap_first(const phx_module *m, const char *path, int64_t numel, void *arg)
{
    (void)m, (void)numel, (void)arg;
    return strcmp(path, "0") == 0;
}

typedef struct job {
    int stage; /* 3: FSDP; 1, 2: DDP + ZeRO-1, ZeRO-2 */
    int first, last;
    const char *load, *save;
    uint64_t seed;
    /* Hybrid: shard within groups of 2 ranks, replicate across them; with
     * perturb, the second replica's parameters are moved off before the
     * save, so a checkpoint of the first's proves who wrote it. */
    bool hybrid, perturb;
    bool no_replicate; /* hybrid ZeRO-1 given shard_comm only */
} job;

/* Adds 1 to every parameter of m (the replica that must not save). */
static void perturb(phx_module *m)
{
    for (size_t i = 0; i < phx_module_num_params(m); i++) {
        phx_tensor *v = phx_param_value(phx_module_param(m, i));
        float *d = phx_tensor_data(v);
        for (int64_t k = 0; d && k < phx_tensor_numel(v); k++) d[k] += 1.0f;
    }
}

static int rank_fn(int rank, void *arg)
{
    const job *jb = arg;
    phx_comm *c = rank >= 0 ? tu_comm(rank) : NULL;
    if (rank >= 0 && !c) return 1;
    int world = phx_comm_size(c), fails = 0;
    if (rank < 0) rank = 0;
    phx_module *m = tu_mlp(sizes, 3, jb->seed), *w = NULL;
    phx_comm *shard = NULL, *replicate = NULL;
    if (jb->hybrid &&
        (phx_comm_split(c, rank / 2, rank, &shard) != PHX_OK ||
         phx_comm_split(c, rank % 2, rank, &replicate) != PHX_OK)) {
        printf("# rank %d: phx_comm_split: %s\n", rank, phx_last_error());
        fails++;
    }
    phx_zero_opts zo = PHX_ZERO_OPTS_INIT;
    zo.stage = jb->stage;
    if (jb->stage == 3) {
        phx_fsdp_opts fo = PHX_FSDP_OPTS_INIT;
        fo.wrap = wrap_first;
        fo.shard_comm = shard;
        fo.replicate_comm = replicate;
        w = m ? phx_fsdp_new(m, c, &fo) : NULL;
    } else {
        w = m ? phx_ddp_new(m, c, NULL) : NULL;
        zo.region_bytes = 100;
        zo.shard_comm = shard;
        zo.replicate_comm = jb->no_replicate ? NULL : replicate;
    }
    phx_optimizer *z = w ? phx_zero_optimizer_new(w, c, tu_make_adamw, NULL, &zo) : NULL;
    phx_status st = z ? PHX_OK : PHX_EINVAL;
    if (st == PHX_OK && jb->load) st = phx_zero_checkpoint_load(jb->load, w, z, NULL);
    if (st != PHX_OK) {
        printf("# rank %d: setup/load: %s\n", rank, phx_last_error());
        fails++;
    }
    int64_t rows = ROWS / world;
    for (int s = jb->first; s < jb->last && st == PHX_OK; s++) {
        double l;
        st = step_rows(w, z, s, rank * rows, rows, &l);
        double g = mean_across(c, l);
        if (rank == 0) got[s] = g;
        if (st != PHX_OK) printf("# rank %d step %d: %s\n", rank, s, phx_last_error());
    }
    if (st == PHX_OK && jb->perturb && phx_comm_rank(replicate) == 1) perturb(phx_optimizer_model(z));
    if (st == PHX_OK && jb->save && jb->no_replicate) {
        /* refused on every rank, nothing written */
        phx_status sv = phx_zero_checkpoint_save(jb->save, w, z, NULL);
        if (sv != PHX_EINVAL || !strstr(phx_last_error(), "replicate_comm")) {
            printf("# rank %d: save without a replicate group: %s (%s)\n", rank, phx_status_name(sv), phx_last_error());
            fails++;
        }
    } else if (st == PHX_OK && jb->save && (st = phx_zero_checkpoint_save(jb->save, w, z, NULL)) != PHX_OK)
        printf("# rank %d save: %s\n", rank, phx_last_error());
    fails += st != PHX_OK;
    fflush(stdout);
    phx_optimizer_free(z);
    phx_module_free(w);
    phx_module_free(m);
    phx_comm_free(shard);
    phx_comm_free(replicate);
    phx_comm_free(c);
    return fails;
}

static void run_world_on(const char *backend, int world, int stage, const char *what)
{
    clear_got();
    job jb = {stage, SAVE_AT, STEPS, dir, NULL, 900 + (uint64_t)world, false, false, false};
    phx_status st = world == 1 ? (rank_fn(-1, &jb) ? PHX_EINVAL : PHX_OK) : tu_spawn(backend, world, rank_fn, &jb);
    double e = loss_err(SAVE_AT, STEPS);
    ok(st == PHX_OK && e <= 1e-6, "%s: steps %d..%d's losses equal the uninterrupted world-1 run's (max error %.3g)",
       what, SAVE_AT, STEPS - 1, e);
    if (st != PHX_OK) diag("%s", phx_last_error());
}

/* A plain AdamW of one process continues from the checkpoint in d. */
static void load_full_check(const char *d, const char *what)
{
    clear_got();
    phx_module *m = tu_mlp(sizes, 3, 77);
    phx_optimizer *o = tu_make_adamw(m, NULL);
    phx_status st = phx_zero_checkpoint_load_full(d, m, o, NULL);
    for (int s = SAVE_AT; s < STEPS && st == PHX_OK; s++) st = step_rows(m, o, s, 0, ROWS, &got[s]);
    double e = loss_err(SAVE_AT, STEPS);
    ok(st == PHX_OK && e <= 1e-6, "%s: losses equal (max error %.3g)", what, e);
    if (st != PHX_OK) diag("%s", phx_last_error());
    phx_optimizer_free(o);
    phx_module_free(m);
}

/* Files in d whose names start with prefix. */
static int count_files(const char *d, const char *prefix)
{
    DIR *dd = opendir(d);
    int n = 0;
    for (struct dirent *e; dd && (e = readdir(dd));) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    if (dd) closedir(dd);
    return n;
}

/* Hybrid sharding (world 4: 2 groups of 2 shard, {0, 2} and {1, 3}
 * replicate): only the first replica's group writes, once; the second,
 * moved off on purpose before the save, leaves no trace in the
 * checkpoint. A hybrid ZeRO-1 given no replicate group is refused. */
static void hybrid_saves(void)
{
    static const int stages[] = {3, 2};
    for (int k = 0; k < 2; k++) {
        char hd[96];
        snprintf(hd, sizeof hd, "%s/hybrid-%d", dir, stages[k]);
        clear_got();
        job jb = {stages[k], 0, SAVE_AT, NULL, hd, 31, true, true, false};
        phx_status st = tu_spawn("threads", 4, rank_fn, &jb);
        double e = loss_err(0, SAVE_AT);
        int shards = count_files(hd, "shard-"),
            of2 = count_files(hd, "shard-0-of-2.") + count_files(hd, "shard-1-of-2.");
        ok(st == PHX_OK && e <= 1e-6 && shards == 2 && of2 == 2,
           "hybrid %s at world 4 (2 groups of 2): steps 0..4 equal the reference (max error %.3g), saved as %d "
           "shard files of 2 (expected 2)",
           stages[k] == 3 ? "FSDP" : "ZeRO-2", e, shards);
        if (st != PHX_OK) diag("%s", phx_last_error());
        char what[96];
        snprintf(what, sizeof what, "hybrid %s's checkpoint, the first replica's (the second was moved off)",
                 stages[k] == 3 ? "FSDP" : "ZeRO-2");
        load_full_check(hd, what);
    }
    char hd[96];
    snprintf(hd, sizeof hd, "%s/hybrid-none", dir);
    job jb = {1, 0, 1, NULL, hd, 31, true, false, true};
    phx_status st = tu_spawn("threads", 4, rank_fn, &jb);
    struct stat sb;
    ok(st == PHX_OK && stat(hd, &sb) != 0,
       "hybrid ZeRO-1 without replicate_comm: the save is refused on every rank naming replicate_comm, nothing "
       "written");
    if (st != PHX_OK) diag("%s", phx_last_error());
}

/* The buffers of a sharded checkpoint keep their dtype: a BatchNorm
 * CNN's running statistics (f32) and num_batches_tracked (i64) after 3
 * steps of an FSDP model with a ZeRO-3 AdamW in one process, saved and
 * loaded into a fresh one, come back bitwise. */
static void bn_buffers(void)
{
    char d[96];
    snprintf(d, sizeof d, "%s/bn", dir);
    phx_module *m = tu_small_cnn(), *m2 = tu_small_cnn();
    phx_module *w = m ? phx_fsdp_new(m, NULL, NULL) : NULL, *w2 = m2 ? phx_fsdp_new(m2, NULL, NULL) : NULL;
    phx_optimizer *z = w ? phx_zero_optimizer_new(w, NULL, tu_make_adamw, NULL, NULL) : NULL;
    phx_optimizer *z2 = w2 ? phx_zero_optimizer_new(w2, NULL, tu_make_adamw, NULL, NULL) : NULL;
    phx_loss *loss = phx_loss_new(PHX_LOSS_MSE, PHX_REDUCE_MEAN);
    phx_status st = z && z2 && loss ? PHX_OK : PHX_ENOMEM;
    for (int s = 0; s < 3 && st == PHX_OK; s++) {
        phx_tensor *x, *t;
        tu_cnn_batch(s, 0, 4, &x, &t);
        st = tu_step(w, z, loss, x, t);
        phx_tensor_free(x);
        phx_tensor_free(t);
    }
    if (st == PHX_OK) st = phx_zero_checkpoint_save(d, w, z, NULL);
    if (st == PHX_OK) st = phx_zero_checkpoint_load(d, w2, z2, NULL);
    size_t nb = phx_module_num_buffers(m), same = 0, i64 = 0;
    for (size_t i = 0; st == PHX_OK && i < nb; i++) {
        const phx_tensor *a = phx_module_buffer(m, i), *b = phx_module_buffer(m2, i);
        size_t n = phx_tensor_nbytes(a);
        char *ha = malloc(n ? n : 1), *hb = malloc(n ? n : 1);
        phx_tensor_to_host(a, ha);
        phx_tensor_to_host(b, hb);
        same += phx_tensor_dtype(a) == phx_tensor_dtype(b) && phx_tensor_nbytes(b) == n && memcmp(ha, hb, n) == 0;
        if (phx_tensor_dtype(a) == PHX_I64) i64 += *(const int64_t *)ha == 3;
        free(ha), free(hb);
    }
    ok(st == PHX_OK && nb == 3 && same == nb && i64 == 1,
       "a BatchNorm CNN's buffers (f32 running statistics, i64 num_batches_tracked = 3) round-trip a sharded "
       "checkpoint bitwise (%zu of %zu)",
       same, nb);
    if (st != PHX_OK) diag("%s", phx_last_error());
    phx_loss_free(loss);
    phx_optimizer_free(z);
    phx_optimizer_free(z2);
    phx_module_free(w);
    phx_module_free(w2);
    phx_module_free(m);
    phx_module_free(m2);
}

/* phx_checkpoint_save of a resharded FSDP model: refused naming the
 * way out; after phx_fsdp_gather_full it writes the full parameters. */
static void plain_save(void)
{
    phx_module *m = tu_mlp(sizes, 3, 5), *ref_m = tu_mlp(sizes, 3, 5);
    phx_fsdp_opts fo = PHX_FSDP_OPTS_INIT;
    fo.wrap = wrap_first;
    phx_module *w = phx_fsdp_new(m, NULL, &fo);
    char p[128];
    snprintf(p, sizeof p, "%s/plain.safetensors", dir);
    phx_status st = w ? phx_checkpoint_save_model(p, w) : PHX_EINVAL;
    struct stat sb;
    ok(st == PHX_ESTATE && strstr(phx_last_error(), "phx_fsdp_gather_full") && stat(p, &sb) != 0,
       "phx_checkpoint_save of a resharded FSDP model: PHX_ESTATE naming phx_fsdp_gather_full, no file (%s)",
       phx_last_error());
    st = w ? phx_fsdp_gather_full(w) : PHX_EINVAL;
    if (st == PHX_OK) st = phx_checkpoint_save_model(p, w);
    if (st == PHX_OK) st = phx_fsdp_release_full(w);
    phx_module *back = tu_mlp(sizes, 3, 6);
    if (st == PHX_OK) st = phx_checkpoint_load(p, back, NULL, NULL);
    double e = st == PHX_OK ? tu_max_rel(back, ref_m) : INFINITY;
    ok(st == PHX_OK && e == 0, "after phx_fsdp_gather_full it saves the full parameters (loaded back: difference %g)",
       e);
    if (st != PHX_OK) diag("%s", phx_last_error());
    phx_module_free(w);
    phx_module_free(m);
    phx_module_free(back);
    phx_module_free(ref_m);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/phx-fsdp-reshard-XXXXXX");
    if (!mkdtemp(dir)) skip_all("cannot create a temporary folder");
    plan(17);
    got = mmap(NULL, STEPS * sizeof *got, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (got == MAP_FAILED) {
        printf("Bail out! mmap\n");
        return 1;
    }
    phx_module *m = tu_mlp(sizes, 3, 31);
    phx_optimizer *o = tu_make_adamw(m, NULL);
    phx_status st = PHX_OK;
    for (int s = 0; s < STEPS && st == PHX_OK; s++) st = step_rows(m, o, s, 0, ROWS, &ref[s]);
    ok(st == PHX_OK && ref[STEPS - 1] < ref[0], "reference: 10 steps, loss %.6f -> %.6f", ref[0], ref[STEPS - 1]);
    phx_optimizer_free(o);
    phx_module_free(m);

    clear_got();
    job jb = {3, 0, SAVE_AT, NULL, dir, 31, false, false, false};
    st = tu_spawn("threads", 4, rank_fn, &jb);
    double e = loss_err(0, SAVE_AT);
    ok(st == PHX_OK && e <= 1e-6, "world 4 (FSDP): steps 0..4 equal the reference (max error %.3g), saved", e);
    if (st != PHX_OK) diag("%s", phx_last_error());

    run_world_on("threads", 4, 3, "load at world 4 (FSDP, the same)");
    run_world_on("threads", 2, 3, "load at world 2 (FSDP)");
    run_world_on("threads", 3, 3, "load at world 3 (FSDP)");
#ifdef HAVE_GLOO
    run_world_on("gloo", 3, 3, "gloo, 3 processes: load at world 3 (FSDP)");
#else
    skip(1, "built without Gloo");
#endif
    run_world_on("threads", 1, 3, "load at world 1 (FSDP without a comm)");
    run_world_on("threads", 2, 1, "load at world 2 (DDP + ZeRO-1)");

    load_full_check(dir, "plain AdamW via phx_zero_checkpoint_load_full");
    hybrid_saves();
    bn_buffers();
    plain_save();
    rm_tree(dir);
    return done_testing();
}
