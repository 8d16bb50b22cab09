/* TensorBoard event files (src/train/tensorboard.h): TFRecord framing
 * around Event protobufs encoded by hand. The protobuf wire format used
 * here is small: a field is a varint key (number << 3 | wire type), then
 * a varint (type 0), 8 bytes (type 1, double), a varint length and that
 * many bytes (type 2: strings and nested messages) or 4 bytes (type 5,
 * float); integers are little-endian. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "src/base/util.h"
#include "src/train/tensorboard.h"

#define EVENT_MAX 16384

struct px_tb {
    int fd;
    char *path;
    uint8_t event[EVENT_MAX]; /* the Event being encoded */
    uint8_t value[EVENT_MAX]; /* the Summary being encoded */
    uint8_t rec[EVENT_MAX + 16]; /* the framed record */
};

uint32_t px_crc32c(uint32_t crc, const void *p, size_t n)
{
    static uint32_t table[256];
    static int ready; /* the table is the same whichever thread fills it */
    if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
            table[i] = c;
        }
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    const uint8_t *b = p;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ b[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

uint32_t px_crc32c_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static void le(uint8_t *out, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) out[i] = (uint8_t)(v >> (8 * i));
}

size_t px_tfrecord_frame(uint8_t *out, const void *data, size_t n)
{
    le(out, n, 8);
    le(out + 8, px_crc32c_mask(px_crc32c(0, out, 8)), 4);
    memcpy(out + 12, data, n);
    le(out + 12 + n, px_crc32c_mask(px_crc32c(0, data, n)), 4);
    return n + 16;
}

/* A protobuf encoder into a fixed buffer; `over` records an overflow. */
typedef struct pb {
    uint8_t *b;
    size_t n, cap;
    int over;
} pb;

static void pb_bytes(pb *e, const void *p, size_t n)
{
    if (e->over || n > e->cap - e->n) {
        e->over = 1;
        return;
    }
    memcpy(e->b + e->n, p, n);
    e->n += n;
}

static void pb_varint(pb *e, uint64_t v)
{
    uint8_t t[10];
    int k = 0;
    do {
        t[k] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v) t[k] |= 0x80;
        k++;
    } while (v);
    pb_bytes(e, t, (size_t)k);
}

static void pb_key(pb *e, int field, int type)
{
    pb_varint(e, (uint64_t)field << 3 | (uint64_t)type);
}

static void pb_double(pb *e, int field, double v)
{
    uint64_t u;
    uint8_t t[8];
    memcpy(&u, &v, 8);
    le(t, u, 8);
    pb_key(e, field, 1);
    pb_bytes(e, t, 8);
}

static void pb_float(pb *e, int field, float v)
{
    uint32_t u;
    uint8_t t[4];
    memcpy(&u, &v, 4);
    le(t, u, 4);
    pb_key(e, field, 5);
    pb_bytes(e, t, 4);
}

static void pb_string(pb *e, int field, const void *p, size_t n)
{
    pb_key(e, field, 2);
    pb_varint(e, n);
    pb_bytes(e, p, n);
}

/* Frames the Event in t->event (n bytes) and appends it with one write. */
static phx_status append(px_tb *t, size_t n, const char *fn)
{
    size_t len = px_tfrecord_frame(t->rec, t->event, n);
    return px_append_record(t->fd, t->rec, len, fn, t->path);
}

/* Starts an Event: wall_time (field 1) and step (field 2). */
static pb event_begin(px_tb *t, double wall_time, int64_t step)
{
    pb e = {.b = t->event, .cap = EVENT_MAX};
    pb_double(&e, 1, wall_time);
    if (step) {
        pb_key(&e, 2, 0);
        pb_varint(&e, (uint64_t)step);
    }
    return e;
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

phx_status px_tb_open(const char *dir, const char *fn, px_tb **out)
{
    *out = NULL;
    if (!dir || !*dir) return px_error_null(fn, "tensorboard directory");
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return phx_error(PHX_EIO, "%s: cannot create the TensorBoard directory '%s': %s", fn, dir, strerror(errno));
    px_tb *t = px_calloc(1, sizeof *t);
    if (!t) return PHX_ENOMEM;
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';
    size_t cap = strlen(dir) + strlen(host) + 96;
    if (!(t->path = px_malloc(cap))) {
        px_free(t);
        return PHX_ENOMEM;
    }
    double wall = wall_now();
    /* O_EXCL: a second writer in the same second gets the next suffix. */
    for (int k = 0; k < 100; k++) {
        int n =
            snprintf(t->path, cap, "%s/events.out.tfevents.%lld.%s.%ld", dir, (long long)wall, host, (long)getpid());
        if (k) snprintf(t->path + n, cap - (size_t)n, ".%d", k);
        t->fd = open(t->path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0666);
        if (t->fd >= 0 || errno != EEXIST) break;
    }
    if (t->fd < 0) {
        phx_status st = phx_error(PHX_EIO, "%s: cannot create '%s': %s", fn, t->path, strerror(errno));
        px_tb_close(t);
        return st;
    }
    pb e = event_begin(t, wall, 0);
    pb_string(&e, 3, "brain.Event:2", 13);
    phx_status st = append(t, e.n, fn);
    if (st != PHX_OK) {
        px_tb_close(t);
        return st;
    }
    *out = t;
    return PHX_OK;
}

void px_tb_close(px_tb *t)
{
    if (!t) return;
    if (t->fd >= 0) close(t->fd);
    px_free(t->path);
    px_free(t);
}

const char *px_tb_path(const px_tb *t)
{
    return t ? t->path : NULL;
}

/* The hparams plugin's record (tensorboard/plugins/hparams): a Summary
 * value tagged "_hparams_/session_start_info" with no data, whose
 * metadata (field 9) carries plugin_data {plugin_name "hparams", content
 * HParamsPluginData {session_start_info (3): SessionStartInfo {hparams
 * (1): map<string, google.protobuf.Value> (entries {key 1, value 2},
 * Value {number_value 2 | string_value 3}), start_time_secs (5)}}}, as
 * PyTorch's add_hparams writes it. */
phx_status px_tb_hparams(px_tb *t, double wall_time, int n, const char *const *names, const char *const *strs,
                         const double *nums)
{
    static const char *fn = "phx_metrics_hparams";
    /* Innermost first, each message wrapped into the next: t->value and
     * t->rec take turns (rec is free until the Event is framed). */
    uint8_t *x = t->value, *y = t->rec;
    pb m = {.b = x, .cap = EVENT_MAX};
    int over = 0;
    for (int i = 0; i < n; i++) {
        uint8_t v[EVENT_MAX / 4], entry[EVENT_MAX / 4];
        pb vb = {.b = v, .cap = sizeof v};
        if (strs[i])
            pb_string(&vb, 3, strs[i], strlen(strs[i])); /* Value.string_value */
        else
            pb_double(&vb, 2, nums[i]); /* Value.number_value */
        pb eb = {.b = entry, .cap = sizeof entry};
        pb_string(&eb, 1, names[i], strlen(names[i]));
        pb_string(&eb, 2, v, vb.n);
        over |= vb.over | eb.over;
        pb_string(&m, 1, entry, eb.n); /* SessionStartInfo.hparams */
    }
    pb_double(&m, 5, wall_time); /* SessionStartInfo.start_time_secs */
    over |= m.over;
    pb w = {.b = y, .cap = EVENT_MAX};
    pb_string(&w, 3, x, m.n); /* HParamsPluginData.session_start_info (version 0: left out) */
    over |= w.over;
    m = (pb){.b = x, .cap = EVENT_MAX};
    pb_string(&m, 1, "hparams", 7); /* PluginData.plugin_name */
    pb_string(&m, 2, y, w.n); /* PluginData.content */
    over |= m.over;
    w = (pb){.b = y, .cap = EVENT_MAX};
    pb_string(&w, 1, x, m.n); /* SummaryMetadata.plugin_data */
    over |= w.over;
    static const char tag[] = "_hparams_/session_start_info";
    m = (pb){.b = x, .cap = EVENT_MAX};
    pb_string(&m, 1, tag, sizeof tag - 1); /* Summary.Value.tag */
    pb_string(&m, 9, y, w.n); /* Summary.Value.metadata */
    over |= m.over;
    w = (pb){.b = y, .cap = EVENT_MAX};
    pb_string(&w, 1, x, m.n); /* Summary.value */
    pb e = event_begin(t, wall_time, 0);
    pb_string(&e, 5, y, w.n); /* Event.summary */
    if (over || w.over || e.over)
        return phx_error(PHX_EINVAL, "%s: %d hyperparameters do not fit a %d-byte TensorBoard record", fn, n,
                         EVENT_MAX);
    return append(t, e.n, fn);
}

phx_status px_tb_scalars(px_tb *t, double wall_time, int64_t step, int n, const char *const *tags, const size_t *taglen,
                         const float *values)
{
    static const char *fn = "phx_metrics_end";
    pb e = event_begin(t, wall_time, step);
    pb s = {.b = t->value, .cap = EVENT_MAX};
    for (int i = 0; i < n; i++) {
        /* Summary.value (field 1): Summary.Value {tag = 1, simple_value = 2}. */
        size_t len = 1 + 5 + taglen[i] + 5; /* an upper bound of the Value's size */
        uint8_t v[1 + 5 + 64 + 5];
        if (taglen[i] > 64 || len > sizeof v) return phx_error(PHX_EINVAL, "%s: tag longer than 64 bytes", fn);
        pb vb = {.b = v, .cap = sizeof v};
        pb_string(&vb, 1, tags[i], taglen[i]);
        pb_float(&vb, 2, values[i]);
        pb_string(&s, 1, v, vb.n);
    }
    pb_string(&e, 5, s.b, s.n); /* Event.summary */
    if (e.over || s.over)
        return phx_error(PHX_EINVAL, "%s: %d scalars do not fit a %d-byte TensorBoard record", fn, n, EVENT_MAX);
    return append(t, e.n, fn);
}
