/* Phalanx — status codes and the thread-local last error. */
#ifndef PHALANX_ERROR_H
#define PHALANX_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

/* Every fallible function returns a phx_status (constructors return NULL).
 * On failure phx_last_error() holds one sentence naming the object, the
 * value and what was expected. */
typedef enum phx_status {
    PHX_OK = 0,
    PHX_EINVAL = -1, /* bad argument: shape, dtype, range, NULL */
    PHX_ENOMEM = -2, /* allocation failed (host or device) */
    PHX_ENOTFOUND = -3, /* file, plugin, key or device not found */
    PHX_EABI = -4, /* plugin ABI/version/descriptor mismatch */
    PHX_ETIMEOUT = -5, /* PHX_TIMEOUT (or the given timeout) expired */
    PHX_EPEER = -6, /* a peer rank closed its connection or died */
    PHX_EDESYNC = -7, /* ranks disagree (models, collectives) */
    PHX_EIO = -8, /* file or socket I/O error, malformed file */
    PHX_EUNSUPPORTED = -9, /* valid request this build/device cannot do */
    PHX_EDEVICE = -10, /* device runtime error (CUDA, NCCL) */
    PHX_ESTATE = -11, /* call not valid in the object's state */
    PHX_EINTERNAL = -12 /* a bug in Phalanx: please report */
} phx_status;

/* The last error message of the calling thread ("" when none). The
 * pointer stays valid until the thread's next Phalanx call that fails. */
const char *phx_last_error(void);

/* "PHX_EINVAL" etc.; "PHX_E?" for unknown values. Never NULL. */
const char *phx_status_name(phx_status st);

/* Sets the calling thread's last error (printf format) and returns st.
 * Exported for plugins and user modules:
 *     return phx_error(PHX_EINVAL, "mylayer: input has %d dims, expected 2", n); */
phx_status phx_error(phx_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Clears the calling thread's last error. */
void phx_error_clear(void);

#ifdef __cplusplus
}
#endif
#endif
