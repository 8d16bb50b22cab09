/* The "minor too old" loader error. This Phalanx loads every minor from
 * 0 on, so this test builds its own copy of the loader
 * (core/plugin/plugin.c, core/plugin/plugin-find.c) with
 * PX_PLUGIN_MINOR_OLDEST=2, as a Phalanx that dropped minors 0 and 1
 * would be. The test plugins are built with this tree's minor (1). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

int main(void)
{
    char L[PATH_MAX], path[PATH_MAX + 32];
    const phx_probe_ctx ctx = {0, 1, 0};
    const phx_plugin_desc *d = NULL;
    const char *b = getenv("top_builddir");
    snprintf(L, sizeof L, "%s/t/plugins/loader/.libs", b ? b : ".");
    snprintf(path, sizeof path, "%s/phx-comm-alpha.so", L);
    if (access(path, R_OK) != 0) {
        printf("Bail out! %s not built (make check builds it)\n", path);
        return 1;
    }
    plan(9);
    setenv("PHX_PLUGIN_PATH", L, 1);

    is_int(phx_plugin_load(PHX_PLUGIN_COMM, "alpha", &ctx, &d), PHX_EABI, "ABI 1.1 plugin, loader needs 1.2: PHX_EABI");
    ok(d == NULL, "*out unchanged");
    like(phx_last_error(), path, "the message names the file");
    like(phx_last_error(), "plugin ABI 1.1 is too old: this Phalanx (plugin ABI 1.1) needs ABI 1.2 or newer",
         "and the versions");
    ok(getenv("FAKE_PROBED_alpha") == NULL, "no plugin code ran (probe never called)");

    is_int(phx_plugin_load(PHX_PLUGIN_COMM, "future", &ctx, &d), PHX_OK, "ABI 1.7 plugin: accepted");
    ok(d && d->abi_minor == 7 && strcmp(d->name, "future") == 0, "it is future, minor 7");
    d = NULL;
    is_int(phx_plugin_load(PHX_PLUGIN_COMM, NULL, &ctx, &d), PHX_OK, "unset: the best acceptable plugin");
    is_str(d ? d->name : NULL, "future", "only future is new enough (beta, priority 20, is 1.1)");
    return done_testing();
}
