# tools/check — the tree's checks of itself (doc/maint/internals.md, "Checks the
# tree runs"): formatting, exported symbols, kernel-slot coverage, the
# docs' names, links and code blocks, and the map's names. Each is a TAP
# test of make check; make lint runs only them.

lint_checks = tools/check/format.sh tools/check/exports.sh tools/check/kernel-slots.py tools/check/docs.sh \
	tools/check/internals-map.py
TESTS += $(lint_checks)
EXTRA_DIST += $(lint_checks) tools/check/format-exempt tools/check/docs-exceptions

# Builds the library, the plugins and t/cuda/kernels (its coverage table
# is checked by the compiler), then runs the five scripts; fails on a
# "not ok" that is not a TODO.
.PHONY: lint
lint: all t/cuda/kernels$(EXEEXT)
	@fail=0; for c in $(lint_checks); do \
	    out=`top_srcdir='$(abs_top_srcdir)' top_builddir='$(abs_top_builddir)' $(srcdir)/$$c` || fail=1; \
	    bad=`echo "$$out" | grep '^not ok' | grep -v '# TODO'`; \
	    echo "$$c: `echo "$$out" | grep -c '^ok'` ok, `echo "$$out" | grep -c '^not ok'` not ok`echo "$$out" | \
	        sed -n 's/^1\.\.0 # SKIP/, skipped:/p'`"; \
	    if test -n "$$bad"; then echo "$$bad"; fail=1; fi; \
	done; exit $$fail
