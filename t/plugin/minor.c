/* The "minor too old" loader error. This Phalanx loads every minor from
 * 0 on, so this test builds its own copy of the loader
 * (src/plugin/plugin.c, src/plugin/plugin-find.c) with
 * PX_PLUGIN_MINOR_OLDEST one past this tree's minor, as a Phalanx that
 * dropped every minor up to this one would be. The test plugins are built with this tree's minor, so the
 * loader here needs PHX_PLUGIN_ABI_MINOR + 1. */
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

    const int m = PHX_PLUGIN_ABI_MINOR;
    char want[160];
    is_int(phx_plugin_load(PHX_PLUGIN_COMM, "alpha", &ctx, &d), PHX_EABI,
           "plugin of this tree's minor, loader needs the next one: PHX_EABI");
    ok(d == NULL, "*out unchanged");
    like(phx_last_error(), path, "the message names the file");
    snprintf(want, sizeof want, "plugin ABI 1.%d is too old: this Phalanx (plugin ABI 1.%d) needs ABI 1.%d or newer", m,
             m, m + 1);
    like(phx_last_error(), want, "and the versions");
    ok(getenv("FAKE_PROBED_alpha") == NULL, "no plugin code ran (probe never called)");

    is_int(phx_plugin_load(PHX_PLUGIN_COMM, "future", &ctx, &d), PHX_OK, "ABI 1.7 plugin: accepted");
    ok(d && d->abi_minor == 7 && strcmp(d->name, "future") == 0, "it is future, minor 7");
    d = NULL;
    is_int(phx_plugin_load(PHX_PLUGIN_COMM, NULL, &ctx, &d), PHX_OK, "unset: the best acceptable plugin");
    is_str(d ? d->name : NULL, "future", "only future is new enough (beta, priority 20, has this tree's minor)");
    return done_testing();
}
