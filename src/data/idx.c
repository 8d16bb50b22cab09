/* IDX files (MNIST, Fashion-MNIST), plain or gzip-compressed (zin.c reads
 * both). Magic: two zero bytes, a type byte, the number of dims; then the
 * dims as big-endian u32 and the data (big-endian for multi-byte types).
 * u8 with 2+ dims (images) -> f32 in [0,1] shaped (N, rest); u8 with 1 dim
 * (labels) -> i64 (N); i32 -> i32 and f32 -> f32 with the file's shape
 * (up to 4 dims). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"
#include "src/data/idx-impl.h"
#include "phalanx/data.h"

static phx_status rd(px_zin *g, void *buf, size_t len, const char *path, const char *what)
{
    return px_idx_rd("phx_idx_read", g, buf, len, path, what);
}

phx_status px_idx_rd(const char *who, px_zin *g, void *buf, size_t len, const char *path, const char *what)
{
    size_t got = 0;
    const char *msg = px_zin_read(g, buf, len, &got);
    if (msg || got < len)
        return phx_error(PHX_EIO, "%s: '%s' is truncated or corrupt while reading %s: %s (%zu of %zu bytes)", who, path,
                         what, msg ? msg : "unexpected end of file", got, len);
    return PHX_OK;
}

static uint32_t be32(const uint8_t *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* u8 data converted into t (f32 / 255 for images, i64 for labels) through
 * a fixed buffer: the peak is the tensor plus PX_IDX_CHUNK bytes. */
#define PX_IDX_CHUNK ((size_t)64 << 10)
static phx_status read_u8(px_zin *g, const char *path, phx_tensor *t, int64_t total)
{
    uint8_t *buf = px_malloc(PX_IDX_CHUNK);
    if (!buf) return PHX_ENOMEM;
    phx_status st = PHX_OK;
    float *f = t->dtype == PHX_F32 ? px_tensor_ptr(t) : NULL;
    int64_t *l = t->dtype == PHX_I64 ? px_tensor_ptr(t) : NULL;
    for (int64_t at = 0; at < total && st == PHX_OK;) {
        size_t n = (size_t)(total - at) < PX_IDX_CHUNK ? (size_t)(total - at) : PX_IDX_CHUNK;
        if ((st = rd(g, buf, n, path, "the data")) != PHX_OK) break;
        for (size_t i = 0; f && i < n; i++) f[at + (int64_t)i] = (float)buf[i] / 255.0f;
        for (size_t i = 0; l && i < n; i++) l[at + (int64_t)i] = buf[i];
        at += (int64_t)n;
    }
    px_free(buf);
    return st;
}

phx_status px_idx_end(const char *who, px_zin *g, const char *path, int64_t total)
{
    uint8_t extra;
    size_t got;
    const char *msg = px_zin_read(g, &extra, 1, &got);
    if (got > 0)
        return phx_error(PHX_EIO, "%s: '%s': size mismatch, data continues past the %lld elements its dims describe",
                         who, path, (long long)total);
    if (msg)
        return phx_error(PHX_EIO, "%s: '%s' is corrupt after its %lld elements: %s", who, path, (long long)total, msg);
    return PHX_OK;
}

static phx_status read_body(px_zin *g, const char *path, uint8_t type, int nd, const int64_t *dims, int64_t total,
                            phx_tensor **out)
{
    phx_tensor *t = NULL;
    phx_status st = PHX_OK;
    if (type == 0x08) {
        /* a sample's size from its own dims: with 0 samples it is still
         * 28 x 28 = 784 wide, as PyTorch's (0, 784) */
        int64_t per = 1;
        for (int i = 1; i < nd; i++) {
            if (dims[i] > 0 && per > ((int64_t)1 << 40) / dims[i])
                return phx_error(PHX_EIO, "phx_idx_read: '%s': dims 1..%d describe samples of over 2^40 elements", path,
                                 nd - 1);
            per *= dims[i];
        }
        int64_t shape[2] = {dims[0], per};
        t = nd == 1 ? phx_tensor_new(PHX_I64, 1, dims, phx_cpu()) : phx_tensor_new(PHX_F32, 2, shape, phx_cpu());
        if (!t) return PHX_ENOMEM;
        st = read_u8(g, path, t, total);
    } else {
        if (nd > PHX_MAX_DIMS)
            return phx_error(PHX_EUNSUPPORTED, "phx_idx_read: '%s' has %d dims, at most %d are supported", path, nd,
                             PHX_MAX_DIMS);
        t = phx_tensor_new(type == 0x0C ? PHX_I32 : PHX_F32, nd, dims, phx_cpu());
        if (!t) return PHX_ENOMEM;
        uint8_t *p = px_tensor_ptr(t);
        st = rd(g, p, (size_t)total * 4, path, "the data");
        for (int64_t i = 0; st == PHX_OK && i < total; i++) { /* big-endian to host */
            uint32_t v = be32(p + 4 * i);
            memcpy(p + 4 * i, &v, 4);
        }
    }
    /* Trailing bytes mean the dims do not describe the file. */
    if (st == PHX_OK) st = px_idx_end("phx_idx_read", g, path, total);
    if (st != PHX_OK) {
        phx_tensor_free(t);
        return st;
    }
    *out = t;
    return PHX_OK;
}

phx_status px_idx_open(const char *who, const char *path, px_zin **gp, uint8_t *type, int *ndp, int64_t *dims,
                       int64_t *totalp)
{
    bool irregular;
    px_zin *g = px_zin_open(path, &irregular);
    if (!g) return px_open_error(who, "", path, irregular);
    uint8_t magic[4], db[4 * 255];
    phx_status st = px_idx_rd(who, g, magic, 4, path, "the magic number");
    if (st == PHX_OK &&
        (magic[0] || magic[1] || (magic[2] != 0x08 && magic[2] != 0x0C && magic[2] != 0x0D) || magic[3] == 0))
        st = phx_error(PHX_EIO,
                       "%s: '%s' has bad magic %02x %02x %02x %02x (expected 00 00, type 08 "
                       "(u8), 0C (i32) or 0D (f32), dims >= 1)",
                       who, path, magic[0], magic[1], magic[2], magic[3]);
    int nd = magic[3];
    if (st == PHX_OK) st = px_idx_rd(who, g, db, 4 * (size_t)nd, path, "the dims");
    int64_t total = 1;
    for (int i = 0; st == PHX_OK && i < nd; i++) {
        dims[i] = be32(db + 4 * i);
        /* total <= 2^40 and dims[i] < 2^32: check before multiplying. */
        if (dims[i] > 0 && total > ((int64_t)1 << 40) / dims[i]) {
            st = phx_error(PHX_EIO,
                           "%s: '%s': dims are implausibly large (dim %d is %lld after %lld elements; at "
                           "most 2^40 elements in all)",
                           who, path, i, (long long)dims[i], (long long)total);
            break;
        }
        total *= dims[i];
    }
    /* Nothing is allocated for data the file cannot hold: a plain file
     * must have the bytes, a gzip stream at most deflate's ratio (1032:1). */
    struct stat sb;
    if (st == PHX_OK && stat(path, &sb) == 0) {
        int64_t need = total * (magic[2] == 0x08 ? 1 : 4), have = (int64_t)sb.st_size;
        int64_t most = !px_zin_compressed(g) ? have : have * 1032 + 1024;
        if (need > most)
            st = phx_error(PHX_EIO, "%s: '%s': dims describe %lld bytes of data but the %sfile has %lld bytes", who,
                           path, (long long)need, !px_zin_compressed(g) ? "" : "compressed ", (long long)have);
    }
    if (st != PHX_OK) {
        px_zin_close(g);
        return st;
    }
    *gp = g;
    *type = magic[2];
    *ndp = nd;
    *totalp = total;
    return PHX_OK;
}

phx_status phx_idx_read(const char *path, phx_tensor **out)
{
    if (!path || !out) return phx_error(PHX_EINVAL, "phx_idx_read: NULL %s", path ? "output" : "path");
    px_zin *g;
    uint8_t type;
    int nd;
    int64_t dims[255], total;
    phx_status st = px_idx_open("phx_idx_read", path, &g, &type, &nd, dims, &total);
    if (st != PHX_OK) return st;
    st = read_body(g, path, type, nd, dims, total, out);
    px_zin_close(g);
    return st;
}

const char *phx_fashion_mnist_dir(void)
{
    const char *d = getenv("PHX_FASHION_MNIST");
    return d && *d ? d : "/usr/share/datasets/fashion-mnist";
}
