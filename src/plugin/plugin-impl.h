/* Plugin loader internals: the search path, the plugin files found on it,
 * and the checks made on a descriptor (internal, px_ prefix). */
#ifndef PHX_CORE_PLUGIN_IMPL_H
#define PHX_CORE_PLUGIN_IMPL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include "phalanx/plugin.h"

/* The oldest descriptor minor the loader accepts. A build may raise it
 * (t/plugin/minor builds the loader with 2, as a Phalanx that dropped
 * minors 0 and 1 would be, for the "minor too old" error). */
#ifndef PX_PLUGIN_MINOR_OLDEST
#define PX_PLUGIN_MINOR_OLDEST PHX_PLUGIN_ABI_MINOR_OLDEST
#endif

#define PX_PLUGIN_NAME_MAX 64 /* phx_plugin_info.name, with the NUL */
#define PX_PLUGIN_WHY_MAX 512 /* phx_plugin_info.reason, with the NUL */

/* One folder of the search path. */
typedef struct px_plugin_dir {
    char path[PATH_MAX]; /* absolute, as the user (or the build) wrote it */
    int exists; /* 1 when it is a readable folder */
} px_plugin_dir;

/* What became of a plugin file. */
typedef enum px_cand_state {
    PX_CAND_UNSEEN = 0, /* not evaluated (yet) */
    PX_CAND_OK, /* loaded, checked, probe accepted */
    PX_CAND_BROKEN, /* dlopen, symbol or descriptor check failed */
    PX_CAND_DECLINED, /* probe returned < 0 */
    PX_CAND_SHADOWED, /* same kind and name earlier in the search path */
    PX_CAND_BADNAME /* phx-*-*.so whose kind or name is not valid */
} px_cand_state;

/* One file phx-<kind>-<name>.so found on the search path. */
typedef struct px_cand {
    char path[PATH_MAX];
    char kind[16]; /* from the file name */
    char name[PX_PLUGIN_NAME_MAX];
    phx_plugin_kind kind_id; /* 0 when kind is not a known kind */
    px_cand_state state;
    int priority; /* probe result when PX_CAND_OK */
    int has_abi; /* 1 when abi_major/minor were read */
    uint32_t abi_major, abi_minor;
    char version[64]; /* the descriptor's, once its checks passed */
    const phx_plugin_desc *desc; /* when every check passed */
    char why[PX_PLUGIN_WHY_MAX]; /* why not OK */
} px_cand;

/* The search path: PHX_PLUGIN_PATH entries (relative ones resolved against
 * the working directory, empty ones skipped), the phalanx/ folder beside
 * libphalanx.so, PHX_PKGLIBDIR; a folder seen before is skipped. On
 * success *dirs is a px_malloc'd array (px_free it). */
phx_status px_plugin_dirs(px_plugin_dir **dirs, size_t *ndirs);

/* Lists the plugin files in dirs, in search order (by file name within a
 * folder); kind 0 lists every phx-*-*.so, otherwise that kind only. Marks
 * later duplicates PX_CAND_SHADOWED and bad names PX_CAND_BADNAME; the
 * rest are PX_CAND_UNSEEN. *cands is px_malloc'd (NULL when none). */
phx_status px_plugin_find(const px_plugin_dir *dirs, size_t ndirs, phx_plugin_kind kind, px_cand **cands,
                          size_t *ncands);

/* Opens c->path once per process (dlopen RTLD_NOW|RTLD_LOCAL, kept open),
 * checks its descriptor against the file name and oldest_minor without
 * running plugin code, then calls probe(ctx). Sets c->state, c->priority,
 * c->desc and c->why. */
void px_plugin_evaluate(px_cand *c, const phx_probe_ctx *ctx, uint32_t oldest_minor);

/* 1 for a valid plugin name: 1..63 of [A-Za-z0-9_.+-]. */
int px_plugin_name_ok(const char *name);
/* PHX_PLUGIN_COMM etc. from "comm"; 0 when unknown. */
phx_plugin_kind px_plugin_kind_from_name(const char *kind);

#endif
