/* IDX files (MNIST, Fashion-MNIST), plain or gzip-compressed (zlib reads
 * both). Magic: two zero bytes, a type byte, the number of dims; then the
 * dims as big-endian u32 and the data (big-endian for multi-byte types).
 * u8 with 2+ dims (images) -> f32 in [0,1] shaped (N, rest); u8 with 1 dim
 * (labels) -> i64 (N); i32 -> i32 and f32 -> f32 with the file's shape
 * (up to 4 dims). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"
#include "src/data/idx-impl.h"
#include "phalanx/data.h"

static phx_status rd(gzFile g, void *buf, size_t len, const char *path, const char *what)
{
    return px_idx_rd("phx_idx_read", g, buf, len, path, what);
}

phx_status px_idx_rd(const char *who, gzFile g, void *buf, size_t len, const char *path, const char *what)
{
    size_t got = 0;
    while (got < len) {
        unsigned chunk = len - got > (1u << 30) ? (1u << 30) : (unsigned)(len - got);
        int r = gzread(g, (char *)buf + got, chunk);
        if (r <= 0) {
            int zerr = 0;
            const char *msg = r < 0 ? gzerror(g, &zerr) : "unexpected end of file";
            return phx_error(PHX_EIO, "%s: '%s' is truncated or corrupt while reading %s: %s (%zu of %zu bytes)", who,
                             path, what, msg, got, len);
        }
        got += (size_t)r;
    }
    return PHX_OK;
}

static uint32_t be32(const uint8_t *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

static phx_status read_body(gzFile g, const char *path, uint8_t type, int nd, const int64_t *dims, int64_t total,
                            phx_tensor **out)
{
    phx_tensor *t = NULL;
    phx_status st;
    if (type == 0x08) {
        uint8_t *raw = px_malloc(total ? (size_t)total : 1);
        if (!raw) return PHX_ENOMEM;
        if ((st = rd(g, raw, (size_t)total, path, "the data")) != PHX_OK) {
            px_free(raw);
            return st;
        }
        if (nd == 1) {
            t = phx_tensor_new(PHX_I64, 1, dims, phx_cpu());
            int64_t *p = t ? px_tensor_ptr(t) : NULL;
            for (int64_t i = 0; p && i < total; i++) p[i] = raw[i];
        } else {
            int64_t shape[2] = {dims[0], dims[0] ? total / dims[0] : 0};
            t = phx_tensor_new(PHX_F32, 2, shape, phx_cpu());
            float *p = t ? px_tensor_ptr(t) : NULL;
            for (int64_t i = 0; p && i < total; i++) p[i] = (float)raw[i] / 255.0f;
        }
        px_free(raw);
    } else {
        if (nd > PHX_MAX_DIMS)
            return phx_error(PHX_EUNSUPPORTED, "phx_idx_read: '%s' has %d dims, at most %d are supported", path, nd,
                             PHX_MAX_DIMS);
        t = phx_tensor_new(type == 0x0C ? PHX_I32 : PHX_F32, nd, dims, phx_cpu());
        uint8_t *p = t ? px_tensor_ptr(t) : NULL;
        if (p && (st = rd(g, p, (size_t)total * 4, path, "the data")) != PHX_OK) {
            phx_tensor_free(t);
            return st;
        }
        for (int64_t i = 0; p && i < total; i++) { /* big-endian to host */
            uint32_t v = be32(p + 4 * i);
            memcpy(p + 4 * i, &v, 4);
        }
    }
    if (!t) return PHX_ENOMEM;
    /* Trailing bytes mean the dims do not describe the file. */
    uint8_t extra;
    if (gzread(g, &extra, 1) > 0) {
        phx_tensor_free(t);
        return phx_error(PHX_EIO,
                         "phx_idx_read: '%s': size mismatch, data continues past the %lld elements its "
                         "dims describe",
                         path, (long long)total);
    }
    *out = t;
    return PHX_OK;
}

phx_status px_idx_open(const char *who, const char *path, gzFile *gp, uint8_t *type, int *ndp, int64_t *dims,
                       int64_t *totalp)
{
    gzFile g = gzopen(path, "rb");
    if (!g) return phx_error(PHX_ENOTFOUND, "%s: cannot open '%s'", who, path);
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
        int64_t most = gzdirect(g) ? have : have * 1032 + 1024;
        if (need > most)
            st = phx_error(PHX_EIO, "%s: '%s': dims describe %lld bytes of data but the %sfile has %lld bytes", who,
                           path, (long long)need, gzdirect(g) ? "" : "compressed ", (long long)have);
    }
    if (st != PHX_OK) {
        gzclose(g);
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
    gzFile g;
    uint8_t type;
    int nd;
    int64_t dims[255], total;
    phx_status st = px_idx_open("phx_idx_read", path, &g, &type, &nd, dims, &total);
    if (st != PHX_OK) return st;
    st = read_body(g, path, type, nd, dims, total, out);
    gzclose(g);
    return st;
}

const char *phx_fashion_mnist_dir(void)
{
    const char *d = getenv("PHX_FASHION_MNIST");
    return d && *d ? d : "/usr/share/datasets/fashion-mnist";
}
