/* A gzip IDX file of zeros (20000 images 28x28: 15.7 MB of u8 in about
 * 15 KB) loads with a peak of at most 1.1 times its f32 tensor: the u8
 * data is converted through a fixed buffer, never held whole beside the
 * tensor. The peak is the process's maximum resident set after the load
 * less its resident set before. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

enum { N = 20000, PIX = 28 * 28 };

static double rss_now_mb(void)
{
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
    if (f) fclose(f);
    return (double)rss * (double)sysconf(_SC_PAGESIZE) / 1e6;
}

static double rss_peak_mb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss * 1024.0 / 1e6;
}

int main(void)
{
    char path[64] = "/tmp/phx-peak-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return 1;
    close(fd);
    /* Written in pieces so that writing it costs no memory. */
    static const uint8_t hdr[16] = {0, 0, 8, 3, 0, 0, N >> 8, N & 255, 0, 0, 0, 28, 0, 0, 0, 28};
    static uint8_t zeros[PIX * 100];
    gzFile g = gzopen(path, "wb9");
    bool written = g && gzwrite(g, hdr, sizeof hdr) == (int)sizeof hdr;
    for (int i = 0; written && i < N / 100; i++) written = gzwrite(g, zeros, sizeof zeros) == (int)sizeof zeros;
    if (g) written = gzclose(g) == Z_OK && written;
    plan(3);
    ok(written, "wrote %s", path);
    double before = rss_now_mb();
    phx_tensor *t = NULL;
    phx_status st = phx_idx_read(path, &t);
    double peak = rss_peak_mb() - before, tensor = (double)N * PIX * 4 / 1e6;
    ok(st == PHX_OK && t && phx_tensor_numel(t) == (int64_t)N * PIX, "the zeros load (%s)", phx_last_error());
    diag("tensor %.1f MB, peak %.1f MB above the %.1f MB before: %.3fx", tensor, peak, before, peak / tensor);
    ok(peak <= 1.1 * tensor, "peak %.1f MB <= 1.1 x the tensor's %.1f MB", peak, tensor);
    phx_tensor_free(t);
    unlink(path);
    return done_testing();
}
