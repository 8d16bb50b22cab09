/* Reshardable ZeRO checkpoints. An uninterrupted world-1 run (plain
 * AdamW, the whole global batch) gives the reference losses of steps
 * 0..9. Deterministic data: step s's global batch is rows 0..ROWS-1 of
 * tu_batch(s, ...), and a world of W ranks gives rank r the rows
 * r*ROWS/W .. (r+1)*ROWS/W-1 (ROWS divisible by 1, 2, 3 and 4), so the
 * mean of the ranks' losses is the global batch's loss. Four thread ranks
 * (DDP + ZeRO-2 AdamW) train steps 0..4 and save a sharded checkpoint;
 * then, from models initialised differently, steps 5..9 continue from it
 * at world 4 (ZeRO-2), 2 (ZeRO-1, small regions: pieces cut across
 * parameters), 3 (ZeRO-2; and ZeRO-1 on 3 gloo processes), 1 (ZeRO-1
 * without a comm, and a plain AdamW through phx_zero_checkpoint_load_full),
 * from a world-2 save loaded at world 4 (larger), from a second
 * generation saved into the same folder, and from
 * phx_zero_checkpoint_export's single file through phx_checkpoint_load:
 * every loss equals the reference's within 1e-6. The scaler's state
 * round-trips. Then bad input: a missing shard, a corrupt one (also at
 * world 4, where only rank 2 reads the corrupt tensor and every rank must
 * refuse), an index of another model and optimizer state of another kind
 * or layout are refused with a message naming the file and tensor, the
 * model (and the shard state) left as it was. */
#include <sys/mman.h>
#include <unistd.h>
#include "t/tap.h"
#include "t/reshard-util.h"

static char dir[64], dir2[80];

static phx_optimizer *make_amsgrad(phx_module *m, void *arg)
{
    (void)arg;
    phx_adam_opts o = PHX_ADAMW_OPTS_INIT;
    o.lr = LR;
    o.amsgrad = true;
    return phx_adam_new(m, &o);
}

typedef struct job {
    int stage;
    int first, last; /* steps first .. last-1 */
    const char *load; /* NULL: start fresh */
    const char *save; /* NULL: no save after the steps */
    uint64_t seed;
    bool expect_fail; /* the load must fail on every rank, changing nothing */
} job;

/* expect_fail runs: per rank, whether the load failed leaving the
 * parameters and the shard's state as they were, and whether its message
 * says another rank failed (the agreement) or names a checksum. */
static int *refused, *by_other, *by_crc; /* [4] each, shared */

/* The shard optimizer's state, flattened to a malloc'd host array. */
static float *state_of(phx_optimizer *z, size_t *n)
{
    const char **names;
    phx_tensor **ts;
    size_t k = phx_optimizer_state(phx_zero_inner(z), &names, &ts), total = 0;
    for (size_t i = 0; i < k; i++) total += (size_t)phx_tensor_numel(ts[i]);
    float *h = calloc(total ? total : 1, sizeof *h);
    for (size_t i = 0, at = 0; h && i < k; i++) {
        phx_tensor_to_host(ts[i], h + at);
        at += (size_t)phx_tensor_numel(ts[i]);
    }
    *n = total;
    return h;
}

static int rank_fn(int rank, void *arg)
{
    const job *jb = arg;
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    int world = phx_comm_size(c), fails = 0;
    phx_module *m = tu_mlp(sizes, 3, jb->seed);
    phx_ddp_opts o = PHX_DDP_OPTS_INIT;
    o.first_bucket_bytes = 64;
    o.bucket_bytes = 128;
    phx_module *ddp = m ? phx_ddp_new(m, c, &o) : NULL;
    phx_zero_opts zo = PHX_ZERO_OPTS_INIT;
    zo.stage = jb->stage;
    zo.region_bytes = 100; /* 25 floats: ZeRO-1 regions cut parameters */
    phx_optimizer *z = ddp ? phx_zero_optimizer_new(ddp, c, tu_make_adamw, NULL, &zo) : NULL;
    phx_status st = z ? PHX_OK : PHX_EINVAL;
    if (st == PHX_OK && jb->expect_fail) {
        size_t np, ns, np2, ns2;
        float *p0 = tu_flatten(m, &np), *s0 = state_of(z, &ns);
        st = phx_zero_checkpoint_load(jb->load, ddp, z, NULL);
        float *p1 = tu_flatten(m, &np2), *s1 = state_of(z, &ns2);
        refused[rank] = st == PHX_EIO && np == np2 && ns == ns2 && memcmp(p0, p1, np * sizeof *p0) == 0 &&
            memcmp(s0, s1, ns * sizeof *s0) == 0;
        by_other[rank] = strstr(phx_last_error(), "another rank") != NULL;
        by_crc[rank] = strstr(phx_last_error(), "checksum") != NULL;
        printf("# rank %d: %s\n", rank, phx_last_error());
        free(p0), free(p1), free(s0), free(s1);
        fflush(stdout);
        phx_optimizer_free(z);
        phx_module_free(ddp);
        phx_module_free(m);
        phx_comm_free(c);
        return 0;
    }
    if (st == PHX_OK && jb->load) st = phx_zero_checkpoint_load(jb->load, ddp, z, NULL);
    if (st != PHX_OK) {
        printf("# rank %d: setup/load: %s\n", rank, phx_last_error());
        fails++;
    }
    int64_t rows = ROWS / world;
    for (int s = jb->first; s < jb->last && st == PHX_OK; s++) {
        double l;
        st = step_rows(ddp, z, s, rank * rows, rows, &l);
        double g = mean_across(c, l);
        if (rank == 0) got[s] = g;
        if (st != PHX_OK) printf("# rank %d step %d: %s\n", rank, s, phx_last_error());
    }
    if (st == PHX_OK && jb->save && (st = phx_zero_checkpoint_save(jb->save, ddp, z, NULL)) != PHX_OK)
        printf("# rank %d save: %s\n", rank, phx_last_error());
    fails += st != PHX_OK;
    fflush(stdout);
    phx_optimizer_free(z);
    phx_module_free(ddp);
    phx_module_free(m);
    phx_comm_free(c);
    return fails;
}

/* Rank 1's shard optimizer keeps AMSGrad's 3 state kinds, rank 0's
 * AdamW's 2: the save must fail on both ranks (no hang) and write no
 * index. */
static phx_optimizer *make_mixed(phx_module *m, void *arg)
{
    return *(const int *)arg == 1 ? make_amsgrad(m, NULL) : tu_make_adamw(m, NULL);
}

static int mixed_rank(int rank, void *arg)
{
    phx_comm *c = tu_comm(rank);
    if (!c) return 1;
    phx_module *m = tu_mlp(sizes, 3, 3);
    phx_optimizer *z = phx_zero_optimizer_new(m, c, make_mixed, &rank, NULL);
    phx_status st = z ? phx_zero_checkpoint_save((const char *)arg, m, z, NULL) : PHX_EINVAL;
    refused[rank] = st == PHX_EUNSUPPORTED && strstr(phx_last_error(), "state kinds") != NULL;
    if (!refused[rank]) printf("# rank %d: %s\n", rank, phx_last_error());
    fflush(stdout);
    phx_optimizer_free(z);
    phx_module_free(m);
    phx_comm_free(c);
    return 0;
}

static void run_world_on(const char *backend, int world, int stage, const char *from, const char *what)
{
    clear_got();
    job jb = {stage, SAVE_AT, STEPS, from, NULL, 900 + (uint64_t)world, false};
    phx_status st = tu_spawn(backend, world, rank_fn, &jb);
    double e = loss_err(SAVE_AT, STEPS);
    ok(st == PHX_OK && e <= 1e-6, "%s: steps %d..%d's losses equal the reference's (max error %.3g)", what, SAVE_AT,
       STEPS - 1, e);
    if (st != PHX_OK) diag("%s", phx_last_error());
}

static void run_world(int world, int stage, const char *from, const char *what)
{
    run_world_on("threads", world, stage, from, what);
}

/* Steps 5..9 of a plain AdamW over m (already loaded); losses into got. */
static phx_status continue_plain(phx_module *m, phx_optimizer *o)
{
    phx_status st = PHX_OK;
    clear_got();
    for (int s = SAVE_AT; s < STEPS && st == PHX_OK; s++) st = step_rows(m, o, s, 0, ROWS, &got[s]);
    return st;
}

static float *params_of(phx_module *m, size_t *n)
{
    return tu_flatten(m, n);
}

static int same_params(phx_module *m, const float *before, size_t n)
{
    size_t k;
    float *now = params_of(m, &k);
    int same = k == n && memcmp(now, before, n * sizeof *now) == 0;
    free(now);
    return same;
}

static void file_path(char *buf, size_t len, const char *d, const char *name)
{
    snprintf(buf, len, "%s/%s", d, name);
}

static void bad_input(void)
{
    phx_module *m = tu_mlp(sizes, 3, 4242);
    phx_optimizer *o = tu_make_adamw(m, NULL);
    size_t n;
    float *before = params_of(m, &n);
    char shard[160], moved[170];
    file_path(shard, sizeof shard, dir, "shard-2-of-4.g1.safetensors");
    snprintf(moved, sizeof moved, "%s.away", shard);

    /* a missing shard */
    ok(rename(shard, moved) == 0, "shard 2 moved away");
    phx_status st = phx_zero_checkpoint_load_full(dir, m, o, NULL);
    ok(st != PHX_OK && strstr(phx_last_error(), "shard-2-of-4.g1.safetensors") && same_params(m, before, n),
       "a missing shard is refused naming it, nothing changed (%s)", phx_last_error());
    rename(moved, shard);

    /* a corrupt shard: one bit of its last tensor's data flipped */
    FILE *f = fopen(shard, "r+b");
    int flipped = 0;
    if (f && fseek(f, -1, SEEK_END) == 0) {
        int ch = fgetc(f);
        fseek(f, -1, SEEK_END);
        flipped = fputc(ch ^ 0x10, f) != EOF;
    }
    if (f) fclose(f);
    ok(flipped, "one bit of shard 2 flipped");
    st = phx_zero_checkpoint_load_full(dir, m, o, NULL);
    ok(st == PHX_EIO && strstr(phx_last_error(), "shard-2-of-4.g1.safetensors") &&
           strstr(phx_last_error(), "checksum") && strstr(phx_last_error(), "tensor '") && same_params(m, before, n),
       "a corrupt shard is refused naming the file and tensor, nothing changed (%s)", phx_last_error());
    /* a ZeRO load at world 1 reads the corrupt tensor too (it needs every piece) */
    phx_optimizer *z1 = phx_zero_optimizer_new(m, NULL, tu_make_adamw, NULL, NULL);
    st = z1 ? phx_zero_checkpoint_load(dir, m, z1, NULL) : PHX_EINVAL;
    ok(st == PHX_EIO && strstr(phx_last_error(), "checksum") && same_params(m, before, n),
       "... and through phx_zero_checkpoint_load (%s)", phx_last_error());
    /* At world 4 with the saving layout (ZeRO-2, the same buckets) only
     * rank 2 reads shard 2's state, where the corrupt tensor is; every rank
     * must still refuse, its parameters and shard state unchanged. */
    job jf = {2, 0, 0, dir, NULL, 7, true};
    st = tu_spawn("threads", 4, rank_fn, &jf);
    ok(st == PHX_OK && refused[0] && refused[1] && refused[2] && refused[3],
       "world 4: every rank refuses the corrupt shard, nothing changed (%d %d %d %d)", refused[0], refused[1],
       refused[2], refused[3]);
    ok(by_crc[2] && by_other[0] && by_other[1] && by_other[3],
       "... rank 2, which reads the tensor, names the checksum, the others say another rank failed");
    f = fopen(shard, "r+b");
    if (f && fseek(f, -1, SEEK_END) == 0) {
        int ch = fgetc(f);
        fseek(f, -1, SEEK_END);
        fputc(ch ^ 0x10, f);
    }
    if (f) fclose(f);

    /* an index of another model */
    static const int64_t other[] = {5, 8, 4};
    phx_module *m2 = tu_mlp(other, 3, 4242);
    phx_optimizer *o2 = tu_make_adamw(m2, NULL);
    size_t n2;
    float *before2 = params_of(m2, &n2);
    st = phx_zero_checkpoint_load_full(dir, m2, o2, NULL);
    ok(st == PHX_EIO && strstr(phx_last_error(), "index.json") && strstr(phx_last_error(), "0.weight") &&
           same_params(m2, before2, n2),
       "an index of another model is refused naming the tensor, nothing changed (%s)", phx_last_error());

    /* optimizer state of another kind (SGD) and layout (AMSGrad: 3 kinds) */
    phx_sgd_opts so = PHX_SGD_OPTS_INIT;
    so.momentum = 0.9;
    phx_optimizer *sgd = phx_sgd_new(m, &so);
    st = phx_zero_checkpoint_load_full(dir, m, sgd, NULL);
    ok(st == PHX_EIO && strstr(phx_last_error(), "AdamW") && strstr(phx_last_error(), "index.json") &&
           same_params(m, before, n),
       "state of another optimizer kind is refused, nothing changed (%s)", phx_last_error());
    phx_optimizer *ams = make_amsgrad(m, NULL);
    st = phx_zero_checkpoint_load_full(dir, m, ams, NULL);
    ok(st == PHX_EIO && strstr(phx_last_error(), "max_exp_avg_sq") && same_params(m, before, n),
       "state of another layout (AMSGrad) is refused naming the tensor, nothing changed (%s)", phx_last_error());
    phx_optimizer *zams = phx_zero_optimizer_new(m, NULL, make_amsgrad, NULL, NULL);
    st = zams ? phx_zero_checkpoint_load(dir, m, zams, NULL) : PHX_EINVAL;
    ok(st == PHX_EIO && strstr(phx_last_error(), "index.json") && same_params(m, before, n),
       "... and through phx_zero_checkpoint_load (%s)", phx_last_error());
    /* a missing index */
    char nodir[128];
    snprintf(nodir, sizeof nodir, "%s/nothing-here", dir);
    st = phx_zero_checkpoint_load_full(nodir, m, o, NULL);
    ok(st == PHX_ENOTFOUND && strstr(phx_last_error(), "nothing-here/index.json"),
       "a missing index: PHX_ENOTFOUND (%s)", phx_last_error());

    phx_optimizer_free(zams);
    phx_optimizer_free(ams);
    phx_optimizer_free(sgd);
    phx_optimizer_free(z1);
    phx_optimizer_free(o2);
    phx_module_free(m2);
    free(before2);
    phx_optimizer_free(o);
    phx_module_free(m);
    free(before);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/phx-reshard-XXXXXX");
    if (!mkdtemp(dir)) skip_all("cannot create a temporary folder");
    snprintf(dir2, sizeof dir2, "%s/w2", dir);
    plan(31);
    got = mmap(NULL, STEPS * sizeof *got + 12 * sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (got == MAP_FAILED) {
        printf("Bail out! mmap\n");
        return 1;
    }
    refused = (int *)(got + STEPS);
    by_other = refused + 4;
    by_crc = refused + 8;

    /* the reference: one process, the whole batch, 10 steps */
    phx_module *m = tu_mlp(sizes, 3, 31);
    phx_optimizer *o = tu_make_adamw(m, NULL);
    phx_status st = PHX_OK;
    for (int s = 0; s < STEPS && st == PHX_OK; s++) st = step_rows(m, o, s, 0, ROWS, &ref[s]);
    ok(st == PHX_OK && ref[STEPS - 1] < ref[0], "reference: 10 steps, loss %.6f -> %.6f", ref[0], ref[STEPS - 1]);
    phx_optimizer_free(o);
    phx_module_free(m);

    /* world 4, ZeRO-2: steps 0..4, then the save */
    clear_got();
    job jb = {2, 0, SAVE_AT, NULL, dir, 31, false};
    st = tu_spawn("threads", 4, rank_fn, &jb);
    double e = loss_err(0, SAVE_AT);
    ok(st == PHX_OK && e <= 1e-6, "world 4 (ZeRO-2): steps 0..4 equal the reference (max error %.3g), saved", e);
    if (st != PHX_OK) diag("%s", phx_last_error());
    char p[160];
    struct stat sb;
    int files = 0;
    for (int r = 0; r < 4; r++) {
        snprintf(p, sizeof p, "%s/shard-%d-of-4.g1.safetensors", dir, r);
        files += stat(p, &sb) == 0;
    }
    file_path(p, sizeof p, dir, "index.json");
    ok(files == 4 && stat(p, &sb) == 0, "four shards and index.json written (%d shards)", files);

    run_world(4, 2, dir, "load at world 4 (the same, ZeRO-2)");
    run_world(2, 1, dir, "load at world 2 (ZeRO-1)");
    run_world(3, 2, dir, "load at world 3 (ZeRO-2)");
#ifdef HAVE_GLOO
    run_world_on("gloo", 3, 1, dir, "gloo, 3 processes: load at world 3 (ZeRO-1)");
#else
    skip(1, "built without Gloo");
#endif

    /* world 1: a ZeRO optimizer without a comm */
    m = tu_mlp(sizes, 3, 77);
    o = phx_zero_optimizer_new(m, NULL, tu_make_adamw, NULL, NULL);
    st = o ? phx_zero_checkpoint_load(dir, m, o, NULL) : PHX_EINVAL;
    if (st == PHX_OK) st = continue_plain(m, o);
    e = loss_err(SAVE_AT, STEPS);
    ok(st == PHX_OK && e <= 1e-6, "load at world 1 (ZeRO, no comm): losses equal (max error %.3g) %s", e,
       st ? phx_last_error() : "");
    phx_optimizer_free(o);
    phx_module_free(m);

    /* world 1: a plain AdamW */
    m = tu_mlp(sizes, 3, 78);
    o = tu_make_adamw(m, NULL);
    st = phx_zero_checkpoint_load_full(dir, m, o, NULL);
    int64_t steps = phx_optimizer_steps(o);
    if (st == PHX_OK) st = continue_plain(m, o);
    e = loss_err(SAVE_AT, STEPS);
    ok(st == PHX_OK && steps == SAVE_AT && e <= 1e-6,
       "phx_zero_checkpoint_load_full into a plain AdamW: step count %lld, losses equal (max error %.3g) %s",
       (long long)steps, e, st ? phx_last_error() : "");
    phx_optimizer_free(o);
    phx_module_free(m);

    /* the export: one ordinary checkpoint */
    char one[160];
    file_path(one, sizeof one, dir, "full.safetensors");
    st = phx_zero_checkpoint_export(dir, one);
    ok(st == PHX_OK, "phx_zero_checkpoint_export writes one file %s", st ? phx_last_error() : "");
    m = tu_mlp(sizes, 3, 79);
    o = tu_make_adamw(m, NULL);
    st = phx_checkpoint_load(one, m, o, NULL);
    if (st == PHX_OK) st = continue_plain(m, o);
    e = loss_err(SAVE_AT, STEPS);
    ok(st == PHX_OK && e <= 1e-6, "... which phx_checkpoint_load reads into a plain AdamW: losses equal (max %.3g) %s",
       e, st ? phx_last_error() : "");
    phx_optimizer_free(o);
    phx_module_free(m);

    /* larger: a world-2 save (ZeRO-1) of the state after step 4, loaded at
     * world 4 */
    clear_got();
    job j2 = {1, SAVE_AT, SAVE_AT, dir, dir2, 555, false};
    st = tu_spawn("threads", 2, rank_fn, &j2);
    ok(st == PHX_OK, "world 2 loads and saves again %s", st ? phx_last_error() : "");
    run_world(4, 1, dir2, "world-2 save loaded at world 4 (larger, ZeRO-1)");

    /* a second save into the same folder replaces the first generation */
    job j3 = {2, SAVE_AT, SAVE_AT, dir2, dir2, 556, false};
    st = tu_spawn("threads", 2, rank_fn, &j3);
    snprintf(p, sizeof p, "%s/shard-0-of-2.g1.safetensors", dir2);
    int old = stat(p, &sb) == 0;
    snprintf(p, sizeof p, "%s/shard-0-of-2.g2.safetensors", dir2);
    ok(st == PHX_OK && !old && stat(p, &sb) == 0, "a second save writes generation 2 and removes generation 1");
    run_world(3, 1, dir2, "generation 2 loaded at world 3");

    /* the GradScaler's state travels with the checkpoint */
    phx_precision *fp16 = NULL;
    phx_scaler *sc = NULL, *sc2 = NULL;
    phx_scaler_opts sco = PHX_SCALER_OPTS_INIT;
    char d3[96];
    snprintf(d3, sizeof d3, "%s/scaler", dir);
    m = tu_mlp(sizes, 3, 80);
    o = phx_zero_optimizer_new(m, NULL, tu_make_adamw, NULL, NULL);
    st = phx_precision_new("fp16", &fp16);
    if (st == PHX_OK) sc = phx_scaler_new(fp16, &sco), sc2 = phx_scaler_new(fp16, &sco);
    st = sc && sc2 && o ? phx_scaler_set_state(sc, 512.0, 3) : PHX_EINVAL;
    if (st == PHX_OK) st = phx_zero_checkpoint_save(d3, m, o, sc);
    if (st == PHX_OK) st = phx_zero_checkpoint_load(d3, m, o, sc2);
    ok(st == PHX_OK && phx_scaler_get_scale(sc2) == 512.0 && phx_scaler_growth_tracker(sc2) == 3,
       "the scaler's scale and growth tracker round-trip (%g, %lld) %s", sc2 ? phx_scaler_get_scale(sc2) : 0.0,
       sc2 ? (long long)phx_scaler_growth_tracker(sc2) : -1LL, st ? phx_last_error() : "");
    st = phx_zero_checkpoint_load(dir, m, o, sc2);
    ok(st == PHX_EIO && strstr(phx_last_error(), "GradScaler") && phx_scaler_get_scale(sc2) == 512.0,
       "a scaler asked of a checkpoint saved without one is refused (%s)", phx_last_error());
    phx_scaler_free(sc);
    phx_scaler_free(sc2);
    phx_precision_free(fp16);
    phx_optimizer_free(o);
    phx_module_free(m);

    /* A safetensors file (a shard, or any) whose 8-byte header length
     * starts 80 03, a pickle's magic, is still read (a 16.8 M-parameter
     * shard had one). Metadata padding brings the header to 0x380 bytes. */
    char pk[160];
    file_path(pk, sizeof pk, dir, "pickle-like.safetensors");
    int64_t two = 2;
    phx_tensor *pt = phx_tensor_zeros(PHX_F32, 1, &two, phx_cpu());
    const char *pn[] = {"t"};
    unsigned char head[2] = {0, 0};
    for (size_t pad = 0, tries = 0; tries < 40 && !(head[0] == 0x80 && head[1] == 3); tries++) {
        char *v = calloc(pad + 1, 1);
        memset(v, 'x', pad);
        phx_meta pm = {"pad", v};
        phx_safetensors_write(pk, pn, &pt, 1, &pm, 1);
        free(v);
        FILE *hf = fopen(pk, "rb");
        uint64_t hl = 0;
        if (hf && fread(&hl, 8, 1, hf) == 1) head[0] = (unsigned char)(hl & 0xff), head[1] = (unsigned char)(hl >> 8);
        if (hf) fclose(hf);
        pad = hl < 0x380 ? pad + (0x380 - hl) : hl > 0x380 && pad > 0 ? pad - 1 : pad + 1;
    }
    char **rn = NULL;
    phx_tensor **rt = NULL;
    size_t rcount = 0;
    st = head[0] == 0x80 && head[1] == 3 ? phx_safetensors_read(pk, &rn, &rt, &rcount) : PHX_EINVAL;
    ok(st == PHX_OK && rcount == 1, "a safetensors file whose header length starts 80 03 (a pickle's magic) is read %s",
       st ? phx_last_error() : "");
    phx_safetensors_free(rn, rt, rcount);
    phx_tensor_free(pt);

    char dm[96];
    snprintf(dm, sizeof dm, "%s/mixed", dir);
    refused[0] = refused[1] = 0;
    st = tu_spawn("threads", 2, mixed_rank, dm);
    file_path(p, sizeof p, dm, "index.json");
    ok(st == PHX_OK && refused[0] && refused[1] && stat(p, &sb) != 0,
       "ranks whose shard optimizers keep different state kinds: every rank's save refused, no index");

    bad_input();
    rm_tree(dir);
    return done_testing();
}
