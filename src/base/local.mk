# src/base — errors, logging, version, small helpers every area uses, and
# the CPU thread budget with its worker pool (src/base/threads.h), the
# library ABI's checks. Tests: t/base/.
libphalanx_internal_la_SOURCES += src/base/version.c src/base/util.c src/base/util.h \
	src/base/error.c src/base/log.c \
	src/base/abi.c src/base/abi.h src/base/abi-1.0.c \
	src/base/threads.c src/base/threads.h src/base/threads-pool.c src/base/threads-pool.h
# The BLAS adapter: one, for the BLAS configure found (none for another CBLAS).
if BLAS_OPENBLAS
libphalanx_internal_la_SOURCES += src/base/threads-openblas.c
endif
if BLAS_BLIS
libphalanx_internal_la_SOURCES += src/base/threads-blis.c
endif

# The worker pool is internal (px_): its test links the internals.
check_PROGRAMS += t/base/pool
TESTS += t/base/pool
t_base_pool_LDADD = libphalanx-internal.la

# The budget's width as the kernels see it, in every BLAS configuration:
# the owner, its pool, the world's parser and the kernels' loop (from the
# internals).
check_PROGRAMS += t/base/threads_width
TESTS += t/base/threads_width
t_base_threads_width_CPPFLAGS = $(AM_CPPFLAGS) $(BLAS_CFLAGS)
t_base_threads_width_LDADD = libphalanx-internal.la

# The library ABI: programs built against the 1.0 headers run on today's
# library (t/base/abi-lib-1.0 holds those headers as they were).
TESTS += t/base/abi_lib.sh
EXTRA_DIST += t/base/abi_lib.sh t/base/abi-lib t/base/abi-lib-1.0

# The ABI baseline libabigail diffs against (t/base/abi_diff.sh, doc/maint/abi.md).
TESTS += t/base/abi_diff.sh
EXTRA_DIST += t/base/abi_diff.sh abi/libphalanx.abi
abi-baseline: libphalanx.la
	$(MKDIR_P) $(srcdir)/abi
	abidw --exported-interfaces-only --headers-dir $(srcdir)/include/phalanx --drop-private-types --no-corpus-path \
	    --out-file $(srcdir)/abi/libphalanx.abi .libs/libphalanx.so
abi-check: libphalanx.la
	top_srcdir=$(abs_top_srcdir) top_builddir=$(abs_top_builddir) $(SHELL) $(srcdir)/t/base/abi_diff.sh
.PHONY: abi-baseline abi-check

# The named-option constructors beside their positional forms.
check_PROGRAMS += t/base/abi_opts
TESTS += t/base/abi_opts
t_base_abi_opts_LDADD = libphalanx.la

# Errors: codes, messages, phx_last_error.
check_PROGRAMS += t/base/error
TESTS += t/base/error
t_base_error_LDADD = libphalanx.la -lm
