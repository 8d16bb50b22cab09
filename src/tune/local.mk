# src/tune — per-machine path choice: the CPU's signature, the BLAS core
# OpenBLAS runs on it, and the tuning cache the kernels' choice points ask
# (src/tune/tune.h; doc/reference/env.md PHX_TUNE, doc/maint/bench.md). Tests: t/tune/.
libphalanx_internal_la_SOURCES += src/tune/tune.h src/tune/cpu.c src/tune/cache.c

# The choices: PHX_TUNE=off against the fixed rules, the cache file
# (measured, read, edited, of another CPU, corrupt), forced paths over it,
# and OpenBLAS held to its Prescott kernels (from the internals).
check_PROGRAMS += t/tune/choice
TESTS += t/tune/choice
t_tune_choice_CPPFLAGS = $(AM_CPPFLAGS) $(BLAS_CFLAGS)
t_tune_choice_LDADD = libphalanx-internal.la

# bench/cpu: the CPU, kernel ISA, BLAS and core lines above every make
# bench table (bench/run.sh, doc/maint/bench.md "Fair peers").
noinst_PROGRAMS += bench/cpu
bench_cpu_CPPFLAGS = $(AM_CPPFLAGS) $(BLAS_CFLAGS)
bench_cpu_LDADD = libphalanx-internal.la

# make bench's fair peers: OPENBLAS_CORETYPE set where a side's OpenBLAS
# misdetects the CPU, the header lines and the results.tsv rows.
TESTS += t/tune/bench_peers.sh
EXTRA_DIST += t/tune/bench_peers.sh bench/peers.sh bench/torch/peer.py
