"""The MPI shell: the only module that imports mpi4py.

Every stage it calls is a plain function over numpy arrays; this module decides who runs
what, moves data between ranks and makes failures collective.  One code path for any
number of ranks: ``python -m difftrace_mpi`` alone is a 1-rank MPI job, and
``SerialComm`` gives the same choreography one rank without MPI at all.

Collective error rule: every step ends in an agreement (``allgather`` of an error slot),
so an exception on one rank becomes a ``StepFailed`` on every rank instead of a hang; the
root reports the first failing rank and what it was doing.  Work on the root alone runs
inside such a step too (``on_root``, ``root_only``): no exception anywhere can leave a
rank waiting.
"""
import contextlib
import fcntl
import os
import signal
import stat
import struct
import sys
import termios
import time
import traceback

import numpy as np

from .. import config, fsutil
from ..errors import DiffTraceError
from ..stages.classify.records import Skipped
from ..launch import launcher_rank
from .progress import Progress, mode_for, process_age
from .tuning import blas_threads, keep_freed_memory


class StepFailed(DiffTraceError):
    def __init__(self, rank, step, message, user_error):
        self.rank, self.step, self.user_error = rank, step, user_error
        where = f"MPI rank {rank}" if rank is not None else "analysis"
        super().__init__(f"{where}, {step}: {message}")


def world_comm():
    """MPI's COMM_WORLD (initialises MPI: a 1-rank job when started without a launcher),
    with ``config.MPI_ENV_DEFAULTS`` where the environment has not chosen (they count only
    before MPI's libraries load)."""
    for var, value in config.MPI_ENV_DEFAULTS.items():
        os.environ.setdefault(var, value)
    from mpi4py import MPI
    return MPI.COMM_WORLD


def world_rank():
    """This process's rank in COMM_WORLD, 0 when MPI was never initialised (a command
    that does not communicate never starts it)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
        return 0
    return mpi.COMM_WORLD.Get_rank()


# --- interrupts ---------------------------------------------------------------------------
# Ctrl-C (SIGINT) and SIGTERM end the run with 128 + the signal's number and leave no temp
# file.  With more than one rank the whole job ends at once (MPI Abort): a rank that just
# returned would leave the others spinning in a collective.  While an output is being
# written, too: an exception raised inside h5py or a finaliser can be swallowed ("Exception
# ignored"), and the write would go on.  Otherwise (one rank) the interrupt is an exception,
# so the CLI exits cleanly; a second one ends the process at once.

class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM as an exception; the CLI exits with ``exit_code``."""

    def __init__(self, signum):
        super().__init__(signal.Signals(signum).name)
        self.exit_code = 128 + signum


_interrupted = [False]


def world_size():
    """Ranks in COMM_WORLD, 1 when MPI was never initialised."""
    mpi = sys.modules.get("mpi4py.MPI")
    # a signal may arrive while mpi4py.MPI is still being imported: then it is in
    # sys.modules without its functions, and MPI is not initialised yet
    if mpi is None or not hasattr(mpi, "Is_initialized") or not mpi.Is_initialized() or mpi.Is_finalized():
        return 1
    return mpi.COMM_WORLD.Get_size()


# what a launcher or an MPI job puts in its processes' environment: where any of it is
# there (and no size says 1), MPI starts, even for one rank
_JOB_VAR_PREFIXES = ("PMI_", "PMIX_", "OMPI_", "HYDRA_", "HYDI_", "MPIR_", "MPI_LOCAL", "I_MPI_", "MV2_", "PALS_",
                     "SLURM_PROCID", "SLURM_STEP_ID")


def certainly_alone():
    """Whether this process runs alone for sure: its launcher says the job has one rank,
    or nothing in its environment tells of a launcher or an MPI job.  Then MPI is not
    started at all (importing and initialising it is about 0.1 s of every run); where in
    doubt it is, and COMM_WORLD says."""
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE"):
        if var in os.environ:
            return os.environ[var].strip() == "1"
    return not any(name.startswith(_JOB_VAR_PREFIXES) for name in os.environ)


def launched_ranks():
    """Ranks of the job a launcher (mpiexec, mpirun) started, as its environment says; 1
    when started alone."""
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE"):
        try:
            return int(os.environ[var])
        except (KeyError, ValueError):
            pass
    return 1


def unlink_mpi_shared_memory():
    """Remove the names of the MPI library's shared-memory files this process maps
    (``config.MPI_SHARED_MEMORY``), before the job ends by MPI Abort: the library unlinks
    them in MPI_Finalize, and an aborted job left one behind each time (2 MB with MPICH 5,
    held in RAM by /dev/shm: 2.9 GB had piled up on a development machine).  Every rank of
    the node mapped it in MPI_Init, so the name serves no one now; the memory goes with
    the last process that maps it."""
    try:
        with open("/proc/self/maps") as maps:
            fields = [line.rstrip("\n").split(None, 5) for line in maps]
    except OSError:             # no /proc: nothing to find
        return
    paths = {f[5] for f in fields if len(f) == 6}       # an anonymous mapping names no file
    for path in paths:
        if path.startswith(config.MPI_SHARED_MEMORY) and not path.endswith(" (deleted)"):
            try:
                os.unlink(path)
            except OSError:     # gone already (another rank of the node), or not ours to remove
                pass


def end_job_if_peers_may_wait(exit_code):
    """After an error raised outside an agreed step (the others did not see it), end every
    rank when MPI runs with more than one: a rank that just returned would leave the
    others waiting in their next collective.  Before MPI starts nothing can wait, and a
    ``StepFailed`` reaches every rank anyway: then this does nothing."""
    if world_size() > 1:
        fsutil.discard_temp_files()
        unlink_mpi_shared_memory()
        sys.stderr.flush()
        wait_read(2)
        sys.modules["mpi4py.MPI"].COMM_WORLD.Abort(exit_code)


# How long a rank ending the job waits for its launcher to read what it wrote to stderr:
# MPI Abort makes the launcher tear the job down, and a line still in the pipe then is
# lost (a clean-clone CI run once saw an interrupted rank's only line vanish).
FORWARD_WAIT_S = 1.0


def wait_read(fd, limit_s=FORWARD_WAIT_S):
    """Wait, at most ``limit_s``, until the reader of ``fd`` (a pipe or a socket: a
    launcher forwarding this rank's output) has taken every byte written to it.  True
    when it has or ``fd`` is neither (a file or a terminal keeps what it was given)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return True
    # on Linux both ends of a pipe tell its unread bytes; a socket its unsent ones
    request = termios.FIONREAD if stat.S_ISFIFO(mode) else termios.TIOCOUTQ if stat.S_ISSOCK(mode) else None
    deadline = time.monotonic() + limit_s
    while request is not None:
        try:
            unread = struct.unpack("i", fcntl.ioctl(fd, request, bytes(4)))[0]
        except OSError:
            return True
        if unread <= 0:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.002)
    return True


# How long a rank other than the root that was interrupted waits for the root to say so and
# end the job, before it says so itself and ends it: a Ctrl-C or a batch system's SIGTERM
# reaches every rank, and the root's line must not be cut off by another rank's MPI Abort.
INTERRUPT_GRACE_S = 2.0

def end_now(exit_code):
    """End this process with ``exit_code`` now, without unwinding, after removing the temp
    files being written; with more than one rank, end every rank (MPI Abort; MPI is
    started for it if this rank had not yet: the others may be waiting in MPI_Init).

    One line says "interrupted": the root's.  Another rank first gives the root a moment
    (INTERRUPT_GRACE_S, its own signals held) to say it and end the job, as it does when
    the signal reached every rank; when the root does not (the signal reached this rank
    only, or the root is held inside a collective), this rank says it and ends the job."""
    fsutil.discard_temp_files()
    comm = None
    if world_size() > 1 or launched_ranks() > 1:
        try:
            from mpi4py import MPI
            if MPI.Is_initialized() and not MPI.Is_finalized() and MPI.COMM_WORLD.Get_size() > 1:
                comm = MPI.COMM_WORLD
        except Exception:       # an MPI that cannot start: this process ends alone
            comm = None
    if comm is not None:
        unlink_mpi_shared_memory()
    rank = comm.Get_rank() if comm is not None else launcher_rank()
    if rank != 0 and (comm is not None or launched_ranks() > 1):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        time.sleep(INTERRUPT_GRACE_S)          # the root's Abort ends this process meanwhile
    os.write(2, b"difftrace_mpi: interrupted\n")
    if comm is not None:
        wait_read(2)
        comm.Abort(exit_code)
    os._exit(exit_code)


def _on_interrupt(signum, frame):
    if world_size() > 1 or launched_ranks() > 1 or fsutil.writing() or _interrupted[0]:
        end_now(128 + signum)
    _interrupted[0] = True
    fsutil.discard_temp_files()
    raise Interrupted(signum)


def install_interrupt_handlers():
    """SIGINT and SIGTERM handlers for a command-line run (main thread only)."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _on_interrupt)


class SerialComm:
    """A communicator of one rank without MPI: every collective returns its own value."""

    def Get_rank(self):
        return 0

    def Get_size(self):
        return 1

    def allgather(self, value):
        return [value]

    def gather(self, value, root=0):
        return [value]

    def bcast(self, value, root=0):
        return value

    def allreduce(self, value):
        return value

    def send(self, value, dest, tag=0):
        raise RuntimeError("a one-rank communicator has no peer to send to")

    def recv(self, source, tag=0):
        raise RuntimeError("a one-rank communicator has no peer to receive from")


class Choreography:
    def __init__(self, comm=None, progress=False):
        keep_freed_memory()
        self.comm = comm if comm is not None else (SerialComm() if certainly_alone() else world_comm())
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        if self.size == 1:
            # one rank: mpi4py would still pickle every gathered object (seconds on real runs)
            self.comm = SerialComm()
        # the steps' agreements (an error slot each, a few bytes) go through MPI's own
        # collectives, a tree of log P rounds: pkl5's allgather sends to every rank from
        # every rank (P^2 messages; 4 ms a step on 3 ranks of 2 cores, against 0.02 ms)
        self.control = self.comm
        if type(self.comm).__module__ == "mpi4py.MPI":
            # arrays travel as out-of-band buffers (pickle 5), not copied into one pickle:
            # a shard's NLRs are hundreds of MB, and a plain pickle also caps a message at 2 GiB
            from mpi4py.util import pkl5
            self.comm = pkl5.Intracomm(self.comm)
        self.is_root = self.rank == 0
        # progress: False, True (a line per milestone) or "batch" (a line every few seconds)
        self._progress = Progress(mode_for(progress) if self.is_root else None)
        self.progress = self._progress.on
        self.timings = {}
        self.busy = {}          # per step, this rank's own work: before the agreement's wait
        # every second accounted for: before this object (imports, MPI start), and between
        # the outermost steps (gathers, broadcasts, the engine's own bookkeeping)
        self.before = process_age()
        self.between, self._depth, self._last_end = 0.0, 0, time.perf_counter()
        self._t0 = time.perf_counter()

    def one_blas_thread_per_rank(self):
        """A context in which BLAS runs on one thread per rank when there are several
        ranks (a rank is a core's worth of work); alone, BLAS is left as it is."""
        return blas_threads(1) if self.size > 1 else contextlib.nullcontext()

    # -- collective steps ------------------------------------------------------------
    def step(self, name, fn, *args, **kwargs):
        """Run ``fn`` on every rank; if any rank fails, every rank raises StepFailed."""
        with self._span(name) as start:
            result, error = None, None
            try:
                result = fn(*args, **kwargs)
            except DiffTraceError as exc:
                error = (self.rank, str(exc), True)
            except Exception as exc:  # a bug: keep the traceback for the report
                error = (self.rank, f"internal error {type(exc).__name__}: {exc}\n"
                                    + traceback.format_exc(), False)
            self.busy[name] = self.busy.get(name, 0.0) + time.perf_counter() - start
            errors = self.control.allgather(error)
            failed = [e for e in errors if e is not None]
            if failed:
                rank, message, user = failed[0]
                raise StepFailed(rank if self.size > 1 else None, name, message, user)
        return result

    @contextlib.contextmanager
    def _span(self, name):
        """A timed step (its start yielded): the time since the last outermost one ended
        counts as between the steps, and the progress lines know it is under way."""
        start = time.perf_counter()
        self._progress.begin(name)
        if self._depth == 0:
            self.between += start - self._last_end
        self._depth += 1
        try:
            yield start
        finally:
            self._depth -= 1
            if self._depth == 0:
                self._last_end = time.perf_counter()
        seconds = time.perf_counter() - start
        self.timings[name] = self.timings.get(name, 0.0) + seconds
        self._progress.end(name, seconds)

    def accounted(self):
        """The step timings with the time outside them: before the analysis (imports, MPI
        start) and between the outermost steps, so that they sum to the run so far."""
        return {**self.timings, "before the analysis (imports, MPI start)": self.before,
                "between the steps (gathers, broadcasts, bookkeeping)":
                    self.between + time.perf_counter() - self._last_end}

    def close(self, finished=False):
        """Stop the progress lines (the analysis ``finished``, or failed)."""
        self._progress.close(finished)

    def on_root(self, name, fn, *args, **kwargs):
        """Run ``fn`` on the root only and broadcast its result (errors collective)."""
        return self.comm.bcast(self.root_only(name, fn, *args, **kwargs), root=0)

    def root_only(self, name, fn, *args, **kwargs):
        """Run ``fn`` on the root only, inside an agreed step: its result on the root,
        None elsewhere; an exception in it ends every rank (``StepFailed``)."""
        return self.step(name, lambda: fn(*args, **kwargs) if self.is_root else None)

    def allgather(self, value):
        return self.comm.allgather(value)

    def gather(self, value):
        """Every rank's ``value`` on the root (a list in rank order), None elsewhere."""
        return self._gather(value, 0)

    def _gather(self, value, root):
        # the root's own value is put in place, not sent to itself: mpi4py's gather copies
        # it through MPI (the root's kept NLRs of real LULESH 216 x 1: 25 MB, copied again
        # while its peers waited); as with one rank, the root's entry is its very object
        parts = self.comm.gather(None if self.rank == root else value, root=root)
        if parts is not None:
            parts[root] = value
        return parts

    def bcast(self, value):
        """The root's ``value`` on every rank."""
        return self.comm.bcast(value, root=0)

    def say(self, message):
        """A progress milestone on the root (stderr), when progress is on."""
        self._progress.say(message)

    def each(self, items, label):
        """Iterate ``items``, printing on the root (when progress is on) how far its own
        shard is and the rate, at most every few seconds; other ranks' shards are of similar size."""
        items = list(items)
        if not self.progress:
            yield from items
            return
        start = last = time.perf_counter()
        for done, item in enumerate(items, 1):
            yield item
            now = time.perf_counter()
            if now - last >= self._progress.each_interval() or done == len(items):
                rate = done / max(now - start, 1e-9)
                self.say(f"{label}: {done}/{len(items)} on rank 0 ({rate:,.0f}/s"
                         + (f", ~{(len(items) - done) / rate:.0f} s left)" if done < len(items) else ")"))
                last = now

    # -- data placement --------------------------------------------------------------
    def shard(self, sizes):
        """Deterministic size-balanced assignment of work items to ranks.

        Largest item first to the least-loaded rank (ties: lower rank); equal sizes keep
        their input order.  Then, while it lowers the heaviest rank's load, one item moves
        or two swap between the heaviest and the lightest rank: the greedy pass leaves up
        to a whole item of difference (27 LULESH processes on 2 ranks: 5% of the bytes;
        13 vs 14 similar items cannot do better, a swap of unequal ones can).  Returns, per
        rank, the sorted list of item indices."""
        weight = [max(int(s), 1) for s in sizes]
        load = [0] * self.size
        owned = [[] for _ in range(self.size)]
        for item in sorted(range(len(sizes)), key=lambda i: (-weight[i], i)):
            target = min(range(self.size), key=lambda r: (load[r], r))
            load[target] += weight[item]
            owned[target].append(item)
        for _ in range(4 * len(sizes)):     # each exchange lowers the sum of squared loads: it ends
            heavy = max(range(self.size), key=lambda r: (load[r], -r))
            light = min(range(self.size), key=lambda r: (load[r], r))
            exchange = best_exchange([weight[i] for i in owned[heavy]], [weight[i] for i in owned[light]],
                                     load[heavy] - load[light])
            if exchange is None:
                break
            a, b = exchange
            give = owned[heavy].pop(a)
            moved = weight[give]
            if b is not None:           # a swap: the lighter rank's item b comes back
                take = owned[light].pop(b)
                owned[heavy].append(take)
                moved -= weight[take]
            owned[light].append(give)
            load[heavy] -= moved
            load[light] += moved
        return [sorted(items) for items in owned]

    def row_blocked(self, name, n_rows, compute_rows, owner):
        """A matrix computed in row blocks on every rank and assembled on ``owner``.

        Collective.  ``compute_rows(lo, hi)`` gives rows lo..hi-1; the blocks split the
        rows evenly.  A failure on any rank reaches the owner as a DiffTraceError (the
        other ranks return None and learn of it at the enclosing step's agreement)."""
        start = time.perf_counter()
        lo = n_rows * self.rank // self.size
        hi = n_rows * (self.rank + 1) // self.size
        try:
            block = compute_rows(lo, hi)
        except Exception as exc:  # carried to the owner, never left half-collective
            block = Skipped(f"MPI rank {self.rank}, {name}: {type(exc).__name__}: {exc}")
        blocks = self._gather(block, owner)
        self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - start
        if self.rank != owner:
            return None
        failed = [b for b in blocks if isinstance(b, Skipped)]
        if failed:
            raise DiffTraceError(failed[0].reason)
        return np.concatenate(blocks, axis=0)

    def tree_reduce(self, name, values, combine, pack, unpack, finish=None):
        """Binomial-tree reductions of every item of ``values`` to the root, point to point.

        Item i's tree is rooted at rank i mod P, so the merges of the items spread over the
        ranks instead of all meeting on the root (P = 2: each rank merges half of them; at
        P = 64 the root would otherwise merge every item at each of 6 levels): in round d
        every rank sends to rank - d and receives from rank + d (mod P) the items its place
        in their trees asks for, all in one message, then merges; at the end the owners'
        items are gathered to the root.  An item is a partial result or a ``Skipped``
        marker; ``combine(a, b)`` merges two partials (may raise DiffTraceError, which
        turns the item into a Skipped carrying the message); ``pack``/``unpack`` an item
        for travel; ``finish(item)``, if given, is applied by each tree's root to its
        reduced item before the gather (errors as in ``combine``).  Returns the list of
        reduced items on the root, None elsewhere."""
        with self._span(name) as start:
            waited = [0.0]          # in receives and the gather: not this rank's own work (busy)

            def waiting(call, *args, **kwargs):
                begun = time.perf_counter()
                try:
                    return call(*args, **kwargs)
                finally:
                    waited[0] += time.perf_counter() - begun
            states = list(values)
            travel = lambda i: states[i] if isinstance(states[i], Skipped) else pack(states[i])      # noqa: E731
            distance = 1
            while distance < self.size:
                place = [(self.rank - i) % self.size for i in range(len(states))]       # in item i's tree
                sending = [i for i, r in enumerate(place) if r % (2 * distance) == distance]
                receiving = [i for i, r in enumerate(place) if r % (2 * distance) == 0 and r + distance < self.size]
                request = None
                if sending:
                    request = self.comm.isend({i: travel(i) for i in sending}, dest=(self.rank - distance) % self.size,
                                              tag=77)
                if receiving:
                    others = waiting(self.comm.recv, source=(self.rank + distance) % self.size, tag=77)
                    for i in receiving:
                        states[i] = self._merged(states[i], others[i], combine, unpack)
                if request is not None:
                    waiting(request.wait)
                for i in sending:
                    states[i] = None
                distance *= 2
            if finish is not None:
                for i in range(self.rank, len(states), self.size):
                    states[i] = self._finished(states[i], finish)
            owned = {} if self.is_root else {i: travel(i) for i in range(self.rank, len(states), self.size)}
            gathered = waiting(self.comm.gather, owned, root=0)
            self.busy[name] = self.busy.get(name, 0.0) + time.perf_counter() - start - waited[0]
            if not self.is_root:
                return None
            for part in gathered:
                for i, item in part.items():
                    states[i] = item if isinstance(item, Skipped) else unpack(item)
            return states

    @staticmethod
    def _finished(state, finish):
        """An item as its tree's root leaves it; a Skipped stays."""
        return state if isinstance(state, Skipped) else _item_or_skipped(finish, state)

    @staticmethod
    def _merged(state, other, combine, unpack):
        """One item merged with a peer's (packed) one; a Skipped on either side wins."""
        if isinstance(state, Skipped):
            return state
        if isinstance(other, Skipped):
            return other
        return _item_or_skipped(lambda: combine(state, unpack(other)))


def best_exchange(heavy, light, gap):
    """Which item of the heavier side to move (b None) or swap with which of the lighter
    (indices into ``heavy`` and ``light``, item weights) brings their loads, ``gap``
    apart, closest together; None when nothing narrows the gap.  For each heavy item only
    the light weights on either side of the ideal one are tried: O(n log n)."""
    heavy = np.asarray(heavy, dtype=np.int64)
    weights = np.concatenate([[0], np.asarray(light, dtype=np.int64)])     # 0: a move, no swap
    order = np.argsort(weights, kind="stable")
    ideal = 2 * heavy - gap                     # twice the light weight that halves the gap
    near = np.searchsorted(2 * weights[order], ideal)
    candidates = []
    for pos in (near - 1, near):
        ok = (pos >= 0) & (pos < len(order))
        a = np.flatnonzero(ok)
        b = order[pos[ok]]
        moved = heavy[a] - weights[b]
        useful = (moved > 0) & (moved < gap)
        candidates.append((np.abs(gap - 2 * moved[useful]), a[useful], b[useful]))
    cost, a, b = (np.concatenate(parts) for parts in zip(*candidates))
    if not len(cost):
        return None
    first = np.lexsort((b, a, cost))[0]
    return int(a[first]), (int(b[first]) - 1 if b[first] > 0 else None)


def _item_or_skipped(fn, *args):
    """``fn(*args)``, or a Skipped carrying its error: one item of a tree reduction fails
    alone, and no exception leaves the peers waiting."""
    try:
        return fn(*args)
    except DiffTraceError as exc:
        return Skipped(str(exc))
    except Exception as exc:  # a bug: report it, never leave peers waiting
        return Skipped(f"internal error {type(exc).__name__}: {exc}")
