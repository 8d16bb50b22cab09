# t — the tests. Each area registers its own folder t/<area>/ from its
# local.mk (src/<area>/local.mk; plugins/comm/* for t/comm/, and
# plugins/device/cuda for t/cuda/; tools/local.mk for t/tools/); t/ keeps
# what several areas share: tap.h, the *-util.h helpers, comm_harness.h,
# ckpt-snapshot.h, mpi-util.sh, valgrind.supp, the reference data in t/ref/
# (made by bench/torch/) and the plugins built for tests in t/plugins/.
EXTRA_DIST += t/tap.h
