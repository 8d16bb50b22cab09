/* Per-machine path choice (src/tune): PHX_TUNE=off gives today's fixed
 * rules for a list of GEMM and convolution shapes (the rules written out
 * again here); PHX_TUNE=measure writes a cache file (header, this CPU's
 * signature, one entry, a checksum recomputed here) atomically; cached
 * reads an edited cache back; forced paths (PHX_CPU_GEMM, PHX_CPU_CONV)
 * win over it; a cache of another CPU signature is ignored with a log
 * line; a truncated, mis-summed or garbage cache is PHX_EIO naming the
 * file; more than one rank never measures. With OPENBLAS_CORETYPE=
 * Prescott (a child process: OpenBLAS reads it at load) PHX_LOG=info
 * names the misdetection and auto keeps GEMV-like products off OpenBLAS,
 * which takes them with the right core. */
#include "config.h"
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "kernels/cpu/cpu.h"
#include "src/base/threads.h"
#include "src/base/util.h"
#include "src/tune/tune.h"
#include "phalanx/log.h"
#include "phalanx/phalanx.h"
#include "t/env-util.h"
#include "t/tap.h"

static char dir[256];

/* ---- the fixed rules as they were before tuning existed ---- */

static int gemm_rule_ref(int64_t m, int64_t n, int64_t k, phx_dtype adt)
{
    if (adt == PHX_BF16 && k > 0 && px_cpu_dnnl_bf16_native()) return PX_GEMM_DNNL;
    /* f16 split into bf16 parts on AMX, for C of 64+ rows and columns and k <= 2 max(m, n) */
    if (adt == PHX_F16 && k > 0 && (m < n ? m : n) >= 64 && k <= 2 * (m > n ? m : n) && px_cpu_dnnl_amx_bf16())
        return PX_GEMM_DNNL;
    /* f32, and f16 the split does not take where the CPU has AVX512-BF16,
     * on OpenBLAS's AVX-512 kernels */
    if ((adt == PHX_F32 || (adt == PHX_F16 && px_cpu_has_avx512bf16())) && k > 0 && px_tune_blas_avx512())
        return PX_GEMM_BLAS;
    int avx = px_cpu_isa() == PX_ISA_AVX512;
#ifdef HAVE_CBLAS
    if (avx && px_gemm_avx512_fill(m, n) < 0.5 && px_tune_blas_misdetected() < 2) avx = 0;
#endif
    return k > 0 && avx ? PX_GEMM_AVX512 : PX_GEMM_BLAS;
}

static int conv_rule_ref(int pass, const phx_conv2d_desc *d, phx_dtype dt)
{
    int avx = px_cpu_isa() == PX_ISA_AVX512;
    /* Winograd's forward and data passes; with oneDNN, not for 16 x 16
     * channels, and its weight pass never; f16/bf16 on it (in their
     * 16-bit tensors) for every pass */
#ifdef HAVE_DNNL
    int wino = dt != PHX_F32 || (pass != 2 && d->c * d->k > 16 * 16);
#else
    int wino = 1;
    (void)dt;
#endif
    if (avx && px_cpu_conv2d_winograd_takes(pass, d) && d->c >= 16 && d->k >= 16 && wino) return PX_CONV_WINOGRAD;
    if (avx && px_cpu_conv2d_small_takes(pass, d) && (pass == 0 || d->c * d->kh * d->kw <= 9)) return PX_CONV_DIRECT;
    return PX_CONV_FALLBACK;
}

static phx_conv2d_desc conv_desc(int64_t n, int64_t c, int64_t h, int64_t k, int64_t kern, int64_t stride, int64_t pad)
{
    phx_conv2d_desc d = {.n = n, .c = c, .h = h, .w = h, .k = k, .kh = kern, .kw = kern};
    d.stride_h = d.stride_w = stride, d.pad_h = d.pad_w = pad, d.dil_h = d.dil_w = 1, d.groups = 1;
    d.oh = d.ow = (h + 2 * pad - kern) / stride + 1;
    return d;
}

/* ---- cache files as the test writes them ---- */

static uint64_t fnv(const char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 0x100000001b3ull;
    return h;
}

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = calloc(1, 1 << 16);
    *n = fread(b, 1, (1 << 16) - 1, f);
    fclose(f);
    return b;
}

static void spit(const char *path, const char *s, size_t n)
{
    FILE *f = fopen(path, "wb");
    fwrite(s, 1, n, f);
    fclose(f);
}

/* A cache of signature sig holding key -> choice, summed as the format says. */
static void write_cache(const char *path, const char *sig, const char *key, const char *choice)
{
    char b[2048];
    int n = snprintf(b, sizeof b, "phalanx-tune 1\ncpu %s\n%s %s\n", sig, key, choice);
    n += snprintf(b + n, sizeof b - (size_t)n, "sum %016" PRIx64 "\n", fnv(b, (size_t)n));
    spit(path, b, (size_t)n);
}

static char *path_in(const char *name)
{
    static char p[64][320];
    static int i;
    i = (i + 1) % 64;
    snprintf(p[i], sizeof p[i], "%s/%s", dir, name);
    return p[i];
}

/* stderr of fn(), caught in a file */
static char logbuf[8192];
static void catch_log(void (*fn)(void *), void *arg)
{
    fflush(stderr);
    char *lp = path_in("log.txt");
    int saved = dup(2);
    FILE *f = fopen(lp, "w");
    dup2(fileno(f), 2);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    fclose(f);
    size_t n;
    char *b = slurp(lp, &n);
    snprintf(logbuf, sizeof logbuf, "%s", b ? b : "");
    free(b);
}

typedef struct gemm_q {
    int64_t m, n, k;
    phx_dtype dt;
    int path;
    phx_status st;
} gemm_q;

static void ask_gemm(void *arg)
{
    gemm_q *q = arg;
    q->st = px_cpu_gemm_path(0, 0, q->m, q->n, q->k, 1, q->dt, q->dt, &q->path);
}

static const char *gname(int p)
{
    return p == PX_GEMM_BLAS ? "blas" : p == PX_GEMM_DNNL ? "dnnl" : p == PX_GEMM_AVX512 ? "avx512" : "?";
}

/* ---- the Prescott child ---- */

static int child_main(const char *core)
{
    /* prints: misdetected, core, path for a GEMV-like product */
    gemm_q q = {4096, 1, 1024, PHX_F32, -1, 0};
    ask_gemm(&q);
    printf("%d %s %s %d\n", px_tune_blas_misdetected(), px_tune_blas_core(), gname(q.path), q.st);
    (void)core;
    return 0;
}

/* Runs this program as a child with OPENBLAS_CORETYPE=core and PHX_LOG=info;
 * out: its stdout, err: its stderr. */
static int run_child(const char *core, char *out, size_t on, char *err, size_t en)
{
    char *op = path_in("child.out"), *ep = path_in("child.err");
    pid_t pid = fork();
    if (pid == 0) {
        freopen(op, "w", stdout);
        freopen(ep, "w", stderr);
        setenv("OPENBLAS_CORETYPE", core, 1);
        setenv("PHX_LOG", "info", 1);
        unsetenv("PHX_TUNE");
        char *argv[] = {(char *)"choice", (char *)"--child", (char *)core, NULL};
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    size_t n;
    char *b = slurp(op, &n);
    snprintf(out, on, "%s", b ? b : "");
    free(b);
    b = slurp(ep, &n);
    snprintf(err, en, "%s", b ? b : "");
    free(b);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int count_files(void)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strncmp(e->d_name, "c", 1) == 0 && strstr(e->d_name, ".tmp")) n++;
    if (d) closedir(d);
    return n;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--child")) return child_main(argv[2]);
    tu_env_clear();
    unsetenv("PHX_CPU_GEMM"), unsetenv("PHX_CPU_CONV"), unsetenv("PHX_TUNE"), unsetenv("PHX_TUNE_CACHE");
    snprintf(dir, sizeof dir, "%s/phx-tune-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) {
        printf("Bail out! mkdtemp %s\n", dir);
        return 1;
    }
    plan(43);
    diag("cpu: %s; BLAS %s core %s (wants %s)", px_tune_signature(), px_tune_blas_name(), px_tune_blas_core(),
         px_tune_blas_core_for_cpu() ? px_tune_blas_core_for_cpu() : "-");

    /* 1. off: today's rules, GEMM and convolution */
    static const struct {
        int64_t m, n, k;
        phx_dtype dt;
    } gs[] = {{1024, 1024, 1024, PHX_F32}, {4096, 1, 1024, PHX_F32}, {1, 4096, 1024, PHX_F32},
              {256, 784, 512, PHX_F32},    {3, 3, 3, PHX_F32},       {64, 64, 0, PHX_F32},
              {128, 512, 256, PHX_BF16},   {2, 4096, 64, PHX_BF16},  {512, 512, 512, PHX_F16},
              {4096, 2, 1024, PHX_F16}};
    int bad = 0;
    for (size_t i = 0; i < PX_ARRAY_LEN(gs); i++) {
        gemm_q q = {gs[i].m, gs[i].n, gs[i].k, gs[i].dt, -1, 0};
        ask_gemm(&q);
        int want = gemm_rule_ref(q.m, q.n, q.k, q.dt);
        if (q.st != PHX_OK || q.path != want) {
            bad++;
            diag("gemm %lldx%lldx%lld %s: %s, rule says %s", (long long)q.m, (long long)q.n, (long long)q.k,
                 phx_dtype_name(q.dt), gname(q.path), gname(want));
        }
    }
    ok(bad == 0, "PHX_TUNE unset: %zu GEMM shapes take the fixed rule's path", PX_ARRAY_LEN(gs));
    phx_conv2d_desc cs[] = {conv_desc(128, 1, 28, 16, 3, 1, 1),  conv_desc(128, 16, 28, 32, 3, 1, 1),
                            conv_desc(128, 32, 13, 32, 3, 1, 1), conv_desc(32, 64, 16, 128, 1, 1, 0),
                            conv_desc(32, 64, 16, 64, 3, 2, 1),  conv_desc(8, 3, 32, 16, 5, 1, 2),
                            conv_desc(8, 8, 9, 8, 3, 1, 1)};
    setenv("PHX_TUNE", "off", 1);
    bad = 0;
    int winograd_seen = 0;
    for (size_t i = 0; i < PX_ARRAY_LEN(cs); i++)
        for (int pass = 0; pass < 3; pass++) {
            int path = -1;
            phx_status st = px_cpu_conv2d_path(pass, &cs[i], PHX_F32, &path);
            int want = conv_rule_ref(pass, &cs[i], PHX_F32);
            winograd_seen += path == PX_CONV_WINOGRAD;
            if (st != PHX_OK || path != want) {
                bad++;
                diag("conv %zu pass %d: %s, rule says %s", i, pass, px_cpu_conv2d_path_name(path),
                     px_cpu_conv2d_path_name(want));
            }
            /* f16 and bf16: the half rule, or for bf16 oneDNN's bf16
             * kernels where it has them, for every pass but the direct
             * kernel's */
            for (int h = 0; h < 2; h++) {
                int hp = -1, hwant = conv_rule_ref(pass, &cs[i], h ? PHX_F16 : PHX_BF16);
                if (!h && px_cpu_dnnl_bf16_native()) hwant = want != PX_CONV_DIRECT ? PX_CONV_DNNL : want;
                if (px_cpu_conv2d_path(pass, &cs[i], h ? PHX_F16 : PHX_BF16, &hp) != PHX_OK || hp != hwant) {
                    bad++;
                    diag("conv %zu pass %d %s: %s, expected %s", i, pass, h ? "f16" : "bf16",
                         px_cpu_conv2d_path_name(hp), px_cpu_conv2d_path_name(hwant));
                }
            }
        }
    ok(bad == 0, "PHX_TUNE=off: %zu convolution shapes x 3 passes take the fixed rule's path (f16 and bf16 too)",
       PX_ARRAY_LEN(cs));
    gemm_q q = {1024, 1024, 1024, PHX_F32, -1, 0};
    setenv("PHX_TUNE", "fast", 1);
    ask_gemm(&q);
    ok(q.st == PHX_EINVAL && strstr(phx_last_error(), "PHX_TUNE='fast'"), "PHX_TUNE=fast: PHX_EINVAL naming it (%s)",
       phx_last_error());

    /* 2. measure: a file with this CPU's signature, one entry, a checksum */
    int avx = px_cpu_isa() == PX_ISA_AVX512;
    if (!avx) {
        skip(31, "the kernels do not use AVX-512: one GEMM path, nothing to choose");
        goto prescott;
    }
    char *c1 = path_in("c1.txt");
    setenv("PHX_TUNE", "measure", 1);
    setenv("PHX_TUNE_CACHE", c1, 1);
    q = (gemm_q){96, 96, 96, PHX_F32, -1, 0};
    ask_gemm(&q);
    ok(q.st == PHX_OK, "measure: 96^3 f32 chosen (%s)", q.st ? phx_last_error() : gname(q.path));
    size_t n = 0;
    char *b = slurp(c1, &n);
    ok(b != NULL, "measure wrote %s", c1);
    if (!b) b = calloc(1, 1);
    ok(count_files() == 0, "no temporary file left beside it");
    char sigline[700];
    snprintf(sigline, sizeof sigline, "phalanx-tune 1\ncpu %s\n", px_tune_signature());
    ok(strncmp(b, sigline, strlen(sigline)) == 0, "header and this CPU's signature lead the file");
    char key[200];
    snprintf(key, sizeof key, "t%d gemm f32>f32 nn m128 n128 k128 ", px_threads_budget());
    char *ent = strstr(b, key);
    ok(ent != NULL, "an entry for the shape class: '%s'", key);
    char choice[32] = "";
    if (ent) sscanf(ent + strlen(key), "%31s", choice);
    ok(!strcmp(choice, gname(q.path)), "the entry names the path chosen (%s, %s)", choice, gname(q.path));
    char *sum = strstr(b, "\nsum ");
    char want_sum[20];
    snprintf(want_sum, sizeof want_sum, "%016" PRIx64, sum ? fnv(b, (size_t)(sum + 1 - b)) : 0);
    ok(sum && !strncmp(sum + 5, want_sum, 16) && sum[21] == '\n' && sum[22] == 0,
       "the last line is the FNV-1a checksum of the rest (%s)", want_sum);
    gemm_q again = {100, 120, 70, PHX_F32, -1, 0};
    ask_gemm(&again);
    ok(again.st == PHX_OK && again.path == q.path, "another shape of the class takes the recorded path");
    /* another process adds an entry meanwhile: the next save keeps it */
    if (sum) {
        char other_key[64];
        snprintf(other_key, sizeof other_key, "t%d gemm f32>f32 nn m4 n4 k4", px_threads_budget());
        char *w = calloc(1, n + 256);
        int wl = snprintf(w, n + 256, "%.*s%s blas\n", (int)(sum + 1 - b), b, other_key);
        wl += snprintf(w + wl, n + 256 - (size_t)wl, "sum %016" PRIx64 "\n", fnv(w, (size_t)wl));
        spit(c1, w, (size_t)wl);
        free(w);
        gemm_q big = {200, 200, 200, PHX_F32, -1, 0};
        ask_gemm(&big);
        size_t n3;
        char *b3 = slurp(c1, &n3);
        ok(big.st == PHX_OK && b3 && strstr(b3, "nn m256 n256 k256 ") && strstr(b3, other_key) && strstr(b3, key),
           "a new measurement keeps the entry another process wrote meanwhile");
        free(b3);
    } else {
        ok(0, "no checksum line to edit");
    }

    /* 3. cached reads an edited cache; forced paths win over it */
    const char *other = q.path == PX_GEMM_AVX512 ? "blas" : "avx512";
    int other_path = q.path == PX_GEMM_AVX512 ? PX_GEMM_BLAS : PX_GEMM_AVX512;
    char k2[200];
    snprintf(k2, sizeof k2, "t%d gemm f32>f32 nn m128 n128 k128", px_threads_budget());
    char *c2 = path_in("c2.txt");
    write_cache(c2, px_tune_signature(), k2, other);
    setenv("PHX_TUNE", "cached", 1);
    setenv("PHX_TUNE_CACHE", c2, 1);
    ask_gemm(&q);
    ok(q.st == PHX_OK && q.path == other_path, "cached: the cache's %s is taken (%s)", other, gname(q.path));
    uint64_t allocs = phx_alloc_count();
    for (int i = 0; i < 1000; i++) ask_gemm(&q);
    ok(phx_alloc_count() == allocs && q.path == other_path, "1000 more choices allocate nothing (%llu)",
       (unsigned long long)(phx_alloc_count() - allocs));
    setenv("PHX_CPU_GEMM", gname(q.path == PX_GEMM_AVX512 ? PX_GEMM_BLAS : PX_GEMM_AVX512), 1);
    ask_gemm(&q);
    ok(q.st == PHX_OK && q.path != other_path, "PHX_CPU_GEMM=%s wins over the cache", getenv("PHX_CPU_GEMM"));
    unsetenv("PHX_CPU_GEMM");
    setenv("PHX_TUNE", "off", 1);
    ask_gemm(&q);
    ok(q.st == PHX_OK && q.path == gemm_rule_ref(96, 96, 96, PHX_F32), "PHX_TUNE=off ignores the cache");

    /* convolutions: measured, edited, forced */
    phx_conv2d_desc cd = conv_desc(4, 16, 10, 16, 3, 1, 1);
    char *c3 = path_in("c3.txt");
    setenv("PHX_TUNE", "measure", 1);
    setenv("PHX_TUNE_CACHE", c3, 1);
    int cp = -1;
    phx_status st = px_cpu_conv2d_path(0, &cd, PHX_F32, &cp);
    ok(st == PHX_OK && cp >= 0 && cp != PX_CONV_FALLBACK, "measure: a convolution's forward pass chosen (%s)",
       px_cpu_conv2d_path_name(cp));
    free(b);
    b = slurp(c3, &n);
    char ckey[200];
    snprintf(ckey, sizeof ckey, "t%d conv0 f32 n4 c16 k16 10x10 3x3 s1x1 p1x1 d1x1 g1", px_threads_budget());
    ok(b && strstr(b, ckey), "its entry: '%s'", ckey);
    free(b);
    const char *cother = cp == PX_CONV_WINOGRAD ? "im2col" : "winograd";
    char *c4 = path_in("c4.txt");
    write_cache(c4, px_tune_signature(), ckey, cother);
    setenv("PHX_TUNE", "cached", 1);
    setenv("PHX_TUNE_CACHE", c4, 1);
    st = px_cpu_conv2d_path(0, &cd, PHX_F32, &cp);
    ok(st == PHX_OK && !strcmp(px_cpu_conv2d_path_name(cp), cother), "cached: the cache's %s is taken", cother);
    setenv("PHX_CPU_CONV", cp == PX_CONV_WINOGRAD ? "im2col" : "winograd", 1);
    st = px_cpu_conv2d_path(0, &cd, PHX_F32, &cp);
    ok(st == PHX_OK && !strcmp(px_cpu_conv2d_path_name(cp), getenv("PHX_CPU_CONV")),
       "PHX_CPU_CONV=%s wins over the cache", getenv("PHX_CPU_CONV"));
    unsetenv("PHX_CPU_CONV");

    /* casts: the rule, a measured entry, and every variant's bits alike */
    {
        int64_t cn = 1 << 20;
        int v = -1;
        setenv("PHX_TUNE", "off", 1);
        phx_status vs = px_cpu_cast_variant(PHX_BF16, PHX_F32, cn, &v);
        ok(vs == PHX_OK && v == (px_cpu_streams(6 * cn) ? PX_CAST_AVX512_STREAM : PX_CAST_AVX512),
           "PHX_TUNE=off: a 1M-element f32 -> bf16 cast takes the streaming rule (%d)", v);
        char *c10 = path_in("c10.txt");
        setenv("PHX_TUNE", "measure", 1);
        setenv("PHX_TUNE_CACHE", c10, 1);
        vs = px_cpu_cast_variant(PHX_BF16, PHX_F32, cn, &v);
        b = slurp(c10, &n);
        char castkey[80];
        snprintf(castkey, sizeof castkey, "t%d cast f32>bf16 n1048576 ", px_threads_budget());
        ok(vs == PHX_OK && b && strstr(b, castkey), "measure: the cast's entry '%s'", castkey);
        free(b);
        float *src = malloc((size_t)cn * 4);
        uint16_t *out[3];
        for (int64_t i = 0; i < cn; i++) src[i] = (float)((i * 2654435761u) % 100003) * 1e-3f - 50.0f;
        static const char *const vn[3] = {"avx512", "avx512-stream", "avx2"};
        int took = 0, same = 1;
        char ck[80];
        snprintf(ck, sizeof ck, "t%d cast f32>bf16 n1048576", px_threads_budget());
        setenv("PHX_TUNE", "cached", 1);
        for (int k = 0; k < 3; k++) {
            char name[16];
            snprintf(name, sizeof name, "c11%d.txt", k);
            char *cp = path_in(name);
            write_cache(cp, px_tune_signature(), ck, vn[k]);
            setenv("PHX_TUNE_CACHE", cp, 1);
            out[k] = calloc((size_t)cn, 2);
            took += px_cpu_cast_variant(PHX_BF16, PHX_F32, cn, &v) == PHX_OK && v == k;
            if (px_cpu_cast(0, out[k], PHX_BF16, src, PHX_F32, cn) != PHX_OK) same = 0;
            if (k && memcmp(out[k], out[0], (size_t)cn * 2)) same = 0;
        }
        ok(took == 3 && same, "cached: each of avx512, avx512-stream, avx2 taken (%d of 3), the same bits", took);
        for (int k = 0; k < 3; k++) free(out[k]);
        free(src);
    }

    /* 4. another CPU's cache: ignored, said once */
    char *c5 = path_in("c5.txt");
    write_cache(c5, "OtherVendor 25 17 avx2,fma isa=avx2 blas=OpenBLAS:Zen", k2, other);
    setenv("PHX_TUNE_CACHE", c5, 1);
    phx_log_set_level(PHX_LOG_WARN);
    catch_log(ask_gemm, &q);
    ok(q.st == PHX_OK && q.path == gemm_rule_ref(96, 96, 96, PHX_F32),
       "a cache of another CPU signature is ignored: the fixed rule's %s", gname(q.path));
    ok(strstr(logbuf, c5) && strstr(logbuf, "another CPU") && strstr(logbuf, "OtherVendor"),
       "a log line names the file and its signature: %.200s", logbuf);
    setenv("PHX_TUNE", "measure", 1);
    ask_gemm(&q);
    b = slurp(c5, &n);
    ok(b && strstr(b, "OtherVendor"), "measure leaves it as it was");
    free(b);

    /* 5. corrupt caches: PHX_EIO naming the file, every time */
    setenv("PHX_TUNE", "cached", 1);
    size_t n2;
    char *good = slurp(c2, &n2);
    char *c6 = path_in("c6.txt");
    spit(c6, good, n2 - 10);
    setenv("PHX_TUNE_CACHE", c6, 1);
    ask_gemm(&q);
    ok(q.st == PHX_EIO && strstr(phx_last_error(), c6) && strstr(phx_last_error(), "truncated"),
       "a truncated cache: PHX_EIO naming the file (%s)", phx_last_error());
    ask_gemm(&q);
    ok(q.st == PHX_EIO && strstr(phx_last_error(), c6), "and again on the next call");
    float A[4] = {1, 2, 3, 4}, B[4] = {1, 0, 0, 1}, C[4] = {0};
    st = px_cpu_gemm(0, 0, 0, 2, 2, 2, 1.0f, A, 2, B, 2, PHX_F32, 0.0f, C, 2, PHX_F32);
    ok(st == PHX_EIO && C[0] == 0, "a GEMM under it fails and writes nothing");
    char *c7 = path_in("c7.txt");
    char *sumd = strdup(good);
    char *pos = strstr(sumd, k2);
    if (pos) pos[strlen(k2) + 1] ^= 1; /* one bit of the choice */
    spit(c7, sumd, n2);
    setenv("PHX_TUNE_CACHE", c7, 1);
    ask_gemm(&q);
    ok(q.st == PHX_EIO && strstr(phx_last_error(), c7) && strstr(phx_last_error(), "checksum"),
       "a flipped bit: PHX_EIO, checksum, naming the file (%s)", phx_last_error());
    char *c8 = path_in("c8.txt");
    char junk[300];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (char)(i * 37 + 11);
    spit(c8, junk, sizeof junk);
    setenv("PHX_TUNE_CACHE", c8, 1);
    ask_gemm(&q);
    ok(q.st == PHX_EIO && strstr(phx_last_error(), c8) && strstr(phx_last_error(), "not a Phalanx tuning cache"),
       "garbage: PHX_EIO naming the file (%s)", phx_last_error());
    char *c10 = path_in("c10.txt");
    spit(c10, "phalanx-tune 1", 14);
    setenv("PHX_TUNE_CACHE", c10, 1);
    ask_gemm(&q);
    ok(q.st == PHX_EIO && strstr(phx_last_error(), c10) && strstr(phx_last_error(), "truncated") &&
           !strstr(phx_last_error(), "expected 'phalanx-tune 1'"),
       "its first line alone, without a newline: truncated (%s)", phx_last_error());
    char *c11 = path_in("c11.txt");
    char *ctl = strdup(good);
    char *sl = strstr(ctl, "\nsum ");
    if (sl) sl[6] = '\001', sl[7] = '\033';
    spit(c11, ctl, n2);
    setenv("PHX_TUNE_CACHE", c11, 1);
    ask_gemm(&q);
    int clean = 1;
    for (const char *e = phx_last_error(); *e; e++) clean &= (unsigned char)*e >= 0x20;
    ok(sl && q.st == PHX_EIO && strstr(phx_last_error(), "checksum") && clean,
       "control bytes in the sum line are not echoed (%s)", phx_last_error());
    free(ctl);
    /* a key on two lines, summed right: the writer never makes one, so an edit */
    char *c14 = path_in("c14.txt"), dup[2048];
    int dn = snprintf(dup, sizeof dup, "phalanx-tune 1\ncpu %s\n%s blas\n%s avx512\n", px_tune_signature(), k2, k2);
    dn += snprintf(dup + dn, sizeof dup - (size_t)dn, "sum %016" PRIx64 "\n", fnv(dup, (size_t)dn));
    spit(c14, dup, (size_t)dn);
    setenv("PHX_TUNE_CACHE", c14, 1);
    ask_gemm(&q);
    ok(q.st == PHX_EIO && strstr(phx_last_error(), c14) && strstr(phx_last_error(), "line 4") &&
           strstr(phx_last_error(), k2) && strstr(phx_last_error(), "earlier line"),
       "a key on two lines: PHX_EIO naming the file, the line and the key (%s)", phx_last_error());
    /* not a regular file: a directory, and a FIFO nobody writes (not waited on) */
    char *c12 = path_in("c12.d");
    mkdir(c12, 0700);
    setenv("PHX_TUNE_CACHE", c12, 1);
    ask_gemm(&q);
    ok(q.st == PHX_EIO && strstr(phx_last_error(), c12) && strstr(phx_last_error(), "not a regular file"),
       "a directory: %s", phx_last_error());
    char *c13 = path_in("c13.fifo");
    int fifo = mkfifo(c13, 0600) == 0;
    setenv("PHX_TUNE_CACHE", c13, 1);
    alarm(10); /* a hang ends the test */
    if (fifo) ask_gemm(&q);
    alarm(0);
    ok(fifo && q.st == PHX_EIO && strstr(phx_last_error(), "not a regular file"), "a FIFO, at once: %s",
       phx_last_error());
    setenv("PHX_TUNE", "off", 1);
    ask_gemm(&q);
    ok(q.st == PHX_OK, "PHX_TUNE=off does not read it");
    free(good), free(sumd);

    /* 6. more than one rank: measure reads only */
    char *c9 = path_in("c9.txt");
    setenv("PHX_TUNE", "measure", 1);
    setenv("PHX_TUNE_CACHE", c9, 1);
    tu_env("RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2", NULL);
    ask_gemm(&q);
    struct stat sb;
    ok(q.st == PHX_OK && q.path == gemm_rule_ref(96, 96, 96, PHX_F32) && stat(c9, &sb) != 0,
       "world 2: measure takes the fixed rule and writes no cache");
    tu_env_clear();
    unsetenv("PHX_TUNE"), unsetenv("PHX_TUNE_CACHE");

prescott:;
    /* 7. OpenBLAS on its Prescott kernels */
    const char *want = px_tune_blas_core_for_cpu();
    if (strcmp(px_tune_blas_name(), "OpenBLAS") != 0 || !want || !avx) {
        skip(5, "needs OpenBLAS and AVX-512 kernels");
    } else {
        char out[512], err[4096];
        int rc = run_child("Prescott", out, sizeof out, err, sizeof err);
        char mis[8] = "", core[64] = "", path[16] = "";
        sscanf(out, "%7s %63s %15s", mis, core, path);
        ok(rc == 0 && !strcmp(mis, "2") && !strcmp(core, "Prescott"),
           "OPENBLAS_CORETYPE=Prescott: misdetected 2, core %s", core);
        ok(strstr(err, "misdetected") && strstr(err, "Prescott") && strstr(err, want),
           "PHX_LOG=info names it and the core to set: %.300s", err);
        ok(!strcmp(path, "avx512"), "a 4096x1x1024 GEMM stays off its BLAS: %s", path);
        rc = run_child(want, out, sizeof out, err, sizeof err);
        sscanf(out, "%7s %63s %15s", mis, core, path);
        ok(rc == 0 && !strcmp(mis, "0") && !strcmp(core, want), "OPENBLAS_CORETYPE=%s: not misdetected", want);
        ok(!strcmp(path, "blas"), "the same GEMM on OpenBLAS then (the fixed rule): %s", path);
    }
    char rm[300];
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    if (system(rm) != 0) diag("could not remove %s", dir);
    return done_testing();
}
