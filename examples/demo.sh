#!/bin/sh
# make demo: runs each example in turn (areas append their lines).
set -e
