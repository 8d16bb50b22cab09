/* A plugin built only for t/plugin/loader: each phx-comm-<name>.so under
 * t/plugins/loader/ and loader2/ is this file with different FAKE_* macros, so each
 * loader error has a plugin that triggers it (tools/local.mk lists them).
 *   FAKE_NAME       name in the descriptor (a bare word, stringified)
 *   FAKE_KIND       descriptor kind (default PHX_PLUGIN_COMM)
 *   FAKE_MAJOR/MINOR/SIZE  descriptor ABI and struct_size
 *   FAKE_PRIORITY   probe result; FAKE_PRIORITY_IN_PROCESS when ctx->in_process
 *   FAKE_DECLINE    probe declines with this reason (a bare word)
 *   FAKE_VERSION    version string (a bare word)
 *   FAKE_NO_DESC / FAKE_TINY_DESC / FAKE_FUNCTION_DESC / FAKE_UNDEFINED /
 *   FAKE_NO_VTABLE / FAKE_BORROW  the broken variants
 * Its probe records that it ran in the environment variable
 * FAKE_PROBED_<name>, so the test can tell that no code of a rejected
 * plugin ran. */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include "phalanx/plugin.h"
#include "phalanx/plugin/comm_v1.h"

#define FAKE_STR_(x) #x
#define FAKE_STR(x) FAKE_STR_(x)

#ifndef FAKE_KIND
#define FAKE_KIND PHX_PLUGIN_COMM
#endif
#ifndef FAKE_MAJOR
#define FAKE_MAJOR PHX_PLUGIN_ABI_MAJOR
#endif
#ifndef FAKE_MINOR
#define FAKE_MINOR PHX_PLUGIN_ABI_MINOR
#endif
#ifndef FAKE_SIZE
#define FAKE_SIZE sizeof(phx_plugin_desc)
#endif
#ifndef FAKE_PRIORITY
#define FAKE_PRIORITY 0
#endif
#ifndef FAKE_PRIORITY_IN_PROCESS
#define FAKE_PRIORITY_IN_PROCESS FAKE_PRIORITY
#endif
#ifndef FAKE_VERSION
#define FAKE_VERSION 1.0
#endif

#ifdef FAKE_UNDEFINED
/* Defined nowhere: dlopen(RTLD_NOW) fails with "undefined symbol". */
extern int fake_no_such_symbol;
#endif

static int fake_probe(const phx_probe_ctx *ctx, char *why, size_t why_len) __attribute__((unused));
static int fake_probe(const phx_probe_ctx *ctx, char *why, size_t why_len)
{
    /* Only the first time: concurrent probes then never write environ. */
    if (!getenv("FAKE_PROBED_" FAKE_STR(FAKE_NAME))) setenv("FAKE_PROBED_" FAKE_STR(FAKE_NAME), "1", 1);
#ifdef FAKE_UNDEFINED
    if (fake_no_such_symbol) return 0;
#endif
#ifdef FAKE_DECLINE
    (void)ctx;
    snprintf(why, why_len, "%s", FAKE_STR(FAKE_DECLINE));
    return -1;
#else
    (void)why;
    (void)why_len;
    return ctx->in_process ? FAKE_PRIORITY_IN_PROCESS : FAKE_PRIORITY;
#endif
}

/* Never called: the selection tests only load descriptors. */
static const phx_comm_v1 fake_vtable __attribute__((unused)) = {0};

#if defined(FAKE_BORROW)
/* No descriptor of its own: it links libfakedesc.so, which has one, and
 * dlsym(handle) searches dependencies too. */
extern const phx_plugin_desc phx_plugin_v1;
PHX_PLUGIN_EXPORT const void *fake_borrowed = &phx_plugin_v1;
#elif defined(FAKE_NO_DESC)
PHX_PLUGIN_EXPORT const phx_plugin_desc phx_plugin_v2 =
    PHX_PLUGIN_DESC_INIT(FAKE_KIND, FAKE_STR(FAKE_NAME), "1.0", "wrong symbol name", fake_probe, &fake_vtable);
#elif defined(FAKE_TINY_DESC)
/* 8 bytes: not even the descriptor's header. */
PHX_PLUGIN_EXPORT const uint32_t phx_plugin_v1[2] = {PHX_PLUGIN_ABI_MAJOR, PHX_PLUGIN_ABI_MINOR};
#elif defined(FAKE_FUNCTION_DESC)
PHX_PLUGIN_EXPORT void phx_plugin_v1(void);
void phx_plugin_v1(void)
{
    setenv("FAKE_PROBED_" FAKE_STR(FAKE_NAME), "1", 1);
}
#else
PHX_PLUGIN_EXPORT const phx_plugin_desc phx_plugin_v1 = {FAKE_MAJOR,
                                                         FAKE_MINOR,
                                                         (uint32_t)(FAKE_SIZE),
                                                         (uint32_t)(FAKE_KIND),
                                                         FAKE_STR(FAKE_NAME),
                                                         FAKE_STR(FAKE_VERSION),
                                                         "a plugin for t/plugin/loader",
                                                         fake_probe,
#ifdef FAKE_NO_VTABLE
                                                         NULL
#else
                                                         &fake_vtable
#endif
};
#endif
