/* phxrun's rank output: --log-dir writes each rank's stdout and stderr to
 * DIR/attempt_K/RANK/{stdout,stderr}.log; --tee also copies them to the
 * terminal, each line prefixed "[rankR]:" (torchrun's "[default0]:").
 *
 * Without --tee the rank writes its files itself (no process in between).
 * With --tee a tee process per rank, a child of phxrun, reads two pipes and
 * writes whole lines, so lines of different ranks never interleave; it
 * ignores the signals phxrun forwards and ends when the rank and whatever
 * it started have closed the pipes. */
#ifndef PHX_TOOLS_PHXRUN_LOGS_H
#define PHX_TOOLS_PHXRUN_LOGS_H

#include <sys/types.h>

typedef struct rank_out {
    int fd[2]; /* what the rank gets as stdout and stderr; -1: inherit */
    pid_t tee; /* the tee process, 0 if none */
} rank_out;

/* Makes DIR/attempt_K/RANK (log_dir may be NULL) and, with tee, the pipes
 * and the tee process. Returns 0, or -1 after printing why. */
int rank_out_open(rank_out *r, const char *log_dir, int attempt, int rank, int tee);

/* In the rank, before exec: stdout and stderr become r's. */
void rank_out_apply(const rank_out *r);

/* In phxrun after the rank was forked: closes phxrun's copies. */
void rank_out_close(rank_out *r);

#endif
