#!/usr/bin/env bash
# benchmarks/lab/slurm.sh — throw-away real Slurm (slurm-wlm 22.05 from Debian 12) for the recorded-incident lab.
# Written from /work/shared/tools/slurm-local.sh (a configuration known to work on this machine).
#
#   slurm.sh start   apt-get install if needed, write config under $BASE, start munged, mariadbd, slurmdbd,
#                    slurmctld, slurmd -N n1, slurmd -N n2 (all on 127.0.0.1); waits until n1, n2 are idle
#   slurm.sh stop    stop every daemon it started, by the pid files under $BASE/run (SIGTERM, then SIGKILL)
#   slurm.sh env     print 'export SLURM_CONF=...' for the clients (sbatch, srun, sacct, scontrol, scancel)
#
# BASE (default /tmp/crashscope-lab/slurm) holds config, state, logs, pid files and the MariaDB datadir.
# Partitions (preempt/partition_prio):
#   low    PriorityTier=1  PreemptMode=CANCEL   (Default)
#   lowrq  PriorityTier=1  PreemptMode=REQUEUE  (jobs submitted with --requeue are requeued when preempted)
#   high   PriorityTier=10 PreemptMode=OFF      (a job here preempts low/lowrq jobs on the same nodes)
# Slurm option meanings: slurm.conf(5) of 22.05 (SchedMD/slurm doc/man/man5/slurm.conf.5).
set -euo pipefail
BASE=${BASE:-/tmp/crashscope-lab/slurm}
CONF=$BASE/etc/slurm.conf
HOST=$(hostname -s)
SBIN=/usr/sbin
export DEBIAN_FRONTEND=noninteractive

install_pkgs() {
  local need=()
  command -v slurmctld >/dev/null || need+=(slurmctld slurmd slurm-client)
  command -v munged >/dev/null || need+=(munge)
  command -v slurmdbd >/dev/null || need+=(slurmdbd)
  command -v mariadbd >/dev/null || need+=(mariadb-server)
  command -v iptables >/dev/null || need+=(iptables)
  if [ ${#need[@]} -gt 0 ]; then
    apt-get update -q >/dev/null
    apt-get install -y -q "${need[@]}" >/dev/null
  fi
}

write_conf() {
  mkdir -p "$BASE"/{etc,state,log,run,spool/n1,spool/n2,jobcomp,mysql}
  cat >"$BASE/epilog.sh" <<EOS
#!/bin/sh
# runs as root on each node of a job after it ends: the controller's view at that moment
scontrol show job -d -o "\$SLURM_JOB_ID" > "$BASE/log/epilog.\${SLURM_JOB_ID}.\${SLURMD_NODENAME}.scontrol" 2>&1
exit 0
EOS
  chmod 755 "$BASE/epilog.sh"
  cat >"$CONF" <<EOF
ClusterName=lab
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=16817
SlurmdPort=16818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$BASE/state
SlurmdSpoolDir=$BASE/spool/%n
SlurmctldPidFile=$BASE/run/slurmctld.pid
SlurmdPidFile=$BASE/run/slurmd.%n.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=16819
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=5
JobCompType=jobcomp/filetxt
JobCompLoc=$BASE/jobcomp/jobcomp.txt
Epilog=$BASE/epilog.sh
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
JobRequeue=0
MinJobAge=600
KillWait=10
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=60
NodeName=n1 NodeHostname=$HOST NodeAddr=127.0.0.1 Port=17001 CPUs=2 RealMemory=4000 State=UNKNOWN
NodeName=n2 NodeHostname=$HOST NodeAddr=127.0.0.1 Port=17002 CPUs=2 RealMemory=4000 State=UNKNOWN
PartitionName=low   Nodes=n[1-2] Default=YES MaxTime=INFINITE State=UP PriorityTier=1  PreemptMode=CANCEL
PartitionName=lowrq Nodes=n[1-2] Default=NO  MaxTime=INFINITE State=UP PriorityTier=1  PreemptMode=REQUEUE
PartitionName=high  Nodes=n[1-2] Default=NO  MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
EOF
  cat >"$BASE/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=16819
SlurmUser=root
LogFile=$BASE/log/slurmdbd.log
PidFile=$BASE/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=13306
StorageUser=slurm
StoragePass=labpw
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$BASE/etc/slurmdbd.conf"   # slurmdbd refuses a conf readable by others
}

start_munge() {
  if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
    chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
  fi
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  if ! munge -n >/dev/null 2>&1; then
    runuser -u munge -- $SBIN/munged
    for _ in $(seq 50); do [ -s /run/munge/munged.pid ] && break; sleep 0.1; done
    cp /run/munge/munged.pid "$BASE/run/munged.pid"   # only a munged we started is ours to stop
  fi
  for _ in $(seq 50); do munge -n | unmunge >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "munge did not come up" >&2; return 1
}

start_db() {
  if [ ! -d "$BASE/mysql/mysql" ]; then
    mariadb-install-db --user=root --datadir="$BASE/mysql" --auth-root-authentication-method=socket \
      --skip-test-db >"$BASE/log/mariadb-install.log" 2>&1
  fi
  setsid /usr/sbin/mariadbd --user=root --datadir="$BASE/mysql" --socket="$BASE/run/mysqld.sock" \
    --port=13306 --bind-address=127.0.0.1 --pid-file="$BASE/run/mariadbd.pid" \
    --log-error="$BASE/log/mariadb.log" --skip-log-bin --innodb-buffer-pool-size=64M \
    </dev/null >/dev/null 2>&1 &
  local ok=0
  for _ in $(seq 150); do
    if mariadb --socket="$BASE/run/mysqld.sock" -e 'select 1' >/dev/null 2>&1; then ok=1; break; fi
    sleep 0.2
  done
  [ $ok = 1 ] || { echo "mariadbd did not come up" >&2; return 1; }
  mariadb --socket="$BASE/run/mysqld.sock" -e "
    CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'labpw';
    CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'labpw';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
  SLURM_CONF=$CONF $SBIN/slurmdbd          # reads slurmdbd.conf next to $SLURM_CONF; daemonizes
  for _ in $(seq 100); do
    if (exec 3<>/dev/tcp/127.0.0.1/16819) 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "slurmdbd did not come up" >&2; return 1
}

start_slurm() {
  export SLURM_CONF=$CONF
  $SBIN/slurmctld -f "$CONF"
  for n in n1 n2; do $SBIN/slurmd -f "$CONF" -N $n; done
  for _ in $(seq 200); do
    if [ "$(sinfo -h -N -p low -o '%N %t' 2>/dev/null | grep -c ' idle$')" -ge 2 ]; then
      sinfo; return 0
    fi
    sleep 0.2
  done
  echo "nodes did not become idle:" >&2; sinfo -N >&2 || true; return 1
}

stop_all() {
  local tier f pid pids
  for tier in "slurmd.n1 slurmd.n2 slurmctld" "slurmdbd" "mariadbd munged"; do
    pids=()
    for f in $tier; do
      [ -s "$BASE/run/$f.pid" ] || continue
      pid=$(cat "$BASE/run/$f.pid"); rm -f "$BASE/run/$f.pid"
      if kill -0 "$pid" 2>/dev/null; then kill "$pid"; pids+=("$pid"); fi
    done
    for pid in "${pids[@]}"; do
      for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; fi
    done
    [ ${#pids[@]} -gt 0 ] && echo "stopped $tier (pids ${pids[*]})"
  done
  return 0
}

case "${1:-start}" in
  start) install_pkgs; write_conf; start_munge; start_db; start_slurm; echo "export SLURM_CONF=$CONF" ;;
  stop)  stop_all ;;
  env)   echo "export SLURM_CONF=$CONF" ;;
  *) echo "usage: $0 start|stop|env" >&2; exit 2 ;;
esac
