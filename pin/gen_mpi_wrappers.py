#!/usr/bin/env python3
"""gen_mpi_wrappers.py -- the PMPI wrappers of libparlot.so for every function of the MPI
library's own mpi.h, written at build time (pin/Makefile; standard library only).

    python3 gen_mpi_wrappers.py --cc cc --cflags "-I/path/to/mpi/include" \
        --handwritten parlot_mpi.c -o build/gen/parlot_mpi_gen.c
    python3 gen_mpi_wrappers.py --cflags "..." --list      # the profiled functions, one a line

How it reads mpi.h: the C preprocessor of the build (`cc -E` with the MPI compiler wrapper's
-I flags) expands the header as a program sees it (its version conditionals, attribute macros
such as MPICH_ATTR_POINTER_WITH_TYPE_TAG or Open MPI's OMPI_DECLSPEC, the MPI-1 names Open
MPI removed); the top-level declarations are then parsed.  A function is wrapped when the
header declares both MPI_X (or MPIX_X) and its profiling entry point PMPI_X: that is the
MPI profiling interface, and the wrapper calls PMPI_X (found with dlsym at its first call).

What is written (parlot_mpi.c includes the result at its end, so the wrappers use its
helpers and its wrapper skeleton, the GWRAP macro):

- nothing for the functions parlot_mpi.c wraps by hand (read from that file: every
  `W(MPI_X`, `WA(`, `WT(`, `WAX(`, `WTR(`, `WTEST(`, `WAREQ(` and `PARLOT_API <type> MPI_X(`) - the ones with
  logic of their own (MPI_Init, rank capture, the would-wait checks of the completion calls,
  MPI_Abort, MPI_Finalize, MPI_Start's request table, ...);
- for handle conversions (`_f2c`, `_c2f`, `_toint`, `_fromint`, ...), MPI_Wtime/MPI_Wtick,
  MPI_Aint_add/diff and any function that does not return int: a wrapper that only calls the
  PMPI function (no event: they are arithmetic or clocks, called in inner loops);
- for every other function an event named after it and, by the rules below, its arguments;
  a function these rules know nothing about (a newer MPI's) still gets its event, named
  with whatever of its arguments the generic rules recognise (or its plain name).

Annotation rules, by argument name and type, in parameter order (the keys and order of the
hand-written wrappers, so MPI_Send_c and MPI_Send, MPI_Igather and MPI_Gather name their
arguments alike): counts (`count`, `scount`, `rcount`, `ocount`, `tcount`), datatypes
(`type`, `stype`, `rtype`, `otype`, `ttype`, ...), the reduction `op`, `root`, point-to-point
peers (`dest`, `src`: relative to the caller's rank, or absolute with PARLOT_MPI_ARGS=abs),
RMA targets (`target`, relative in the window's group), tags (`tag`, `stag`, `rtag`), sums of
per-rank count arrays (`stotal`, `rtotal`, `total`), `in_place`, other integer arguments by
their own name (`blocklength=3`, `assert=0`, `tdisp=8`, `amode=37`), and the communicator
last, when it is not MPI_COMM_WORLD.  Rooted Gather/Scatter families record the sides that
are significant at the calling rank only.  Never pointers, buffers, strings, or handles other
than datatypes, operations and communicators.

Also written per function: whether it may wait (a checkpoint of the thread's file before
the call, CK; a receive or matched probe asks MPI_Iprobe first, as the hand-written MPI_Recv
does), which MPI objects it creates or frees (the counts of objects still open, for MPI_Finalize's
name and the end record), and for persistent requests (`*_init`) the request's annotation,
which MPI_Start/MPI_Startall then carry.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile

# ---------------------------------------------------------------------------- parsing mpi.h

C_TYPE_WORDS = {"int", "char", "short", "long", "float", "double", "void", "unsigned", "signed",
                "_Bool", "bool", "size_t"}
QUALIFIERS = {"const", "volatile", "restrict", "__restrict", "__restrict__", "struct", "enum",
              "union", "register"}


class Param:
    """One parameter: its text as declared, name, base type, pointer depth (with [] counted),
    const-ness, and whether it is an array or a function pointer."""

    def __init__(self, text, index):
        self.text = " ".join(text.split())
        self.variadic = self.text == "..."
        self.funcptr = "(" in self.text
        self.array = "[" in self.text
        self.const = bool(re.search(r"\bconst\b", self.text))
        self.name = None
        if self.variadic:
            self.base, self.ptr = "...", 0
            return
        if self.funcptr:
            m = re.search(r"\(\s*\*\s*([A-Za-z_]\w*)?\s*\)", self.text)
            self.name = m.group(1) if m and m.group(1) else None
            self.base, self.ptr = "funcptr", 1
            self.decl_no_name = self.text if not self.name else self.text.replace(self.name, "", 1)
            return
        body = re.sub(r"(\[[^\]]*\])+\s*$", "", self.text)
        dims = self.text.count("[")
        tokens = re.findall(r"[A-Za-z_]\w*|\*", body)
        words = [t for t in tokens if t != "*" and t not in QUALIFIERS]
        if len(words) >= 2 and tokens[-1] not in C_TYPE_WORDS and tokens[-1] != "*":
            self.name = tokens[-1]
            words = words[:-1]
        self.base = " ".join(words)
        self.ptr = tokens.count("*") + dims
        self.index = index

    def declare(self, name):
        """The parameter declared with `name` (for an unnamed or renamed parameter)."""
        if self.variadic:
            return "..."
        if self.funcptr:
            if self.name:
                return re.sub(r"\(\s*\*\s*" + re.escape(self.name) + r"\s*\)", f"(*{name})", self.text, count=1)
            return re.sub(r"\(\s*\*\s*\)", f"(*{name})", self.text, count=1)
        if self.name:
            # the last occurrence of the name before any array suffix
            m = re.match(r"^(.*)\b" + re.escape(self.name) + r"\b(\s*(\[[^\]]*\]\s*)*)$", self.text)
            return f"{m.group(1)}{name}{m.group(2)}" if m else f"{self.text} {name}"
        m = re.match(r"^(.*?)(\s*(\[[^\]]*\]\s*)*)$", self.text)
        return f"{m.group(1)} {name}{m.group(2)}"


class Decl:
    def __init__(self, ret, name, params):
        self.ret = " ".join(ret.split())
        self.name = name
        self.params = params

    @property
    def variadic(self):
        return any(p.variadic for p in self.params)


def strip_attributes(text):
    """Remove __attribute__((...)), __asm__(...), __declspec(...) (balanced parentheses)."""
    out, i = [], 0
    pat = re.compile(r"\b(__attribute__|__attribute|__asm__|__asm|asm|__declspec)\s*\(")
    while True:
        m = pat.search(text, i)
        if not m:
            out.append(text[i:])
            break
        out.append(text[i:m.start()])
        j, depth = m.end(), 1
        while j < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            j += 1
        i = j
    text = "".join(out)
    return re.sub(r"\b(__extension__|__inline__|__inline|extern)\b", " ", text)


def statements(text):
    """Top-level statements (split at ';' outside braces and parentheses; bodies dropped)."""
    out, cur, depth, paren = [], [], 0, 0
    for ch in text:
        if ch == "{":
            depth += 1
            continue
        if ch == "}":
            depth -= 1
            if depth == 0:
                cur = []          # a function body or a struct: what came before was no declaration
            continue
        if depth:
            continue
        if ch == "(":
            paren += 1
        elif ch == ")":
            paren -= 1
        if ch == ";" and paren == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    return out


def split_params(s):
    parts, cur, depth = [], [], 0
    for ch in s:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur))
    return [p.strip() for p in parts]


DECL = re.compile(r"^\s*(?P<ret>[A-Za-z_][\w\s\*]*?)\s*\b(?P<name>P?MPIX?_\w+)\s*\((?P<params>.*)\)\s*$", re.S)


def parse_declarations(preprocessed):
    """{name: Decl} of the functions the preprocessed header declares (MPI_*, MPIX_*, PMPI_*)."""
    text = re.sub(r"^\s*#.*$", "", preprocessed, flags=re.M)
    text = strip_attributes(text)
    decls = {}
    for st in statements(text):
        st = " ".join(st.split())
        if not st or st.startswith("typedef") or "MPI" not in st:
            continue
        m = DECL.match(st)
        if not m:
            continue
        ret = m.group("ret")
        if not ret.strip() or ret.strip() in QUALIFIERS:
            continue
        ps = split_params(m.group("params"))
        if ps == ["void"] or ps == []:
            params = []
        else:
            params = [Param(p, i) for i, p in enumerate(ps)]
        decls[m.group("name")] = Decl(ret, m.group("name"), params)
    return decls


def profiled(decls):
    """The functions of the profiling interface: MPI_X / MPIX_X with a PMPI_X / PMPIX_X."""
    return sorted(n for n in decls if not n.startswith("P") and "P" + n in decls)


def preprocess(cc, cflags):
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "mpih.c")
        with open(src, "w") as f:
            f.write("#include <mpi.h>\n")
        cmd = shlex.split(cc) + shlex.split(cflags) + ["-E", src]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"gen_mpi_wrappers: cannot preprocess mpi.h ({' '.join(cmd)}):\n{r.stderr}")
        return r.stdout


def mpi_h_path(preprocessed):
    for m in re.finditer(r'^# \d+ "([^"]*/mpi\.h)"', preprocessed, flags=re.M):
        return m.group(1)
    return "mpi.h"


HANDWRITTEN = re.compile(r"^\s*(?:W|WA|WT|WAX|WTR|WTEST|WAREQ)\(\s*(MPIX?_\w+)\s*,|^\s*PARLOT_API\s+[\w\s\*]+?\b(MPIX?_\w+)\s*\(",
                         re.M)


def handwritten(path):
    """The MPI functions parlot_mpi.c wraps itself."""
    with open(path) as f:
        text = f.read()
    return {a or b for a, b in HANDWRITTEN.findall(text)}


# ---------------------------------------------------------------------------- rules

LOCALS = {"site", "real", "site_", "rc_", "A", "prev_call_", "r_", "had_", "live_", "k_", "i_"}

PASSTHROUGH = re.compile(r"(_f2c|_c2f|_toint|_fromint|_c2f08|_f082c|_f2f08|_f082f)$|"
                         r"^MPIX?_(Wtime|Wtick|Aint_add|Aint_diff)$")

HANDLES = {"MPI_Comm": ("COMM", "MPI_COMM_NULL"), "MPI_Group": ("GROUP", "MPI_GROUP_NULL"),
           "MPI_Datatype": ("TYPE", "MPI_DATATYPE_NULL"), "MPI_Win": ("WIN", "MPI_WIN_NULL"),
           "MPI_Op": ("OP", "MPI_OP_NULL"), "MPI_Info": ("INFO", "MPI_INFO_NULL"),
           "MPI_File": ("FILE", "MPI_FILE_NULL"), "MPI_Request": ("REQUEST", "MPI_REQUEST_NULL"),
           "MPI_Errhandler": ("ERRHANDLER", "MPI_ERRHANDLER_NULL")}
# output handles that are no new object (conversions, the parent, predefined types, ...)
NOT_CREATORS = re.compile(r"(_free|_disconnect|_commit|_f2c|_fromint|_c2f|_get_parent|Type_match_size|"
                          r"Type_create_f90_|File_get_view|Type_get_value_index|^MPIX?_T_|^MPIX?_Cancel$|^MPIX?_File_close$|"
                          r"^MPIX?_(Start|Startall|Wait\w*|Test\w*|Request_get_status\w*)$)")
FREES = re.compile(r"(_free|_disconnect|^MPI_File_close|^MPI_Session_finalize)$")

SCALAR_INTS = {"int", "MPI_Count", "MPI_Aint", "MPI_Offset", "long", "long long", "unsigned", "unsigned int",
               "short", "size_t", "MPI_Fint"}
COUNT_KEYS = {"count": "count", "sendcount": "scount", "recvcount": "rcount", "incount": "count",
              "origin_count": "ocount", "target_count": "tcount", "result_count": "rescount"}
TYPE_KEYS = {"datatype": "type", "sendtype": "stype", "recvtype": "rtype", "origin_datatype": "otype",
             "target_datatype": "ttype", "result_datatype": "restype", "type": "type"}
TAG_KEYS = {"tag": "tag", "sendtag": "stag", "recvtag": "rtag"}
PEER_KEYS = {"dest": "dest", "source": "src"}
INT_KEYS = {"target_disp": "tdisp"}
SKIP_INTS = {"key"}             # Comm_split's ordering key: the hand-written Comm_split leaves it out too
COMM_KEYS = {"comm": "comm", "comm_old": "comm", "local_comm": "comm", "intercomm": "comm", "oldcomm": "comm"}

# calls that may wait for other processes: the thread's file is made complete first
BLOCKING = re.compile(
    r"^MPIX?_("
    r"Send|Ssend|Bsend|Rsend|Sendrecv|Sendrecv_replace|Mrecv|Buffer_detach|Comm_detach_buffer|"
    r"Buffer_flush|Comm_flush_buffer|"
    r"Barrier|Bcast|Gather|Gatherv|Scatter|Scatterv|Allgather|Allgatherv|Alltoall|Alltoallv|Alltoallw|"
    r"Reduce|Allreduce|Reduce_scatter|Reduce_scatter_block|Scan|Exscan|"
    r"Neighbor_allgather|Neighbor_allgatherv|Neighbor_alltoall|Neighbor_alltoallv|Neighbor_alltoallw|"
    r"Comm_create|Comm_create_group|Comm_create_from_group|Comm_dup|Comm_dup_with_info|Comm_split|"
    r"Comm_split_type|Comm_accept|Comm_connect|Comm_spawn|Comm_spawn_multiple|Comm_disconnect|Comm_join|"
    r"Intercomm_create|Intercomm_create_from_groups|Intercomm_merge|Cart_create|Cart_sub|Graph_create|"
    r"Dist_graph_create|Dist_graph_create_adjacent|"
    r"Win_create|Win_allocate|Win_allocate_shared|Win_create_dynamic|Win_free|Win_fence|Win_wait|"
    r"Win_complete|Win_start|Win_lock|Win_lock_all|Win_unlock|Win_unlock_all|Win_flush|Win_flush_all|"
    r"Win_flush_local|Win_flush_local_all|"
    r"File_open|File_close|File_sync|File_set_view|File_set_size|File_preallocate|File_set_atomicity|"
    r"File_read_all|File_write_all|File_read_at_all|File_write_at_all|File_read_ordered|File_write_ordered|"
    r"File_read_all_end|File_write_all_end|File_read_at_all_end|File_write_at_all_end|"
    r"File_read_ordered_end|File_write_ordered_end|File_seek_shared|"
    r"Session_finalize|Comm_agree|Comm_shrink"
    r")(_c)?$")
# blocking calls that ask MPI_Iprobe first whether a matching message is there
PROBED = re.compile(r"^MPI_(Recv|Mprobe)(_c)?$")


def family(name):
    """MPI_Igatherv_c -> 'gatherv'; MPI_Gather_init -> 'gather'; MPI_Neighbor_allgather -> ..."""
    f = re.sub(r"^MPIX?_", "", name)
    f = re.sub(r"_c$", "", f)
    f = re.sub(r"_init$", "", f)
    if re.match(r"^I(barrier|bcast|gather|gatherv|scatter|scatterv|allgather|allgatherv|alltoall|alltoallv|"
                r"alltoallw|reduce|allreduce|reduce_scatter|reduce_scatter_block|scan|exscan|neighbor_\w+)$", f):
        f = f[1:]
    return f.lower()


class Gen:
    """The annotation, the before/after code and the flags of one function."""

    def __init__(self, d, argname):
        self.d = d
        self.arg = argname                      # parameter -> the C name in the wrapper
        self.by_name = {p.name: p for p in d.params if p.name}

    def has(self, name):
        return name in self.by_name

    def scalar(self, p, *bases):
        return p.ptr == 0 and not p.funcptr and p.base in bases

    def comm_param(self):
        """The communicator the ranks and peers refer to: the first scalar MPI_Comm."""
        for p in self.d.params:
            if p.name in COMM_KEYS and self.scalar(p, "MPI_Comm"):
                return p
        return None

    # -- one parameter -> statements (or None)
    def param_stmt(self, p, ctx):
        a, n = self.arg, p.name
        if n is None or p.variadic or p.funcptr:
            return None
        comm = self.comm_param()
        c = a(comm.name) if comm else None
        has_op = any(q.name == "op" and self.scalar(q, "MPI_Op") for q in self.d.params)
        if self.scalar(p, "MPI_Datatype"):
            key = TYPE_KEYS.get(n, n)
            return f'a_type(&A, "{key}", {a(n)});'
        if self.scalar(p, "MPI_Op"):
            s = f"a_op(&A, {a(n)});"
            if ctx.get("defer_in_place"):
                s += f' if ({a("sendbuf")} == MPI_IN_PLACE) ab_add(&A, "in_place", NULL);'
            return s
        if p.ptr == 1 and p.base in ("int", "MPI_Count") and n in ("sendcounts", "recvcounts"):
            if not c or family(self.d.name).startswith("neighbor"):
                return None
            key = "total" if has_op else {"sendcounts": "stotal", "recvcounts": "rtotal"}[n]
            fn = "a_total" if p.base == "int" else "a_total_c"
            return f'{fn}(&A, "{key}", {a(n)}, {c});'
        if p.ptr or p.base not in SCALAR_INTS:
            return None
        # integer scalars
        if n == "root" and c:
            return f"a_root(&A, {a(n)});"
        if n in PEER_KEYS and c:
            return f'a_peer(&A, "{PEER_KEYS[n]}", {a(n)}, {c});'
        if n in ("target_rank", "rank") and self.has("win") and self.scalar(self.by_name["win"], "MPI_Win"):
            return f'a_target(&A, "target", {a(n)}, {a("win")});'
        if n in TAG_KEYS:
            return f'a_tag(&A, "{TAG_KEYS[n]}", {a(n)});'
        if n == "color":
            return f'a_color(&A, {a(n)});'
        if n in SKIP_INTS:
            return None
        if n in COUNT_KEYS:
            key = "count" if (has_op and n == "recvcount") else COUNT_KEYS[n]
            return f'ab_int(&A, "{key}", (long){a(n)});'
        return f'ab_int(&A, "{INT_KEYS.get(n, n)}", (long){a(n)});'

    def annotation(self):
        d, a = self.d, self.arg
        fam = family(d.name)
        comm = self.comm_param()
        c = a(comm.name) if comm else None
        has_root = self.has("root") and self.scalar(self.by_name["root"], "int")
        if fam in ("gather", "gatherv", "scatter", "scatterv") and has_root and c:
            return self.rooted(fam, c)
        params = [p for p in d.params if p.name]
        names = [p.name for p in params]
        has_op = any(p.name == "op" and self.scalar(p, "MPI_Op") for p in params)
        ctx = {}
        stmts = []
        send_side = [p for p in params if p.name in ("sendcount", "sendcounts", "sendtype")]
        i = 0
        while i < len(params):
            p = params[i]
            if p.name == "sendbuf" and has_op:
                ctx["defer_in_place"] = True
            elif p.name == "sendbuf" and send_side and "recvbuf" in names:
                inner = [s for s in (self.param_stmt(q, ctx) for q in send_side) if s]
                body = " ".join(inner)
                stmts.append(f'if ({a("sendbuf")} == MPI_IN_PLACE) ab_add(&A, "in_place", NULL);'
                             + (f" else {{ {body} }}" if body else ""))
            elif p in send_side and "sendbuf" in names and "recvbuf" in names and not has_op:
                pass                                      # recorded with sendbuf
            elif comm is not None and p is comm:
                pass                                      # last
            else:
                s = self.param_stmt(p, ctx)
                if s:
                    stmts.append(s)
            i += 1
        if c:
            stmts.append(f"a_comm(&A, {c});")
        return stmts

    def rooted(self, fam, c):
        """Gather/Scatter families: only the sides significant at the calling rank."""
        a, b = self.arg, self.by_name

        def count_of(side):
            one, many = f"{side}count", f"{side}counts"
            key = {"send": "s", "recv": "r"}[side]
            if one in b:
                return f'ab_int(&A, "{key}count", (long){a(one)});'
            if many in b:
                fn = "a_total" if b[many].base == "int" else "a_total_c"
                return f'{fn}(&A, "{key}total", {a(many)}, {c});'
            return ""
        send = f'{count_of("send")} a_type(&A, "stype", {a("sendtype")});'
        recv = f'{count_of("recv")} a_type(&A, "rtype", {a("recvtype")});'
        if fam.startswith("gather"):
            inner = (f"int r_ = at_root({a('root')}, {c}); "
                     f"if (!(r_ && {a('sendbuf')} == MPI_IN_PLACE)) {{ {send} }} else ab_add(&A, \"in_place\", NULL); "
                     f"if (r_) {{ {recv} }}")
        else:
            inner = (f"int r_ = at_root({a('root')}, {c}); "
                     f"if (r_) {{ {send} }} "
                     f"if (!(r_ && {a('recvbuf')} == MPI_IN_PLACE)) {{ {recv} }} else ab_add(&A, \"in_place\", NULL);")
        return [f"if (!is_inter({c})) {{ {inner} }}", f"a_root(&A, {a('root')});", f"a_comm(&A, {c});"]

    # -- objects and requests
    def before_after(self):
        d, a = self.d, self.arg
        before, after = [], []
        name = d.name
        outs = [p for p in d.params if p.name and p.ptr == 1 and not p.array and not p.const
                and p.base in HANDLES and not p.funcptr]
        if FREES.search(name) and outs:
            p = outs[0]
            kind, null = HANDLES[p.base]
            before.append(f"int had_ = {a(p.name)} && *{a(p.name)} != {null};")
            after.append(f"if (rc_ == MPI_SUCCESS && had_) open_sub(PARLOT_OPEN_{kind});")
            if p.base == "MPI_Win":
                before.append(f"MPI_Win k_ = {a(p.name)} ? *{a(p.name)} : MPI_WIN_NULL;")
                after.append("if (rc_ == MPI_SUCCESS) win_forget(k_);")
        elif not NOT_CREATORS.search(name):
            for p in outs:
                kind, null = HANDLES[p.base]
                after.append(f"if (rc_ == MPI_SUCCESS && {a(p.name)} && *{a(p.name)} != {null}) "
                             f"open_add(PARLOT_OPEN_{kind});")
                if p.base == "MPI_Win" and self.comm_param():
                    after.append(f"if (rc_ == MPI_SUCCESS && {a(p.name)}) "
                                 f"win_remember(*{a(p.name)}, {a(self.comm_param().name)});")
                if (p.base == "MPI_Request" and re.search(r"_init(_c)?$", name)):
                    after.append(f"if (rc_ == MPI_SUCCESS && parlot_mpi_args && {a(p.name)}) "
                                 f"req_remember(*{a(p.name)}, site_);")
        if re.match(r"^MPI_Comm_spawn(_multiple)?$", name) and self.has("intercomm"):
            # the processes it starts are not traced: counted for the end record
            after.append(f"if (rc_ == MPI_SUCCESS && {a('intercomm')}) spawned(*{a('intercomm')});")
        if PROBED.match(name):
            before.append(f"if (!message_waiting({a('source')}, {a('tag')}, {a('comm')})) parlot_checkpoint_self();")
        return before, after

    def flags(self):
        if PROBED.match(self.d.name):
            return "NOCK"
        return "CK" if BLOCKING.match(self.d.name) else "NOCK"


def c_list(items):
    return "(" + ", ".join(items) + ")" if items else "(void)"


def wrapper(d):
    """The generated C text of one wrapper."""
    used = set()
    cname = {}
    decl_params, args = [], []
    for i, p in enumerate(d.params):
        if p.variadic:
            decl_params.append("...")
            continue
        n = p.name
        if not n or n in LOCALS or n in used:
            n = f"p{i}_" if not n else f"{n}_p"
        used.add(n)
        if p.name:
            cname[p.name] = n
        decl_params.append(p.declare(n))
        args.append(n)
    params, call = c_list(decl_params), "(" + ", ".join(args) + ")"
    if d.ret != "int" or PASSTHROUGH.search(d.name):
        if d.ret == "void":
            return f"PASSV({d.name}, {params}, {call})"
        return f"PASS({d.ret}, {d.name}, {params}, {call})"
    g = Gen(d, lambda n: cname.get(n, n))
    try:
        ann = g.annotation()
        before, after = g.before_after()
    except KeyError:                 # a rule met parameters it does not expect: name only
        ann, before, after = [], [], []
    body = lambda xs: "{ " + " ".join(xs) + " }" if xs else "(void)0"
    # before/after: statements in the wrapper's scope (before's variables are after's)
    flat = lambda xs: " ".join(xs).rstrip(";").rstrip() if xs else "(void)0"
    return (f"GWRAP(int, {d.name}, {g.flags()}, {params},\n      {call},\n"
            f"      {body(ann)},\n      {flat(before)},\n      {flat(after)})")


def generate(decls, skip, source):
    names = profiled(decls)
    out = [
        "/* Generated by pin/gen_mpi_wrappers.py from",
        f" * {source}: do not edit (make -C pin writes it again).",
        f" * {len(names)} functions in the profiling interface, {len([n for n in names if n in skip])} "
        "wrapped by hand in parlot_mpi.c, the others here. */",
        "",
    ]
    n_gen = 0
    for n in names:
        if n in skip:
            continue
        out.append(wrapper(decls[n]))
        n_gen += 1
    out.append(f"\n#define PARLOT_MPI_GENERATED {n_gen}\n")
    return "\n".join(out) + "\n"


# The Fortran bindings of Open MPI (mpif.h, use mpi, use mpi_f08) call PMPI_* directly, so the
# C wrappers never see a Fortran program's MPI calls; MPICH's mpif.h / use mpi bindings call
# MPI_* and reach them.  For Open MPI the tracer also wraps the Fortran entry points (gfortran's
# names: mpi_send_, and mpi_send_f08_ for use mpi_f08), under the C name, without arguments.
# Not for: large-count variants (_c: no Fortran names of their own), MPIX_, the tools interface,
# handle conversions, and the four functions (not subroutines) whose result a forwarding
# wrapper would lose.  Hand-written in parlot_fortran.c: Init, Init_thread, Finalize, Abort.
FORTRAN_SKIP = re.compile(r"^MPIX_|^MPI_T_|_c$|(_f2c|_c2f|_toint|_fromint|_c2f08|_f082c|_f2f08|_f082f)$|"
                          r"^MPI_(Wtime|Wtick|Aint_add|Aint_diff|Init|Init_thread|Finalize|Abort|Pcontrol)$")
WOULD_WAIT = re.compile(r"^MPI_(Wait|Waitall|Waitany|Waitsome|Recv|Probe|Mprobe)$")


def generate_fortran(decls, source):
    """FW(lower-case name, "C name", flags) for each Fortran entry point to wrap."""
    names = [n for n in profiled(decls) if not FORTRAN_SKIP.search(n) and decls[n].ret == "int"]
    out = [f"/* Generated by pin/gen_mpi_wrappers.py from {source}: do not edit.",
           f" * {len(names)} Fortran entry points (x2: mpi_x_ and mpi_x_f08_), used with Open MPI only. */", ""]
    for n in names:
        flags = "PARLOT_CKPT" if BLOCKING.match(n) or WOULD_WAIT.match(n) else "0"
        out.append(f'FW({n.lower()}, "{n}", {flags})')
    return "\n".join(out) + "\n"


def write_if_changed(path, text):
    old = None
    if os.path.exists(path):
        with open(path) as f:
            old = f.read()
    if old != text:                  # unchanged: the library is not rebuilt for nothing
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    ap.add_argument("--cflags", default="", help="the MPI compiler wrapper's -I flags")
    ap.add_argument("--preprocessed", help="read this preprocessed mpi.h instead of running the compiler")
    ap.add_argument("--handwritten", help="parlot_mpi.c: its wrappers are not generated")
    ap.add_argument("-o", "--output")
    ap.add_argument("--fortran-output", help="also write the Fortran entry points to wrap (Open MPI)")
    ap.add_argument("--list", action="store_true", help="print the profiled MPI functions of mpi.h and exit")
    args = ap.parse_args(argv)
    if args.preprocessed:
        with open(args.preprocessed) as f:
            text = f.read()
    else:
        text = preprocess(args.cc, args.cflags)
    decls = parse_declarations(text)
    names = profiled(decls)
    if not names:
        sys.exit("gen_mpi_wrappers: no MPI function with a PMPI_ entry point found in mpi.h")
    if args.list:
        print("\n".join(names))
        return 0
    skip = handwritten(args.handwritten) if args.handwritten else set()
    if args.fortran_output:
        write_if_changed(args.fortran_output, generate_fortran(decls, mpi_h_path(text)))
    text = generate(decls, skip, mpi_h_path(text))
    if not args.output:
        sys.stdout.write(text)
        return 0
    write_if_changed(args.output, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
