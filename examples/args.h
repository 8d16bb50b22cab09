/* Options every example shares: --help (usage on stdout, exit 0) and the
 * progress options --metrics FILE, --tensorboard DIR and --log-every N,
 * which fill a phx_progress_opts (include/phalanx/progress.h: the step
 * lines with ETA, the JSON Lines file and the TensorBoard event files).
 * Header-only: each example includes it. */
#ifndef PHX_EXAMPLES_ARGS_H
#define PHX_EXAMPLES_ARGS_H

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

/* Takes --metrics FILE, --tensorboard DIR and --log-every N out of argv
 * (updating *argc) into *po, so the example parses the rest. Returns 0,
 * or 2 after saying what is wrong. */
static inline int ex_progress_args(int *argc, char **argv, phx_progress_opts *po)
{
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        int m = !strcmp(argv[i], "--metrics"), t = !strcmp(argv[i], "--tensorboard"),
            l = !strcmp(argv[i], "--log-every");
        if (!m && !t && !l) {
            argv[out++] = argv[i];
            continue;
        }
        if (i + 1 >= *argc) {
            fprintf(stderr, "%s: %s needs a value\n", argv[0], argv[i]);
            return 2;
        }
        const char *v = argv[++i];
        if (m) {
            po->metrics = v;
        } else if (t) {
            po->tensorboard = v;
        } else {
            char *end;
            long n = strtol(v, &end, 10);
            if (*end || n < 0 || n > 1000000000) {
                fprintf(stderr, "%s: --log-every %s: expected a number of steps >= 0\n", argv[0], v);
                return 2;
            }
            po->every = (int)n;
        }
    }
    *argc = out;
    argv[out] = NULL;
    return 0;
}
#endif
