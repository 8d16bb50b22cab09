/* IDX reading (plain and gzip, good and bad files made here, and the real
 * Fashion-MNIST files when Debian's dataset-fashion-mnist is installed)
 * and the mini-batch loader (every row once per epoch, reshuffled per
 * epoch, reproducible, drop_last, index subsets). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

static char dir[64] = "/tmp/phx-idx-XXXXXX";

static const char *file(const char *name, const void *bytes, size_t n, bool gz)
{
    static char p[128];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (gz) {
        gzFile g = gzopen(p, "wb");
        gzwrite(g, bytes, (unsigned)n);
        gzclose(g);
    } else {
        FILE *f = fopen(p, "wb");
        fwrite(bytes, 1, n, f);
        fclose(f);
    }
    return p;
}

static void test_small(void)
{
    /* 3 images of 2x2, u8 */
    const uint8_t img[] = {0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 51, 102, 255, 1, 2, 3, 4, 255, 255, 0, 0};
    const uint8_t lab[] = {0, 0, 8, 1, 0, 0, 0, 3, 7, 0, 9};
    for (int gz = 0; gz < 2; gz++) {
        phx_tensor *t = NULL;
        const char *kind = gz ? "gzip" : "plain";
        ok(phx_idx_read(file("img", img, sizeof img, gz), &t) == PHX_OK, "%s u8 images read (%s)", kind,
           phx_last_error());
        ok(t && phx_tensor_dtype(t) == PHX_F32 && phx_tensor_ndim(t) == 2 && phx_tensor_dim(t, 0) == 3 &&
               phx_tensor_dim(t, 1) == 4,
           "%s images are f32 (3, 4)", kind);
        const float *v = t ? phx_tensor_data(t) : NULL;
        ok(v && v[1] == 51.0f / 255.0f && v[3] == 1.0f && v[4] == 1.0f / 255.0f && v[11] == 0.0f,
           "%s pixels scaled to [0, 1]", kind);
        phx_tensor_free(t);
        t = NULL;
        ok(phx_idx_read(file("lab", lab, sizeof lab, gz), &t) == PHX_OK && phx_tensor_dtype(t) == PHX_I64 &&
               phx_tensor_numel(t) == 3,
           "%s u8 labels are i64 (3)", kind);
        const int64_t *l = t ? phx_tensor_data(t) : NULL;
        ok(l && l[0] == 7 && l[1] == 0 && l[2] == 9, "%s label values", kind);
        phx_tensor_free(t);
    }
    /* 0 images of 28x28: (0, 784), as PyTorch's reshape(0, -1) of (0, 28, 28) is not (0, 0);
     * 0 images of 2^32-1 cubed describe samples of over 2^40 elements */
    const uint8_t none[] = {0, 0, 8, 3, 0, 0, 0, 0, 0, 0, 0, 28, 0, 0, 0, 28};
    phx_tensor *z = NULL;
    ok(phx_idx_read(file("none", none, sizeof none, false), &z) == PHX_OK && phx_tensor_ndim(z) == 2 &&
           phx_tensor_dim(z, 0) == 0 && phx_tensor_dim(z, 1) == 784,
       "0 images of 28x28: f32 (0, 784)");
    phx_tensor_free(z);
    z = NULL;
    const uint8_t huge[] = {0,    0,    8,    4,    0,    0,    0,    0,    0xff, 0xff,
                            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    ok(phx_idx_read(file("huge", huge, sizeof huge, false), &z) == PHX_EIO && !z &&
           strstr(phx_last_error(), "over 2^40"),
       "0 images of (2^32-1)^3: refused (%s)", phx_last_error());
    const uint8_t i32[] = {0, 0, 0x0C, 1, 0, 0, 0, 2, 0, 0, 1, 2, 0xff, 0xff, 0xff, 0xfe};
    phx_tensor *t = NULL;
    ok(phx_idx_read(file("i32", i32, sizeof i32, true), &t) == PHX_OK && phx_tensor_dtype(t) == PHX_I32 &&
           ((int32_t *)phx_tensor_data(t))[0] == 258 && ((int32_t *)phx_tensor_data(t))[1] == -2,
       "big-endian i32 converted");
    phx_tensor_free(t);

    struct {
        const char *what;
        const uint8_t *b;
        size_t n;
        phx_status st;
        const char *msg;
    } bad[] = {
        {"bad magic", (const uint8_t *)"\x01\x00\x08\x01\0\0\0\1\0", 9, PHX_EIO, "bad magic 01 00 08 01"},
        {"unknown type", (const uint8_t *)"\0\0\x0e\x01\0\0\0\1\0", 9, PHX_EIO, "bad magic"},
        {"truncated dims", (const uint8_t *)"\0\0\x08\x03\0\0\0\3\0\0", 10, PHX_EIO,
         "truncated or corrupt while reading the dims"},
        {"truncated data", img, sizeof img - 3, PHX_EIO, "truncated or corrupt while reading the data"},
        {"trailing data", (const uint8_t *)"\0\0\x08\x01\0\0\0\1\5\6", 10, PHX_EIO, "size mismatch"},
        /* 2^32-1 x 2^32-1: the element count must not overflow (UBSan, libFuzzer). */
        {"huge dims", (const uint8_t *)"\0\0\x08\x02\xff\xff\xff\xff\xff\xff\xff\xff", 12, PHX_EIO,
         "implausibly large (dim 1 is 4294967295 after 4294967295 elements"},
        /* 1000 x 1000 u8 announced, 2 bytes there: refused before allocating. */
        {"dims past the file", (const uint8_t *)"\0\0\x08\x02\0\0\x03\xe8\0\0\x03\xe8\1\2", 14, PHX_EIO,
         "dims describe 1000000 bytes of data but the"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        t = NULL;
        phx_status st = phx_idx_read(file("bad", bad[i].b, bad[i].n, i % 2), &t);
        ok(st == bad[i].st && t == NULL, "%s: %s", bad[i].what, phx_status_name(st));
        like(phx_last_error(), bad[i].msg, "%s: message", bad[i].what);
    }
    /* a gzip stream cut in half */
    char p[128];
    snprintf(p, sizeof p, "%s/img", dir);
    file("img", img, sizeof img, true);
    FILE *f = fopen(p, "rb");
    uint8_t buf[256];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    ok(phx_idx_read(file("cut.gz", buf, n / 2, false), &t) == PHX_EIO, "a gzip stream cut in half is EIO");
    ok(phx_idx_read("/nonexistent/x.idx", &t) == PHX_ENOTFOUND && strstr(phx_last_error(), "No such file"),
       "missing file is ENOTFOUND, with the reason (%s)", phx_last_error());
    /* not a regular file: a directory, a FIFO nobody writes (not waited on), a file below a file */
    ok(phx_idx_read(dir, &t) == PHX_EIO && strstr(phx_last_error(), "not a regular file"), "a directory: %s",
       phx_last_error());
    char fifo[128];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    alarm(10); /* a hang ends the test */
    ok(mkfifo(fifo, 0600) == 0 && phx_idx_read(fifo, &t) == PHX_EIO && strstr(phx_last_error(), "not a regular file"),
       "a FIFO, at once: %s", phx_last_error());
    alarm(0);
    unlink(fifo);
    char below[160];
    snprintf(below, sizeof below, "%s/x.idx", file("i32", i32, sizeof i32, false));
    ok(phx_idx_read(below, &t) == PHX_EIO && strstr(phx_last_error(), "Not a directory"), "ENOTDIR: %s",
       phx_last_error());
}

static void test_fashion(void)
{
    char p[512];
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte.gz", phx_fashion_mnist_dir());
    if (access(p, R_OK) != 0) {
        skip(4, "dataset-fashion-mnist is not installed");
        return;
    }
    phx_tensor *lab = NULL, *img = NULL;
    ok(phx_idx_read(p, &lab) == PHX_OK && phx_tensor_numel(lab) == 60000, "train labels: 60000");
    const int64_t *l = phx_tensor_data(lab);
    int count[10] = {0};
    for (int i = 0; i < 60000; i++) count[l[i] >= 0 && l[i] < 10 ? l[i] : 0]++;
    ok(l[0] == 9 && l[1] == 0 && l[3] == 3 && count[0] == 6000 && count[9] == 6000,
       "labels 9 0 0 3 ..., 6000 per class");
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", phx_fashion_mnist_dir());
    ok(phx_idx_read(p, &img) == PHX_OK && phx_tensor_dim(img, 0) == 60000 && phx_tensor_dim(img, 1) == 784,
       "train images: (60000, 784)");
    double s = 0;
    const float *v = phx_tensor_data(img);
    for (int i = 0; i < 784; i++) s += v[i];
    /* numpy: the first image's u8 pixels sum to 76247 */
    ok(fabs(s * 255.0 - 76247.0) < 0.05, "first image's pixels sum to 76247/255 (%.3f)", s * 255);
    phx_tensor_free(lab);
    phx_tensor_free(img);
}

static void test_loader(void)
{
    int64_t xs[2] = {10, 3}, n = 10;
    phx_tensor *x = phx_tensor_new(PHX_F32, 2, xs, phx_cpu()), *y = phx_tensor_new(PHX_I64, 1, &n, phx_cpu());
    float *xv = phx_tensor_data(x);
    int64_t *yv = phx_tensor_data(y);
    for (int i = 0; i < 10; i++) {
        yv[i] = i;
        for (int j = 0; j < 3; j++) xv[i * 3 + j] = (float)(i * 10 + j);
    }
    phx_loader *l = phx_loader_new(x, y, 4, true, 5, false, NULL, 0);
    is_int(phx_loader_num_batches(l), 3, "10 rows, batch 4: 3 batches");
    int64_t first[10], second[10];
    for (int epoch = 0; epoch < 2; epoch++) {
        int seen[10] = {0}, rows = 0, batches = 0, consistent = 1;
        phx_tensor *xb, *yb;
        int r;
        while ((r = phx_loader_next(l, &xb, &yb)) == 1) {
            const int64_t *lb = phx_tensor_data(yb);
            const float *fx = phx_tensor_data(xb);
            for (int64_t i = 0; i < phx_tensor_dim(yb, 0); i++) {
                seen[lb[i]]++;
                consistent &= fx[i * 3 + 2] == (float)(lb[i] * 10 + 2);
                (epoch ? second : first)[rows++] = lb[i];
            }
            batches++;
        }
        int once = 1;
        for (int i = 0; i < 10; i++) once &= seen[i] == 1;
        ok(r == 0 && once && rows == 10 && batches == 3, "epoch %d: every row exactly once in 3 batches", epoch);
        ok(consistent, "epoch %d: x rows travel with their y rows", epoch);
    }
    ok(memcmp(first, second, sizeof first) != 0, "the next epoch has another order");
    int identity = 1;
    for (int i = 0; i < 10; i++) identity &= first[i] == i;
    ok(!identity, "shuffled");
    phx_loader *l2 = phx_loader_new(x, y, 4, true, 5, false, NULL, 0);
    phx_tensor *xb, *yb;
    int64_t again[10];
    int k = 0;
    while (phx_loader_next(l2, &xb, &yb) == 1)
        for (int64_t i = 0; i < phx_tensor_dim(yb, 0); i++) again[k++] = ((int64_t *)phx_tensor_data(yb))[i];
    ok(memcmp(first, again, sizeof first) == 0, "same seed, same order");
    phx_loader_set_epoch(l2, 1);
    k = 0;
    while (phx_loader_next(l2, &xb, &yb) == 1)
        for (int64_t i = 0; i < phx_tensor_dim(yb, 0); i++) again[k++] = ((int64_t *)phx_tensor_data(yb))[i];
    ok(memcmp(second, again, sizeof second) == 0, "set_epoch(1) reproduces epoch 1");
    phx_loader_free(l);
    phx_loader_free(l2);

    int64_t idx[5] = {9, 7, 5, 3, 1};
    l = phx_loader_new(x, y, 2, false, 0, true, idx, 5);
    is_int(phx_loader_num_batches(l), 2, "5 indices, batch 2, drop_last: 2 batches");
    k = 0;
    while (phx_loader_next(l, &xb, &yb) == 1)
        for (int64_t i = 0; i < phx_tensor_dim(yb, 0); i++) again[k++] = ((int64_t *)phx_tensor_data(yb))[i];
    ok(k == 4 && again[0] == 9 && again[1] == 7 && again[2] == 5 && again[3] == 3,
       "unshuffled subset in the given order, last partial batch dropped");
    phx_loader_free(l);
    int64_t badi = 10;
    ok(phx_loader_new(x, y, 2, false, 0, false, &badi, 1) == NULL, "index out of range refused");
    like(phx_last_error(), "indices[0] = 10 is outside [0, 10)", "message");
    ok(phx_loader_new(x, y, 0, false, 0, false, NULL, 0) == NULL, "batch 0 refused");
    phx_tensor_free(x);
    phx_tensor_free(y);
}

int main(void)
{
    if (!mkdtemp(dir)) skip_all("no temporary folder");
    plan(50);
    test_small();
    test_fashion();
    test_loader();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) diag("could not remove %s", dir);
    return done_testing();
}
