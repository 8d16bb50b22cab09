/* Failed checkpoint operations lose nothing.
 * 1. A checkpoint whose only fault is the scaler state (scale 1e300,
 *    3.5e38, 1e-50; growth tracker 2000, 5000, 2^31) is refused with
 *    PHX_EIO and the "phx_checkpoint_load: '<path>'" prefix, and leaves
 *    parameters, optimizer state, steps and scaler bitwise unchanged.
 * 2. Saves killed by SIGKILL leave temporary files; the next save of the
 *    same path removes them, keeps a temp that a live save holds locked,
 *    and touches nothing else. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "t/ckpt-snapshot.h"
#include "t/tap.h"

static phx_module *model;
static phx_optimizer *opt;
static phx_scaler *scaler;

static size_t snapshot(uint8_t *out)
{
    return ckpt_snapshot(model, opt, scaler, out);
}

static void fill(phx_tensor *t, float base)
{
    int64_t n = phx_tensor_numel(t);
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = base + 0.01f * (float)(i % 1000);
    phx_tensor_from_host(t, v);
    free(v);
}

/* Temporary files of `base` in dir (names base.tmp.*). */
static int count_temps(const char *dir, const char *base)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    char pre[256];
    snprintf(pre, sizeof pre, "%s.tmp.", base);
    while (d && (e = readdir(d))) n += strncmp(e->d_name, pre, strlen(pre)) == 0;
    if (d) closedir(d);
    return n;
}

/* Name of a temp of `base` in dir that is not in seen[] ("" if none). */
static void new_temp(const char *dir, const char *base, char seen[][256], int n_seen, char *out, size_t len)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char pre[256];
    snprintf(pre, sizeof pre, "%s.tmp.", base);
    out[0] = 0;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, pre, strlen(pre)) != 0) continue;
        bool old = false;
        for (int i = 0; i < n_seen; i++) old = old || strcmp(seen[i], e->d_name) == 0;
        if (!old) {
            snprintf(out, len, "%s", e->d_name);
            break;
        }
    }
    if (d) closedir(d);
}

static void touch(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
        (void)!write(fd, "junk", 4);
        close(fd);
    }
}

int main(void)
{
    plan(6 * 3 + 8);
    char dir[] = "/tmp/phx-ckpt-fail-XXXXXX", path[256], bad[256];
    if (!mkdtemp(dir)) {
        printf("Bail out! mkdtemp\n");
        return 1;
    }
    snprintf(path, sizeof path, "%s/model.st", dir);
    snprintf(bad, sizeof bad, "%s/bad.st", dir);
    phx_precision *fp16 = NULL;
    if (phx_precision_new("fp16", &fp16) != PHX_OK) {
        printf("Bail out! %s\n", phx_last_error());
        return 1;
    }

    /* 1. Scaler state validated before anything is written. */
    model = phx_linear_new(8, 5, true, NULL);
    phx_adam_opts ao = PHX_ADAM_OPTS_INIT;
    ao.amsgrad = true;
    opt = phx_adam_new(model, &ao);
    scaler = phx_scaler_new(fp16, NULL); /* growth interval 2000 */
    size_t np = phx_module_num_params(model);
    const char **sn;
    phx_tensor **st;
    size_t ns = phx_optimizer_state(opt, &sn, &st);
    /* The file's tensors differ from the live ones, so a partial load shows. */
    for (size_t i = 0; i < np; i++) fill(phx_param_value(phx_module_param(model, i)), 9.0f);
    for (size_t i = 0; i < ns; i++) fill(st[i], 7.0f);
    const char *names[16];
    phx_tensor *ts[16];
    char own[16][96];
    for (size_t i = 0; i < np; i++) {
        names[i] = phx_module_param_name(model, i);
        ts[i] = phx_param_value(phx_module_param(model, i));
    }
    for (size_t i = 0; i < ns; i++) {
        snprintf(own[i], sizeof own[i], "optim.%s", sn[i]);
        names[np + i] = own[i];
        ts[np + i] = st[i];
    }
    const char *cases[][2] = {{"1e300", "5"},   {"3.5e38", "5"},  {"1e-50", "5"},
                              {"1024", "2000"}, {"1024", "5000"}, {"1024", "2147483648"}};
    /* The live state: different values, 11 steps, scale 512, tracker 3. */
    for (size_t i = 0; i < np; i++) fill(phx_param_value(phx_module_param(model, i)), 0.5f);
    for (size_t i = 0; i < ns; i++) fill(st[i], 0.25f);
    phx_optimizer_set_steps(opt, 11);
    phx_scaler_set_state(scaler, 512.0, 3);
    size_t len = snapshot(NULL);
    uint8_t *before = malloc(len), *after = malloc(len);
    snapshot(before);
    for (size_t c = 0; c < 6; c++) {
        /* Written from fresh tensors holding the file's values. */
        phx_tensor *fts[16];
        for (size_t i = 0; i < np + ns; i++) {
            fts[i] = phx_tensor_new(PHX_F32, phx_tensor_ndim(ts[i]), phx_tensor_shape(ts[i]), phx_cpu());
            fill(fts[i], 9.0f);
        }
        phx_meta meta[4] = {{"optim.steps", "99"},
                            {"optim.type", phx_optimizer_type(opt)},
                            {"scaler.scale", cases[c][0]},
                            {"scaler.growth_tracker", cases[c][1]}};
        phx_safetensors_write(bad, names, fts, np + ns, meta, 4);
        for (size_t i = 0; i < np + ns; i++) phx_tensor_free(fts[i]);
        phx_status s = phx_checkpoint_load(bad, model, opt, scaler);
        char pre[300];
        snprintf(pre, sizeof pre, "phx_checkpoint_load: '%s'", bad);
        is_int(s, PHX_EIO, "scale '%s', tracker '%s': refused with PHX_EIO", cases[c][0], cases[c][1]);
        const char *e = phx_last_error();
        ok(e && strncmp(e, pre, strlen(pre)) == 0, "... message starts with the documented prefix (%s)", e);
        snapshot(after);
        ok(memcmp(before, after, len) == 0, "... parameters, optimizer state, steps and scaler bitwise unchanged");
    }

    /* 2. Killed saves. A 9.4 MB model: Linear(1536, 1536). */
    phx_module *big = phx_linear_new(1536, 1536, true, NULL);
    ok(phx_checkpoint_save(path, big, NULL, NULL, NULL, 0) == PHX_OK, "a good checkpoint saved (%s)", phx_last_error());
    struct stat good;
    stat(path, &good);
    /* Each child saves in a loop; it is killed as soon as a temp name not
     * seen before appears (its save is under way). A kill that lands before
     * the rename leaves that temp. Without the cleanup every such kill adds
     * one file; with it, the next save removes the previous leftover, so at
     * most one is ever there. */
    int kills = 0, hits = 0, most = 0;
    char seen[64][256];
    int n_seen = 0;
    for (int k = 0; k < 12; k++) {
        pid_t pid = fork();
        if (pid == 0) {
            for (;;) phx_checkpoint_save(path, big, NULL, NULL, NULL, 0);
        }
        char fresh[256] = "";
        struct timespec ts0 = {0, 200000};
        for (int w = 0; w < 20000 && !fresh[0]; w++) {
            new_temp(dir, "model.st", seen, n_seen, fresh, sizeof fresh);
            if (!fresh[0]) nanosleep(&ts0, NULL);
        }
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        kills++;
        if (fresh[0] && n_seen < 64) {
            snprintf(seen[n_seen++], sizeof seen[0], "%s", fresh);
            char fp[600];
            snprintf(fp, sizeof fp, "%s/%s", dir, fresh);
            hits += access(fp, F_OK) == 0;
        }
        int left = count_temps(dir, "model.st");
        if (left > most) most = left;
    }
    diag("%d SIGKILLs, %d of them mid-save; at most %d temporary files at once", kills, hits, most);
    ok(hits >= 2 && most <= 1, "killed saves do not pile up temporary files (%d mid-save kills, at most %d left)", hits,
       most);
    /* A temp that a live save holds (locked), and names that are not temps
     * of this path: all must survive. */
    char held[300], other[300], near[300];
    snprintf(held, sizeof held, "%s.tmp.Live01", path);
    snprintf(other, sizeof other, "%s/other.st.tmp.Abc123", dir);
    snprintf(near, sizeof near, "%s.tmp.notatemp", path);
    touch(other);
    touch(near);
    int hfd = open(held, O_RDWR | O_CREAT, 0600);
    ok(hfd >= 0 && flock(hfd, LOCK_EX) == 0, "a live save's temp is held locked");
    ok(phx_checkpoint_save(path, big, NULL, NULL, NULL, 0) == PHX_OK, "the next save of the same path succeeds");
    is_int(count_temps(dir, "model.st"), 2, "... and removed every stale temp (left: the locked one, the non-temp)");
    ok(access(held, F_OK) == 0 && access(other, F_OK) == 0 && access(near, F_OK) == 0,
       "... the locked temp, another path's temp and a name that is no temp are untouched");
    phx_module *back = phx_linear_new(1536, 1536, true, NULL);
    ok(phx_checkpoint_load(path, back, NULL, NULL) == PHX_OK, "the checkpoint loads");
    phx_tensor *wa = phx_param_value(phx_module_param(big, 1)), *wb = phx_param_value(phx_module_param(back, 1));
    float *ba = malloc(1536 * sizeof *ba), *bb = malloc(1536 * sizeof *bb);
    phx_tensor_to_host(wa, ba);
    phx_tensor_to_host(wb, bb);
    ok(memcmp(ba, bb, 1536 * sizeof *ba) == 0, "... with the saved values");
    close(hfd);
    unlink(held);
    unlink(other);
    unlink(near);
    unlink(path);
    unlink(bad);
    rmdir(dir);
    free(ba);
    free(bb);
    free(before);
    free(after);
    phx_module_free(back);
    phx_module_free(big);
    phx_optimizer_free(opt);
    phx_scaler_free(scaler);
    phx_module_free(model);
    phx_precision_free(fp16);
    return done_testing();
}
