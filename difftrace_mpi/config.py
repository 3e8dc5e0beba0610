"""Every default, in one place (the parameter grid itself, validated, is ``stages.classify.grid.Grid``).

The CLI, the pipeline, the stages and the views take their defaults from here, so a
default changed here changes everywhere (the concept cap once disagreed: 100,000 in the
analysis, 200,000 in the lattice).
"""
# -- the grid ------------------------------------------------------------------------
DEFAULT_FILTERS = ("11.mpi", "11.every")
DEFAULT_KS = (10,)
DEFAULT_ATTRIBUTES = ("sing.noFreq", "sing.actual", "doub.noFreq", "doub.log10")
DEFAULT_LINKAGES = ("ward", "average", "complete", "single")

# -- analysis ------------------------------------------------------------------------
MAX_CONCEPTS = 100_000         # concept cap of one lattice; a bigger one is kept partial (its coverage stated)
MAX_CLASSES = 2048             # classes of a setting's run beyond which it is not clustered (C^2 JSMs), the skip stated
ROW_BLOCK_MIN = 2048           # class JSMs this large are computed in row blocks on all ranks
FULL_LIMIT = 1024              # above this many objects only class-level JSMs are kept (8 MiB a matrix)
MIN_SHARED_NAMES = 0.5         # below this share of function names in common, warn: different programs?
TOP = 5                        # suspects listed per ranking row
TIMING_MIN_RATIO = 2.0         # timing view: the factor an iteration time must change by
TIMING_CLOCK = "both"          # timing view: which clocks may flag (both, wall, own)
CALLTREE_K = 32                # K of the call-tree loop folding (children of one call: short sequences)
DIVERGENCE_BLOCKS = 32         # hashes per trace and round of the first-difference search
VERDICT_CULPRITS = 10          # culprits the verdict lists (ordered; the text shows the first 3)
VERDICT_VICTIM_GROUPS = 8      # groups of stopped traces (by the calls they stopped in) the verdict lists
NOISE_ROUNDS = 4               # rounds of learning which calls vary between normal runs (--also-normal)
DIVERGENCE_WINDOW = 24         # events after the first difference each side sends to classify it
DIVERGENCE_SIBLINGS = 8        # calls at the first difference's level each side sends (whole calls, callees folded in)
DIVERGENCE_SCAN = 1 << 22      # events scanned at most to find where those calls return
LIVELOCK_REPEATS = 1000        # a stopped trace ending in this many repetitions of one short unit livelocked
LIVELOCK_PERIOD = 64           # the longest such unit, in events
LIVELOCK_FOLD_AFTER = 1 << 24  # a ParLOT trace repeating such a unit this long is summarised while read
LIVELOCK_FOLD_KEEP = 1 << 17   # the events of it kept (>= LIVELOCK_REPEATS units)
LOCATE_SPAN = 1 << 22          # events after a position that the call levels below its time step are folded over
MEMORY_BUDGET_SHARE = 0.5      # default memory budget: the process may grow by this share of MemAvailable
MEMORY_BUDGET_ENV = "DIFFTRACE_MEMORY_BUDGET"   # sets it: the most RSS a process may reach (8G, 512M ...)
NLR_KEEP_TOKENS = 4_000_000    # whole NLRs the results keep (~16 MB), the traces the verdict names first; the rest summarised
LATTICE_WORK_FACTOR = 16       # a lattice's work budget: this many times its class rows' size; then a stated partial lattice
BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")   # choose BLAS's threads
# MPI's environment where the user left it unset: UCX (pip's MPICH, many Open MPIs) hooks
# malloc and mmap as it loads, to keep its registration cache right, and that was 45 ms
# of every rank's start (loading mpi4py.MPI: 52 -> 9 ms here); this tool's messages are
# few and large, registered as they go
MPI_ENV_DEFAULTS = {"UCX_MEM_EVENTS": "no"}
# the names MPI libraries give the shared-memory file a node's ranks map (MPICH, Open MPI's
# vader and sm): each unlinks its own in MPI_Finalize, which a job ended by MPI Abort never
# reaches (choreography.unlink_mpi_shared_memory)
MPI_SHARED_MEMORY = ("/dev/shm/mpich_shm_", "/dev/shm/vader_segment.", "/dev/shm/sm_segment.")

# -- output --------------------------------------------------------------------------
PROGRESS_QUIET_S = 10.0        # progress on a terminal: a line naming the step under way after this long silent
PROGRESS_BATCH_S = 5.0         # progress in a batch log (stderr not a terminal): a line this often
ROWS_SHOWN = 10                # ranking rows printed (all are saved)
DIFFNLRS_SHOWN = 1             # diffNLRs of the best row's top suspects printed
DIFF_MAX_COST = 4000           # Myers search bound: beyond it diffs stay correct but may not be minimal
TEXT_MAX_LINES = 200           # the whole default text output of analyze (--all: unbounded)
DIFF_CONTEXT = 8               # common tokens kept around each change in a diffNLR
NLR_K = 10                     # K of the single-trace commands (nlr, diffnlr)
SINGLE_FILTER = "11.mpi"       # filter of the single-trace commands
REPORT_MAX_CELLS = 256         # heatmap side cap (cells) of the HTML report
PAGE_DIFF_BOXES = 20_000       # token boxes drawn of a diffNLR in a page of several (report, analyze --html; ~1.4 MB)
REPORT_SUSPECTS = 3            # diffNLRs in the HTML report

RUN_LABELS = ("normal", "faulty")


def combo_name(filter_label, k):
    """The name of a (filter, K) setting, as in the results file: ``11.mpi.K10``."""
    return f"{filter_label}.K{k}"


def attr_name(kind, freq):
    """The name of an attribute mode: ``sing.noFreq``."""
    return f"{kind}.{freq}"


# -- diffNLR bounds (stages/compare/diff.py, views/diffnlr.py) ---------------------------------
DIFF_MAX_WORK = 2_000_000      # diagonal moves of one whole Myers search; past it, greedy alignment (noted)
DIFF_MAX_LINES = 40            # lines of one text diffNLR, title and legend included (None: all)
