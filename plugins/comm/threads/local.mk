# plugins/comm/threads — owned by its area; see Makefile.am
