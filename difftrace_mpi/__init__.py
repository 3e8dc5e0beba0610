"""difftrace_mpi: DiffTrace (Taheri et al., IEEE Cluster 2019) as a scalable MPI analyzer."""
__version__ = "0.1.0"
