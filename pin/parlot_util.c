/*
 * parlot_util.c -- async-signal-safe helpers of the tracer's core: text formatted by hand
 * into a caller's buffer (no printf, no allocation, no locale), write loops, the
 * one-message-per-job `say`, errno texts, the paths of the run's files.
 *
 * Everything here may run in a signal handler (the end record, completing the files of a
 * process that got SIGTERM or SIGSEGV): only read-only data, the caller's buffers, small
 * stack chunks and write(2)/pwrite(2).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "parlot_core.h"

/* ------------------------------------------------------------------ formatting */

void pb_init(pbuf *b, char *s, size_t cap)
{
    b->s = s;
    b->cap = cap;
    b->n = 0;
}

void pb_put(pbuf *b, const char *p, size_t l)
{
    if (b->n > b->cap)
        return;
    if (l > b->cap - b->n) {
        memcpy(b->s + b->n, p, b->cap - b->n);
        b->n = b->cap + 1;        /* full: something was dropped */
        return;
    }
    memcpy(b->s + b->n, p, l);
    b->n += l;
}

void pb_str(pbuf *b, const char *p)
{
    pb_put(b, p, strlen(p));
}

void pb_unum(pbuf *b, unsigned long long u)
{
    char num[24], *e = num + sizeof num, *p = e;
    do
        *--p = (char)('0' + u % 10);
    while ((u /= 10) != 0);
    pb_put(b, p, (size_t)(e - p));
}

void pb_num(pbuf *b, long long v)
{
    if (v < 0) {
        pb_put(b, "-", 1);
        pb_unum(b, 0ull - (unsigned long long)v);
    } else
        pb_unum(b, (unsigned long long)v);
}

void pb_hex(pbuf *b, unsigned long long u)
{
    static const char digits[] = "0123456789abcdef";
    char num[20], *e = num + sizeof num, *p = e;
    do
        *--p = digits[u & 15];
    while ((u >>= 4) != 0);
    pb_put(b, p, (size_t)(e - p));
}

int pb_full(const pbuf *b)
{
    return b->n > b->cap;
}

const char *pb_cstr(pbuf *b)
{
    if (b->cap == 0)
        return "";
    size_t n = b->n < b->cap ? b->n : b->cap - 1;
    b->s[n] = '\0';
    return b->s;
}

const char *num_text(char num[24], long long v)
{
    pbuf b;
    pb_init(&b, num, 24);
    pb_num(&b, v);
    return pb_cstr(&b);
}

/* strerror is neither async-signal-safe nor free of locale: glibc's texts of the errors a
 * tracer meets, else "error N" */
const char *err_text(int err, char num[24])
{
    switch (err) {
    case EPERM: return "Operation not permitted";
    case ENOENT: return "No such file or directory";
    case EINTR: return "Interrupted system call";
    case EIO: return "Input/output error";
    case ENXIO: return "No such device or address";
    case EBADF: return "Bad file descriptor";
    case EAGAIN: return "Resource temporarily unavailable";
    case ENOMEM: return "Cannot allocate memory";
    case EACCES: return "Permission denied";
    case EFAULT: return "Bad address";
    case EBUSY: return "Device or resource busy";
    case EEXIST: return "File exists";
    case ENODEV: return "No such device";
    case ENOTDIR: return "Not a directory";
    case EISDIR: return "Is a directory";
    case EINVAL: return "Invalid argument";
    case ENFILE: return "Too many open files in system";
    case EMFILE: return "Too many open files";
    case ETXTBSY: return "Text file busy";
    case EFBIG: return "File too large";
    case ENOSPC: return "No space left on device";
    case ESPIPE: return "Illegal seek";
    case EROFS: return "Read-only file system";
    case EMLINK: return "Too many links";
    case EPIPE: return "Broken pipe";
    case ENAMETOOLONG: return "File name too long";
    case ENOSYS: return "Function not implemented";
    case ELOOP: return "Too many levels of symbolic links";
    case EOVERFLOW: return "Value too large for defined data type";
    case ENOTSUP: return "Operation not supported";
    case ESTALE: return "Stale file handle";
    case EDQUOT: return "Disk quota exceeded";
    default: break;
    }
    pbuf b;
    pb_init(&b, num, 24);
    pb_str(&b, "error ");
    pb_num(&b, err);
    return pb_cstr(&b);
}

/* ------------------------------------------------------------------ messages */

/* One message per job: only the process of rank 0 (or an unranked one) speaks.  The rank
 * is the launcher's, read once by the constructor (getenv is not for signal handlers).
 * The line goes out in 256-byte chunks (one write for any usual message): no large stack
 * buffer, whatever stack a signal handler runs on. */
void say(const char *first, ...)
{
    if (g_quiet || g_env_rank > 0)
        return;
    char chunk[256];
    size_t n = 0, total = 0;
    va_list ap;
    va_start(ap, first);
    for (const char *s = first; s; s = va_arg(ap, const char *)) {
        for (; *s && total < 4000; s++, total++) {
            if (n == sizeof chunk) {
                if (write_all(2, chunk, n) != 0)
                    break;
                n = 0;
            }
            chunk[n++] = (*s == '\n') ? ' ' : *s;
        }
    }
    va_end(ap);
    if (n == sizeof chunk) {
        write_all(2, chunk, n);
        n = 0;
    }
    chunk[n++] = '\n';
    write_all(2, chunk, n);
}

/* ------------------------------------------------------------------ writes, paths */

/* every byte of p, retried on EINTR: at the file position (off < 0) or at off */
static int put_all(int fd, const void *p, size_t n, off_t off)
{
    const char *c = (const char *)p;
    while (n) {
        ssize_t w = off < 0 ? write(fd, c, n) : pwrite(fd, c, n, off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        c += w;
        n -= (size_t)w;
        if (off >= 0)
            off += w;
    }
    return 0;
}

int write_all(int fd, const void *p, size_t n)
{
    return put_all(fd, p, n, -1);
}

int pwrite_all(int fd, const void *p, size_t n, off_t off)
{
    return put_all(fd, p, n, off);
}

int is_main_thread(void)
{
    return (pid_t)syscall(SYS_gettid) == getpid();
}

/* <dir>/[.]<prefix>.<pid>.<suffix>: a run file's name, hidden for a temporary one */
static void put_run_name(pbuf *b, const char *suffix, int hidden)
{
    pb_str(b, g_dir);
    pb_str(b, hidden ? "/." : "/");
    pb_str(b, g_prefix);
    pb_put(b, ".", 1);
    pb_num(b, g_pid);
    pb_put(b, ".", 1);
    pb_str(b, suffix);
}

static int path_done(pbuf *b, size_t n)
{
    int ok = b->n < n;
    pb_cstr(b);
    return ok ? 0 : -1;
}

int path_of(char *out, size_t n, const char *suffix)
{
    pbuf b;
    pb_init(&b, out, n);
    put_run_name(&b, suffix, 0);
    return path_done(&b, n);
}

/* a hidden temporary name per writer, never taken for a trace */
int tmp_path_of(char *out, size_t n, const char *suffix)
{
    pbuf b;
    pb_init(&b, out, n);
    put_run_name(&b, suffix, 1);
    pb_put(&b, ".", 1);
    pb_num(&b, (long)syscall(SYS_gettid));
    pb_str(&b, ".tmp");
    return path_done(&b, n);
}

/* ------------------------------------------------------------------ membarrier */

int g_asym;

/* Register for MEMBARRIER_CMD_PRIVATE_EXPEDITED (the constructor, once): on success the
 * owners of thread states take them without a locked instruction (own_lock). */
void parlot_fence_setup(void)
{
#ifdef SYS_membarrier
    long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    if (cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
        syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0)
        g_asym = 1;
#endif
}

/* A full memory barrier on every running thread of the process (a system call: async-signal-
 * safe).  Once registered it does not fail (the kernel refuses only unregistered or unknown
 * commands); the local fence after a failure would not order the other threads. */
void parlot_fence_all(void)
{
#ifdef SYS_membarrier
    if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0)
        return;
#endif
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
