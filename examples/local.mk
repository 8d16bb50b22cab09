# examples — owned by its area; see Makefile.am
EXTRA_DIST += examples/demo.sh
EXTRA_DIST += examples/args.h
# A character-level GPT on Debian's fortunes (doc/guide/transformer.md).
noinst_PROGRAMS += examples/gpt
demo_programs += examples/gpt
examples_gpt_LDADD = libphalanx.la -lm
EXTRA_DIST += examples/fmnist.h
# A CNN with BatchNorm on Fashion-MNIST (doc/guide/cnn.md): one process, --dp,
# DDP under phxrun, --sync-bn.
noinst_PROGRAMS += examples/cnn
demo_programs += examples/cnn
examples_cnn_LDADD = libphalanx.la -lm
# A ResNet of forward-only modules on Fashion-MNIST (doc/guide/autograd.md):
# one process, DDP under phxrun, --sync-bn, PHX_PRECISION=bf16.
noinst_PROGRAMS += examples/resnet
demo_programs += examples/resnet
# examples/cnn.c built with -DEXAMPLE_RESNET: the same program, the model of
# examples/resnet-model.h.
examples_resnet_SOURCES = examples/cnn.c
examples_resnet_CPPFLAGS = $(AM_CPPFLAGS) -DEXAMPLE_RESNET
examples_resnet_LDADD = libphalanx.la -lm
EXTRA_DIST += examples/resnet-model.h
# Two inputs, two heads, two losses, one backward (doc/guide/autograd.md).
noinst_PROGRAMS += examples/two_input
demo_programs += examples/two_input
examples_two_input_LDADD = libphalanx.la -lm
# --zero 1|2 in examples/gpt and examples/fashion_mnist: against --zero 0,
# and a sharded checkpoint saved at 4 ranks resumed at 2 and 1.
TESTS += t/examples/zero.sh
EXTRA_DIST += t/examples/zero.sh
