/* Sharded, reshardable ZeRO checkpoints: each rank writes the pieces it
 * owns (parameters and optimizer state) to its own safetensors shard,
 * rank 0 writes index.json naming which shard holds which element range
 * of which tensor; loading reshards by those ranges at any world size.
 * Format: doc/reference/formats.md ("Sharded ZeRO checkpoints"). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <jansson.h>
#include "src/zero/zero-impl.h"
#include "src/data/safetensors-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"
#include "src/train/optim-impl.h"
#include "src/precision/precision-impl.h"

#define CK_FORMAT "phalanx.zero-checkpoint"
#define CK_VERSION 1
#define CK_INDEX "index.json"

/* ---- helpers ---------------------------------------------------------- */

/* A parameter's name without the "module." a DDP wrapper adds. */
static const char *plain_name(const char *n)
{
    return strncmp(n, "module.", 7) == 0 ? n + 7 : n;
}

static char *path_join(const char *dir, const char *name)
{
    size_t len = strlen(dir) + strlen(name) + 2;
    char *s = px_malloc(len);
    if (s) snprintf(s, len, "%s/%s", dir, name);
    return s;
}

static char *fmt_name(const char *a, const char *b, const char *c, int64_t off)
{
    size_t len = strlen(a) + strlen(b) + (c ? strlen(c) + 1 : 0) + 32;
    char *s = px_malloc(len);
    if (!s) return NULL;
    if (c)
        snprintf(s, len, "%s%s.%s@%" PRId64, a, b, c, off);
    else
        snprintf(s, len, "%s%s@%" PRId64, a, b, off);
    return s;
}

/* All-reduces n host values v of dtype dt with op through the comm's
 * device; a world of one keeps them. */
static phx_status allreduce_host_as(phx_comm *comm, void *v, int64_t n, phx_dtype dt, phx_reduce_op op)
{
    if (!comm || phx_comm_size(comm) <= 1) return PHX_OK;
    phx_tensor *t = phx_tensor_new(dt, 1, &n, phx_comm_device(comm));
    phx_tensor *h = phx_tensor_from_data(dt, 1, &n, v);
    phx_status st = t && h ? phx_tensor_copy(t, h) : PHX_ENOMEM;
    if (st == PHX_OK) st = phx_comm_allreduce(comm, t, op, NULL);
    if (st == PHX_OK) st = phx_tensor_to_host(t, v);
    phx_tensor_free(t);
    phx_tensor_free(h);
    return st;
}

static phx_status allreduce_host(phx_comm *comm, float *v, int64_t n, phx_reduce_op op)
{
    return allreduce_host_as(comm, v, n, PHX_F32, op);
}

/* The shard optimizer's state as kinds per piece (as zero-state.c reads
 * it): *kinds state tensors per shard piece, named "<leaf>.<kind>" and of
 * the piece's numel; false for another layout. */
static bool shard_kinds(px_zero *z, const char ***names, phx_tensor ***ts, size_t *kinds)
{
    size_t n = phx_optimizer_state(z->inner, names, ts);
    *kinds = 0;
    if (z->n_shard == 0 || n == 0) return true;
    if (n % z->n_shard) return false;
    size_t K = n / z->n_shard;
    size_t skip = strlen(phx_param_name(z->shard[0].sp)) + 1;
    for (size_t i = 0; i < z->n_shard; i++) {
        const char *leaf = phx_param_name(z->shard[i].sp);
        size_t ll = strlen(leaf);
        for (size_t k = 0; k < K; k++) {
            const char *nm = (*names)[i * K + k];
            if (strncmp(nm, leaf, ll) != 0 || nm[ll] != '.' || strcmp(nm + ll + 1, (*names)[k] + skip) != 0 ||
                phx_tensor_numel((*ts)[i * K + k]) != z->shard[i].piece.len ||
                phx_tensor_dtype((*ts)[i * K + k]) != PHX_F32)
                return false;
        }
    }
    *kinds = K;
    return true;
}

static const char *kind_name(px_zero *z, const char *const *names, size_t k)
{
    return names[k] + strlen(phx_param_name(z->shard[0].sp)) + 1;
}

/* The generation of the index in dir into *gen: 0 when there is none or
 * it does not parse (the save replaces it); PHX_EIO when the index is no
 * regular file (fopen would wait on a FIFO) or at the last generation. */
static phx_status current_generation(const char *who, const char *dir, int64_t *gen)
{
    *gen = 0;
    char *p = path_join(dir, CK_INDEX);
    if (!p) return PHX_ENOMEM;
    bool irregular;
    FILE *f = px_fopen_regular(p, &irregular);
    json_t *root = f ? json_loadf(f, 0, NULL) : NULL;
    if (f) fclose(f);
    phx_status st = PHX_OK;
    if (irregular) st = px_open_error(who, "the index ", p, true);
    json_t *g = root ? json_object_get(root, "generation") : NULL;
    if (json_is_integer(g) && json_integer_value(g) > 0) *gen = (int64_t)json_integer_value(g);
    if (*gen == INT64_MAX)
        st = phx_error(PHX_EIO, "%s: the index '%s' is at generation %" PRId64 ", the last one", who, p, *gen);
    json_decref(root);
    px_free(p);
    return st;
}

/* A random positive name for a save (rank 0's; the others send 0). */
static int64_t save_nonce(void)
{
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) r = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    r &= (uint64_t)INT64_MAX;
    return r ? (int64_t)r : 1;
}

/* The largest v[i] over comm's ranks, exactly (allreduce_host is f32). */
static phx_status allreduce_max_i64(phx_comm *comm, int64_t *v, int64_t n)
{
    return allreduce_host_as(comm, v, n, PHX_I64, PHX_MAX);
}

static void shard_file(char *buf, size_t len, int rank, int world, int64_t gen)
{
    snprintf(buf, len, "shard-%d-of-%d.g%" PRId64 ".safetensors", rank, world, gen);
}

/* ---- save ------------------------------------------------------------- */

/* Rank 0's index: every rank's pieces from the partition. */
typedef struct index_arg {
    json_t **pieces; /* per parameter: [[shard, off, len], ...] */
    int q;
} index_arg;

static phx_status index_piece(px_zero *z, size_t region, const px_zpiece *part, int64_t at, void *arg)
{
    (void)z, (void)region, (void)at;
    index_arg *a = arg;
    if (part->len == 0) return PHX_OK;
    json_t *t = json_pack("[iII]", a->q, (json_int_t)part->off, (json_int_t)part->len);
    if (!t || json_array_append_new(a->pieces[part->param], t) != 0) return PHX_ENOMEM;
    return PHX_OK;
}

static json_t *build_index(px_zero *z, phx_optimizer *zo, int64_t gen, const char *save_id, const char *const *snames,
                           size_t kinds, phx_scaler *scaler)
{
    json_t *root = json_object(), *params = json_array(), *bufs = json_array(), *shards = json_array(),
           *ks = json_array();
    json_t **pieces = px_calloc(z->n_params ? z->n_params : 1, sizeof *pieces);
    bool ok = root && params && bufs && shards && ks && pieces;
    for (size_t i = 0; ok && i < z->n_params; i++) ok = (pieces[i] = json_array()) != NULL;
    for (int q = 0; ok && q < z->world; q++) {
        index_arg a = {pieces, q};
        for (size_t g = 0; ok && g < z->n_regions; g++)
            ok = px_zero_for_range(z, g, px_zero_block_lo(&z->regions[g], q), px_zero_block_hi(&z->regions[g], q),
                                   index_piece, &a) == PHX_OK;
        char f[96];
        shard_file(f, sizeof f, q, z->world, gen);
        ok = ok && json_array_append_new(shards, json_string(f)) == 0;
    }
    for (size_t i = 0; ok && i < z->n_params; i++) {
        const phx_tensor *v = phx_param_value(z->params[i]);
        json_t *shape = json_array();
        for (int d = 0; shape && d < phx_tensor_ndim(v); d++)
            json_array_append_new(shape, json_integer(phx_tensor_dim(v, d)));
        json_t *p = json_pack("{s:s,s:o,s:o}", "name", plain_name(phx_module_param_name(z->model, i)), "shape", shape,
                              "pieces", pieces[i]);
        pieces[i] = NULL;
        ok = p && json_array_append_new(params, p) == 0;
    }
    size_t nb = phx_module_num_buffers(z->model);
    for (size_t i = 0; ok && i < nb; i++) {
        const phx_tensor *b = phx_module_buffer(z->model, i);
        json_t *shape = json_array();
        for (int d = 0; shape && d < phx_tensor_ndim(b); d++)
            json_array_append_new(shape, json_integer(phx_tensor_dim(b, d)));
        json_t *e = json_pack("{s:s,s:o,s:i,s:s}", "name", plain_name(phx_module_buffer_name(z->model, i)), "shape",
                              shape, "shard", 0, "dtype", phx_dtype_name(phx_tensor_dtype(b)));
        ok = e && json_array_append_new(bufs, e) == 0;
    }
    for (size_t k = 0; ok && k < kinds; k++) ok = json_array_append_new(ks, json_string(kind_name(z, snames, k))) == 0;
    json_t *optim = ok ? json_pack("{s:s,s:O,s:I,s:f}", "type", phx_optimizer_type(z->inner), "kinds", ks, "steps",
                                   (json_int_t)phx_optimizer_steps(zo), "lr", phx_optimizer_lr(zo))
                       : NULL;
    json_t *sc = scaler ? json_pack("{s:f,s:I,s:b}", "scale", phx_scaler_get_scale(scaler), "growth_tracker",
                                    (json_int_t)phx_scaler_growth_tracker(scaler), "enabled", px_scaler_enabled(scaler))
                        : json_null();
    ok = ok && optim && sc && json_object_set_new(root, "format", json_string(CK_FORMAT)) == 0 &&
        json_object_set_new(root, "version", json_integer(CK_VERSION)) == 0 &&
        json_object_set_new(root, "generation", json_integer(gen)) == 0 &&
        json_object_set_new(root, "save", json_string(save_id)) == 0 &&
        json_object_set_new(root, "world", json_integer(z->world)) == 0 &&
        json_object_set_new(root, "stage", json_integer(z->stage < 2 ? 1 : 2)) == 0 &&
        json_object_set(root, "shards", shards) == 0 && json_object_set(root, "params", params) == 0 &&
        json_object_set(root, "buffers", bufs) == 0 && json_object_set_new(root, "optimizer", optim) == 0 &&
        json_object_set_new(root, "scaler", sc) == 0;
    if (!ok) {
        json_decref(optim);
        json_decref(sc);
    }
    for (size_t i = 0; pieces && i < z->n_params; i++) json_decref(pieces[i]);
    px_free(pieces);
    json_decref(params);
    json_decref(bufs);
    json_decref(shards);
    json_decref(ks);
    if (!ok) {
        json_decref(root);
        return NULL;
    }
    return root;
}

/* The CRC-32 of the index's contents but its "crc32": the object written
 * compact with sorted keys (what jansson writes again for what it read). */
static phx_status index_crc(const json_t *root, uint32_t *crc)
{
    json_t *copy = json_deep_copy(root);
    if (copy) json_object_del(copy, "crc32");
    char *text = copy ? json_dumps(copy, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(copy);
    if (!text) return PHX_ENOMEM;
    *crc = px_st_crc(text, strlen(text));
    free(text);
    return PHX_OK;
}

/* Writes the index (with its "crc32") as a temporary file, fsync, rename,
 * fsync of dir. */
static phx_status write_index(const char *who, const char *dir, json_t *root)
{
    char *path = path_join(dir, CK_INDEX);
    char *tmp = path_join(dir, ".index.json.tmp");
    phx_status st = path && tmp ? PHX_OK : PHX_ENOMEM;
    uint32_t crc;
    char hex[16];
    if (st == PHX_OK) st = index_crc(root, &crc);
    if (st == PHX_OK) snprintf(hex, sizeof hex, "%08x", (unsigned)crc);
    if (st == PHX_OK && json_object_set_new(root, "crc32", json_string(hex)) != 0) st = PHX_ENOMEM;
    char *text = st == PHX_OK ? json_dumps(root, JSON_INDENT(1) | JSON_SORT_KEYS) : NULL;
    if (st == PHX_OK && !text) st = PHX_ENOMEM;
    int fd = st == PHX_OK ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : -1;
    if (st == PHX_OK && fd < 0) st = phx_error(PHX_EIO, "%s: cannot create '%s': %s", who, tmp, strerror(errno));
    size_t len = text ? strlen(text) : 0, done = 0;
    while (st == PHX_OK && done < len) {
        ssize_t w = write(fd, text + done, len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
            st = phx_error(PHX_EIO, "%s: writing '%s': %s", who, tmp, strerror(errno));
        else
            done += (size_t)w;
    }
    if (st == PHX_OK && fsync(fd) != 0) st = phx_error(PHX_EIO, "%s: fsync of '%s': %s", who, tmp, strerror(errno));
    if (fd >= 0) close(fd);
    if (st == PHX_OK && rename(tmp, path) != 0)
        st = phx_error(PHX_EIO, "%s: renaming '%s' to '%s': %s", who, tmp, path, strerror(errno));
    if (st != PHX_OK && tmp) unlink(tmp);
    if (st == PHX_OK) {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            if (fsync(dfd) != 0) st = phx_error(PHX_EIO, "%s: fsync of '%s': %s", who, dir, strerror(errno));
            close(dfd);
        }
    }
    free(text);
    px_free(path);
    px_free(tmp);
    return st;
}

/* Removes every shard file that gen's index (world ranks, renamed into
 * place) does not name: older generations, and the shards of a save
 * that died before its index. */
static void remove_old_shards(const char *dir, int64_t gen, int world)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        int r, w;
        int64_t g;
        char tail[16];
        if (strncmp(e->d_name, "shard-", 6) != 0 ||
            sscanf(e->d_name, "shard-%d-of-%d.g%" SCNd64 ".%15s", &r, &w, &g, tail) != 4 ||
            strcmp(tail, "safetensors") != 0 || (g == gen && w == world && r >= 0 && r < world))
            continue;
        char *p = path_join(dir, e->d_name);
        if (p) unlink(p);
        px_free(p);
    }
    closedir(d);
}

/* This rank's shard file: its pieces' values and state, rank 0 also the
 * buffers. */
static phx_status write_shard(const char *who, px_zero *z, const char *dir, int64_t gen, const char *save_id,
                              const char *const *snames, phx_tensor *const *sts, size_t kinds)
{
    size_t nb = z->rank == 0 ? phx_module_num_buffers(z->model) : 0;
    size_t cap = z->n_shard * (1 + kinds) + nb, n = 0;
    char **names = px_calloc(cap ? cap : 1, sizeof *names);
    phx_tensor **ts = px_calloc(cap ? cap : 1, sizeof *ts);
    bool *view = px_calloc(cap ? cap : 1, sizeof *view);
    phx_status st = names && ts && view ? PHX_OK : PHX_ENOMEM;
    for (size_t i = 0; st == PHX_OK && i < z->n_shard; i++) {
        const px_zpiece *p = &z->shard[i].piece;
        if (p->len == 0) continue;
        const char *pn = plain_name(phx_module_param_name(z->model, p->param));
        int64_t len = p->len;
        names[n] = fmt_name("param.", pn, NULL, p->off);
        /* The shard's view: the parameter's elements (stage 1, 2) or the
         * FSDP unit's persistent shard (stage 3). */
        ts[n] = px_tensor_view(phx_param_value(z->shard[i].sp), 0, 1, &len);
        view[n] = true;
        if (!names[n++] || !ts[n - 1]) st = PHX_ENOMEM;
        for (size_t k = 0; st == PHX_OK && k < kinds; k++) {
            names[n] = fmt_name("optim.", pn, kind_name(z, snames, k), p->off);
            ts[n++] = sts[i * kinds + k];
            if (!names[n - 1]) st = PHX_ENOMEM;
        }
    }
    for (size_t i = 0; st == PHX_OK && i < nb; i++) {
        names[n] = fmt_name("buffer.", plain_name(phx_module_buffer_name(z->model, i)), NULL, 0);
        ts[n++] = phx_module_buffer(z->model, i);
        if (!names[n - 1]) st = PHX_ENOMEM;
    }
    char f[96], g[32];
    shard_file(f, sizeof f, z->rank, z->world, gen);
    snprintf(g, sizeof g, "%" PRId64, gen);
    char *path = path_join(dir, f);
    if (st == PHX_OK && !path) st = PHX_ENOMEM;
    phx_meta meta[] = {{"zero.generation", g}, {"zero.save", save_id}};
    if (st == PHX_OK) st = phx_safetensors_write(path, (const char *const *)names, ts, n, meta, 2);
    if (st != PHX_OK) st = phx_error(st, "%s: rank %d writing its shard: %s", who, z->rank, phx_last_error());
    for (size_t i = 0; i < n; i++) {
        px_free(names[i]);
        if (view[i]) phx_tensor_free(ts[i]);
    }
    px_free(names);
    px_free(ts);
    px_free(view);
    px_free(path);
    return st;
}

/* Every name the index will hold as JSON takes it (UTF-8): parameters and
 * buffers (a name in no shard, zero elements, reaches only the index),
 * the optimizer's type and its state kinds; else the index's writer would
 * fail after the shards are on disk. */
static phx_status check_names(const char *who, px_zero *z, const char *const *snames, size_t kinds)
{
    phx_module *m = z->model;
    size_t np = phx_module_num_params(m), nb = phx_module_num_buffers(m);
    for (size_t i = 0; i < np + nb; i++)
        if (!px_utf8_valid(i < np ? phx_module_param_name(m, i) : phx_module_buffer_name(m, i - np)))
            return phx_error(PHX_EINVAL, "%s: %s %zu's name is not valid UTF-8 (the index is JSON)", who,
                             i < np ? "parameter" : "buffer", i < np ? i : i - np);
    if (!px_utf8_valid(phx_optimizer_type(z->inner)))
        return phx_error(PHX_EINVAL, "%s: the shard optimizer's type name is not valid UTF-8 (the index is JSON)", who);
    for (size_t k = 0; k < kinds; k++)
        if (!px_utf8_valid(kind_name(z, snames, k)))
            return phx_error(PHX_EINVAL, "%s: optimizer state kind %zu's name is not valid UTF-8 (the index is JSON)",
                             who, k);
    return PHX_OK;
}

/* The save within one shard group (the whole world unless hybrid). */
static phx_status save_group(const char *who, const char *dir, px_zero *z, phx_optimizer *zo, phx_scaler *scaler)
{
    /* Local preparation; any failure still joins the agreement below. */
    char err[600] = "";
    phx_status st = px_zero_check_model(z);
    const char **snames = NULL;
    phx_tensor **sts = NULL;
    size_t kinds = 0;
    if (st == PHX_OK && !shard_kinds(z, &snames, &sts, &kinds))
        st = phx_error(PHX_EUNSUPPORTED,
                       "%s: the shard optimizer (%s) does not keep one state tensor per piece and kind; it cannot be "
                       "saved sharded",
                       who, phx_optimizer_type(z->inner));
    if (st == PHX_OK) st = check_names(who, z, snames, kinds);
    if (st == PHX_OK && mkdir(dir, 0777) != 0 && errno != EEXIST)
        st = phx_error(PHX_EIO, "%s: cannot create the folder '%s': %s", who, dir, strerror(errno));
    int64_t gen = 0;
    if (st == PHX_OK) st = current_generation(who, dir, &gen);
    if (st != PHX_OK) snprintf(err, sizeof err, "%s", phx_last_error());
    /* Agree on the generation (the largest any rank sees, plus one, as
     * an exact integer) and that all can go on; the state kinds (the most
     * any rank keeps, the fewest a rank owning pieces keeps, and rank 0's,
     * which names them in the index) must be one number. */
    float agree[4] = {(float)kinds, st != PHX_OK ? 1.0f : 0.0f, z->rank == 0 ? (float)kinds : 0.0f,
                      z->n_shard > 0 ? -(float)kinds : -1e30f};
    phx_status cs = allreduce_host(z->comm, agree, 4, PHX_MAX);
    /* and on rank 0's random name for this save, which every shard and
     * the index carry (a shard of another save of the same generation
     * is then refused at load) */
    int64_t agreed[2] = {gen, z->rank == 0 ? save_nonce() : 0};
    if (cs == PHX_OK) cs = allreduce_max_i64(z->comm, agreed, 2);
    if (cs != PHX_OK) return phx_error(cs, "%s: agreeing on the generation: %s", who, phx_last_error());
    gen = agreed[0];
    char save_id[24];
    snprintf(save_id, sizeof save_id, "%016" PRIx64, (uint64_t)agreed[1]);
    if (st != PHX_OK) return phx_error(st, "%s", err);
    if (agree[1] != 0) return phx_error(PHX_EIO, "%s: another rank failed to prepare its shard; nothing written", who);
    if (agree[2] != agree[0] || -agree[3] != agree[0])
        return phx_error(PHX_EUNSUPPORTED,
                         "%s: the ranks' shard optimizers keep different numbers of state kinds (rank 0: %g, most: "
                         "%g, fewest: %g); nothing written",
                         who, (double)agree[2], (double)agree[0], (double)-agree[3]);
    gen++; /* below INT64_MAX: current_generation refused the last one */
    /* Each rank's shard; then everyone agrees they are all on disk before
     * rank 0 puts the index in place. */
    st = write_shard(who, z, dir, gen, save_id, snames, sts, kinds);
    if (st != PHX_OK) snprintf(err, sizeof err, "%s", phx_last_error());
    float fail = st != PHX_OK ? 1.0f : 0.0f;
    cs = allreduce_host(z->comm, &fail, 1, PHX_MAX);
    if (cs != PHX_OK)
        return phx_error(cs, "%s: waiting for every rank's shard (the index was not written): %s", who,
                         phx_last_error());
    if (st != PHX_OK) return phx_error(st, "%s", err);
    if (fail != 0)
        return phx_error(PHX_EIO, "%s: another rank failed to write its shard; the index was not written", who);
    if (z->rank == 0) {
        json_t *root = build_index(z, zo, gen, save_id, snames, kinds, scaler);
        st = root ? write_index(who, dir, root) : PHX_ENOMEM;
        json_decref(root);
        if (st != PHX_OK) snprintf(err, sizeof err, "%s", phx_last_error());
    }
    /* Rank 0's outcome reaches every rank; the next save then reads this
     * generation's index on every rank. */
    fail = st != PHX_OK ? 1.0f : 0.0f;
    cs = allreduce_host(z->comm, &fail, 1, PHX_MAX);
    if (cs != PHX_OK) return phx_error(cs, "%s: waiting for the index: %s", who, phx_last_error());
    if (st != PHX_OK) return phx_error(st, "%s", err);
    if (fail != 0) return phx_error(PHX_EIO, "%s: rank 0 failed to write the index", who);
    if (z->rank == 0) remove_old_shards(dir, gen, z->world);
    return PHX_OK;
}

/* Under hybrid sharding every shard group holds the same shards, so only
 * the group whose ranks are first in their replicate group writes; the
 * others wait for its outcome (several groups writing the same files
 * would race on the temporary index and the generation). */
phx_status phx_zero_checkpoint_save(const char *dir, phx_module *model, phx_optimizer *zo, phx_scaler *scaler)
{
    static const char who[] = "phx_zero_checkpoint_save";
    px_zero *z = px_zero_of(zo, who);
    if (!z) return PHX_EINVAL;
    if (!dir || !model) return phx_error(PHX_EINVAL, "%s: NULL %s", who, !dir ? "dir" : "model");
    if (model != z->model) return phx_error(PHX_EINVAL, "%s: the ZeRO optimizer belongs to another model", who);
    if (z->replicas_unknown)
        return phx_error(PHX_EINVAL,
                         "%s: hybrid sharding without a replicate group: every shard group would write the same "
                         "files into '%s'; give phx_zero_opts.replicate_comm (the ranks holding the same shard) to "
                         "phx_zero_optimizer_new",
                         who, dir);
    if (!z->rcomm || phx_comm_size(z->rcomm) <= 1) return save_group(who, dir, z, zo, scaler);
    bool writer = phx_comm_rank(z->rcomm) == 0;
    phx_status st = writer ? save_group(who, dir, z, zo, scaler) : PHX_OK;
    char err[600] = "";
    if (st != PHX_OK) snprintf(err, sizeof err, "%s", phx_last_error());
    float fail = st != PHX_OK ? 1.0f : 0.0f;
    phx_status cs = allreduce_host(z->rcomm, &fail, 1, PHX_MAX);
    if (st != PHX_OK) return phx_error(st, "%s", err);
    if (cs != PHX_OK)
        return phx_error(cs, "%s: waiting for the shard group that writes (replicate rank 0): %s", who,
                         phx_last_error());
    if (fail != 0)
        return phx_error(PHX_EIO,
                         "%s: the shard group that writes (replicate rank 0) failed; the previous checkpoint in '%s' "
                         "stays loadable",
                         who, dir);
    return PHX_OK;
}

/* ---- reading ---------------------------------------------------------- */

typedef struct ck_piece {
    int shard;
    int64_t off, len;
} ck_piece;

typedef struct ck_tensor {
    const char *name;
    int ndim;
    int64_t shape[PHX_MAX_DIMS];
    int64_t numel;
    phx_dtype dtype; /* f32 for parameters; a buffer's as saved (f32 in indexes without "dtype") */
    ck_piece *pieces;
    size_t n_pieces;
    float *val; /* numel elements of dtype (a buffer of another dtype keeps its bytes here) */
    float **state; /* kinds arrays of numel (parameters only) */
} ck_tensor;

typedef struct ck_index {
    const char *who, *dir;
    char *index_path;
    json_t *root;
    int world;
    int64_t generation; /* 0: the index names none */
    const char *save; /* the save's name; NULL in indexes of earlier builds */
    int64_t steps;
    double lr;
    const char *type;
    const char **kinds;
    size_t n_kinds;
    bool has_scaler;
    bool scaler_disabled; /* its "enabled" is false */
    double scale;
    int64_t tracker;
    ck_tensor *params, *bufs;
    size_t np, nb;
    const char **shards;
    px_st_file *files;
    char **paths; /* the open files' paths (px_st_file keeps a pointer) */
    bool *open;
} ck_index;

static void ck_free(ck_index *c)
{
    for (size_t i = 0; c->params && i < c->np; i++) {
        px_free(c->params[i].pieces);
        px_free(c->params[i].val);
        for (size_t k = 0; c->params[i].state && k < c->n_kinds; k++) px_free(c->params[i].state[k]);
        px_free(c->params[i].state);
    }
    for (size_t i = 0; c->bufs && i < c->nb; i++) {
        px_free(c->bufs[i].pieces);
        px_free(c->bufs[i].val);
    }
    for (int s = 0; c->files && s < c->world; s++)
        if (c->open[s]) px_st_close(&c->files[s]);
    for (int s = 0; c->paths && s < c->world; s++) px_free(c->paths[s]);
    px_free(c->paths);
    px_free(c->params);
    px_free(c->bufs);
    px_free(c->kinds);
    px_free(c->shards);
    px_free(c->files);
    px_free(c->open);
    px_free(c->index_path);
    json_decref(c->root);
    memset(c, 0, sizeof *c);
}

static int by_off(const void *a, const void *b)
{
    const ck_piece *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

static phx_status bad(ck_index *c, const char *what)
{
    return phx_error(PHX_EIO, "%s: '%s' is not a valid sharded checkpoint index: %s", c->who, c->index_path, what);
}

static phx_status parse_tensor(ck_index *c, json_t *j, ck_tensor *t, bool is_param)
{
    json_t *name = json_object_get(j, "name"), *shape = json_object_get(j, "shape");
    if (!json_is_string(name) || !json_is_array(shape) || json_array_size(shape) > PHX_MAX_DIMS)
        return bad(c, "a tensor entry without a name or a shape");
    t->name = json_string_value(name);
    t->ndim = (int)json_array_size(shape);
    t->numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        json_t *v = json_array_get(shape, (size_t)d);
        if (!json_is_integer(v) || json_integer_value(v) < 0) return bad(c, "a negative or non-integer dimension");
        t->shape[d] = (int64_t)json_integer_value(v);
        if (t->shape[d] > 0 && t->numel > ((int64_t)1 << 40) / t->shape[d])
            return bad(c, "a tensor of more than 2^40 elements");
        t->numel *= t->shape[d];
    }
    t->dtype = PHX_F32;
    if (!is_param) {
        json_t *s = json_object_get(j, "shard"), *dt = json_object_get(j, "dtype");
        if (!json_is_integer(s) || json_integer_value(s) < 0 || json_integer_value(s) >= c->world)
            return bad(c, "a buffer's shard out of range");
        if (dt) {
            int d = 0;
            while (d < PHX_NUM_DTYPES && !(json_is_string(dt) && !strcmp(json_string_value(dt), phx_dtype_name(d))))
                d++;
            if (d == PHX_NUM_DTYPES) return bad(c, "a buffer of an unknown dtype");
            t->dtype = (phx_dtype)d;
        }
        t->pieces = px_calloc(1, sizeof *t->pieces);
        if (!t->pieces) return PHX_ENOMEM;
        t->pieces[0] = (ck_piece){(int)json_integer_value(s), 0, t->numel};
        t->n_pieces = 1;
        return PHX_OK;
    }
    json_t *ps = json_object_get(j, "pieces");
    if (!json_is_array(ps)) return bad(c, "a parameter without pieces");
    t->n_pieces = json_array_size(ps);
    t->pieces = px_calloc(t->n_pieces ? t->n_pieces : 1, sizeof *t->pieces);
    if (!t->pieces) return PHX_ENOMEM;
    for (size_t i = 0; i < t->n_pieces; i++) {
        json_int_t s, o, l;
        /* o + l <= numel (at most 2^40 elements), so the sums below cannot overflow */
        if (json_unpack(json_array_get(ps, i), "[III]", &s, &o, &l) != 0 || s < 0 || s >= c->world || o < 0 || l <= 0 ||
            o > t->numel || l > t->numel - o) {
            char why[300];
            snprintf(why, sizeof why,
                     "piece %zu of '%s' is not [shard < %d, offset, length > 0] inside its %" PRId64 " elements", i,
                     t->name, c->world, t->numel);
            return bad(c, why);
        }
        t->pieces[i] = (ck_piece){(int)s, (int64_t)o, (int64_t)l};
    }
    qsort(t->pieces, t->n_pieces, sizeof *t->pieces, by_off);
    int64_t at = 0;
    for (size_t i = 0; i < t->n_pieces; i++) {
        if (t->pieces[i].off != at) {
            char why[300];
            snprintf(why, sizeof why,
                     "the pieces of '%s' do not cover it once (a gap or overlap at element %" PRId64 ")", t->name, at);
            return bad(c, why);
        }
        at += t->pieces[i].len;
    }
    if (at != t->numel) {
        char why[300];
        snprintf(why, sizeof why, "the pieces of '%s' hold %" PRId64 " elements, its shape %" PRId64, t->name, at,
                 t->numel);
        return bad(c, why);
    }
    return PHX_OK;
}

/* Loads and checks index.json of dir (nothing of the shards yet). */
static phx_status ck_parse(const char *who, const char *dir, ck_index *c)
{
    memset(c, 0, sizeof *c);
    c->who = who;
    c->dir = dir;
    if (!(c->index_path = path_join(dir, CK_INDEX))) return PHX_ENOMEM;
    json_error_t je;
    bool irregular;
    FILE *fp = px_fopen_regular(c->index_path, &irregular); /* fopen would wait on a FIFO */
    if (!fp) return px_open_error(who, "the index ", c->index_path, irregular);
    c->root = json_loadf(fp, JSON_REJECT_DUPLICATES, &je);
    fclose(fp);
    if (!c->root)
        return phx_error(PHX_EIO, "%s: cannot read the index '%s': %s (line %d)", who, c->index_path, je.text, je.line);
    /* an index without "crc32" is of an earlier build: not checked; but the
     * builds that write "save" write "crc32" too, so one without it lost it */
    json_t *cj = json_object_get(c->root, "crc32");
    if (!cj && json_object_get(c->root, "save"))
        return bad(c, "it has a \"save\" id but no \"crc32\" (a build that writes one writes both): edited");
    if (cj) {
        uint32_t got, stored;
        const char *want = json_string_value(cj);
        phx_status cs = index_crc(c->root, &got);
        if (cs != PHX_OK) return cs;
        if (!px_st_parse_crc(want, &stored) || stored != got) {
            char why[160];
            snprintf(why, sizeof why, "it fails its checksum (CRC-32 %08x of its other contents, \"crc32\" says %s)",
                     (unsigned)got, want && strlen(want) < 20 ? want : "no 8 hex digits");
            return bad(c, why);
        }
    }
    json_t *fmt = json_object_get(c->root, "format"), *ver = json_object_get(c->root, "version");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), CK_FORMAT) != 0)
        return bad(c, "\"format\" is not \"" CK_FORMAT "\"");
    if (!json_is_integer(ver) || json_integer_value(ver) != CK_VERSION) return bad(c, "unknown \"version\"");
    json_t *w = json_object_get(c->root, "world"), *shards = json_object_get(c->root, "shards");
    if (!json_is_integer(w) || json_integer_value(w) < 1 || json_integer_value(w) > 1 << 20 || !json_is_array(shards) ||
        json_array_size(shards) != (size_t)json_integer_value(w))
        return bad(c, "\"world\" and \"shards\" disagree");
    c->world = (int)json_integer_value(w);
    json_t *gj = json_object_get(c->root, "generation");
    if (gj && (!json_is_integer(gj) || json_integer_value(gj) < 1))
        return bad(c, "\"generation\" is not an integer >= 1");
    c->generation = gj ? (int64_t)json_integer_value(gj) : 0;
    json_t *sj = json_object_get(c->root, "save");
    if (sj && !json_is_string(sj)) return bad(c, "\"save\" is not a string");
    c->save = json_string_value(sj);
    c->shards = px_calloc((size_t)c->world, sizeof *c->shards);
    c->files = px_calloc((size_t)c->world, sizeof *c->files);
    c->open = px_calloc((size_t)c->world, sizeof *c->open);
    c->paths = px_calloc((size_t)c->world, sizeof *c->paths);
    if (!c->shards || !c->files || !c->open || !c->paths) return PHX_ENOMEM;
    for (int s = 0; s < c->world; s++) {
        json_t *f = json_array_get(shards, (size_t)s);
        if (!json_is_string(f) || strchr(json_string_value(f), '/')) return bad(c, "a shard name is not a file name");
        c->shards[s] = json_string_value(f);
    }
    json_t *o = json_object_get(c->root, "optimizer"), *ks;
    json_int_t steps;
    if (!o || json_unpack(o, "{s:s,s:o,s:I,s:F}", "type", &c->type, "kinds", &ks, "steps", &steps, "lr", &c->lr) != 0 ||
        !json_is_array(ks) || steps < 0)
        return bad(c, "\"optimizer\" is not {type, kinds, steps, lr}");
    c->steps = (int64_t)steps;
    if (!px_hparam_ok(c->lr)) return bad(c, "\"optimizer\".lr is not a finite value >= 0");
    c->n_kinds = json_array_size(ks);
    c->kinds = px_calloc(c->n_kinds ? c->n_kinds : 1, sizeof *c->kinds);
    if (!c->kinds) return PHX_ENOMEM;
    for (size_t k = 0; k < c->n_kinds; k++) {
        if (!json_is_string(json_array_get(ks, k))) return bad(c, "a state kind is not a string");
        c->kinds[k] = json_string_value(json_array_get(ks, k));
    }
    json_t *sc = json_object_get(c->root, "scaler");
    if (sc && !json_is_null(sc)) {
        json_int_t g;
        if (json_unpack(sc, "{s:F,s:I}", "scale", &c->scale, "growth_tracker", &g) != 0)
            return bad(c, "\"scaler\" is not {scale, growth_tracker}");
        c->tracker = (int64_t)g;
        c->has_scaler = true;
        json_t *en = json_object_get(sc, "enabled"); /* indexes of earlier builds have none */
        if (en && !json_is_boolean(en)) return bad(c, "\"scaler\".\"enabled\" is not true or false");
        c->scaler_disabled = en && json_is_false(en);
        /* as phx_scaler_set_state will check them (the growth interval is the scaler's, checked at load) */
        if (!px_scaler_scale_ok(c->scale) || c->tracker < 0)
            return bad(c, "\"scaler\" holds a scale that is no finite f32 value > 0 or a negative growth_tracker");
    }
    json_t *ps = json_object_get(c->root, "params"), *bs = json_object_get(c->root, "buffers");
    if (!json_is_array(ps) || !json_is_array(bs)) return bad(c, "no \"params\" or \"buffers\" array");
    c->np = json_array_size(ps);
    c->nb = json_array_size(bs);
    c->params = px_calloc(c->np ? c->np : 1, sizeof *c->params);
    c->bufs = px_calloc(c->nb ? c->nb : 1, sizeof *c->bufs);
    if (!c->params || !c->bufs) return PHX_ENOMEM;
    phx_status st = PHX_OK;
    for (size_t i = 0; st == PHX_OK && i < c->np; i++) st = parse_tensor(c, json_array_get(ps, i), &c->params[i], true);
    for (size_t i = 0; st == PHX_OK && i < c->nb; i++) st = parse_tensor(c, json_array_get(bs, i), &c->bufs[i], false);
    return st;
}

static bool same_shape(const ck_tensor *t, const phx_tensor *v)
{
    if (phx_tensor_ndim(v) != t->ndim) return false;
    for (int d = 0; d < t->ndim; d++)
        if (phx_tensor_dim(v, d) != t->shape[d]) return false;
    return true;
}

static void shape_text(char *buf, size_t len, int ndim, const int64_t *shape)
{
    size_t at = (size_t)snprintf(buf, len, "(");
    for (int d = 0; d < ndim && at < len; d++)
        at += (size_t)snprintf(buf + at, len - at, "%s%" PRId64, d ? ", " : "", shape[d]);
    if (at < len) snprintf(buf + at, len - at, ")");
}

/* The index against model: the same parameter and buffer names, in the
 * same order, with the same shapes; names the first difference. */
static phx_status ck_check_model(ck_index *c, phx_module *model)
{
    size_t np = phx_module_num_params(model), nb = phx_module_num_buffers(model);
    if (np != c->np || nb != c->nb)
        return phx_error(PHX_EIO,
                         "%s: '%s' is from another model: it holds %zu parameters and %zu buffers, the model has %zu "
                         "and %zu",
                         c->who, c->index_path, c->np, c->nb, np, nb);
    for (size_t i = 0; i < np + nb; i++) {
        bool p = i < np;
        const ck_tensor *t = p ? &c->params[i] : &c->bufs[i - np];
        const char *mn = plain_name(p ? phx_module_param_name(model, i) : phx_module_buffer_name(model, i - np));
        const phx_tensor *v = p ? phx_param_value(phx_module_param(model, i)) : phx_module_buffer(model, i - np);
        if (strcmp(mn, t->name) != 0)
            return phx_error(PHX_EIO, "%s: '%s' is from another model: %s %zu is '%s' there, '%s' in the model", c->who,
                             c->index_path, p ? "parameter" : "buffer", p ? i : i - np, t->name, mn);
        if (!same_shape(t, v) || phx_tensor_dtype(v) != t->dtype) {
            char a[120], b[120];
            shape_text(a, sizeof a, t->ndim, t->shape);
            shape_text(b, sizeof b, phx_tensor_ndim(v), phx_tensor_shape(v));
            return phx_error(PHX_EIO, "%s: '%s' is from another model: tensor '%s' is %s %s there, %s %s in the model",
                             c->who, c->index_path, t->name, phx_dtype_name(t->dtype), a,
                             phx_dtype_name(phx_tensor_dtype(v)), b);
        }
    }
    return PHX_OK;
}

/* The index's scaler state against the scaler that will take it (before
 * anything is loaded: phx_scaler_set_state must not fail after the
 * commit). */
static phx_status ck_check_scaler(ck_index *c, const phx_scaler *scaler)
{
    char why[160];
    if (!c->has_scaler) return phx_error(PHX_EIO, "%s: '%s' holds no GradScaler state", c->who, c->index_path);
    if (px_scaler_check_state(scaler, c->scale, c->tracker, why, sizeof why))
        return phx_error(PHX_EIO, "%s: '%s' holds a GradScaler state this scaler refuses: %s", c->who, c->index_path,
                         why);
    if (c->scaler_disabled && px_scaler_enabled(scaler))
        return phx_error(PHX_EIO, "%s: '%s': %s", c->who, c->index_path, PX_SCALER_DISABLED_STATE);
    return PHX_OK;
}

/* The optimizer kind and state kinds against an optimizer's. */
static phx_status ck_check_opt(ck_index *c, const char *type, const char *const *kinds, size_t n_kinds, bool know_kinds)
{
    if (strcmp(type, c->type) != 0)
        return phx_error(PHX_EIO, "%s: '%s' holds the state of a %s optimizer, this one is %s", c->who, c->index_path,
                         c->type, type);
    if (!know_kinds) return PHX_OK;
    size_t k = 0;
    while (k < n_kinds && k < c->n_kinds && strcmp(kinds[k], c->kinds[k]) == 0) k++;
    if (k < n_kinds || k < c->n_kinds)
        return phx_error(
            PHX_EIO,
            "%s: '%s' holds another layout of optimizer state: %zu kinds, the optimizer keeps %zu; kind %zu "
            "is '%s' there, '%s' in the optimizer",
            c->who, c->index_path, c->n_kinds, n_kinds, k, k < c->n_kinds ? c->kinds[k] : "(none)",
            k < n_kinds ? kinds[k] : "(none)");
    return PHX_OK;
}

static phx_status ck_file(ck_index *c, int s, px_st_file **f)
{
    if (!c->open[s]) {
        if (!c->paths[s] && !(c->paths[s] = path_join(c->dir, c->shards[s]))) return PHX_ENOMEM;
        const char *p = c->paths[s];
        /* The header (and its metadata's checksum) only: the data is
         * mapped, and each tensor bounds- and CRC-checked as it is read,
         * so a rank touches only the tensors it needs. */
        phx_status st = px_st_open_header(c->who, p, &c->files[s]);
        /* a shard of another save under this index's name: refused */
        const char *g = st == PHX_OK ? px_st_meta(&c->files[s], "zero.generation") : NULL;
        char want[24];
        snprintf(want, sizeof want, "%" PRId64, c->generation);
        const char *sv = st == PHX_OK ? px_st_meta(&c->files[s], "zero.save") : NULL;
        if (st == PHX_OK && c->generation && (!g || strcmp(g, want) != 0))
            st = phx_error(PHX_EIO, "%s: shard '%s' is of generation %s, the index '%s' of %s: a shard of another save",
                           c->who, p, g ? g : "(none)", c->index_path, want);
        else if (st == PHX_OK && c->save && (!sv || strcmp(sv, c->save) != 0))
            st = phx_error(PHX_EIO, "%s: shard '%s' is of save %s, the index '%s' of save %s: a shard of another save",
                           c->who, p, sv ? sv : "(none)", c->index_path, c->save);
        if (st != PHX_OK && c->files[s].map) px_st_close(&c->files[s]);
        if (st != PHX_OK) return st;
        c->open[s] = true;
    }
    *f = &c->files[s];
    return PHX_OK;
}

/* Copies elements [skip, skip + count) of entry `name` of shard s (len
 * elements of dt, its checksum checked) to dst. */
static phx_status ck_read(ck_index *c, int s, const char *name, int64_t len, int64_t skip, int64_t count, void *dst,
                          phx_dtype dt)
{
    size_t es = phx_dtype_size(dt);
    px_st_file *f;
    phx_status st = ck_file(c, s, &f);
    if (st != PHX_OK) return st;
    const px_st_entry *e = NULL;
    for (size_t i = 0; i < f->n && !e; i++)
        if (strcmp(f->e[i].name, name) == 0) e = &f->e[i];
    if (!e)
        return phx_error(PHX_EIO, "%s: shard '%s' lacks tensor '%s' that the index '%s' places there", c->who, f->path,
                         name, c->index_path);
    size_t data_len = f->size - (size_t)(f->data - (const uint8_t *)f->map);
    if (e->begin > e->end || e->end > data_len)
        return phx_error(PHX_EIO,
                         "%s: shard '%s' is truncated or corrupt: tensor '%s' lies at bytes %llu..%llu of a "
                         "data section of %zu",
                         c->who, f->path, name, (unsigned long long)e->begin, (unsigned long long)e->end, data_len);
    if (e->dtype != dt || e->numel != len || e->end - e->begin != (uint64_t)len * es)
        return phx_error(PHX_EIO, "%s: shard '%s': tensor '%s' is not %" PRId64 " %s elements as the index says",
                         c->who, f->path, name, len, phx_dtype_name(dt));
    char *key = px_concat(PX_ST_CRC_PREFIX, name);
    if (!key) return PHX_ENOMEM;
    uint32_t want, got = px_st_crc(px_st_data(f, e), (size_t)(e->end - e->begin));
    bool has = px_st_stored_crc(f, key, &want);
    const char *text = px_st_meta(f, key);
    px_free(key);
    if (!has || want != got)
        return phx_error(PHX_EIO,
                         "%s: shard '%s' is corrupt: tensor '%s' fails its checksum (CRC-32 %08x, the header "
                         "says %s)",
                         c->who, f->path, name, (unsigned)got,
                         !text     ? "nothing"
                             : has ? text
                                   : "no 8 hex digits");
    memcpy(dst, (const uint8_t *)px_st_data(f, e) + (size_t)skip * es, (size_t)count * es);
    return PHX_OK;
}

/* Reads every parameter and buffer into host scratch, and the optimizer
 * state: with z NULL all of it (t->state, shaped as the parameters);
 * otherwise only the ranges of z's shard pieces, into mine[i * kinds + k]
 * (piece i's len elements), reading just the saved pieces that overlap
 * them. */
static phx_status ck_load_all(ck_index *c, const px_zero *z, float **mine)
{
    for (size_t i = 0; i < c->np + c->nb; i++) {
        bool isp = i < c->np;
        ck_tensor *t = isp ? &c->params[i] : &c->bufs[i - c->np];
        /* parameters f32; a buffer's bytes in its dtype */
        t->val = px_calloc((size_t)(t->numel ? t->numel : 1), phx_dtype_size(t->dtype));
        if (!t->val) return PHX_ENOMEM;
        if (isp && c->n_kinds && !z) {
            if (!(t->state = px_calloc(c->n_kinds, sizeof *t->state))) return PHX_ENOMEM;
            for (size_t k = 0; k < c->n_kinds; k++)
                if (!(t->state[k] = px_calloc((size_t)(t->numel ? t->numel : 1), sizeof **t->state))) return PHX_ENOMEM;
        }
        for (size_t j = 0; j < t->n_pieces; j++) {
            const ck_piece *p = &t->pieces[j];
            char *nm = isp ? fmt_name("param.", t->name, NULL, p->off) : fmt_name("buffer.", t->name, NULL, 0);
            void *to = (uint8_t *)t->val + (size_t)p->off * phx_dtype_size(t->dtype);
            phx_status st = nm ? ck_read(c, p->shard, nm, p->len, 0, p->len, to, t->dtype) : PHX_ENOMEM;
            px_free(nm);
            if (st != PHX_OK) return st;
            for (size_t k = 0; isp && k < c->n_kinds; k++) {
                for (size_t q = 0; q < (z ? z->n_shard : 1); q++) {
                    int64_t lo = p->off, hi = p->off + p->len;
                    float *dst = NULL;
                    if (z) {
                        const px_zpiece *m = &z->shard[q].piece;
                        if (m->param != i) continue;
                        lo = lo > m->off ? lo : m->off;
                        hi = hi < m->off + m->len ? hi : m->off + m->len;
                        if (lo >= hi) continue;
                        dst = mine[q * c->n_kinds + k] + (lo - m->off);
                    } else {
                        dst = t->state[k] + p->off;
                    }
                    nm = fmt_name("optim.", t->name, c->kinds[k], p->off);
                    st = nm ? ck_read(c, p->shard, nm, p->len, lo - p->off, hi - lo, dst, PHX_F32) : PHX_ENOMEM;
                    px_free(nm);
                    if (st != PHX_OK) return st;
                }
            }
        }
    }
    return PHX_OK;
}

/* dst[0 .. len) <- src (host, t's dtype), dst being elements [off, off +
 * len) of t. */
static phx_status put(phx_tensor *t, int64_t off, int64_t len, const void *src)
{
    if (len == 0) return PHX_OK;
    phx_tensor *dst = px_tensor_view(t, off, 1, &len);
    phx_tensor *h = phx_tensor_from_data(phx_tensor_dtype(t), 1, &len, src);
    phx_status st = dst && h ? phx_tensor_copy(dst, h) : PHX_ENOMEM;
    phx_tensor_free(dst);
    phx_tensor_free(h);
    return st;
}

/* Parameters and buffers of model from c (after every check passed);
 * z stage 3 (FSDP): only this rank's pieces, into its shard. */
static phx_status commit_model(ck_index *c, phx_module *model, px_zero *z)
{
    phx_status st = PHX_OK;
    for (size_t i = 0; z && z->fsdp && st == PHX_OK && i < z->n_shard; i++) {
        const px_zpiece *p = &z->shard[i].piece;
        st = put(phx_param_value(z->shard[i].sp), 0, p->len, c->params[p->param].val + p->off);
    }
    for (size_t i = 0; !(z && z->fsdp) && st == PHX_OK && i < c->np; i++)
        st = put(phx_param_value(phx_module_param(model, i)), 0, c->params[i].numel, c->params[i].val);
    for (size_t i = 0; st == PHX_OK && i < c->nb; i++)
        st = put(phx_module_buffer(model, i), 0, c->bufs[i].numel, c->bufs[i].val);
    return st;
}

/* ---- load at any world size ------------------------------------------- */

phx_status phx_zero_checkpoint_load(const char *dir, phx_module *model, phx_optimizer *zo, phx_scaler *scaler)
{
    static const char who[] = "phx_zero_checkpoint_load";
    px_zero *z = px_zero_of(zo, who);
    if (!z) return PHX_EINVAL;
    if (!dir || !model) return phx_error(PHX_EINVAL, "%s: NULL %s", who, !dir ? "dir" : "model");
    if (model != z->model) return phx_error(PHX_EINVAL, "%s: the ZeRO optimizer belongs to another model", who);
    ck_index c;
    const char **snames = NULL;
    phx_tensor **sts = NULL;
    size_t kinds = 0;
    phx_status st = px_zero_check_model(z);
    if (st == PHX_OK)
        st = ck_parse(who, dir, &c);
    else
        memset(&c, 0, sizeof c);
    if (st == PHX_OK) st = ck_check_model(&c, z->model);
    if (st == PHX_OK && !shard_kinds(z, &snames, &sts, &kinds))
        st = phx_error(PHX_EUNSUPPORTED,
                       "%s: the shard optimizer (%s) does not keep one state tensor per piece and kind", who,
                       phx_optimizer_type(z->inner));
    if (st == PHX_OK) {
        const char **kn = px_calloc(kinds ? kinds : 1, sizeof *kn);
        for (size_t k = 0; kn && k < kinds; k++) kn[k] = kind_name(z, snames, k);
        st = kn ? ck_check_opt(&c, phx_optimizer_type(z->inner), kn, kinds, z->n_shard > 0) : PHX_ENOMEM;
        px_free(kn);
    }
    if (st == PHX_OK && scaler) st = ck_check_scaler(&c, scaler);
    /* Scratch for this rank's state only (its pieces, every kind). */
    float **mine = st == PHX_OK ? px_calloc(z->n_shard * kinds + 1, sizeof *mine) : NULL;
    if (st == PHX_OK && !mine) st = PHX_ENOMEM;
    for (size_t i = 0; st == PHX_OK && i < z->n_shard * kinds; i++) {
        int64_t len = z->shard[i / kinds].piece.len;
        if (!(mine[i] = px_calloc((size_t)(len ? len : 1), sizeof **mine))) st = PHX_ENOMEM;
    }
    if (st == PHX_OK) st = ck_load_all(&c, z, mine);
    char err[700] = "";
    if (st != PHX_OK) snprintf(err, sizeof err, "%s", phx_last_error());
    /* Every rank commits or none does. */
    float fail = st != PHX_OK ? 1.0f : 0.0f;
    phx_status cs = allreduce_host(z->comm, &fail, 1, PHX_MAX);
    if (cs == PHX_OK && st == PHX_OK && fail != 0)
        st = phx_error(PHX_EIO, "%s: another rank could not read '%s'; nothing loaded", who, dir);
    else if (cs != PHX_OK && st == PHX_OK)
        st = phx_error(cs, "%s: agreeing that every rank read its part: %s", who, phx_last_error());
    else if (st != PHX_OK)
        phx_error(st, "%s", err);
    if (st == PHX_OK) st = commit_model(&c, z->model, z);
    for (size_t i = 0; st == PHX_OK && i < z->n_shard; i++) {
        const px_zpiece *p = &z->shard[i].piece;
        for (size_t k = 0; st == PHX_OK && k < kinds; k++) st = put(sts[i * kinds + k], 0, p->len, mine[i * kinds + k]);
    }
    for (size_t i = 0; mine && i < z->n_shard * kinds; i++) px_free(mine[i]);
    px_free(mine);
    if (st == PHX_OK) {
        phx_optimizer_set_steps(zo, c.steps);
        phx_optimizer_set_steps(z->inner, c.steps);
        phx_optimizer_set_lr(zo, c.lr);
        phx_optimizer_set_lr(z->inner, c.lr);
        px_zero_drop_full(z);
        if (scaler) st = phx_scaler_set_state(scaler, c.scale, c.tracker);
    }
    ck_free(&c);
    return st;
}

/* ---- one process, a plain optimizer ----------------------------------- */

phx_status phx_zero_checkpoint_load_full(const char *dir, phx_module *model, phx_optimizer *opt, phx_scaler *scaler)
{
    static const char who[] = "phx_zero_checkpoint_load_full";
    if (!dir || !model) return phx_error(PHX_EINVAL, "%s: NULL %s", who, !dir ? "dir" : "model");
    if (opt && phx_optimizer_model(opt) != model)
        return phx_error(PHX_EINVAL, "%s: the optimizer belongs to another model", who);
    ck_index c;
    phx_status st = ck_parse(who, dir, &c);
    if (st == PHX_OK) st = ck_check_model(&c, model);
    const char **snames = NULL;
    phx_tensor **sts = NULL;
    size_t ns = opt ? phx_optimizer_state(opt, &snames, &sts) : 0;
    phx_tensor **dst = NULL;
    if (st == PHX_OK && opt) st = ck_check_opt(&c, phx_optimizer_type(opt), NULL, 0, false);
    /* Every state tensor of opt must be "<param>.<kind>" of the index,
     * shaped as its parameter, and every one of the index present. */
    if (st == PHX_OK && opt) {
        dst = px_calloc(c.np * c.n_kinds > 0 ? c.np * c.n_kinds : 1, sizeof *dst);
        if (!dst) st = PHX_ENOMEM;
        for (size_t j = 0; st == PHX_OK && j < ns; j++) {
            bool found = false;
            for (size_t i = 0; !found && i < c.np; i++) {
                size_t ln = strlen(c.params[i].name);
                if (strncmp(snames[j], c.params[i].name, ln) != 0 || snames[j][ln] != '.') continue;
                for (size_t k = 0; !found && k < c.n_kinds; k++)
                    if (strcmp(snames[j] + ln + 1, c.kinds[k]) == 0) {
                        found = true;
                        if (phx_tensor_numel(sts[j]) != c.params[i].numel || phx_tensor_dtype(sts[j]) != PHX_F32)
                            st = phx_error(PHX_EIO, "%s: optimizer state '%s' is not shaped as '%s' of '%s'", who,
                                           snames[j], c.params[i].name, c.index_path);
                        dst[i * c.n_kinds + k] = sts[j];
                    }
            }
            if (!found && st == PHX_OK)
                st = phx_error(PHX_EIO, "%s: the optimizer keeps state '%s' that '%s' does not hold (another layout)",
                               who, snames[j], c.index_path);
        }
        for (size_t i = 0; st == PHX_OK && i < c.np * c.n_kinds; i++)
            if (!dst[i])
                st =
                    phx_error(PHX_EIO, "%s: '%s' holds state '%s.%s' that the optimizer does not keep (another layout)",
                              who, c.index_path, c.params[i / c.n_kinds].name, c.kinds[i % c.n_kinds]);
    }
    if (st == PHX_OK && scaler) st = ck_check_scaler(&c, scaler);
    if (st == PHX_OK) st = ck_load_all(&c, NULL, NULL);
    if (st == PHX_OK) st = commit_model(&c, model, NULL);
    for (size_t i = 0; st == PHX_OK && opt && i < c.np * c.n_kinds; i++)
        st = put(dst[i], 0, c.params[i / c.n_kinds].numel, c.params[i / c.n_kinds].state[i % c.n_kinds]);
    if (st == PHX_OK && opt) {
        phx_optimizer_set_steps(opt, c.steps);
        phx_optimizer_set_lr(opt, c.lr);
    }
    if (st == PHX_OK && scaler) st = phx_scaler_set_state(scaler, c.scale, c.tracker);
    px_free(dst);
    ck_free(&c);
    return st;
}

/* ---- export ----------------------------------------------------------- */

phx_status phx_zero_checkpoint_export(const char *dir, const char *path)
{
    static const char who[] = "phx_zero_checkpoint_export";
    if (!dir || !path) return phx_error(PHX_EINVAL, "%s: NULL %s", who, !dir ? "dir" : "path");
    ck_index c;
    phx_status st = ck_parse(who, dir, &c);
    if (st == PHX_OK) st = ck_load_all(&c, NULL, NULL);
    size_t n = c.np + c.nb + c.np * c.n_kinds;
    char **names = st == PHX_OK ? px_calloc(n ? n : 1, sizeof *names) : NULL;
    phx_tensor **ts = st == PHX_OK ? px_calloc(n ? n : 1, sizeof *ts) : NULL;
    if (st == PHX_OK && (!names || !ts)) st = PHX_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; st == PHX_OK && i < c.np + c.nb; i++) {
        ck_tensor *t = i < c.np ? &c.params[i] : &c.bufs[i - c.np];
        names[k] = px_strdup(t->name);
        ts[k] = phx_tensor_from_data(t->dtype, t->ndim, t->shape, t->val);
        if (!names[k++] || !ts[k - 1]) st = PHX_ENOMEM;
    }
    for (size_t i = 0; st == PHX_OK && i < c.np; i++)
        for (size_t j = 0; st == PHX_OK && j < c.n_kinds; j++) {
            size_t len = strlen(c.params[i].name) + strlen(c.kinds[j]) + 8;
            names[k] = px_malloc(len);
            if (names[k]) snprintf(names[k], len, "optim.%s.%s", c.params[i].name, c.kinds[j]);
            ts[k] = phx_tensor_from_data(PHX_F32, c.params[i].ndim, c.params[i].shape, c.params[i].state[j]);
            if (!names[k++] || !ts[k - 1]) st = PHX_ENOMEM;
        }
    char steps[32], scale[40], tracker[32];
    snprintf(steps, sizeof steps, "%" PRId64, c.steps);
    snprintf(scale, sizeof scale, "%.17g", c.scale);
    snprintf(tracker, sizeof tracker, "%" PRId64, c.tracker);
    phx_meta meta[] = {{"optim.steps", steps},
                       {"optim.type", c.type ? c.type : ""},
                       {"scaler.scale", scale},
                       {"scaler.growth_tracker", tracker}};
    if (st == PHX_OK) st = phx_safetensors_write(path, (const char *const *)names, ts, k, meta, c.has_scaler ? 4 : 2);
    for (size_t i = 0; i < k; i++) {
        px_free(names[i]);
        phx_tensor_free(ts[i]);
    }
    px_free(names);
    px_free(ts);
    ck_free(&c);
    return st;
}
