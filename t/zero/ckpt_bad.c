/* A sharded (ZeRO) checkpoint whose index or shards are damaged, or come
 * from another save, is refused before anything changes (defects a
 * fuzzing run found), at world 1 (a ZeRO optimizer without a comm):
 * - the index carries "crc32": an edited value (lr 0.01 -> 0.02) fails it;
 *   one with "save" but no "crc32" (only an edit drops one) is refused;
 * - pieces whose lengths overflow int64 when added are refused;
 * - an fp32 run's scaler state is refused by an fp16 scaler;
 * - with "crc32" dropped (an index of an earlier build): a negative lr,
 *   a scale of -1 or a growth tracker past the scaler's interval are
 *   refused, and the model, the optimizer and the scaler stay as they
 *   were (the scaler was set after the commit, the lr ignored);
 * - duplicate keys in the index are refused;
 * - a shard of another save under this index's name is refused, whether
 *   of another generation or of the same one;
 * - bytes appended to a shard are refused (its layout was not checked);
 * - an index that is a FIFO is refused at once by load and by save;
 * - the generation counts exactly past 2^24 (it went through a float),
 *   and a save at the last generation is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <jansson.h>
#include "phalanx/phalanx.h"
#include "t/ddp-util.h"
#include "t/file-util.h"
#include "t/tap.h"

static const int64_t sizes[] = {5, 9, 4};
static char dir[64];

static char *in(const char *d, const char *name)
{
    static char p[8][200];
    static int i;
    char *s = p[i++ % 8];
    snprintf(s, 200, "%s/%s", d, name);
    return s;
}

/* a copy of index text with key's value (up to the next ',' or newline) replaced by v */
static char *with_value(const char *text, const char *key, const char *v)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\": ", key);
    const char *at = strstr(text, k);
    if (!at) return NULL;
    at += strlen(k);
    size_t end = strcspn(at, ",\n");
    char *out = malloc(strlen(text) + strlen(v) + 1);
    size_t head = (size_t)(at - text);
    memcpy(out, text, head);
    strcpy(out + head, v);
    strcat(out, at + end);
    return out;
}

/* text without the line of key */
static char *without(const char *text, const char *key)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\": ", key);
    char *out = strdup(text), *at = strstr(out, k);
    if (!at) return out;
    char *nl = strchr(at, '\n');
    memmove(at, nl + 1, strlen(nl + 1) + 1);
    return out;
}

/* text without its "crc32" and "save" lines (an index of an earlier build) */
static char *without_crc(const char *text)
{
    char *a = without(text, "crc32"), *b = without(a, "save");
    free(a);
    return b;
}

/* zlib's CRC-32 (reflected, polynomial 0xEDB88320), computed here */
static uint32_t crc32_of(const char *p, size_t n)
{
    uint32_t crc = ~0u;
    for (size_t i = 0; i < n; i++) {
        crc ^= (uint8_t)p[i];
        for (int k = 0; k < 8; k++) crc = crc & 1 ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
    }
    return ~crc;
}

/* r as an index with a right "crc32" (doc/reference/formats.md: the CRC-32
 * of the index without it, compact, keys sorted); takes r */
static char *resummed(json_t *r)
{
    json_object_del(r, "crc32");
    char *compact = json_dumps(r, JSON_COMPACT | JSON_SORT_KEYS), hex[16];
    snprintf(hex, sizeof hex, "%08x", (unsigned)crc32_of(compact, strlen(compact)));
    free(compact);
    json_object_set_new(r, "crc32", json_string(hex));
    char *text = json_dumps(r, JSON_INDENT(1) | JSON_SORT_KEYS);
    json_decref(r);
    return text;
}

/* a shard optimizer whose type name is Latin-1 (it reaches only the index) */
static phx_status noop_step(phx_optimizer *self)
{
    (void)self;
    return PHX_OK;
}
static void noop_free(phx_optimizer *self)
{
    (void)self;
}
static const phx_optimizer_vtable latin1_vt = {
    .struct_size = PHX_OPTIMIZER_VTABLE_SIZE, .type_name = "Caf\xe9SGD", .step = noop_step, .free = noop_free};
static phx_optimizer *make_latin1(phx_module *shard, void *arg)
{
    (void)arg;
    return phx_optimizer_new(&latin1_vt, NULL, shard);
}

static float params_sum(phx_module *m)
{
    float s = 0;
    for (size_t i = 0; i < phx_module_num_params(m); i++) {
        phx_tensor *v = phx_param_value(phx_module_param(m, i));
        int64_t n = phx_tensor_numel(v);
        float *h = malloc((size_t)n * sizeof *h);
        phx_tensor_to_host(v, h);
        for (int64_t j = 0; j < n; j++) s += h[j] * (float)(j + 1 + 7 * (int64_t)i);
        free(h);
    }
    return s;
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/phx-zbad-XXXXXX");
    if (!mkdtemp(dir)) skip_all("cannot create a temporary folder");
    plan(21);
    char a[96], b[96];
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);

    /* the saved state: a model (seed 1), its ZeRO AdamW after lr 0.01, a scaler */
    phx_precision *fp16 = NULL;
    phx_status st = phx_precision_new("fp16", &fp16);
    phx_scaler_opts so = PHX_SCALER_OPTS_INIT;
    phx_scaler *sc = st == PHX_OK ? phx_scaler_new(fp16, &so) : NULL;
    phx_module *m = tu_mlp(sizes, 3, 1);
    phx_optimizer *o = phx_zero_optimizer_new(m, NULL, tu_make_adamw, NULL, NULL);
    st = sc && o ? phx_optimizer_set_lr(o, 0.01) : PHX_EINVAL;
    if (st == PHX_OK) st = phx_scaler_set_state(sc, 1024.0, 7);
    if (st == PHX_OK) st = phx_zero_checkpoint_save(a, m, o, sc);
    if (st == PHX_OK) st = phx_zero_checkpoint_save(b, m, o, sc); /* b: generation 1 */
    if (st == PHX_OK) st = phx_zero_checkpoint_save(b, m, o, sc); /* b: generation 2 */
    ok(st == PHX_OK, "saved a (generation 1) and b (generations 1, 2) %s", st ? phx_last_error() : "");

    /* the model that loads: seed 2, lr 0.5, scale 64 / 0 */
    phx_module *m2 = tu_mlp(sizes, 3, 2);
    phx_optimizer *o2 = phx_zero_optimizer_new(m2, NULL, tu_make_adamw, NULL, NULL);
    phx_scaler *sc2 = phx_scaler_new(fp16, &so);
    phx_optimizer_set_lr(o2, 0.5);
    phx_scaler_set_state(sc2, 64.0, 0);
    float before = params_sum(m2);
#define UNCHANGED \
    (params_sum(m2) == before && phx_optimizer_lr(o2) == 0.5 && phx_scaler_get_scale(sc2) == 64.0 && \
     phx_scaler_growth_tracker(sc2) == 0)

    size_t len;
    char *good = tf_slurp(in(a, "index.json"), &len);
    ok(good && strstr(good, "\"crc32\": ") && strstr(good, "\"save\": "), "the index has \"crc32\" and \"save\"");

    /* an edited value fails the index's checksum */
    char *t = with_value(good, "lr", "0.02");
    tf_put(in(a, "index.json"), t, strlen(t));
    st = phx_zero_checkpoint_load(a, m2, o2, sc2);
    ok(st == PHX_EIO && strstr(phx_last_error(), "fails its checksum") && UNCHANGED,
       "lr 0.01 -> 0.02: the index fails its checksum, nothing changed (%s)", phx_last_error());
    free(t);

    /* "crc32" dropped but "save" kept: only an edit makes that */
    t = without(good, "crc32");
    tf_put(in(a, "index.json"), t, strlen(t));
    st = phx_zero_checkpoint_load(a, m2, o2, sc2);
    ok(st == PHX_EIO && strstr(phx_last_error(), "no \"crc32\"") && UNCHANGED,
       "\"save\" without \"crc32\": refused, nothing changed (%s)", phx_last_error());
    free(t);
    /* piece lengths whose sum overflows int64, under a right "crc32" */
    json_t *r = json_loads(good, 0, NULL), *p0 = json_array_get(json_object_get(r, "params"), 0);
    char *ov = p0 &&
            !json_object_set_new(p0, "pieces",
                                 json_pack("[[iII][iII]]", 0, (json_int_t)0, (json_int_t)INT64_MAX, 0,
                                           (json_int_t)INT64_MAX, (json_int_t)INT64_MAX))
        ? resummed(r)
        : NULL;
    if (ov) tf_put(in(a, "index.json"), ov, strlen(ov));
    st = ov ? phx_zero_checkpoint_load(a, m2, o2, sc2) : PHX_EINVAL;
    ok(st == PHX_EIO && strstr(phx_last_error(), "piece 0 of '0.weight'") && strstr(phx_last_error(), "inside its") &&
           UNCHANGED,
       "pieces of length 2^63-1: refused naming the piece and the parameter (%s)", phx_last_error());
    free(ov);

    /* without "crc32" (an earlier build's index) the values are checked */
    char *old = without_crc(good);
    tf_put(in(a, "index.json"), old, strlen(old));
    st = phx_zero_checkpoint_load(a, m2, o2, sc2);
    ok(st == PHX_OK && params_sum(m2) == params_sum(m) && phx_optimizer_lr(o2) == 0.01 &&
           phx_scaler_get_scale(sc2) == 1024.0,
       "an index without \"crc32\" loads (%s)", st ? phx_last_error() : "ok");
    phx_module_free(m2), phx_optimizer_free(o2);
    m2 = tu_mlp(sizes, 3, 2);
    o2 = phx_zero_optimizer_new(m2, NULL, tu_make_adamw, NULL, NULL);
    phx_optimizer_set_lr(o2, 0.5);
    phx_scaler_set_state(sc2, 64.0, 0);
    static const struct {
        const char *key, *value, *what;
    } bad_values[] = {{"lr", "-1.0", "lr -1"},
                      {"scale", "-1.0", "scale -1"},
                      {"scale", "1e-50", "scale 1e-50 (0 in f32)"},
                      {"growth_tracker", "2000", "growth tracker 2000 (the interval)"}};
    for (size_t i = 0; i < sizeof bad_values / sizeof bad_values[0]; i++) {
        t = with_value(old, bad_values[i].key, bad_values[i].value);
        tf_put(in(a, "index.json"), t, strlen(t));
        st = phx_zero_checkpoint_load(a, m2, o2, sc2);
        phx_optimizer *plain = tu_make_adamw(m2, NULL);
        phx_status sf = phx_zero_checkpoint_load_full(a, m2, plain, sc2);
        phx_optimizer_free(plain);
        ok(st == PHX_EIO && sf == PHX_EIO && strstr(phx_last_error(), "index.json") && UNCHANGED,
           "%s: refused by load and load_full, nothing changed (%s)", bad_values[i].what, phx_last_error());
        free(t);
    }
    /* a duplicate key */
    t = malloc(strlen(old) + 32);
    sprintf(t, "{\n \"world\": 1,%s", old + 1);
    tf_put(in(a, "index.json"), t, strlen(t));
    st = phx_zero_checkpoint_load(a, m2, o2, sc2);
    ok(st == PHX_EIO && strstr(phx_last_error(), "duplicate") && UNCHANGED, "a duplicate key is refused (%s)",
       phx_last_error());
    free(t);
    tf_put(in(a, "index.json"), good, len);

    /* shards of another save: a's generation-1 shard under the name of
     * b's generation-2 one; then b's index set back to generation 1 by
     * hand, so that only the save's name differs */
    size_t sl;
    char *shard1 = tf_slurp(in(a, "shard-0-of-1.g1.safetensors"), &sl);
    size_t bl;
    char *b2 = tf_slurp(in(b, "shard-0-of-1.g2.safetensors"), &bl);
    tf_put(in(b, "shard-0-of-1.g2.safetensors"), shard1, sl);
    st = phx_zero_checkpoint_load(b, m2, o2, sc2);
    ok(st == PHX_EIO && strstr(phx_last_error(), "another save") && strstr(phx_last_error(), "generation") && UNCHANGED,
       "a generation-1 shard under generation 2's name: refused (%s)", phx_last_error());
    char *bi = tf_slurp(in(b, "index.json"), &len);
    json_t *br = bi ? json_loads(bi, 0, NULL) : NULL;
    char *g1 = br && !json_object_set_new(br, "generation", json_integer(1)) ? resummed(br) : NULL;
    if (g1) tf_put(in(b, "index.json"), g1, strlen(g1)); /* its shard file: still a's, of generation 1 */
    st = phx_zero_checkpoint_load(b, m2, o2, sc2);
    ok(g1 && st == PHX_EIO && strstr(phx_last_error(), "of save") && UNCHANGED,
       "a shard of another save of the same generation: refused (%s)", phx_last_error());
    free(g1), free(bi);

    /* bytes appended to a shard */
    char *longer = malloc(sl + 4);
    memcpy(longer, shard1, sl);
    memcpy(longer + sl, "\0\0\0\0", 4);
    tf_put(in(a, "shard-0-of-1.g1.safetensors"), longer, sl + 4);
    st = phx_zero_checkpoint_load(a, m2, o2, sc2);
    ok(st == PHX_EIO && strstr(phx_last_error(), "belong to no tensor") && UNCHANGED,
       "4 bytes appended to the shard: refused (%s)", phx_last_error());
    tf_put(in(a, "shard-0-of-1.g1.safetensors"), shard1, sl);
    free(longer), free(b2), free(shard1);

    /* an fp32 run's scaler state (scale 1, "enabled": false) into an fp16
     * scaler: refused, as PyTorch's GradScaler refuses a disabled one's */
    char c32[96];
    snprintf(c32, sizeof c32, "%s/c32", dir);
    phx_precision *fp32 = NULL;
    st = phx_precision_new("fp32", &fp32);
    phx_scaler *s32 = st == PHX_OK ? phx_scaler_new(fp32, NULL) : NULL;
    st = s32 ? phx_zero_checkpoint_save(c32, m, o, s32) : PHX_EINVAL;
    phx_status l16 = st == PHX_OK ? phx_zero_checkpoint_load(c32, m2, o2, sc2) : st;
    ok(l16 == PHX_EIO && strstr(phx_last_error(), "does not scale") && UNCHANGED,
       "an fp32 run's scaler state into an fp16 scaler: refused, nothing changed (%s)", phx_last_error());
    phx_scaler_free(s32), phx_precision_free(fp32);

    /* a parameter name that is not UTF-8, of 0 elements (in no shard: only
     * the index names it): refused before anything is written */
    char cl[96];
    snprintf(cl, sizeof cl, "%s/latin1", dir);
    phx_module *ml = tu_mlp(sizes, 3, 1);
    phx_module_add_param(ml, "caf\xe9", phx_tensor_zeros(PHX_F32, 1, (int64_t[]){0}, phx_cpu()));
    phx_optimizer *ol = phx_zero_optimizer_new(ml, NULL, tu_make_adamw, NULL, NULL);
    st = ol ? phx_zero_checkpoint_save(cl, ml, ol, NULL) : PHX_EINVAL;
    struct stat lsb;
    ok(st == PHX_EINVAL && strstr(phx_last_error(), "not valid UTF-8") && stat(in(cl, "index.json"), &lsb) != 0,
       "a 0-element parameter named in Latin-1: PHX_EINVAL, no index (%s)", phx_last_error());
    phx_optimizer_free(ol), phx_module_free(ml);
    /* ... and an optimizer type named in Latin-1 */
    snprintf(cl, sizeof cl, "%s/latin1-opt", dir);
    ml = tu_mlp(sizes, 3, 1);
    ol = phx_zero_optimizer_new(ml, NULL, make_latin1, NULL, NULL);
    st = ol ? phx_zero_checkpoint_save(cl, ml, ol, NULL) : PHX_EINVAL;
    ok(st == PHX_EINVAL && strstr(phx_last_error(), "type name is not valid UTF-8") &&
           stat(in(cl, "shard-0-of-1.g1.safetensors"), &lsb) != 0,
       "an optimizer type named in Latin-1: PHX_EINVAL, no shard written (%s)", phx_last_error());
    phx_optimizer_free(ol), phx_module_free(ml);

    /* a FIFO index: load and save refused at once */
    alarm(10);
    unlink(in(a, "index.json"));
    int fifo = mkfifo(in(a, "index.json"), 0600) == 0;
    st = fifo ? phx_zero_checkpoint_load(a, m2, o2, sc2) : PHX_EINVAL;
    ok(st == PHX_EIO && strstr(phx_last_error(), "not a regular file") && UNCHANGED, "a FIFO index: load (%s)",
       phx_last_error());
    st = fifo ? phx_zero_checkpoint_save(a, m, o, sc) : PHX_EINVAL;
    ok(st == PHX_EIO && strstr(phx_last_error(), "not a regular file"), "... and save refuse it at once (%s)",
       phx_last_error());
    alarm(0);
    unlink(in(a, "index.json"));
    tf_put(in(a, "index.json"), good, strlen(good));

    /* the generation, exactly: 16777216 (2^24) -> 16777217; the last one refused */
    t = with_value(old, "generation", "16777216");
    tf_put(in(a, "index.json"), t, strlen(t));
    free(t);
    st = phx_zero_checkpoint_save(a, m, o, sc);
    struct stat sb;
    ok(st == PHX_OK && stat(in(a, "shard-0-of-1.g16777217.safetensors"), &sb) == 0,
       "after generation 16777216 the save writes 16777217 %s", st ? phx_last_error() : "");
    char *now = tf_slurp(in(a, "index.json"), &len), *nowo = now ? without_crc(now) : NULL;
    t = nowo ? with_value(nowo, "generation", "9223372036854775807") : NULL;
    if (t) tf_put(in(a, "index.json"), t, strlen(t));
    st = phx_zero_checkpoint_save(a, m, o, sc);
    size_t l2;
    char *after = tf_slurp(in(a, "index.json"), &l2);
    ok(st == PHX_EIO && strstr(phx_last_error(), "the last one") && after && t && !strcmp(after, t),
       "at generation 2^63-1 the save is refused, the index untouched (%s)", phx_last_error());
    free(t), free(now), free(nowo), free(after), free(old), free(good);

    phx_optimizer_free(o), phx_optimizer_free(o2);
    phx_module_free(m), phx_module_free(m2);
    phx_scaler_free(sc), phx_scaler_free(sc2);
    phx_precision_free(fp16);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) diag("could not remove %s", dir);
    return done_testing();
}
