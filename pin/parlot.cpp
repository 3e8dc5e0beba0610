/*
 * parlot.cpp -- a ParLOT-compatible Pin tool: whole-program per-thread call traces of the main
 * image (ParLOT(M), default) or of all images (ParLOT(A), -a 1), in the same files as
 * libparlot.so writes (see README.md), with the same compression (parlot_codec.h).
 *
 *   make -C pin pintool PIN_ROOT=/path/to/pin-3.x
 *   mpiexec -n 8 $PIN_ROOT/pin -t pin/build/obj-intel64/parlot.so -o traces/run1 -- ./app args
 *
 * Knobs: -o DIR (default $PARLOT_DIR or .), -p PREFIX (default parlotm.<host> / parlota.<host>),
 * -a 0|1 (all images).  The MPI rank comes from the launcher's environment (PMI_RANK,
 * PMIX_RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID) and goes to <prefix>.<pid>.rank.
 *
 * Every routine of a traced image gets a 16-bit id when the image is loaded (ids in load
 * order, one .info block per image: "+", image path, one routine name per line).  An entry
 * emits the id, a return (a RET instruction of the routine) emits 0.  ParLOT's stack-pointer
 * call-stack correction keeps the stream well nested when Pin misses an exit: each frame
 * keeps the stack pointer of its entry (the address of its return address); an entry whose
 * stack pointer is at or above the top frame's closes that frame first (it must have
 * returned), a return closes the frames below its own, and a return that matches no open
 * frame is dropped.
 *
 * Files are made complete (parlot_checkpoint: buffered groups + trailer) when the buffer
 * fills, at the entry of routines named MPI_* (the calls a rank may hang in), at thread end,
 * at exit and on the signals that end a process, so a killed or hung rank leaves complete
 * files.  Pin cannot be downloaded on the machines this project is developed on: this tool
 * is kept buildable against a Pin 3.x kit but is not run by the tests (the compression code
 * it shares with libparlot.so is).
 */
#include "pin.H"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "parlot_codec.h"

KNOB<std::string> KnobDir(KNOB_MODE_WRITEONCE, "pintool", "o", "", "output directory (default $PARLOT_DIR, else .)");
KNOB<std::string> KnobPrefix(KNOB_MODE_WRITEONCE, "pintool", "p", "", "file prefix (default parlotm.<host>, parlota.<host> with -a 1)");
KNOB<BOOL> KnobAll(KNOB_MODE_WRITEONCE, "pintool", "a", "0", "trace all images (ParLOT(A)); default: the main image (ParLOT(M))");

static const UINT32 kMaxThreads = 4096;
static const UINT32 kMaxIds = 65535;

struct Frame {
    ADDRINT sp;
};

struct ThreadData {
    volatile INT32 lock;
    int fd;
    BOOL dead;
    parlot_file file;
    std::vector<Frame> stack;
    parlot_enc enc;
};

struct Image {
    std::string path;
    std::vector<std::string> names;
};

static ThreadData *volatile g_threads[kMaxThreads];
static std::vector<Image> g_images;
static UINT32 g_nids = 0;             /* ids 1..g_nids given */
static PIN_LOCK g_images_lock;
static std::string g_dir, g_prefix;
static INT32 g_pid;
static volatile INT32 g_sync;
static volatile BOOL g_final = FALSE;

/* ------------------------------------------------------------------ helpers */

static void SpinLock(volatile INT32 *l)
{
    while (__sync_lock_test_and_set(l, 1))
        while (*l)
            PIN_Yield();
}

static void SpinUnlock(volatile INT32 *l) { __sync_lock_release(l); }

static std::string PathOf(const char *suffix)
{
    char buf[64];
    snprintf(buf, sizeof buf, ".%d.%s", (int)g_pid, suffix);
    return g_dir + "/" + g_prefix + buf;
}

static int FdPwrite(void *ctx, const void *data, uint32_t n, uint64_t off)
{
    int fd = *(int *)ctx;
    const char *p = (const char *)data;
    while (n) {
        ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (uint32_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

static int FdTruncate(void *ctx, uint64_t len) { return ftruncate(*(int *)ctx, (off_t)len); }

static void Checkpoint(ThreadData *td)
{
    if (td->dead || td->fd < 0)
        return;
    if (parlot_checkpoint(&td->enc, &td->file) != 0) {
        td->dead = TRUE;
        fprintf(stderr, "parlot: cannot write a trace file: %s\n", strerror(errno));
    }
}

static void WriteInfo()
{
    std::string path = PathOf("info"), tmp = path + ".tmp";
    FILE *f = fopen(tmp.c_str(), "w");
    if (!f)
        return;
    for (size_t i = 0; i < g_images.size(); i++) {
        fprintf(f, "+\n%s\n", g_images[i].path.c_str());
        for (size_t k = 0; k < g_images[i].names.size(); k++)
            fprintf(f, "%s\n", g_images[i].names[k].c_str());
    }
    if (fclose(f) == 0)
        rename(tmp.c_str(), path.c_str());
}

static void WriteRank()
{
    static const char *vars[] = {"PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", NULL};
    for (int i = 0; vars[i]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) {
            FILE *f = fopen(PathOf("rank").c_str(), "w");
            if (f) {
                fprintf(f, "%d\n", atoi(v));
                fclose(f);
            }
            return;
        }
    }
}

/* Every thread's file complete, .info current.  Takes every thread's lock: no thread is
 * then inside an analysis routine. */
static void SyncAll(BOOL final)
{
    SpinLock(&g_sync);
    if (!g_final) {
        PIN_GetLock(&g_images_lock, 1);
        std::vector<ThreadData *> held;
        for (UINT32 i = 0; i < kMaxThreads; i++) {
            ThreadData *td = g_threads[i];
            if (!td)
                continue;
            SpinLock(&td->lock);
            held.push_back(td);
            Checkpoint(td);
        }
        WriteInfo();
        if (final)
            g_final = TRUE;
        for (size_t i = 0; i < held.size(); i++)
            SpinUnlock(&held[i]->lock);
        PIN_ReleaseLock(&g_images_lock);
    }
    SpinUnlock(&g_sync);
}

/* ------------------------------------------------------------------ analysis routines */

static inline void Put(ThreadData *td, uint16_t v)
{
    if (parlot_enc_put(&td->enc, v))
        Checkpoint(td);
}

static VOID OnEnter(THREADID tid, UINT32 id, ADDRINT sp, UINT32 ckpt)
{
    ThreadData *td = tid < kMaxThreads ? g_threads[tid] : NULL;
    if (!td)
        return;
    SpinLock(&td->lock);
    if (!td->dead && !g_final) {
        /* call-stack correction: a frame at or below this entry's stack pointer has returned */
        while (!td->stack.empty() && td->stack.back().sp <= sp) {
            td->stack.pop_back();
            Put(td, 0);
        }
        Frame f = {sp};
        td->stack.push_back(f);
        Put(td, (uint16_t)id);
        if (ckpt)
            Checkpoint(td);
    }
    SpinUnlock(&td->lock);
}

static VOID OnExit(THREADID tid, ADDRINT sp)
{
    ThreadData *td = tid < kMaxThreads ? g_threads[tid] : NULL;
    if (!td)
        return;
    SpinLock(&td->lock);
    if (!td->dead && !g_final) {
        while (!td->stack.empty() && td->stack.back().sp < sp) {   /* deeper frames: missed exits */
            td->stack.pop_back();
            Put(td, 0);
        }
        if (!td->stack.empty() && td->stack.back().sp == sp) {
            td->stack.pop_back();
            Put(td, 0);
        }
    }
    SpinUnlock(&td->lock);
}

/* ------------------------------------------------------------------ instrumentation */

static VOID ImageLoad(IMG img, VOID *v)
{
    if (!KnobAll.Value() && !IMG_IsMainExecutable(img))
        return;
    PIN_GetLock(&g_images_lock, 1);
    Image im;
    im.path = IMG_Name(img);
    g_images.push_back(im);
    Image &cur = g_images.back();
    for (SEC sec = IMG_SecHead(img); SEC_Valid(sec); sec = SEC_Next(sec)) {
        for (RTN rtn = SEC_RtnHead(sec); RTN_Valid(rtn); rtn = RTN_Next(rtn)) {
            if (g_nids >= kMaxIds)
                break;
            std::string name = RTN_Name(rtn);
            for (size_t k = 0; k < name.size(); k++)
                if (name[k] == '\n' || name[k] == '\r')
                    name[k] = ' ';
            UINT32 id = ++g_nids;
            cur.names.push_back(name);
            UINT32 ckpt = name.compare(0, 4, "MPI_") == 0 || name.compare(0, 5, "PMPI_") == 0;
            RTN_Open(rtn);
            RTN_InsertCall(rtn, IPOINT_BEFORE, (AFUNPTR)OnEnter, IARG_THREAD_ID, IARG_UINT32, id,
                           IARG_REG_VALUE, REG_STACK_PTR, IARG_UINT32, ckpt, IARG_END);
            for (INS ins = RTN_InsHead(rtn); INS_Valid(ins); ins = INS_Next(ins))
                if (INS_IsRet(ins))
                    INS_InsertCall(ins, IPOINT_BEFORE, (AFUNPTR)OnExit, IARG_THREAD_ID,
                                   IARG_REG_VALUE, REG_STACK_PTR, IARG_END);
            RTN_Close(rtn);
        }
    }
    WriteInfo();
    PIN_ReleaseLock(&g_images_lock);
}

static VOID ThreadStart(THREADID tid, CONTEXT *ctxt, INT32 flags, VOID *v)
{
    if (tid >= kMaxThreads)
        return;
    ThreadData *td = new ThreadData();
    td->lock = 0;
    td->dead = FALSE;
    parlot_enc_init(&td->enc);
    memset(&td->file, 0, sizeof td->file);
    char num[16];
    snprintf(num, sizeof num, "%u", (unsigned)tid);
    td->fd = open(PathOf(num).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (td->fd < 0) {
        fprintf(stderr, "parlot: cannot create %s: %s; thread %u is not traced\n", PathOf(num).c_str(),
                strerror(errno), (unsigned)tid);
        td->dead = TRUE;
    }
    td->file.pwrite_fn = FdPwrite;
    td->file.truncate_fn = FdTruncate;
    td->file.ctx = &td->fd;
    Checkpoint(td);
    g_threads[tid] = td;
}

static VOID ThreadFini(THREADID tid, const CONTEXT *ctxt, INT32 code, VOID *v)
{
    ThreadData *td = tid < kMaxThreads ? g_threads[tid] : NULL;
    if (!td)
        return;
    SpinLock(&td->lock);
    Checkpoint(td);
    td->dead = TRUE;
    if (td->fd >= 0)
        close(td->fd);
    td->fd = -1;
    SpinUnlock(&td->lock);
}

static VOID Fini(INT32 code, VOID *v) { SyncAll(TRUE); }

/* A signal that may end the process: complete every file, then let the program have it. */
static BOOL OnSignal(THREADID tid, INT32 sig, CONTEXT *ctxt, BOOL hasHandler, const EXCEPTION_INFO *info, VOID *v)
{
    SyncAll(!hasHandler);
    return TRUE;
}

static INT32 Usage()
{
    fprintf(stderr, "parlot: ParLOT call tracer\n%s\n", KNOB_BASE::StringKnobSummary().c_str());
    return -1;
}

int main(int argc, char *argv[])
{
    PIN_InitSymbols();
    if (PIN_Init(argc, argv))
        return Usage();
    PIN_InitLock(&g_images_lock);
    g_pid = PIN_GetPid();
    const char *env_dir = getenv("PARLOT_DIR");
    g_dir = !KnobDir.Value().empty() ? KnobDir.Value() : (env_dir && *env_dir ? env_dir : ".");
    if (!KnobPrefix.Value().empty())
        g_prefix = KnobPrefix.Value();
    else {
        char host[128] = "localhost";
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = '\0';
        g_prefix = std::string(KnobAll.Value() ? "parlota." : "parlotm.") + host;
    }
    WriteRank();
    IMG_AddInstrumentFunction(ImageLoad, 0);
    PIN_AddThreadStartFunction(ThreadStart, 0);
    PIN_AddThreadFiniFunction(ThreadFini, 0);
    PIN_AddFiniFunction(Fini, 0);
    static const int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL,
                               SIGALRM, SIGXCPU, 0};
    for (int i = 0; sigs[i]; i++)
        PIN_InterceptSignal(sigs[i], OnSignal, 0);
    PIN_StartProgram();
    return 0;
}
