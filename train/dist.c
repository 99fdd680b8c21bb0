/* train/dist.c — rank detection and collectives (see dist.h).
 *
 * Why the trainer calls MPI_Init only under a launcher: a singleton MPI_Init (Open MPI
 * starting its own runtime for a plain `./train_gpt2_sim`) is slow, may fail in containers,
 * and buys nothing for one rank. The launcher variables say whether one started us:
 * OMPI_COMM_WORLD_SIZE (Open MPI's mpirun), PMI_SIZE / PMI_RANK (PMI-1/2: MPICH's hydra,
 * Intel MPI, srun --mpi=pmi2), PMIX_RANK (PMIx: Open MPI 5's prterun, srun --mpi=pmix),
 * MPI_LOCALNRANKS (hydra).
 *
 * The collectives work on device pointers. On the virtual GPU those are host memory, so
 * after synchronizing the compute stream MPI reads and writes them in place (no copy, no
 * device buffer). On a real GPU NCCL is loaded at run time with dlopen("libnccl.so.2") (the
 * library PyTorch ships will do; TRAIN_NCCL_LIB names another file) and the few functions
 * used are declared here, so neither its header nor its library is needed to build. Without
 * NCCL, or when NCCL refuses the setup (it rejects two ranks on one GPU: "duplicate GPU"),
 * the data goes through pinned host buffers and MPI. The reduce-scatter and all-gather over
 * NCCL are grouped per-root reduces and broadcasts: NCCL's own ncclReduceScatter needs a
 * buffer of world * S elements, and the shard rule's last shard is short (no padding on the
 * device, hence no device scratch buffer at all). */
#include "train/dist.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#ifdef TRAIN_MPI
#include <mpi.h>
#endif

static struct {
    int rank, world, local_rank;
    int mpi_started;
    enum { T_NONE, T_MPI, T_NCCL, T_STAGED } transport;
    cudaStream_t stream;
    float *stage;   /* T_STAGED: pinned, max_elems floats */
    float *scratch; /* host, one shard (reduce-scatter's output before it is placed) */
    size_t max_elems;
    int *counts, *displs; /* per rank, reused by the v-collectives */
    /* NCCL, resolved with dlsym */
    void *nccl_lib, *nccl_comm;
    int (*nccl_all_reduce)(const void *, void *, size_t, int, int, void *, void *);
    int (*nccl_reduce)(const void *, void *, size_t, int, int, int, void *, void *);
    int (*nccl_broadcast)(const void *, void *, size_t, int, int, void *, void *);
    int (*nccl_group_start)(void);
    int (*nccl_group_end)(void);
    const char *(*nccl_error)(int);
} D = {.world = 1};

/* NCCL's values (nccl.h: ncclInt8, ncclFloat32, ncclSum, NCCL_UNIQUE_ID_BYTES), checked against the
 * header where one is installed. */
enum { NCCL_INT8 = 0, NCCL_FLOAT32 = 7, NCCL_SUM = 0, NCCL_ID_BYTES = 128 };
#if defined(__has_include)
#if __has_include(<nccl.h>)
#include <nccl.h>
_Static_assert((int)NCCL_INT8 == (int)ncclInt8 && (int)NCCL_FLOAT32 == (int)ncclFloat32 &&
                   (int)NCCL_SUM == (int)ncclSum && NCCL_ID_BYTES == NCCL_UNIQUE_ID_BYTES,
               "NCCL constants differ from nccl.h");
#endif
#endif

int dist_rank(void)
{
    return D.rank;
}
int dist_world(void)
{
    return D.world;
}

size_t dist_shard_size(size_t n)
{
    return (n + (size_t)D.world - 1) / (size_t)D.world;
}

static void own_of(size_t n, int r, size_t *off, size_t *count)
{
    const size_t S = dist_shard_size(n), lo = (size_t)r * S, hi = lo + S < n ? lo + S : n;
    *off = lo;
    *count = hi > lo ? hi - lo : 0;
}
void dist_own(size_t n, size_t *off, size_t *count)
{
    own_of(n, D.rank, off, count);
}

static const char *launcher_var(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK",
                                       "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (getenv(vars[i])) return vars[i];
    return NULL;
}

int dist_init(int *argc, char ***argv)
{
    const char *var = launcher_var();
    if (!var) return 0;
#ifdef TRAIN_MPI
    if (MPI_Init(argc, argv) != MPI_SUCCESS) {
        fprintf(stderr, "train_gpt2: MPI_Init failed (launched by an MPI launcher: %s is set)\n",
                var);
        return 1;
    }
    D.mpi_started = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &D.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &D.world);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, D.rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &D.local_rank);
    MPI_Comm_free(&node);
    D.counts = calloc((size_t)D.world, sizeof(int));
    D.displs = calloc((size_t)D.world, sizeof(int));
    if (!D.counts || !D.displs) {
        fprintf(stderr, "train_gpt2: out of host memory\n");
        return 1;
    }
    int ndev = 0;
    if (D.world > 1 && cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 1)
        cudaSetDevice(D.local_rank % ndev);
    return 0;
#else
    (void)argc, (void)argv;
    const char *size =
        getenv("OMPI_COMM_WORLD_SIZE") ? getenv("OMPI_COMM_WORLD_SIZE") : getenv("PMI_SIZE");
    if (size && atoi(size) > 1) {
        fprintf(stderr,
                "train_gpt2: launched as %s ranks (%s), but this trainer was built "
                "without MPI (no mpicc at build time): install Open MPI (make deps) and "
                "rebuild\n",
                size, var);
        return 1;
    }
    return 0;
#endif
}

void dist_finalize(void)
{
#ifdef TRAIN_MPI
    if (D.mpi_started) MPI_Finalize();
    D.mpi_started = 0;
#endif
    if (D.stage) cudaFreeHost(D.stage);
    free(D.scratch), free(D.counts), free(D.displs);
    D.stage = NULL, D.scratch = NULL, D.counts = NULL, D.displs = NULL;
}

void dist_abort(int code)
{
#ifdef TRAIN_MPI
    if (D.mpi_started && D.world > 1) MPI_Abort(MPI_COMM_WORLD, code);
#else
    (void)code;
#endif
}

const char *dist_transport(void)
{
    static const char *const names[] = {"none", "mpi", "nccl", "mpi-staged"};
    return names[D.transport];
}

static int cuda_err(cudaError_t e, const char *what)
{
    fprintf(stderr, "train_gpt2: rank %d: CUDA error %s (%s) in %s (collective)\n", D.rank,
            cudaGetErrorName(e), cudaGetErrorString(e), what);
    return 2;
}
#define CKD(call, what)                                                                            \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) return cuda_err(e_, what);                                          \
    } while (0)

#ifdef TRAIN_MPI
typedef struct {
    char b[NCCL_ID_BYTES];
} nccl_id; /* ncclUniqueId */

/* Loads NCCL and makes a communicator of all ranks; 0 on success, else 1 with the reason on
 * rank 0's stderr (the caller falls back to MPI). Collective: every rank calls it. */
static int nccl_open(void)
{
    const char *path = getenv("TRAIN_NCCL_LIB") ? getenv("TRAIN_NCCL_LIB") : "libnccl.so.2";
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    int (*get_id)(nccl_id *) = NULL;
    /* ncclCommInitRank(ncclComm_t *, int nranks, ncclUniqueId id, int rank): the 128-byte id
     * is passed by value. */
    int (*init_rank)(void **, int, nccl_id, int) = NULL;
    if (lib) {
        *(void **)&get_id = dlsym(lib, "ncclGetUniqueId");
        *(void **)&init_rank = dlsym(lib, "ncclCommInitRank");
        *(void **)&D.nccl_all_reduce = dlsym(lib, "ncclAllReduce");
        *(void **)&D.nccl_reduce = dlsym(lib, "ncclReduce");
        *(void **)&D.nccl_broadcast = dlsym(lib, "ncclBroadcast");
        *(void **)&D.nccl_group_start = dlsym(lib, "ncclGroupStart");
        *(void **)&D.nccl_group_end = dlsym(lib, "ncclGroupEnd");
        *(void **)&D.nccl_error = dlsym(lib, "ncclGetErrorString");
    }
    int ok = lib && get_id && init_rank && D.nccl_all_reduce && D.nccl_reduce && D.nccl_broadcast &&
             D.nccl_group_start && D.nccl_group_end && D.nccl_error;
    /* Every rank must take the same path: agree on "all found NCCL" first. */
    int all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
        if (D.rank == 0)
            fprintf(stderr,
                    "train_gpt2: NCCL not found (%s: %s); collectives over MPI through "
                    "pinned host buffers\n",
                    path, lib ? "symbols missing" : dlerror());
        if (lib) dlclose(lib);
        return 1;
    }
    nccl_id id;
    int rc = D.rank == 0 ? get_id(&id) : 0;
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rc == 0) {
        MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
        rc = init_rank(&D.nccl_comm, D.world, id, D.rank);
    }
    int all_rc = 0;
    MPI_Allreduce(&rc, &all_rc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (all_rc) {
        if (D.rank == 0)
            fprintf(stderr,
                    "train_gpt2: NCCL refused the communicator (%s; NCCL refuses two ranks on "
                    "one GPU as a duplicate GPU); collectives over MPI through "
                    "pinned host buffers\n",
                    D.nccl_error(all_rc));
        /* The communicator, if this rank got one, is left to the process exit: destroying a
         * half-made one can hang waiting for its peers. */
        D.nccl_comm = NULL;
        return 1;
    }
    D.nccl_lib = lib;
    return 0;
}
#endif

int dist_setup(void *stream, int host_memory, size_t max_elems, int dry_run)
{
    D.stream = stream;
    if (D.world == 1 || dry_run) return 0;
    D.max_elems = max_elems;
    D.scratch =
        malloc(sizeof(float) * (dist_shard_size(max_elems) ? dist_shard_size(max_elems) : 1));
    if (!D.scratch) {
        fprintf(stderr, "train_gpt2: out of host memory for a collective buffer\n");
        return 1;
    }
#ifdef TRAIN_MPI
    /* TRAIN_DIST_STAGED=1: the real-GPU path (NCCL if found, else pinned staging) on the
     * virtual GPU too, so that its tests run without a GPU. */
    const char *staged = getenv("TRAIN_DIST_STAGED");
    if (host_memory && !(staged && *staged == '1')) {
        D.transport = T_MPI;
        return 0;
    }
    if (nccl_open() == 0) {
        D.transport = T_NCCL;
        return 0;
    }
    D.transport = T_STAGED;
    CKD(cudaMallocHost((void **)&D.stage, sizeof(float) * max_elems), "cudaMallocHost");
    return 0;
#else
    (void)host_memory;
    return 0;
#endif
}

#ifdef TRAIN_MPI
static void fill_counts(size_t n)
{
    for (int r = 0; r < D.world; r++) {
        size_t off, c;
        own_of(n, r, &off, &c);
        D.counts[r] = (int)c;
        D.displs[r] = (int)off;
    }
}
static int nccl_check(int rc, const char *what)
{
    if (!rc) return 0;
    fprintf(stderr, "train_gpt2: rank %d: NCCL error in %s: %s\n", D.rank, what, D.nccl_error(rc));
    return 2;
}
/* T_MPI: the device pointer is readable once the work queued before is done. */
static int host_view(void)
{
    CKD(cudaStreamSynchronize(D.stream), "cudaStreamSynchronize");
    return 0;
}
static int stage_in(const float *dev, size_t n)
{
    CKD(cudaMemcpyAsync(D.stage, dev, sizeof(float) * n, cudaMemcpyDeviceToHost, D.stream),
        "cudaMemcpyAsync");
    CKD(cudaStreamSynchronize(D.stream), "cudaStreamSynchronize");
    return 0;
}
static int stage_out_bytes(void *dev, const void *host, size_t bytes)
{
    CKD(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, D.stream), "cudaMemcpyAsync");
    /* The next collective (or the caller) may reuse the staging buffer at once. */
    CKD(cudaStreamSynchronize(D.stream), "cudaStreamSynchronize");
    return 0;
}
static int stage_out(float *dev, const float *host, size_t n)
{
    return stage_out_bytes(dev, host, sizeof(float) * n);
}
#endif

int dist_allreduce_sum(float *buf, size_t n)
{
    if (D.world == 1 || n == 0) return 0;
#ifdef TRAIN_MPI
    switch (D.transport) {
    case T_NCCL:
        return nccl_check(
            D.nccl_all_reduce(buf, buf, n, NCCL_FLOAT32, NCCL_SUM, D.nccl_comm, D.stream),
            "ncclAllReduce");
    case T_MPI:
        if (host_view()) return 2;
        MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        return 0;
    default:
        if (stage_in(buf, n)) return 2;
        MPI_Allreduce(MPI_IN_PLACE, D.stage, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        return stage_out(buf, D.stage, n);
    }
#else
    (void)buf;
    return 0;
#endif
}

int dist_reduce_scatter_sum(float *full, float *shard, size_t n)
{
    size_t off, c;
    dist_own(n, &off, &c);
    if (D.world == 1) {
        if (shard == full + off || n == 0) return 0;
        CKD(cudaMemcpyAsync(shard, full, sizeof(float) * n, cudaMemcpyDeviceToDevice, D.stream),
            "cudaMemcpyAsync");
        return 0;
    }
#ifdef TRAIN_MPI
    fill_counts(n);
    switch (D.transport) {
    case T_NCCL: {
        /* One reduce per root, grouped: root r receives the sum of everyone's part r. */
        int rc = D.nccl_group_start();
        for (int r = 0; r < D.world && !rc; r++)
            if (D.counts[r])
                rc = D.nccl_reduce(full + D.displs[r], r == D.rank ? shard : full + D.displs[r],
                                   (size_t)D.counts[r], NCCL_FLOAT32, NCCL_SUM, r, D.nccl_comm,
                                   D.stream);
        const int rc2 = D.nccl_group_end();
        return nccl_check(rc ? rc : rc2, "ncclReduce (reduce-scatter)");
    }
    case T_MPI:
        if (host_view()) return 2;
        MPI_Reduce_scatter(full, D.scratch, D.counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        memcpy(shard, D.scratch, sizeof(float) * c);
        return 0;
    default:
        if (stage_in(full, n)) return 2;
        MPI_Reduce_scatter(D.stage, D.scratch, D.counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        return c ? stage_out(shard, D.scratch, c) : 0;
    }
#else
    (void)shard;
    return 0;
#endif
}

#ifdef TRAIN_MPI
/* A gather moves elements without arithmetic: fp32 as MPI_FLOAT, bf16 as 16-bit integers; NCCL
 * moves either as bytes. */
static MPI_Datatype mpi_type(size_t esize)
{
    return esize == 2 ? MPI_UINT16_T : MPI_FLOAT;
}
#endif

int dist_allgather(void *buf, size_t n, size_t esize)
{
    if (D.world == 1 || n == 0) return 0;
#ifdef TRAIN_MPI
    char *b = buf, *stage = (char *)D.stage;
    fill_counts(n);
    switch (D.transport) {
    case T_NCCL: {
        int rc = D.nccl_group_start();
        for (int r = 0; r < D.world && !rc; r++)
            if (D.counts[r])
                rc = D.nccl_broadcast(b + D.displs[r] * esize, b + D.displs[r] * esize,
                                      (size_t)D.counts[r] * esize, NCCL_INT8, r, D.nccl_comm,
                                      D.stream);
        const int rc2 = D.nccl_group_end();
        return nccl_check(rc ? rc : rc2, "ncclBroadcast (all-gather)");
    }
    case T_MPI:
        if (host_view()) return 2;
        MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, D.counts, D.displs, mpi_type(esize),
                       MPI_COMM_WORLD);
        return 0;
    default:
        CKD(cudaMemcpyAsync(stage, buf, esize * n, cudaMemcpyDeviceToHost, D.stream),
            "cudaMemcpyAsync");
        CKD(cudaStreamSynchronize(D.stream), "cudaStreamSynchronize");
        MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, stage, D.counts, D.displs,
                       mpi_type(esize), MPI_COMM_WORLD);
        return stage_out_bytes(buf, stage, esize * n);
    }
#else
    (void)buf, (void)esize;
    return 0;
#endif
}

int dist_allgather_from(const void *shard, void *full, size_t n, size_t esize)
{
    size_t off, c;
    dist_own(n, &off, &c);
    if (n == 0) return 0;
    if (D.world == 1) {
        CKD(cudaMemcpyAsync(full, shard, esize * n, cudaMemcpyDeviceToDevice, D.stream),
            "cudaMemcpyAsync");
        return 0;
    }
#ifdef TRAIN_MPI
    char *f = full, *stage = (char *)D.stage;
    fill_counts(n);
    switch (D.transport) {
    case T_NCCL: {
        /* One broadcast per root, grouped: root r sends its shard into everyone's part r. */
        int rc = D.nccl_group_start();
        for (int r = 0; r < D.world && !rc; r++)
            if (D.counts[r])
                rc = D.nccl_broadcast(shard, f + D.displs[r] * esize, (size_t)D.counts[r] * esize,
                                      NCCL_INT8, r, D.nccl_comm, D.stream);
        const int rc2 = D.nccl_group_end();
        return nccl_check(rc ? rc : rc2, "ncclBroadcast (all-gather)");
    }
    case T_MPI:
        if (host_view()) return 2;
        MPI_Allgatherv(shard, (int)c, mpi_type(esize), full, D.counts, D.displs, mpi_type(esize),
                       MPI_COMM_WORLD);
        return 0;
    default:
        if (c) {
            CKD(cudaMemcpyAsync(stage + off * esize, shard, esize * c, cudaMemcpyDeviceToHost,
                                D.stream),
                "cudaMemcpyAsync");
        }
        CKD(cudaStreamSynchronize(D.stream), "cudaStreamSynchronize");
        MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, stage, D.counts, D.displs,
                       mpi_type(esize), MPI_COMM_WORLD);
        return stage_out_bytes(full, stage, esize * n);
    }
#else
    (void)shard, (void)full, (void)off, (void)c, (void)esize;
    return 0;
#endif
}

double dist_sum_host(double x)
{
#ifdef TRAIN_MPI
    if (D.world > 1) MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
#endif
    return x;
}

void dist_gather_host(unsigned long long x, unsigned long long *all)
{
#ifdef TRAIN_MPI
    if (D.world > 1) {
        MPI_Gather(&x, 1, MPI_UNSIGNED_LONG_LONG, all, 1, MPI_UNSIGNED_LONG_LONG, 0,
                   MPI_COMM_WORLD);
        return;
    }
#endif
    all[0] = x;
}
