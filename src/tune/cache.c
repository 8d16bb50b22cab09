/* The tuning cache (tune.h): which kernel path measured fastest for a
 * shape class on this CPU, as cuDNN's benchmark mode or FFTW's wisdom.
 * One small text file per CPU signature:
 *
 *     phalanx-tune 1
 *     cpu <px_tune_signature()>
 *     <key> <choice>           one line per shape class; the key starts
 *     ...                      with t<threads>
 *     sum <FNV-1a 64 of every byte above, 16 hex digits>
 *
 * written whole to a temporary file and renamed over the old one, so a
 * reader sees the old file or the new one, never half of one. */
#include "config.h"
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "src/tune/tune.h"
#include "src/base/threads.h"
#include "src/base/util.h"
#include "src/world/world-impl.h"
#include "kernels/cpu/cpu.h"
#include "phalanx/log.h"

#define TUNE_HEADER "phalanx-tune 1"
#define TUNE_MAX_BYTES (4 << 20)
#define TUNE_KEY_MAX 256

typedef struct entry {
    char *key; /* "t2 gemm ..." */
    char *choice;
    uint64_t hash; /* fnv1a of key */
} entry;

/* The one cache of the process, for the file and signature it was read
 * for (read again when either changes). */
static struct {
    pthread_mutex_t lock; /* the fields below */
    pthread_mutex_t measure; /* one measurement at a time */
    int loaded;
    char path[4096];
    char sig[512];
    phx_status err; /* the file's fault, repeated to each caller */
    char errmsg[4096 + 768];
    int foreign; /* the file is another CPU's: entries ignored, never overwritten */
    entry *e;
    size_t n, cap;
    uint32_t *slot; /* open-addressed index: 1 + entry number, 0 empty */
    size_t slots; /* a power of two >= 2 cap, or 0 */
} cache = {.lock = PTHREAD_MUTEX_INITIALIZER, .measure = PTHREAD_MUTEX_INITIALIZER};

static __thread int measuring;

static uint64_t fnv1a(const char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 0x100000001b3ull;
    return h;
}

int px_tune_measuring(void)
{
    return measuring;
}

phx_status px_tune_mode_get(px_tune_mode *mode)
{
    const char *v = getenv("PHX_TUNE");
    *mode = PX_TUNE_OFF;
    if (!v || !*v || !strcmp(v, "off")) return PHX_OK;
    if (!strcmp(v, "cached"))
        *mode = PX_TUNE_CACHED;
    else if (!strcmp(v, "measure"))
        *mode = PX_TUNE_MEASURE;
    else
        return phx_error(PHX_EINVAL, "environment variable PHX_TUNE='%s': expected off, cached or measure", v);
    return PHX_OK;
}

int px_tune_cache_path(char *buf, size_t len)
{
    const char *v = getenv("PHX_TUNE_CACHE");
    if (v && *v) return (size_t)snprintf(buf, len, "%s", v) < len ? 0 : -1;
    const char *sig = px_tune_signature();
    uint64_t h = fnv1a(sig, strlen(sig));
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int w;
    if (xdg && *xdg == '/')
        w = snprintf(buf, len, "%s/phalanx/tune-%016" PRIx64 ".txt", xdg, h);
    else if (home && *home)
        w = snprintf(buf, len, "%s/.cache/phalanx/tune-%016" PRIx64 ".txt", home, h);
    else
        return -1;
    return w >= 0 && (size_t)w < len ? 0 : -1;
}

/* px_tune_cache_path, remembered per thread while the variables it reads
 * and the signature stay the same ("" when there is none) */
static const char *cache_path_now(const char *sig)
{
    static __thread char path[4096], env[3][1024], last_sig[512];
    static __thread int known;
    const char *v[3] = {getenv("PHX_TUNE_CACHE"), NULL, NULL};
    if (!v[0] || !*v[0]) v[1] = getenv("XDG_CACHE_HOME"), v[2] = getenv("HOME");
    int same = known && !strcmp(last_sig, sig);
    for (int i = 0; i < 3 && same; i++) same = !strcmp(env[i], v[i] ? v[i] : "");
    if (same) return path;
    if (px_tune_cache_path(path, sizeof path) != 0) path[0] = 0;
    for (int i = 0; i < 3; i++) snprintf(env[i], sizeof env[i], "%s", v[i] ? v[i] : "");
    snprintf(last_sig, sizeof last_sig, "%s", sig);
    known = strlen(v[0] ? v[0] : "") < sizeof env[0] && strlen(v[1] ? v[1] : "") < sizeof env[1] &&
        strlen(v[2] ? v[2] : "") < sizeof env[2];
    return path;
}

static void entries_clear(void)
{
    for (size_t i = 0; i < cache.n; i++) px_free(cache.e[i].key), px_free(cache.e[i].choice);
    cache.n = 0;
    if (cache.slot) memset(cache.slot, 0, cache.slots * sizeof *cache.slot);
}

static void slot_add(size_t i)
{
    size_t mask = cache.slots - 1, h = (size_t)cache.e[i].hash & mask;
    while (cache.slot[h]) h = (h + 1) & mask;
    cache.slot[h] = (uint32_t)(i + 1);
}

/* A lookup costs one hash and, mostly, one string compare: a GEMM of a
 * training step asks on every call. */
static entry *entry_find(const char *key)
{
    if (!cache.slots) return NULL;
    uint64_t h = fnv1a(key, strlen(key));
    size_t mask = cache.slots - 1;
    for (size_t j = (size_t)h & mask; cache.slot[j]; j = (j + 1) & mask) {
        entry *e = &cache.e[cache.slot[j] - 1];
        if (e->hash == h && !strcmp(e->key, key)) return e;
    }
    return NULL;
}

static phx_status entry_put(const char *key, size_t klen, const char *choice, size_t clen)
{
    if (cache.n == cache.cap) {
        size_t cap = cache.cap ? cache.cap * 2 : 16;
        entry *e = px_realloc(cache.e, cap * sizeof *e);
        if (!e) return PHX_ENOMEM;
        cache.e = e, cache.cap = cap;
        uint32_t *slot = px_calloc(cap * 2, sizeof *slot);
        if (!slot) return PHX_ENOMEM;
        px_free(cache.slot);
        cache.slot = slot, cache.slots = cap * 2;
        for (size_t i = 0; i < cache.n; i++) slot_add(i);
    }
    char *k = px_malloc(klen + 1), *c = px_malloc(clen + 1);
    if (!k || !c) {
        px_free(k), px_free(c);
        return PHX_ENOMEM;
    }
    memcpy(k, key, klen), k[klen] = 0;
    memcpy(c, choice, clen), c[clen] = 0;
    cache.e[cache.n] = (entry){k, c, fnv1a(k, klen)};
    slot_add(cache.n++);
    return PHX_OK;
}

/* The file's fault, kept to repeat to every caller. */
static phx_status corrupt(int line, const char *fmt, const char *a, const char *b)
{
    char what[320];
    snprintf(what, sizeof what, fmt, a, b);
    if (line > 0)
        snprintf(cache.errmsg, sizeof cache.errmsg,
                 "tuning cache %s: line %d: %s; remove the file (PHX_TUNE=measure makes it again) or set PHX_TUNE=off",
                 cache.path, line, what);
    else
        snprintf(cache.errmsg, sizeof cache.errmsg,
                 "tuning cache %s: %s; remove the file (PHX_TUNE=measure makes it again) or set PHX_TUNE=off",
                 cache.path, what);
    return cache.err = PHX_EIO;
}

static int printable(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] < 0x20 || (unsigned char)p[i] > 0x7e) return 0;
    return 1;
}

/* Parses buf[0..n) into the entries (cache.lock held). */
static phx_status parse(const char *buf, size_t n)
{
    size_t hl = strlen(TUNE_HEADER);
    if (n == hl && memcmp(buf, TUNE_HEADER, hl) == 0)
        return corrupt(1, "%s%struncated: 'phalanx-tune 1' and nothing after it, not even a newline", "", "");
    if (n < hl + 1 || memcmp(buf, TUNE_HEADER "\n", hl + 1) != 0) {
        char first[41];
        size_t fl = 0;
        while (fl < n && fl < 40 && buf[fl] != '\n') first[fl] = printable(buf + fl, 1) ? buf[fl] : '?', fl++;
        first[fl] = 0;
        return corrupt(1, "not a Phalanx tuning cache (first line '%s', expected '%s')", first, TUNE_HEADER);
    }
    if (buf[n - 1] != '\n') return corrupt(0, "%s%struncated: the last line has no newline", "", "");
    /* the checksum line: the last one */
    size_t last = n - 1;
    while (last > 0 && buf[last - 1] != '\n') last--;
    if (n - last != 4 + 16 + 1 || memcmp(buf + last, "sum ", 4) != 0)
        return corrupt(0, "%s%struncated or edited: its last line is not 'sum <16 hex digits>'", "", "");
    char want[17], got[17];
    for (int i = 0; i < 16; i++) want[i] = printable(buf + last + 4 + i, 1) ? buf[last + 4 + i] : '?';
    want[16] = 0;
    snprintf(got, sizeof got, "%016" PRIx64, fnv1a(buf, last));
    if (strcmp(want, got) != 0) return corrupt(0, "checksum %s, but the contents give %s", want, got);

    int line = 1;
    const char *p = buf + hl + 1, *end = buf + last;
    int foreign = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = (size_t)(nl - p);
        line++;
        if (!printable(p, len)) return corrupt(line, "%s%sa byte that is not printable ASCII", "", "");
        if (line == 2) {
            if (len < 4 || memcmp(p, "cpu ", 4) != 0) return corrupt(line, "%s%sexpected 'cpu <signature>'", "", "");
            if (len - 4 != strlen(cache.sig) || memcmp(p + 4, cache.sig, len - 4) != 0) foreign = 1;
        } else if (!foreign) {
            const char *sp = len ? memrchr(p, ' ', len) : NULL;
            if (!sp || sp == p || sp + 1 == nl || len > TUNE_KEY_MAX + 64)
                return corrupt(line, "%s%sexpected '<key> <choice>'", "", "");
            /* the writer keeps one line per key: a second one is an edit */
            char key[TUNE_KEY_MAX + 65];
            memcpy(key, p, (size_t)(sp - p));
            key[sp - p] = 0;
            if (entry_find(key)) return corrupt(line, "key '%.200s' is on an earlier line too%s", key, "");
            phx_status st = entry_put(p, (size_t)(sp - p), sp + 1, (size_t)(nl - sp - 1));
            if (st != PHX_OK) return st;
        }
        p = nl + 1;
    }
    if (line < 2) return corrupt(0, "%s%sno 'cpu <signature>' line", "", "");
    if (foreign) {
        entries_clear();
        cache.foreign = 1;
        char sig[200];
        const char *q = buf + hl + 1 + 4, *qe = memchr(q, '\n', (size_t)(end - q));
        snprintf(sig, sizeof sig, "%.*s", (int)(qe - q), q);
        phx_log(PHX_LOG_WARN,
                "tuning cache %s was made on another CPU or configuration ('%s'; this one is '%s'): "
                "ignored, and not overwritten",
                cache.path, sig, cache.sig);
    }
    return PHX_OK;
}

/* Reads the cache for path and sig unless it is the one held (cache.lock
 * held). A missing file is an empty cache. */
static phx_status load(const char *path, const char *sig)
{
    if (cache.loaded && !strcmp(cache.path, path) && !strcmp(cache.sig, sig)) return cache.err;
    entries_clear();
    cache.loaded = 1, cache.err = PHX_OK, cache.foreign = 0, cache.errmsg[0] = 0;
    snprintf(cache.path, sizeof cache.path, "%s", path);
    snprintf(cache.sig, sizeof cache.sig, "%s", sig);
    if (!*path) return PHX_OK;
    bool irregular;
    FILE *f = px_fopen_regular(path, &irregular); /* fopen would wait on a FIFO */
    if (!f && irregular) return corrupt(0, "%s%sis not a regular file", "", "");
    if (!f) {
        if (errno == ENOENT) {
            phx_log(PHX_LOG_INFO, "tuning cache %s: none yet; the fixed rules choose", path);
            return PHX_OK;
        }
        return corrupt(0, "cannot be read (%s)%s", strerror(errno), "");
    }
    char *buf = px_malloc(TUNE_MAX_BYTES + 1);
    if (!buf) {
        fclose(f);
        cache.loaded = 0;
        return PHX_ENOMEM;
    }
    size_t n = fread(buf, 1, TUNE_MAX_BYTES + 1, f);
    int bad = ferror(f) ? errno : 0;
    fclose(f);
    phx_status st;
    if (bad)
        st = corrupt(0, "cannot be read (%s)%s", strerror(bad), "");
    else if (n > TUNE_MAX_BYTES)
        st = corrupt(0, "%s%sis larger than 4 MiB", "", "");
    else if (n == 0)
        st = corrupt(0, "%s%sis empty (truncated)", "", "");
    else
        st = parse(buf, n);
    px_free(buf);
    if (st != PHX_OK) {
        entries_clear();
        if (st == PHX_ENOMEM) cache.loaded = 0;
    } else {
        phx_log(PHX_LOG_INFO, "tuning cache %s: %zu entries", path, cache.n);
    }
    return st;
}

static int mkdirs(const char *path)
{
    char d[4096];
    snprintf(d, sizeof d, "%s", path);
    char *slash = strrchr(d, '/');
    if (!slash || slash == d) return 0;
    *slash = 0;
    for (char *p = d + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(d, 0755) != 0 && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(d, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* Adds the entries another process wrote to cache.path since this one
 * read it (same signature, checksum right; anything else is left to be
 * overwritten), so that processes measuring side by side lose nothing
 * but a race inside the few microseconds between read and rename. */
static void merge_disk(void)
{
    FILE *f = fopen(cache.path, "rb");
    if (!f) return;
    char *buf = px_malloc(TUNE_MAX_BYTES + 1);
    size_t n = buf ? fread(buf, 1, TUNE_MAX_BYTES + 1, f) : 0;
    fclose(f);
    char head[600];
    int hl = snprintf(head, sizeof head, "%s\ncpu %s\n", TUNE_HEADER, cache.sig);
    size_t last = n ? n - 1 : 0;
    while (last > 0 && buf[last - 1] != '\n') last--;
    char got[17];
    snprintf(got, sizeof got, "%016" PRIx64, n ? fnv1a(buf, last) : 0);
    if (!buf || n > TUNE_MAX_BYTES || hl < 0 || (size_t)hl >= sizeof head || n < (size_t)hl ||
        memcmp(buf, head, (size_t)hl) != 0 || buf[n - 1] != '\n' || n - last != 21 ||
        memcmp(buf + last, "sum ", 4) != 0 || memcmp(buf + last + 4, got, 16) != 0) {
        px_free(buf);
        return;
    }
    for (const char *p = buf + hl, *end = buf + last; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *sp = nl > p ? memrchr(p, ' ', (size_t)(nl - p)) : NULL;
        if (sp && sp > p && sp + 1 < nl && printable(p, (size_t)(nl - p)) && (size_t)(sp - p) <= TUNE_KEY_MAX + 16) {
            char key[TUNE_KEY_MAX + 17];
            memcpy(key, p, (size_t)(sp - p)), key[sp - p] = 0;
            if (!entry_find(key) && entry_put(key, (size_t)(sp - p), sp + 1, (size_t)(nl - sp - 1)) != PHX_OK) break;
        }
        p = nl + 1;
    }
    px_free(buf);
}

/* Writes the entries to cache.path atomically (cache.lock held), with
 * those another process added meanwhile; a failure warns and keeps the
 * entries in memory. */
static void save(void)
{
    if (!cache.path[0] || cache.foreign) return;
    merge_disk();
    size_t cap = strlen(TUNE_HEADER) + strlen(cache.sig) + 32;
    for (size_t i = 0; i < cache.n; i++) cap += strlen(cache.e[i].key) + strlen(cache.e[i].choice) + 2;
    char *buf = px_malloc(cap);
    if (!buf) return;
    size_t n = (size_t)snprintf(buf, cap, "%s\ncpu %s\n", TUNE_HEADER, cache.sig);
    for (size_t i = 0; i < cache.n; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s %s\n", cache.e[i].key, cache.e[i].choice);
    n += (size_t)snprintf(buf + n, cap - n, "sum %016" PRIx64 "\n", fnv1a(buf, n));
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", cache.path, (long)getpid());
    FILE *f = NULL;
    int ok = mkdirs(cache.path) == 0 && (f = fopen(tmp, "wb")) != NULL;
    if (ok) ok = fwrite(buf, 1, n, f) == n;
    if (f) {
        ok = fflush(f) == 0 && ok && fsync(fileno(f)) == 0;
        ok = fclose(f) == 0 && ok;
    }
    if (ok) ok = rename(tmp, cache.path) == 0;
    if (!ok) {
        phx_log(PHX_LOG_WARN, "tuning cache %s: cannot write it (%s); the measured choices stay in this process",
                cache.path, strerror(errno));
        if (f) unlink(tmp);
    }
    px_free(buf);
}

static int world_many(void)
{
    const px_spawn_tls *sp = px_spawn_current();
    if (sp->active) return sp->size > 1;
    int local = 1;
    px_world_local(NULL, &local);
    return local > 1 || px_world_spans_nodes();
}

#define TUNE_CANDIDATES_MAX 8

/* Times run(arg, i) for each usable candidate: one warm-up each, then
 * rounds that run every candidate once in turn (so a load that comes and
 * goes weighs on all of them alike), 3 to 10 rounds until each has run
 * 20 ms in all; the best time of each wins. *best -1 when none ran. */
static phx_status measure(const char *key, const char *const *names, const int *usable, int n, px_tune_run_fn run,
                          void *arg, int *best)
{
    double t_min[TUNE_CANDIDATES_MAX], t_all[TUNE_CANDIDATES_MAX];
    int alive[TUNE_CANDIDATES_MAX];
    if (n > TUNE_CANDIDATES_MAX) n = TUNE_CANDIDATES_MAX;
    *best = -1;
    measuring = 1;
    void *saved = px_cpu_scratch_push();
    phx_status st = PHX_OK;
    for (int i = 0; i < n && st == PHX_OK; i++) {
        t_min[i] = 1e30, t_all[i] = 0, alive[i] = 0;
        if (!usable[i]) continue;
        st = run(arg, i);
        alive[i] = st == PHX_OK;
        if (st == PHX_EUNSUPPORTED) st = PHX_OK;
    }
    for (int r = 0; st == PHX_OK && r < 10; r++) {
        int enough = r >= 3;
        for (int i = 0; i < n && st == PHX_OK; i++) {
            if (!alive[i]) continue;
            double t0 = px_now();
            st = run(arg, i);
            double t = px_now() - t0;
            t_all[i] += t;
            if (t < t_min[i]) t_min[i] = t;
            if (t_all[i] < 0.02) enough = 0;
        }
        if (enough) break;
    }
    px_cpu_scratch_pop(saved);
    measuring = 0;
    if (st != PHX_OK) return st;
    char line[512];
    size_t w = 0;
    for (int i = 0; i < n; i++) {
        if (!alive[i]) continue;
        if (w < sizeof line) w += (size_t)snprintf(line + w, sizeof line - w, " %s %.3g ms", names[i], t_min[i] * 1e3);
        if (*best < 0 || t_min[i] < t_min[*best]) *best = i;
    }
    if (*best >= 0) phx_log(PHX_LOG_INFO, "tuning %s:%s -> %s", key, w ? line : "", names[*best]);
    return PHX_OK;
}

phx_status px_tune_choose(const char *key, const char *const *names, const int *usable, int n, int fixed,
                          px_tune_run_fn run, void *arg, int *choice)
{
    *choice = fixed;
    px_tune_mode mode;
    phx_status st = px_tune_mode_get(&mode);
    if (st != PHX_OK || mode == PX_TUNE_OFF || measuring) return st;
    char full[TUNE_KEY_MAX + 16];
    size_t fl = 0;
    px_tune_key_str(full, &fl, sizeof full, "t");
    px_tune_key_int(full, &fl, sizeof full, px_threads_budget());
    px_tune_key_str(full, &fl, sizeof full, " ");
    px_tune_key_str(full, &fl, sizeof full, key);
    const char *sig = px_tune_signature();
    const char *path = cache_path_now(sig);

    pthread_mutex_lock(&cache.lock);
    st = load(path, sig);
    entry *e = st == PHX_OK ? entry_find(full) : NULL;
    int found = -1;
    for (int i = 0; e && i < n; i++)
        if (usable[i] && !strcmp(e->choice, names[i])) found = i;
    if (st == PHX_EIO) phx_error(st, "%s", cache.errmsg);
    pthread_mutex_unlock(&cache.lock);
    if (st != PHX_OK) return st;
    if (found >= 0) {
        *choice = found;
        return PHX_OK;
    }
    if (mode != PX_TUNE_MEASURE || !run || px_pool_in_worker()) return PHX_OK;
    int many = 0;
    for (int i = 0; i < n; i++) many += usable[i] != 0;
    if (many < 2) return PHX_OK;
    if (world_many()) {
        static int said;
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            phx_log(PHX_LOG_INFO,
                    "PHX_TUNE=measure with more than one rank reads the tuning cache only (ranks must choose "
                    "alike); shapes it lacks take the fixed rules. Make the cache with one process first");
        return PHX_OK;
    }

    /* one measurement at a time, process-wide: threads that miss together
     * (DataParallel's replicas) wait for the first and take what it
     * recorded */
    pthread_mutex_lock(&cache.measure);
    pthread_mutex_lock(&cache.lock);
    st = load(path, sig);
    e = st == PHX_OK ? entry_find(full) : NULL;
    for (int i = 0; e && i < n; i++)
        if (usable[i] && !strcmp(e->choice, names[i])) found = i;
    if (st == PHX_EIO) phx_error(st, "%s", cache.errmsg);
    pthread_mutex_unlock(&cache.lock);
    if (st == PHX_OK && found < 0) {
        int best;
        st = measure(full, names, usable, n, run, arg, &best);
        if (st == PHX_OK && best >= 0) {
            pthread_mutex_lock(&cache.lock);
            if (!strcmp(cache.path, path) && !strcmp(cache.sig, sig)) {
                if ((e = entry_find(full)) != NULL) {
                    char *c = px_strdup(names[best]);
                    if (c) px_free(e->choice), e->choice = c;
                } else {
                    entry_put(full, strlen(full), names[best], strlen(names[best]));
                }
                save();
            }
            pthread_mutex_unlock(&cache.lock);
            found = best;
        }
    }
    pthread_mutex_unlock(&cache.measure);
    if (found >= 0) *choice = found;
    return st;
}
