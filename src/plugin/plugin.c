/* Plugin loader: the registry of opened plugins, the descriptor checks made
 * before any plugin code runs, selection and its errors. doc/guide/plugins.md. */
#include "config.h"
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "src/plugin/plugin-impl.h"
#include "src/base/util.h"
#include "phalanx/log.h"
#include "src/base/abi.h"

/* One opened plugin file. Entries and their handles live as long as the
 * process, so descriptors handed out stay valid; a file that failed to
 * open is remembered too, so each file is opened at most once. */
typedef struct px_plugin_so {
    struct px_plugin_so *next;
    struct stat st; /* identity: dev, inode, size, ctime (inodes are reused) */
    void *handle; /* NULL: dlopen failed */
    const void *sym; /* phx_plugin_v1; NULL when absent */
    size_t sym_size; /* ELF st_size of the symbol; 0 when unknown */
    int sym_object; /* 0 when the symbol is a function, not data */
    char *error; /* dlerror() of a failed dlopen / dlsym */
    char *sym_owner; /* set when dlsym found the symbol in another object */
} px_plugin_so;

static pthread_mutex_t px_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static px_plugin_so *px_registry;

static int say_why(px_cand *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int say_why(px_cand *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why, sizeof c->why, fmt, ap);
    va_end(ap);
    return -1;
}

/* dlopen and dlsym only: no descriptor field is read here. Called with the
 * registry lock held. */
static void so_fill(px_plugin_so *so, const char *path)
{
    const char *err;
    dlerror();
    so->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!so->handle) {
        err = dlerror();
        so->error = px_strdup(err ? err : "dlopen failed without a message");
        return;
    }
    dlerror();
    so->sym = dlsym(so->handle, "phx_plugin_v1");
    if (!so->sym) {
        err = dlerror();
        so->error = px_strdup(err ? err : "the symbol phx_plugin_v1 has address 0");
        return;
    }
    Dl_info info;
    const ElfW(Sym) *es = NULL;
    struct link_map *lm = NULL;
    so->sym_object = 1;
    if (dladdr1(so->sym, &info, (void **)&es, RTLD_DL_SYMENT) && es) {
        int type = ELF64_ST_TYPE(es->st_info); /* same as ELF32_ST_TYPE */
        so->sym_size = (size_t)es->st_size;
        so->sym_object = type == STT_OBJECT || type == STT_COMMON;
    }
    /* dlsym on a handle also searches the plugin's dependencies. */
    if (dladdr(so->sym, &info) && info.dli_fname && dlinfo(so->handle, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name &&
        strcmp(lm->l_name, info.dli_fname) != 0)
        so->sym_owner = px_strdup(info.dli_fname);
}

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
        a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/* The registry entry of path, opening it on first use. NULL (with c->why)
 * when the file cannot be stat'ed or memory runs out. */
static const px_plugin_so *so_get(const char *path, px_cand *c)
{
    struct stat st;
    px_plugin_so *so;
    if (stat(path, &st) != 0) {
        say_why(c, "cannot stat the file (it vanished?)");
        return NULL;
    }
    pthread_mutex_lock(&px_registry_lock);
    for (so = px_registry; so; so = so->next)
        if (same_file(&so->st, &st)) break;
    if (!so && (so = px_calloc(1, sizeof *so)) != NULL) {
        so->st = st;
        so_fill(so, path);
        so->next = px_registry;
        px_registry = so;
    }
    pthread_mutex_unlock(&px_registry_lock);
    if (!so) say_why(c, "out of memory opening the plugin");
    return so;
}

/* 1 when p is a NUL-terminated string of < max bytes inside a loaded object. */
static int str_ok(const char *p, size_t max)
{
    Dl_info info;
    return p && dladdr(p, &info) && strnlen(p, max) < max;
}

/* dlerror() without its leading "path: ": the path is printed beside it. */
static const char *dlerror_tail(const char *err, const char *path)
{
    size_t n = strlen(path);
    if (!err) return "out of memory";
    if (strncmp(err, path, n) == 0 && err[n] == ':' && err[n + 1] == ' ') return err + n + 2;
    return err;
}

/* Every check is made on data only: no plugin code runs here. */
static int desc_check(const px_plugin_so *so, px_cand *c, uint32_t oldest_minor)
{
    const size_t head = offsetof(phx_plugin_desc, kind); /* abi_major, abi_minor, struct_size */
    if (!so->handle) return say_why(c, "dlopen failed: %s", dlerror_tail(so->error, c->path));
    if (!so->sym) return say_why(c, "no phx_plugin_v1 symbol: %s", dlerror_tail(so->error, c->path));
    if (so->sym_owner)
        return say_why(c, "phx_plugin_v1 comes from %s, a library the plugin links, not from the plugin",
                       so->sym_owner);
    if (!so->sym_object) return say_why(c, "phx_plugin_v1 is a function, expected a data object (a phx_plugin_desc)");
    if (so->sym_size && so->sym_size < head)
        return say_why(c, "phx_plugin_v1 is %zu bytes, too small for a descriptor (at least %zu)", so->sym_size, head);
    const phx_plugin_desc *d = so->sym;
    c->has_abi = 1;
    c->abi_major = d->abi_major;
    c->abi_minor = d->abi_minor;
    if (d->abi_major != PHX_PLUGIN_ABI_MAJOR)
        return say_why(c,
                       "plugin ABI %u.%u, but this Phalanx implements plugin ABI %d.%d and loads ABI %d.%u or "
                       "a newer %d.x (the major must be equal)",
                       d->abi_major, d->abi_minor, PHX_PLUGIN_ABI_MAJOR, PHX_PLUGIN_ABI_MINOR, PHX_PLUGIN_ABI_MAJOR,
                       oldest_minor, PHX_PLUGIN_ABI_MAJOR);
    if (d->abi_minor < oldest_minor)
        return say_why(c, "plugin ABI %u.%u is too old: this Phalanx (plugin ABI %d.%d) needs ABI %d.%u or newer",
                       d->abi_major, d->abi_minor, PHX_PLUGIN_ABI_MAJOR, PHX_PLUGIN_ABI_MINOR, PHX_PLUGIN_ABI_MAJOR,
                       oldest_minor);
    if (d->struct_size < sizeof *d)
        return say_why(c, "descriptor struct_size is %u bytes, expected at least %zu", d->struct_size, sizeof *d);
    if (so->sym_size && so->sym_size < sizeof *d)
        return say_why(c, "phx_plugin_v1 is %zu bytes though its struct_size says %u; expected at least %zu",
                       so->sym_size, d->struct_size, sizeof *d);
    if (d->kind != (uint32_t)c->kind_id)
        return say_why(c, "descriptor kind is %u (%s) but the file name says %s", d->kind,
                       phx_plugin_kind_name((phx_plugin_kind)d->kind), c->kind);
    if (!str_ok(d->name, PX_PLUGIN_NAME_MAX))
        return say_why(c, "descriptor name is NULL, not in a loaded object, or longer than %d bytes",
                       PX_PLUGIN_NAME_MAX - 1);
    if (strcmp(d->name, c->name) != 0)
        return say_why(c, "descriptor name is '%s' but the file name says '%s'", d->name, c->name);
    snprintf(c->version, sizeof c->version, "%s", str_ok(d->version, 256) ? d->version : "?");
    if (!d->vtable) return say_why(c, "descriptor has no vtable");
    c->desc = d;
    return 0;
}

void px_plugin_evaluate(px_cand *c, const phx_probe_ctx *ctx, uint32_t oldest_minor)
{
    if (c->state != PX_CAND_UNSEEN) return;
    const px_plugin_so *so = so_get(c->path, c);
    if (!so || desc_check(so, c, oldest_minor) != 0) {
        c->state = PX_CAND_BROKEN;
        return;
    }
    if (!c->desc->probe) { /* no probe: usable anywhere, lowest priority */
        c->state = PX_CAND_OK;
        c->priority = 0;
        return;
    }
    char why[PX_PLUGIN_WHY_MAX - 32] = "";
    int p = c->desc->probe(ctx, why, sizeof why);
    why[sizeof why - 1] = '\0';
    if (p < 0) {
        c->state = PX_CAND_DECLINED;
        say_why(c, "probe declined: %s", why[0] ? why : "(no reason given)");
    } else {
        c->state = PX_CAND_OK;
        c->priority = p;
    }
}

/* ---- selection ---- */

#define PX_SEL_MAX 32

typedef struct px_selection {
    char buf[1024];
    const char *names[PX_SEL_MAX];
    size_t n; /* 0: every plugin of the kind */
    int exclude; /* names are exclusions */
} px_selection;

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t') s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t')) *--e = '\0';
    return s;
}

/* "a,b" ordered names; "^a,b" or "^a,^b" exclusions; NULL/"" any. */
static phx_status parse_selection(const char *sel, px_selection *s)
{
    memset(s, 0, sizeof *s);
    if (!sel) return PHX_OK;
    if (strlen(sel) >= sizeof s->buf)
        return phx_error(PHX_EINVAL, "phx_plugin_load: selection of %zu bytes, expected fewer than %zu", strlen(sel),
                         sizeof s->buf);
    memcpy(s->buf, sel, strlen(sel) + 1);
    char *p = trim(s->buf);
    if (!*p) return PHX_OK;
    if (*p == '^') {
        s->exclude = 1;
        p++;
    }
    for (;;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = '\0';
        char *tok = trim(p);
        if (*tok == '^') {
            if (!s->exclude)
                return phx_error(PHX_EINVAL,
                                 "phx_plugin_load: selection '%s' mixes names and ^exclusions; "
                                 "expected either 'a,b' or '^a,b'",
                                 sel);
            tok = trim(tok + 1);
        }
        if (!*tok) return phx_error(PHX_EINVAL, "phx_plugin_load: selection '%s' has an empty entry", sel);
        if (!px_plugin_name_ok(tok))
            return phx_error(PHX_EINVAL,
                             "phx_plugin_load: selection '%s': '%s' is not a plugin name "
                             "(1..%d of [A-Za-z0-9_.+-])",
                             sel, tok, PX_PLUGIN_NAME_MAX - 1);
        if (s->n == PX_SEL_MAX)
            return phx_error(PHX_EINVAL, "phx_plugin_load: selection '%s' has more than %d entries", sel, PX_SEL_MAX);
        s->names[s->n++] = tok;
        if (!comma) break;
        p = comma + 1;
    }
    return PHX_OK;
}

static int is_excluded(const px_selection *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->names[i], name) == 0) return 1;
    return 0;
}

/* ---- the error message ---- */

typedef struct px_msg {
    char buf[8192];
    size_t len;
} px_msg;

static void msg_add(px_msg *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void msg_add(px_msg *m, const char *fmt, ...)
{
    if (m->len >= sizeof m->buf - 1) return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(m->buf + m->len, sizeof m->buf - m->len, fmt, ap);
    va_end(ap);
    if (w < 0) return;
    m->len += (size_t)w;
    if (m->len >= sizeof m->buf - 1) { /* truncated: say so */
        m->len = sizeof m->buf - 1;
        memcpy(m->buf + m->len - 3, "...", 4);
    }
}

/* "; searched: A, B (missing); found comm plugins: x, y" */
static void msg_tail(px_msg *m, const char *kind, const px_plugin_dir *dirs, size_t ndirs, const px_cand *cands,
                     size_t ncands)
{
    msg_add(m, "; searched: ");
    if (ndirs == 0) msg_add(m, "(no folders)");
    for (size_t i = 0; i < ndirs; i++)
        msg_add(m, "%s%s%s", i ? ", " : "", dirs[i].path, dirs[i].exists ? "" : " (missing)");
    size_t shown = 0;
    for (size_t i = 0; i < ncands; i++) {
        if (cands[i].state == PX_CAND_SHADOWED) continue;
        msg_add(m, "%s%s", shown++ ? ", " : "; found: ", cands[i].name);
    }
    if (!shown) msg_add(m, "; found no phx-%s-<name>.so files", kind);
}

/* ---- loading ---- */

static const phx_probe_ctx px_default_ctx = {0, 1, 0};

/* Index of the plugin called name (the first in search order), or ncands. */
static size_t find_name(const px_cand *cands, size_t ncands, const char *name)
{
    for (size_t i = 0; i < ncands; i++)
        if (cands[i].state != PX_CAND_SHADOWED && strcmp(cands[i].name, name) == 0) return i;
    return ncands;
}

static phx_status fail(const char *kindname, const char *sel, const px_selection *s, const px_plugin_dir *dirs,
                       size_t ndirs, const px_cand *cands, size_t ncands)
{
    px_msg m = {.len = 0};
    phx_status st = PHX_ENOTFOUND;
    if (s->n && !s->exclude) {
        if (s->n == 1)
            msg_add(&m, "phx_plugin_load: %s plugin '%s' is not usable", kindname, s->names[0]);
        else
            msg_add(&m, "phx_plugin_load: none of the %s plugins '%s' is usable", kindname, sel);
        for (size_t i = 0; i < s->n; i++) {
            size_t k = find_name(cands, ncands, s->names[i]);
            if (k == ncands) {
                msg_add(&m, "; %s: not found", s->names[i]);
                continue;
            }
            msg_add(&m, "; %s (%s): %s", s->names[i], cands[k].path, cands[k].why);
            if (cands[k].state == PX_CAND_BROKEN) st = PHX_EABI;
        }
    } else {
        msg_add(&m, "phx_plugin_load: no usable %s plugin", kindname);
        if (s->n) msg_add(&m, " (selection '%s')", sel);
        for (size_t i = 0; i < ncands; i++)
            if (cands[i].state == PX_CAND_BROKEN || cands[i].state == PX_CAND_DECLINED ||
                cands[i].state == PX_CAND_BADNAME)
                msg_add(&m, "; %s (%s): %s", cands[i].name, cands[i].path, cands[i].why);
    }
    msg_tail(&m, kindname, dirs, ndirs, cands, ncands);
    return phx_error(st, "%s", m.buf);
}

phx_status phx_plugin_load(phx_plugin_kind kind, const char *selection, const phx_probe_ctx *ctx,
                           const phx_plugin_desc **out)
{
    if (!out) return phx_error(PHX_EINVAL, "phx_plugin_load: out is NULL");
    if ((int)kind < PHX_PLUGIN_COMM || (int)kind > PHX_PLUGIN_DEVICE)
        return phx_error(PHX_EINVAL, "phx_plugin_load: kind %d, expected PHX_PLUGIN_COMM, _PRECISION or _DEVICE",
                         (int)kind);
    if (!ctx) ctx = &px_default_ctx;
    const char *kindname = phx_plugin_kind_name(kind);
    px_selection s;
    phx_status st = parse_selection(selection, &s);
    if (st != PHX_OK) return st;

    px_plugin_dir *dirs = NULL;
    px_cand *cands = NULL;
    size_t ndirs = 0, ncands = 0, best = (size_t)-1;
    if ((st = px_plugin_dirs(&dirs, &ndirs)) != PHX_OK) return st;
    if ((st = px_plugin_find(dirs, ndirs, kind, &cands, &ncands)) != PHX_OK) {
        px_free(dirs);
        return phx_error(st, "phx_plugin_load: out of memory listing %s plugins", kindname);
    }
    if (s.n && !s.exclude) {
        /* An ordered list: the first usable wins; only these are opened. */
        for (size_t i = 0; i < s.n && best == (size_t)-1; i++) {
            size_t k = find_name(cands, ncands, s.names[i]);
            if (k == ncands) continue;
            px_plugin_evaluate(&cands[k], ctx, PX_PLUGIN_MINOR_OLDEST);
            if (cands[k].state == PX_CAND_OK) best = k;
        }
    } else {
        /* Any (but the excluded): the highest priority, ties to the first. */
        for (size_t k = 0; k < ncands; k++) {
            if (cands[k].state == PX_CAND_SHADOWED || is_excluded(&s, cands[k].name)) continue;
            px_plugin_evaluate(&cands[k], ctx, PX_PLUGIN_MINOR_OLDEST);
            if (cands[k].state == PX_CAND_OK) {
                if (best == (size_t)-1 || cands[k].priority > cands[best].priority) best = k;
            } else {
                phx_log(PHX_LOG_INFO, "%s plugin %s (%s) skipped: %s", kindname, cands[k].name, cands[k].path,
                        cands[k].why);
            }
        }
    }
    if (best == (size_t)-1) {
        st = fail(kindname, selection, &s, dirs, ndirs, cands, ncands);
    } else {
        phx_log(PHX_LOG_INFO, "%s plugin %s %s from %s (priority %d)", kindname, cands[best].name, cands[best].version,
                cands[best].path, cands[best].priority);
        *out = cands[best].desc;
    }
    px_free(cands);
    px_free(dirs);
    return st;
}

size_t phx_plugin_scan(phx_plugin_info *infos, size_t max, const phx_probe_ctx *ctx)
{
    px_plugin_dir *dirs = NULL;
    px_cand *cands = NULL;
    size_t ndirs = 0, ncands = 0;
    if (!ctx) ctx = &px_default_ctx;
    if (px_plugin_dirs(&dirs, &ndirs) != PHX_OK) return 0;
    if (px_plugin_find(dirs, ndirs, (phx_plugin_kind)0, &cands, &ncands) != PHX_OK) {
        px_free(dirs);
        return 0;
    }
    /* The caller's struct_size is the array's stride (doc/maint/abi.md). */
    size_t stride = infos && max ? px_abi_size(infos) : 0;
    if (infos && max && stride < sizeof(size_t)) {
        px_abi_out(infos, infos, sizeof *infos, "phx_plugin_scan", "phx_plugin_info", "PHX_PLUGIN_INFO_INIT");
        ncands = 0;
    }
    for (size_t i = 0; i < ncands && infos && i < max; i++) {
        px_cand *c = &cands[i];
        phx_plugin_info info, *f = &info;
        px_plugin_evaluate(c, ctx, PX_PLUGIN_MINOR_OLDEST);
        memset(f, 0, sizeof *f);
        snprintf(f->path, sizeof f->path, "%s", c->path);
        snprintf(f->kind, sizeof f->kind, "%s", c->kind);
        snprintf(f->name, sizeof f->name, "%s", c->name);
        snprintf(f->version, sizeof f->version, "%s", c->version[0] ? c->version : "?");
        f->abi_major = c->has_abi ? c->abi_major : 0;
        f->abi_minor = c->has_abi ? c->abi_minor : 0;
        f->ok = c->state == PX_CAND_OK;
        f->priority = f->ok ? c->priority : -1;
        snprintf(f->reason, sizeof f->reason, "%s", f->ok ? "" : c->why);
        f->struct_size = stride;
        memcpy((unsigned char *)infos + i * stride, f, stride < sizeof *f ? stride : sizeof *f);
    }
    px_free(cands);
    px_free(dirs);
    return ncands;
}
