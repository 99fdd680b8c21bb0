/* train/dist.h — several ranks: an MPI launch detected by itself, the shard rule, and the
 * collectives the data-parallel and ZeRO modes need. Internal to train/.
 *
 * A single process (no launcher) is rank 0 of 1 and never touches MPI. Under a launcher
 * (Open MPI's mpirun, a PMI/PMIx launcher such as MPICH's hydra or Slurm's srun) the trainer
 * calls MPI_Init itself; a build without MPI (no mpicc at build time) refuses to run as more
 * than one rank.
 *
 * Shards (train/README.md, "Several ranks"): a tensor of n elements is cut
 * into world shards of S = ceil(n / world) elements; rank r owns [r S, min(n, (r+1) S)).
 *
 * Transports, chosen by dist_setup:
 *   mpi          device memory is host memory (the virtual GPU): after a stream
 *                synchronization MPI reads and writes the tensors themselves;
 *   nccl         real GPUs with libnccl.so.2 found at run time (dlopen; no NCCL header or
 *                library is needed at build time): enqueued on the compute stream;
 *   mpi-staged   real GPUs without NCCL: through pinned host buffers, then MPI.
 * None of them allocates device memory. */
#ifndef TRAIN_DIST_H
#define TRAIN_DIST_H

#include <stddef.h>

/* Detects a launch by an MPI launcher and initializes MPI under one; selects the device of
 * this rank (local rank modulo the device count) when there are several. Returns 0, or 1 with
 * a message (a multi-rank launch of a build without MPI). Call before any other CUDA work. */
int dist_init(int *argc, char ***argv);
/* Ends MPI (if dist_init started it). */
void dist_finalize(void);
/* Ends the whole job after an error on this rank (MPI_Abort), so that the other ranks do not
 * wait forever in a collective; returns (does nothing) with one rank. */
void dist_abort(int code);

int dist_rank(void);
int dist_world(void);

/* The shard of a tensor of n elements: S = ceil(n / world) (what every rank allocates); and
 * this rank's part [*off, *off + *count) of the full tensor (count <= S; 0 possible). */
size_t dist_shard_size(size_t n);
void dist_own(size_t n, size_t *off, size_t *count);

/* Picks the transport for device buffers: stream is the compute stream (cudaStream_t),
 * host_memory says device pointers are host memory (the virtual GPU), max_elems is the
 * largest tensor a collective will see (staging buffers). Returns 0, or 1/2 (host memory,
 * CUDA error; printed). With one rank, or for a dry run (which communicates nothing), no
 * transport is set up ("none"). */
int dist_setup(void *stream, int host_memory, size_t max_elems, int dry_run);
/* "none" (one rank, a dry run), "mpi", "nccl" or "mpi-staged". */
const char *dist_transport(void);

/* In place: buf (n floats on the device) becomes the sum over ranks. 0 or 2. */
int dist_allreduce_sum(float *buf, size_t n);
/* full (n floats) is summed over ranks; this rank's part of the sum is written to shard
 * (count floats of dist_own; shard may be full + off). full's other elements are left
 * unspecified. 0 or 2. */
int dist_reduce_scatter_sum(float *full, float *shard, size_t n);
/* In place: every rank's own part of buf (n elements of esize bytes: 4 for fp32, 2 for bf16;
 * nothing is summed) is copied to all ranks. 0 or 2. */
int dist_allgather(void *buf, size_t n, size_t esize);
/* full (n elements of esize bytes) is assembled from every rank's shard (count elements of
 * dist_own each, at its offset): ZeRO-3's gather of a parameter kept as shards. shard and
 * full are distinct device buffers. 0 or 2. */
int dist_allgather_from(const void *shard, void *full, size_t n, size_t esize);
/* Host values: the sum over ranks of x (every rank gets it); x of every rank gathered into
 * all[world] on rank 0. */
double dist_sum_host(double x);
void dist_gather_host(unsigned long long x, unsigned long long *all);

#endif
