# examples — owned by its area; see Makefile.am
EXTRA_DIST += examples/demo.sh
