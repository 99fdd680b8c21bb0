# mpi.bash — sourced by the scripts that run the trainer as MPI ranks on this machine
# (tests/integration/train_mpi.sh, ranks_mpi.sh, advise_zero3.sh; tests/bench/train_mpi_bench.sh,
# advise_zero3_bench.sh). `mpi_setup NAME TRAINER` skips the script (exit 77, saying why) where
# mpirun is missing or the trainer was built without MPI (no mpicc at build time), and sets Open
# MPI's environment for these machines, for the script only: mpirun as root in a container
# (allowed explicitly), more ranks than cores, shared memory between the ranks (no network)
# without cross-memory attach (often denied in containers). Open MPI 5 calls its
# shared-memory transport "sm", 4 "vader".
mpi_setup() {
  local name=$1 trainer=$2
  command -v mpirun > /dev/null || { echo "$name: skipped: mpirun not found (make deps installs openmpi-bin)" >&2; exit 77; }
  [[ $(ldd "$trainer" 2> /dev/null) == *libmpi* ]] \
    || { echo "$name: skipped: $trainer was built without MPI (no mpicc at build time)" >&2; exit 77; }
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  if [[ $(mpirun --version 2> /dev/null) =~ Open\ MPI\)\ [0-4]\. ]]; then
    export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
  else
    export OMPI_MCA_btl=self,sm OMPI_MCA_btl_sm_single_copy_mechanism=none
  fi
}
