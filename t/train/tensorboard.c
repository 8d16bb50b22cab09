/* TensorBoard event files written by phx_metrics: CRC-32C against a
 * bitwise reference written here (no table) and the CRC catalogue's check
 * value, TFRecord framing, and a file decoded here record by record (its
 * own minimal protobuf reader) with the values phx_metrics was given.
 * t/train/tensorboard_read.sh reads the files with TensorBoard itself. */
#include "config.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "phalanx/phalanx.h"
#include "phalanx/metrics.h"
#include "src/train/tensorboard.h"
#include "t/tap.h"

/* CRC-32C bit by bit: the definition, not the table. */
static uint32_t crc_ref(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
    }
    return ~c;
}

static uint64_t rd_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static uint32_t mask_ref(uint32_t c)
{
    return (uint32_t)(((c >> 15) | (c << 17)) + 0xa282ead8u);
}

static void test_crc(void)
{
    is_int(px_crc32c(0, "123456789", 9), 0xE3069283u, "crc32c('123456789') is the catalogue's 0xE3069283");
    uint8_t buf[1000];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)((x = x * 1103515245u + 12345u) >> 16);
    int same = 1;
    for (size_t n = 0; n <= sizeof buf; n += 37) same &= px_crc32c(0, buf, n) == crc_ref(buf, n);
    ok(same, "table crc32c equals the bitwise reference on 28 lengths");
    ok(px_crc32c(px_crc32c(0, buf, 300), buf + 300, 700) == crc_ref(buf, 1000), "crc32c continues across calls");
    is_int(px_crc32c_mask(0), 0xa282ead8u, "mask(0) is the constant");
    is_int(px_crc32c_mask(0x12345678u), mask_ref(0x12345678u), "mask rotates by 15 and adds");
    uint8_t rec[64];
    size_t n = px_tfrecord_frame(rec, "hello", 5);
    is_int(n, 21, "a 5-byte record is 21 bytes framed");
    is_int(rd_le(rec, 8), 5, "length, little-endian");
    is_int(rd_le(rec + 8, 4), mask_ref(crc_ref(rec, 8)), "masked crc of the length");
    ok(memcmp(rec + 12, "hello", 5) == 0, "then the data");
    is_int(rd_le(rec + 17, 4), mask_ref(crc_ref((const uint8_t *)"hello", 5)), "masked crc of the data");
}

/* A protobuf field read from [*p, end): its number, wire type, and the
 * varint, fixed value or (ptr, len) of a length-delimited one. */
typedef struct field {
    int num, type;
    uint64_t v;
    const uint8_t *ptr;
    size_t len;
} field;

static uint64_t varint(const uint8_t **p, const uint8_t *end)
{
    uint64_t v = 0;
    for (int s = 0; *p < end && s < 64; s += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80)) break;
    }
    return v;
}

static int next_field(const uint8_t **p, const uint8_t *end, field *f)
{
    if (*p >= end) return 0;
    uint64_t key = varint(p, end);
    f->num = (int)(key >> 3);
    f->type = (int)(key & 7);
    switch (f->type) {
    case 0: f->v = varint(p, end); break;
    case 1:
        f->v = rd_le(*p, 8);
        *p += 8;
        break;
    case 5:
        f->v = rd_le(*p, 4);
        *p += 4;
        break;
    case 2:
        f->len = varint(p, end);
        f->ptr = *p;
        *p += f->len;
        break;
    default: return 0;
    }
    return *p <= end;
}

/* One decoded scalar. */
typedef struct scalar {
    char tag[80];
    float value;
    int64_t step;
} scalar;

/* Reads the file's records, checking both CRCs; fills version with the
 * first record's file_version and sc with the scalars. Returns the number
 * of scalars, -1 on a bad record. */
static int decode(const char *file, char *version, scalar *sc, int max, int *records)
{
    FILE *fp = fopen(file, "rb");
    if (!fp) return -1;
    static uint8_t data[1 << 16];
    uint8_t hdr[12], foot[4];
    int n = 0;
    *records = 0;
    while (fread(hdr, 1, 12, fp) == 12) {
        uint64_t len = rd_le(hdr, 8);
        if (mask_ref(crc_ref(hdr, 8)) != rd_le(hdr + 8, 4) || len > sizeof data) return fclose(fp), -1;
        if (fread(data, 1, len, fp) != len || fread(foot, 1, 4, fp) != 4) return fclose(fp), -1;
        if (mask_ref(crc_ref(data, len)) != rd_le(foot, 4)) return fclose(fp), -1;
        (*records)++;
        const uint8_t *p = data, *end = data + len;
        int64_t step = 0;
        field f;
        while (next_field(&p, end, &f)) {
            if (f.num == 2 && f.type == 0) step = (int64_t)f.v;
            if (f.num == 3 && f.type == 2) snprintf(version, 32, "%.*s", (int)f.len, (const char *)f.ptr);
            if (f.num != 5 || f.type != 2) continue;
            const uint8_t *q = f.ptr, *qe = f.ptr + f.len;
            field v;
            while (next_field(&q, qe, &v)) {
                if (v.num != 1 || v.type != 2 || n >= max) continue;
                const uint8_t *r = v.ptr, *re = v.ptr + v.len;
                field t;
                int simple = 0;
                while (next_field(&r, re, &t)) {
                    if (t.num == 1 && t.type == 2)
                        snprintf(sc[n].tag, sizeof sc[n].tag, "%.*s", (int)t.len, (const char *)t.ptr);
                    if (t.num == 2 && t.type == 5) {
                        uint32_t u = (uint32_t)t.v;
                        memcpy(&sc[n].value, &u, 4);
                        simple = 1;
                    }
                }
                if (simple) sc[n++].step = step; /* a scalar: a value with a simple_value */
            }
        }
    }
    fclose(fp);
    return n;
}

static void test_file(void)
{
    char dir[64];
    snprintf(dir, sizeof dir, "t/tb-%d", (int)getpid());
    phx_metrics *m = phx_metrics_open(NULL, 0);
    is_int(phx_metrics_tensorboard(m, dir), PHX_OK, "rank 0, no JSON file: TensorBoard alone");
    const char *file = phx_metrics_tensorboard_file(m);
    ok(file && strstr(file, "/events.out.tfevents."), "file named events.out.tfevents.*: %s", file ? file : "(null)");
    is_int(phx_metrics_tensorboard(m, dir), PHX_EINVAL, "a second directory is refused");
    for (int s = 1; s <= 3; s++) {
        phx_metrics_begin(m);
        phx_metrics_add_i64(m, "step", s * 10);
        phx_metrics_add_f64(m, "loss", 1.0 / s);
        phx_metrics_add_str(m, "phase", "train");
        phx_metrics_add_i64(m, "epoch", 1);
        phx_metrics_end(m);
    }
    phx_metrics_begin(m);
    phx_metrics_add_f64(m, "accuracy", 0.875);
    phx_metrics_end(m);
    char path[512];
    snprintf(path, sizeof path, "%s", file ? file : "");
    phx_metrics_close(m);

    char version[32] = "";
    scalar sc[16];
    int records = 0, n = decode(path, version, sc, 16, &records);
    is_int(records, 5, "5 records, each with valid length and data CRCs");
    is_str(version, "brain.Event:2", "first record's file_version");
    is_int(n, 7, "7 scalars: loss and epoch x 3, accuracy");
    if (n == 7) {
        is_str(sc[0].tag, "loss", "tag of the first scalar");
        ok(sc[0].value == 1.0f && sc[2].value == 0.5f && sc[4].value == (float)(1.0 / 3), "loss values as float32");
        is_str(sc[1].tag, "epoch", "integers are scalars too (step is not)");
        ok(sc[0].step == 10 && sc[3].step == 20 && sc[5].step == 30, "steps from the records");
        ok(!strcmp(sc[6].tag, "accuracy") && sc[6].value == 0.875f && sc[6].step == 30,
           "a record without step takes the previous record's step");
    }
    unlink(path);
    rmdir(dir);

    m = phx_metrics_open(NULL, 1);
    is_int(phx_metrics_tensorboard(m, dir), PHX_OK, "rank 1: accepted");
    ok(phx_metrics_tensorboard_file(m) == NULL && access(dir, F_OK) != 0, "rank 1: writes nothing");
    phx_metrics_close(m);
    m = phx_metrics_open(NULL, 0);
    is_int(phx_metrics_tensorboard(m, "/nonexistent-dir/tb"), PHX_EIO, "an uncreatable directory");
    like(phx_last_error(), "/nonexistent-dir/tb", "error names the directory");
    is_int(phx_metrics_tensorboard(m, NULL), PHX_EINVAL, "NULL directory");
    is_int(phx_metrics_tensorboard(NULL, dir), PHX_EINVAL, "NULL handle");
    phx_metrics_close(m);
}

/* phx_metrics_hparams: the JSON line, the hparams plugin's record (its
 * tag and values found in the event), and what it refuses. */
static void test_hparams(void)
{
    char dir[64], json[64];
    snprintf(dir, sizeof dir, "t/tbh-%d", (int)getpid());
    snprintf(json, sizeof json, "t/tbh-%d.jsonl", (int)getpid());
    unlink(json);
    phx_metrics *m = phx_metrics_open(json, 0);
    is_int(phx_metrics_tensorboard(m, dir), PHX_OK, "events on");
    phx_hparam hp[] = {{"lr", NULL, 0.001}, {"optimizer", "adam\"w", 0}, {"batch", NULL, 128}};
    is_int(phx_metrics_hparams(m, hp, 3), PHX_OK, "three hyperparameters");
    char path[512];
    snprintf(path, sizeof path, "%s", phx_metrics_tensorboard_file(m));
    phx_hparam bad[] = {{"lr", NULL, 1}, {"lr", NULL, 2}};
    is_int(phx_metrics_hparams(m, bad, 2), PHX_EINVAL, "a name given twice");
    like(phx_last_error(), "'lr' given twice", "the error names it");
    phx_hparam inf[] = {{"lr", NULL, INFINITY}};
    is_int(phx_metrics_hparams(m, inf, 1), PHX_EINVAL, "a non-finite number");
    phx_hparam badname[] = {{"9lives", NULL, 1}};
    is_int(phx_metrics_hparams(m, badname, 1), PHX_EINVAL, "a bad name");
    is_int(phx_metrics_hparams(m, hp, 0), PHX_EINVAL, "none");
    phx_metrics_begin(m);
    is_int(phx_metrics_hparams(m, hp, 1), PHX_EINVAL, "inside a record begun");
    phx_metrics_close(m);

    FILE *f = fopen(json, "r");
    char line[512] = "";
    ok(f && fgets(line, sizeof line, f), "the JSON file has a line");
    if (f) fclose(f);
    ok(strstr(line, ",\"hparams\":{\"lr\":0.001,\"optimizer\":\"adam\\\"w\",\"batch\":128}}\n") != NULL,
       "one line with the hparams object: %s", line);
    /* The event file: the version record, then one whose bytes hold the
     * tag, the plugin name and each value (the CRCs checked by decode). */
    char version[32] = "";
    scalar sc[4];
    int records = 0;
    is_int(decode(path, version, sc, 4, &records), 0, "no scalars from hyperparameters");
    is_int(records, 2, "2 records with valid CRCs");
    FILE *e = fopen(path, "rb");
    static uint8_t raw[4096];
    size_t n = e ? fread(raw, 1, sizeof raw, e) : 0;
    if (e) fclose(e);
    double lr = 0.001;
    ok(memmem(raw, n, "_hparams_/session_start_info", 28) && memmem(raw, n, "hparams", 7) &&
           memmem(raw, n, "adam\"w", 6) && memmem(raw, n, &lr, 8),
       "the record holds the tag, the strings and the double 0.001");
    unlink(path);
    unlink(json);
    rmdir(dir);
}

int main(void)
{
    test_crc();
    test_file();
    test_hparams();
    return done_testing();
}
