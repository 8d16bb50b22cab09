/* phx-info: the library version, the plugin search path, and one line per
 * plugin found with its kind, name, version, ABI, path and "ok (priority
 * N)" or why the loader rejects it. Like ompi_info. Exit status 0. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/phalanx.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: phx-info [--parsable] [--in-process]\n"
            "Lists the Phalanx plugins found on the search path (PHX_PLUGIN_PATH, the\n"
            "phalanx/ folder beside libphalanx.so, the installed plugin folder).\n"
            "  --parsable    tab-separated lines: plugin, kind, name, version, ABI, path,\n"
            "                ok or rejected, priority or reason\n"
            "  --in-process  probe as for a world of threads in one process\n"
            "The local rank and size, as phx_world_from_env reads them from the launcher's\n"
            "variables (LOCAL_RANK, LOCAL_WORLD_SIZE, ...), are passed to the probes.\n");
}

int main(int argc, char **argv)
{
    int parsable = 0;
    phx_probe_ctx ctx = {0, 1, 0};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--parsable") == 0)
            parsable = 1;
        else if (strcmp(argv[i], "--in-process") == 0)
            ctx.in_process = 1;
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "phx-info: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    /* The library's one parser of the launcher's variables; an invalid one
     * is reported and the probes see a world of one. */
    phx_world w = PHX_WORLD_INIT;
    if (phx_world_from_env(&w) == PHX_OK) {
        ctx.local_size = w.local_size;
        ctx.local_rank = w.local_rank;
    } else {
        fprintf(stderr, "phx-info: %s; probing as local rank 0 of 1\n", phx_last_error());
    }

    int abi_major, abi_minor;
    const char *version = phx_version(&abi_major, &abi_minor);
    char path[16384];
    phx_plugin_search_path(path, sizeof path);

    /* The count may change between the two scans (a file appears): retry. */
    size_t cap = 0, n;
    phx_plugin_info *infos = NULL;
    while ((n = phx_plugin_scan(infos, cap, &ctx)) > cap) {
        free(infos);
        cap = n;
        infos = calloc(cap, sizeof *infos);
        if (!infos) {
            fprintf(stderr, "phx-info: out of memory for %zu plugins\n", cap);
            return 1;
        }
        infos[0].struct_size = sizeof *infos;
    }

    if (parsable) {
        printf("version\t%s\t%d.%d\t%d.%d\n", version, abi_major, abi_minor, PHX_PLUGIN_ABI_MAJOR,
               PHX_PLUGIN_ABI_MINOR);
        printf("path\t%s\n", path);
        for (size_t i = 0; i < n; i++) {
            const phx_plugin_info *p = &infos[i];
            if (p->ok)
                printf("plugin\t%s\t%s\t%s\t%u.%u\t%s\tok\t%d\n", p->kind, p->name, p->version, p->abi_major,
                       p->abi_minor, p->path, p->priority);
            else
                printf("plugin\t%s\t%s\t%s\t%u.%u\t%s\trejected\t%s\n", p->kind, p->name, p->version, p->abi_major,
                       p->abi_minor, p->path, p->reason);
        }
        free(infos);
        return 0;
    }

    printf("Phalanx %s (library ABI %d.%d, plugin ABI %d.%d)\n", version, abi_major, abi_minor, PHX_PLUGIN_ABI_MAJOR,
           PHX_PLUGIN_ABI_MINOR);
    printf("plugin search path (in order):\n");
    for (char *dir = path; *dir;) {
        char *colon = strchr(dir, ':');
        if (colon) *colon = '\0';
        printf("  %s\n", dir);
        if (!colon) break;
        dir = colon + 1;
    }
    if (n == 0) {
        printf("no plugins found (files named phx-<kind>-<name>.so)\n");
        free(infos);
        return 0;
    }
    printf("%-9s %-12s %-8s %-5s %s\n", "kind", "name", "version", "ABI", "path, status");
    for (size_t i = 0; i < n; i++) {
        const phx_plugin_info *p = &infos[i];
        char abi[32] = "-";
        if (p->abi_major || p->abi_minor) snprintf(abi, sizeof abi, "%u.%u", p->abi_major, p->abi_minor);
        printf("%-9s %-12s %-8s %-5s %s  ", p->kind, p->name, p->version, abi, p->path);
        if (p->ok)
            printf("ok (priority %d)\n", p->priority);
        else
            printf("rejected: %s\n", p->reason);
    }
    free(infos);
    return 0;
}
