# examples — owned by its area; see Makefile.am
EXTRA_DIST += examples/demo.sh
EXTRA_DIST += examples/progress.h
