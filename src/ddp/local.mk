# src/ddp — DistributedDataParallel (doc/guide/ddp.md). Tests: t/ddp/.
libphalanx_internal_la_SOURCES += src/ddp/ddp.c src/ddp/ddp-buckets.c src/ddp/ddp-check.c src/ddp/ddp-join.c src/ddp/ddp-zero2.c \
	src/ddp/ddp-impl.h src/ddp/ddp-hook.c src/ddp/ddp-hook.h src/ddp/ddp-hook-powersgd.c

ddp_tests = t/ddp/buckets t/ddp/equiv t/ddp/overlap t/ddp/nosync t/ddp/unused \
	t/ddp/mismatch t/ddp/join t/ddp/eval t/ddp/solo t/ddp/wrapper
check_PROGRAMS += $(ddp_tests)
TESTS += $(ddp_tests)
ddp_test_cppflags = $(AM_CPPFLAGS)
if HAVE_GLOO
ddp_test_cppflags += -DHAVE_GLOO=1
endif
t_ddp_buckets_LDADD = libphalanx.la
t_ddp_buckets_CPPFLAGS = $(ddp_test_cppflags)
t_ddp_equiv_LDADD = libphalanx.la -lm
t_ddp_equiv_CPPFLAGS = $(ddp_test_cppflags)
t_ddp_overlap_LDADD = libphalanx.la -lm
t_ddp_overlap_CPPFLAGS = $(ddp_test_cppflags)
t_ddp_nosync_LDADD = libphalanx.la -lm
t_ddp_nosync_CPPFLAGS = $(ddp_test_cppflags)
t_ddp_unused_LDADD = libphalanx.la -lm
t_ddp_unused_CPPFLAGS = $(ddp_test_cppflags)
t_ddp_mismatch_LDADD = libphalanx.la -lm
t_ddp_mismatch_CPPFLAGS = $(ddp_test_cppflags)
t_ddp_join_LDADD = libphalanx.la -lm
t_ddp_join_CPPFLAGS = $(ddp_test_cppflags)
t_ddp_eval_LDADD = libphalanx.la -lm
t_ddp_eval_CPPFLAGS = $(ddp_test_cppflags)
t_ddp_solo_LDADD = libphalanx.la -lm
t_ddp_solo_CPPFLAGS = $(ddp_test_cppflags)
t_ddp_wrapper_LDADD = libphalanx.la -lm
t_ddp_wrapper_CPPFLAGS = $(ddp_test_cppflags)
EXTRA_DIST += bench/torch/ddp_join.py t/ref/ddp_join.safetensors

EXTRA_DIST += t/ddp-util.h bench/torch/sampler.py t/ref/sampler.txt bench/torch/buckets.py \
	t/ref/buckets.txt

# The seed's DDP program (make demo) and the DDP benchmark (make bench).
noinst_PROGRAMS += examples/ddp bench/ddp
examples_ddp_LDADD = libphalanx.la
bench_ddp_LDADD = libphalanx.la -lm
demo_programs += examples/ddp
bench_programs += bench/ddp
EXTRA_DIST += bench/torch/ddp.py
TESTS += t/ddp/example.sh
EXTRA_DIST += t/ddp/example.sh

# A wrapper holds a reference to its model: either free order is safe.
check_PROGRAMS += t/ddp/free_order
TESTS += t/ddp/free_order
t_ddp_free_order_LDADD = libphalanx.la -lm
t_ddp_free_order_CPPFLAGS = $(ddp_test_cppflags)

# Communication hooks: allreduce/fp16/bf16 bit checks; PowerSGD against
# PyTorch 1.13 (t/ref/powersgd.safetensors from bench/torch/powersgd.py).
comm_hook_tests = t/ddp/comm_hook t/ddp/comm_hook_powersgd
check_PROGRAMS += $(comm_hook_tests)
TESTS += $(comm_hook_tests)
t_ddp_comm_hook_LDADD = libphalanx.la -lm
t_ddp_comm_hook_CPPFLAGS = $(ddp_test_cppflags)
t_ddp_comm_hook_powersgd_LDADD = libphalanx.la -lm
t_ddp_comm_hook_powersgd_CPPFLAGS = $(ddp_test_cppflags)
EXTRA_DIST += bench/torch/powersgd.py t/ref/powersgd.safetensors
