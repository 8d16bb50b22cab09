# src/autograd — the recorded graph, backward, grad mode and the scopes that
# own operations' results (doc/guide/autograd.md). Tests: t/autograd/.
libphalanx_internal_la_SOURCES += src/autograd/autograd-impl.h src/autograd/node-impl.h src/autograd/node.c \
	src/autograd/engine.c src/autograd/scope.c src/autograd/grad-mode.c

# tests
autograd_tests = t/autograd/module_graph t/autograd/ddp t/autograd/errors t/autograd/autocast t/autograd/autocast_child \
	t/autograd/resnet_parity t/autograd/resnet_ddp t/autograd/retain_wrappers t/autograd/shared_calls
check_PROGRAMS += $(autograd_tests)
TESTS += $(autograd_tests)
t_autograd_module_graph_LDADD = libphalanx.la -lm
t_autograd_ddp_SOURCES = t/autograd/ddp.c t/ddp-util.h
t_autograd_ddp_LDADD = libphalanx.la -lm
t_autograd_ddp_CPPFLAGS = $(ddp_test_cppflags)
t_autograd_errors_LDADD = libphalanx.la -lm
t_autograd_shared_calls_LDADD = libphalanx.la -lm -lpthread
t_autograd_resnet_parity_SOURCES = t/autograd/resnet_parity.c t/gpt-util.h examples/resnet-model.h
t_autograd_resnet_parity_LDADD = libphalanx.la -lm
t_autograd_resnet_ddp_SOURCES = t/autograd/resnet_ddp.c t/ddp-util.h t/gpt-util.h examples/resnet-model.h
t_autograd_resnet_ddp_LDADD = libphalanx.la -lm
t_autograd_resnet_ddp_CPPFLAGS = $(ddp_test_cppflags)
EXTRA_DIST += t/ref/resnet_parity.safetensors bench/torch/resnet.py
t_autograd_autocast_LDADD = libphalanx.la -lm
t_autograd_autocast_child_LDADD = libphalanx.la -lm
t_autograd_retain_wrappers_SOURCES = t/autograd/retain_wrappers.c t/ddp-util.h
t_autograd_retain_wrappers_LDADD = libphalanx.la -lm
t_autograd_retain_wrappers_CPPFLAGS = $(ddp_test_cppflags)
TESTS += t/autograd/examples.sh
EXTRA_DIST += t/autograd/examples.sh
