# src/modules — the module vtable, parameters, hooks and the built-in
# modules (doc/training.md). Tests are registered in src/train/local.mk.
libphalanx_la_SOURCES += src/modules/module.c src/modules/module-impl.h src/modules/buffers.c src/modules/common.c \
	src/modules/activation.c src/modules/activation.h \
	src/modules/linear.c src/modules/relu.c src/modules/gelu.c src/modules/tanh.c \
	src/modules/sigmoid.c src/modules/dropout.c src/modules/layernorm.c src/modules/sequential.c
# transformers (doc/transformer.md)
libphalanx_la_SOURCES += src/modules/transformer-impl.h src/modules/embedding.c src/modules/softmax.c \
	src/modules/residual.c src/modules/attention.c src/modules/gpt.c
# convolutional networks (doc/cnn.md)
libphalanx_la_SOURCES += src/modules/cnn-impl.h src/modules/cnn.c src/modules/conv2d.c \
	src/modules/batchnorm.c src/modules/pool.c
# Tests of the transformer modules and training tools against PyTorch
# (reference data from bench/torch/gpt.py in t/data).
gpt_tests = t/gpt_modules t/gpt_train t/gpt_sched
check_PROGRAMS += $(gpt_tests)
TESTS += $(gpt_tests)
t_gpt_modules_LDADD = libphalanx.la -lm
t_gpt_train_LDADD = libphalanx.la -lm
t_gpt_sched_LDADD = libphalanx.la -lm
t_gpt_train_CPPFLAGS = $(ddp_test_cppflags)
EXTRA_DIST += t/gpt-util.h bench/torch/gpt.py t/data/gpt_modules.safetensors t/data/gpt_train.safetensors \
	t/data/gpt_sched.safetensors
TESTS += t/gpt_example.sh
EXTRA_DIST += t/gpt_example.sh
# Tests of the CNN modules against PyTorch (reference data from
# bench/torch/cnn.py in t/data).
cnn_tests = t/cnn_modules t/cnn_sync t/cnn_state t/cnn_alloc t/core_conv
check_PROGRAMS += $(cnn_tests)
TESTS += $(cnn_tests)
t_cnn_modules_LDADD = libphalanx.la -lm
t_cnn_sync_LDADD = libphalanx.la -lm
t_cnn_sync_CPPFLAGS = $(ddp_test_cppflags)
t_cnn_state_LDADD = libphalanx.la -lm
t_cnn_alloc_LDADD = libphalanx.la
t_core_conv_SOURCES = t/core_conv.c t/core-util.h
t_core_conv_LDADD = libphalanx.la -lm
TESTS += t/cnn_paths.sh t/cnn_example.sh
EXTRA_DIST += t/cnn_paths.sh t/cnn_example.sh bench/torch/cnn_train.py
EXTRA_DIST += bench/torch/cnn.py t/data/cnn_modules.safetensors t/data/cnn_state.safetensors \
	t/data/cnn_state_io.safetensors
