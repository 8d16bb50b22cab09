/* Benchmark results as tab-separated lines for `make plots`: when
 * $PHX_BENCH_TSV names a file, each call appends
 *     bench <TAB> table <TAB> row <TAB> column <TAB> value
 * (bench/run.sh sets it to bench/results.tsv and starts it empty; the
 * format is in doc/maint/bench.md). Without the variable nothing is written.
 * Header-only. */
#ifndef PHX_BENCH_TSV_H
#define PHX_BENCH_TSV_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static inline void bench_tsv(const char *bench, const char *table, const char *row, const char *column, double value)
{
    const char *path = getenv("PHX_BENCH_TSV");
    if (!path || !*path || !isfinite(value)) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "%s\t%s\t%s\t%s\t%.6g\n", bench, table, row, column, value);
    fclose(f);
}

/* A Phalanx-vs-PyTorch speed ratio (> 1: Phalanx is faster), the bars of
 * bench/ratios.png; skipped when either rate is missing (<= 0). */
static inline void bench_tsv_ratio(const char *bench, const char *row, double ours_rate, double theirs_rate)
{
    if (ours_rate > 0 && theirs_rate > 0) bench_tsv(bench, "phalanx/torch", row, "ratio", ours_rate / theirs_rate);
}
#endif
