/* Phalanx — logging. Lines go to stderr as "[phx rank R] LEVEL: msg". */
#ifndef PHALANX_LOG_H
#define PHALANX_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum phx_log_level { PHX_LOG_ERROR = 0, PHX_LOG_WARN = 1, PHX_LOG_INFO = 2, PHX_LOG_DEBUG = 3 } phx_log_level;

/* Current level: from PHX_LOG (error|warn|info|debug, default warn) on
 * first use, or the last phx_log_set_level(). */
phx_log_level phx_log_get_level(void);
void phx_log_set_level(phx_log_level level);

/* Rank printed in every line (-1, the default, prints no rank). Set by
 * phx_comm_init. The calling thread prints this rank from then on; other
 * threads of the process print the last rank set by any thread (in a
 * world of threads each rank's thread therefore prints its own). */
void phx_log_set_rank(int rank);

/* Writes one line if level <= phx_log_get_level(). Thread-safe. */
void phx_log(phx_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif
#endif
