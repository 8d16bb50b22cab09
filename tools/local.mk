# tools — phx-info, phxrun (the launcher) and phx-plot. Tests: t/tools/.

# ---- phx-info: lists the plugins found and why any is rejected.
bin_PROGRAMS += tools/phx-info
tools_phx_info_SOURCES = tools/phx-info.c
tools_phx_info_LDADD = libphalanx.la

# ---- phxrun: the launcher, like torchrun.
bin_PROGRAMS += tools/phxrun
TESTS += t/tools/phxrun.sh
EXTRA_DIST += t/tools/phxrun.sh
tools_phxrun_SOURCES = tools/phxrun.c tools/phxrun-logs.c tools/phxrun-logs.h src/world/free-port.h \
	src/world/master-addr.h

# ---- phx-plot: metrics files (JSON Lines) into PNG curves through gnuplot.
dist_bin_SCRIPTS += tools/phx-plot
TESTS += t/tools/plot.sh t/tools/plot_bench.sh t/tools/phxrun_restart.sh t/tools/phxrun_fail.sh \
	t/tools/phxrun_tee.sh
EXTRA_DIST += t/tools/plot.sh t/tools/plot_bench.sh t/tools/phxrun_restart.sh t/tools/phxrun_fail.sh \
	t/tools/phxrun_tee.sh

# torchrun's --tee values and Ctrl-C's report; --help in every example and
# tool; bootstrap installs what the examples' defaults read.
TESTS += t/tools/phxrun_args.sh t/tools/help.sh t/tools/bootstrap_pkgs.sh t/tools/plot_html.sh
EXTRA_DIST += t/tools/phxrun_args.sh t/tools/help.sh t/tools/bootstrap_pkgs.sh t/tools/plot_html.sh
