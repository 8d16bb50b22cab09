/* What the Fashion-MNIST examples share (header-only): reading the IDX
 * files, staging a batch on the model's device, test accuracy, and a
 * checkpoint that knows its epoch. `prog` names the program in errors. */
#ifndef PHX_EXAMPLES_FMNIST_H
#define PHX_EXAMPLES_FMNIST_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <phalanx/phalanx.h>

static const char *fm_prog = "example";

static inline void die(const char *what)
{
    fprintf(stderr, "%s: %s: %s\n", fm_prog, what, phx_last_error());
    exit(1);
}

static inline void check(phx_status st, const char *what)
{
    if (st != PHX_OK) die(what);
}

static inline double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static phx_tensor *read_idx(const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", phx_fashion_mnist_dir(), name);
    phx_tensor *t = NULL;
    if (phx_idx_read(path, &t) != PHX_OK) {
        fprintf(stderr, "%s: %s\n(install Debian's dataset-fashion-mnist or set PHX_FASHION_MNIST)\n", fm_prog,
                phx_last_error());
        exit(1);
    }
    return t;
}

/* A batch on the model's device: src itself when it is there already (the
 * training loader delivers there), else a view of the device buffer *buf
 * (allocated once, for the largest batch) holding a copy. With images set,
 * (B, 784) rows are viewed as (B, 1, 28, 28). */
static phx_tensor *stage(phx_tensor *src, phx_tensor **buf, phx_device dev, int images)
{
    phx_device at = phx_tensor_device(src);
    phx_tensor *t;
    if (at.kind == dev.kind && at.index == dev.index) {
        t = phx_tensor_retain(src);
    } else {
        if (!*buf || phx_tensor_dim(*buf, 0) < phx_tensor_dim(src, 0)) {
            phx_tensor_free(*buf);
            *buf = phx_tensor_new(phx_tensor_dtype(src), phx_tensor_ndim(src), phx_tensor_shape(src), dev);
            if (!*buf) die("device buffer");
        }
        t = phx_tensor_view(*buf, 0, phx_tensor_ndim(src), phx_tensor_shape(src));
        if (!t) die("device view");
        check(phx_tensor_copy(t, src), "copy to device");
    }
    if (!images) return t;
    int64_t shape[4] = {phx_tensor_dim(src, 0), 1, 28, 28};
    phx_tensor *v = phx_tensor_view(t, 0, 4, shape);
    if (!v) die("image view");
    phx_tensor_free(t);
    return v;
}

static inline double accuracy(phx_module *model, phx_tensor *x, phx_tensor *y, phx_device dev, int images)
{
    phx_loader *l = phx_loader_new(x, y, 1000, false, 0, false, NULL, 0);
    if (!l) die("test loader");
    phx_tensor *xb, *yb, *out;
    int64_t right = 0, total = 0;
    int64_t shape[2] = {1000, 10};
    phx_tensor *o32 = phx_tensor_new(PHX_F32, 2, shape, dev), *xdev = NULL;
    float *o = malloc(sizeof(float) * 1000 * 10);
    if (!o32 || !o) die("accuracy buffer");
    check(phx_module_train(model, false), "eval mode");
    while (phx_loader_next(l, &xb, &yb) == 1) {
        phx_tensor *xd = stage(xb, &xdev, dev, images);
        check(phx_module_forward(model, xd, &out), "forward");
        phx_tensor_free(xd);
        phx_tensor *ov = phx_tensor_view(o32, 0, 2, phx_tensor_shape(out));
        if (!ov) die("accuracy view");
        check(phx_tensor_cast(ov, out), "output to f32");
        check(phx_tensor_to_host(ov, o), "output to host");
        phx_tensor_free(ov);
        const int64_t *lab = phx_tensor_data(yb);
        for (int64_t r = 0; r < phx_tensor_dim(out, 0); r++) {
            int best = 0;
            for (int c = 1; c < 10; c++)
                if (o[r * 10 + c] > o[r * 10 + best]) best = c;
            right += best == lab[r];
            total++;
        }
    }
    check(phx_module_train(model, true), "train mode");
    phx_tensor_free(o32);
    phx_tensor_free(xdev);
    free(o);
    phx_loader_free(l);
    return (double)right / (double)total;
}

/* A checkpoint that knows how many epochs it holds. */
static inline void save_epoch(const char *path, phx_module *net, phx_optimizer *opt, phx_scaler *scaler, int epoch,
                              const char *model_name)
{
    char ep[32];
    snprintf(ep, sizeof ep, "%d", epoch);
    phx_meta meta[] = {{"epoch", ep}, {"model", model_name}};
    check(phx_checkpoint_save(path, net, opt, scaler, meta, 2), path);
}

/* --zero 1|2|3: a sharded checkpoint in the folder dir (collective), then
 * dir/epoch written by rank 0 (atomically, after every shard and the index
 * are in place). */
static inline void save_sharded(const char *dir, phx_module *net, phx_optimizer *opt, phx_scaler *scaler, int epoch,
                                int rank, phx_comm *comm)
{
    check(phx_zero_checkpoint_save(dir, net, opt, scaler), dir);
    if (rank == 0) {
        char p[4096], tmp[4100];
        snprintf(p, sizeof p, "%s/epoch", dir);
        snprintf(tmp, sizeof tmp, "%s.tmp", p);
        FILE *f = fopen(tmp, "w");
        if (!f || fprintf(f, "%d\n", epoch) < 0 || fclose(f) != 0 || rename(tmp, p) != 0) {
            fprintf(stderr, "%s: writing %s failed\n", fm_prog, p);
            exit(1);
        }
    }
    if (comm) check(phx_comm_barrier(comm, NULL), "barrier after the save");
}

/* The epoch a sharded checkpoint folder holds (dir/epoch; 0 without it). */
static inline int sharded_epoch(const char *dir)
{
    char p[4096];
    int e = 0;
    snprintf(p, sizeof p, "%s/epoch", dir);
    FILE *f = fopen(p, "r");
    if (f) {
        if (fscanf(f, "%d", &e) != 1) e = 0;
        fclose(f);
    }
    return e;
}
/* Restores the run in load (collective under --zero 1|2|3: a sharded
 * checkpoint folder; else one checkpoint file) and returns the epoch it
 * holds; rank 0 says so. */
static inline int load_epoch(const char *load, int zero, phx_module *net, phx_optimizer *opt, phx_scaler *scaler,
                             int rank)
{
    int first = 0;
    char buf[32];
    if (zero) {
        check(phx_zero_checkpoint_load(load, net, opt, scaler), load);
        first = sharded_epoch(load);
    } else {
        check(phx_checkpoint_load(load, net, opt, scaler), "--load");
        if (phx_checkpoint_meta(load, "epoch", buf, sizeof buf) == PHX_OK) first = atoi(buf);
    }
    if (rank == 0)
        printf("loaded %s (epoch %d, %lld optimizer steps)\n", load, first, (long long)phx_optimizer_steps(opt));
    return first;
}
#endif
