/* Plugin loader: the search path and the plugin files on it. Nothing here
 * opens a plugin; src/plugin/plugin.c does. */
#include "config.h"
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "src/plugin/plugin-impl.h"
#include "src/base/util.h"

#ifndef PHX_PKGLIBDIR
#error "PHX_PKGLIBDIR must be defined by the build"
#endif

static const char *const px_kind_names[] = {"?", "comm", "precision", "device"};

const char *phx_plugin_kind_name(phx_plugin_kind kind)
{
    if ((int)kind < PHX_PLUGIN_COMM || (int)kind > PHX_PLUGIN_DEVICE) return "?";
    return px_kind_names[kind];
}

phx_plugin_kind px_plugin_kind_from_name(const char *kind)
{
    for (int k = PHX_PLUGIN_COMM; k <= PHX_PLUGIN_DEVICE; k++)
        if (strcmp(kind, px_kind_names[k]) == 0) return (phx_plugin_kind)k;
    return (phx_plugin_kind)0;
}

int px_plugin_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n >= PX_PLUGIN_NAME_MAX) return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
              ch == '-' || ch == '.' || ch == '+'))
            return 0;
    }
    return 1;
}

/* Grows a px_malloc'd array to hold at least n elements. */
static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n <= *cap) return 0;
    size_t c = *cap ? *cap * 2 : 8;
    while (c < n) c *= 2;
    void *p = px_realloc(*arr, c * elem);
    if (!p) return -1;
    *arr = p;
    *cap = c;
    return 0;
}

/* Appends folder path (absolute) unless a folder already listed is the same
 * one (same path, or the same inode). */
static phx_status dir_add(px_plugin_dir **dirs, size_t *n, size_t *cap, const char *path)
{
    struct stat st, o;
    int exists = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    for (size_t i = 0; i < *n; i++) {
        if (strcmp((*dirs)[i].path, path) == 0) return PHX_OK;
        if (exists && (*dirs)[i].exists && stat((*dirs)[i].path, &o) == 0 && o.st_dev == st.st_dev &&
            o.st_ino == st.st_ino)
            return PHX_OK;
    }
    if (strlen(path) >= PATH_MAX)
        return phx_error(PHX_EINVAL, "plugin search path: folder name of %zu bytes exceeds PATH_MAX (%d)", strlen(path),
                         PATH_MAX);
    if (grow((void **)dirs, cap, *n + 1, sizeof **dirs)) return PHX_ENOMEM;
    px_plugin_dir *d = &(*dirs)[(*n)++];
    snprintf(d->path, sizeof d->path, "%s", path);
    d->exists = exists && access(path, R_OK | X_OK) == 0;
    return PHX_OK;
}

/* The folder holding the libphalanx.so this code runs from, or "" when it
 * cannot be told. dladdr gives the name the loader used, which is relative
 * when LD_LIBRARY_PATH had a relative entry: that is taken against the
 * working directory (right unless the program changed it since). */
static void lib_dir(char *buf, size_t len)
{
    Dl_info info;
    char abs[PATH_MAX];
    buf[0] = '\0';
    if (!dladdr((void *)&phx_plugin_kind_name, &info) || !info.dli_fname || !info.dli_fname[0]) return;
    const char *name = info.dli_fname;
    if (name[0] != '/') {
        if (!realpath(name, abs)) return;
        name = abs;
    }
    const char *slash = strrchr(name, '/');
    size_t n = (size_t)(slash - name);
    if (n + sizeof "/phalanx" > len) return;
    memcpy(buf, name, n);
    memcpy(buf + n, "/phalanx", sizeof "/phalanx");
}

phx_status px_plugin_dirs(px_plugin_dir **out, size_t *nout)
{
    px_plugin_dir *dirs = NULL;
    size_t n = 0, cap = 0;
    phx_status st = PHX_OK;
    char buf[PATH_MAX];
    const char *env = getenv("PHX_PLUGIN_PATH");

    /* PHX_PLUGIN_PATH: an empty entry never means "."; a relative entry is
     * taken against the working directory only because the user wrote it. */
    while (env && *env && st == PHX_OK) {
        const char *end = strchr(env, ':');
        size_t len = end ? (size_t)(end - env) : strlen(env);
        if (len > 0) {
            char cwd[PATH_MAX];
            int w;
            char joined[PATH_MAX];
            if (env[0] == '/') {
                w = snprintf(buf, sizeof buf, "%.*s", (int)len, env);
            } else if (getcwd(cwd, sizeof cwd)) {
                w = snprintf(joined, sizeof joined, "%s/%.*s", cwd, (int)len, env);
                if (w >= 0 && (size_t)w < sizeof joined && !realpath(joined, buf)) memcpy(buf, joined, (size_t)w + 1);
            } else {
                w = -1;
            }
            if (w < 0 || (size_t)w >= sizeof buf)
                st = phx_error(PHX_EINVAL,
                               "PHX_PLUGIN_PATH: entry '%.*s' cannot be made an absolute path "
                               "shorter than PATH_MAX (%d)",
                               (int)(len > 200 ? 200 : len), env, PATH_MAX);
            else
                st = dir_add(&dirs, &n, &cap, buf);
        }
        env = end ? end + 1 : NULL;
    }
    /* PHX_PLUGIN_PATH_ONLY=1: a hermetic search (tests, pinned deployments). */
    const char *only = getenv("PHX_PLUGIN_PATH_ONLY");
    int defaults = !(only && strcmp(only, "1") == 0);
    if (st == PHX_OK && defaults) {
        lib_dir(buf, sizeof buf);
        if (buf[0]) st = dir_add(&dirs, &n, &cap, buf);
    }
    if (st == PHX_OK && defaults && PHX_PKGLIBDIR[0] == '/') st = dir_add(&dirs, &n, &cap, PHX_PKGLIBDIR);
    if (st != PHX_OK) {
        px_free(dirs);
        return st;
    }
    *out = dirs;
    *nout = n;
    return PHX_OK;
}

const char *phx_plugin_search_path(char *buf, size_t len)
{
    px_plugin_dir *dirs;
    size_t n, used = 0;
    if (!buf || len == 0) return buf;
    buf[0] = '\0';
    if (px_plugin_dirs(&dirs, &n) != PHX_OK) return buf;
    for (size_t i = 0; i < n && used < len; i++) {
        int w = snprintf(buf + used, len - used, "%s%s", i ? ":" : "", dirs[i].path);
        if (w < 0) break;
        used += (size_t)w;
    }
    px_free(dirs);
    return buf;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The file names phx-*.so in one folder, sorted; *names px_malloc'd. */
static phx_status dir_list(const char *dir, char ***names, size_t *n)
{
    size_t cap = 0;
    *names = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return PHX_OK; /* vanished or unreadable: nothing found there */
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < sizeof "phx-a-b.so" - 1 || strncmp(e->d_name, "phx-", 4) != 0 ||
            strcmp(e->d_name + len - 3, ".so") != 0)
            continue;
        char *s = px_strdup(e->d_name);
        if (!s || grow((void **)names, &cap, *n + 1, sizeof **names)) {
            px_free(s);
            for (size_t i = 0; i < *n; i++) px_free((*names)[i]);
            px_free(*names);
            closedir(d);
            return PHX_ENOMEM;
        }
        (*names)[(*n)++] = s;
    }
    closedir(d);
    if (*n > 1) qsort(*names, *n, sizeof **names, cmp_str);
    return PHX_OK;
}

/* Fills c from folder dir and file name fname ("phx-comm-gloo.so"). */
static void cand_init(px_cand *c, const char *dir, const char *fname)
{
    memset(c, 0, sizeof *c);
    snprintf(c->path, sizeof c->path, "%s/%s", dir, fname);
    const char *kind = fname + 4;
    const char *dash = strchr(kind, '-');
    size_t klen = dash ? (size_t)(dash - kind) : 0;
    size_t nlen = dash ? strlen(dash + 1) - 3 : 0;
    snprintf(c->kind, sizeof c->kind, "%.*s", (int)klen, kind);
    if (dash && nlen < sizeof c->name) snprintf(c->name, sizeof c->name, "%.*s", (int)nlen, dash + 1);
    if (klen == 0 || klen >= sizeof c->kind || (c->kind_id = px_plugin_kind_from_name(c->kind)) == 0) {
        c->state = PX_CAND_BADNAME;
        snprintf(c->why, sizeof c->why, "file name: kind '%.*s' is not comm, precision or device",
                 (int)(klen > 32 ? 32 : klen), kind);
    } else if (!dash || !px_plugin_name_ok(c->name) || nlen >= sizeof c->name) {
        c->state = PX_CAND_BADNAME;
        snprintf(c->why, sizeof c->why, "file name: plugin name '%.*s' is not 1..%d of [A-Za-z0-9_.+-]",
                 (int)(nlen > 80 ? 80 : nlen), dash ? dash + 1 : "", PX_PLUGIN_NAME_MAX - 1);
    }
}

phx_status px_plugin_find(const px_plugin_dir *dirs, size_t ndirs, phx_plugin_kind kind, px_cand **out, size_t *nout)
{
    px_cand *cands = NULL;
    size_t n = 0, cap = 0;
    for (size_t i = 0; i < ndirs; i++) {
        char **names;
        size_t nn;
        if (!dirs[i].exists) continue;
        if (dir_list(dirs[i].path, &names, &nn) != PHX_OK) goto nomem;
        for (size_t j = 0; j < nn; j++) {
            px_cand c;
            struct stat st;
            cand_init(&c, dirs[i].path, names[j]);
            px_free(names[j]);
            names[j] = NULL;
            if (kind && c.kind_id != kind) continue;
            if (stat(c.path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
            for (size_t k = 0; k < n && c.state == PX_CAND_UNSEEN; k++) {
                if (cands[k].state == PX_CAND_BADNAME || cands[k].kind_id != c.kind_id ||
                    strcmp(cands[k].name, c.name) != 0)
                    continue;
                c.state = PX_CAND_SHADOWED;
                snprintf(c.why, sizeof c.why, "shadowed by %.400s (earlier in the search path)", cands[k].path);
            }
            if (grow((void **)&cands, &cap, n + 1, sizeof *cands)) {
                for (size_t k = j + 1; k < nn; k++) px_free(names[k]);
                px_free(names);
                goto nomem;
            }
            cands[n++] = c;
        }
        px_free(names);
    }
    *out = cands;
    *nout = n;
    return PHX_OK;
nomem:
    px_free(cands);
    return PHX_ENOMEM;
}
