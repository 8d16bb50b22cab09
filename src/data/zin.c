/* Plain or gzip input read through inflate directly (see zin.h). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>
#include "src/base/util.h"
#include "src/data/zin.h"

#define PX_ZIN_BUF ((size_t)64 << 10)

struct px_zin {
    FILE *fp;
    bool gz;
    bool ended; /* Z_STREAM_END of the current member */
    const char *err; /* sticky */
    z_stream s;
    unsigned char in[PX_ZIN_BUF];
};

px_zin *px_zin_open(const char *path, bool *irregular)
{
    FILE *fp = px_fopen_regular(path, irregular);
    if (!fp) return NULL;
    px_zin *z = px_calloc(1, sizeof *z);
    if (!z) {
        fclose(fp);
        errno = ENOMEM;
        return NULL;
    }
    z->fp = fp;
    unsigned char m[2];
    size_t n = fread(m, 1, 2, fp);
    z->gz = n == 2 && m[0] == 0x1f && m[1] == 0x8b;
    rewind(fp);
    if (z->gz && inflateInit2(&z->s, 15 + 16) != Z_OK) {
        fclose(fp);
        px_free(z);
        errno = ENOMEM;
        return NULL;
    }
    return z;
}

bool px_zin_compressed(const px_zin *z)
{
    return z->gz;
}

static const char *fail(px_zin *z, const char *msg)
{
    return z->err = msg;
}

/* More input; false at the end of the file (z->err set on a read error). */
static bool refill(px_zin *z)
{
    size_t n = fread(z->in, 1, sizeof z->in, z->fp);
    if (n == 0 && ferror(z->fp)) fail(z, "read error");
    z->s.next_in = z->in;
    z->s.avail_in = (uInt)n;
    return n > 0;
}

/* After a member's end: PHX_OK-like NULL with z->ended kept at the end of
 * the file, or a reset inflate for the next member. */
static const char *next_member(px_zin *z)
{
    if (z->s.avail_in == 0 && !refill(z)) return z->err;
    if (z->s.avail_in < 2 && z->s.next_in[0] == 0x1f) {
        /* A lone byte cannot start a member; look at one more. */
        unsigned char c = z->s.next_in[0];
        z->in[0] = c;
        size_t n = fread(z->in + 1, 1, sizeof z->in - 1, z->fp);
        z->s.next_in = z->in;
        z->s.avail_in = (uInt)(1 + n);
    }
    if (z->s.avail_in < 2 || z->s.next_in[0] != 0x1f || z->s.next_in[1] != 0x8b)
        return fail(z, "bytes after the end of the gzip stream");
    inflateReset(&z->s);
    z->ended = false;
    return NULL;
}

const char *px_zin_read(px_zin *z, void *buf, size_t len, size_t *got)
{
    *got = 0;
    if (z->err) return z->err;
    if (!z->gz) {
        *got = fread(buf, 1, len, z->fp);
        return *got < len && ferror(z->fp) ? fail(z, "read error") : NULL;
    }
    unsigned char *out = buf;
    while (*got < len) {
        if (z->ended) {
            if (z->s.avail_in == 0 && !refill(z)) return z->err; /* the end of the file */
            if (next_member(z)) return z->err;
        }
        if (z->s.avail_in == 0 && !refill(z))
            return z->err ? z->err : fail(z, "unexpected end of file (the gzip stream is truncated)");
        size_t room = len - *got;
        z->s.next_out = out + *got;
        z->s.avail_out = room > UINT32_MAX ? UINT32_MAX : (uInt)room;
        uInt before = z->s.avail_out;
        int r = inflate(&z->s, Z_NO_FLUSH);
        *got += before - z->s.avail_out;
        if (r == Z_STREAM_END)
            z->ended = true;
        else if (r == Z_MEM_ERROR)
            return fail(z, "out of memory");
        else if (r != Z_OK && r != Z_BUF_ERROR)
            return fail(z, z->s.msg ? z->s.msg : "corrupt deflate data");
    }
    return NULL;
}

void px_zin_close(px_zin *z)
{
    if (!z) return;
    if (z->gz) inflateEnd(&z->s);
    fclose(z->fp);
    px_free(z);
}
