/* phxrun's rank output: log files and the line-prefixing tee (see
 * phxrun-logs.h). */
#include "config.h"
#include "tools/phxrun-logs.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

enum { LINE_MAX_BYTES = 64 * 1024 };

/* mkdir -p; 0 or -1 with errno. */
static int make_dirs(const char *path)
{
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0777) && errno != EEXIST) return -1;
        *s = '/';
    }
    return mkdir(p, 0777) && errno != EEXIST ? -1 : 0;
}

static int write_all(int fd, const char *b, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

/* One stream of the tee: bytes go to the file as they come and to the
 * terminal a whole line at a time, behind the prefix. */
typedef struct stream {
    int in, file, term;
    size_t len;
    char line[LINE_MAX_BYTES];
} stream;

static void emit(stream *s, const char *prefix, size_t plen)
{
    if (s->len == 0) return;
    char out[LINE_MAX_BYTES + 64];
    memcpy(out, prefix, plen);
    memcpy(out + plen, s->line, s->len);
    size_t n = plen + s->len;
    if (out[n - 1] != '\n') out[n++] = '\n';
    write_all(s->term, out, n);
    s->len = 0;
}

/* 1 while the stream is open, 0 at its end. */
static int pump(stream *s, const char *prefix, size_t plen)
{
    char buf[8192];
    ssize_t n = read(s->in, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return 1;
    if (n <= 0) {
        emit(s, prefix, plen);
        return 0;
    }
    if (s->file >= 0 && write_all(s->file, buf, (size_t)n)) s->file = -1; /* a full disk loses the file, not the run */
    for (ssize_t i = 0; i < n; i++) {
        s->line[s->len++] = buf[i];
        if (buf[i] == '\n' || s->len == sizeof s->line) emit(s, prefix, plen);
    }
    return 1;
}

static void tee_main(int rank, int in_out, int in_err, int file_out, int file_err)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) signal(sigs[i], SIG_IGN);
    /* Only this rank's pipes: another rank's end held here would keep
     * its tee from ever seeing the end. */
    long maxfd = sysconf(_SC_OPEN_MAX);
    for (int fd = 3; fd < (maxfd > 0 && maxfd < 65536 ? maxfd : 65536); fd++)
        if (fd != in_out && fd != in_err && fd != file_out && fd != file_err) close(fd);
    static stream s[2];
    s[0] = (stream){.in = in_out, .file = file_out, .term = STDOUT_FILENO};
    s[1] = (stream){.in = in_err, .file = file_err, .term = STDERR_FILENO};
    char prefix[32];
    size_t plen = (size_t)snprintf(prefix, sizeof prefix, "[rank%d]: ", rank);
    int open_n = (in_out >= 0) + (in_err >= 0);
    struct pollfd p[2] = {{.fd = in_out, .events = POLLIN}, {.fd = in_err, .events = POLLIN}};
    while (open_n > 0) {
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        for (int i = 0; i < 2; i++) {
            if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            if (!pump(&s[i], prefix, plen)) {
                p[i].fd = -1;
                open_n--;
            }
        }
    }
    _exit(0);
}

static int open_log(const char *dir, const char *name)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) fprintf(stderr, "phxrun: --log-dir: cannot write '%s': %s\n", path, strerror(errno));
    return fd;
}

/* Starts the tee process on r's read ends and files; its pid, or -1. */
static pid_t start_tee(const rank_out *r)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) tee_main(r->rank, r->rd[0], r->rd[1], r->file[0], r->file[1]);
    return pid;
}

int rank_out_open(rank_out *r, const char *log_dir, int attempt, int rank, int tee)
{
    r->fd[0] = r->fd[1] = -1;
    r->rd[0] = r->rd[1] = r->file[0] = r->file[1] = -1;
    r->tee = 0;
    r->rank = rank;
    r->restarts = 0;
    int file[2] = {-1, -1};
    if (log_dir) {
        char dir[PATH_MAX];
        if (snprintf(dir, sizeof dir, "%s/attempt_%d/%d", log_dir, attempt, rank) >= (int)sizeof dir ||
            make_dirs(dir)) {
            fprintf(stderr, "phxrun: --log-dir: cannot make '%s': %s\n", dir, strerror(errno));
            return -1;
        }
        if ((file[0] = open_log(dir, "stdout.log")) < 0 || (file[1] = open_log(dir, "stderr.log")) < 0) {
            if (file[0] >= 0) close(file[0]);
            return -1;
        }
    }
    if (!tee) {
        r->fd[0] = file[0];
        r->fd[1] = file[1];
        return 0;
    }
    /* A stream --tee leaves out goes to its file (or the terminal) as
     * without --tee. */
    int po[2] = {-1, -1}, pe[2] = {-1, -1};
    if (!(tee & 1)) r->fd[0] = file[0], file[0] = -1;
    if (!(tee & 2)) r->fd[1] = file[1], file[1] = -1;
    if (((tee & 1) && pipe2(po, O_CLOEXEC)) || ((tee & 2) && pipe2(pe, O_CLOEXEC))) {
        fprintf(stderr, "phxrun: --tee: pipe: %s\n", strerror(errno));
        for (int i = 0; i < 2; i++) {
            if (po[i] >= 0) close(po[i]);
            if (pe[i] >= 0) close(pe[i]);
        }
        goto fail;
    }
    r->rd[0] = po[0];
    r->rd[1] = pe[0];
    r->file[0] = file[0];
    r->file[1] = file[1];
    pid_t pid = start_tee(r);
    if (pid < 0) {
        fprintf(stderr, "phxrun: --tee: fork: %s\n", strerror(errno));
        if (po[1] >= 0) close(po[1]);
        if (pe[1] >= 0) close(pe[1]);
        rank_out_release(r);
        return -1;
    }
    if (tee & 1) r->fd[0] = po[1];
    if (tee & 2) r->fd[1] = pe[1];
    r->tee = pid;
    return 0;
fail:
    rank_out_close(r);
    for (int i = 0; i < 2; i++)
        if (file[i] >= 0) close(file[i]);
    return -1;
}

void rank_out_apply(const rank_out *r)
{
    for (int i = 0; i < 2; i++)
        if (r->fd[i] >= 0) dup2(r->fd[i], STDOUT_FILENO + i);
}

void rank_out_close(rank_out *r)
{
    for (int i = 0; i < 2; i++) {
        if (r->fd[i] >= 0) close(r->fd[i]);
        r->fd[i] = -1;
    }
}

void rank_out_tee_ended(rank_out *r, int status)
{
    pid_t old = r->tee;
    r->tee = 0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return; /* the rank's pipes ended */
    char how[96];
    if (WIFSIGNALED(status))
        snprintf(how, sizeof how, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(status));
    pid_t pid = -1;
    char why[128] = "";
    if (r->restarts >= TEE_RESTARTS || (r->rd[0] < 0 && r->rd[1] < 0)) {
        snprintf(why, sizeof why, "not replaced again (%d replacements used)", r->restarts);
    } else {
        r->restarts++;
        if ((pid = start_tee(r)) < 0) snprintf(why, sizeof why, "no new helper (fork: %s)", strerror(errno));
    }
    if (pid > 0) {
        r->tee = pid;
        fprintf(stderr,
                "phxrun: the --tee helper of rank %d (pid %d) died: %s; a new helper (pid %d) copies the rank's "
                "output from here (replacement %d of at most %d)\n",
                r->rank, (int)old, how, (int)pid, r->restarts, TEE_RESTARTS);
        return;
    }
    fprintf(stderr,
            "phxrun: the --tee helper of rank %d (pid %d) died: %s; %s, so the rank's further output goes "
            "nowhere and its writes fail (SIGPIPE)\n",
            r->rank, (int)old, how, why);
    rank_out_release(r);
}

void rank_out_release(rank_out *r)
{
    for (int i = 0; i < 2; i++) {
        if (r->rd[i] >= 0) close(r->rd[i]);
        if (r->file[i] >= 0) close(r->file[i]);
        r->rd[i] = r->file[i] = -1;
    }
}
