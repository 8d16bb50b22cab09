/* Checkpoints are written with the mode open(2) would give them (0666
 * less the umask), not mkostemp's 0600, and a file that is replaced keeps
 * its mode, as torch.save's open(path, "wb") does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

static int mode_of(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (int)(st.st_mode & 07777) : -1;
}

int main(void)
{
    plan(4);
    char dir[] = "/tmp/phx-mode-XXXXXX", path[64];
    if (!mkdtemp(dir)) {
        diag("mkdtemp failed");
        return 1;
    }
    snprintf(path, sizeof path, "%s/m.st", dir);
    phx_rng *rng = phx_rng_new(1);
    phx_module *m = phx_linear_new(3, 2, true, rng);
    umask(022);
    phx_status st = phx_checkpoint_save_model(path, m);
    int got = mode_of(path);
    ok(st == PHX_OK && got == 0644, "umask 022: a new file is 0644 (%o)", got);
    unlink(path);
    umask(077);
    st = phx_checkpoint_save_model(path, m);
    got = mode_of(path);
    ok(st == PHX_OK && got == 0600, "umask 077: a new file is 0600 (%o)", got);
    chmod(path, 0640);
    umask(022);
    st = phx_checkpoint_save_model(path, m);
    got = mode_of(path);
    ok(st == PHX_OK && got == 0640, "a replaced file keeps its mode 0640 (%o)", got);
    unlink(path);
    umask(002);
    st = phx_checkpoint_save(path, m, NULL, NULL, NULL, 0);
    got = mode_of(path);
    ok(st == PHX_OK && got == 0664, "umask 002: a full checkpoint is 0664 (%o)", got);
    unlink(path);
    rmdir(dir);
    phx_module_free(m);
    phx_rng_free(rng);
    return done_testing();
}
