/* The examples/resnet model, written with forward-only modules: a stem
 * conv3x3(1->16)-BN-ReLU, three stages of one BasicBlock each (16, 32 and
 * 64 channels; stages 2 and 3 halve the image with a stride-2 conv and a
 * 1x1 stride-2 projection shortcut), global average pooling and a linear
 * classifier. Children are named as torch's state_dict names them
 * (bench/torch/resnet.py builds the same model), so checkpoints pass
 * between the two. Each forward is a few lines: the core derives the
 * backward (doc/guide/autograd.md). */
#ifndef PHX_EXAMPLES_RESNET_MODEL_H
#define PHX_EXAMPLES_RESNET_MODEL_H

#include <stdlib.h>
#include <phalanx/phalanx.h>

/* m(x), or NULL with phx_last_error when m fails or x is NULL. */
static inline phx_tensor *fwd(phx_module *m, const phx_tensor *x)
{
    phx_tensor *y = NULL;
    return x && phx_module_forward(m, x, &y) == PHX_OK ? y : NULL;
}

/* Child `name` of m: the forward-only modules here keep no context of their
 * own (so phx_module_clone, DataParallel's replicas, need no clone slot). */
static inline phx_module *child(const phx_module *m, const char *name)
{
    return phx_module_find_child(m, name);
}

static phx_status basic_block_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    phx_tensor *h = phx_relu(fwd(child(self, "bn1"), fwd(child(self, "conv1"), x)));
    h = fwd(child(self, "bn2"), fwd(child(self, "conv2"), h));
    phx_module *proj = child(self, "proj");
    *y = phx_relu(phx_add(h, proj ? fwd(proj, x) : x));
    return *y ? PHX_OK : PHX_EINVAL;
}

static void no_ctx(phx_module *self)
{
    (void)self;
}

static const phx_module_vtable basic_block_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "BasicBlock",
    .forward = basic_block_forward,
    .free = no_ctx,
};

static phx_module *conv_bn(phx_module *seq, int64_t cin, int64_t cout, int64_t k, int64_t stride, phx_rng *rng)
{
    phx_conv2d_opts o = PHX_CONV2D_OPTS_INIT;
    o.stride[0] = o.stride[1] = stride;
    o.padding[0] = o.padding[1] = k / 2;
    o.bias = false;
    phx_sequential_add(seq, phx_conv2d_new(cin, cout, k, k, &o, rng));
    phx_sequential_add(seq, phx_batchnorm2d_new(cout, 1e-5f, 0.1f, true, true));
    return seq;
}

static phx_module *basic_block_new(int64_t cin, int64_t cout, int64_t stride, phx_rng *rng)
{
    phx_module *m = phx_module_new(&basic_block_vt, NULL);
    if (!m) return NULL;
    phx_conv2d_opts o = PHX_CONV2D_OPTS_INIT;
    o.padding[0] = o.padding[1] = 1;
    o.bias = false;
    o.stride[0] = o.stride[1] = stride;
    phx_status st = phx_module_add_child(m, "conv1", phx_conv2d_new(cin, cout, 3, 3, &o, rng));
    if (!st) st = phx_module_add_child(m, "bn1", phx_batchnorm2d_new(cout, 1e-5f, 0.1f, true, true));
    o.stride[0] = o.stride[1] = 1;
    if (!st) st = phx_module_add_child(m, "conv2", phx_conv2d_new(cout, cout, 3, 3, &o, rng));
    if (!st) st = phx_module_add_child(m, "bn2", phx_batchnorm2d_new(cout, 1e-5f, 0.1f, true, true));
    if (!st && (stride != 1 || cin != cout))
        st = phx_module_add_child(m, "proj", conv_bn(phx_sequential_new(), cin, cout, 1, stride, rng));
    if (st) {
        phx_module_free(m);
        return NULL;
    }
    return m;
}

static phx_status resnet_forward(phx_module *self, const phx_tensor *x, phx_tensor **y)
{
    phx_tensor *h = fwd(child(self, "stem"), x);
    h = fwd(child(self, "layer3"), fwd(child(self, "layer2"), fwd(child(self, "layer1"), h)));
    *y = fwd(child(self, "fc"), fwd(child(self, "flatten"), fwd(child(self, "pool"), h)));
    return *y ? PHX_OK : PHX_EINVAL;
}

static const phx_module_vtable resnet_vt = {
    .struct_size = PHX_MODULE_VTABLE_SIZE,
    .type_name = "ResNet",
    .forward = resnet_forward,
    .free = no_ctx,
};

/* The model with torch's default initialisation drawn from rng (widths
 * 16, 32, 64). NULL with phx_last_error on failure. */
static phx_module *resnet_new(phx_rng *rng)
{
    phx_module *m = phx_module_new(&resnet_vt, NULL);
    if (!m) return NULL;
    phx_module *stem = conv_bn(phx_sequential_new(), 1, 16, 3, 1, rng);
    phx_sequential_add(stem, phx_relu_new());
    phx_status st = phx_module_add_child(m, "stem", stem);
    if (!st) st = phx_module_add_child(m, "layer1", basic_block_new(16, 16, 1, rng));
    if (!st) st = phx_module_add_child(m, "layer2", basic_block_new(16, 32, 2, rng));
    if (!st) st = phx_module_add_child(m, "layer3", basic_block_new(32, 64, 2, rng));
    if (!st) st = phx_module_add_child(m, "pool", phx_adaptive_avgpool2d_new(1, 1));
    if (!st) st = phx_module_add_child(m, "flatten", phx_flatten_new());
    if (!st) st = phx_module_add_child(m, "fc", phx_linear_new(64, 10, true, rng));
    if (st) {
        phx_module_free(m);
        return NULL;
    }
    return m;
}
#endif
