/* The store's job token: a secret every rank of a job shares
 * (PHX_STORE_TOKEN, made by phxrun, else the user's ~/.phalanx/job-token,
 * made on first use). A client proves it knows the token,
 * and the server proves it back, without sending it: each side answers
 * the other's random nonce with HMAC-SHA256(token, label | client nonce |
 * server nonce) from OpenSSL's libcrypto. What this protects and what it
 * does not: doc/reference/store.md. */
#include "config.h"
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "src/world/store-server.h"
#include "src/base/util.h"

int px_store_insecure(void)
{
    const char *v = getenv("PHX_STORE_INSECURE");
    return v && strcmp(v, "1") == 0;
}

/* Creates path with a fresh secret (64 hex digits) unless it exists: the
 * secret goes to a 0600 file made with O_EXCL beside it, then a hard link
 * publishes it whole, so a rank never reads half a secret and the first
 * of several ranks racing wins. 0: it exists now; -1: cannot (errno). */
static int make_secret(const char *dir, const char *path)
{
    uint8_t raw[32];
    char hex[2 * sizeof raw + 2], tmp[PATH_MAX];
    if (px_store_nonce(raw, sizeof raw)) return errno = EIO, -1;
    for (size_t i = 0; i < sizeof raw; i++) snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    hex[2 * sizeof raw] = '\n';
    hex[2 * sizeof raw + 1] = 0;
    if ((size_t)snprintf(tmp, sizeof tmp, "%s/.job-token.%ld.%02x%02x", dir, (long)getpid(), raw[0] ^ raw[31],
                         raw[1] ^ raw[30]) >= sizeof tmp)
        return errno = ENAMETOOLONG, -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return -1;
    size_t n = strlen(hex);
    int ok = write(fd, hex, n) == (ssize_t)n && fsync(fd) == 0;
    int e = errno;
    close(fd);
    if (ok && link(tmp, path) < 0 && errno != EEXIST) ok = 0, e = errno;
    unlink(tmp);
    return ok ? 0 : (errno = e, -1);
}

/* The secret in ~/.phalanx/job-token. *len 0 when there is no usable home
 * folder (why in src); an error for a file that may not be used. */
static phx_status home_secret(const char *who, uint8_t *buf, size_t *len, char *src, size_t srclen)
{
    const char *home = getenv("HOME");
    char dir[PATH_MAX], path[PATH_MAX];
    struct stat sb;
    *len = 0;
    if (!home || !*home) {
        snprintf(src, srclen, "HOME is not set");
        return PHX_OK;
    }
    if ((size_t)snprintf(dir, sizeof dir - 16, "%s/.phalanx", home) >= sizeof dir - 16) {
        snprintf(src, srclen, "HOME is too long");
        return PHX_OK;
    }
    if ((size_t)snprintf(path, sizeof path, "%s/job-token", dir) >= sizeof path) return PHX_OK;
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        snprintf(src, srclen, "cannot create %s: %s", dir, strerror(errno));
        return PHX_OK;
    }
    if (stat(dir, &sb) < 0 || !S_ISDIR(sb.st_mode)) {
        snprintf(src, srclen, "%s is not a folder", dir);
        return PHX_OK;
    }
    if (sb.st_uid != geteuid() || (sb.st_mode & 022))
        return phx_error(PHX_EIO,
                         "%s: refusing %s: the folder of the job secret must belong to this user (uid %ld) and be "
                         "writable by nobody else (it is uid %ld, mode %04o): chmod 700 %s",
                         who, path, (long)geteuid(), (long)sb.st_uid, (unsigned)(sb.st_mode & 07777), dir);
    int fd = -1, e = 0;
    bool irregular = false;
    for (int tries = 0; fd < 0 && !irregular && tries < 3; tries++) {
        fd = px_open_regular(path, &irregular); /* open() would wait on a FIFO */
        e = errno; /* the open's, not make_secret's */
        if (fd < 0 && !irregular && e == ENOENT && make_secret(dir, path) < 0) {
            snprintf(src, srclen, "cannot create %s: %s", path, strerror(errno));
            return PHX_OK;
        }
    }
    if (irregular) return phx_error(PHX_EIO, "%s: refusing %s: not a regular file", who, path);
    if (fd < 0) {
        struct stat lb;
        if (e == ELOOP || (e == ENOENT && lstat(path, &lb) == 0))
            return phx_error(PHX_EIO,
                             "%s: refusing %s: a symbolic link that leads to no file (%s); delete it to get a new "
                             "secret",
                             who, path, strerror(e));
        snprintf(src, srclen, "cannot open %s: %s", path, strerror(e));
        return PHX_OK;
    }
    phx_status st = PHX_OK;
    ssize_t n = 0;
    uint8_t raw[PX_STORE_MAX_TOKEN + 2];
    if (fstat(fd, &sb) < 0)
        st = phx_error(PHX_EIO, "%s: cannot read %s: %s", who, path, strerror(errno));
    else if (sb.st_uid != geteuid())
        st = phx_error(PHX_EIO,
                       "%s: refusing %s: it belongs to uid %ld, not to this user (uid %ld); the job secret "
                       "must be the user's own",
                       who, path, (long)sb.st_uid, (long)geteuid());
    else if (sb.st_mode & 077)
        st = phx_error(PHX_EIO,
                       "%s: refusing %s: its mode %04o lets others read or change the job secret; "
                       "chmod 600 %s (or delete it to get a new one)",
                       who, path, (unsigned)(sb.st_mode & 07777), path);
    else if (sb.st_size > PX_STORE_MAX_TOKEN + 2) /* (a secret and its line end) */
        st = phx_error(PHX_EIO, "%s: refusing %s: it is %lld bytes long, a job secret at most %u", who, path,
                       (long long)sb.st_size, PX_STORE_MAX_TOKEN);
    else
        while (n < PX_STORE_MAX_TOKEN + 2) {
            ssize_t r = read(fd, raw + n, PX_STORE_MAX_TOKEN + 2 - (size_t)n);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) st = phx_error(PHX_EIO, "%s: cannot read %s: %s", who, path, strerror(errno));
            if (r <= 0) break;
            n += r;
        }
    close(fd);
    if (st) return st;
    while (n > 0 && (raw[n - 1] == '\n' || raw[n - 1] == '\r' || raw[n - 1] == ' ')) n--;
    if (n == 0)
        return phx_error(PHX_EIO, "%s: refusing %s: it holds no secret (delete it to get a new one)", who, path);
    if (n > PX_STORE_MAX_TOKEN) /* never cut: a cut secret would let in whoever knows its first part */
        return phx_error(PHX_EIO, "%s: refusing %s: it holds %zd bytes, a job secret at most %u", who, path, n,
                         PX_STORE_MAX_TOKEN);
    memcpy(buf, raw, (size_t)n);
    *len = (size_t)n;
    snprintf(src, srclen, "job token from %s", path);
    return PHX_OK;
}

phx_status px_store_token(const char *who, uint8_t *buf, size_t *len, char *src, size_t srclen)
{
    const char *t = getenv("PHX_STORE_TOKEN");
    size_t n = t ? strlen(t) : 0;
    *len = 0;
    if (n > PX_STORE_MAX_TOKEN)
        return phx_error(PHX_EINVAL, "%s: PHX_STORE_TOKEN is %zu bytes long, at most %u allowed", who, n,
                         PX_STORE_MAX_TOKEN);
    if (!n) return home_secret(who, buf, len, src, srclen);
    memcpy(buf, t, n);
    *len = n;
    snprintf(src, srclen, "PHX_STORE_TOKEN");
    return PHX_OK;
}

phx_status px_store_nonce(uint8_t *out, size_t n)
{
    if (RAND_bytes(out, (int)n) != 1)
        return phx_error(PHX_EIO, "store: the system's random generator failed (OpenSSL RAND_bytes)");
    return PHX_OK;
}

int px_store_proof(const uint8_t *token, size_t tlen, const char *label, const uint8_t *cnonce, const uint8_t *snonce,
                   uint8_t out[PX_STORE_NONCE])
{
    uint8_t msg[16 + 2 * PX_STORE_NONCE];
    size_t ll = strlen(label);
    memset(msg, 0, 16);
    memcpy(msg, "PHXS ", 5);
    memcpy(msg + 5, label, ll < 11 ? ll : 11);
    memcpy(msg + 16, cnonce, PX_STORE_NONCE);
    memcpy(msg + 16 + PX_STORE_NONCE, snonce, PX_STORE_NONCE);
    unsigned int olen = PX_STORE_NONCE;
    static const uint8_t none = 0;
    if (!HMAC(EVP_sha256(), tlen ? token : &none, (int)tlen, msg, sizeof msg, out, &olen) || olen != PX_STORE_NONCE)
        return -1;
    return 0;
}

int px_store_proof_eq(const uint8_t *a, const uint8_t *b)
{
    return CRYPTO_memcmp(a, b, PX_STORE_NONCE) == 0;
}
