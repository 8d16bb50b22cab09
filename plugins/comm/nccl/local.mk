# plugins/comm/nccl — owned by its area; see Makefile.am
