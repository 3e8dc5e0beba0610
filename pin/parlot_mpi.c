/*
 * parlot_mpi.c -- PMPI wrappers of libparlot.so: each MPI call becomes an entry event named
 * like the MPI function and an exit event around the real call (PMPI_*, found with dlsym so
 * the library does not depend on libmpi and can be preloaded into any process).
 *
 * Built with the MPI compiler wrapper whose mpi.h matches the library the programs use
 * (MPICC in the Makefile); the prototypes below are checked against that mpi.h.
 *
 * The wrappers here are the ones with logic of their own (and the 49 of earlier versions);
 * every other function of that mpi.h is wrapped by parlot_mpi_gen.c, which
 * gen_mpi_wrappers.py writes at build time and which is included at the end of this file
 * (it uses GWRAP and the annotation helpers below; the generator leaves out every function
 * this file defines).
 *
 * Blocking calls make this thread's file complete before they start (PARLOT_CKPT): when a
 * rank then hangs or is killed, its trace still shows the call it was in.  The completion
 * calls (Wait*, Recv, Probe) first ask MPI whether they would wait (MPI_Request_get_status,
 * MPI_Iprobe) and complete the file only then: a checkpoint is a system call, and most of a
 * halo exchange's waits find their messages already there (WT below).
 *
 * By default events are named with the call's arguments (below); off (PARLOT_MPI_ARGS=0,
 * parlot-run -A), the wrappers record the plain names, exactly as before annotations existed.
 *
 * How the process ended (the .end record, parlot_runfiles.c): every wrapper counts the call
 * (parlot_mpi_calls) and names itself as this thread's current MPI call while it runs; after
 * MPI_Init an error handler replaces MPI_ERRORS_ARE_FATAL on MPI_COMM_WORLD and MPI_COMM_SELF
 * (communicators derived from them inherit it): it records the failing call and the error,
 * completes the files, then aborts as the fatal handler would.  MPI_Abort records itself.
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parlot_internal.h"

#define CK PARLOT_CKPT
#define NOCK 0
/* helpers that only the generated wrappers may use (not every mpi.h has their calls) */
#define GEN_USE __attribute__((unused))

/* The MPI call this thread is in (the wrapper's plain name), for the error handler. */
static __thread const char *t_mpi_call __attribute__((tls_model("initial-exec")));

/* Entry of a wrapper (tracing on): count the call, make it this thread's current call. */
#define CALL_BEGIN(nm)                                                   \
    __atomic_fetch_add(&parlot_mpi_calls, 1, __ATOMIC_RELAXED);          \
    const char *prev_call_ = t_mpi_call;                                 \
    t_mpi_call = (nm)
#define CALL_END() t_mpi_call = prev_call_

/* ------------------------------------------------------------------ argument annotations
 *
 * By default (PARLOT_MPI_ARGS unset or not 0; parlot-run -A turns it off) an event is named after the call and its semantically
 * relevant arguments: "MPI_Allreduce[count=1,type=MPI_INT,op=MPI_MIN]".  Counts, tags and
 * roots as numbers; predefined datatypes and operations by name (user-defined ones as
 * "derived" / "user"); point-to-point peers relative to the caller's rank in the
 * communicator (+1, -1, modulo its size, so ring neighbours are +1/-1 on every rank) or
 * absolute with PARLOT_MPI_ARGS=abs; ANY / NULL for the wildcards and MPI_PROC_NULL; the
 * communicator only when it is not MPI_COMM_WORLD (MPI_COMM_SELF, else its size: "size4",
 * or "inter").  Never pointers, buffers or request handles; only arguments that MPI says are
 * significant at the calling rank (a Gather's receive side only at its root).  A call with
 * nothing to record keeps its plain name. */

typedef struct abuf {
    char s[384];                  /* "MPI_Name[k=v,k=v" (the closing bracket comes last) */
    int n, base;                  /* length; length of the plain name */
} abuf;

static NI void ab_init(abuf *a, const char *name)
{
    size_t l = strlen(name);
    if (l > 64)
        l = 64;
    memcpy(a->s, name, l);
    a->n = a->base = (int)l;
}

static NI void ab_put(abuf *a, const char *p, size_t l)
{
    if (a->n + (int)l > (int)sizeof a->s - 2)    /* room for "]" and NUL; a longer name is cut */
        l = (size_t)((int)sizeof a->s - 2 - a->n);
    memcpy(a->s + a->n, p, l);
    a->n += (int)l;
}

static NI void ab_key(abuf *a, const char *key)
{
    char sep = a->n > a->base ? ',' : '[';
    ab_put(a, &sep, 1);
    ab_put(a, key, strlen(key));
}

static NI void ab_add(abuf *a, const char *key, const char *val)
{
    ab_key(a, key);
    if (val) {
        ab_put(a, "=", 1);
        ab_put(a, val, strlen(val));
    }
}

/* "%ld" (with a sign for relative peers) without printf */
static NI void ab_num(abuf *a, const char *key, long v, int plus)
{
    char num[24], *e = num + sizeof num, *p = e;
    unsigned long u = v < 0 ? 0ul - (unsigned long)v : (unsigned long)v;
    do
        *--p = (char)('0' + u % 10);
    while ((u /= 10) != 0);
    if (v < 0)
        *--p = '-';
    else if (plus)
        *--p = '+';
    ab_key(a, key);
    ab_put(a, "=", 1);
    ab_put(a, p, (size_t)(e - p));
}

static NI void ab_int(abuf *a, const char *key, long v)
{
    ab_num(a, key, v, 0);
}

/* the site named by the buffer (the plain site when there is nothing to add) */
static NI const parlot_site *ab_site(abuf *a, const parlot_site *plain)
{
    if (a->n == a->base)
        return plain;
    a->s[a->n++] = ']';
    a->s[a->n] = '\0';
    return parlot_annotated(plain, a->s);
}

static int g_world_rank = -1, g_world_size = -1;

typedef struct cinfo {
    int ok, rank, size, inter;
} cinfo;

/* the caller's rank in comm and its size (the remote group's for an intercommunicator) */
static NI cinfo comm_info(MPI_Comm comm)
{
    static int (*c_rank)(MPI_Comm, int *), (*c_size)(MPI_Comm, int *), (*c_inter)(MPI_Comm, int *),
        (*c_rsize)(MPI_Comm, int *);
    cinfo ci = {0, -1, -1, 0};
    if (comm == MPI_COMM_NULL)
        return ci;
    if (comm == MPI_COMM_WORLD && g_world_size > 0) {
        ci.ok = 1;
        ci.rank = g_world_rank;
        ci.size = g_world_size;
        return ci;
    }
    if (!c_rank) {
        c_size = (int (*)(MPI_Comm, int *))parlot_real("PMPI_Comm_size");
        c_inter = (int (*)(MPI_Comm, int *))parlot_real("PMPI_Comm_test_inter");
        c_rsize = (int (*)(MPI_Comm, int *))parlot_real("PMPI_Comm_remote_size");
        c_rank = (int (*)(MPI_Comm, int *))parlot_real("PMPI_Comm_rank");
    }
    parlot_mpi_in();
    if (c_inter(comm, &ci.inter) == MPI_SUCCESS && c_rank(comm, &ci.rank) == MPI_SUCCESS &&
        (ci.inter ? c_rsize(comm, &ci.size) : c_size(comm, &ci.size)) == MPI_SUCCESS && ci.size > 0)
        ci.ok = 1;
    parlot_mpi_out();
    return ci;
}

static NI void a_comm(abuf *a, MPI_Comm comm)
{
    if (comm == MPI_COMM_WORLD)
        return;
    if (comm == MPI_COMM_SELF) {
        ab_add(a, "comm", "MPI_COMM_SELF");
        return;
    }
    if (comm == MPI_COMM_NULL) {
        ab_add(a, "comm", "MPI_COMM_NULL");
        return;
    }
    cinfo ci = comm_info(comm);
    char v[24];
    if (!ci.ok)
        snprintf(v, sizeof v, "?");
    else if (ci.inter)
        snprintf(v, sizeof v, "inter");
    else
        snprintf(v, sizeof v, "size%d", ci.size);
    ab_add(a, "comm", v);
}

/* a peer relative to the caller's rank in a group of size processes, the shorter way round */
static NI void ab_rel(abuf *a, const char *key, int peer, int rank, int size)
{
    long d = (((long)peer - rank) % size + size) % size;
    if (2 * d > size)
        d -= size;                /* the shorter way round: -1 rather than +size-1 */
    ab_num(a, key, d, 1);
}

/* a point-to-point peer (dest / source) */
static NI void a_peer(abuf *a, const char *key, int peer, MPI_Comm comm)
{
    char v[24];
    if (peer == MPI_ANY_SOURCE)
        snprintf(v, sizeof v, "ANY");
    else if (peer == MPI_PROC_NULL)
        snprintf(v, sizeof v, "NULL");
    else {
        cinfo ci = comm_info(comm);
        if (!ci.ok)
            snprintf(v, sizeof v, "?");
        else if (ci.inter || parlot_mpi_args == PARLOT_ARGS_ABS) {
            ab_num(a, key, peer, 0);
            return;
        } else {
            ab_rel(a, key, peer, ci.rank, ci.size);
            return;
        }
    }
    ab_add(a, key, v);
}

static NI void a_tag(abuf *a, const char *key, int tag)
{
    if (tag == MPI_ANY_TAG)
        ab_add(a, key, "ANY");
    else
        ab_int(a, key, tag);
}

static NI void a_root(abuf *a, int root)
{
    if (root == MPI_ROOT)
        ab_add(a, "root", "ROOT");
    else if (root == MPI_PROC_NULL)
        ab_add(a, "root", "NULL");
    else
        ab_int(a, "root", root);
}

/* is the caller the root of a rooted collective (intercommunicators: root == MPI_ROOT) */
static NI int at_root(int root, MPI_Comm comm)
{
    if (root == MPI_ROOT)
        return 1;
    cinfo ci = comm_info(comm);
    return ci.ok && !ci.inter && ci.rank == root;
}

static NI int is_inter(MPI_Comm comm)
{
    if (comm == MPI_COMM_WORLD || comm == MPI_COMM_SELF)
        return 0;
    cinfo ci = comm_info(comm);
    return ci.ok && ci.inter;
}

#define NAMED(h) {h, #h}
static NI void a_type(abuf *a, const char *key, MPI_Datatype t)
{
    const struct {
        MPI_Datatype h;
        const char *name;
    } known[] = {
        NAMED(MPI_INT), NAMED(MPI_DOUBLE), NAMED(MPI_CHAR), NAMED(MPI_BYTE), NAMED(MPI_FLOAT),
        NAMED(MPI_LONG), NAMED(MPI_UNSIGNED), NAMED(MPI_UNSIGNED_LONG), NAMED(MPI_LONG_LONG),
        NAMED(MPI_UNSIGNED_LONG_LONG), NAMED(MPI_SHORT), NAMED(MPI_UNSIGNED_SHORT),
        NAMED(MPI_SIGNED_CHAR), NAMED(MPI_UNSIGNED_CHAR), NAMED(MPI_LONG_DOUBLE), NAMED(MPI_C_BOOL),
        NAMED(MPI_INT8_T), NAMED(MPI_INT16_T), NAMED(MPI_INT32_T), NAMED(MPI_INT64_T),
        NAMED(MPI_UINT8_T), NAMED(MPI_UINT16_T), NAMED(MPI_UINT32_T), NAMED(MPI_UINT64_T),
        NAMED(MPI_C_FLOAT_COMPLEX), NAMED(MPI_C_DOUBLE_COMPLEX), NAMED(MPI_2INT), NAMED(MPI_FLOAT_INT),
        NAMED(MPI_DOUBLE_INT), NAMED(MPI_LONG_INT), NAMED(MPI_SHORT_INT), NAMED(MPI_LONG_DOUBLE_INT),
        NAMED(MPI_PACKED), NAMED(MPI_AINT), NAMED(MPI_OFFSET), NAMED(MPI_COUNT), NAMED(MPI_WCHAR),
    };
    if (t == MPI_DATATYPE_NULL) {
        ab_add(a, key, "NULL");
        return;
    }
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (known[i].h == t) {
            ab_add(a, key, known[i].name);
            return;
        }
    /* another predefined type: MPI's own name for it; anything built by the program: derived */
    static int (*envelope)(MPI_Datatype, int *, int *, int *, int *);
    static int (*get_name)(MPI_Datatype, char *, int *);
    if (!envelope) {
        get_name = (int (*)(MPI_Datatype, char *, int *))parlot_real("PMPI_Type_get_name");
        envelope = (int (*)(MPI_Datatype, int *, int *, int *, int *))parlot_real("PMPI_Type_get_envelope");
    }
    int ni, na, nd, comb = -1, len = 0;
    char name[MPI_MAX_OBJECT_NAME + 1];
    name[0] = '\0';
    parlot_mpi_in();
    int named = envelope(t, &ni, &na, &nd, &comb) == MPI_SUCCESS && comb == MPI_COMBINER_NAMED &&
                get_name(t, name, &len) == MPI_SUCCESS && name[0];
    parlot_mpi_out();
    if (!named) {
        ab_add(a, key, "derived");
        return;
    }
    name[MPI_MAX_OBJECT_NAME] = '\0';
    for (char *c = name; *c; c++)
        if (!((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_'))
            *c = '_';
    ab_add(a, key, name);
}

static NI void a_op(abuf *a, MPI_Op op)
{
    const struct {
        MPI_Op h;
        const char *name;
    } known[] = {
        NAMED(MPI_SUM), NAMED(MPI_MAX), NAMED(MPI_MIN), NAMED(MPI_PROD), NAMED(MPI_LAND),
        NAMED(MPI_BAND), NAMED(MPI_LOR), NAMED(MPI_BOR), NAMED(MPI_LXOR), NAMED(MPI_BXOR),
        NAMED(MPI_MAXLOC), NAMED(MPI_MINLOC), NAMED(MPI_REPLACE), NAMED(MPI_NO_OP),
    };
    if (op == MPI_OP_NULL) {
        ab_add(a, "op", "NULL");
        return;
    }
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (known[i].h == op) {
            ab_add(a, "op", known[i].name);
            return;
        }
    ab_add(a, "op", "user");
}
#undef NAMED

/* sum of a per-rank count array of an intracommunicator (v-collectives) */
static NI void a_total(abuf *a, const char *key, const int counts[], MPI_Comm comm)
{
    cinfo ci = comm_info(comm);
    if (!ci.ok || ci.inter || !counts)
        return;
    long sum = 0;
    for (int i = 0; i < ci.size; i++)
        sum += counts[i];
    ab_int(a, key, sum);
}

/* the pieces every call family records */
static NI void a_p2p(abuf *a, int count, MPI_Datatype type, const char *peer_key, int peer, int tag, MPI_Comm comm)
{
    ab_int(a, "count", count);
    a_type(a, "type", type);
    a_peer(a, peer_key, peer, comm);
    a_tag(a, "tag", tag);
    a_comm(a, comm);
}

static NI void a_reduction(abuf *a, const void *sendbuf, int count, MPI_Datatype type, MPI_Op op)
{
    ab_int(a, "count", count);
    a_type(a, "type", type);
    a_op(a, op);
    if (sendbuf == MPI_IN_PLACE)
        ab_add(a, "in_place", NULL);
}

/* the send side of an all-gather / all-to-all: in place, or its count and type */
static NI void a_send_side(abuf *a, const void *sendbuf, int count, MPI_Datatype type)
{
    if (sendbuf == MPI_IN_PLACE) {
        ab_add(a, "in_place", NULL);
    } else {
        ab_int(a, "scount", count);
        a_type(a, "stype", type);
    }
}

/* Comm_split's colour (MPI_UNDEFINED by name) */
static NI void a_color(abuf *a, int color)
{
    if (color == MPI_UNDEFINED)
        ab_add(a, "color", "UNDEFINED");
    else
        ab_int(a, "color", color);
}

/* a_total of the large-count (MPI_Count) v-collectives */
static NI GEN_USE void a_total_c(abuf *a, const char *key, const MPI_Count counts[], MPI_Comm comm)
{
    cinfo ci = comm_info(comm);
    if (!ci.ok || ci.inter || !counts)
        return;
    long sum = 0;
    for (int i = 0; i < ci.size; i++)
        sum += (long)counts[i];
    ab_int(a, key, sum);
}

/* ------------------------------------------------------------------ MPI objects
 *
 * The MPI objects the program holds, counted as the wrappers see them made and freed (the
 * generator knows which calls make one: an output handle of a call that is no conversion or
 * look-up; which free one: *_free, Comm_disconnect, File_close, and the completion calls for
 * requests, by the handles they set to MPI_REQUEST_NULL).  MPI_Finalize is named with those
 * still open ("MPI_Finalize[requests=1,types=2]"), and parlot_mpi_open_record() writes them
 * for the end record.  Counts only, no handles: a leak shows as a number at the rank that
 * leaked, the missing free call as a missing event before it. */
enum {
    PARLOT_OPEN_REQUEST, PARLOT_OPEN_COMM, PARLOT_OPEN_GROUP, PARLOT_OPEN_TYPE, PARLOT_OPEN_WIN,
    PARLOT_OPEN_OP, PARLOT_OPEN_INFO, PARLOT_OPEN_FILE, PARLOT_OPEN_ERRHANDLER, PARLOT_OPEN_N
};
static const char *const open_names[PARLOT_OPEN_N] = {
    "requests", "comms", "groups", "types", "wins", "ops", "infos", "files", "errhandlers",
};
static long g_open[PARLOT_OPEN_N];

static inline NI void open_add(int k)
{
    __atomic_fetch_add(&g_open[k], 1, __ATOMIC_RELAXED);
}

static inline NI void open_sub(int k)
{
    __atomic_fetch_sub(&g_open[k], 1, __ATOMIC_RELAXED);
}

static inline NI void open_sub_n(int k, int n)
{
    if (n)
        __atomic_fetch_sub(&g_open[k], (long)n, __ATOMIC_RELAXED);
}

/* MPI_Comm_spawn(_multiple) returned the intercommunicator to the processes it started
 * (its remote group): they are not traced, the end record counts them */
static GEN_USE NI void spawned(MPI_Comm inter)
{
    static int (*remote_size)(MPI_Comm, int *);
    if (!remote_size)
        remote_size = (int (*)(MPI_Comm, int *))parlot_real("PMPI_Comm_remote_size");
    int n = 0;
    if (inter != MPI_COMM_NULL && remote_size(inter, &n) == MPI_SUCCESS)
        parlot_count_spawned(n);
}

/* requests of an array that are not MPI_REQUEST_NULL */
static NI int req_live(int n, const MPI_Request *r)
{
    int live = 0;
    if (!r)
        return 0;
    for (int i = 0; i < n; i++)
        live += r[i] != MPI_REQUEST_NULL;
    return live;
}

/* the objects still open as annotations: requests=1,comms=2 (nothing when none is).  Only
 * with the generated wrappers: without them most calls that make objects are not seen. */
static NI void a_open(abuf *a)
{
#ifndef PARLOT_MPI_GEN
    return;
#endif
    for (int k = 0; k < PARLOT_OPEN_N; k++) {
        long n = __atomic_load_n(&g_open[k], __ATOMIC_RELAXED);
        if (n)
            ab_int(a, open_names[k], n);
    }
}

int parlot_mpi_open_record(char *buf, int size)
{
    int len = 0;
#ifndef PARLOT_MPI_GEN
    return 0;
#endif
    for (int k = 0; k < PARLOT_OPEN_N; k++) {
        long n = __atomic_load_n(&g_open[k], __ATOMIC_RELAXED);
        if (!n)
            continue;
        char line[64], num[24], *e = num + sizeof num, *p = e;
        unsigned long u = n < 0 ? 0ul - (unsigned long)n : (unsigned long)n;
        do
            *--p = (char)('0' + u % 10);
        while ((u /= 10) != 0);
        if (n < 0)
            *--p = '-';
        int l = 0;
        const char *parts[3] = {"open_", open_names[k], "="};
        for (int i = 0; i < 3; i++)
            for (const char *c = parts[i]; *c; c++)
                line[l++] = *c;
        while (p < e)
            line[l++] = *p++;
        line[l++] = '\n';
        if (len + l > size)
            break;
        memcpy(buf + len, line, (size_t)l);
        len += l;
    }
    return len;
}

/* Handles as keys (MPICH's are ints, Open MPI's pointers). */
static inline NI uint64_t hkey(const void *h, size_t n)
{
    uint64_t k = 0;
    memcpy(&k, h, n < sizeof k ? n : sizeof k);
    return k ^ (k >> 17) ^ (k >> 31);
}
#define HKEY(h) hkey(&(h), sizeof(h))

static pthread_mutex_t g_obj_mx = PTHREAD_MUTEX_INITIALIZER;

/* Windows: the caller's rank and the group's size, from the communicator it was made on, so
 * that RMA targets are named relative to the caller like point-to-point peers. */
typedef struct wentry {
    struct wentry *next;
    MPI_Win win;
    int rank, size;
} wentry;
static wentry *g_wins[64];

static NI GEN_USE void win_remember(MPI_Win win, MPI_Comm comm)
{
    if (win == MPI_WIN_NULL)
        return;
    cinfo ci = comm_info(comm);
    if (!ci.ok || ci.inter)
        return;
    wentry *e = (wentry *)malloc(sizeof *e);
    if (!e)
        return;
    e->win = win;
    e->rank = ci.rank;
    e->size = ci.size;
    uint64_t h = HKEY(win) % 64;
    pthread_mutex_lock(&g_obj_mx);
    e->next = g_wins[h];
    g_wins[h] = e;
    pthread_mutex_unlock(&g_obj_mx);
}

static NI GEN_USE void win_forget(MPI_Win win)
{
    uint64_t h = HKEY(win) % 64;
    pthread_mutex_lock(&g_obj_mx);
    for (wentry **pp = &g_wins[h]; *pp; pp = &(*pp)->next)
        if ((*pp)->win == win) {
            wentry *e = *pp;
            *pp = e->next;
            free(e);
            break;
        }
    pthread_mutex_unlock(&g_obj_mx);
}

static NI int win_group(MPI_Win win, int *rank, int *size)
{
    uint64_t h = HKEY(win) % 64;
    int found = 0;
    pthread_mutex_lock(&g_obj_mx);
    for (wentry *e = g_wins[h]; e; e = e->next)
        if (e->win == win) {
            *rank = e->rank;
            *size = e->size;
            found = 1;
            break;
        }
    pthread_mutex_unlock(&g_obj_mx);
    if (found)
        return 1;
    /* a window made before tracing began: ask MPI */
    static int (*get_group)(MPI_Win, MPI_Group *), (*g_rank)(MPI_Group, int *), (*g_size)(MPI_Group, int *),
        (*g_free)(MPI_Group *);
    if (!get_group) {
        g_rank = (int (*)(MPI_Group, int *))parlot_real("PMPI_Group_rank");
        g_size = (int (*)(MPI_Group, int *))parlot_real("PMPI_Group_size");
        g_free = (int (*)(MPI_Group *))parlot_real("PMPI_Group_free");
        get_group = (int (*)(MPI_Win, MPI_Group *))parlot_real("PMPI_Win_get_group");
    }
    MPI_Group g;
    parlot_mpi_in();
    if (win != MPI_WIN_NULL && get_group(win, &g) == MPI_SUCCESS) {
        found = g_rank(g, rank) == MPI_SUCCESS && g_size(g, size) == MPI_SUCCESS && *size > 0 &&
                *rank != MPI_UNDEFINED;
        g_free(&g);
    }
    parlot_mpi_out();
    return found;
}

/* an RMA target rank (MPI_Put's target_rank, MPI_Win_lock's rank) */
static NI GEN_USE void a_target(abuf *a, const char *key, int target, MPI_Win win)
{
    int rank = -1, size = -1;
    if (target == MPI_PROC_NULL)
        ab_add(a, key, "NULL");
    else if (parlot_mpi_args == PARLOT_ARGS_ABS)
        ab_num(a, key, target, 0);
    else if (win_group(win, &rank, &size))
        ab_rel(a, key, target, rank, size);
    else
        ab_add(a, key, "?");
}

/* Persistent requests: what their *_init was named with ("Send_init(count=4,...,dest=+1,
 * tag=7)"), kept until MPI_Request_free, so that MPI_Start and MPI_Startall name the
 * peers and tags they start. */
typedef struct rentry {
    struct rentry *next;
    MPI_Request req;
    char text[];
} rentry;
#define REQ_BUCKETS 1024u
static rentry *g_reqs[REQ_BUCKETS];

static NI void req_forget(MPI_Request req)
{
    uint64_t h = HKEY(req) % REQ_BUCKETS;
    pthread_mutex_lock(&g_obj_mx);
    for (rentry **pp = &g_reqs[h]; *pp; pp = &(*pp)->next)
        if ((*pp)->req == req) {
            rentry *e = *pp;
            *pp = e->next;
            free(e);
            break;
        }
    pthread_mutex_unlock(&g_obj_mx);
}

static NI GEN_USE void req_remember(MPI_Request req, const parlot_site *site)
{
    if (req == MPI_REQUEST_NULL)
        return;
    const char *name = site->name;
    if (!strncmp(name, "MPIX_", 5))
        name += 5;
    else if (!strncmp(name, "MPI_", 4))
        name += 4;
    size_t l = strlen(name);
    rentry *e = (rentry *)malloc(sizeof *e + l + 1);
    if (!e)
        return;
    e->req = req;
    for (size_t i = 0; i <= l; i++)         /* MPI_Send_init[...] -> Send_init(...) */
        e->text[i] = name[i] == '[' ? '(' : name[i] == ']' ? ')' : name[i];
    req_forget(req);                         /* a handle MPI gave out again */
    uint64_t h = HKEY(req) % REQ_BUCKETS;
    pthread_mutex_lock(&g_obj_mx);
    e->next = g_reqs[h];
    g_reqs[h] = e;
    pthread_mutex_unlock(&g_obj_mx);
}

/* the *_init of a persistent request as a bare key (nothing for a request not made by one) */
static NI void a_request(abuf *a, MPI_Request req)
{
    char text[200];
    text[0] = '\0';
    if (req == MPI_REQUEST_NULL)
        return;
    uint64_t h = HKEY(req) % REQ_BUCKETS;
    pthread_mutex_lock(&g_obj_mx);
    for (rentry *e = g_reqs[h]; e; e = e->next)
        if (e->req == req) {
            size_t l = strlen(e->text);
            if (l >= sizeof text)
                l = sizeof text - 1;
            memcpy(text, e->text, l);
            text[l] = '\0';
            break;
        }
    pthread_mutex_unlock(&g_obj_mx);
    if (text[0])
        ab_add(a, text, NULL);
}

/* GWRAP(ret, name, flags, (parameters), (arguments), annotation, before, after):
 * ret name(parameters) calling Pname(arguments); unless PARLOT_MPI_ARGS=0 the annotation
 * (statements adding to the abuf A, from the parameters) names the event; `before` runs just
 * before the real call, `after` just after it (its result is rc_, the event's site site_).
 * The hand-written wrappers below and the generated ones (parlot_mpi_gen.c) share it.  The
 * name is parenthesised: mpi.h may also define it as a macro (MPICH's MPI_Comm_c2f). */
#define GWRAP(ret, name, flags, params, args, annotation, before, after)      \
    PARLOT_API ret(name) params                                               \
    {                                                                         \
        static const parlot_site site = {#name};                              \
        static ret(*real) params;                                             \
        if (__builtin_expect(!real, 0))                                       \
            real = (ret(*) params)parlot_real("P" #name);                     \
        if (!parlot_on) {                                                     \
            if (parlot_warn_pending)                                          \
                parlot_warn_once();                                           \
            return real args;                                                 \
        }                                                                     \
        CALL_BEGIN(#name);                                                    \
        const parlot_site *site_ = &site;                                     \
        if (parlot_mpi_args) {                                                \
            abuf A;                                                           \
            ab_init(&A, #name);                                               \
            annotation;                                                       \
            site_ = ab_site(&A, &site);                                       \
        }                                                                     \
        parlot_enter(site_, flags);                                           \
        parlot_mpi_in();                                                      \
        before;                                                               \
        ret rc_ = real args;                                                  \
        parlot_mpi_out();                                                     \
        after;                                                                \
        parlot_exit(site_);                                                   \
        CALL_END();                                                           \
        return rc_;                                                           \
    }
/* WRAP: an int function (every hand-written wrapper); WA: with an annotation; W: without;
 * WAX: with code before and after the real call. */
#define WRAP(name, flags, params, args, annotation, before) \
    GWRAP(int, name, flags, params, args, annotation, before, (void)0)
#define WA(name, flags, params, args, annotation) WRAP(name, flags, params, args, annotation, (void)0)
#define W(name, flags, params, args) WA(name, flags, params, args, (void)0)
#define WAX(name, flags, params, args, annotation, before, after) \
    GWRAP(int, name, flags, params, args, annotation, before, after)

/* PASS(ret, name, (parameters), (arguments)): no event, the PMPI function called (handle
 * conversions, clocks, address arithmetic: called in inner loops, nothing a diff needs). */
#define PASS(ret, name, params, args)                                         \
    PARLOT_API ret(name) params                                               \
    {                                                                         \
        static ret(*real) params;                                             \
        if (__builtin_expect(!real, 0))                                       \
            real = (ret(*) params)parlot_real("P" #name);                     \
        return real args;                                                     \
    }
#define PASSV(name, params, args)                                             \
    PARLOT_API void(name) params                                              \
    {                                                                         \
        static void(*real) params;                                            \
        if (__builtin_expect(!real, 0))                                       \
            real = (void(*) params)parlot_real("P" #name);                    \
        real args;                                                            \
    }

/* WT(name, (parameters), (arguments), annotation, probe): a call that may wait.  `probe` (an
 * expression of the parameters) asks MPI, without waiting and without changing anything the
 * call will see (MPI_Request_get_status, MPI_Iprobe), whether the call would return at once.
 * Only when it would wait is the file made complete first, so that a rank that hangs there
 * still shows the call.  The call itself always runs, so its results and errors are its own.
 * WTR: the same for a completion call on n requests (reqs): the requests it frees are
 * counted off the open ones. */
#define WT(name, params, args, annotation, probe)                              \
    WRAP(name, 0, params, args, annotation, if (!(probe)) parlot_checkpoint_self())
#define WTR(name, params, args, annotation, probe, n, reqs)                    \
    GWRAP(int, name, 0, params, args, annotation,                              \
          int live_ = req_live(n, reqs); if (!(probe)) parlot_checkpoint_self(), \
          open_sub_n(PARLOT_OPEN_REQUEST, live_ - req_live(n, reqs)))
/* a test call on n requests (no checkpoint: it never waits) */
#define WTEST(name, params, args, annotation, n, reqs)                         \
    GWRAP(int, name, NOCK, params, args, annotation, int live_ = req_live(n, reqs), \
          open_sub_n(PARLOT_OPEN_REQUEST, live_ - req_live(n, reqs)))
/* a call that makes one request (*req) */
#define WAREQ(name, flags, params, args, annotation, req)                      \
    WAX(name, flags, params, args, annotation, (void)0,                        \
        if (rc_ == MPI_SUCCESS && (req) && *(req) != MPI_REQUEST_NULL) open_add(PARLOT_OPEN_REQUEST))

/* Whether requests are complete (all of them, or at least one), without completing them:
 * MPI_Request_get_status neither frees nor inactivates a request; a null request counts as
 * complete, as for MPI_Wait*. */
static NI int requests_complete(int count, MPI_Request *reqs, int need_all)
{
    static int (*get_status)(MPI_Request, int *, MPI_Status *);
    if (__builtin_expect(!get_status, 0))
        get_status = (int (*)(MPI_Request, int *, MPI_Status *))parlot_real("PMPI_Request_get_status");
    if (count <= 0 || !reqs)
        return 1;
    for (int i = 0; i < count; i++) {
        int flag = 0;
        if (get_status(reqs[i], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return 0;
        if (flag && !need_all)
            return 1;
        if (!flag && need_all)
            return 0;
    }
    return need_all;
}

/* Whether a matching message is there to be received (MPI_Iprobe). */
static NI int message_waiting(int source, int tag, MPI_Comm comm)
{
    static int (*iprobe)(int, int, MPI_Comm, int *, MPI_Status *);
    if (__builtin_expect(!iprobe, 0))
        iprobe = (int (*)(int, int, MPI_Comm, int *, MPI_Status *))parlot_real("PMPI_Iprobe");
    int flag = 0;
    return iprobe(source, tag, comm, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag;
}

/* ------------------------------------------------------------------ MPI errors
 *
 * What MPI_ERRORS_ARE_FATAL does, with the end record first: how=mpi_error, the error class,
 * the call (this thread's current wrapper), the error text; the message on stderr that the
 * library's fatal handler would have printed; the files made final; then PMPI_Abort. */

/* one line of text: control characters as spaces, runs of spaces as one, no space at the
 * ends; appended to out (size n) */
static NI void squeeze(char *out, size_t n, const char *in, size_t len)
{
    size_t k = strlen(out);
    int space = 1;                /* no leading space */
    for (size_t i = 0; i < len && k + 1 < n; i++) {
        char c = in[i];
        if (c <= ' ' || c >= 0x7f) {
            if (!space)
                out[k++] = ' ';
            space = 1;
            continue;
        }
        out[k++] = c;
        space = 0;
    }
    while (k && out[k - 1] == ' ')
        k--;
    out[k] = '\0';
}

/* MPI_Error_string as one line of at most ERR_LINE characters.  MPICH's text is a generic
 * line ("Message truncated, error stack:") then a stack of lines, the most specific last;
 * when the whole does not fit: the first line, " ... ", the last line. */
#define ERR_LINE 200
static NI void one_line(char out[ERR_LINE + 1], const char *text)
{
    out[0] = '\0';
    squeeze(out, ERR_LINE + 1, text, strlen(text));
    if (strlen(out) < ERR_LINE)
        return;
    const char *nl = strchr(text, '\n');
    const char *end = text + strlen(text);
    while (end > text && (end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\r'))
        end--;
    const char *last = end;
    while (last > text && last[-1] != '\n')
        last--;
    if (!nl || last <= nl)
        return;                   /* one long line: cut */
    out[0] = '\0';
    squeeze(out, ERR_LINE / 3, text, (size_t)(nl - text));
    size_t k = strlen(out);
    snprintf(out + k, ERR_LINE + 1 - k, " ... ");
    squeeze(out, ERR_LINE + 1, last, (size_t)(end - last));
}

static NI void say_err(const char *p)
{
    size_t n = strlen(p);
    while (n) {
        ssize_t w = write(2, p, n);
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

static NI void fatal_errhandler(MPI_Comm *comm, int *errcode, ...)
{
    static int (*err_class)(int, int *), (*err_string)(int, char *, int *), (*abort_)(MPI_Comm, int);
    if (!abort_) {
        err_class = (int (*)(int, int *))parlot_real("PMPI_Error_class");
        err_string = (int (*)(int, char *, int *))parlot_real("PMPI_Error_string");
        abort_ = (int (*)(MPI_Comm, int))parlot_real("PMPI_Abort");
    }
    int code = errcode ? *errcode : MPI_ERR_OTHER, cls = code, len = 0;
    char text[MPI_MAX_ERROR_STRING + 1];
    char line[ERR_LINE + 1];
    text[0] = '\0';
    parlot_mpi_in();
    if (err_class(code, &cls) != MPI_SUCCESS)
        cls = code;
    if (err_string(code, text, &len) != MPI_SUCCESS)
        text[0] = '\0';
    parlot_mpi_out();
    text[MPI_MAX_ERROR_STRING] = '\0';
    one_line(line, text);
    const char *call = t_mpi_call;
    parlot_end_record("mpi_error", 1, cls, call, line);
    char head[160];
    snprintf(head, sizeof head, "Fatal error in %s: ", call ? call : "an MPI call");
    say_err(head);
    say_err(text[0] ? text : "(no error text)");
    say_err("\n");
    parlot_sync_all(1);
    parlot_mpi_in();
    abort_(comm ? *comm : MPI_COMM_WORLD, code);
    parlot_mpi_out();
    _exit(1);                     /* not reached: PMPI_Abort does not return */
}

/* After a successful MPI_Init: our handler where MPI_ERRORS_ARE_FATAL is (a handler chosen
 * otherwise, e.g. through mpiexec's mpi_initial_errhandler, is left alone). */
static NI void install_errhandler(void)
{
    static int (*create)(MPI_Comm_errhandler_function *, MPI_Errhandler *);
    static int (*get)(MPI_Comm, MPI_Errhandler *), (*set)(MPI_Comm, MPI_Errhandler);
    if (!create) {
        create = (int (*)(MPI_Comm_errhandler_function *, MPI_Errhandler *))parlot_real("PMPI_Comm_create_errhandler");
        get = (int (*)(MPI_Comm, MPI_Errhandler *))parlot_real("PMPI_Comm_get_errhandler");
        set = (int (*)(MPI_Comm, MPI_Errhandler))parlot_real("PMPI_Comm_set_errhandler");
    }
    if (!parlot_on)               /* left the run in after_init (spawned): MPI's own handling */
        return;
    parlot_mpi_in();
    MPI_Errhandler eh;
    if (create(fatal_errhandler, &eh) == MPI_SUCCESS) {
        const MPI_Comm comms[2] = {MPI_COMM_WORLD, MPI_COMM_SELF};
        for (int i = 0; i < 2; i++) {
            MPI_Errhandler cur = MPI_ERRHANDLER_NULL;
            if (get(comms[i], &cur) == MPI_SUCCESS && cur == MPI_ERRORS_ARE_FATAL)
                set(comms[i], eh);
        }
    }
    parlot_mpi_out();
}

/* The running MPI library must be of the family whose mpi.h these wrappers were compiled
 * against: Open MPI's handles are pointers, MPICH's (and its ABI family's: Intel MPI, MVAPICH,
 * Cray MPICH) 32-bit integers, so every wrapper's signature would be wrong.  Checked with
 * MPI_Get_library_version (which takes no handle) right after MPI_Init; on a mismatch the
 * process ends with a message that says how to build the right library, rather than crash
 * in its next MPI call. */
static NI void check_mpi_family(void)
{
#if defined(OPEN_MPI)
    static const int built_for_ompi = 1;
#else
    static const int built_for_ompi = 0;
#endif
    static int (*version)(char *, int *);
    if (!version)
        version = (int (*)(char *, int *))parlot_real("PMPI_Get_library_version");
    static char text[MPI_MAX_LIBRARY_VERSION_STRING + 1];
    int len = 0;
    if (version(text, &len) != MPI_SUCCESS)
        return;
    text[len > 0 && len <= MPI_MAX_LIBRARY_VERSION_STRING ? len : 0] = '\0';
    int runs_ompi = strstr(text, "Open MPI") != NULL;
    if (runs_ompi == built_for_ompi)
        return;
    char msg[512];
    int n = snprintf(msg, sizeof msg,
                     "parlot: this libparlot.so was built for %s but the program runs %s; build the tracer "
                     "with the program's MPI compiler wrapper (make -C pin MPICC=/path/to/mpicc BUILD=DIR) and "
                     "give it to parlot-run -L DIR\n",
                     built_for_ompi ? "Open MPI" : "an MPICH-family MPI", runs_ompi ? "Open MPI" : "an MPICH-family MPI");
    ssize_t w = write(2, msg, n > 0 && n < (int)sizeof msg ? (size_t)n : 0);
    (void)w;
    _exit(127);
}

static void NI after_init(void)
{
    check_mpi_family();
    int rank = -1, inited = 0;
    static int (*initialized)(int *);
    static int (*comm_rank)(MPI_Comm, int *);
    if (!initialized)
        initialized = (int (*)(int *))parlot_real("PMPI_Initialized");
    if (!comm_rank)
        comm_rank = (int (*)(MPI_Comm, int *))parlot_real("PMPI_Comm_rank");
    static int (*get_parent)(MPI_Comm *);
    if (!get_parent)
        get_parent = (int (*)(MPI_Comm *))parlot_real("PMPI_Comm_get_parent");
    MPI_Comm parent = MPI_COMM_NULL;
    if (initialized(&inited) == MPI_SUCCESS && inited && get_parent(&parent) == MPI_SUCCESS &&
        parent != MPI_COMM_NULL) {
        parlot_leave_run();       /* started by MPI_Comm_spawn: not traced */
        return;
    }
    if (inited && comm_rank(MPI_COMM_WORLD, &rank) == MPI_SUCCESS) {
        parlot_set_rank(rank);
        if (parlot_mpi_args) {    /* MPI_COMM_WORLD's rank and size, for relative peers */
            static int (*comm_size)(MPI_Comm, int *);
            int size = -1;
            if (!comm_size)
                comm_size = (int (*)(MPI_Comm, int *))parlot_real("PMPI_Comm_size");
            if (comm_size(MPI_COMM_WORLD, &size) == MPI_SUCCESS && size > 0) {
                g_world_rank = rank;
                g_world_size = size;
            }
        }
    }
}

/* MPI_Init(_thread) returned (ok: successfully) to a caller other than the wrappers above:
 * the Fortran bindings (parlot_fortran.c). */
void parlot_mpi_after_init(int ok)
{
    after_init();
    if (ok)
        install_errhandler();
}

PARLOT_API int MPI_Init(int *argc, char ***argv)
{
    static const parlot_site site = {"MPI_Init"};
    static int (*real)(int *, char ***);
    if (!real)
        real = (int (*)(int *, char ***))parlot_real("PMPI_Init");
    if (!parlot_on) {
        if (parlot_warn_pending)
            parlot_warn_once();
        return real(argc, argv);
    }
    CALL_BEGIN("MPI_Init");
    parlot_mpi_state = PARLOT_MPI_INITED;
    parlot_enter(&site, CK);
    parlot_mpi_in();
    int rc = real(argc, argv);
    parlot_mpi_out();
    after_init();
    if (rc == MPI_SUCCESS)
        install_errhandler();
    parlot_exit(&site);
    CALL_END();
    return rc;
}

PARLOT_API int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    static const parlot_site site = {"MPI_Init_thread"};
    static int (*real)(int *, char ***, int, int *);
    if (!real)
        real = (int (*)(int *, char ***, int, int *))parlot_real("PMPI_Init_thread");
    if (!parlot_on) {
        if (parlot_warn_pending)
            parlot_warn_once();
        return real(argc, argv, required, provided);
    }
    CALL_BEGIN("MPI_Init_thread");
    parlot_mpi_state = PARLOT_MPI_INITED;
    parlot_enter(&site, CK);
    parlot_mpi_in();
    int rc = real(argc, argv, required, provided);
    parlot_mpi_out();
    after_init();
    if (rc == MPI_SUCCESS)
        install_errhandler();
    parlot_exit(&site);
    CALL_END();
    return rc;
}

PARLOT_API int MPI_Finalize(void)
{
    static const parlot_site site = {"MPI_Finalize"};
    static int (*real)(void);
    if (!real)
        real = (int (*)(void))parlot_real("PMPI_Finalize");
    if (!parlot_on)
        return real();
    CALL_BEGIN("MPI_Finalize");
    const parlot_site *site_ = &site;
    if (parlot_mpi_args) {        /* the MPI objects the program did not free */
        abuf A;
        ab_init(&A, "MPI_Finalize");
        a_open(&A);
        site_ = ab_site(&A, &site);
    }
    parlot_enter(site_, NOCK);
    parlot_sync_all(0);           /* every thread's file complete, .info current */
    parlot_mpi_in();
    int rc = real();
    parlot_mpi_out();
    if (rc == MPI_SUCCESS)
        parlot_mpi_state = PARLOT_MPI_FINALIZED;
    parlot_exit(site_);
    CALL_END();
    return rc;
}

PARLOT_API int MPI_Abort(MPI_Comm comm, int errorcode)
{
    static const parlot_site site = {"MPI_Abort"};
    static int (*real)(MPI_Comm, int);
    if (!real)
        real = (int (*)(MPI_Comm, int))parlot_real("PMPI_Abort");
    if (parlot_on) {
        __atomic_fetch_add(&parlot_mpi_calls, 1, __ATOMIC_RELAXED);
        t_mpi_call = "MPI_Abort";
        parlot_enter(&site, NOCK);
        parlot_end_record("abort", 1, errorcode, "MPI_Abort", NULL);
        parlot_sync_all(1);       /* the launcher may kill this process any moment now */
    }
    return real(comm, errorcode);
}

/* environment */
WA(MPI_Comm_rank, NOCK, (MPI_Comm comm, int *rank), (comm, rank),
   a_comm(&A, comm))
WA(MPI_Comm_size, NOCK, (MPI_Comm comm, int *size), (comm, size),
   a_comm(&A, comm))
WAX(MPI_Comm_split, CK, (MPI_Comm comm, int color, int key, MPI_Comm *newcomm), (comm, color, key, newcomm),
    { a_color(&A, color); a_comm(&A, comm); }, (void)0,
    if (rc_ == MPI_SUCCESS && newcomm && *newcomm != MPI_COMM_NULL) open_add(PARLOT_OPEN_COMM))
WAX(MPI_Comm_dup, CK, (MPI_Comm comm, MPI_Comm *newcomm), (comm, newcomm),
    a_comm(&A, comm), (void)0,
    if (rc_ == MPI_SUCCESS && newcomm && *newcomm != MPI_COMM_NULL) open_add(PARLOT_OPEN_COMM))
WAX(MPI_Comm_free, NOCK, (MPI_Comm *comm), (comm),
    a_comm(&A, comm ? *comm : MPI_COMM_NULL),
    int had_ = comm && *comm != MPI_COMM_NULL,
    if (rc_ == MPI_SUCCESS && had_) open_sub(PARLOT_OPEN_COMM))

/* point to point */
WA(MPI_Send, CK, (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm),
  (buf, count, datatype, dest, tag, comm),
   a_p2p(&A, count, datatype, "dest", dest, tag, comm))
WA(MPI_Ssend, CK, (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm),
  (buf, count, datatype, dest, tag, comm),
   a_p2p(&A, count, datatype, "dest", dest, tag, comm))
WA(MPI_Bsend, CK, (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm),
  (buf, count, datatype, dest, tag, comm),
   a_p2p(&A, count, datatype, "dest", dest, tag, comm))
WA(MPI_Rsend, CK, (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm),
  (buf, count, datatype, dest, tag, comm),
   a_p2p(&A, count, datatype, "dest", dest, tag, comm))
WT(MPI_Recv,
  (void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Status *status),
  (buf, count, datatype, source, tag, comm, status),
   a_p2p(&A, count, datatype, "src", source, tag, comm),
   message_waiting(source, tag, comm))
WAREQ(MPI_Isend, NOCK,
  (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm, MPI_Request *request),
  (buf, count, datatype, dest, tag, comm, request),
   a_p2p(&A, count, datatype, "dest", dest, tag, comm),
   request)
WAREQ(MPI_Issend, NOCK,
  (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm, MPI_Request *request),
  (buf, count, datatype, dest, tag, comm, request),
   a_p2p(&A, count, datatype, "dest", dest, tag, comm),
   request)
WAREQ(MPI_Irecv, NOCK,
  (void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Request *request),
  (buf, count, datatype, source, tag, comm, request),
   a_p2p(&A, count, datatype, "src", source, tag, comm),
   request)
WA(MPI_Sendrecv, CK,
  (const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag, void *recvbuf,
   int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm, MPI_Status *status),
  (sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag, comm, status),
   {
       ab_int(&A, "scount", sendcount); a_type(&A, "stype", sendtype); a_peer(&A, "dest", dest, comm);
       a_tag(&A, "stag", sendtag); ab_int(&A, "rcount", recvcount); a_type(&A, "rtype", recvtype);
       a_peer(&A, "src", source, comm); a_tag(&A, "rtag", recvtag); a_comm(&A, comm);
   })
WA(MPI_Sendrecv_replace, CK,
  (void *buf, int count, MPI_Datatype datatype, int dest, int sendtag, int source, int recvtag,
   MPI_Comm comm, MPI_Status *status),
  (buf, count, datatype, dest, sendtag, source, recvtag, comm, status),
   {
       ab_int(&A, "count", count); a_type(&A, "type", datatype); a_peer(&A, "dest", dest, comm);
       a_tag(&A, "stag", sendtag); a_peer(&A, "src", source, comm); a_tag(&A, "rtag", recvtag);
       a_comm(&A, comm);
   })
WT(MPI_Probe, (int source, int tag, MPI_Comm comm, MPI_Status *status), (source, tag, comm, status),
   { a_peer(&A, "src", source, comm); a_tag(&A, "tag", tag); a_comm(&A, comm); },
   message_waiting(source, tag, comm))
WA(MPI_Iprobe, NOCK, (int source, int tag, MPI_Comm comm, int *flag, MPI_Status *status),
  (source, tag, comm, flag, status),
   { a_peer(&A, "src", source, comm); a_tag(&A, "tag", tag); a_comm(&A, comm); })

/* completion */
WTR(MPI_Wait, (MPI_Request *request, MPI_Status *status), (request, status), (void)0,
    requests_complete(1, request, 1), 1, request)
WTR(MPI_Waitall, (int count, MPI_Request array_of_requests[], MPI_Status *array_of_statuses),
    (count, array_of_requests, array_of_statuses),
    ab_int(&A, "count", count),
    requests_complete(count, array_of_requests, 1), count, array_of_requests)
WTR(MPI_Waitany, (int count, MPI_Request array_of_requests[], int *indx, MPI_Status *status),
    (count, array_of_requests, indx, status),
    ab_int(&A, "count", count),
    requests_complete(count, array_of_requests, 0), count, array_of_requests)
WTR(MPI_Waitsome,
    (int incount, MPI_Request array_of_requests[], int *outcount, int array_of_indices[],
     MPI_Status *array_of_statuses),
    (incount, array_of_requests, outcount, array_of_indices, array_of_statuses),
    ab_int(&A, "count", incount),
    requests_complete(incount, array_of_requests, 0), incount, array_of_requests)
WTEST(MPI_Test, (MPI_Request *request, int *flag, MPI_Status *status), (request, flag, status), (void)0,
      1, request)
WTEST(MPI_Testall, (int count, MPI_Request array_of_requests[], int *flag, MPI_Status *array_of_statuses),
      (count, array_of_requests, flag, array_of_statuses),
      ab_int(&A, "count", count), count, array_of_requests)
WTEST(MPI_Testany, (int count, MPI_Request array_of_requests[], int *indx, int *flag, MPI_Status *status),
      (count, array_of_requests, indx, flag, status),
      ab_int(&A, "count", count), count, array_of_requests)
WTEST(MPI_Testsome,
      (int incount, MPI_Request array_of_requests[], int *outcount, int array_of_indices[],
       MPI_Status *array_of_statuses),
      (incount, array_of_requests, outcount, array_of_indices, array_of_statuses),
      ab_int(&A, "count", incount), incount, array_of_requests)

/* persistent requests: MPI_Start(all) named with what the requests' *_init were named with */
WA(MPI_Start, NOCK, (MPI_Request *request), (request),
   { if (request) a_request(&A, *request); })
WA(MPI_Startall, NOCK, (int count, MPI_Request array_of_requests[]), (count, array_of_requests),
   {
       ab_int(&A, "count", count);
       for (int i_ = 0; array_of_requests && i_ < count; i_++)
           a_request(&A, array_of_requests[i_]);
   })
WAX(MPI_Request_free, NOCK, (MPI_Request *request), (request),
    { if (request) a_request(&A, *request); },
    MPI_Request k_ = request ? *request : MPI_REQUEST_NULL,
    if (rc_ == MPI_SUCCESS && k_ != MPI_REQUEST_NULL) { open_sub(PARLOT_OPEN_REQUEST); req_forget(k_); })

/* collectives */
WA(MPI_Barrier, CK, (MPI_Comm comm), (comm),
   a_comm(&A, comm))
WA(MPI_Bcast, CK, (void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm),
  (buffer, count, datatype, root, comm),
   { ab_int(&A, "count", count); a_type(&A, "type", datatype); a_root(&A, root); a_comm(&A, comm); })
WA(MPI_Reduce, CK,
  (const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm),
  (sendbuf, recvbuf, count, datatype, op, root, comm),
   { a_reduction(&A, sendbuf, count, datatype, op); a_root(&A, root); a_comm(&A, comm); })
WA(MPI_Allreduce, CK,
  (const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm),
  (sendbuf, recvbuf, count, datatype, op, comm),
   { a_reduction(&A, sendbuf, count, datatype, op); a_comm(&A, comm); })
WA(MPI_Gather, CK,
  (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
   MPI_Datatype recvtype, int root, MPI_Comm comm),
  (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm),
   {
       if (!is_inter(comm)) {
           int r_ = at_root(root, comm);
           if (!(r_ && sendbuf == MPI_IN_PLACE)) { ab_int(&A, "scount", sendcount); a_type(&A, "stype", sendtype); }
           else ab_add(&A, "in_place", NULL);
           if (r_) { ab_int(&A, "rcount", recvcount); a_type(&A, "rtype", recvtype); }
       }
       a_root(&A, root); a_comm(&A, comm);
   })
WA(MPI_Gatherv, CK,
  (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
   const int displs[], MPI_Datatype recvtype, int root, MPI_Comm comm),
  (sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm),
   {
       if (!is_inter(comm)) {
           int r_ = at_root(root, comm);
           if (!(r_ && sendbuf == MPI_IN_PLACE)) { ab_int(&A, "scount", sendcount); a_type(&A, "stype", sendtype); }
           else ab_add(&A, "in_place", NULL);
           if (r_) { a_total(&A, "rtotal", recvcounts, comm); a_type(&A, "rtype", recvtype); }
       }
       a_root(&A, root); a_comm(&A, comm);
   })
WA(MPI_Scatter, CK,
  (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
   MPI_Datatype recvtype, int root, MPI_Comm comm),
  (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm),
   {
       if (!is_inter(comm)) {
           int r_ = at_root(root, comm);
           if (r_) { ab_int(&A, "scount", sendcount); a_type(&A, "stype", sendtype); }
           if (!(r_ && recvbuf == MPI_IN_PLACE)) { ab_int(&A, "rcount", recvcount); a_type(&A, "rtype", recvtype); }
           else ab_add(&A, "in_place", NULL);
       }
       a_root(&A, root); a_comm(&A, comm);
   })
WA(MPI_Scatterv, CK,
  (const void *sendbuf, const int sendcounts[], const int displs[], MPI_Datatype sendtype, void *recvbuf,
   int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm),
  (sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm),
   {
       if (!is_inter(comm)) {
           int r_ = at_root(root, comm);
           if (r_) { a_total(&A, "stotal", sendcounts, comm); a_type(&A, "stype", sendtype); }
           if (!(r_ && recvbuf == MPI_IN_PLACE)) { ab_int(&A, "rcount", recvcount); a_type(&A, "rtype", recvtype); }
           else ab_add(&A, "in_place", NULL);
       }
       a_root(&A, root); a_comm(&A, comm);
   })
WA(MPI_Allgather, CK,
  (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
   MPI_Datatype recvtype, MPI_Comm comm),
  (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm),
   {
       a_send_side(&A, sendbuf, sendcount, sendtype);
       ab_int(&A, "rcount", recvcount); a_type(&A, "rtype", recvtype); a_comm(&A, comm);
   })
WA(MPI_Allgatherv, CK,
  (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
   const int displs[], MPI_Datatype recvtype, MPI_Comm comm),
  (sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm),
   {
       a_send_side(&A, sendbuf, sendcount, sendtype);
       a_total(&A, "rtotal", recvcounts, comm); a_type(&A, "rtype", recvtype); a_comm(&A, comm);
   })
WA(MPI_Alltoall, CK,
  (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
   MPI_Datatype recvtype, MPI_Comm comm),
  (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm),
   {
       a_send_side(&A, sendbuf, sendcount, sendtype);
       ab_int(&A, "rcount", recvcount); a_type(&A, "rtype", recvtype); a_comm(&A, comm);
   })
WA(MPI_Alltoallv, CK,
  (const void *sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype, void *recvbuf,
   const int recvcounts[], const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm),
  (sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm),
   {
       if (sendbuf == MPI_IN_PLACE) ab_add(&A, "in_place", NULL);
       else { a_total(&A, "stotal", sendcounts, comm); a_type(&A, "stype", sendtype); }
       a_total(&A, "rtotal", recvcounts, comm); a_type(&A, "rtype", recvtype); a_comm(&A, comm);
   })
WA(MPI_Reduce_scatter, CK,
  (const void *sendbuf, void *recvbuf, const int recvcounts[], MPI_Datatype datatype, MPI_Op op, MPI_Comm comm),
  (sendbuf, recvbuf, recvcounts, datatype, op, comm),
   {
       a_total(&A, "total", recvcounts, comm); a_type(&A, "type", datatype); a_op(&A, op);
       if (sendbuf == MPI_IN_PLACE) ab_add(&A, "in_place", NULL);
       a_comm(&A, comm);
   })
WA(MPI_Reduce_scatter_block, CK,
  (const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm),
  (sendbuf, recvbuf, recvcount, datatype, op, comm),
   { a_reduction(&A, sendbuf, recvcount, datatype, op); a_comm(&A, comm); })
WA(MPI_Scan, CK,
  (const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm),
  (sendbuf, recvbuf, count, datatype, op, comm),
   { a_reduction(&A, sendbuf, count, datatype, op); a_comm(&A, comm); })
WA(MPI_Exscan, CK,
  (const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm),
  (sendbuf, recvbuf, count, datatype, op, comm),
   { a_reduction(&A, sendbuf, count, datatype, op); a_comm(&A, comm); })

/* nonblocking collectives */
WAREQ(MPI_Ibarrier, NOCK, (MPI_Comm comm, MPI_Request *request), (comm, request),
   a_comm(&A, comm), request)
WAREQ(MPI_Ibcast, NOCK, (void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Request *request),
  (buffer, count, datatype, root, comm, request),
   { ab_int(&A, "count", count); a_type(&A, "type", datatype); a_root(&A, root); a_comm(&A, comm); },
   request)
WAREQ(MPI_Ireduce, NOCK,
  (const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm,
   MPI_Request *request),
  (sendbuf, recvbuf, count, datatype, op, root, comm, request),
   { a_reduction(&A, sendbuf, count, datatype, op); a_root(&A, root); a_comm(&A, comm); },
   request)
WAREQ(MPI_Iallreduce, NOCK,
  (const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
   MPI_Request *request),
  (sendbuf, recvbuf, count, datatype, op, comm, request),
   { a_reduction(&A, sendbuf, count, datatype, op); a_comm(&A, comm); },
   request)

/* ------------------------------------------------------------------ every other MPI function
 *
 * Written by gen_mpi_wrappers.py from the mpi.h this file is compiled against (make -C pin:
 * -DPARLOT_MPI_GEN and the directory of parlot_mpi_gen.c on the include path); without it
 * (no Python at build time) only the wrappers above exist. */
#ifdef PARLOT_MPI_GEN
#include "parlot_mpi_gen.c"
#endif
