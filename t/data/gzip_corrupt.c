/* Corrupted gzip IDX files are refused, never loaded as data.
 * 1. An IDX file of 60 images 28x28 (deterministic pixels), gzipped, with
 *    one bit flipped: every bit of the 8-byte trailer (CRC-32, length)
 *    and one bit at 120 positions spread over the rest. Every copy that
 *    `gzip -t` rejects is refused by phx_idx_read and by phx_dataset_idx;
 *    a copy that gzip accepts (a flip in the header's time stamp) loads
 *    the original pixels.
 * 2. The images plus 100 extra bytes: refused ("data continues"), and so
 *    is the same file with a bit of its CRC flipped.
 * 3. A stream cut inside its trailer is refused.
 * 4. Two gzip members, concatenated (what pigz and `cat a.gz b.gz` make),
 *    load as one file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

enum { N = 60, PIX = 28 * 28, SPREAD = 120 };

static char dir[64] = "/tmp/phx-gzc-XXXXXX";

static char *path_of(const char *name)
{
    static char p[160];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

/* The IDX header and n_img images, plus `extra` trailing bytes. */
static size_t make_idx(uint8_t *b, size_t extra)
{
    uint8_t hdr[16] = {0, 0, 8, 3, 0, 0, 0, N, 0, 0, 0, 28, 0, 0, 0, 28};
    memcpy(b, hdr, 16);
    uint32_t s = 12345;
    for (size_t i = 0; i < (size_t)N * PIX; i++) {
        s = s * 1103515245u + 12345u;
        /* Half blank background, half noisy strokes: compresses as images do. */
        b[16 + i] = (i % 28) < 14 ? 0 : (uint8_t)(s >> 24);
    }
    memset(b + 16 + (size_t)N * PIX, 7, extra);
    return 16 + (size_t)N * PIX + extra;
}

/* Writes len bytes gzip-compressed to name; returns the compressed bytes
 * (malloc'd) and their count. */
static uint8_t *gzip_file(const char *name, const uint8_t *b, size_t len, size_t *clen)
{
    gzFile g = gzopen(path_of(name), "wb9");
    if (!g || gzwrite(g, b, (unsigned)len) != (int)len || gzclose(g) != Z_OK) return NULL;
    FILE *f = fopen(path_of(name), "rb");
    uint8_t *c = malloc(len + 1024);
    *clen = f ? fread(c, 1, len + 1024, f) : 0;
    if (f) fclose(f);
    return c;
}

static void put(const char *name, const uint8_t *b, size_t len)
{
    FILE *f = fopen(path_of(name), "wb");
    if (!f || fwrite(b, 1, len, f) != len || fclose(f) != 0) {
        perror("write");
        exit(1);
    }
}

static bool gzip_accepts(const char *name)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "gzip -t '%s' 2>/dev/null", path_of(name));
    return system(cmd) == 0;
}

/* The file loads, with exactly the original pixels. */
static bool loads_original(const char *name, const uint8_t *raw)
{
    phx_tensor *t = NULL;
    if (phx_idx_read(path_of(name), &t) != PHX_OK) return false;
    bool same = phx_tensor_numel(t) == (int64_t)N * PIX;
    const float *p = same ? phx_tensor_data(t) : NULL;
    for (size_t i = 0; same && i < (size_t)N * PIX; i++) same = p[i] == (float)raw[16 + i] / 255.0f;
    phx_tensor_free(t);
    return same;
}

int main(void)
{
    if (system("gzip --version >/dev/null 2>&1") != 0) skip_all("no gzip program to judge the corrupted files");
    if (!mkdtemp(dir)) return 1;
    plan(11);
    uint8_t *raw = malloc(16 + (size_t)N * PIX + 100);
    size_t len = make_idx(raw, 0), clen;
    uint8_t *gz = gzip_file("good.gz", raw, len, &clen);
    ok(gz && clen > 100 && loads_original("good.gz", raw), "the intact file loads (%zu compressed bytes)", clen);

    /* Flips: every trailer bit, then SPREAD positions over the rest. */
    size_t cases = 0, rejected = 0, refused_read = 0, refused_ds = 0, accepted_ok = 0;
    uint8_t *bad = malloc(clen);
    for (size_t c = 0; gz && c < 64 + SPREAD; c++) {
        size_t pos = c < 64 ? clen - 8 + c / 8 : (c - 64) * (clen - 8) / SPREAD;
        int bit = c < 64 ? (int)(c % 8) : (int)((c * 5) % 8);
        memcpy(bad, gz, clen);
        bad[pos] ^= (uint8_t)(1u << bit);
        put("bad.gz", bad, clen);
        cases++;
        if (gzip_accepts("bad.gz")) {
            accepted_ok += loads_original("bad.gz", raw);
            continue;
        }
        rejected++;
        phx_tensor *t = NULL;
        phx_status st = phx_idx_read(path_of("bad.gz"), &t);
        if (st == PHX_EIO)
            refused_read++;
        else
            diag("byte %zu bit %d: gzip -t rejects it, phx_idx_read returned %s", pos, bit, phx_status_name(st));
        phx_tensor_free(t);
        phx_dataset *ds = phx_dataset_idx(path_of("bad.gz"), NULL);
        if (!ds)
            refused_ds++;
        else
            diag("byte %zu bit %d: gzip -t rejects it, phx_dataset_idx made a dataset", pos, bit);
        phx_dataset_free(ds);
    }
    diag("%zu flipped copies: gzip -t rejects %zu; phx_idx_read refuses %zu, phx_dataset_idx %zu", cases, rejected,
         refused_read, refused_ds);
    ok(rejected >= 109, "at least 109 of the %zu copies are corrupt for gzip -t (%zu)", cases, rejected);
    is_int(refused_read, rejected, "phx_idx_read refuses every copy gzip -t rejects");
    is_int(refused_ds, rejected, "phx_dataset_idx refuses every copy gzip -t rejects");
    is_int(accepted_ok, cases - rejected, "the copies gzip -t accepts load the original pixels");

    /* Trailing data, with its CRC intact and with a CRC bit flipped. */
    size_t elen = make_idx(raw, 100), eclen;
    uint8_t *egz = gzip_file("extra.gz", raw, elen, &eclen);
    phx_tensor *t = NULL;
    ok(phx_idx_read(path_of("extra.gz"), &t) == PHX_EIO && strstr(phx_last_error(), "data continues"),
       "images + 100 extra bytes: refused (%s)", phx_last_error());
    egz[eclen - 8] ^= 1;
    put("extra-crc.gz", egz, eclen);
    phx_status st = phx_idx_read(path_of("extra-crc.gz"), &t);
    ok(st == PHX_EIO, "the same with a CRC bit flipped: refused (%s: %s)", phx_status_name(st), phx_last_error());
    phx_dataset *ds = phx_dataset_idx(path_of("extra-crc.gz"), NULL);
    ok(!ds, "... and by phx_dataset_idx (%s)", phx_last_error());
    phx_dataset_free(ds);

    /* A stream that stops inside its trailer. */
    put("cut.gz", gz, clen - 3);
    st = phx_idx_read(path_of("cut.gz"), &t);
    ok(st == PHX_EIO, "a stream missing 3 trailer bytes: refused (%s)", phx_last_error());
    ds = phx_dataset_idx(path_of("cut.gz"), NULL);
    ok(!ds, "... and by phx_dataset_idx");
    phx_dataset_free(ds);

    /* Two members: the header and half the images, then the rest. */
    len = make_idx(raw, 0);
    size_t c1, c2, half = 16 + (size_t)N / 2 * PIX;
    uint8_t *m1 = gzip_file("m1.gz", raw, half, &c1), *m2 = gzip_file("m2.gz", raw + half, len - half, &c2);
    uint8_t *both = malloc(c1 + c2);
    memcpy(both, m1, c1);
    memcpy(both + c1, m2, c2);
    put("two.gz", both, c1 + c2);
    ok(loads_original("two.gz", raw), "two concatenated gzip members load (%s)", phx_last_error());
    free(m1);
    free(m2);
    free(both);

    const char *names[] = {"good.gz", "bad.gz", "extra.gz", "extra-crc.gz", "cut.gz", "m1.gz", "m2.gz", "two.gz"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) unlink(path_of(names[i]));
    rmdir(dir);
    free(raw);
    free(gz);
    free(egz);
    free(bad);
    return done_testing();
}
