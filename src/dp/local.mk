# src/dp — DataParallel (doc/dp.md).
libphalanx_la_SOURCES += src/dp/dp.c src/dp/dp-buffers.c src/dp/dp-reduce.c src/dp/dp-impl.h

check_PROGRAMS += t/dp_chunk
TESTS += t/dp_chunk
t_dp_chunk_LDADD = libphalanx.la -lm

EXTRA_DIST += bench/torch/chunk.py bench/torch/dp.py t/data/dp_chunk.txt

check_PROGRAMS += t/dp_train
TESTS += t/dp_train
t_dp_train_LDADD = libphalanx.la -lm

check_PROGRAMS += t/dp_errors
TESTS += t/dp_errors
t_dp_errors_LDADD = libphalanx.la

check_PROGRAMS += t/dp_steady
TESTS += t/dp_steady
t_dp_steady_LDADD = libphalanx.la

check_PROGRAMS += t/dp_ckpt
TESTS += t/dp_ckpt
t_dp_ckpt_LDADD = libphalanx.la -lm

# The seed's DataParallel program (make demo).
noinst_PROGRAMS += examples/data_parallel
examples_data_parallel_LDADD = libphalanx.la
demo_programs += examples/data_parallel

# make bench: bench/dp beside bench/torch/dp.py.
noinst_PROGRAMS += bench/dp
bench_dp_LDADD = libphalanx.la
bench_programs += bench/dp

check_PROGRAMS += t/dp_precision
TESTS += t/dp_precision
t_dp_precision_LDADD = libphalanx.la -lm
