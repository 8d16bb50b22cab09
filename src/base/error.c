/* Status names and the thread-local last error. */
#include "config.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "phalanx/error.h"
#include "phalanx/log.h"

#define PX_ERROR_LEN 4096 /* loader errors list every folder searched */

/* One buffer per thread: two threads failing at once never mix messages. */
static _Thread_local char px_last_error[PX_ERROR_LEN];

const char *phx_last_error(void)
{
    return px_last_error;
}

void phx_error_clear(void)
{
    px_last_error[0] = '\0';
}

const char *phx_status_name(phx_status st)
{
    switch (st) {
    case PHX_OK: return "PHX_OK";
    case PHX_EINVAL: return "PHX_EINVAL";
    case PHX_ENOMEM: return "PHX_ENOMEM";
    case PHX_ENOTFOUND: return "PHX_ENOTFOUND";
    case PHX_EABI: return "PHX_EABI";
    case PHX_ETIMEOUT: return "PHX_ETIMEOUT";
    case PHX_EPEER: return "PHX_EPEER";
    case PHX_EDESYNC: return "PHX_EDESYNC";
    case PHX_EIO: return "PHX_EIO";
    case PHX_EUNSUPPORTED: return "PHX_EUNSUPPORTED";
    case PHX_EDEVICE: return "PHX_EDEVICE";
    case PHX_ESTATE: return "PHX_ESTATE";
    case PHX_EINTERNAL: return "PHX_EINTERNAL";
    }
    return "PHX_E?";
}

phx_status phx_error(phx_status st, const char *fmt, ...)
{
    /* Format into a scratch buffer first: the arguments may point into the
     * current message (phx_error(st, "loading x: %s", phx_last_error())). */
    char buf[PX_ERROR_LEN];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) snprintf(buf, sizeof buf, "%s (unformattable message '%s')", phx_status_name(st), fmt);
    memcpy(px_last_error, buf, sizeof buf);
    phx_log(PHX_LOG_DEBUG, "%s: %s", phx_status_name(st), px_last_error);
    return st;
}

phx_status px_error_null(const char *fn, const char *what)
{
    /* A NULL argument is most often the result of a constructor that just
     * failed (phx_sequential_add(m, phx_linear_new(-3, ...))): keep its
     * message, which names the real cause, after ours. It may also be an
     * error handled long before (nothing here tells which), so the words
     * say only where it came from. */
    if (px_last_error[0])
        return phx_error(PHX_EINVAL,
                         "%s: %s is NULL; the last error on this thread (perhaps from the constructor that "
                         "returned the NULL, perhaps from an earlier call): %s",
                         fn, what, px_last_error);
    return phx_error(PHX_EINVAL, "%s: %s is NULL", fn, what);
}
