#!/bin/sh
# make bench: each benchmark beside its PyTorch counterpart (areas append their lines).
set -e
