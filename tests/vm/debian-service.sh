#!/bin/bash
# The service checks, run inside the Debian guest (`tests/vm/rig.sh --guest debian service`)
# by pghot-rig.service once systemd reached multi-user.target. The host packed this script,
# the project's .deb and a static pghot-workload into the guest's initramfs (under
# /opt/pghot-rig) next to /etc/pghot-rig.conf (RIG_* parameters).
#
# It installs the .deb with apt, runs pghotd as the installed, sandboxed service on processes
# of an unprivileged user and prints, per check, one line the host parses:
#   SERVICE-CHECK NAME true|false DETAIL...
# A failing check is followed by the journal lines that explain it (`rig: journal: ...`). Also
#   SERVICE-FIGURE NAME VALUE      measured figures (exposure, times, coverage)
#   SERVICE-END                    all checks ran
# Then the guest powers off.
set -u
export LC_ALL=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# shellcheck source=/dev/null # written by the host
. /etc/pghot-rig.conf

deb=/opt/pghot-rig/pghotd.deb
conf=/etc/pghotd/pghotd.toml
work=/run/pghot-rig
user=pghot-user
outsider=pghot-outsider
mkdir -p "$work"
chmod 0755 "$work"

# shellcheck source=tests/vm/guest-lib.sh
. /opt/pghot-rig/guest-lib.sh
# journal_since CURSOR_FILE: the unit's journal since the cursor saved at the check's start.
journal_since() { journalctl -u pghotd --no-pager -o short-monotonic --after-cursor="$(cat "$1")" 2>/dev/null; }
mark() { journalctl -n 0 --show-cursor --no-pager 2>/dev/null | sed -n 's/^-- cursor: //p' > "$1"; }
# explain_failure: what follows a false check (guest-lib.sh): the unit's last journal lines.
explain_failure() { journalctl -u pghotd --no-pager -o short-monotonic -n 40 2>/dev/null | sed 's/^/rig: journal: /'; }
# counter NAME: one counter of the running pghotd (pghotctl stats), or empty.
counter() { pghotctl stats 2>/dev/null | awk -v n="$1" '$1 == n { print $2 }'; }
# vm NAME: a /proc/vmstat counter.
vm() { awk -v n="$1" '$1 == n { print $2 }' /proc/vmstat; }
# denied SINCE_CURSOR_FILE: the journal holds a permission or read-only error since the cursor.
denied() { journal_since "$1" | grep -Eiq 'permission denied|operation not permitted|read-only file system|EACCES|EPERM|EROFS'; }
write_conf() {
	printf '%s\n' "# written by the rig's service checks" "$@" > "$conf"
}
# workload NAME ARGS...: run pghot-workload as the unprivileged user in the background, its
# output in $work/NAME.out; sets wl_pid (the workload's pid) and wl_sub.
workload() {
	local name=$1
	shift
	: > "$work/$name.out"
	chmod 0644 "$work/$name.out"
	info "workload $name: runuser -u $user -- pghot-workload $*"
	runuser -u "$user" -- /opt/pghot-rig/pghot-workload "$@" > "$work/$name.out" 2>&1 &
	wl_sub=$!
	wl_pid=
	wait_for 10 pgrep -u "$user" -x pghot-workload
	wl_pid=$(pgrep -u "$user" -x pghot-workload | head -n 1)
}
# placed NAME: wait until the workload printed its first report (its buffer is on node 2).
placed() { wait_for 60 grep -q '^t=' "$work/$1.out"; }

wl_common=(--size-mb "$RIG_SIZE_MB" --hot-mb "$RIG_HOT_MB" --node 2 --duration "$RIG_DURATION" --threads 1 --report-ms 500)
info "kernel $(uname -r), systemd $(systemctl --version | head -n 1), tiers: $(cat /sys/devices/virtual/memory_tiering/memory_tier*/nodelist 2>/dev/null | tr '\n' ' ')"
figure boot_to_checks_s "$(now)"

# --- install ------------------------------------------------------------------------------
t0=$(now)
apt-get install -y -q "$deb" > "$work/apt-install.out" 2>&1
rc=$?
sed 's/^/rig: apt: /' "$work/apt-install.out" | tail -n 5
enabled=$(systemctl is-enabled pghotd 2>&1)
ok=1
[ "$rc" = 0 ] && getent group pghot >/dev/null && [ -x /usr/bin/pghotd ] && [ "$enabled" = disabled ] && ok=0
check installed "$ok" "apt_rc=$rc group=$(getent group pghot) is_enabled=$enabled version=$(dpkg-query -W -f '${Version}' pghotd 2>/dev/null)"
figure install_s "$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')"
usermod -a -G pghot "$user"
figure exposure "$(systemd-analyze security pghotd --no-pager 2>/dev/null | sed -n 's/.*Overall exposure level for pghotd.service: \([0-9.]*\).*/\1/p')"

# --- softdirty on an unprivileged user's process, a followed (comm) scope -------------------
# pghotd starts first and follows the workload in: what an operator configures once.
write_conf 'enabled_sources = ["softdirty"]' 'comm = "^pghot-workload$"' \
	'readonly_socket = "/run/pghotd/pghotd-ro.sock"'
mark "$work/c.softdirty"
t0=$(now)
systemctl enable --now pghotd > "$work/enable.out" 2>&1
rc=$?
t1=$(now)
# READY=1: the start job finishes only once pghotd says so. Right when `systemctl start`
# returns, the socket answers (pghotd binds it before READY=1) and systemd holds the STATUS=
# text that came in the same datagram as READY=1; under Type=simple the start would return
# at the fork, before either. (Journal timestamps cannot order the two: pghotd's lines and its
# notifications reach systemd-journald and systemd on different sockets.)
status_first=$(pghotctl status > "$work/status0.out" 2>&1 && echo ok || echo fail)
status_text=$(systemctl show -P StatusText pghotd)
active=$(systemctl is-active pghotd)
type=$(systemctl show -P Type pghotd)
active_us=$(systemctl show -P ActiveEnterTimestampMonotonic pghotd)
exec_us=$(systemctl show -P ExecMainStartTimestampMonotonic pghotd)
activation_ms=$(((active_us - exec_us) / 1000))
ok=1
[ "$rc" = 0 ] && [ "$active" = active ] && [ "$type" = notify ] && [ -n "$status_text" ] &&
	[ "$status_first" = ok ] && [ "$activation_ms" -gt 0 ] && ok=0
check ready_after_notify "$ok" "start_rc=$rc active=$active type=$type socket_at_once=$status_first exec_to_active_ms=$activation_ms status=\"$status_text\""
figure exec_to_active_ms "$activation_ms"
# The unit's CPUSchedulingPolicy=batch reaches every thread: their wake-ups do not preempt the
# programs they manage (systemd/pghotd.service).
pol=$(policies "$(systemctl show -P MainPID pghotd)")
ok=1
[ "$pol" = batch ] && ok=0
check sched_batch "$ok" "policies of pghotd's threads: ${pol:-none} ($(ls /proc/"$(systemctl show -P MainPID pghotd)"/task 2> /dev/null | wc -l) threads)"
figure start_s "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')"

workload softdirty "${wl_common[@]}" --pattern hot-scattered
placed softdirty
# Who may talk to the socket, asked while pghotd works.
out_user=$(
	runuser -u "$user" -- pghotctl status > "$work/u-status.out" 2>&1 &&
		runuser -u "$user" -- pghotctl stats > "$work/u-stats.out" 2>&1 &&
		runuser -u "$user" -- pghotctl top --once > "$work/u-top.out" 2>&1 && echo ok
)
ok=1
[ "$out_user" = ok ] && grep -q 'source_softdirty_samples' "$work/u-stats.out" && [ -s "$work/u-top.out" ] && ok=0
check group_member_allowed "$ok" "status+stats+top --once as $user (groups: $(id -nG "$user" | tr ' ' ,)): ${out_user:-fail}; top lines=$(wc -l < "$work/u-top.out")"
runuser -u "$outsider" -- pghotctl status > "$work/o-status.out" 2>&1
rc=$?
msg=$(head -n 3 "$work/o-status.out" | tr '\n' ' ')
ok=1
[ "$rc" != 0 ] && grep -qi 'permission denied' "$work/o-status.out" && grep -q 'pghot' "$work/o-status.out" && ok=0
check outsider_refused "$ok" "rc=$rc message: $msg"
# A monitoring user in pghot-monitor only: the read-only socket (given that group by the
# sandboxed service, through SupplementaryGroups) answers its reads and refuses its changes,
# and root's too; the control socket stays closed to it. Exit codes from pghotctl --help.
monitor=pghot-monitor-user
useradd -M -N -G pghot-monitor "$monitor" 2>/dev/null
ro=/run/pghotd/pghotd-ro.sock
ro_group=$(stat -c %G "$ro" 2>/dev/null)
runuser -u "$monitor" -- pghotctl --socket "$ro" stats > "$work/m-stats.out" 2>&1
m_read=$?
runuser -u "$monitor" -- pghotctl --socket "$ro" pause > "$work/m-pause.out" 2>&1
m_pause=$?
runuser -u "$monitor" -- pghotctl status > "$work/m-ctl.out" 2>&1
m_ctl=$?
pghotctl --socket "$ro" pause > "$work/r-pause.out" 2>&1
r_pause=$?
promotion=$(pghotctl status | sed -n 's/^promotion: //p')
ok=1
[ "$ro_group" = pghot-monitor ] && [ "$m_read" = 0 ] && grep -q source_softdirty_samples "$work/m-stats.out" &&
	[ "$m_pause" = 5 ] && grep -q 'read-only socket' "$work/m-pause.out" && [ "$m_ctl" = 4 ] &&
	[ "$r_pause" = 5 ] && [ "$promotion" = running ] && ok=0
check monitor_read_only "$ok" "socket_group=$ro_group stats_rc=$m_read pause_rc=$m_pause control_socket_rc=$m_ctl root_pause_on_ro_rc=$r_pause promotion=$promotion"

wait "$wl_sub"
hot=$(json_num "$work/softdirty.out" hot_fast_pct)
over=$(json_num "$work/softdirty.out" cold_fast_mb)
promoted=$(counter pgpromote_success)
samples=$(counter source_softdirty_samples)
ok=1
denied "$work/c.softdirty" || { [ "${promoted:-0}" -gt 0 ] && ge "$hot" 90 && ok=0; }
check softdirty_non_root "$ok" "hot_fast_pct=${hot:--} cold_fast_mb=${over:--} samples=${samples:--} pgpromote_success=${promoted:--} permission_errors=$(denied "$work/c.softdirty" && echo yes || echo no)"
figure softdirty_hot_fast_pct "${hot:--}"

# --- reload ---------------------------------------------------------------------------------
pid_before=$(systemctl show -P MainPID pghotd)
write_conf 'enabled_sources = ["softdirty"]' 'comm = "^pghot-workload$"' 'freq_threshold = 3'
systemctl reload pghotd
rc=$?
got=
wait_for 3 sh -c 'pghotctl config get freq_threshold | grep -qw 3' && got=3
[ -n "$got" ] || got=$(pghotctl config get freq_threshold 2>&1 | tr '\n' ' ')
ok=1
[ "$rc" = 0 ] && [ "$got" = 3 ] && [ "$(systemctl show -P MainPID pghotd)" = "$pid_before" ] && ok=0
check reload_applies "$ok" "reload_rc=$rc freq_threshold=$got main_pid=$pid_before->$(systemctl show -P MainPID pghotd)"

# --- damon on an unprivileged user's process, by pid ---------------------------------------
# The workload is placed first, then its pid goes into the config: how an operator adds one
# process. DAMON needs its sysfs (ReadWritePaths) and the kdamond it starts.
# Twice as long as the others: it must outlive pghotd's restart and the watch below (pghotd
# ends with its last explicit pid, and its counters with it).
workload damon --size-mb "$RIG_SIZE_MB" --hot-mb "$RIG_HOT_MB" --node 2 --duration $((2 * RIG_DURATION)) \
	--threads 1 --report-ms 500 --pattern hot-scattered
placed damon
write_conf 'enabled_sources = ["damon"]' "pids = [$wl_pid]"
mark "$work/c.damon"
systemctl restart pghotd
rc=$?
sleep "$RIG_DAMON_WATCH_S"
promoted=$(counter pgpromote_success)
samples=$(counter source_damon_samples)
# The stop check, with DAMON running: the kdamond must be torn down as well.
t0=$(now)
systemctl stop pghotd
stop_rc=$?
t1=$(now)
stop_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
result=$(systemctl show -P Result pghotd)
ok=1
[ "$stop_rc" = 0 ] && ! ge "$stop_s" 2 && [ "$result" = success ] && ! pgrep -x pghotd >/dev/null && ok=0
check stop_under_2s "$ok" "stop_s=$stop_s rc=$stop_rc result=$result"
figure stop_s "$stop_s"
wait "$wl_sub"
hot=$(json_num "$work/damon.out" hot_fast_pct)
over=$(json_num "$work/damon.out" cold_fast_mb)
ok=1
denied "$work/c.damon" || { [ "$rc" = 0 ] && [ "${samples:-0}" -gt 0 ] && [ "${promoted:-0}" -gt 0 ] && ok=0; }
check damon_non_root "$ok" "restart_rc=$rc hot_fast_pct=${hot:--} cold_fast_mb=${over:--} samples=${samples:--} pgpromote_success=${promoted:--} permission_errors=$(denied "$work/c.damon" && echo yes || echo no)"
figure damon_hot_fast_pct "${hot:--}"

# --- THP splitting through debugfs ----------------------------------------------------------
# Emulated samples through a FIFO (the trace source), THP=always, the hot set as 64 KiB
# clusters inside 2 MiB THPs: admission must split them through
# /sys/kernel/debug/split_huge_pages before promoting, as the rig's pghotd-thp-split does.
echo always > /sys/kernel/mm/transparent_hugepage/enabled
rm -f "$work/samples.fifo"
mkfifo -m 0620 "$work/samples.fifo"
chgrp "$user" "$work/samples.fifo"
write_conf "enabled_sources = [\"trace:$work/samples.fifo\"]" 'freq_threshold = 1' '[admission]' 'split = true'
mark "$work/c.thp"
split_before=$(vm thp_split_page)
migrated_before=$(vm pgmigrate_success)
systemctl start pghotd
rc=$?
workload thp --size-mb "$RIG_SIZE_MB" --hot-mb 4 --node 2 --duration "$RIG_DURATION" --threads 1 --report-ms 500 \
	--pattern hot-clusters --thp --emit-samples "$work/samples.fifo" --sample-period 100
wait "$wl_sub"
# The trace source ends with the FIFO's writer: pghotd exits by itself.
wait_for 5 sh -c '! systemctl is-active -q pghotd'
hot=$(json_num "$work/thp.out" hot_fast_pct)
splits=$(($(vm thp_split_page) - split_before))
mb=$((($(vm pgmigrate_success) - migrated_before) * 4 / 1024))
exit_line=$(journal_since "$work/c.thp" | grep -E 'thp_split|admission' | tail -n 1)
ok=1
denied "$work/c.thp" || { [ "$rc" = 0 ] && [ "$splits" -gt 0 ] && ge "$hot" 95 && [ "$mb" -le 6 ] && ok=0; }
check thp_split_debugfs "$ok" "start_rc=$rc thp_split_page=$splits hot_fast_pct=${hot:--} mb_migrated=$mb (hot 4 MiB) permission_errors=$(denied "$work/c.thp" && echo yes || echo no) ${exit_line:+last: $exit_line}"
echo madvise > /sys/kernel/mm/transparent_hugepage/enabled

# --- a competing promoter: NUMA balancing in memory-tiering mode -------------------------------
# kernel.numa_balancing = 2 (NUMA_BALANCING_MEMORY_TIERING, include/linux/sched/sysctl.h): the
# kernel promotes the same pages on hint faults. pghotd must say so once in the journal (not
# again at its 30 s recheck), in `pghotctl status` and as the conflicts metric; with
# `conflicts = "refuse"` it must exit 3 naming the setting (RestartPreventExitStatus keeps
# systemd from retrying).
numab_before=$(sysctl -n kernel.numa_balancing)
sysctl -q kernel.numa_balancing=2
write_conf 'enabled_sources = ["softdirty"]' 'comm = "^pghot-workload$"' 'metrics_listen = "127.0.0.1:9464"'
mark "$work/c.conflict"
systemctl start pghotd
rc=$?
wait_for 10 pghotctl status
# Past one recheck (conflicts::RECHECK_EVERY, 30 s), so a repeated log line would show.
sleep 35
pghotctl status > "$work/conflict-status.out" 2>&1
shown=$(grep -A1 '^competing promoters' "$work/conflict-status.out" | grep -c 'numa_balancing')
logged=$(journal_since "$work/c.conflict" | grep -c 'numa_balancing')
# The metrics endpoint with bash's /dev/tcp: the guest has no HTTP client.
metric=$(
	exec 3<> /dev/tcp/127.0.0.1/9464 &&
		printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 &&
		timeout 5 cat <&3 | tr -d '\r' | grep -E '^pghotd_conflicts(_[a-z]+)?\{[^}]*kind="numa_balancing"' | awk '{ print $NF }'
)
systemctl stop pghotd
ok=1
[ "$rc" = 0 ] && [ "$shown" -ge 1 ] && [ "$logged" = 1 ] && [ "$metric" = 1 ] && ok=0
check conflict_numab2_warned "$ok" "start_rc=$rc status_lines=$shown journal_lines=$logged metric=${metric:-none} log: $(journal_since "$work/c.conflict" | grep -m1 'numa_balancing' | cut -c1-200)"
write_conf 'enabled_sources = ["softdirty"]' 'comm = "^pghot-workload$"' 'conflicts = "refuse"'
mark "$work/c.refuse"
systemctl start pghotd > "$work/refuse-start.out" 2>&1
rc=$?
wait_for 10 sh -c '! systemctl is-active -q pghotd'
code=$(systemctl show -P ExecMainStatus pghotd)
restarts=$(systemctl show -P NRestarts pghotd)
named=$(journal_since "$work/c.refuse" | grep -c 'conflicts')
ok=1
[ "$rc" != 0 ] && [ "$code" = 3 ] && [ "$named" -ge 1 ] && ok=0
check conflict_refuse_exits_3 "$ok" "start_rc=$rc exit_status=$code restarts=$restarts lines_naming_conflicts=$named log: $(journal_since "$work/c.refuse" | grep -m1 -i 'refus' | cut -c1-200)"
systemctl reset-failed pghotd 2>/dev/null
sysctl -q kernel.numa_balancing="$numab_before"

# --- the journal ----------------------------------------------------------------------------
journalctl -u pghotd -o cat --no-pager _COMM=pghotd > "$work/journal.txt" 2>/dev/null
lines=$(wc -l < "$work/journal.txt")
esc=$(grep -c $'\x1b' "$work/journal.txt")
# A second timestamp: RFC 3339 dates or tracing's uptime stamps at the start of the message.
stamped=$(grep -cE '^\s*([0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:|[0-9]+\.[0-9]+s )' "$work/journal.txt")
warn_prio=$(journalctl -u pghotd -o json --no-pager _COMM=pghotd 2>/dev/null | grep -c '"PRIORITY":"4"')
ok=1
[ "$lines" -gt 5 ] && [ "$esc" = 0 ] && [ "$stamped" = 0 ] && ok=0
check journal_readable "$ok" "lines=$lines with_escape_codes=$esc with_timestamp=$stamped warning_priority_lines=$warn_prio first: $(head -n 1 "$work/journal.txt")"
[ "$ok" = 0 ] || grep -nE $'\x1b|^\s*[0-9]{4}-' "$work/journal.txt" | head -n 5 | cat -v | sed 's/^/rig: journal-line: /'

# --- remove, purge, reinstall ---------------------------------------------------------------
write_conf 'enabled_sources = ["softdirty"]' 'comm = "^pghot-workload$"'
systemctl start pghotd
apt-get remove -y -q pghotd > "$work/apt-remove.out" 2>&1
rc=$?
active=$(systemctl is-active pghotd 2>&1)
ok=1
[ "$rc" = 0 ] && [ "$active" != active ] && ! pgrep -x pghotd >/dev/null && [ -f "$conf" ] && ok=0
check remove_stops "$ok" "rc=$rc is_active=$active process=$(pgrep -x pghotd || echo none) config_kept=$([ -f "$conf" ] && echo yes || echo no)"
apt-get purge -y -q pghotd > "$work/apt-purge.out" 2>&1
rc=$?
ok=1
[ "$rc" = 0 ] && [ ! -e /etc/pghotd ] && ok=0
check purge_removes_config "$ok" "rc=$rc /etc/pghotd=$([ -e /etc/pghotd ] && ls /etc/pghotd | tr '\n' ' ' || echo gone)"
apt-get install -y -q "$deb" > "$work/apt-reinstall.out" 2>&1
rc=$?
write_conf 'enabled_sources = ["softdirty"]' 'comm = "^pghot-workload$"'
systemctl enable --now pghotd
rc2=$?
ok=1
[ "$rc" = 0 ] && [ "$rc2" = 0 ] && systemctl is-active -q pghotd && runuser -u "$user" -- pghotctl status > /dev/null 2>&1 && ok=0
check reinstall_works "$ok" "install_rc=$rc enable_rc=$rc2 is_active=$(systemctl is-active pghotd)"
systemctl stop pghotd
echo SERVICE-END
