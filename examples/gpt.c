/* A character-level GPT trained on Debian's fortunes (or any text file).
 *
 *   examples/gpt [--steps N] [--data FILE] [--save F] [--load F] [--sample N] ...
 *   phxrun --nproc-per-node 2 examples/gpt --steps 300     DDP, one batch stream per rank
 *   PHX_PRECISION=bf16 examples/gpt                        mixed precision (fp16: loss scaling)
 *   phxrun --nproc-per-node 4 examples/gpt --zero 2 --steps 100 --resume ck   ZeRO-2, resumable
 *
 * The text's bytes are the vocabulary; 90 % trains, the last 10 %
 * validates. Each step draws --batch windows of --context bytes at random
 * positions from a splitmix64 stream seeded by --seed and the
 * rank, so every rank trains on different windows while DDP keeps the
 * replicas identical. AdamW (decay on Linear weights only), linear warmup
 * then cosine decay to lr/10, clip_grad_norm 1.0. Rank 0 prints
 * "step N loss X lr Y T tokens/s" every --print-every steps (the loss is
 * averaged over ranks), "val loss X" every --eval-every steps and at the
 * end, then --sample N bytes generated from --prompt with --temperature
 * and --top-k. --save writes a checkpoint (model, optimizer, scaler, the
 * vocabulary and the shape in its metadata); --load restores one (with
 * --steps 0 it only evaluates and samples).
 *
 * --zero 1|2|3 shards the optimizer state (with 2 the gradients, with 3
 * also the parameters: FSDP, a unit per block) over the ranks (examples/args.h, ex_parallel_new); --save DIR then writes a
 * sharded checkpoint folder. --resume DIR continues from the sharded
 * checkpoint in DIR when there is one, at any number of ranks, and saves
 * it there at the end; --steps is then the total to reach, and each
 * window of step s is drawn from its own stream of (seed, s, window), so
 * that step s's global batch (windows 0 .. world * batch - 1, rank r
 * taking r * batch ..) is the same whether the run was resumed or not,
 * and at any world size with the same world * batch. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <phalanx/phalanx.h>
#include "examples/args.h"

#define DEFAULT_DATA "/usr/share/games/fortunes"

typedef struct opts {
    int steps, batch, context, layers, heads, dim, print_every, eval_every, eval_batches, sample, top_k;
    int zero, schedule_steps;
    double lr, dropout, temperature;
    uint64_t seed;
    const char *data, *save, *load, *resume, *prompt;
} opts;

static int rank_ = 0;
/* --metrics, --tensorboard and --log-every (examples/args.h) */
static phx_progress_opts progress_opts_ = PHX_PROGRESS_OPTS_INIT;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int fail(const char *what)
{
    fprintf(stderr, "gpt: rank %d: %s: %s\n", rank_, what, phx_last_error());
    return 1;
}

/* ---- data ------------------------------------------------------------- */

typedef struct text {
    unsigned char *bytes;
    size_t n;
} text;

static int append_file(text *t, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    unsigned char buf[65536];
    size_t r;
    while ((r = fread(buf, 1, sizeof buf, f)) > 0) {
        unsigned char *nb = realloc(t->bytes, t->n + r);
        if (!nb) {
            fclose(f);
            return -1;
        }
        t->bytes = nb;
        memcpy(t->bytes + t->n, buf, r);
        t->n += r;
    }
    fclose(f);
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A file, or every plain fortune file of a folder (no '.': skips the
 * .dat indexes and .u8 links), in name order. */
static int load_text(const char *path, text *t)
{
    DIR *d = opendir(path);
    if (!d) return append_file(t, path);
    char *names[1024];
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 1024)
        if (e->d_name[0] != '.' && !strchr(e->d_name, '.')) names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, n, sizeof *names, by_name);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", path, names[i]);
        if (rc == 0 && append_file(t, p) != 0) rc = -1;
        free(names[i]);
    }
    return rc;
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Windows of len T + 1 starting at random offsets of [lo, hi - T - 1). */
static void draw(const int64_t *tok, int64_t lo, int64_t hi, int B, int T, uint64_t *s, int64_t *x, int64_t *y)
{
    for (int b = 0; b < B; b++) {
        int64_t at = lo + (int64_t)(splitmix64(s) % (uint64_t)(hi - lo - T - 1));
        memcpy(x + (size_t)b * T, tok + at, (size_t)T * sizeof *x);
        memcpy(y + (size_t)b * T, tok + at + 1, (size_t)T * sizeof *y);
    }
}

/* Window i of step s for --resume: each from its own stream of (seed, s,
 * i), so any step's batch can be drawn without the steps before it. */
static void draw_step(const int64_t *tok, int64_t hi, int B, int T, uint64_t seed, int64_t step, int64_t first,
                      int64_t *x, int64_t *y)
{
    for (int b = 0; b < B; b++) {
        uint64_t s =
            seed * 1000003u + (uint64_t)step * 0x9E3779B97F4A7C15ull + (uint64_t)(first + b) * 0xD1B54A32D192ED03ull;
        draw(tok, 0, hi, 1, T, &s, x + (size_t)b * T, y + (size_t)b * T);
    }
}

/* ---- evaluation and sampling ---------------------------------------------- */

/* Mean loss over eval_batches fixed windows of [lo, hi) (the same on every rank). */
static int evaluate(phx_module *m, phx_loss *loss, const int64_t *tok, int64_t lo, int64_t hi, const opts *o,
                    phx_tensor *x, phx_tensor *y, double *out)
{
    uint64_t s = 12345;
    double sum = 0;
    phx_module_train(m, false);
    for (int i = 0; i < o->eval_batches; i++) {
        phx_tensor *logits;
        float l;
        draw(tok, lo, hi, o->batch, o->context, &s, phx_tensor_data(x), phx_tensor_data(y));
        if (phx_module_forward(m, x, &logits) != PHX_OK || phx_loss_forward(loss, logits, y, &l) != PHX_OK)
            return fail("evaluation");
        sum += l;
    }
    phx_module_train(m, true);
    *out = sum / o->eval_batches;
    return 0;
}

static int sample(phx_module *m, const unsigned char *vocab, int V, const opts *o)
{
    int64_t map[256];
    for (int i = 0; i < 256; i++) map[i] = -1;
    for (int i = 0; i < V; i++) map[vocab[i]] = i;
    size_t cap = strlen(o->prompt) + (size_t)o->sample + 1, n = 0;
    int64_t *ctx = malloc(cap * sizeof *ctx);
    float *row = malloc((size_t)V * sizeof *row);
    int64_t *idx = malloc((size_t)o->context * sizeof *idx);
    for (const char *p = o->prompt; *p; p++)
        if (map[(unsigned char)*p] >= 0) ctx[n++] = map[(unsigned char)*p];
    if (n == 0) ctx[n++] = map['\n'] >= 0 ? map['\n'] : 0;
    uint64_t s = o->seed * 7919 + 17;
    phx_module_train(m, false);
    printf("--- sample (temperature %.2f, top-k %d) ---\n%s", o->temperature, o->top_k, o->prompt);
    int rc = 0;
    bool grad_was = phx_set_grad_enabled(false); /* no graph while sampling (and a plain view of the logits) */
    for (int i = 0; i < o->sample && rc == 0; i++) {
        int64_t T = (int64_t)n < o->context ? (int64_t)n : o->context, shape[2] = {1, T};
        memcpy(idx, ctx + n - (size_t)T, (size_t)T * sizeof *idx);
        phx_tensor *x = phx_tensor_from_data(PHX_I64, 2, shape, idx), *logits = NULL;
        int64_t vs = V;
        phx_tensor *last = NULL;
        if (!x || phx_module_forward(m, x, &logits) != PHX_OK ||
            !(last = phx_tensor_view(logits, (T - 1) * V, 1, &vs))) {
            rc = fail("sampling");
        } else {
            phx_tensor *f = phx_tensor_new(PHX_F32, 1, &vs, phx_cpu());
            if (!f || phx_tensor_cast(f, last) != PHX_OK || phx_tensor_to_host(f, row) != PHX_OK) rc = fail("sampling");
            phx_tensor_free(f);
        }
        phx_tensor_free(last);
        phx_tensor_free(x);
        if (rc) break;
        /* top-k: keep the k largest logits; softmax at the temperature */
        float kth = -INFINITY;
        if (o->top_k > 0 && o->top_k < V) {
            float *sorted = malloc((size_t)V * sizeof *sorted);
            memcpy(sorted, row, (size_t)V * sizeof *sorted);
            for (int a = 0; a < o->top_k; a++) /* partial selection sort: k is small */
                for (int b = a + 1; b < V; b++)
                    if (sorted[b] > sorted[a]) {
                        float t = sorted[a];
                        sorted[a] = sorted[b];
                        sorted[b] = t;
                    }
            kth = sorted[o->top_k - 1];
            free(sorted);
        }
        double mx = -INFINITY, z = 0;
        for (int v = 0; v < V; v++)
            if (row[v] >= kth && row[v] > mx) mx = row[v];
        for (int v = 0; v < V; v++) z += row[v] >= kth ? exp((row[v] - mx) / o->temperature) : 0.0;
        double u = (double)(splitmix64(&s) >> 11) * 0x1.0p-53 * z, acc = 0;
        int pick = 0;
        for (int v = 0; v < V; v++) {
            if (row[v] < kth) continue;
            acc += exp((row[v] - mx) / o->temperature);
            pick = v;
            if (acc >= u) break;
        }
        ctx[n++] = pick;
        putchar(vocab[pick]);
    }
    phx_set_grad_enabled(grad_was);
    printf("\n--- end of sample ---\n");
    fflush(stdout);
    free(ctx);
    free(row);
    free(idx);
    return rc;
}

/* ---- checkpoints ------------------------------------------------------------ */

static void hex(const unsigned char *b, int n, char *out)
{
    for (int i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", b[i]);
    out[2 * n] = 0;
}

/* Reads the vocabulary and shape a checkpoint was saved with into o and vocab. */
static int read_meta(const char *path, opts *o, unsigned char *vocab, int *V)
{
    char buf[600], shape[128];
    if (phx_checkpoint_meta(path, "gpt.vocab", buf, sizeof buf) != PHX_OK ||
        phx_checkpoint_meta(path, "gpt.shape", shape, sizeof shape) != PHX_OK) {
        fprintf(stderr, "gpt: --load %s: %s (not a checkpoint of examples/gpt?)\n", path, phx_last_error());
        return 1;
    }
    int n = (int)strlen(buf) / 2;
    for (int i = 0; i < n; i++) {
        unsigned v;
        sscanf(buf + 2 * i, "%2x", &v);
        vocab[i] = (unsigned char)v;
    }
    *V = n;
    if (sscanf(shape, "%d %d %d %d", &o->context, &o->layers, &o->heads, &o->dim) != 4) {
        fprintf(stderr, "gpt: --load %s: metadata gpt.shape is '%s', expected 'context layers heads dim'\n", path,
                shape);
        return 1;
    }
    return 0;
}

/* ---- training ----------------------------------------------------------------- */

/* AdamW as for the whole model (decay on Linear weights only), over
 * whatever module ex_parallel_new hands it: the model, its DDP wrapper, or
 * a ZeRO shard. */
static phx_optimizer *make_adamw(phx_module *m, void *arg)
{
    phx_optimizer *opt = phx_adam_new(m, arg);
    if (opt && phx_adam_decay_matrices_only(opt, NULL) != PHX_OK) {
        phx_optimizer_free(opt);
        return NULL;
    }
    return opt;
}

static int run(opts *o)
{
    phx_comm *comm = NULL;
    int world = 1;
    if (getenv("WORLD_SIZE") || getenv("OMPI_COMM_WORLD_SIZE") || getenv("SLURM_PROCID")) {
        if (phx_comm_init(NULL, &comm) != PHX_OK) return fail("phx_comm_init");
        rank_ = phx_comm_rank(comm);
        world = phx_comm_size(comm);
    }
    text t = {0};
    if (load_text(o->data, &t) != 0 || t.n < 1000) {
        fprintf(stderr, "gpt: --data %s: %s%s\n", o->data,
                t.n         ? "fewer than 1000 bytes"
                    : errno ? strerror(errno)
                            : "no text found",
                strcmp(o->data, DEFAULT_DATA) ? ""
                                              : " (the default: install Debian's fortunes, as ./bootstrap does, "
                                                "or give --data FILE|DIR)");
        return 1;
    }
    unsigned char vocab[256];
    int V = 0;
    if (o->load && read_meta(o->load, o, vocab, &V)) return 1;
    if (!o->load) {
        int seen[256] = {0};
        for (size_t i = 0; i < t.n; i++) seen[t.bytes[i]] = 1;
        for (int c = 0; c < 256; c++)
            if (seen[c]) vocab[V++] = (unsigned char)c;
    }
    int64_t map[256];
    for (int c = 0; c < 256; c++) map[c] = -1;
    for (int i = 0; i < V; i++) map[vocab[i]] = i;
    int64_t *tok = malloc(t.n * sizeof *tok), n_tok = 0;
    for (size_t i = 0; i < t.n; i++)
        if (map[t.bytes[i]] >= 0) tok[n_tok++] = map[t.bytes[i]];
    free(t.bytes);
    int64_t split = n_tok * 9 / 10;

    phx_precision *prec = NULL;
    if (phx_precision_new(NULL, &prec) != PHX_OK) return fail("PHX_PRECISION");
    phx_gpt_config cfg = PHX_GPT_CONFIG_INIT;
    cfg.vocab_size = V;
    cfg.block_size = o->context;
    cfg.n_layer = o->layers;
    cfg.n_head = o->heads;
    cfg.d_model = o->dim;
    cfg.dropout = (float)o->dropout;
    cfg.seed = o->seed;
    phx_rng *init = phx_rng_new(o->seed);
    phx_module *model = phx_gpt_new(&cfg, init);
    phx_rng_free(init);
    if (!model || phx_module_set_precision(model, prec) != PHX_OK) return fail("building the GPT");
    phx_adam_opts ao = PHX_ADAMW_OPTS_INIT;
    ao.lr = o->lr;
    ao.beta2 = 0.99;
    ao.weight_decay = 0.1;
    phx_module *net = NULL;
    phx_optimizer *opt = NULL;
    /* --zero 3: one FSDP unit per transformer block (12 d^2 + 13 d parameters) */
    int64_t block = 12 * (int64_t)o->dim * o->dim;
    if (ex_parallel_new(o->zero, model, comm, block, make_adamw, &ao, &net, &opt) != PHX_OK) return fail("--zero");
    /* The schedule's length: --schedule-steps, else this run's --steps
     * (with --resume the total). */
    int sched_steps = o->schedule_steps ? o->schedule_steps : o->steps;
    phx_schedule_opts so = {.struct_size = sizeof(phx_schedule_opts),
                            .kind = PHX_SCHED_WARMUP_COSINE,
                            .warmup_steps = sched_steps / 10 + 1,
                            .total_steps = sched_steps + 2,
                            .min_lr = o->lr / 10};
    phx_schedule *sched = opt ? phx_schedule_new(opt, &so) : NULL;
    phx_scaler *scaler = phx_scaler_new(prec, NULL);
    phx_loss *loss = phx_loss_new(PHX_LOSS_CROSS_ENTROPY, PHX_REDUCE_MEAN);
    if (!sched || !scaler || !loss) return fail("setup");
    if (o->load && phx_checkpoint_load(o->load, model, opt, scaler) != PHX_OK) return fail("--load");
    if (o->resume && ex_sharded_exists(o->resume)) {
        if (phx_zero_checkpoint_load(o->resume, net, opt, scaler) != PHX_OK) return fail("--resume");
        if (rank_ == 0) printf("resumed %s at step %lld\n", o->resume, (long long)phx_optimizer_steps(opt));
    }
    size_t n_params = 0;
    for (size_t i = 0; i < phx_module_num_params(model); i++)
        n_params += (size_t)phx_tensor_numel(phx_param_value(phx_module_param(model, i)));
    if (rank_ == 0) {
        printf("gpt: %lld tokens (vocabulary %d) from %s, %lld for training; %d layers, %d heads, d_model %d, "
               "context %d, %zu parameters; batch %d per rank x %d rank(s); precision %s\n",
               (long long)n_tok, V, o->data, (long long)split, o->layers, o->heads, o->dim, o->context, n_params,
               o->batch, world, phx_precision_name(prec));
        fflush(stdout);
    }
    int64_t xs[2] = {o->batch, o->context};
    phx_tensor *x = phx_tensor_new(PHX_I64, 2, xs, phx_cpu()), *y = phx_tensor_new(PHX_I64, 2, xs, phx_cpu());
    int64_t one = 1;
    phx_tensor *lt = phx_tensor_new(PHX_F32, 1, &one, phx_cpu());
    uint64_t stream = o->seed * 1000003u + (uint64_t)rank_ * 0x9E3779B97F4A7C15ull;
    /* a loaded run's steps continue from the optimizer's; a resumed one
     * runs up to --steps in all */
    int64_t start = phx_optimizer_steps(opt);
    int steps = o->resume ? (o->steps > start ? o->steps - (int)start : 0) : o->steps;
    phx_progress_opts po = progress_opts_;
    po.first_step = start;
    po.total_steps = start + steps;
    po.rank = rank_;
    po.unit = "tokens";
    phx_progress *prog = phx_progress_new(&po);
    if (!prog) return fail("--metrics/--tensorboard");
    /* the run's settings, for TensorBoard's HPARAMS tab */
    phx_hparam hp[] = {{"lr", NULL, o->lr},           {"batch", NULL, o->batch},
                       {"context", NULL, o->context}, {"layers", NULL, o->layers},
                       {"heads", NULL, o->heads},     {"dim", NULL, o->dim},
                       {"dropout", NULL, o->dropout}, {"seed", NULL, (double)o->seed},
                       {"world_size", NULL, world},   {"precision", phx_precision_name(prec), 0}};
    if (phx_metrics_hparams(phx_progress_metrics(prog), hp, 10) != PHX_OK) {
        phx_progress_free(prog);
        return fail("--metrics/--tensorboard");
    }
    int rc = 0;
    double t0 = now(), tl = t0, val = 0;
    for (int s = 1; s <= steps && rc == 0; s++) {
        phx_tensor *logits;
        float l;
        double lr, norm;
        bool stepped;
        if (o->resume)
            draw_step(tok, split, o->batch, o->context, o->seed, start + s, (int64_t)rank_ * o->batch,
                      phx_tensor_data(x), phx_tensor_data(y));
        else
            draw(tok, 0, split, o->batch, o->context, &stream, phx_tensor_data(x), phx_tensor_data(y));
        /* Under ZeRO-2 a rank holds only its shard's reduced gradients:
         * the norm is summed over the shards. */
        if (phx_optimizer_zero_grad(opt) != PHX_OK || phx_module_forward(net, x, &logits) != PHX_OK ||
            phx_loss_forward(loss, logits, y, &l) != PHX_OK ||
            phx_scaler_scale_grad(scaler, phx_loss_grad(loss)) != PHX_OK ||
            phx_module_backward(net, phx_loss_grad(loss), NULL) != PHX_OK ||
            phx_scaler_unscale(scaler, opt, NULL) != PHX_OK ||
            (o->zero ? phx_zero_clip_grad_norm(opt, 1.0, &norm) : phx_clip_grad_norm(net, 1.0, &norm)) != PHX_OK ||
            phx_schedule_apply(sched, &lr) != PHX_OK || phx_scaler_step(scaler, opt, &stepped) != PHX_OK) {
            rc = fail("training step");
            break;
        }
        double tn = now();
        phx_progress_add(prog, "grad_norm", norm);
        if (phx_precision_scaling(prec)) phx_progress_add(prog, "loss_scale", phx_scaler_get_scale(scaler));
        phx_progress_step(prog, 0, l, lr, (double)o->batch * o->context * world / (tn - tl));
        tl = tn;
        if (s % o->print_every == 0 || s == 1 || s == steps) {
            float ll = l;
            if (comm &&
                (phx_tensor_from_host(lt, &ll) != PHX_OK || phx_comm_allreduce(comm, lt, PHX_AVG, NULL) != PHX_OK ||
                 phx_tensor_to_host(lt, &ll) != PHX_OK)) {
                rc = fail("averaging the loss");
                break;
            }
            if (rank_ == 0) {
                phx_progress_break(prog);
                printf("step %lld loss %.4f lr %.2e norm %.3f %.0f tokens/s%s\n", (long long)(start + s), ll, lr, norm,
                       (double)s * o->batch * o->context * world / (tn - t0), stepped ? "" : " (skipped: inf/NaN)");
                fflush(stdout);
            }
        }
        if (o->eval_every > 0 && s % o->eval_every == 0 && s < steps) {
            if (ex_full_begin(o->zero, net) != PHX_OK) {
                rc = fail("gathering the model (--zero 3)");
                break;
            }
            rc = evaluate(model, loss, tok, split, n_tok, o, x, y, &val);
            ex_full_end(o->zero, net);
            if (rc != 0) break;
            if (rank_ == 0) {
                phx_progress_break(prog);
                printf("step %lld val loss %.4f\n", (long long)(start + s), val);
                fflush(stdout);
            }
            phx_progress_record(prog, 0, "val_loss", val);
        }
    }
    phx_progress_free(prog);
    if (rc == 0 && ex_full_begin(o->zero, net) != PHX_OK) rc = fail("gathering the model (--zero 3)");
    if (rc == 0 && (rc = evaluate(model, loss, tok, split, n_tok, o, x, y, &val)) == 0 && rank_ == 0) {
        printf("val loss %.4f after %lld steps (%.1f s)\n", val, (long long)phx_optimizer_steps(opt), now() - t0);
        fflush(stdout);
    }
    ex_full_end(o->zero, net);
    /* Sharded: every rank writes its shard (collective). */
    const char *dirs[2] = {o->zero ? o->save : NULL, o->resume};
    for (int i = 0; i < 2 && rc == 0; i++)
        if (dirs[i]) {
            if (phx_zero_checkpoint_save(dirs[i], net, opt, scaler) != PHX_OK)
                rc = fail(i ? "--resume" : "--save");
            else if (rank_ == 0)
                printf("saved %s (sharded over %d rank(s))\n", dirs[i], world);
        }
    if (rc == 0 && o->save && !o->zero && rank_ == 0) {
        char vhex[513], shape[128];
        hex(vocab, V, vhex);
        snprintf(shape, sizeof shape, "%d %d %d %d", o->context, o->layers, o->heads, o->dim);
        phx_meta meta[2] = {{"gpt.vocab", vhex}, {"gpt.shape", shape}};
        if (phx_checkpoint_save(o->save, model, opt, scaler, meta, 2) != PHX_OK)
            rc = fail("--save");
        else
            printf("saved %s\n", o->save);
    }
    if (rc == 0 && o->sample > 0) {
        if (ex_full_begin(o->zero, net) != PHX_OK) rc = fail("gathering the model (--zero 3)");
        if (rc == 0 && rank_ == 0) rc = sample(model, vocab, V, o);
        ex_full_end(o->zero, net);
    }
    phx_tensor_free(x);
    phx_tensor_free(y);
    phx_tensor_free(lt);
    free(tok);
    phx_loss_free(loss);
    phx_scaler_free(scaler);
    phx_schedule_free(sched);
    phx_optimizer_free(opt);
    if (net != model) phx_module_free(net);
    phx_module_free(model);
    phx_precision_free(prec);
    phx_comm_free(comm);
    return rc;
}

static const char usage_text[] =
    "usage: gpt [--steps N] [--batch B] [--context T] [--layers L] [--heads H] [--dim C] [--lr X]\n"
    "           [--dropout P] [--seed S] [--data FILE|DIR] [--print-every N] [--eval-every N]\n"
    "           [--eval-batches N] [--save F] [--load F] [--sample N] [--prompt STR]\n"
    "           [--temperature X] [--top-k K] [--resume DIR] [--schedule-steps N]\n"
    "           " EX_ZERO_USAGE " " EX_PROGRESS_USAGE "\n"
    "A character-level GPT (doc/guide/transformer.md); under phxrun each rank is a DDP replica.\n"
    "  --steps N          optimizer steps (default 300; 0 with --load: evaluate and sample)\n"
    "  --batch B          windows per rank and step (default 32)\n"
    "  --context T        bytes per window (default 128)\n"
    "  --layers L, --heads H, --dim C   the transformer's shape (default 4, 4, 128)\n"
    "  --lr X             peak learning rate: warmup, then cosine to X/10 (default 3e-3)\n"
    "  --dropout P        dropout (default 0)\n"
    "  --seed S           seed of the initialisation and the windows (default 1)\n"
    "  --data FILE|DIR    the text: a file, or every plain file of a folder\n"
    "                     (default " DEFAULT_DATA ", Debian's fortunes package)\n"
    "  --print-every N    a step line every N steps (default 10)\n"
    "  --eval-every N     validation loss every N steps (default 100)\n"
    "  --eval-batches N   batches per validation (default 8)\n"
    "  --save F, --load F checkpoint written at the end / restored at the start\n"
    "                     (with --zero 1|2, --save writes a sharded checkpoint folder)\n"
    "  --resume DIR       (--zero 1|2) continue from the sharded checkpoint in DIR when there is one,\n"
    "                     at any number of ranks, and save it there at the end; --steps is then the\n"
    "                     total to reach and each step's windows depend on the step only\n"
    "  --schedule-steps N length of the lr schedule (default: --steps)\n" EX_ZERO_HELP
    "  --sample N         bytes to generate at the end (default 300), from --prompt (default \"Q: \")\n"
    "  --temperature X, --top-k K   sampling (default 0.8, 20)\n" EX_PROGRESS_HELP
    "Environment: PHX_PRECISION=fp16|bf16, PHX_DEVICE=cuda|cpu (doc/reference/env.md).\n";

static int usage(const char *argv0)
{
    (void)argv0;
    fputs(usage_text, stderr);
    return 2;
}

int main(int argc, char **argv)
{
    opts o = {.steps = 300,
              .batch = 32,
              .context = 128,
              .layers = 4,
              .heads = 4,
              .dim = 128,
              .print_every = 10,
              .eval_every = 100,
              .eval_batches = 8,
              .sample = 300,
              .top_k = 20,
              .lr = 3e-3,
              .dropout = 0.0,
              .temperature = 0.8,
              .seed = 1,
              .data = DEFAULT_DATA,
              .prompt = "Q: "};
    if (ex_help(argc, argv, usage_text)) return 0;
    if (ex_progress_args(&argc, argv, &progress_opts_)) return 2;
    /* each number's option and range (0 steps with --load: evaluate and
     * sample; 0 eval-every: never; 0 top-k: every byte; 0 schedule-steps:
     * --steps) */
    const struct {
        const char *name;
        int *v;
        int lo;
    } ints[] = {{"--steps", &o.steps, 0},
                {"--batch", &o.batch, 1},
                {"--context", &o.context, 1},
                {"--layers", &o.layers, 1},
                {"--heads", &o.heads, 1},
                {"--dim", &o.dim, 1},
                {"--print-every", &o.print_every, 1},
                {"--eval-every", &o.eval_every, 0},
                {"--eval-batches", &o.eval_batches, 1},
                {"--sample", &o.sample, 0},
                {"--top-k", &o.top_k, 0},
                {"--schedule-steps", &o.schedule_steps, 0}};
    const struct {
        const char *name;
        double *v;
        ex_range r;
    } reals[] = {{"--lr", &o.lr, EX_POSITIVE},
                 {"--dropout", &o.dropout, EX_PROBABILITY},
                 {"--temperature", &o.temperature, EX_POSITIVE}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int *iv = NULL, lo = 0;
        double *dv = NULL;
        ex_range r = EX_POSITIVE;
        for (size_t k = 0; k < sizeof ints / sizeof *ints; k++)
            if (!strcmp(a, ints[k].name)) iv = ints[k].v, lo = ints[k].lo;
        for (size_t k = 0; k < sizeof reals / sizeof *reals; k++)
            if (!strcmp(a, reals[k].name)) dv = reals[k].v, r = reals[k].r;
        const char **sv = !strcmp(a, "--data") ? &o.data
            : !strcmp(a, "--save")             ? &o.save
            : !strcmp(a, "--load")             ? &o.load
            : !strcmp(a, "--resume")           ? &o.resume
            : !strcmp(a, "--prompt")           ? &o.prompt
                                               : NULL;
        if (!v || (!iv && !dv && !sv && strcmp(a, "--seed") && strcmp(a, "--zero"))) return usage(argv[0]);
        if (iv) {
            if (ex_int_arg("gpt", a, v, lo, INT_MAX, iv)) return 2;
        } else if (dv) {
            if (ex_double_arg("gpt", a, v, r, dv)) return 2;
        } else if (sv) {
            *sv = v;
        } else if (!strcmp(a, "--zero")) {
            if (ex_zero_arg("gpt", v, &o.zero)) return 2;
        } else if (ex_u64_arg("gpt", a, v, &o.seed)) {
            return 2;
        }
        i++;
    }
    if ((o.resume || o.zero) && o.load) {
        fprintf(stderr,
                "gpt: --load takes a checkpoint file of --zero 0 without --resume; with --zero 1|2 use "
                "--resume DIR\n");
        return 2;
    }
    if (o.resume && !o.zero) {
        fprintf(stderr, "gpt: --resume DIR keeps a sharded checkpoint: give --zero 1 or 2\n");
        return 2;
    }
    return run(&o);
}
