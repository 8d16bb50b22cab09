/* Checksums of Phalanx-written safetensors files, kept in "__metadata__"
 * where other readers ignore them (doc/reference/formats.md, "Checksums"): zlib's
 * CRC-32 of each tensor's bytes under "phx.crc32.<name>", of the tensor
 * entries (dtype, shape, offsets) under "phx.entries.crc32", and of the
 * other metadata, that one included, under "phx.crc32.__metadata__" (a
 * tensor cannot be named "__metadata__"). A file with none of these keys
 * (torch's, older Phalanx's) is not checked; a file with any must have
 * them all but the entries' one, which earlier builds did not write (and
 * a file with the entries' one is of a build that writes them all). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "src/data/safetensors-impl.h"
#include "src/base/util.h"

static int by_key(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

uint32_t px_st_crc(const void *p, size_t len)
{
    return (uint32_t)crc32_z(crc32_z(0, NULL, 0), p, len);
}

phx_status px_st_meta_crc(const json_t *meta, uint32_t *out)
{
    size_t n = meta ? json_object_size(meta) : 0, k = 0;
    const char **keys = px_malloc((n ? n : 1) * sizeof *keys);
    if (!keys) return PHX_ENOMEM;
    const char *key;
    json_t *v;
    if (meta) json_object_foreach((json_t *)meta, key, v)
        {
            if (strncmp(key, PX_ST_CRC_PREFIX, strlen(PX_ST_CRC_PREFIX)) != 0) keys[k++] = key;
        }
    qsort(keys, k, sizeof *keys, by_key);
    uLong crc = crc32_z(0, NULL, 0);
    for (size_t i = 0; i < k; i++) {
        const char *val = json_string_value(json_object_get(meta, keys[i]));
        crc = crc32_z(crc, (const Bytef *)keys[i], strlen(keys[i]) + 1);
        crc = crc32_z(crc, (const Bytef *)(val ? val : ""), strlen(val ? val : "") + 1);
    }
    px_free(keys);
    *out = (uint32_t)crc;
    return PHX_OK;
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(const px_st_entry *const *)a)->name, (*(const px_st_entry *const *)b)->name);
}

phx_status px_st_entries_crc(const px_st_entry *e, size_t n, uint32_t *out)
{
    const px_st_entry **s = px_malloc((n ? n : 1) * sizeof *s);
    if (!s) return PHX_ENOMEM;
    for (size_t i = 0; i < n; i++) s[i] = &e[i];
    qsort(s, n, sizeof *s, by_name);
    uLong crc = crc32_z(0, NULL, 0);
    char buf[32];
    for (size_t i = 0; i < n; i++) {
        const char *dn = px_st_dtype_name(s[i]->dtype);
        crc = crc32_z(crc, (const Bytef *)s[i]->name, strlen(s[i]->name) + 1);
        crc = crc32_z(crc, (const Bytef *)(dn ? dn : "?"), strlen(dn ? dn : "?") + 1);
        for (int d = 0; d < s[i]->ndim; d++) {
            int l = snprintf(buf, sizeof buf, "%lld,", (long long)s[i]->shape[d]);
            crc = crc32_z(crc, (const Bytef *)buf, (size_t)l);
        }
        crc = crc32_z(crc, (const Bytef *)"", 1); /* the shape's NUL */
        int l = snprintf(buf, sizeof buf, "%llu,%llu", (unsigned long long)s[i]->begin, (unsigned long long)s[i]->end);
        crc = crc32_z(crc, (const Bytef *)buf, (size_t)l + 1);
    }
    px_free(s);
    *out = (uint32_t)crc;
    return PHX_OK;
}

bool px_st_parse_crc(const char *s, uint32_t *v)
{
    if (!s || strlen(s) != 8 || strspn(s, "0123456789abcdefABCDEF") != 8) return false;
    *v = (uint32_t)strtoul(s, NULL, 16);
    return true;
}

bool px_st_stored_crc(const px_st_file *f, const char *key, uint32_t *v)
{
    return px_st_parse_crc(px_st_meta(f, key), v);
}

phx_status px_st_verify(const char *who, const px_st_file *f, bool with_data)
{
    const size_t pl = strlen(PX_ST_CRC_PREFIX);
    const char *key;
    json_t *v;
    bool any = false;
    if (f->meta) json_object_foreach(f->meta, key, v)
        {
            if (!strcmp(key, PX_ST_ENTRIES_KEY)) any = true;
            if (strncmp(key, PX_ST_CRC_PREFIX, pl) != 0) continue;
            any = true;
            const char *name = key + pl;
            if (strcmp(name, "__metadata__") != 0 && !json_object_get(f->root, name))
                return phx_error(PHX_EIO, "%s: '%s' is corrupt: checksum '%s' names no tensor of the file", who,
                                 f->path, key);
        }
    if (!any) return PHX_OK;
    uint32_t want, got;
    phx_status st = px_st_meta_crc(f->meta, &got);
    if (st != PHX_OK) return st;
    if (!px_st_stored_crc(f, PX_ST_CRC_PREFIX "__metadata__", &want) || want != got)
        return phx_error(PHX_EIO,
                         "%s: '%s' is corrupt: its metadata fails the checksum " PX_ST_CRC_PREFIX "__metadata__ "
                         "(CRC-32 %08x, the header says %s)",
                         who, f->path, (unsigned)got,
                         px_st_meta(f, PX_ST_CRC_PREFIX "__metadata__") ? px_st_meta(f, PX_ST_CRC_PREFIX "__metadata__")
                                                                        : "nothing");
    if (px_st_meta(f, PX_ST_ENTRIES_KEY)) { /* the metadata's checksum covered this value */
        if ((st = px_st_entries_crc(f->e, f->n, &got)) != PHX_OK) return st;
        if (!px_st_stored_crc(f, PX_ST_ENTRIES_KEY, &want) || want != got)
            return phx_error(PHX_EIO,
                             "%s: '%s' is corrupt: its tensor entries (names, dtypes, shapes, offsets) fail the "
                             "checksum " PX_ST_ENTRIES_KEY " (CRC-32 %08x, the header says %s)",
                             who, f->path, (unsigned)got, px_st_meta(f, PX_ST_ENTRIES_KEY));
    }
    for (size_t i = 0; with_data && i < f->n; i++) {
        const px_st_entry *e = &f->e[i];
        char *k = px_concat(PX_ST_CRC_PREFIX, e->name);
        if (!k) return PHX_ENOMEM;
        if (!px_st_stored_crc(f, k, &want)) {
            st = phx_error(PHX_EIO, "%s: '%s' is corrupt: tensor '%s' has no valid checksum '%s' (the file has others)",
                           who, f->path, e->name, k);
            px_free(k);
            return st;
        }
        px_free(k);
        got = px_st_crc(px_st_data(f, e), (size_t)(e->end - e->begin));
        if (got != want)
            return phx_error(PHX_EIO,
                             "%s: '%s' is corrupt: tensor '%s' fails its checksum (CRC-32 of its %llu bytes is %08x, "
                             "the header says %08x)",
                             who, f->path, e->name, (unsigned long long)(e->end - e->begin), (unsigned)got,
                             (unsigned)want);
    }
    return PHX_OK;
}
