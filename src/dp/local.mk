# src/dp — DataParallel (doc/guide/dp.md). Tests: t/dp/.
libphalanx_internal_la_SOURCES += src/dp/dp.c src/dp/dp-buffers.c src/dp/dp-reduce.c src/dp/dp-impl.h

check_PROGRAMS += t/dp/chunk
TESTS += t/dp/chunk
t_dp_chunk_LDADD = libphalanx.la -lm

EXTRA_DIST += bench/torch/chunk.py bench/torch/dp.py t/ref/dp_chunk.txt

check_PROGRAMS += t/dp/train
TESTS += t/dp/train
t_dp_train_LDADD = libphalanx.la -lm

check_PROGRAMS += t/dp/errors
TESTS += t/dp/errors
t_dp_errors_LDADD = libphalanx.la

check_PROGRAMS += t/dp/steady
TESTS += t/dp/steady
t_dp_steady_LDADD = libphalanx.la

check_PROGRAMS += t/dp/ckpt
TESTS += t/dp/ckpt
t_dp_ckpt_LDADD = libphalanx.la -lm

# The seed's DataParallel program (make demo).
noinst_PROGRAMS += examples/data_parallel
examples_data_parallel_LDADD = libphalanx.la
demo_programs += examples/data_parallel

# make bench: bench/dp beside bench/torch/dp.py.
noinst_PROGRAMS += bench/dp
bench_dp_LDADD = libphalanx.la
bench_programs += bench/dp

check_PROGRAMS += t/dp/precision
TESTS += t/dp/precision
t_dp_precision_LDADD = libphalanx.la -lm
