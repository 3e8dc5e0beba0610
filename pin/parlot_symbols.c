/*
 * parlot_symbols.c -- the names of the program's functions, from the ELF symbol tables of
 * the object that holds each one (.symtab, else .dynsym; static functions included), found
 * with dladdr1 and the object's load bias (PIE executables and shared libraries resolve);
 * C++ names demangled with the program's own __cxa_demangle.  Called under the name table's
 * mutex, once per function and process, never from a signal handler.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "parlot_core.h"

typedef struct psym {
    uintptr_t value, size;
    const char *name;
    int rank;                     /* preference among aliases: lower is better */
} psym;

typedef struct pobj {
    const void *lm;               /* link_map of the object */
    psym *syms;
    size_t n;
} pobj;

static pobj g_objs[MAX_OBJS];
static int g_nobjs;

static NI int sym_cmp(const void *a, const void *b)
{
    const psym *x = (const psym *)a, *y = (const psym *)b;
    if (x->value != y->value)
        return x->value < y->value ? -1 : 1;
    if (x->rank != y->rank)
        return x->rank - y->rank;
    return strcmp(x->name, y->name);
}

/* Function symbols of an ELF file (.symtab, else .dynsym).  The mapping stays for the
 * process's lifetime: the names point into it. */
static NI void load_syms(pobj *o, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
        close(fd);
        return;
    }
    size_t size = (size_t)st.st_size;
    const uint8_t *map = (const uint8_t *)mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)map;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shoff == 0 ||
        eh->e_shoff + (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr) > size)
        goto fail;
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(map + eh->e_shoff);
    int pick = -1;
    for (int pass = 0; pass < 2 && pick < 0; pass++)
        for (int i = 0; i < eh->e_shnum; i++)
            if (sh[i].sh_type == (pass == 0 ? SHT_SYMTAB : SHT_DYNSYM)) {
                pick = i;
                break;
            }
    if (pick < 0)
        goto fail;
    const Elf64_Shdr *ss = &sh[pick];
    if (ss->sh_link >= eh->e_shnum || ss->sh_offset + ss->sh_size > size)
        goto fail;
    const Elf64_Shdr *strs = &sh[ss->sh_link];
    if (strs->sh_offset + strs->sh_size > size || strs->sh_size == 0)
        goto fail;
    const Elf64_Sym *sym = (const Elf64_Sym *)(map + ss->sh_offset);
    const char *str = (const char *)(map + strs->sh_offset);
    size_t nsym = ss->sh_size / sizeof(Elf64_Sym), nf = 0;
    psym *out = (psym *)malloc(sizeof(psym) * (nsym ? nsym : 1));
    if (!out)
        goto fail;
    for (size_t i = 0; i < nsym; i++) {
        int type = ELF64_ST_TYPE(sym[i].st_info), bind = ELF64_ST_BIND(sym[i].st_info);
        if ((type != STT_FUNC && type != STT_GNU_IFUNC) || sym[i].st_shndx == SHN_UNDEF ||
            sym[i].st_value == 0 || sym[i].st_name >= strs->sh_size)
            continue;
        const char *nm = str + sym[i].st_name;
        if (!memchr(nm, '\0', strs->sh_size - sym[i].st_name) || !*nm)
            continue;
        out[nf].value = sym[i].st_value;
        out[nf].size = sym[i].st_size;
        out[nf].name = nm;
        out[nf].rank = (bind == STB_GLOBAL ? 0 : bind == STB_WEAK ? 1 : 2) * 2 + (nm[0] == '_');
        nf++;
    }
    qsort(out, nf, sizeof(psym), sym_cmp);
    o->syms = out;
    o->n = nf;
    return;
fail:
    munmap((void *)map, size);
}

static NI const psym *find_sym(const pobj *o, uintptr_t off, int *exact)
{
    size_t lo = 0, hi = o->n;
    while (lo < hi) {             /* first symbol with value > off */
        size_t mid = (lo + hi) / 2;
        if (o->syms[mid].value <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    const psym *s = &o->syms[lo - 1];
    while (s > o->syms && (s - 1)->value == s->value)
        s--;                      /* the preferred alias comes first */
    if (s->value == off) {
        *exact = 1;
        return s;
    }
    *exact = 0;
    if (off < s->value + s->size)
        return s;
    return NULL;
}

typedef char *(*demangle_fn)(const char *, char *, size_t *, int *);

static NI char *demangle(const char *name)
{
    static demangle_fn dm;
    static int looked;
    if (name[0] != '_' || name[1] != 'Z')
        return NULL;
    if (!looked) {
        dm = (demangle_fn)dlsym(RTLD_DEFAULT, "__cxa_demangle");
        looked = 1;
    }
    if (!dm)
        return NULL;
    int status = 0;
    char *d = dm(name, NULL, NULL, &status);
    if (status != 0) {
        free(d);
        return NULL;
    }
    return d;
}

/* Name of the function at address fn (malloc'd, one line). */
char *parlot_symbolize(const void *fn)
{
    Dl_info info;
    struct link_map *lm = NULL;
    char buf[512];
    const char *name = NULL;
    uintptr_t off = 0;
    int exact = 0;
    memset(&info, 0, sizeof info);
    if (dladdr1(fn, &info, (void **)&lm, RTLD_DL_LINKMAP) && lm) {
        off = (uintptr_t)fn - (uintptr_t)lm->l_addr;     /* PIE-aware: minus the load bias */
        pobj *o = NULL;
        for (int i = 0; i < g_nobjs; i++)
            if (g_objs[i].lm == lm)
                o = &g_objs[i];
        if (!o && g_nobjs < MAX_OBJS) {
            o = &g_objs[g_nobjs++];
            o->lm = lm;
            const char *path = (lm->l_name && lm->l_name[0]) ? lm->l_name : "/proc/self/exe";
            load_syms(o, path);
        }
        const psym *s = o ? find_sym(o, off, &exact) : NULL;
        if (s && exact)
            name = s->name;
        else if (info.dli_sname && info.dli_saddr == fn)
            name = info.dli_sname;
        else if (s) {
            snprintf(buf, sizeof buf, "%s+0x%lx", s->name, (unsigned long)(off - s->value));
            name = buf;
        }
    }
    if (!name) {
        const char *obj = info.dli_fname && info.dli_fname[0] ? strrchr(info.dli_fname, '/') : NULL;
        obj = obj ? obj + 1 : (info.dli_fname && info.dli_fname[0] ? info.dli_fname : "?");
        snprintf(buf, sizeof buf, "%s@0x%lx", obj, (unsigned long)(lm ? off : (uintptr_t)fn));
        name = buf;
    }
    char *d = demangle(name);
    char *res = d ? d : strdup(name);
    if (res)
        for (char *c = res; *c; c++)
            if (*c == '\n' || *c == '\r')
                *c = ' ';
    if (res && strcmp(res, "+") == 0) {   /* "+" starts an image block in .info */
        free(res);
        res = strdup("+ ");
    }
    return res;
}

/* The size in bytes of the function that starts at fn, from its object's symbol table; 0 when
 * unknown.  Under the name table's mutex (the objects' tables are shared with
 * parlot_symbolize). */
size_t parlot_symbol_size(const void *fn)
{
    Dl_info info;
    struct link_map *lm = NULL;
    if (!dladdr1(fn, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm)
        return 0;
    for (int i = 0; i < g_nobjs; i++)
        if (g_objs[i].lm == lm) {
            int exact = 0;
            const psym *s = find_sym(&g_objs[i], (uintptr_t)fn - (uintptr_t)lm->l_addr, &exact);
            return s && exact ? (size_t)s->size : 0;
        }
    return 0;
}
