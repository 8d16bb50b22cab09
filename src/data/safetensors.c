/* safetensors: 8-byte little-endian header length, a JSON header (parsed
 * with jansson) mapping names to {dtype, shape, data_offsets} plus an
 * optional "__metadata__" of strings, then the raw little-endian data.
 * Reading validates everything before anything is used; writing is
 * atomic (temporary file in the same folder, fsync, rename, fsync of the
 * folder). See doc/reference/formats.md. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "src/data/safetensors-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"
#include "kernels/math.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

#define PX_ST_MAX_HEADER (100u << 20) /* as the reference implementation */

static const struct {
    const char *name;
    phx_dtype dt;
    size_t size;
} st_dtypes[] = {
    {"F32", PHX_F32, 4}, {"F16", PHX_F16, 2}, {"BF16", PHX_BF16, 2},
    {"I32", PHX_I32, 4}, {"I64", PHX_I64, 8}, {"F64", PX_ST_F64, 8},
};

size_t px_st_dtype_size(phx_dtype dt)
{
    for (size_t i = 0; i < PX_ARRAY_LEN(st_dtypes); i++)
        if (st_dtypes[i].dt == dt) return st_dtypes[i].size;
    return 0;
}

static bool is_float(phx_dtype dt)
{
    return dt == PHX_F32 || dt == PHX_F16 || dt == PHX_BF16 || dt == PX_ST_F64;
}

bool px_st_convertible(phx_dtype from, phx_dtype to)
{
    return from == to || (is_float(from) && is_float(to));
}

static double get_float(phx_dtype dt, const unsigned char *p, int64_t i)
{
    uint16_t h;
    float f;
    double d;
    switch ((int)dt) {
    case PHX_F16: memcpy(&h, p + 2 * i, 2); return phx_f16_to_f32(h);
    case PHX_BF16: memcpy(&h, p + 2 * i, 2); return phx_bf16_to_f32(h);
    case PHX_F32: memcpy(&f, p + 4 * i, 4); return f;
    default: memcpy(&d, p + 8 * i, 8); return d;
    }
}

static void put_float(phx_dtype dt, unsigned char *p, int64_t i, double v)
{
    /* f64 -> f32 rounds once; f32 -> f16/bf16 rounds to nearest even, as
     * torch's copy_ does through float. */
    float f = (float)v;
    uint16_t h;
    switch ((int)dt) {
    case PHX_F16:
        h = phx_f32_to_f16(f);
        memcpy(p + 2 * i, &h, 2);
        break;
    case PHX_BF16:
        h = phx_f32_to_bf16(f);
        memcpy(p + 2 * i, &h, 2);
        break;
    default: memcpy(p + 4 * i, &f, 4); break;
    }
}

phx_status px_st_load_into(const px_st_file *f, const px_st_entry *e, phx_tensor *t)
{
    if (e->dtype == t->dtype) return phx_tensor_from_host(t, px_st_data(f, e));
    unsigned char *buf = px_malloc(phx_tensor_nbytes(t) ? phx_tensor_nbytes(t) : 1);
    if (!buf) return PHX_ENOMEM;
    const unsigned char *src = px_st_data(f, e);
    for (int64_t i = 0; i < e->numel; i++) put_float(t->dtype, buf, i, get_float(e->dtype, src, i));
    phx_status st = phx_tensor_from_host(t, buf);
    px_free(buf);
    return st;
}

const char *px_st_dtype_name(phx_dtype dt)
{
    for (size_t i = 0; i < PX_ARRAY_LEN(st_dtypes); i++)
        if (st_dtypes[i].dt == dt) return st_dtypes[i].name;
    return NULL;
}

void px_st_close(px_st_file *f)
{
    if (f->root) json_decref(f->root);
    if (f->map) munmap(f->map, f->size);
    px_free(f->e);
    memset(f, 0, sizeof *f);
}

const char *px_st_meta(const px_st_file *f, const char *key)
{
    json_t *v = f->meta ? json_object_get(f->meta, key) : NULL;
    return v ? json_string_value(v) : NULL;
}

static phx_status parse_entry(const char *who, px_st_file *f, const char *name, json_t *v, px_st_entry *e)
{
    json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
           *off = json_object_get(v, "data_offsets");
    if (!json_is_object(v) || !json_is_string(dt) || !json_is_array(sh) || !json_is_array(off) ||
        json_array_size(off) != 2)
        return phx_error(PHX_EIO,
                         "%s: '%s': entry '%s' needs \"dtype\" (string), \"shape\" (array) and "
                         "\"data_offsets\" ([begin, end])",
                         who, f->path, name);
    e->name = name;
    const char *dts = json_string_value(dt);
    size_t i;
    for (i = 0; i < PX_ARRAY_LEN(st_dtypes); i++)
        if (strcmp(dts, st_dtypes[i].name) == 0) break;
    if (i == PX_ARRAY_LEN(st_dtypes))
        return phx_error(PHX_EIO,
                         "%s: '%s': tensor '%s' has unknown dtype '%s' (supported: F32, F16, BF16, F64, I32, I64)", who,
                         f->path, name, dts);
    e->dtype = st_dtypes[i].dt;
    size_t nd = json_array_size(sh);
    if (nd > PHX_MAX_DIMS)
        return phx_error(PHX_EIO, "%s: '%s': tensor '%s' has %zu dims, at most %d are supported", who, f->path, name,
                         nd, PHX_MAX_DIMS);
    e->ndim = (int)nd;
    e->numel = 1;
    for (size_t d = 0; d < nd; d++) {
        json_t *x = json_array_get(sh, d);
        json_int_t s = json_is_integer(x) ? json_integer_value(x) : -1;
        if (s < 0 || s > ((json_int_t)1 << 40) || (s > 0 && e->numel > ((int64_t)1 << 50) / s))
            return phx_error(PHX_EIO, "%s: '%s': tensor '%s' has an invalid shape (dim %zu)", who, f->path, name, d);
        e->shape[d] = s;
        e->numel *= s;
    }
    json_t *b = json_array_get(off, 0), *en = json_array_get(off, 1);
    if (!json_is_integer(b) || !json_is_integer(en) || json_integer_value(b) < 0 ||
        json_integer_value(en) < json_integer_value(b))
        return phx_error(PHX_EIO, "%s: '%s': tensor '%s' has invalid data_offsets (need integers 0 <= begin <= end)",
                         who, f->path, name);
    e->begin = (uint64_t)json_integer_value(b);
    e->end = (uint64_t)json_integer_value(en);
    return PHX_OK;
}

static int by_begin(const void *a, const void *b)
{
    const px_st_entry *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : x->end < y->end ? -1 : x->end > y->end;
}

/* Offsets in range, sizes matching the shapes, no overlap, no hole. */
static phx_status check_layout(const char *who, px_st_file *f, uint64_t data_len)
{
    for (size_t i = 0; i < f->n; i++) {
        px_st_entry *e = &f->e[i];
        if (e->end > data_len)
            return phx_error(PHX_EIO,
                             "%s: '%s': tensor '%s' data_offsets [%llu, %llu] are out of range: the data "
                             "section has %llu bytes (truncated file?)",
                             who, f->path, e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                             (unsigned long long)data_len);
        uint64_t need = (uint64_t)e->numel * px_st_dtype_size(e->dtype);
        if (e->end - e->begin != need)
            return phx_error(PHX_EIO,
                             "%s: '%s': tensor '%s' data_offsets [%llu, %llu] span %llu bytes, its shape and "
                             "dtype %s need %llu",
                             who, f->path, e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                             (unsigned long long)(e->end - e->begin), px_st_dtype_name(e->dtype),
                             (unsigned long long)need);
    }
    px_st_entry *s = px_malloc((f->n ? f->n : 1) * sizeof *s);
    if (!s) return PHX_ENOMEM;
    memcpy(s, f->e, f->n * sizeof *s);
    qsort(s, f->n, sizeof *s, by_begin);
    phx_status st = PHX_OK;
    uint64_t at = 0;
    const char *prev = NULL;
    for (size_t i = 0; i < f->n && st == PHX_OK; i++) {
        if (s[i].begin < at)
            st = phx_error(PHX_EIO, "%s: '%s': tensors '%s' and '%s' overlap (byte %llu)", who, f->path, prev,
                           s[i].name, (unsigned long long)s[i].begin);
        else if (s[i].begin > at)
            st = phx_error(PHX_EIO, "%s: '%s': bytes [%llu, %llu) of the data section belong to no tensor", who,
                           f->path, (unsigned long long)at, (unsigned long long)s[i].begin);
        at = s[i].end;
        prev = s[i].name;
    }
    if (st == PHX_OK && at != data_len)
        st = phx_error(PHX_EIO, "%s: '%s': %llu bytes after the last tensor belong to no tensor", who, f->path,
                       (unsigned long long)(data_len - at));
    px_free(s);
    return st;
}

static phx_status st_open(const char *who, const char *path, px_st_file *f, bool with_data)
{
    memset(f, 0, sizeof *f);
    f->path = path;
    if (!path) return phx_error(PHX_EINVAL, "%s: path is NULL", who);
    bool irregular;
    int fd = px_open_regular(path, &irregular); /* a FIFO would block open() */
    if (fd < 0) return px_open_error(who, "", path, irregular);
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return phx_error(PHX_EIO, "%s: cannot read '%s': %s", who, path, strerror(errno));
    }
    f->size = (size_t)sb.st_size;
    if (f->size < 8) {
        close(fd);
        return phx_error(PHX_EIO,
                         "%s: '%s' is truncated: %zu bytes, a safetensors file starts with an 8-byte "
                         "header length",
                         who, path, f->size);
    }
    f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        return phx_error(PHX_EIO, "%s: cannot map '%s': %s", who, path, strerror(errno));
    }
    uint64_t hlen;
    memcpy(&hlen, f->map, 8);
    phx_status st = PHX_OK;
    const unsigned char *b = f->map;
    /* A header length whose first bytes look like a zip or pickle magic
     * (0x0380 is a pickle's 80 03) is still a safetensors file when the
     * header it points to is a JSON object within the file. */
    bool plausible = hlen >= 2 && hlen <= f->size - 8 && b[8] == '{';
    if (!plausible && (memcmp(b, "PK\x03\x04", 4) == 0 || (b[0] == 0x80 && b[1] >= 2 && b[1] <= 5))) {
        st = phx_error(PHX_EIO,
                       "%s: '%s' is not a safetensors file: it is a %s, which looks like a PyTorch "
                       "torch.save() file (.pt/.pth); write the state_dict with "
                       "safetensors.torch.save_file(model.state_dict(), 'model.safetensors') instead",
                       who, path, b[0] == 'P' ? "zip archive" : "Python pickle");
        goto fail;
    }
    if (hlen > f->size - 8) {
        st = phx_error(PHX_EIO, "%s: '%s': header length %llu goes beyond the end of the file (%zu bytes)", who, path,
                       (unsigned long long)hlen, f->size);
        goto fail;
    }
    if (hlen > PX_ST_MAX_HEADER || hlen < 2) {
        st = phx_error(PHX_EIO, "%s: '%s': header length %llu is outside [2, %u]", who, path, (unsigned long long)hlen,
                       PX_ST_MAX_HEADER);
        goto fail;
    }
    json_error_t jerr;
    f->root = json_loadb((const char *)f->map + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!f->root) {
        /* jansson ends the text at a NUL and then reports "end of file" */
        const char *nul = memchr((const char *)f->map + 8, 0, (size_t)hlen);
        if (nul)
            st = phx_error(PHX_EIO,
                           "%s: '%s': header is not valid JSON: a NUL byte at byte %zu of its %llu (JSON and the "
                           "space padding after it hold none)",
                           who, path, (size_t)(nul - ((const char *)f->map + 8)), (unsigned long long)hlen);
        else
            st = phx_error(PHX_EIO, "%s: '%s': header is not valid JSON: %s (line %d, column %d)", who, path, jerr.text,
                           jerr.line, jerr.column);
        goto fail;
    }
    if (!json_is_object(f->root)) {
        st = phx_error(PHX_EIO, "%s: '%s': header is JSON but not an object", who, path);
        goto fail;
    }
    f->data = (const uint8_t *)f->map + 8 + hlen;
    f->meta = json_object_get(f->root, "__metadata__");
    if (f->meta) {
        const char *k;
        json_t *v;
        bool ok = json_is_object(f->meta);
        if (ok) json_object_foreach(f->meta, k, v) ok = ok && json_is_string(v);
        if (!ok) {
            st = phx_error(PHX_EIO, "%s: '%s': \"__metadata__\" must map strings to strings", who, path);
            goto fail;
        }
    }
    size_t n = json_object_size(f->root) - (f->meta ? 1 : 0);
    f->e = px_calloc(n ? n : 1, sizeof *f->e);
    if (!f->e) {
        st = PHX_ENOMEM;
        goto fail;
    }
    const char *key;
    json_t *val;
    json_object_foreach(f->root, key, val)
    {
        if (strcmp(key, "__metadata__") == 0) continue;
        if ((st = parse_entry(who, f, key, val, &f->e[f->n])) != PHX_OK) goto fail;
        f->n++;
    }
    /* the layout too when only the header is wanted: a ZeRO shard is read
     * tensor by tensor, and bytes after the data, holes or overlapping
     * tensors mean a damaged file there as well */
    if ((st = check_layout(who, f, f->size - 8 - hlen)) != PHX_OK) goto fail;
    if ((st = px_st_verify(who, f, with_data)) != PHX_OK) goto fail;
    return PHX_OK;
fail:
    px_st_close(f);
    return st;
}

phx_status px_st_open(const char *who, const char *path, px_st_file *f)
{
    return st_open(who, path, f, true);
}
phx_status px_st_open_header(const char *who, const char *path, px_st_file *f)
{
    return st_open(who, path, f, false);
}

/* ---- reading ---------------------------------------------------------- */

void phx_safetensors_free(char **names, phx_tensor **tensors, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (names) px_free(names[i]);
        if (tensors) phx_tensor_free(tensors[i]);
    }
    px_free(names);
    px_free(tensors);
}

phx_status phx_safetensors_read(const char *path, char ***names, phx_tensor ***tensors, size_t *n)
{
    if (!names || !tensors || !n) return phx_error(PHX_EINVAL, "phx_safetensors_read: output pointer is NULL");
    px_st_file f;
    phx_status st = px_st_open("phx_safetensors_read", path, &f);
    if (st != PHX_OK) return st;
    char **nm = px_calloc(f.n ? f.n : 1, sizeof *nm);
    phx_tensor **ts = px_calloc(f.n ? f.n : 1, sizeof *ts);
    for (size_t i = 0; nm && ts && i < f.n; i++) {
        nm[i] = px_strdup(f.e[i].name);
        /* F64 has no Phalanx dtype: it reads as F32. */
        phx_dtype dt = f.e[i].dtype == PX_ST_F64 ? PHX_F32 : f.e[i].dtype;
        ts[i] = phx_tensor_new(dt, f.e[i].ndim, f.e[i].shape, phx_cpu());
        if (!nm[i] || !ts[i]) {
            st = PHX_ENOMEM;
            break;
        }
        if ((st = px_st_load_into(&f, &f.e[i], ts[i])) != PHX_OK) break;
    }
    if (!nm || !ts) st = PHX_ENOMEM;
    size_t cnt = f.n;
    px_st_close(&f);
    if (st != PHX_OK) {
        phx_safetensors_free(nm, ts, cnt);
        return st;
    }
    *names = nm;
    *tensors = ts;
    *n = cnt;
    return PHX_OK;
}

/* ---- writing ---------------------------------------------------------- */

static phx_status write_all(int fd, const void *p, size_t len, const char *who, const char *tmp)
{
    const char *c = p;
    while (len > 0) {
        ssize_t w = write(fd, c, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
            return phx_error(PHX_EIO, "%s: writing '%s': %s", who, tmp, w < 0 ? strerror(errno) : "short write");
        c += w;
        len -= (size_t)w;
    }
    return PHX_OK;
}

/* px_st_entries_crc of the entries build_header writes (checked by then):
 * the tensors back to back in the order given. */
static phx_status entries_crc(const char *const *names, phx_tensor *const *ts, size_t n, uint32_t *out)
{
    px_st_entry *e = px_calloc(n ? n : 1, sizeof *e);
    if (!e) return PHX_ENOMEM;
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        e[i].name = names[i];
        e[i].dtype = ts[i]->dtype;
        e[i].ndim = ts[i]->ndim;
        memcpy(e[i].shape, ts[i]->shape, sizeof e[i].shape);
        e[i].begin = at;
        e[i].end = at += (uint64_t)phx_tensor_nbytes(ts[i]);
    }
    phx_status st = px_st_entries_crc(e, n, out);
    px_free(e);
    return st;
}

/* name for a message: bytes outside printable ASCII as \xNN, cut to fit */
static const char *shown_name(char *out, size_t cap, const char *name)
{
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)name; *p && o + 5 < cap; p++)
        o += (size_t)(*p >= 0x20 && *p < 0x7f && *p != '\\' ? snprintf(out + o, cap - o, "%c", *p)
                                                            : snprintf(out + o, cap - o, "\\x%02x", *p));
    out[o] = 0;
    return out;
}

static json_t *build_header(const char *who, const char *const *names, phx_tensor *const *ts, size_t n,
                            const phx_meta *meta, size_t n_meta, const uint32_t *crc, phx_status *st)
{
    json_t *root = json_object();
    *st = PHX_ENOMEM;
    if (!root) return NULL;
    json_t *m = json_object();
    if (!m || json_object_set_new(root, "__metadata__", m) != 0) goto fail;
    for (size_t i = 0; i < n_meta; i++) {
        if (!meta[i].key || !meta[i].value) {
            *st = phx_error(PHX_EINVAL, "%s: metadata entry %zu has a NULL key or value", who, i);
            goto fail;
        }
        if (strncmp(meta[i].key, PX_ST_RESERVED, strlen(PX_ST_RESERVED)) == 0) {
            *st = phx_error(PHX_EINVAL,
                            "%s: metadata key '%s' is reserved (keys starting '" PX_ST_RESERVED
                            "' are Phalanx's checksums)",
                            who, meta[i].key);
            goto fail;
        }
        if (json_object_get(m, meta[i].key)) {
            *st = phx_error(PHX_EINVAL, "%s: metadata key '%s' appears twice", who, meta[i].key);
            goto fail;
        }
        json_t *s = json_string(meta[i].value);
        if (!s || json_object_set_new(m, meta[i].key, s) != 0) {
            char shown[256];
            *st = phx_error(PHX_EINVAL, "%s: metadata '%s' (its key or value) is not valid UTF-8", who,
                            shown_name(shown, sizeof shown, meta[i].key));
            goto fail;
        }
    }
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const char *dn = ts[i] ? px_st_dtype_name(ts[i]->dtype) : NULL;
        if (!names[i] || !dn || strcmp(names[i], "__metadata__") == 0) {
            *st = phx_error(PHX_EINVAL, "%s: entry %zu ('%s') has no name, no tensor or an unnamed dtype", who, i,
                            names[i] ? names[i] : "(null)");
            goto fail;
        }
        if (json_object_get(root, names[i])) {
            *st = phx_error(PHX_EINVAL, "%s: tensor name '%s' appears twice", who, names[i]);
            goto fail;
        }
        json_t *e = json_object(), *shape = json_array();
        uint64_t len = (uint64_t)phx_tensor_nbytes(ts[i]);
        if (!e || !shape) {
            json_decref(e), json_decref(shape);
            goto fail;
        }
        /* a refused key frees e (jansson's _new); the header's keys are UTF-8 */
        if (json_object_set_new(root, names[i], e) != 0) {
            json_decref(shape);
            char shown[256];
            *st = phx_error(PHX_EINVAL, "%s: tensor name '%s' is not valid UTF-8 (a safetensors header is JSON)", who,
                            shown_name(shown, sizeof shown, names[i]));
            goto fail;
        }
        if (json_object_set_new(e, "dtype", json_string(dn)) != 0) {
            json_decref(shape);
            goto fail;
        }
        if (json_object_set_new(e, "shape", shape) != 0) goto fail;
        for (int d = 0; d < ts[i]->ndim; d++)
            if (json_array_append_new(shape, json_integer(ts[i]->shape[d])) != 0) goto fail;
        json_t *off = json_pack("[II]", (json_int_t)at, (json_int_t)(at + len));
        if (!off || json_object_set_new(e, "data_offsets", off) != 0) goto fail;
        at += len;
    }
    /* the entries' checksum, then the metadata's (which covers it), then the tensors' */
    char hex[16];
    uint32_t ecrc, mcrc;
    if (entries_crc(names, ts, n, &ecrc) != PHX_OK) goto fail;
    snprintf(hex, sizeof hex, "%08x", (unsigned)ecrc);
    if (json_object_set_new(m, PX_ST_ENTRIES_KEY, json_string(hex)) != 0) goto fail;
    if (px_st_meta_crc(m, &mcrc) != PHX_OK) goto fail;
    for (size_t i = 0; i <= n; i++) {
        char *key = px_concat(PX_ST_CRC_PREFIX, i < n ? names[i] : "__metadata__");
        snprintf(hex, sizeof hex, "%08x", (unsigned)(i < n ? crc[i] : mcrc));
        int bad = !key || json_object_set_new(m, key, json_string(hex)) != 0;
        px_free(key);
        if (bad) goto fail;
    }
    *st = PHX_OK;
    return root;
fail:
    json_decref(root);
    return NULL;
}

static phx_status write_tensor(int fd, const phx_tensor *t, const char *who, const char *tmp)
{
    if (t->storage->device.kind == PHX_DEVICE_CPU)
        return write_all(fd, px_tensor_ptr(t), phx_tensor_nbytes(t), who, tmp);
    void *host = px_malloc(phx_tensor_nbytes(t) ? phx_tensor_nbytes(t) : 1);
    if (!host) return PHX_ENOMEM;
    phx_status st = phx_tensor_to_host(t, host);
    if (st == PHX_OK) st = write_all(fd, host, phx_tensor_nbytes(t), who, tmp);
    px_free(host);
    return st;
}

/* The CRC-32 of a tensor's bytes (a device tensor's staged through host
 * memory). A NULL tensor is left to build_header to refuse. */
static phx_status tensor_crc(const phx_tensor *t, uint32_t *crc)
{
    *crc = 0;
    if (!t) return PHX_OK;
    if (t->storage->device.kind == PHX_DEVICE_CPU) {
        *crc = px_st_crc(px_tensor_ptr(t), phx_tensor_nbytes(t));
        return PHX_OK;
    }
    void *host = px_malloc(phx_tensor_nbytes(t) ? phx_tensor_nbytes(t) : 1);
    if (!host) return PHX_ENOMEM;
    phx_status st = phx_tensor_to_host(t, host);
    if (st == PHX_OK) *crc = px_st_crc(host, phx_tensor_nbytes(t));
    px_free(host);
    return st;
}

/* A save writes "<path>.tmp.XXXXXX" and holds an flock on it until the
 * rename; a save killed before the rename leaves that file unlocked. Each
 * save first removes such leftovers of the same path: a name that is
 * exactly <base>.tmp. + 6 characters of mkstemp's alphabet, that nobody
 * holds locked and that is still the file it opened. Nothing else (the
 * good file included) is ever touched. */
static bool is_temp_of(const char *name, const char *base)
{
    size_t bl = strlen(base);
    if (strncmp(name, base, bl) != 0 || strncmp(name + bl, ".tmp.", 5) != 0) return false;
    const char *x = name + bl + 5;
    if (strlen(x) != 6) return false;
    for (int i = 0; i < 6; i++)
        if (!((x[i] >= 'a' && x[i] <= 'z') || (x[i] >= 'A' && x[i] <= 'Z') || (x[i] >= '0' && x[i] <= '9')))
            return false;
    return true;
}

static void remove_stale_temps(const char *path)
{
    char *d1 = px_strdup(path), *d2 = px_strdup(path);
    if (!d1 || !d2) {
        px_free(d1);
        px_free(d2);
        return;
    }
    const char *dir = dirname(d1), *base = basename(d2);
    DIR *dp = opendir(dir);
    struct dirent *e;
    while (dp && (e = readdir(dp))) {
        if (!is_temp_of(e->d_name, base)) continue;
        int fd = openat(dirfd(dp), e->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0) continue;
        struct stat a, b;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &a) == 0 && S_ISREG(a.st_mode) &&
            fstatat(dirfd(dp), e->d_name, &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev)
            unlinkat(dirfd(dp), e->d_name, 0);
        close(fd); /* releases the lock */
    }
    if (dp) closedir(dp);
    px_free(d1);
    px_free(d2);
}

/* The process's umask, read without changing it (umask() would race with
 * other threads creating files): /proc/self/status, else 022. */
static mode_t current_umask(void)
{
    FILE *f = fopen("/proc/self/status", "re");
    unsigned m = 022;
    char line[128];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Umask: %o", &m) == 1) break;
    if (f) fclose(f);
    return (mode_t)m;
}

/* The mode a saved file gets: the file it replaces keeps its mode, a new
 * one gets 0666 less the umask (as open(2) would give it; mkostemp makes
 * 0600). */
static void give_mode(int fd, const char *path)
{
    struct stat st;
    mode_t mode = stat(path, &st) == 0 && S_ISREG(st.st_mode) ? st.st_mode & 07777 : 0666 & ~current_umask();
    (void)fchmod(fd, mode);
}

/* Creates the temporary file and locks it; retries if a concurrent sweep
 * removed it between the two. */
static int create_locked_temp(char *tmp, size_t len, const char *path)
{
    for (int tries = 0; tries < 8; tries++) {
        snprintf(tmp, len, "%s.tmp.XXXXXX", path);
        int fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0) return -1;
        struct stat a, b;
        if (flock(fd, LOCK_EX) == 0 && fstat(fd, &a) == 0 && stat(tmp, &b) == 0 && a.st_ino == b.st_ino) return fd;
        close(fd);
    }
    errno = EAGAIN;
    return -1;
}

phx_status phx_safetensors_write(const char *path, const char *const *names, phx_tensor *const *tensors, size_t n,
                                 const phx_meta *meta, size_t n_meta)
{
    const char *who = "phx_safetensors_write";
    if (!path || (n && (!names || !tensors)) || (n_meta && !meta))
        return phx_error(PHX_EINVAL, "%s: NULL path, names, tensors or metadata", who);
    phx_status st = PHX_OK;
    for (size_t i = 0; i < n; i++)
        if (tensors[i] && px_tensor_live(who, names[i] ? names[i] : "a tensor", tensors[i]) != PHX_OK)
            return PHX_ESTATE;
    uint32_t *crc = px_malloc((n ? n : 1) * sizeof *crc);
    if (!crc) return PHX_ENOMEM;
    for (size_t i = 0; i < n && st == PHX_OK; i++) st = tensor_crc(tensors[i], &crc[i]);
    json_t *root = st == PHX_OK ? build_header(who, names, tensors, n, meta, n_meta, crc, &st) : NULL;
    px_free(crc);
    if (!root) return st == PHX_OK ? PHX_ENOMEM : st;
    char *hdr = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    size_t plen = strlen(path);
    char *tmp = px_malloc(plen + 16);
    char *dir = px_strdup(path);
    if (!hdr || !tmp || !dir) {
        free(hdr);
        px_free(tmp);
        px_free(dir);
        return PHX_ENOMEM;
    }
    /* Pad the header with spaces so the data starts 8-byte aligned. */
    size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
    remove_stale_temps(path);
    int fd = create_locked_temp(tmp, plen + 16, path);
    if (fd >= 0) give_mode(fd, path);
    if (fd < 0) {
        st = phx_error(PHX_EIO, "%s: cannot create a temporary file beside '%s': %s", who, path, strerror(errno));
        goto out;
    }
    uint64_t hlen = padded;
    static const char spaces[8] = "        ";
    st = write_all(fd, &hlen, 8, who, tmp);
    if (st == PHX_OK) st = write_all(fd, hdr, hl, who, tmp);
    if (st == PHX_OK) st = write_all(fd, spaces, padded - hl, who, tmp);
    for (size_t i = 0; i < n && st == PHX_OK; i++) st = write_tensor(fd, tensors[i], who, tmp);
    if (st == PHX_OK && fsync(fd) != 0) st = phx_error(PHX_EIO, "%s: fsync of '%s': %s", who, tmp, strerror(errno));
    if (close(fd) != 0 && st == PHX_OK) st = phx_error(PHX_EIO, "%s: closing '%s': %s", who, tmp, strerror(errno));
    if (st == PHX_OK && rename(tmp, path) != 0)
        st = phx_error(PHX_EIO, "%s: renaming '%s' to '%s': %s", who, tmp, path, strerror(errno));
    if (st != PHX_OK) {
        unlink(tmp);
        goto out;
    }
    /* Make the rename itself durable. */
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        if (fsync(dfd) != 0) st = phx_error(PHX_EIO, "%s: fsync of the folder of '%s': %s", who, path, strerror(errno));
        close(dfd);
    }
out:
    free(hdr);
    px_free(tmp);
    px_free(dir);
    return st;
}
