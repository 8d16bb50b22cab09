/* Two inputs, two outputs, two losses, one backward: a plain C function
 * over tensor operations (doc/guide/autograd.md). Each Fashion-MNIST image comes
 * with a second input computed from it on the device, its profile (the 28
 * row sums and 28 column sums, phx_sum + phx_cat). A convolutional branch
 * reads the image, a linear branch the profile; phx_cat joins them for the
 * classifier, and the profile branch also feeds an auxiliary head whose
 * loss is added with weight 0.3. Adam, batch 128, test accuracy at the end.
 *
 *   two_input [--epochs N] [--train-rows N] [--metrics FILE] [--tensorboard DIR]
 *             [--log-every N] [--help]
 *
 * The parameters live in one module (children registered by name, no
 * forward of its own is needed), so the optimizer, checkpoints and
 * phx_module_to see them as usual. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <phalanx/phalanx.h>
#include "examples/fmnist.h"
#include "examples/args.h"

static phx_tensor *fwd(phx_module *m, const phx_tensor *x)
{
    phx_tensor *y = NULL;
    return x && phx_module_forward(m, x, &y) == PHX_OK ? y : NULL;
}

static phx_module *child(const phx_module *m, const char *name)
{
    return phx_module_find_child(m, name);
}

/* The profile of images (n, 1, 28, 28): (n, 56), row sums then column
 * sums, scaled to about unit size. */
static phx_tensor *profile(const phx_tensor *images)
{
    int rows[1] = {3}, cols[1] = {2};
    const phx_tensor *parts[2] = {phx_flatten(phx_sum(images, 1, rows, false), 1, -1),
                                  phx_flatten(phx_sum(images, 1, cols, false), 1, -1)};
    return phx_div_scalar(phx_cat(2, parts, 1), 28.0);
}

/* The model: (image, profile) -> (logits, aux_logits). */
static phx_status forward2(phx_module *net, const phx_tensor *image, const phx_tensor *prof, phx_tensor **logits,
                           phx_tensor **aux)
{
    phx_tensor *a = phx_flatten(fwd(child(net, "pool"), phx_relu(fwd(child(net, "conv"), image))), 1, -1);
    phx_tensor *b = phx_relu(fwd(child(net, "profile"), prof));
    const phx_tensor *both[2] = {a, b};
    *logits = fwd(child(net, "head"), phx_cat(2, both, 1));
    *aux = fwd(child(net, "aux"), b);
    return *logits && *aux ? PHX_OK : PHX_EINVAL;
}

static void no_ctx(phx_module *self)
{
    (void)self;
}

static phx_status unused_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    (void)self, (void)x, (void)y;
    return phx_error(PHX_EUNSUPPORTED, "two_input: the model takes two inputs: call forward2");
}

static const phx_module_vtable net_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE, .type_name = "TwoInput", .forward = unused_forward, .free = no_ctx};

static phx_module *net_new(phx_rng *rng)
{
    phx_conv2d_opts o = PHX_CONV2D_OPTS_INIT;
    o.padding[0] = o.padding[1] = 1;
    phx_module *m = phx_module_new(&net_vt, NULL);
    if (!m) return NULL;
    phx_status st = phx_module_add_child(m, "conv", phx_conv2d_new(1, 8, 3, 3, &o, rng));
    if (!st) st = phx_module_add_child(m, "pool", phx_maxpool2d_new(2, 0, 0));
    if (!st) st = phx_module_add_child(m, "profile", phx_linear_new(56, 32, true, rng));
    if (!st) st = phx_module_add_child(m, "head", phx_linear_new(8 * 14 * 14 + 32, 10, true, rng));
    if (!st) st = phx_module_add_child(m, "aux", phx_linear_new(32, 10, true, rng));
    if (st) {
        phx_module_free(m);
        return NULL;
    }
    return m;
}

int main(int argc, char **argv)
{
    fm_prog = "two_input";
    int epochs = 1;
    int64_t train_rows = 0, batch = 128;
    const char *usage = "usage: two_input [--epochs N] [--train-rows N] " EX_PROGRESS_USAGE "\n"
                        "Two inputs (image, its profile), two heads, two losses summed, one phx_backward "
                        "(doc/guide/autograd.md).\n"
                        "  --epochs N         passes over the training set (default 1)\n"
                        "  --train-rows N     train on the first N images only\n" EX_PROGRESS_HELP;
    phx_progress_opts po = PHX_PROGRESS_OPTS_INIT;
    if (ex_help(argc, argv, usage)) return 0;
    if (ex_progress_args(&argc, argv, &po)) return 2;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) {
            fprintf(stderr, "two_input: %s needs a value (see --help)\n", argv[i]);
            return 2;
        }
        if (!strcmp(argv[i], "--epochs")) {
            if (ex_int_arg(fm_prog, argv[i], argv[i + 1], 1, INT_MAX, &epochs)) return 2;
        } else if (!strcmp(argv[i], "--train-rows")) { /* 0: all */
            if (ex_int64_arg(fm_prog, argv[i], argv[i + 1], 0, INT64_MAX, &train_rows)) return 2;
        } else {
            fprintf(stderr, "two_input: unknown option '%s' (see --help)\n", argv[i]);
            return 2;
        }
        i++;
    }
    phx_tensor *xtr = read_idx("train-images-idx3-ubyte.gz"), *ytr = read_idx("train-labels-idx1-ubyte.gz");
    phx_tensor *xte = read_idx("t10k-images-idx3-ubyte.gz"), *yte = read_idx("t10k-labels-idx1-ubyte.gz");
    int64_t n = train_rows > 0 && train_rows < phx_tensor_dim(xtr, 0) ? train_rows : phx_tensor_dim(xtr, 0);
    phx_rng *rng = phx_rng_new(0);
    phx_module *net = net_new(rng);
    phx_adam_opts ao = PHX_ADAM_OPTS_INIT;
    ao.lr = 1e-3;
    phx_optimizer *opt = net ? phx_adam_new(net, &ao) : NULL;
    if (!opt) die("model");
    phx_loader *train = phx_loader_new(xtr, ytr, batch, true, 0, false, NULL, 0);
    if (!train) die("loader");
    int64_t per_epoch = (n + batch - 1) / batch;
    po.total_steps = (int64_t)epochs * per_epoch;
    phx_progress *prog = phx_progress_new(&po);
    if (!prog) die("--metrics/--tensorboard");
    printf("two inputs (image, profile), two heads, loss = CE(head) + 0.3 CE(aux), Adam lr 1e-3, batch %lld\n",
           (long long)batch);
    for (int e = 0; e < epochs; e++) {
        phx_loader_set_epoch(train, e);
        double t0 = now(), sum = 0;
        int64_t steps = 0, seen = 0;
        phx_tensor *xb, *yb;
        while (seen < n && phx_loader_next(train, &xb, &yb) == 1) {
            phx_scope *s = phx_scope_begin();
            phx_tensor *img = phx_reshape(xb, 4, (int64_t[]){phx_tensor_dim(xb, 0), 1, 28, 28}), *logits, *aux;
            check(phx_optimizer_zero_grad(opt), "zero_grad");
            check(forward2(net, img, profile(img), &logits, &aux), "forward");
            phx_tensor *loss = phx_add(phx_cross_entropy(logits, yb), phx_mul_scalar(phx_cross_entropy(aux, yb), 0.3));
            double l = 0;
            check(loss ? phx_tensor_get(loss, 0, &l) : PHX_EINVAL, "loss");
            check(phx_backward(loss), "backward");
            check(phx_optimizer_step(opt), "step");
            phx_scope_end(s);
            sum += l, steps++, seen += phx_tensor_dim(xb, 0);
            phx_progress_step(prog, e + 1, l, ao.lr, (double)seen / (now() - t0));
        }
        phx_progress_break(prog);
        printf("Epoch [%d/%d], Loss: %.4f, %.0f samples/s\n", e + 1, epochs, sum / (double)steps,
               (double)seen / (now() - t0));
    }
    /* Test accuracy: argmax of the main head, no recording. */
    bool prev = phx_set_grad_enabled(false);
    phx_module_train(net, false);
    phx_loader *test = phx_loader_new(xte, yte, 1000, false, 0, false, NULL, 0);
    double right = 0, total = 0;
    phx_tensor *xb, *yb;
    while (test && phx_loader_next(test, &xb, &yb) == 1) {
        phx_scope *s = phx_scope_begin();
        phx_tensor *img = phx_reshape(xb, 4, (int64_t[]){phx_tensor_dim(xb, 0), 1, 28, 28}), *logits, *aux, *hit;
        check(forward2(net, img, profile(img), &logits, &aux), "test forward");
        hit = phx_sum(phx_eq(phx_to_dtype(phx_argmax(logits, 1, false), PHX_F32), phx_to_dtype(yb, PHX_F32)), 0, NULL,
                      false);
        double h = 0;
        check(hit ? phx_tensor_get(hit, 0, &h) : PHX_EINVAL, "accuracy");
        right += h, total += (double)phx_tensor_dim(xb, 0);
        phx_scope_end(s);
    }
    phx_set_grad_enabled(prev);
    printf("Test accuracy: %.4f\n", total > 0 ? right / total : 0.0);
    phx_progress_record(prog, epochs, "accuracy", total > 0 ? right / total : 0.0);
    phx_progress_free(prog);
    phx_loader_free(test);
    phx_loader_free(train);
    phx_optimizer_free(opt);
    phx_module_free(net);
    phx_rng_free(rng);
    phx_tensor_free(xtr), phx_tensor_free(ytr), phx_tensor_free(xte), phx_tensor_free(yte);
    return 0;
}
