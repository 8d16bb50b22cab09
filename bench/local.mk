# bench — owned by its area; see Makefile.am
EXTRA_DIST += bench/run.sh
