/*
 * parlot_internal.h -- what the parts of libparlot.so share (not an installed header).
 *
 * parlot_events.c:    per-thread state, function ids and names, -finstrument-functions hooks.
 * parlot_setup.c:     constructor/destructor, environment, output files' prefix, filters.
 * parlot_runfiles.c:  the .info, .rank, .end and .leaves files.
 * parlot_signals.c:   completing every file at once, the flusher thread, signals.
 * parlot_interpose.c: pthread_create, fork, exec.
 * parlot_symbols.c:   function names from ELF symbol tables.
 * parlot_util.c:      async-signal-safe text and write helpers.
 * parlot_mpi.c:   PMPI wrappers.
 * parlot_fortran.c: wrappers of the Fortran bindings' entry points (Open MPI only).
 * parlot_omp.c:   libgomp wrappers.
 */
#ifndef PARLOT_INTERNAL_H
#define PARLOT_INTERNAL_H

#define NI __attribute__((no_instrument_function))
#define PARLOT_API __attribute__((visibility("default"), no_instrument_function))

/* An event source with a fixed name (a wrapped MPI or OpenMP entry point).  Its address is
 * its key in the function table, so each site must be a unique static object. */
typedef struct parlot_site {
    const char *name;
} parlot_site;

enum {
    PARLOT_CKPT = 1   /* make this thread's file complete right after recording the entry */
};

/* Non-zero while this process records events. */
extern volatile int parlot_on;

/* Argument-annotated MPI events (on by default; PARLOT_MPI_ARGS=0 or parlot-run -A: off):
 * 0 = off (plain names), PARLOT_ARGS_REL = peers relative to the caller's rank (the default),
 * PARLOT_ARGS_ABS = absolute peers (PARLOT_MPI_ARGS=abs). */
enum { PARLOT_ARGS_REL = 1, PARLOT_ARGS_ABS = 2 };
extern int parlot_mpi_args;

/* The event source named `name` (an annotated variant of `plain`, e.g.
 * "MPI_Send[count=4,type=MPI_INT,dest=+1,tag=0]"): one per distinct name, kept for the
 * process's lifetime.  Beyond the cap (PARLOT_MPI_ARGS_MAX, default 4096 distinct names per
 * process) it returns `plain` itself, after one message on stderr. */
const parlot_site *parlot_annotated(const parlot_site *plain, const char *name) NI;

/* Set when tracing was asked for but the output directory is unusable; the first event
 * source that fires calls parlot_warn_once(), which prints the one message. */
extern volatile int parlot_warn_pending;
void parlot_warn_once(void) NI;

/* Record the entry of a wrapped call / its exit. */
void parlot_enter(const parlot_site *site, int flags) NI;
void parlot_exit(const parlot_site *site) NI;

/* Make the calling thread's file complete now (a call that is about to wait). */
void parlot_checkpoint_self(void) NI;

/* Record the entry / exit of a function given by address (name from the symbol tables). */
void parlot_enter_fn(void *fn) NI;
void parlot_exit_fn(void *fn) NI;

/* Make sure the calling thread has its trace file (threads of a parallel region that record
 * nothing still get an empty trace, so runs have the same set of files). */
void parlot_thread_touch(void) NI;

/* Inside a wrapped Fortran MPI entry point (parlot_fortran.c): parlot_enter/parlot_exit of
 * the C wrappers it may reach record nothing (the Fortran event stands for the call). */
void parlot_fortran_in(void) NI;
void parlot_fortran_out(void) NI;

/* Calls into the MPI library: threads created inside are MPI's own (no thread index). */
void parlot_mpi_in(void) NI;
void parlot_mpi_out(void) NI;

/* The MPI rank is known: write the <prefix>.<pid>.rank sidecar. */
void parlot_set_rank(int rank) NI;

/* Make every thread's file complete and rewrite the .info file; final = no more events. */
void parlot_sync_all(int final) NI;

/* How the process ended: the <prefix>.<pid>.end record (key=value lines, see README.md).
 * parlot_mpi_state: 0 = MPI_Init not called, 1 = MPI_Init(_thread) called, 2 = MPI_Finalize
 * returned.  parlot_mpi_calls: MPI calls entered by this process (a logical clock). */
enum { PARLOT_MPI_NONE = 0, PARLOT_MPI_INITED = 1, PARLOT_MPI_FINALIZED = 2 };
extern volatile int parlot_mpi_state;
extern volatile unsigned long parlot_mpi_calls;

/* Write the end record now, as the final one (a later record does not replace it): how =
 * "mpi_error" or "abort"; code (when have_code), call and error (NULL: left out) as in
 * README.md; the thread index and the time are added.  Async-signal-safe (stack buffers,
 * open/write/rename).  Returns 1 when written, 0 when a final record exists already (or the
 * process is not traced). */
int parlot_end_record(const char *how, int have_code, long code, const char *call, const char *error) NI;

/* The MPI objects the program made and did not free (parlot_mpi.c), as "open_<kind>=<n>\n"
 * lines (open_requests, open_comms, open_groups, open_types, open_wins, open_ops, open_infos,
 * open_files, open_errhandlers; only those not zero) into buf, at most size bytes; returns
 * the length.  Async-signal-safe (atomic loads, no printf): for the end record. */
int parlot_mpi_open_record(char *buf, int size) NI;

/* MPI_Comm_spawn(_multiple) started n processes, which are not traced: counted for the end
 * record (spawned=N), said once.  parlot_leave_run: this process is one of them (it has a
 * parent): it stops tracing and removes its files, since its ranks repeat its parents'. */
void parlot_count_spawned(int n) NI;
void parlot_leave_run(void) NI;

/* What MPI_Init(_thread)'s wrapper does once MPI is up (the rank, the error handler), for
 * the Fortran bindings' MPI_Init (parlot_fortran.c). */
void parlot_mpi_after_init(int ok) NI;

/* dlsym(RTLD_NEXT, name), with a clear message and exit when it is missing. */
void *parlot_real(const char *name) NI;

#endif
