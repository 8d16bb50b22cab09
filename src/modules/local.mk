# src/modules — the module vtable, parameters, hooks and the built-in
# modules (doc/guide/training.md). Tests: t/modules/.
libphalanx_internal_la_SOURCES += src/modules/module.c src/modules/module-autograd.c src/modules/module-keep.c src/modules/module-impl.h src/modules/buffers.c src/modules/common.c \
	src/modules/activation.c src/modules/activation.h \
	src/modules/linear.c src/modules/relu.c src/modules/gelu.c src/modules/tanh.c \
	src/modules/sigmoid.c src/modules/dropout.c src/modules/layernorm.c src/modules/sequential.c
# transformers (doc/guide/transformer.md)
libphalanx_internal_la_SOURCES += src/modules/transformer-impl.h src/modules/embedding.c src/modules/softmax.c \
	src/modules/residual.c src/modules/attention.c src/modules/gpt.c
# convolutional networks (doc/guide/cnn.md)
libphalanx_internal_la_SOURCES += src/modules/cnn-impl.h src/modules/cnn.c src/modules/conv2d.c \
	src/modules/batchnorm.c src/modules/pool.c
# Every built-in module against a float64 reference and finite differences.
check_PROGRAMS += t/modules/builtin
TESTS += t/modules/builtin
t_modules_builtin_LDADD = libphalanx.la -lm
# Tests of the transformer modules against PyTorch (reference data from
# bench/torch/gpt.py in t/ref).
gpt_tests = t/modules/gpt t/modules/gpt_train
check_PROGRAMS += $(gpt_tests)
TESTS += $(gpt_tests)
t_modules_gpt_LDADD = libphalanx.la -lm
t_modules_gpt_train_LDADD = libphalanx.la -lm
t_modules_gpt_train_CPPFLAGS = $(ddp_test_cppflags)
EXTRA_DIST += t/gpt-util.h bench/torch/gpt.py t/ref/gpt_modules.safetensors t/ref/gpt_train.safetensors \
	t/ref/gpt_sched.safetensors
TESTS += t/modules/gpt_example.sh
EXTRA_DIST += t/modules/gpt_example.sh
# Tests of the CNN modules against PyTorch (reference data from
# bench/torch/cnn.py in t/ref).
cnn_tests = t/modules/cnn t/modules/cnn_sync t/modules/cnn_state t/modules/cnn_alloc
check_PROGRAMS += $(cnn_tests)
TESTS += $(cnn_tests)
t_modules_cnn_LDADD = libphalanx.la -lm
t_modules_cnn_sync_LDADD = libphalanx.la -lm
t_modules_cnn_sync_CPPFLAGS = $(ddp_test_cppflags)
t_modules_cnn_state_LDADD = libphalanx.la -lm
t_modules_cnn_alloc_LDADD = libphalanx.la
TESTS += t/modules/cnn_paths.sh t/modules/cnn_example.sh
EXTRA_DIST += t/modules/cnn_paths.sh t/modules/cnn_example.sh bench/torch/cnn_train.py
EXTRA_DIST += bench/torch/cnn.py t/ref/cnn_modules.safetensors t/ref/cnn_state.safetensors \
	t/ref/cnn_state_io.safetensors
