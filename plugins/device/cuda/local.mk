# plugins/device/cuda — owned by its area; see Makefile.am
