# plugins/comm/gloo — owned by its area; see Makefile.am
