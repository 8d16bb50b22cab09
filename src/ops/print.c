/* phx_tensor_print: PyTorch 1.13's repr (torch/_tensor_str.py with the
 * default print options: precision 4, threshold 1000, edgeitems 3,
 * linewidth 80), character for character, so that a Phalanx tensor and
 * the same torch tensor print alike; grad_fn names are Phalanx's ("mul",
 * not "MulBackward0"), and an elided tensor adds its size, which torch
 * leaves out. */
#include "config.h"
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "src/base/util.h"
#include "src/ops/ops-impl.h"

enum { PRECISION = 4, THRESHOLD = 1000, EDGE = 3, LINEWIDTH = 80 };

/* A growing string; ok false once an allocation failed. */
typedef struct sbuf {
    char *s;
    size_t n, cap;
    bool ok;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t len)
{
    if (!b->ok) return;
    if (b->n + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + len + 1) cap *= 2;
        char *p = px_realloc(b->s, cap);
        if (!p) {
            b->ok = false;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, len);
    b->n += len;
    b->s[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

static void sb_spaces(sbuf *b, int n)
{
    for (int i = 0; i < n; i++) sb_put(b, " ", 1);
}

/* torch's _Formatter: one width and one style for every value shown. */
typedef struct fmt {
    bool floating, int_mode, sci;
    int width;
    const double *f; /* float values (as double) */
    const int64_t *i; /* integer values */
} fmt;

/* value formatted as Python's "{:.Nf}" / "{:.Ne}" / "{:.0f}" would
 * (nan and inf spelled as Python spells them). */
static int format_float(char *buf, size_t len, double v, char style)
{
    if (isnan(v)) return snprintf(buf, len, "nan");
    if (isinf(v)) return snprintf(buf, len, v < 0 ? "-inf" : "inf");
    if (style == 'e') return snprintf(buf, len, "%.*e", PRECISION, v);
    if (style == 'i') return snprintf(buf, len, "%.0f", v);
    return snprintf(buf, len, "%.*f", PRECISION, v);
}

static void format_value(const fmt *f, int64_t k, char *buf, size_t len)
{
    char v[64];
    int n;
    if (!f->floating)
        n = snprintf(v, sizeof v, "%" PRId64, f->i[k]);
    else if (f->sci)
        n = format_float(v, sizeof v, f->f[k], 'e');
    else if (f->int_mode) {
        n = format_float(v, sizeof v, f->f[k], 'i');
        if (isfinite(f->f[k])) n += snprintf(v + n, sizeof v - (size_t)n, ".");
    } else
        n = format_float(v, sizeof v, f->f[k], 'f');
    int pad = f->width > n ? f->width - n : 0;
    snprintf(buf, len, "%*s%s", pad, "", v);
}

/* Whether flat element k is shown (elided tensors show EDGE items at
 * each end of every dim longer than 2 EDGE). */
static bool shown(const phx_tensor *t, bool summarize, int64_t k)
{
    if (!summarize) return true;
    for (int d = t->ndim - 1; d >= 0; d--) {
        int64_t c = k % t->shape[d];
        k /= t->shape[d];
        if (t->shape[d] > 2 * EDGE && c >= EDGE && c < t->shape[d] - EDGE) return false;
    }
    return true;
}

static void fmt_init(fmt *f, const phx_tensor *t, bool summarize)
{
    f->int_mode = true;
    f->sci = false;
    f->width = 1;
    char buf[64];
    if (!f->floating) {
        for (int64_t k = 0; k < t->numel; k++)
            if (shown(t, summarize, k)) {
                int n = snprintf(buf, sizeof buf, "%" PRId64, f->i[k]);
                if (n > f->width) f->width = n;
            }
        return;
    }
    double lo = INFINITY, hi = 0;
    int64_t count = 0;
    for (int64_t k = 0; k < t->numel; k++) {
        double v = f->f[k];
        if (!shown(t, summarize, k) || !isfinite(v) || v == 0) continue;
        count++;
        lo = fmin(lo, fabs(v));
        hi = fmax(hi, fabs(v));
        if (v != ceil(v)) f->int_mode = false;
    }
    if (!count) return;
    f->sci = hi / lo > 1000.0 || hi > 1.0e8 || (!f->int_mode && lo < 1.0e-4);
    char style = f->sci ? 'e' : f->int_mode ? 'i' : 'f';
    for (int64_t k = 0; k < t->numel; k++) {
        double v = f->f[k];
        if (!shown(t, summarize, k) || !isfinite(v) || v == 0) continue;
        int n = format_float(buf, sizeof buf, v, style) + (style == 'i');
        if (n > f->width) f->width = n;
    }
}

/* torch's _tensor_str_with_formatter over dims d.. of the block at flat
 * offset off. */
static void tensor_str(sbuf *b, const phx_tensor *t, const fmt *f, bool summarize, int d, int64_t off, int indent)
{
    char buf[96];
    if (t->ndim == 0) {
        format_value(f, 0, buf, sizeof buf);
        sb_str(b, buf);
        return;
    }
    int64_t size = t->shape[d], stride = 1;
    for (int i = d + 1; i < t->ndim; i++) stride *= t->shape[i];
    bool elide = summarize && size > 2 * EDGE;
    int64_t items = elide ? 2 * EDGE + 1 : size;
    sb_str(b, "[");
    if (d == t->ndim - 1) { /* _vector_str: lines of whole elements */
        int64_t per_line = (LINEWIDTH - indent) / (f->width + 2);
        if (per_line < 1) per_line = 1;
        for (int64_t j = 0; j < items; j++) {
            if (j) {
                if (j % per_line == 0) {
                    sb_str(b, ",\n");
                    sb_spaces(b, indent + 1);
                } else
                    sb_str(b, ", ");
            }
            if (elide && j == EDGE) {
                sb_str(b, " ...");
                continue;
            }
            int64_t i = elide && j > EDGE ? size - (2 * EDGE + 1 - j) : j;
            format_value(f, off + i, buf, sizeof buf);
            sb_str(b, buf);
        }
    } else {
        for (int64_t j = 0; j < items; j++) {
            if (j) {
                sb_str(b, ",");
                for (int k = d; k < t->ndim - 1; k++) sb_str(b, "\n");
                sb_spaces(b, indent + 1);
            }
            if (elide && j == EDGE) {
                sb_str(b, "...");
                continue;
            }
            int64_t i = elide && j > EDGE ? size - (2 * EDGE + 1 - j) : j;
            tensor_str(b, t, f, summarize, d + 1, off + i * stride, indent + 1);
        }
    }
    sb_str(b, "]");
}

/* torch's _add_suffixes: ", suffix", or a new line when it would pass
 * the line width. */
static void add_suffix(sbuf *b, size_t *line_len, const char *suffix)
{
    size_t len = strlen(suffix);
    if (*line_len + len + 2 > LINEWIDTH) {
        sb_str(b, ",\n");
        sb_spaces(b, 7);
        *line_len = 7 + len;
    } else {
        sb_str(b, ", ");
        *line_len += len + 2;
    }
    sb_str(b, suffix);
}

static const char *torch_dtype(phx_dtype dt)
{
    switch (dt) {
    case PHX_F16: return "torch.float16";
    case PHX_BF16: return "torch.bfloat16";
    case PHX_I32: return "torch.int32";
    case PHX_I64: return "torch.int64";
    default: return "torch.float32";
    }
}

/* t's values on the host as f32 (float dtypes) or i64, through a CPU
 * copy and the cast kernel where t is elsewhere or of another dtype. */
static phx_status host_values(const phx_tensor *t, fmt *f, void **raw)
{
    phx_dtype hdt = f->floating ? PHX_F32 : PHX_I64;
    size_t es = phx_dtype_size(hdt);
    *raw = px_malloc((size_t)(t->numel ? t->numel : 1) * es);
    if (!*raw) return phx_error(PHX_ENOMEM, "phx_tensor_print: out of memory for %" PRId64 " values", t->numel);
    phx_tensor *c = NULL, *h = NULL;
    const phx_tensor *src = t;
    phx_status st = PHX_OK;
    if (t->storage->device.kind != PHX_DEVICE_CPU) {
        c = phx_tensor_new(t->dtype, t->ndim, t->shape, phx_cpu());
        st = c ? phx_tensor_copy(c, t) : PHX_ENOMEM;
        src = c;
    }
    if (!st && src->dtype != hdt) {
        h = phx_tensor_new(hdt, t->ndim, t->shape, phx_cpu());
        st = h ? phx_tensor_cast(h, src) : PHX_ENOMEM;
        src = h;
    }
    if (!st) st = phx_tensor_to_host(src, *raw);
    phx_tensor_free(c);
    phx_tensor_free(h);
    if (st) return st;
    if (!f->floating) {
        f->i = *raw;
        return PHX_OK;
    }
    double *v = px_malloc((size_t)(t->numel ? t->numel : 1) * sizeof *v);
    if (!v) return phx_error(PHX_ENOMEM, "phx_tensor_print: out of memory for %" PRId64 " values", t->numel);
    for (int64_t k = 0; k < t->numel; k++) v[k] = ((const float *)*raw)[k];
    f->f = v;
    return PHX_OK;
}

phx_status phx_tensor_print(const phx_tensor *t, FILE *f)
{
    if (!t || !f) return phx_error(PHX_EINVAL, "phx_tensor_print: %s is NULL", t ? "f" : "t");
    fmt fm = {.floating = phx_dtype_is_float(t->dtype)};
    void *raw = NULL;
    phx_status st = host_values(t, &fm, &raw);
    if (st) {
        px_free(raw);
        return st;
    }
    bool summarize = t->numel > THRESHOLD;
    sbuf b = {.ok = true};
    char s[96], shape[80];
    sb_str(&b, "tensor(");
    if (t->numel == 0)
        sb_str(&b, "[]");
    else {
        fmt_init(&fm, t, summarize);
        tensor_str(&b, t, &fm, summarize, 0, 0, 7);
    }
    size_t line_len = b.ok ? b.n - (strrchr(b.s, '\n') ? (size_t)(strrchr(b.s, '\n') - b.s) : (size_t)-1) + 1 : 0;
    if (t->storage->device.kind != PHX_DEVICE_CPU) {
        char dn[32];
        snprintf(s, sizeof s, "device='%s'", phx_device_name(t->storage->device, dn, sizeof dn));
        add_suffix(&b, &line_len, s);
    }
    if ((t->numel == 0 && t->ndim != 1) || summarize) {
        snprintf(s, sizeof s, "size=%s", phx_tensor_shape_str(t, shape, sizeof shape));
        add_suffix(&b, &line_len, s);
    }
    if (t->numel == 0 ? t->dtype != PHX_F32 : t->dtype != PHX_F32 && t->dtype != PHX_I64) {
        snprintf(s, sizeof s, "dtype=%s", torch_dtype(t->dtype));
        add_suffix(&b, &line_len, s);
    }
    const char *gf = phx_tensor_grad_fn(t);
    if (gf) {
        snprintf(s, sizeof s, "grad_fn=<%s>", gf);
        add_suffix(&b, &line_len, s);
    } else if (phx_tensor_requires_grad(t))
        add_suffix(&b, &line_len, "requires_grad=True");
    sb_str(&b, ")\n");
    px_free(raw);
    px_free((void *)fm.f);
    if (!b.ok) {
        px_free(b.s);
        return phx_error(PHX_ENOMEM, "phx_tensor_print: out of memory formatting %" PRId64 " values", t->numel);
    }
    st = fwrite(b.s, 1, b.n, f) == b.n ? PHX_OK : phx_error(PHX_EIO, "phx_tensor_print: write failed");
    px_free(b.s);
    return st;
}
