# core/base — errors, logging, version, small helpers every area uses.
libphalanx_la_SOURCES += core/base/version.c core/base/util.c core/base/util.h \
	core/base/error.c core/base/log.c \
	core/base/abi.c core/base/abi.h core/base/abi-1.0.c

# The library ABI: programs built against the 1.0 headers run on today's
# library (t/abi-lib-1.0 holds those headers as they were).
TESTS += t/abi_lib.sh
EXTRA_DIST += t/abi_lib.sh t/abi-lib t/abi-lib-1.0

# The ABI baseline libabigail diffs against (t/abi_diff.sh, doc/abi.md).
TESTS += t/abi_diff.sh
EXTRA_DIST += t/abi_diff.sh abi/libphalanx.abi
abi-baseline: libphalanx.la
	$(MKDIR_P) $(srcdir)/abi
	abidw --exported-interfaces-only --headers-dir $(srcdir)/include/phalanx --drop-private-types --no-corpus-path \
	    --out-file $(srcdir)/abi/libphalanx.abi .libs/libphalanx.so
abi-check: libphalanx.la
	top_srcdir=$(abs_top_srcdir) top_builddir=$(abs_top_builddir) $(SHELL) $(srcdir)/t/abi_diff.sh
.PHONY: abi-baseline abi-check

# The named-option constructors beside their positional forms.
check_PROGRAMS += t/abi_opts
TESTS += t/abi_opts
t_abi_opts_LDADD = libphalanx.la
