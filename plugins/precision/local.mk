# plugins/precision — owned by its area; see Makefile.am
