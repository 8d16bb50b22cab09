/* DistributedSampler and phx_randperm against the index lists PyTorch
 * produced (t/ref/sampler.txt, from bench/torch/sampler.py). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

#define MAXN 8192

static FILE *open_data(void)
{
    const char *top = getenv("top_srcdir");
    char path[4096];
    snprintf(path, sizeof path, "%s/t/ref/sampler.txt", top ? top : ".");
    return fopen(path, "r");
}

/* Parses the integers after " : " into v; returns their count. */
static size_t parse_list(const char *line, int64_t *v, size_t max)
{
    const char *p = strstr(line, " : ");
    size_t k = 0;
    if (!p) return 0;
    p += 3;
    while (*p && *p != '\n' && k < max) {
        char *end;
        long long x = strtoll(p, &end, 10);
        if (end == p) break;
        v[k++] = x;
        p = end;
    }
    return k;
}

static int same(const int64_t *a, const int64_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) {
            diag("  first difference at %zu: expected %lld, got %lld", i, (long long)a[i], (long long)b[i]);
            return 0;
        }
    return 1;
}

static void check_sampler_line(const char *line, const int64_t *want, size_t n_want)
{
    long long n, r, shuffle, drop, seed, epoch, rank;
    if (sscanf(line, "sampler %lld %lld %lld %lld %lld %lld %lld", &n, &r, &shuffle, &drop, &seed, &epoch, &rank) !=
        7) {
        ok(0, "parse: %s", line);
        return;
    }
    phx_sampler *s = phx_sampler_new(n, (int)r, (int)rank, shuffle != 0, (uint64_t)seed, drop != 0);
    if (!s) {
        ok(0, "phx_sampler_new(n=%lld, R=%lld, rank=%lld): %s", n, r, rank, phx_last_error());
        return;
    }
    phx_sampler_set_epoch(s, epoch);
    size_t count = 0;
    const int64_t *got = phx_sampler_indices(s, &count);
    ok(count == n_want && got && same(want, got, n_want),
       "sampler N=%lld R=%lld shuffle=%lld drop_last=%lld seed=%lld epoch=%lld rank=%lld: %zu "
       "indices as PyTorch",
       n, r, shuffle, drop, seed, epoch, rank, n_want);
    phx_sampler_free(s);
}

static void check_randperm_line(const char *line, const int64_t *want, size_t n_want)
{
    long long n;
    unsigned long long seed;
    static int64_t got[MAXN];
    if (sscanf(line, "randperm %lld %llu", &n, &seed) != 2 || n > MAXN) {
        ok(0, "parse: %s", line);
        return;
    }
    phx_status st = phx_randperm(n, seed, got);
    ok(st == PHX_OK && (size_t)n == n_want && same(want, got, n_want),
       "randperm(%lld, seed %llu) equals torch.randperm", n, seed);
}

/* Each index appears in the union of all ranks' lists, and the lengths
 * follow PyTorch's formula. */
static void check_cover(int64_t n, int r, bool drop)
{
    int64_t seen[64] = {0};
    size_t per = 0;
    int good = 1;
    for (int k = 0; k < r; k++) {
        phx_sampler *s = phx_sampler_new(n, r, k, true, 3, drop);
        size_t c;
        const int64_t *ix = phx_sampler_indices(s, &c);
        if (k == 0) per = c;
        good &= c == per;
        for (size_t i = 0; i < c; i++) seen[ix[i]]++;
        phx_sampler_free(s);
    }
    int64_t total = 0, distinct = 0;
    for (int64_t i = 0; i < n; i++) {
        total += seen[i];
        distinct += seen[i] > 0;
    }
    if (drop) {
        ok(good && (int64_t)per == n / r && distinct == (n / r) * r && total == distinct,
           "drop_last N=%lld R=%d: %zu each, %lld distinct", (long long)n, r, per, (long long)distinct);
    } else {
        ok(good && (int64_t)per == (n + r - 1) / r && distinct == n && total == (int64_t)per * r,
           "padded N=%lld R=%d: %zu each, all %lld covered", (long long)n, r, per, (long long)n);
    }
}

int main(void)
{
    FILE *f = open_data();
    if (!f) skip_all("t/ref/sampler.txt not found (set top_srcdir)");

    static char line[65536];
    static int64_t want[MAXN];
    int lines = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        size_t n_want = parse_list(line, want, MAXN);
        if (!strncmp(line, "sampler ", 8))
            check_sampler_line(line, want, n_want);
        else if (!strncmp(line, "randperm ", 9))
            check_randperm_line(line, want, n_want);
        else
            continue;
        lines++;
    }
    fclose(f);
    ok(lines >= 40, "read %d expected lists from t/ref/sampler.txt", lines);

    /* The epoch changes the order; the same epoch gives the same order. */
    phx_sampler *s = phx_sampler_new(50, 2, 1, true, 0, false);
    size_t c;
    int64_t e0[25], e1[25];
    memcpy(e0, phx_sampler_indices(s, &c), sizeof e0);
    phx_sampler_set_epoch(s, 1);
    memcpy(e1, phx_sampler_indices(s, &c), sizeof e1);
    ok(memcmp(e0, e1, sizeof e0) != 0, "set_epoch(1) reshuffles");
    phx_sampler_set_epoch(s, 0);
    ok(memcmp(e0, phx_sampler_indices(s, &c), sizeof e0) == 0, "set_epoch(0) gives epoch 0 again");
    phx_sampler_free(s);

    check_cover(10, 4, false);
    check_cover(10, 4, true);
    check_cover(3, 5, false);
    check_cover(3, 5, true);
    check_cover(64, 3, false);

    /* Bad input. */
    ok(phx_sampler_new(10, 2, 2, false, 0, false) == NULL, "rank == num_replicas is rejected");
    like(phx_last_error(), "rank is 2", "error names the rank: %s", phx_last_error());
    ok(phx_sampler_new(10, 0, 0, false, 0, false) == NULL, "num_replicas 0 is rejected");
    like(phx_last_error(), "num_replicas", "error names num_replicas");
    ok(phx_sampler_new(-1, 1, 0, false, 0, false) == NULL, "negative length is rejected");
    is_int(phx_randperm(-3, 0, want), PHX_EINVAL, "randperm(-3) is EINVAL");
    is_int(phx_randperm(0, 0, NULL), PHX_OK, "randperm(0) is empty");
    ok(phx_sampler_indices(NULL, &c) == NULL && c == 0, "indices(NULL) is NULL with count 0");
    phx_sampler_free(NULL);
    ok(1, "phx_sampler_free(NULL) is a no-op");
    return done_testing();
}
