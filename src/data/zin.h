/* A byte reader for files that may be gzip-compressed, which reports
 * every defect of the compressed stream (internal). zlib's gzread takes
 * a stream whose trailer was cut short for a clean end of file when
 * inflate already holds the last bytes it got; this reader ends only at
 * inflate's Z_STREAM_END, after the CRC-32 and length check. */
#ifndef PHX_CORE_DATA_ZIN_H
#define PHX_CORE_DATA_ZIN_H

#include <stdbool.h>
#include <stddef.h>

typedef struct px_zin px_zin;

/* Opens path: gzip (one member or several, concatenated) when it starts
 * with the gzip magic, else plain bytes. NULL with errno set, and
 * *irregular true when path is no regular file (a FIFO is not waited on). */
px_zin *px_zin_open(const char *path, bool *irregular);
/* Whether the file is gzip-compressed. */
bool px_zin_compressed(const px_zin *z);
/* Reads up to len bytes into buf and sets *got; fewer only at the end of
 * the data. Returns NULL, or a message naming the defect (a bad CRC or
 * length, corrupt deflate data, a truncated stream, bytes after the last
 * member that start no gzip member, a read error); the reader then stays
 * failed. */
const char *px_zin_read(px_zin *z, void *buf, size_t len, size_t *got);
/* NULL does nothing. */
void px_zin_close(px_zin *z);
#endif
