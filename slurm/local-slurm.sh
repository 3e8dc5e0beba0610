#!/usr/bin/env bash
# A private, single-node Slurm cluster on this machine, for tests and for trying the batch
# scripts in slurm/ without a real cluster. Needs root and Debian's packages:
#
#     apt-get install -y slurmctld slurmd slurm-client munge
#
# Usage:
#     eval "$(slurm/local-slurm.sh start)"   # start; exports LOCAL_SLURM_DIR and SLURM_CONF
#     srun -n 4 .venv/bin/python -m mpi4py.bench helloworld
#     sbatch --wait slurm/analyze.sbatch
#     slurm/local-slurm.sh stop              # stop the daemons, remove the directory
#
#     slurm/local-slurm.sh start [DIR]   start a cluster whose files all live in DIR (default: a
#                                        new temporary directory); prints `export ...` lines
#     slurm/local-slurm.sh env [DIR]     print the `export ...` lines again
#     slurm/local-slurm.sh status [DIR]  print the daemons' pids and the node state
#     slurm/local-slurm.sh pids [DIR]    print the daemons' pids (munged slurmctld slurmd), one a line
#     slurm/local-slurm.sh stop [DIR]    cancel its jobs, stop its daemons by pid, remove its
#                                        files (and DIR when that leaves it empty)
#
# DIR defaults to $LOCAL_SLURM_DIR for env/status/pids/stop.
#
# What it sets up (nothing outside DIR is touched, no systemd, nothing in /etc):
#   - its own munge key and munged socket (DIR/munge), so a system munged is neither needed
#     nor disturbed;
#   - slurm.conf with one node (this host, 127.0.0.1) and one partition `debug`, CPUs=8 (more
#     than this machine may have: `SlurmdParameters=config_overrides` makes slurmd accept it),
#     MpiDefault=pmi2 (pip's MPICH reads PMI-2 from srun), proctrack/linuxproc and task/none
#     (no cgroups needed), no accounting, KillOnBadExit=1 (a task that fails ends its step);
#   - job ids starting at a random number (not 1), so that MPICH's shared-memory segments
#     (named after the job id) never meet a stale one from an earlier or parallel cluster;
#   - its own free TCP ports for slurmctld and slurmd, so several can run side by side and a
#     second start never meets a port still in use;
#   - state, spool, log and pid files under DIR.
# Clients (srun, sbatch, squeue, ...) find this cluster through SLURM_CONF=DIR/slurm.conf.
#
# Environment knobs: LOCAL_SLURM_CPUS (default 8), LOCAL_SLURM_TIMEOUT (seconds to wait for
# the node to become idle, default 60).
set -euo pipefail

SBIN_PATH=/usr/sbin:/sbin:/usr/bin:/bin
export PATH="$PATH:$SBIN_PATH"

die() { echo "local-slurm: $*" >&2; exit 1; }
say() { echo "local-slurm: $*" >&2; }

# A process counts as alive when it exists and is not a zombie.
alive() {
    local pid=$1 state
    [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
    state=$(sed -e 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1) || return 1
    [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

# pid_of NAME: the pid recorded for daemon NAME, or nothing. Only when that process is
# still NAME: a stale pid file (the machine rebooted, the pid was reused) gives nothing.
pid_of() {
    local f="$DIR/pids/$1.pid" pid
    [ -s "$f" ] || return 0
    pid=$(tr -dc '0-9' <"$f")
    [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$1" ] && echo "$pid"
    return 0
}

# A TCP port that nothing on this machine uses (listening or otherwise, IPv4 and IPv6).
used_ports() {
    cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk 'NR > 1 { split($2, a, ":"); print a[2] }'
}
free_port() {
    local used port hex avoid=${1:-}
    used=$(used_ports)
    for _ in $(seq 200); do
        port=$(( 20000 + (RANDOM * 32768 + RANDOM) % 30000 ))
        [ "$port" = "$avoid" ] && continue
        hex=$(printf '%04X' "$port")
        grep -qx "$hex" <<<"$used" || { echo "$port"; return 0; }
    done
    die "no free TCP port found"
}

resolve_dir() {
    DIR=${1:-${LOCAL_SLURM_DIR:-}}
    [ -n "$DIR" ] || die "no cluster directory: give DIR or set LOCAL_SLURM_DIR"
    DIR=$(cd "$DIR" 2>/dev/null && pwd) || die "no such directory: ${1:-$LOCAL_SLURM_DIR}"
    [ -f "$DIR/slurm.conf" ] || die "$DIR is not a local-slurm directory (no slurm.conf)"
}

print_env() {
    echo "export LOCAL_SLURM_DIR=$DIR"
    echo "export SLURM_CONF=$DIR/slurm.conf"
}

node_state() {
    SLURM_CONF="$DIR/slurm.conf" sinfo -h -N -o '%T' 2>/dev/null | head -n 1 || true
}

show_logs() {
    local f
    for f in "$DIR"/log/*.log; do
        [ -f "$f" ] || continue
        echo "---- $f (last lines)" >&2
        tail -n 15 "$f" >&2
    done
}

# Stop the daemons by their recorded pids; slurmstepd processes of this cluster as well.
stop_daemons() {
    local name pid waited
    if alive "$(pid_of slurmctld)" && alive "$(pid_of munged)"; then
        # Cancel what still runs, so that Slurm itself ends the tasks (SIGTERM, then SIGKILL
        # after KillWait), and wait for the queue to empty.
        local jobs
        jobs=$(SLURM_CONF="$DIR/slurm.conf" squeue -h -o %i 2>/dev/null || true)
        if [ -n "$jobs" ]; then
            # shellcheck disable=SC2086
            SLURM_CONF="$DIR/slurm.conf" scancel $jobs 2>/dev/null || true
            for _ in $(seq 75); do
                [ -z "$(SLURM_CONF="$DIR/slurm.conf" squeue -h -o %i 2>/dev/null)" ] && break
                sleep 0.2
            done
        fi
    fi
    for name in slurmd slurmctld munged; do
        pid=$(pid_of "$name")
        alive "$pid" || continue
        kill -TERM "$pid" 2>/dev/null || true
        waited=0
        while alive "$pid" && [ "$waited" -lt 100 ]; do sleep 0.1; waited=$((waited + 1)); done
        if alive "$pid"; then
            say "$name (pid $pid) ignored SIGTERM for 10 s; killing it"
            kill -KILL "$pid" 2>/dev/null || true
            sleep 0.2
        fi
    done
    # Step daemons of this cluster's slurmd carry SLURM_CONF=$DIR/slurm.conf in their
    # environment: end any that outlived their job.
    for pid in $(pgrep -x slurmstepd 2>/dev/null || true); do
        alive "$pid" || continue
        if { tr '\0' '\n' <"/proc/$pid/environ"; } 2>/dev/null | grep -qx "SLURM_CONF=$DIR/slurm.conf"; then
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
}

# Remove what start created in DIR (only that: DIR may be a directory the user gave),
# then DIR itself when that leaves it empty.
remove_files() {
    rm -rf "$DIR/pids" "$DIR/state" "$DIR/spool" "$DIR/munge" "$DIR/log" \
           "$DIR/slurm.conf" "$DIR/plugstack.conf"
}

cmd_start() {
    [ "$(id -u)" = 0 ] || die "must run as root (slurmd launches jobs as their users)"
    local bin
    for bin in munged slurmctld slurmd srun sinfo; do
        command -v "$bin" >/dev/null || die "$bin not found: apt-get install -y slurmctld slurmd slurm-client munge"
    done
    if [ -n "${1:-}" ]; then
        [ -d "$1" ] || { mkdir -p "$1"; chmod 711 "$1"; }
        DIR=$(cd "$1" && pwd)
        # A directory used before: refuse if its daemons still run, else forget stale files.
        if [ -d "$DIR/pids" ]; then
            for name in munged slurmctld slurmd; do
                alive "$(pid_of "$name")" && die "$name of $DIR still runs (pid $(pid_of "$name")): stop it first"
            done
            remove_files
        fi
    else
        DIR=$(mktemp -d "${TMPDIR:-/tmp}/local-slurm.XXXXXX")
        chmod 711 "$DIR"      # munged wants its socket reachable; the key stays 0400
    fi
    mkdir -p "$DIR"/{pids,state,spool,munge,log}

    local cpus=${LOCAL_SLURM_CPUS:-8}
    local timeout=${LOCAL_SLURM_TIMEOUT:-60}
    local node host ctld_port slurmd_port
    host=$(hostname -s 2>/dev/null || uname -n | cut -d. -f1)
    node=$host
    ctld_port=$(free_port)
    slurmd_port=$(free_port "$ctld_port")
    # Job ids must not repeat across clusters: MPICH names its shared-memory segment after
    # the PMI job id ("<job>.<step>"), so a second cluster numbering from 1 again would
    # attach to a segment left in /dev/shm by a killed job of an earlier one (or of one
    # running beside it) and hang or fail in MPI_Init. Start at a random id instead.
    local first_job
    first_job=$(( 1000000 + $(od -An -N4 -tu4 /dev/urandom | tr -d ' ') % 60000000 ))

    # -- munge: own key, own socket ----------------------------------------------------
    if command -v mungekey >/dev/null; then
        mungekey --create --keyfile="$DIR/munge/munge.key" 2>/dev/null
    else
        dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
    fi
    chmod 400 "$DIR/munge/munge.key"
    env LOCAL_SLURM_DIR="$DIR" munged --force \
        --socket="$DIR/munge/munge.socket" \
        --key-file="$DIR/munge/munge.key" \
        --pid-file="$DIR/pids/munged.pid" \
        --log-file="$DIR/log/munged.log" \
        --seed-file="$DIR/munge/munged.seed" \
        </dev/null >>"$DIR/log/munged.log" 2>&1 || { show_logs; die "munged failed to start"; }

    # -- slurm.conf ----------------------------------------------------------------------
    : >"$DIR/plugstack.conf"
    cat >"$DIR/slurm.conf" <<EOF
# Written by slurm/local-slurm.sh: a private single-node cluster in $DIR
ClusterName=local$(basename "$DIR" | tr -dc 'a-z0-9' | tail -c 20)
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/pids/slurmctld.pid
SlurmdPidFile=$DIR/pids/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$DIR/plugstack.conf
SlurmdParameters=config_overrides
MpiDefault=pmi2
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
ReturnToService=2
FirstJobId=$first_job
KillOnBadExit=1
MailProg=/bin/true
InactiveLimit=0
KillWait=5
MinJobAge=60
SlurmctldTimeout=30
SlurmdTimeout=60
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF

    # -- the Slurm daemons (they daemonize and write their pid files) ---------------------
    env LOCAL_SLURM_DIR="$DIR" SLURM_CONF="$DIR/slurm.conf" slurmctld -f "$DIR/slurm.conf" \
        </dev/null >>"$DIR/log/slurmctld.out" 2>&1 || { show_logs; stop_daemons; die "slurmctld failed to start"; }
    env LOCAL_SLURM_DIR="$DIR" SLURM_CONF="$DIR/slurm.conf" slurmd -f "$DIR/slurm.conf" -N "$node" \
        </dev/null >>"$DIR/log/slurmd.out" 2>&1 || { show_logs; stop_daemons; die "slurmd failed to start"; }

    # -- wait until the node is idle --------------------------------------------------------
    local state="" deadline=$(( $(date +%s) + timeout ))
    while [ "$(date +%s)" -lt "$deadline" ]; do
        state=$(node_state)
        case "$state" in idle*) break ;; esac
        sleep 0.2
    done
    case "$state" in
        idle*) ;;
        *) show_logs; stop_daemons; die "node $node not idle after ${timeout}s (state: '${state:-none}'); logs above" ;;
    esac
    # slurmctld holds back scheduling for a few seconds after it starts: return only when a
    # job step really runs (this also checks munge and the credentials end to end).
    local left=$(( deadline - $(date +%s) ))
    [ "$left" -ge 5 ] || left=5
    if ! SLURM_CONF="$DIR/slurm.conf" timeout "$left" srun --quiet -n 1 -t 1 -J local-slurm-probe true \
            </dev/null >"$DIR/log/probe.out" 2>&1; then
        cat "$DIR/log/probe.out" >&2; show_logs; stop_daemons
        die "a 1-task probe job did not run within ${timeout}s; logs above"
    fi
    say "cluster up in $DIR: node $node idle, $cpus CPUs, slurmctld port $ctld_port, slurmd port $slurmd_port"
    say "pids: munged $(pid_of munged), slurmctld $(pid_of slurmctld), slurmd $(pid_of slurmd)"
    print_env
}

cmd_stop() {
    resolve_dir "${1:-}"
    stop_daemons
    local name left=""
    for name in munged slurmctld slurmd; do
        alive "$(pid_of "$name")" && left="$left $name($(pid_of "$name"))"
    done
    [ -z "$left" ] || die "still running after stop:$left; $DIR kept"
    remove_files
    if rmdir "$DIR" 2>/dev/null; then
        say "stopped; removed $DIR"
    else
        say "stopped; removed its files from $DIR (other files left there)"
    fi
}

cmd_status() {
    resolve_dir "${1:-}"
    local name pid
    for name in munged slurmctld slurmd; do
        pid=$(pid_of "$name")
        if alive "$pid"; then echo "$name: running (pid $pid)"; else echo "$name: not running"; fi
    done
    echo "node: $(node_state)"
}

cmd_pids() {
    resolve_dir "${1:-}"
    local name
    for name in munged slurmctld slurmd; do pid_of "$name"; echo; done | sed '/^$/d'
}

case "${1:-}" in
    start) shift; cmd_start "$@" ;;
    stop) shift; cmd_stop "$@" ;;
    env) shift; resolve_dir "${1:-}"; print_env ;;
    status) shift; cmd_status "$@" ;;
    pids) shift; cmd_pids "$@" ;;
    -h|--help|help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' ;;
    *) die "usage: $0 start [DIR] | env [DIR] | status [DIR] | pids [DIR] | stop [DIR]" ;;
esac
