/* Hybrid sharding against DDP: world 4 as 2 "nodes" of 2 ranks
 * (phx_comm_split: groups {0, 1} and {2, 3} shard, {0, 2} and {1, 3}
 * replicate), ZeRO-1 and ZeRO-2 with shard_comm and replicate_comm, the
 * same models, steps, GradScaler inf step and checks as t/zero/equiv
 * (whose code this is), threads and gloo; plus ZeRO-2 with a micro-batch
 * accumulated under no_sync. Under phxrun (RANK set) it runs the hybrid
 * jobs on the environment's world of 4 instead (t/zero/hybrid_nodes.sh). */
#define ZERO_HYBRID 1
#include "t/zero/equiv.c"
