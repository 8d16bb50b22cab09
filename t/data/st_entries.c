/* The safetensors header's tensor entries are checksummed too, and the
 * readers neither hang nor truncate (defects a fuzzing run found):
 * - a dtype or shape edited so the byte size stays the same (F32 -> I32,
 *   [3, 5] -> [5, 3]) is refused naming the entries' checksum, where it
 *   used to load the same bytes as another tensor;
 * - a file without that checksum but with the others (written before it
 *   existed) still loads, with the same values;
 * - tensor names longer than the old 512-byte key buffers round-trip,
 *   also two that share their first 600 bytes;
 * - a checksum with a leading space is not a valid checksum; a NUL in
 *   the header is named (jansson said "end of file expected");
 * - a FIFO with no writer is refused as not a regular file, at once,
 *   by phx_safetensors_read and phx_checkpoint_meta (alarm: a hang fails);
 * - a file whose only checksum left is the entries' one (a build that
 *   writes them all wrote it) is refused, not loaded unchecked;
 * - a tensor name that is not UTF-8 is refused by the writer, which used
 *   to go on filling the entry jansson had freed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "t/file-util.h"
#include "t/tap.h"

/* zlib's CRC-32 (reflected, polynomial 0xEDB88320), computed here */
static uint32_t crc32_of(uint32_t crc, const void *p, size_t n)
{
    const uint8_t *b = p;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= b[i];
        for (int k = 0; k < 8; k++) crc = crc & 1 ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
    }
    return ~crc;
}

/* the first occurrence of s in the header (after the 8-byte length) */
static uint8_t *find(uint8_t *b, size_t len, const char *s)
{
    size_t n = strlen(s);
    for (size_t i = 8; i + n <= len; i++)
        if (memcmp(b + i, s, n) == 0) return b + i;
    return NULL;
}

/* blanks (to JSON spaces) every ',"phx.crc32.<x>":"<value>"' of the header,
 * leaving phx.entries.crc32 the one checksum; len, or 0 if one is not so */
static size_t keep_entries_crc_only(uint8_t *b, size_t len)
{
    int n = 0;
    for (uint8_t *k; (k = find(b, len, "\"phx.crc32.")) != NULL; n++) {
        uint8_t *q = k, *end = b + len;
        int quotes = 0;
        while (q < end && quotes < 4) quotes += *q++ == '"';
        if (quotes < 4 || k[-1] != ',') return 0;
        memset(k - 1, ' ', (size_t)(q - (k - 1)));
    }
    return n ? len : 0;
}

/* reads path; PHX_OK with a[0..14] and b[0..3] as written, else the status */
static phx_status read_back(const char *path, int *same)
{
    char **names;
    phx_tensor **ts;
    size_t n;
    *same = 0;
    phx_status st = phx_safetensors_read(path, &names, &ts, &n);
    if (st != PHX_OK) return st;
    float av[15], bv[4];
    int good = n == 2;
    for (size_t i = 0; good && i < n; i++) {
        if (!strcmp(names[i], "a") && phx_tensor_numel(ts[i]) == 15 && phx_tensor_dim(ts[i], 0) == 3) {
            phx_tensor_to_host(ts[i], av);
            for (int j = 0; j < 15; j++) good &= av[j] == 0.5f * (float)j;
        } else if (!strcmp(names[i], "b") && phx_tensor_numel(ts[i]) == 4) {
            phx_tensor_to_host(ts[i], bv);
            for (int j = 0; j < 4; j++) good &= bv[j] == -1.0f - (float)j;
        } else
            good = 0;
    }
    *same = good;
    phx_safetensors_free(names, ts, n);
    return st;
}

int main(void)
{
    plan(16);
    char dir[64] = "/tmp/phx-stent-XXXXXX", path[128], bad[128];
    if (!mkdtemp(dir)) return 1;
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);

    float av[15], bv[4];
    for (int j = 0; j < 15; j++) av[j] = 0.5f * (float)j;
    for (int j = 0; j < 4; j++) bv[j] = -1.0f - (float)j;
    phx_tensor *t[2] = {phx_tensor_from_data(PHX_F32, 2, (int64_t[]){3, 5}, av),
                        phx_tensor_from_data(PHX_F32, 1, (int64_t[]){4}, bv)};
    const char *nm[2] = {"a", "b"};
    phx_meta meta[1] = {{"epoch", "3"}};
    int same;
    phx_status st = phx_safetensors_write(path, nm, t, 2, meta, 1);
    ok(st == PHX_OK && read_back(path, &same) == PHX_OK && same, "written and read back (%s)",
       st ? phx_last_error() : "ok");
    size_t len;
    uint8_t *orig = (uint8_t *)tf_slurp(path, &len), *b = malloc(len);

    /* F32 -> I32 for tensor a: the same 60 bytes */
    memcpy(b, orig, len);
    uint8_t *e = find(b, len, "\"a\":{"), *d = e ? find(e, len - (size_t)(e - b), "\"F32\"") : NULL;
    if (d) d[1] = 'I';
    tf_put(bad, b, len);
    st = d ? read_back(bad, &same) : PHX_EINVAL;
    ok(d && st == PHX_EIO && strstr(phx_last_error(), "tensor entries") && strstr(phx_last_error(), bad),
       "a's dtype F32 -> I32 (same size) is refused: %s", phx_last_error());

    /* shape [3,5] -> [5,3] */
    memcpy(b, orig, len);
    uint8_t *s = find(b, len, "[3,5]");
    if (s) s[1] = '5', s[3] = '3';
    tf_put(bad, b, len);
    st = s ? read_back(bad, &same) : PHX_EINVAL;
    ok(s && st == PHX_EIO && strstr(phx_last_error(), "tensor entries"), "a's shape [3,5] -> [5,3] is refused: %s",
       phx_last_error());

    /* a file of an earlier build: no entries checksum (blanked to spaces), the
     * metadata's checksum over "epoch" alone */
    memcpy(b, orig, len);
    uint8_t *k = find(b, len, "\"phx.entries.crc32\":\"");
    size_t kl = strlen("\"phx.entries.crc32\":\"") + 8 + 2; /* key, value, quote and comma */
    uint8_t *m = find(b, len, "\"phx.crc32.__metadata__\":\"");
    int shaped = k && m && k[kl - 1] == ',';
    if (shaped) {
        memset(k, ' ', kl);
        m += strlen("\"phx.crc32.__metadata__\":\"");
        char hex[9];
        snprintf(hex, sizeof hex, "%08x", (unsigned)crc32_of(crc32_of(0, "epoch", 6), "3", 2));
        memcpy(m, hex, 8);
    }
    tf_put(bad, b, len);
    st = shaped ? read_back(bad, &same) : PHX_EINVAL;
    ok(shaped && st == PHX_OK && same, "a file with the other checksums but no entries checksum loads the same (%s)",
       st ? phx_last_error() : "ok");
    /* ... and it is no loophole for a changed checksum of a tensor */
    uint8_t *ca = shaped ? find(b, len, "\"phx.crc32.a\":\"") : NULL;
    if (ca) ca[strlen("\"phx.crc32.a\":\"")] ^= 1;
    tf_put(bad, b, len);
    st = ca ? read_back(bad, &same) : PHX_EINVAL;
    ok(ca && st == PHX_EIO && strstr(phx_last_error(), "fails its checksum"),
       "that file with a's checksum changed is refused: %s", phx_last_error());

    /* a NUL in the header's space padding: named as such */
    memcpy(b, orig, len);
    uint64_t hl;
    memcpy(&hl, b, 8);
    int padded = b[8 + hl - 1] == ' ';
    if (padded) b[8 + hl - 1] = 0;
    tf_put(bad, b, len);
    st = padded ? read_back(bad, &same) : PHX_EINVAL;
    ok(padded && st == PHX_EIO && strstr(phx_last_error(), "a NUL byte at byte"), "a NUL in the padding: %s",
       phx_last_error());

    /* a checksum value with a leading space: not 8 hex digits */
    memcpy(b, orig, len);
    ca = find(b, len, "\"phx.crc32.b\":\"");
    if (ca) ca[strlen("\"phx.crc32.b\":\"")] = ' ';
    tf_put(bad, b, len);
    st = ca ? read_back(bad, &same) : PHX_EINVAL;
    ok(ca && st == PHX_EIO && strstr(phx_last_error(), "no valid checksum"),
       "a checksum with a leading space is no valid checksum: %s", phx_last_error());
    free(b);

    /* long names: 600 bytes, two sharing their first 600 */
    char *n1 = malloc(702), *n2 = malloc(702);
    memset(n1, 'x', 700), memset(n2, 'x', 700);
    n1[700] = n2[700] = 0;
    n1[650] = 'a', n2[650] = 'b';
    const char *ln[2] = {n1, n2};
    snprintf(bad, sizeof bad, "%s/long.safetensors", dir);
    st = phx_safetensors_write(bad, ln, t, 2, NULL, 0);
    char **rn = NULL;
    phx_tensor **rt = NULL;
    size_t rc = 0;
    phx_status rs = st == PHX_OK ? phx_safetensors_read(bad, &rn, &rt, &rc) : st;
    int right = rs == PHX_OK && rc == 2;
    for (size_t i = 0; right && i < rc; i++) {
        int first = !strcmp(rn[i], n1);
        right = (first || !strcmp(rn[i], n2)) && phx_tensor_numel(rt[i]) == (first ? 15 : 4);
    }
    ok(right, "two 700-byte names that differ at byte 650 round-trip (%s)", rs ? phx_last_error() : "ok");
    if (rs == PHX_OK) phx_safetensors_free(rn, rt, rc);
    /* their checksums are told apart: b's bytes under a's name fail */
    size_t ll;
    b = (uint8_t *)tf_slurp(bad, &ll);
    char *want = malloc(800);
    snprintf(want, 800, "\"phx.crc32.%s\":\"", n1);
    uint8_t *c1 = b ? find(b, ll, want) : NULL;
    if (c1) c1[strlen(want)] = c1[strlen(want)] == '0' ? '1' : '0';
    tf_put(bad, b, ll);
    rs = c1 ? phx_safetensors_read(bad, &rn, &rt, &rc) : PHX_EINVAL;
    ok(c1 && rs == PHX_EIO && strstr(phx_last_error(), "fails its checksum"),
       "the first long name's checksum changed is refused (%.60s...)", phx_last_error());
    free(b), free(want), free(n1), free(n2);

    /* a FIFO: refused, not waited on */
    alarm(10);
    snprintf(bad, sizeof bad, "%s/fifo", dir);
    int made = mkfifo(bad, 0600) == 0;
    rs = made ? phx_safetensors_read(bad, &rn, &rt, &rc) : PHX_EINVAL;
    ok(made && rs == PHX_EIO && strstr(phx_last_error(), "not a regular file"),
       "phx_safetensors_read of a FIFO: refused at once (%s)", phx_last_error());
    char v[16];
    rs = made ? phx_checkpoint_meta(bad, "epoch", v, sizeof v) : PHX_EINVAL;
    ok(made && rs == PHX_EIO && strstr(phx_last_error(), "not a regular file"),
       "phx_checkpoint_meta of a FIFO: refused at once (%s)", phx_last_error());
    /* a directory too */
    rs = phx_safetensors_read(dir, &rn, &rt, &rc);
    ok(rs == PHX_EIO && strstr(phx_last_error(), "not a regular file"), "a directory: %s", phx_last_error());
    alarm(0);
    /* and a missing file is still PHX_ENOTFOUND */
    snprintf(bad, sizeof bad, "%s/none", dir);
    rs = phx_safetensors_read(bad, &rn, &rt, &rc);
    ok(rs == PHX_ENOTFOUND, "a missing file: PHX_ENOTFOUND (%s)", phx_last_error());

    /* the entries' checksum alone (the others removed, a shape swapped):
     * of a build that writes them all, so refused, not loaded unchecked */
    uint8_t *b2 = malloc(len);
    memcpy(b2, orig, len);
    size_t kept = keep_entries_crc_only(b2, len);
    uint8_t *sw = kept ? find(b2, kept, "[3,5]") : NULL;
    if (sw) sw[1] = '5', sw[3] = '3';
    if (sw) tf_put(bad, b2, kept);
    free(b2);
    rs = sw ? phx_safetensors_read(bad, &rn, &rt, &rc) : PHX_EINVAL;
    if (rs == PHX_OK) phx_safetensors_free(rn, rt, rc);
    ok(sw && rs == PHX_EIO && strstr(phx_last_error(), "metadata fails the checksum"),
       "only phx.entries.crc32 left, a shape swapped: refused (%s)", phx_last_error());

    /* a tensor name that is not UTF-8: PHX_EINVAL naming it (escaped), the
     * file at the path untouched (jansson refused the key and freed the
     * entry the writer went on filling: valgrind saw the reads) */
    snprintf(bad, sizeof bad, "%s/w.safetensors", dir);
    size_t before_len;
    char *before = tf_slurp(bad, &before_len);
    const char *latin1[2] = {"a", "gewicht\xe4"};
    rs = phx_safetensors_write(bad, latin1, t, 2, NULL, 0);
    size_t after_len;
    char *after = tf_slurp(bad, &after_len);
    ok(rs == PHX_EINVAL && strstr(phx_last_error(), "'gewicht\\xe4' is not valid UTF-8") && before && after &&
           before_len == after_len && !memcmp(before, after, before_len),
       "a Latin-1 tensor name: PHX_EINVAL, the old file kept (%s)", phx_last_error());
    free(before), free(after);
    /* the same name in UTF-8 round-trips */
    const char *utf8[2] = {"a", "gewicht\xc3\xa4"};
    rs = phx_safetensors_write(bad, utf8, t, 2, NULL, 0);
    if (rs == PHX_OK) rs = phx_safetensors_read(bad, &rn, &rt, &rc);
    int found = 0;
    for (size_t i = 0; rs == PHX_OK && i < rc; i++) found |= !strcmp(rn[i], utf8[1]) && phx_tensor_numel(rt[i]) == 4;
    if (rs == PHX_OK) phx_safetensors_free(rn, rt, rc);
    ok(rs == PHX_OK && found, "the name in UTF-8 round-trips (%s)", rs ? phx_last_error() : "ok");

    free(orig);
    phx_tensor_free(t[0]), phx_tensor_free(t[1]);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) diag("could not remove %s", dir);
    return done_testing();
}
