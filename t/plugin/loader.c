/* The plugin loader: search path, selection syntax, the registry, and each
 * loader error, with the plugins of t/plugins/loader and loader2 (t/plugins/fake.c
 * built with different FAKE_* macros; tools/local.mk lists them). */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

static char L[PATH_MAX], L2[PATH_MAX], tmp[PATH_MAX];
static const phx_probe_ctx ctx1 = {0, 1, 0};

/* Loads sel with PHX_PLUGIN_PATH=path; *out untouched on failure. */
static phx_status load(const char *path, const char *sel, const phx_probe_ctx *ctx, const phx_plugin_desc **out)
{
    setenv("PHX_PLUGIN_PATH", path, 1);
    return phx_plugin_load(PHX_PLUGIN_COMM, sel, ctx, out);
}

/* The name of the plugin sel selects, or the status name on failure. */
static const char *pick(const char *path, const char *sel, const phx_probe_ctx *ctx)
{
    const phx_plugin_desc *d = NULL;
    phx_status st = load(path, sel, ctx, &d);
    return st == PHX_OK ? d->name : phx_status_name(st);
}

static int probed(const char *name)
{
    char var[128];
    snprintf(var, sizeof var, "FAKE_PROBED_%s", name);
    return getenv(var) != NULL;
}

static int copy_file(const char *from, const char *to)
{
    char buf[65536];
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0755);
    ssize_t n = 0;
    while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, (size_t)n) != n) n = -1;
    if (in >= 0) close(in);
    if (out >= 0) close(out);
    return in >= 0 && out >= 0 && n == 0 ? 0 : -1;
}

/* One broken plugin: status, message parts, and no plugin code ran. */
static void broken(const char *name, phx_status want, const char *why, const char *probe_name)
{
    char path[PATH_MAX + 64];
    const phx_plugin_desc *d = (const phx_plugin_desc *)&ctx1; /* sentinel */
    phx_status st = load(L, name, &ctx1, &d);
    is_str(phx_status_name(st), phx_status_name(want), "%s: status", name);
    ok(d == (const phx_plugin_desc *)&ctx1, "%s: *out left unchanged", name);
    snprintf(path, sizeof path, "%s/phx-comm-%s.so", L, name);
    like(phx_last_error(), path, "%s: the message names the file", name);
    like(phx_last_error(), why, "%s: the message says why", name);
    like(phx_last_error(), "searched: ", "%s: the message lists the folders searched", name);
    if (probe_name) ok(!probed(probe_name), "%s: no plugin code ran (probe never called)", name);
}

static void test_kind_names(void)
{
    is_str(phx_plugin_kind_name(PHX_PLUGIN_COMM), "comm", "kind name comm");
    is_str(phx_plugin_kind_name(PHX_PLUGIN_PRECISION), "precision", "kind name precision");
    is_str(phx_plugin_kind_name(PHX_PLUGIN_DEVICE), "device", "kind name device");
    is_str(phx_plugin_kind_name((phx_plugin_kind)0), "?", "kind name of 0");
    is_str(phx_plugin_kind_name((phx_plugin_kind)42), "?", "kind name of 42");
}

static void test_search_path(void)
{
    char buf[3 * PATH_MAX], want[PATH_MAX * 2];
    unsetenv("PHX_PLUGIN_PATH_ONLY"); /* this test looks at the default folders */
    snprintf(buf, sizeof buf, "%s::%s", L, L);
    setenv("PHX_PLUGIN_PATH", buf, 1);
    phx_plugin_search_path(buf, sizeof buf);
    snprintf(want, sizeof want, "%s:", L);
    ok(strncmp(buf, want, strlen(want)) == 0, "PHX_PLUGIN_PATH comes first (%s)", buf);
    ok(strstr(buf + strlen(want), L) == NULL, "a folder listed twice is searched once");
    ok(strstr(buf, "::") == NULL && buf[strlen(buf) - 1] != ':', "an empty entry adds no folder");
    size_t n = strlen(buf), k = strlen(PHX_PKGLIBDIR);
    ok(n >= k && strcmp(buf + n - k, PHX_PKGLIBDIR) == 0, "the configured pkglibdir comes last (%s)", PHX_PKGLIBDIR);
    Dl_info info;
    char beside[PATH_MAX + 16] = "?";
    if (dladdr((void *)&phx_version, &info) && info.dli_fname && strrchr(info.dli_fname, '/'))
        snprintf(beside, sizeof beside, ":%.*s/phalanx:", (int)(strrchr(info.dli_fname, '/') - info.dli_fname),
                 info.dli_fname);
    ok(strstr(buf, beside) != NULL && strstr(buf, beside) < buf + n - k,
       "the phalanx/ folder beside libphalanx.so (%s) comes between them", beside);
    char small[8];
    phx_plugin_search_path(small, sizeof small);
    is_int((long long)strlen(small), 7, "search path truncated to the buffer, NUL-terminated");
    setenv("PHX_PLUGIN_PATH_ONLY", "1", 1);
    phx_plugin_search_path(buf, sizeof buf);
    is_str(buf, L, "PHX_PLUGIN_PATH_ONLY=1 searches PHX_PLUGIN_PATH alone");
}

/* Never the current directory, unless the user writes it. */
static void test_cwd(void)
{
    char from[PATH_MAX + 32], to[PATH_MAX + 32], old[PATH_MAX], buf[8192];
    const phx_plugin_desc *d = NULL;
    snprintf(from, sizeof from, "%s/phx-comm-alpha.so", L);
    snprintf(to, sizeof to, "%s/phx-comm-cwdonly.so", tmp);
    ok(copy_file(from, to) == 0, "copied a plugin into a scratch folder");
    if (!getcwd(old, sizeof old) || chdir(tmp) != 0) {
        skip(5, "cannot chdir");
        return;
    }
    /* The copy is alpha by its descriptor: found under its file name it
     * would be rejected for the name, so ask for it by scan instead. */
    setenv("PHX_PLUGIN_PATH", ":", 1);
    size_t n = phx_plugin_scan(NULL, 0, &ctx1);
    phx_plugin_search_path(buf, sizeof buf);
    ok(strstr(buf, tmp) == NULL, "PHX_PLUGIN_PATH=':' does not search the working directory (%s)", buf);
    phx_plugin_info infos[64] = {PHX_PLUGIN_INFO_INIT};
    size_t m = phx_plugin_scan(infos, 64, &ctx1);
    int seen = 0;
    for (size_t i = 0; i < m && i < 64; i++) seen |= strstr(infos[i].path, "cwdonly") != NULL;
    ok(!seen && n == m, "nothing is found in the working directory");
    setenv("PHX_PLUGIN_PATH", ".", 1);
    phx_status st = phx_plugin_load(PHX_PLUGIN_COMM, "cwdonly", &ctx1, &d);
    is_int(st, PHX_EABI, "PHX_PLUGIN_PATH='.' (written by the user) does search it");
    like(phx_last_error(), to, "and names the resolved absolute path");
    like(phx_last_error(), "descriptor name is 'alpha' but the file name says 'cwdonly'", "and why it is rejected");
    if (chdir(old) != 0) diag("cannot chdir back to %s", old);
    unlink(to);
}

static void test_selection(void)
{
    const phx_probe_ctx inproc = {1, 2, 0};
    char both[2 * PATH_MAX + 2];
    is_str(pick(L, NULL, &ctx1), "beta", "unset: the highest priority wins (beta 20)");
    is_str(pick(L, "", &ctx1), "beta", "empty: the highest priority wins");
    is_str(pick(L, "  ", NULL), "beta", "blank selection and NULL ctx");
    is_str(pick(L, NULL, &inproc), "gamma", "the probe sees ctx: gamma says 50 in process");
    is_str(pick(L, "alpha", &ctx1), "alpha", "a name");
    is_str(pick(L, "gamma,alpha", &ctx1), "gamma", "an ordered list: the first usable");
    is_str(pick(L, "decline,alpha", &ctx1), "alpha", "a list skips a plugin whose probe declines");
    is_str(pick(L, "nosuch,badmajor,beta", &ctx1), "beta", "a list skips missing and broken entries");
    is_str(pick(L, " alpha , beta ", &ctx1), "alpha", "blanks around names are ignored");
    is_str(pick(L, "^beta", &ctx1), "alpha", "^beta: the best of the rest (alpha 10)");
    is_str(pick(L, "^beta,alpha", &ctx1), "gamma", "^beta,alpha excludes both (Open MPI style)");
    is_str(pick(L, "^beta,^alpha", &ctx1), "gamma", "^beta,^alpha excludes both");
    is_str(pick(L, "^beta,^alpha,^gamma", &ctx1), "future", "a plugin of a newer minor ABI is accepted");
    is_str(pick(L, "^beta,^alpha,^gamma,^future", &ctx1), "PHX_ENOTFOUND", "everything excluded or broken");
    like(phx_last_error(), "no usable comm plugin (selection '^beta,^alpha,^gamma,^future')", "names the selection");
    like(phx_last_error(), "probe declined: no_frobnicator_on_this_machine", "says why decline was rejected");
    like(phx_last_error(), "phx-comm-badmajor.so): plugin ABI 2.0", "says why badmajor was rejected");
    ok(strstr(phx_last_error(), "alpha (") == NULL, "an excluded plugin is not reported as rejected");

    is_str(pick(L, "alpha,^beta", &ctx1), "PHX_EINVAL", "names and exclusions mixed");
    like(phx_last_error(), "mixes names and ^exclusions", "... says so");
    is_str(pick(L, "alpha,,beta", &ctx1), "PHX_EINVAL", "an empty entry");
    like(phx_last_error(), "empty entry", "... says so");
    is_str(pick(L, "../alpha", &ctx1), "PHX_EINVAL", "a path is not a name");
    like(phx_last_error(), "'../alpha' is not a plugin name", "... says so");

    /* Same name in two folders: the first in search order wins. */
    const phx_plugin_desc *d = NULL;
    snprintf(both, sizeof both, "%s:%s", L2, L);
    ok(load(both, "alpha", &ctx1, &d) == PHX_OK && strcmp(d->version, "2.0") == 0, "loader2 first: its alpha (2.0)");
    snprintf(both, sizeof both, "%s:%s", L, L2);
    ok(load(both, "alpha", &ctx1, &d) == PHX_OK && strcmp(d->version, "1.0") == 0, "loader first: its alpha (1.0)");
}

/* Each plugin file is opened once; descriptors stay valid. */
static void test_registry(void)
{
    const phx_plugin_desc *a = NULL, *b = NULL;
    char from[PATH_MAX + 32], link_path[PATH_MAX + 32];
    ok(load(L, "alpha", &ctx1, &a) == PHX_OK && load(L, "alpha", &ctx1, &b) == PHX_OK && a == b,
       "loading twice gives the same descriptor");
    snprintf(from, sizeof from, "%s/phx-comm-alpha.so", L);
    snprintf(link_path, sizeof link_path, "%s/phx-comm-alpha.so", tmp);
    ok(symlink(from, link_path) == 0, "a symbolic link to alpha in another folder");
    ok(load(tmp, "alpha", &ctx1, &b) == PHX_OK && a == b, "the same file through a link is the same plugin");
    unlink(link_path);
    is_int(a->kind, PHX_PLUGIN_COMM, "descriptor kind");
    ok(a->vtable != NULL && a->probe != NULL, "descriptor vtable and probe");
    is_int(load(L, "alpha", &ctx1, NULL), PHX_EINVAL, "out NULL");
    setenv("PHX_PLUGIN_PATH", L, 1);
    is_int(phx_plugin_load((phx_plugin_kind)9, "alpha", &ctx1, &a), PHX_EINVAL, "kind 9");
    like(phx_last_error(), "kind 9", "... names the kind");
}

static void test_errors(void)
{
    char buf[PATH_MAX + 64];
    const phx_plugin_desc *d = NULL;
    broken("undef", PHX_EABI, "dlopen failed: undefined symbol: fake_no_such_symbol", "undef");
    broken("nodesc", PHX_EABI, "no phx_plugin_v1 symbol: undefined symbol: phx_plugin_v1", "nodesc");
    broken("func", PHX_EABI, "phx_plugin_v1 is a function, expected a data object", "func");
    broken("tiny", PHX_EABI, "phx_plugin_v1 is 8 bytes, too small for a descriptor", "tiny");
    broken("badmajor", PHX_EABI,
           "plugin ABI 2.0, but this Phalanx implements plugin ABI 1." PX_XSTR(PHX_PLUGIN_ABI_MINOR) " and loads ABI 1.0 or a newer 1.x", "badmajor");
    snprintf(buf, sizeof buf, "descriptor struct_size is 24 bytes, expected at least %zu", sizeof(phx_plugin_desc));
    broken("small", PHX_EABI, buf, "small");
    broken("wrongkind", PHX_EABI, "descriptor kind is 2 (precision) but the file name says comm", "wrongkind");
    broken("wrongname", PHX_EABI, "descriptor name is 'other' but the file name says 'wrongname'", "other");
    broken("novtable", PHX_EABI, "descriptor has no vtable", "novtable");
    broken("borrow", PHX_EABI, "phx_plugin_v1 comes from ", "borrow");
    like(phx_last_error(), "libfakedesc.so, a library the plugin links, not from the plugin",
         "borrow: names the library");
    broken("decline", PHX_ENOTFOUND, "probe declined: no_frobnicator_on_this_machine", NULL);
    ok(probed("decline"), "decline: its probe did run");

    /* Not found: the folders searched and the plugins available. */
    snprintf(buf, sizeof buf, "%s:/nonexistent/phx-folder", L);
    is_int(load(buf, "nosuch", &ctx1, &d), PHX_ENOTFOUND, "not found: status");
    like(phx_last_error(), "comm plugin 'nosuch' is not usable; nosuch: not found", "not found: says so");
    snprintf(buf, sizeof buf, "searched: %s, /nonexistent/phx-folder (missing)", L);
    like(phx_last_error(), buf, "not found: lists the folders searched");
    like(phx_last_error(), "found: alpha, badmajor, beta, borrow, decline, func, future, gamma",
         "not found: lists the plugins");

    /* A list: every entry says why. */
    is_int(load(L, "badmajor,nosuch", &ctx1, &d), PHX_EABI, "list of broken and missing: PHX_EABI");
    like(phx_last_error(), "none of the comm plugins 'badmajor,nosuch' is usable", "list: names the selection");
    like(phx_last_error(), "plugin ABI 2.0", "list: the first entry's reason");
    like(phx_last_error(), "nosuch: not found", "list: the second entry's reason");

    /* Not a shared object: a text file with a plugin's name. */
    char notso[PATH_MAX + 32];
    snprintf(notso, sizeof notso, "%s/phx-comm-notso.so", tmp);
    FILE *f = fopen(notso, "w");
    fputs("This is a text file that only looks like a plugin by its name; dlopen must refuse it.\n", f);
    fclose(f);
    is_int(load(tmp, "notso", &ctx1, &d), PHX_EABI, "not a shared object: status");
    like(phx_last_error(), notso, "not a shared object: full path");
    like(phx_last_error(), "dlopen failed: invalid ELF header", "not a shared object: dlerror");
    unlink(notso);

    /* Empty search path: nothing found at all. */
    snprintf(buf, sizeof buf, "%s/empty", tmp);
    mkdir(buf, 0755);
    is_int(load(buf, "alpha", &ctx1, &d), PHX_ENOTFOUND, "an empty folder: not found");
    like(phx_last_error(), "found no phx-comm-<name>.so files", "an empty folder: says nothing was found");
    rmdir(buf);
}

static void test_scan(void)
{
    char both[2 * PATH_MAX + 2];
    phx_plugin_info infos[32] = {PHX_PLUGIN_INFO_INIT};
    snprintf(both, sizeof both, "%s:%s", L, L2);
    setenv("PHX_PLUGIN_PATH", both, 1);
    size_t all = phx_plugin_scan(NULL, 0, &ctx1);
    size_t n = phx_plugin_scan(infos, 3, &ctx1);
    is_int(n, all, "scan returns the full count even when max is smaller");
    n = phx_plugin_scan(infos, 32, NULL);
    ok(n >= 16 && n <= 32, "scan finds the 16 test plugins (%zu)", n);
    int alpha = 0, badmajor = 0, shadow = 0, decline = 0;
    for (size_t i = 0; i < n && i < 32; i++) {
        const phx_plugin_info *p = &infos[i];
        if (strcmp(p->name, "alpha") == 0 && strstr(p->path, "/loader/") && p->ok && p->priority == 10 &&
            strcmp(p->version, "1.0") == 0 && strcmp(p->kind, "comm") == 0 && p->abi_major == 1)
            alpha = 1;
        if (strcmp(p->name, "alpha") == 0 && strstr(p->path, "/loader2/") && !p->ok && strstr(p->reason, "shadowed by"))
            shadow = 1;
        if (strcmp(p->name, "badmajor") == 0 && !p->ok && p->abi_major == 2 && strstr(p->reason, "plugin ABI 2.0"))
            badmajor = 1;
        if (strcmp(p->name, "decline") == 0 && !p->ok && strstr(p->reason, "probe declined")) decline = 1;
    }
    ok(alpha, "scan: alpha ok, priority 10, version 1.0, ABI 1");
    ok(shadow, "scan: loader2's alpha is shadowed by loader's");
    ok(badmajor, "scan: badmajor rejected with ABI 2.0");
    ok(decline, "scan: decline rejected by its probe");

    /* File names that are not plugin names: listed, rejected, never opened. */
    const char *files[] = {"phx-widget-x.so", "phx-comm-bad name.so", "phx-comm-.so"};
    char p[PATH_MAX + 64];
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", tmp, files[i]);
        FILE *f = fopen(p, "w");
        if (f) fclose(f);
    }
    setenv("PHX_PLUGIN_PATH", tmp, 1);
    n = phx_plugin_scan(infos, 32, &ctx1);
    int kind = 0, space = 0, empty = 0;
    for (size_t i = 0; i < n && i < 32; i++) {
        const phx_plugin_info *q = &infos[i];
        kind |= !q->ok && strcmp(q->kind, "widget") == 0 &&
            strstr(q->reason, "kind 'widget' is not comm, precision or device");
        space |= !q->ok && strstr(q->reason, "plugin name 'bad name' is not 1..63 of") != NULL;
        empty |= !q->ok && strstr(q->reason, "plugin name '' is not") != NULL;
    }
    ok(kind, "scan: an unknown kind in the file name is listed and rejected");
    ok(space && empty, "scan: invalid and empty names in the file name are listed and rejected");
    const phx_plugin_desc *d = NULL;
    is_int(phx_plugin_load(PHX_PLUGIN_COMM, NULL, &ctx1, &d), PHX_ENOTFOUND, "no valid plugin: not found");
    like(phx_last_error(), "plugin name 'bad name'", "... and the bad file name is reported");
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", tmp, files[i]);
        unlink(p);
    }
}

/* Many threads loading at once see the same descriptors. */
static void *hammer(void *arg)
{
    const char *name = arg;
    const phx_plugin_desc *first = NULL, *d = NULL;
    for (int i = 0; i < 50; i++) {
        if (phx_plugin_load(PHX_PLUGIN_COMM, name, &ctx1, &d) != PHX_OK) return (void *)1;
        if (first && d != first) return (void *)2;
        first = d;
    }
    return NULL;
}

static void test_threads(void)
{
    pthread_t th[8];
    const char *names[] = {"alpha", "beta", "gamma", "future", NULL, "^beta", "alpha,beta", "gamma"};
    int bad = 0;
    setenv("PHX_PLUGIN_PATH", L, 1);
    for (int i = 0; i < 8; i++) pthread_create(&th[i], NULL, hammer, (void *)names[i]);
    for (int i = 0; i < 8; i++) {
        void *r;
        pthread_join(th[i], &r);
        bad += r != NULL;
    }
    is_int(bad, 0, "8 threads x 50 loads: all succeed, descriptors stable");
}

int main(void)
{
    const char *b = getenv("top_builddir");
    /* Plugins built in this tree (.libs/phalanx) or installed must not
     * take part in the selection tests below. */
    setenv("PHX_PLUGIN_PATH_ONLY", "1", 1);
    snprintf(L, sizeof L, "%s/t/plugins/loader/.libs", b ? b : ".");
    snprintf(L2, sizeof L2, "%s/t/plugins/loader2/.libs", b ? b : ".");
    char probe[PATH_MAX + 32];
    snprintf(probe, sizeof probe, "%s/phx-comm-alpha.so", L);
    if (access(probe, R_OK) != 0) {
        printf("Bail out! %s not built (make check builds it)\n", probe);
        return 1;
    }
    snprintf(tmp, sizeof tmp, "%s/phx-loader-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmp)) {
        printf("Bail out! mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    test_kind_names();
    test_search_path();
    test_errors(); /* before anything probes the broken plugins */
    test_selection();
    test_registry();
    test_cwd();
    test_scan();
    test_threads();
    rmdir(tmp);
    return done_testing();
}
