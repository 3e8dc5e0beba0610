/*
 * parlot_setup.c -- set-up and filters: the constructor (the environment, the output
 * directory, the file prefix, handlers, the first .info) and destructor, the trace-time
 * filters (PARLOT_EXCLUDE, PARLOT_INCLUDE, PARLOT_DEPTH) and the leaf filter
 * (PARLOT_LEAVES: a list of functions counted, not recorded; PARLOT_LEAF_PROBE: find them;
 * PARLOT_AUTO_LEAVES: the automatic leaves' threshold, parlot_leaves.c),
 * the one warning about an unusable directory, dlsym of the real functions.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "parlot_core.h"

volatile int parlot_warn_pending = 0;     /* the output directory is unusable: say so once */
int g_warn_errno;
volatile int g_finalized = 0;
int g_pid;
char g_dir[PATH_MAX];
char g_prefix[256];
char g_exe[PATH_MAX];
int g_quiet;
int g_env_rank = -1;
pthread_key_t g_key;

int g_filtering;
int g_has_exclude, g_has_include;
static regex_t g_exclude_re, g_include_re;
uint32_t g_max_depth;
int g_has_leaves;
unsigned long g_leaf_probe;
unsigned long g_auto_leaves;

/* the launcher's rank (read once, by the constructor: messages and the first .rank) */
int env_rank(void)
{
    static const char *vars[] = {"PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID",
                                 "MV2_COMM_WORLD_RANK", "PALS_RANKID", NULL};
    for (int i = 0; vars[i]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) {
            char *end;
            long r = strtol(v, &end, 10);
            if (*end == '\0' && r >= 0 && r < INT_MAX)
                return (int)r;
        }
    }
    return -1;
}

void parlot_warn_once(void)
{
    if (__atomic_exchange_n(&parlot_warn_pending, 0, __ATOMIC_ACQ_REL))
    {
        char en[24];
        say("parlot: cannot write traces to '", g_dir, "': ", err_text(g_warn_errno, en), "; running untraced",
            NULL);
    }
}

void *parlot_real(const char *name)
{
    void *p = dlsym(RTLD_NEXT, name);
    if (!p)
        p = dlsym(RTLD_DEFAULT, name);
    if (!p) {
        char msg[256];
        int n = snprintf(msg, sizeof msg, "parlot: cannot find %s in the libraries of this program\n", name);
        ssize_t w = write(2, msg, (size_t)n);
        (void)w;
        _exit(127);
    }
    return p;
}

static NI int make_dirs(const char *dir)
{
    char tmp[PATH_MAX];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof tmp)
        return (errno = ENAMETOOLONG), -1;
    memcpy(tmp, dir, n + 1);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

static NI int probe_dir(const char *dir)
{
    char path[PATH_MAX + 64];
    if (make_dirs(dir) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/.parlot-probe.%d", dir, (int)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    int ok = write(fd, "x", 1) == 1;
    int err = errno;
    close(fd);
    unlink(path);
    if (!ok)
        return (errno = err ? err : EIO), -1;
    return 0;
}

/* ------------------------------------------------------------------ the leaf filter */

/* PARLOT_LEAVES=PATH (parlot-run -l): a file of function names, one a line ('#' starts a
 * comment line), or a directory whose *.leaves files are read (a probe run's directory:
 * PARLOT_LEAF_PROBE=N writes <prefix>.<pid>.leaves there).  A listed function entered
 * through -finstrument-functions' hook is counted, never recorded, in every thread: a rule
 * by name, the same in every run that is given the same list, so two runs never differ by
 * what the filter took out.  MPI and OpenMP events are never left out; a call made inside a
 * listed function is still recorded (under the listed function's caller). */
#define LEAF_BUCKETS 4096u
typedef struct leafname {
    struct leafname *next;
    uint32_t hash;
    char name[];
} leafname;
static leafname *g_leafset[LEAF_BUCKETS];

static NI uint32_t name_hash(const char *s, size_t n)
{
    uint32_t h = 2166136261u;     /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 16777619u;
    }
    return h;
}

static NI int leaf_listed(const char *name)
{
    size_t n = strlen(name);
    uint32_t h = name_hash(name, n);
    for (const leafname *e = g_leafset[h & (LEAF_BUCKETS - 1)]; e; e = e->next)
        if (e->hash == h && strcmp(e->name, name) == 0)
            return 1;
    return 0;
}

static NI void leaf_add(const char *name, size_t n)
{
    while (n && (name[n - 1] == '\r' || name[n - 1] == '\n'))
        n--;
    if (n == 0 || name[0] == '#')
        return;
    const char *tab = memrchr(name, '\t', n);      /* a .counted line: calls, counted, name */
    if (tab) {
        n -= (size_t)(tab + 1 - name);
        name = tab + 1;
        if (n == 0)
            return;
    }
    uint32_t h = name_hash(name, n);
    for (const leafname *e = g_leafset[h & (LEAF_BUCKETS - 1)]; e; e = e->next)
        if (e->hash == h && strlen(e->name) == n && memcmp(e->name, name, n) == 0)
            return;
    leafname *e = (leafname *)malloc(sizeof(leafname) + n + 1);
    if (!e)
        return;
    memcpy(e->name, name, n);
    e->name[n] = '\0';
    e->hash = h;
    e->next = g_leafset[h & (LEAF_BUCKETS - 1)];
    g_leafset[h & (LEAF_BUCKETS - 1)] = e;
}

/* the names of one list file; -1 when it cannot be read */
static NI int leaf_read(const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) >= 0)
        leaf_add(line, (size_t)n);
    free(line);
    int bad = ferror(f);
    fclose(f);
    return bad ? -1 : 0;
}

static NI int setup_leaves(void)
{
    const char *v;
    /* automatic leaves: on by default (PARLOT_AUTO_LEAVES=N sets the threshold, 0 turns them
     * off); off by default under a leaf list or the probe, which decide by themselves */
    int explicit_auto = 0;
    g_auto_leaves = AUTO_LEAVES_DEFAULT;
    if ((v = getenv("PARLOT_AUTO_LEAVES")) && *v) {
        char *end;
        long n = strtol(v, &end, 10);
        if (*end != '\0' || n < 0) {
            say("parlot: PARLOT_AUTO_LEAVES='", v, "' is not a number (0: record every call); running untraced",
                NULL);
            return 0;
        }
        g_auto_leaves = (unsigned long)n;
        explicit_auto = 1;
    }
    if (!explicit_auto && (((v = getenv("PARLOT_LEAF_PROBE")) && *v) || ((v = getenv("PARLOT_LEAVES")) && *v)))
        g_auto_leaves = 0;
    if ((v = getenv("PARLOT_LEAF_PROBE")) && *v) {
        char *end;
        long n = strtol(v, &end, 10);
        if (*end != '\0' || n <= 0) {
            say("parlot: PARLOT_LEAF_PROBE='", v, "' is not a positive number; running untraced", NULL);
            return 0;
        }
        g_leaf_probe = (unsigned long)n;
    }
    if (!(v = getenv("PARLOT_LEAVES")) || !*v)
        return 1;
    struct stat st;
    int files = 0, err = 0;
    if (stat(v, &st) != 0)
        err = errno;
    else if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(v);
        struct dirent *de;
        if (!d)
            err = errno;
        while (d && (de = readdir(d)) != NULL) {
            size_t l = strlen(de->d_name);
            if (de->d_name[0] == '.' || l < 8 || strcmp(de->d_name + l - 7, ".leaves") != 0)
                continue;
            char path[PATH_MAX];
            if (snprintf(path, sizeof path, "%s/%s", v, de->d_name) >= (int)sizeof path)
                continue;
            if (leaf_read(path) != 0) {
                err = errno ? errno : EIO;
                break;
            }
            files++;
        }
        if (d)
            closedir(d);
        if (!err && files == 0) {
            say("parlot: PARLOT_LEAVES='", v, "' is a directory without a *.leaves file (a run traced with "
                "PARLOT_LEAF_PROBE, parlot-run -P); running untraced", NULL);
            return 0;
        }
    } else if (leaf_read(v) != 0)
        err = errno ? errno : EIO;
    if (err) {
        char en[24];
        say("parlot: cannot read the leaf list PARLOT_LEAVES='", v, "': ", err_text(err, en), "; running untraced",
            NULL);
        return 0;
    }
    g_has_leaves = 1;
    return 1;
}

/* What the filters say about a function's name (under the name table's mutex). */
int parlot_name_matches(const char *name, int *exclude, int *include, int *leaf)
{
    *exclude = g_has_exclude && regexec(&g_exclude_re, name, 0, NULL, 0) == 0;
    *include = g_has_include && regexec(&g_include_re, name, 0, NULL, 0) == 0;
    *leaf = g_has_leaves && leaf_listed(name);
    return *exclude || *include || *leaf;
}

/* PARLOT_EXCLUDE / PARLOT_INCLUDE (POSIX extended regular expressions, matched anywhere in a
 * name) and PARLOT_DEPTH (a positive number).  Returns 0, after one message, when one is
 * malformed. */
static NI int setup_filters(void)
{
    static const char *vars[2] = {"PARLOT_EXCLUDE", "PARLOT_INCLUDE"};
    regex_t *res[2] = {&g_exclude_re, &g_include_re};
    int *have[2] = {&g_has_exclude, &g_has_include};
    const char *v;
    for (int i = 0; i < 2; i++) {
        if (!(v = getenv(vars[i])) || !*v)
            continue;
        int rc = regcomp(res[i], v, REG_EXTENDED | REG_NOSUB);
        if (rc != 0) {
            char why[256];
            regerror(rc, res[i], why, sizeof why);
            say("parlot: ", vars[i], "='", v, "' is not a valid extended regular expression (", why,
                "); running untraced", NULL);
            return 0;
        }
        *have[i] = 1;
    }
    if ((v = getenv("PARLOT_DEPTH")) && *v) {
        char *end;
        long d = strtol(v, &end, 10);
        if (*end != '\0' || d <= 0 || d > 1000000) {
            say("parlot: PARLOT_DEPTH='", v, "' is not a positive number; running untraced", NULL);
            return 0;
        }
        g_max_depth = (uint32_t)d;
    }
    g_filtering = g_has_exclude || g_has_include || g_max_depth;
    return setup_leaves();
}

__attribute__((constructor, no_instrument_function)) static void parlot_init(void)
{
    const char *v;
    g_pid = getpid();
    g_env_rank = env_rank();
    g_quiet = (v = getenv("PARLOT_QUIET")) && *v && strcmp(v, "0") != 0;
    if ((v = getenv("PARLOT_FLUSH_MS")) && *v)
        g_flush_ms = atoi(v);
    if ((v = getenv("PARLOT_DISABLE")) && *v && strcmp(v, "0") != 0)
        return;
    /* MPI arguments in event names: on unless PARLOT_MPI_ARGS=0 (parlot-run -A) */
    parlot_mpi_args = PARLOT_ARGS_REL;
    if ((v = getenv("PARLOT_MPI_ARGS")) && *v)
        parlot_mpi_args = strcmp(v, "0") == 0 ? 0 : strcmp(v, "abs") == 0 ? PARLOT_ARGS_ABS : PARLOT_ARGS_REL;
    if ((v = getenv("PARLOT_MPI_ARGS_MAX")) && *v) {
        long m = strtol(v, NULL, 10);
        g_ann_max = m < 0 ? 0u : m > 60000 ? 60000u : (unsigned)m;
    }
    /* parlot-run names the process it starts; others (children, shells) stay untraced */
    if ((v = getenv("PARLOT_PID")) && *v && atoi(v) != g_pid)
        return;
    if ((v = getenv("PARLOT_EXECED")) && *v && atoi(v) == g_pid)
        return;                   /* an exec of a traced process: its files are final */
    if (!setup_filters())
        return;                   /* said why: run untraced rather than trace what was not asked */
    v = getenv("PARLOT_DIR");
    snprintf(g_dir, sizeof g_dir, "%s", v && *v ? v : ".");
    size_t dl = strlen(g_dir);
    while (dl > 1 && g_dir[dl - 1] == '/')
        g_dir[--dl] = '\0';
    if (probe_dir(g_dir) != 0) {
        /* said by the first process that would record something (not by launchers) */
        g_warn_errno = errno;
        parlot_warn_pending = 1;
        return;
    }
    if ((v = getenv("PARLOT_PREFIX")) && *v && !strchr(v, '/'))
        snprintf(g_prefix, sizeof g_prefix, "%s", v);
    else {
        char host[128] = "localhost";
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = '\0';
        char *dot = strchr(host, '.');
        if (dot)
            *dot = '\0';
        for (char *c = host; *c; c++)
            if (*c == '/' || *c == ' ')
                *c = '_';
        snprintf(g_prefix, sizeof g_prefix, "parlot.%s", host);
    }
    ssize_t n = readlink("/proc/self/exe", g_exe, sizeof g_exe - 1);
    g_exe[n > 0 ? n : 0] = '\0';
    if (n <= 0)
        snprintf(g_exe, sizeof g_exe, "main");
    if (pthread_key_create(&g_key, thread_end) != 0)
        return;
    /* before any thread records: own_lock's protocol is fixed (PARLOT_MEMBARRIER=0: the
     * atomic exchange, for the tests of that path) */
    if (!(v = getenv("PARLOT_MEMBARRIER")) || strcmp(v, "0") != 0)
        parlot_fence_setup();
    pthread_atfork(NULL, NULL, at_fork_child);
    write_info_locked();          /* a .info exists as soon as any trace file does */
    setup_signals();
    on_exit(on_exit_handler, NULL);   /* the end record and final files, with the exit status */
    __atomic_store_n(&parlot_on, 1, __ATOMIC_RELEASE);
}

__attribute__((destructor, no_instrument_function)) static void parlot_fini(void)
{
    write_leaf_probe();
    parlot_sync_all(1);
}

