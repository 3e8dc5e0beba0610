"""What the launcher (mpiexec, srun) tells a process before MPI starts."""
import os

LAUNCHER_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")


def launcher_rank():
    """This process's rank as its launcher says (before or without MPI); 0 when alone."""
    for var in LAUNCHER_RANK_VARS:
        value = os.environ.get(var, "")
        if value.isascii() and value.isdigit():
            return int(value)
    return 0
