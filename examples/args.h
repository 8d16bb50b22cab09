/* Options every example shares: --help (usage on stdout, exit 0) and the
 * progress options --metrics FILE, --tensorboard DIR and --log-every N,
 * which fill a phx_progress_opts (include/phalanx/progress.h: the step
 * lines with ETA, the JSON Lines file and the TensorBoard event files),
 * and the readers of options' numbers, which refuse a bad value before
 * any work. Header-only: each example includes it. */
#ifndef PHX_EXAMPLES_ARGS_H
#define PHX_EXAMPLES_ARGS_H

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <phalanx/phalanx.h>

/* The progress options, for each example's usage line. */
#define EX_PROGRESS_USAGE "[--metrics FILE] [--tensorboard DIR] [--log-every N]"

/* The progress options' lines for a usage text. */
#define EX_PROGRESS_HELP \
    "  --metrics FILE     append one JSON object per step to FILE (JSON Lines)\n" \
    "  --tensorboard DIR  write the same scalars as TensorBoard event files into DIR\n" \
    "  --log-every N      print a step line (loss, throughput, elapsed, ETA) every N steps\n"

/* When argv holds --help or -h: prints usage (the full text, starting
 * "usage: ") on stdout and returns 1, for the example to exit 0. */
static inline int ex_help(int argc, char **argv, const char *usage)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--")) break;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return 1;
        }
    }
    return 0;
}

/* Options' numbers. Each reader takes the program's name, the option and
 * its value, and stores the number only when the whole value is one and
 * lies in the option's range; otherwise it says so on stderr, naming the
 * option, the value and what the option takes, in argparse's words
 * ("cnn: --lr: 'abc' is not a number", "two_input: --epochs: -3, expected a
 * positive integer"), and returns 2, the status every example exits with
 * on a bad option. */

/* Reads a decimal integer into *n. Returns 0, or 2 after saying that v is
 * not an integer (a value beyond long long's range is LLONG_MIN or
 * LLONG_MAX, for the caller's range to refuse). */
static inline int ex_integer_parse(const char *prog, const char *opt, const char *v, long long *n)
{
    char *end;
    errno = 0;
    *n = strtoll(v, &end, 10);
    if (end == v || *end) {
        fprintf(stderr, "%s: %s: '%s' is not an integer\n", prog, opt, v);
        return 2;
    }
    return 0;
}

/* An integer in lo..hi into *out (hi INT64_MAX: as large as it takes). */
static inline int ex_int64_arg(const char *prog, const char *opt, const char *v, int64_t lo, int64_t hi, int64_t *out)
{
    long long n;
    if (ex_integer_parse(prog, opt, v, &n)) return 2;
    if (n >= lo && n <= hi && errno != ERANGE) {
        *out = n;
        return 0;
    }
    if (n < lo && hi >= INT_MAX && lo == 1) /* below an open-ended range */
        fprintf(stderr, "%s: %s: %s, expected a positive integer\n", prog, opt, v);
    else if (n < lo && hi >= INT_MAX)
        fprintf(stderr, "%s: %s: %s, expected an integer >= %lld\n", prog, opt, v, (long long)lo);
    else
        fprintf(stderr, "%s: %s: %s, expected an integer in %lld..%lld\n", prog, opt, v, (long long)lo, (long long)hi);
    return 2;
}

/* An integer in lo..hi into *out (hi INT_MAX: as large as an int takes). */
static inline int ex_int_arg(const char *prog, const char *opt, const char *v, int lo, int hi, int *out)
{
    int64_t n;
    if (ex_int64_arg(prog, opt, v, lo, hi, &n)) return 2;
    *out = (int)n;
    return 0;
}

/* A seed: any unsigned 64-bit integer, 0 to 18446744073709551615. */
static inline int ex_u64_arg(const char *prog, const char *opt, const char *v, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (end == v || *end) {
        fprintf(stderr, "%s: %s: '%s' is not an integer\n", prog, opt, v);
        return 2;
    }
    if (errno == ERANGE || strchr(v, '-')) { /* strtoull takes -1 as its largest value */
        fprintf(stderr, "%s: %s: %s, expected an integer in 0..%llu\n", prog, opt, v, (unsigned long long)UINT64_MAX);
        return 2;
    }
    *out = n;
    return 0;
}

/* The range of a real option: lo to hi, each end included or not; never
 * an infinity or a NaN. */
typedef struct {
    double lo, hi;
    int lo_open, hi_open;
} ex_range;
#define EX_POSITIVE ((ex_range){0.0, INFINITY, 1, 1}) /* > 0: a learning rate */
#define EX_NONNEGATIVE ((ex_range){0.0, INFINITY, 0, 1}) /* >= 0 */
#define EX_PROBABILITY ((ex_range){0.0, 1.0, 0, 1}) /* [0, 1): a dropout */

/* A finite number in r into *out. */
static inline int ex_double_arg(const char *prog, const char *opt, const char *v, ex_range r, double *out)
{
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end) {
        fprintf(stderr, "%s: %s: '%s' is not a number\n", prog, opt, v);
        return 2;
    }
    if (isfinite(x) && (r.lo_open ? x > r.lo : x >= r.lo) && (r.hi_open ? x < r.hi : x <= r.hi)) {
        *out = x;
        return 0;
    }
    if (isinf(r.hi))
        fprintf(stderr, "%s: %s: %s, expected a finite number %s %g\n", prog, opt, v, r.lo_open ? ">" : ">=", r.lo);
    else
        fprintf(stderr, "%s: %s: %s, expected a number in %c%g, %g%c\n", prog, opt, v, r.lo_open ? '(' : '[', r.lo,
                r.hi, r.hi_open ? ')' : ']');
    return 2;
}

/* Takes --metrics FILE, --tensorboard DIR and --log-every N out of argv
 * (updating *argc) into *po, so the example parses the rest. Returns 0,
 * or 2 after saying what is wrong. */
static inline int ex_progress_args(int *argc, char **argv, phx_progress_opts *po)
{
    const char *prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        int m = !strcmp(argv[i], "--metrics"), t = !strcmp(argv[i], "--tensorboard"),
            l = !strcmp(argv[i], "--log-every");
        if (!m && !t && !l) {
            argv[out++] = argv[i];
            continue;
        }
        if (i + 1 >= *argc) {
            fprintf(stderr, "%s: %s needs a value\n", prog, argv[i]);
            return 2;
        }
        const char *v = argv[++i];
        if (m) {
            po->metrics = v;
        } else if (t) {
            po->tensorboard = v;
        } else if (ex_int_arg(prog, "--log-every", v, 0, INT_MAX, &po->every)) {
            return 2;
        }
    }
    *argc = out;
    argv[out] = NULL;
    return 0;
}
/* --zero N: how the examples shard their training state over the ranks
 * (doc/guide/sharding.md, "Examples"). */
#define EX_ZERO_USAGE "[--zero 0|1|2|3]"
#define EX_ZERO_HELP \
    "  --zero N           0: DDP, every rank holds the whole optimizer state (default); 1: ZeRO-1,\n" \
    "                     each rank keeps the optimizer state of its 1/world shard; 2: ZeRO-2,\n" \
    "                     gradients reduce-scattered too; 3: ZeRO-3 (FSDP), parameters sharded as\n" \
    "                     well. With 1, 2 or 3, --save/--resume take a folder: a sharded checkpoint\n" \
    "                     that resumes at any number of ranks and any of those levels\n"

/* Reads --zero's value into *zero. Returns 0, or 2 after saying what is
 * wrong. */
static inline int ex_zero_arg(const char *prog, const char *v, int *zero)
{
    long long n;
    if (ex_integer_parse(prog, "--zero", v, &n)) return 2;
    if (n < 0 || n > 3) {
        fprintf(stderr, "%s: --zero: %s, expected 0 (DDP), 1 (ZeRO-1), 2 (ZeRO-2) or 3 (ZeRO-3, FSDP)\n", prog, v);
        return 2;
    }
    *zero = (int)n;
    return 0;
}

/* The model wrapper and optimizer for a --zero level, the one place that
 * decides how a rank holds the training state. make builds the optimizer
 * as for the whole model (it receives the module to optimize: the DDP
 * wrapper, or under ZeRO the rank's shard). comm NULL: one process, no
 * DDP. zero 0: DDP (when comm) and make's optimizer; 1 and 2: DDP and a
 * ZeRO optimizer of that stage over it (without comm a world of one, where
 * stage 2 has nothing to reduce-scatter and is stage 1); 3: the FSDP
 * wrapper (phx_fsdp_new; a module with children whose parameters reach
 * unit_numel elements becomes a unit, 0: the default size policy) and a
 * stage-3 ZeRO optimizer over its shards. *net is model or its wrapper
 * (free it when it is not model). Returns PHX_OK, or the error with
 * phx_last_error set and nothing left allocated. */
static inline phx_status ex_parallel_new(int zero, phx_module *model, phx_comm *comm, int64_t unit_numel,
                                         phx_zero_make_fn make, void *arg, phx_module **net, phx_optimizer **opt)
{
    phx_fsdp_opts fo = PHX_FSDP_OPTS_INIT;
    fo.min_unit_numel = unit_numel;
    *net = zero == 3 ? phx_fsdp_new(model, comm, &fo) : comm ? phx_ddp_new(model, comm, NULL) : model;
    *opt = NULL;
    if (!*net) return PHX_EINVAL;
    if (zero == 0) {
        *opt = make(*net, arg);
    } else {
        phx_zero_opts zo = PHX_ZERO_OPTS_INIT;
        zo.stage = comm || zero == 3 ? zero : 1;
        *opt = phx_zero_optimizer_new(*net, comm, make, arg, &zo);
    }
    if (*opt) return PHX_OK;
    if (*net != model) phx_module_free(*net);
    *net = NULL;
    return PHX_EINVAL;
}

/* Under --zero 3 the model's parameters hold memory only while their unit
 * runs: ex_full_begin gathers them all (collective: every rank calls it)
 * so the model can be evaluated, sampled from or saved whole, and
 * ex_full_end frees them again. Other levels: nothing to do. */
static inline phx_status ex_full_begin(int zero, phx_module *net)
{
    return zero == 3 ? phx_fsdp_gather_full(net) : PHX_OK;
}

static inline void ex_full_end(int zero, phx_module *net)
{
    if (zero == 3) phx_fsdp_release_full(net);
}

/* Whether dir holds a sharded checkpoint (its index.json). */
static inline int ex_sharded_exists(const char *dir)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/index.json", dir);
    FILE *f = fopen(p, "r");
    if (f) fclose(f);
    return f != NULL;
}
/* The options fashion_mnist and cnn share: --epochs (0: only evaluate,
 * with --load), --batch, --lr and --seed. 1 when a is one of them and v
 * was taken, -1 when v is bad (said on stderr), 0 when a is another. */
static inline int ex_common_arg(const char *prog, const char *a, const char *v, int *epochs, int64_t *batch, double *lr,
                                uint64_t *seed)
{
    int bad;
    if (!strcmp(a, "--epochs"))
        bad = ex_int_arg(prog, a, v, 0, INT_MAX, epochs);
    else if (!strcmp(a, "--batch"))
        bad = ex_int64_arg(prog, a, v, 1, INT64_MAX, batch);
    else if (!strcmp(a, "--lr"))
        bad = ex_double_arg(prog, a, v, EX_POSITIVE, lr);
    else if (!strcmp(a, "--seed"))
        bad = ex_u64_arg(prog, a, v, seed);
    else
        return 0;
    return bad ? -1 : 1;
}

#endif
