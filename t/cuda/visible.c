/* CUDA_VISIBLE_DEVICES as the cuda and nccl plugins read it when they
 * count devices without initialising CUDA (plugins/device/cuda/visible.c):
 * entries up to the first invalid or repeated index, UUIDs accepted. The
 * expected counts are CUDA's documented behaviour, worked out by hand. */
#include "plugins/device/cuda/visible.h"
#include "t/tap.h"

int main(void)
{
    plan(14);
    is_int(px_cuda_visible_filter(NULL, 4), 4, "unset: every device");
    is_int(px_cuda_visible_filter("", 4), 0, "empty: none");
    is_int(px_cuda_visible_filter("0", 4), 1, "0");
    is_int(px_cuda_visible_filter("2,3", 4), 2, "2,3");
    is_int(px_cuda_visible_filter("1, 0", 4), 2, "spaces after commas are allowed");
    is_int(px_cuda_visible_filter("0,5,1", 4), 1, "an index past the count ends the list");
    is_int(px_cuda_visible_filter("0,-1,1", 4), 1, "-1 ends the list");
    is_int(px_cuda_visible_filter("1,1", 4), 1, "a repeated index ends the list");
    is_int(px_cuda_visible_filter("0,x,1", 4), 1, "garbage ends the list");
    is_int(px_cuda_visible_filter("-1", 2), 0, "-1 alone hides everything");
    is_int(px_cuda_visible_filter("GPU-8a3b2c1d-0000-1111-2222-333344445555", 1), 1, "a GPU UUID counts");
    is_int(px_cuda_visible_filter("MIG-1234abcd,GPU-9", 2), 2, "MIG and GPU UUIDs");
    is_int(px_cuda_visible_filter("0,1,2,3", 2), 2, "never more than the machine has");
    is_int(px_cuda_visible_filter("0,", 4), 1, "a trailing comma ends the list");
    return done_testing();
}
