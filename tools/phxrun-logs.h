/* phxrun's rank output: --log-dir writes each rank's stdout and stderr to
 * DIR/attempt_K/RANK/{stdout,stderr}.log; --tee also copies them to the
 * terminal, each line prefixed "[rankR]:" (torchrun's "[default0]:").
 *
 * Without --tee the rank writes its files itself (no process in between).
 * With --tee a tee process per rank, a child of phxrun, reads two pipes and
 * writes whole lines, so lines of different ranks never interleave; it
 * ignores the signals phxrun forwards and ends when the rank and whatever
 * it started have closed the pipes. phxrun holds the pipes' read ends
 * and the log files too, so a helper that dies (killed, out of memory)
 * never makes the rank's writes fail with SIGPIPE: phxrun names the
 * helper and starts another on the same pipes and files, up to
 * TEE_RESTARTS times per rank. */
#ifndef PHX_TOOLS_PHXRUN_LOGS_H
#define PHX_TOOLS_PHXRUN_LOGS_H

#include <sys/types.h>

enum { TEE_RESTARTS = 3 }; /* helpers started again per rank, at most */

typedef struct rank_out {
    int fd[2]; /* what the rank gets as stdout and stderr; -1: inherit */
    pid_t tee; /* the tee process, 0 if none */
    int rd[2], file[2]; /* with tee: phxrun's copies of the read ends and the log files; -1: none */
    int rank, restarts;
} rank_out;

/* Makes DIR/attempt_K/RANK (log_dir may be NULL) and, with tee, the pipes
 * and the tee process. tee is torchrun's value: 0 none, 1 stdout, 2
 * stderr, 3 both; a stream left out goes to its log file alone (or, with
 * no log_dir, to the terminal unprefixed). Returns 0, or -1 after
 * printing why. */
int rank_out_open(rank_out *r, const char *log_dir, int attempt, int rank, int tee);

/* In the rank, before exec: stdout and stderr become r's. */
void rank_out_apply(const rank_out *r);

/* In phxrun after the rank was forked: closes phxrun's copies of the
 * rank's ends. */
void rank_out_close(rank_out *r);

/* In phxrun when r's tee process ended with status: a helper that did not
 * exit 0 is reported on stderr and replaced (r->tee is the new one, or 0
 * once TEE_RESTARTS were used up, when phxrun lets go of the pipes). */
void rank_out_tee_ended(rank_out *r, int status);

/* After the tee has ended or been killed: closes phxrun's read ends and
 * log files. */
void rank_out_release(rank_out *r);

#endif
