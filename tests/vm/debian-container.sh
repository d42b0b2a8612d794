#!/bin/bash
# The container checks, run inside the Debian guest (`tests/vm/rig.sh --guest debian
# container`) by pghot-rig.service. The host staged under /opt/pghot-rig/container the image's
# build context (packaging/container/build-prebuilt.sh: static pghotd and pghotctl, the
# default config, Containerfile.prebuilt as Containerfile), packaging/container/seccomp.json
# and packaging/kubernetes/*.yaml.
#
# With podman (Debian 12's 4.3, rootful) it builds pghotd's image and an app image (the static
# pghot-workload as a user 1000 process whose buffer is placed on the slow node 2), then runs
# the shipped pod manifests' pods (see play below): the app and pghotd in one pid namespace
# (shareProcessNamespace), pghotd's default scope, the manifests' configs and capabilities.
# One line per check, as the service checks print them:
#   SERVICE-CHECK NAME true|false DETAIL...
#   SERVICE-FIGURE NAME VALUE
#   SERVICE-END
set -u
export LC_ALL=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# shellcheck source=/dev/null # written by the host
. /etc/pghot-rig.conf
# shellcheck source=tests/vm/guest-lib.sh
. /opt/pghot-rig/guest-lib.sh

ctx=/opt/pghot-rig/container
work=/run/pghot-rig
mkdir -p "$work"
# The guest's root is the initramfs's tmpfs: vfs storage needs nothing from it (the images
# are two static binaries each). Set in storage.conf, not per command: podman's database
# records the driver it was first used with and refuses any other.
mkdir -p /etc/containers
printf '%s\n' '[storage]' 'driver = "vfs"' 'runroot = "/run/containers/storage"' \
	'graphroot = "/var/lib/containers/storage"' > /etc/containers/storage.conf
rm -rf /var/lib/containers/storage /run/containers/storage
# The guest has no D-Bus, so podman cannot ask systemd for cgroups: it writes them itself. Its
# root is the initramfs's rootfs, which pivot_root(2) cannot move away from (EINVAL): the
# runtime enters a container's root with a mount move instead (no_pivot_root).
printf '%s\n' '[engine]' 'cgroup_manager = "cgroupfs"' 'events_logger = "file"' 'no_pivot_root = true' \
	> /etc/containers/containers.conf
pm() { podman "$@"; }
pghotd_image=registry.example/pghotd:0.1.0
app_image=registry.example/app:1
# The app runs this long; pghotd is asked for its counters before it ends.
app_s=$((3 * RIG_DURATION))

# explain_failure: what follows a false check (guest-lib.sh): the containers' last log lines.
explain_failure() {
	for c in $(pm ps -a --format '{{.Names}}' 2>/dev/null); do
		pm logs "$c" 2>&1 | tail -n 15 | sed "s/^/rig: log $c: /"
	done
}

info "kernel $(uname -r), $(pm --version 2>&1), tiers: $(cat /sys/devices/virtual/memory_tiering/memory_tier*/nodelist 2>/dev/null | tr '\n' ' ')"

# --- images -------------------------------------------------------------------------------
t0=$(now)
pm build -q -f "$ctx/pghotd/Containerfile" -t "$pghotd_image" "$ctx/pghotd" > "$work/build-pghotd.out" 2>&1
rc1=$?
mkdir -p "$work/app"
install -m 0755 /opt/pghot-rig/pghot-workload "$work/app/pghot-workload"
cat > "$work/app/Containerfile" <<EOF
FROM scratch
COPY pghot-workload /usr/bin/pghot-workload
USER 1000:1000
ENTRYPOINT ["/usr/bin/pghot-workload"]
CMD ["--size-mb", "$RIG_SIZE_MB", "--hot-mb", "$RIG_HOT_MB", "--node", "2", "--duration", "$app_s", "--threads", "1", "--report-ms", "1000", "--pattern", "hot-scattered"]
EOF
pm build -q -t "$app_image" "$work/app" > "$work/build-app.out" 2>&1
rc2=$?
size=$(pm image inspect -f '{{.Size}}' "$pghotd_image" 2>/dev/null)
ok=1
[ "$rc1" = 0 ] && [ "$rc2" = 0 ] && [ -n "$size" ] && ok=0
check image_built "$ok" "pghotd_rc=$rc1 app_rc=$rc2 pghotd_image_bytes=${size:-none} $(tail -n 2 "$work/build-pghotd.out" | tr '\n' ' ')"
figure image_build_s "$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')"
figure pghotd_image_mb "$(awk -v b="${size:-0}" 'BEGIN { printf "%.1f", b / 1048576 }')"

mkdir -p "$work/seccomp"
cp "$ctx/seccomp.json" "$work/seccomp/pghotd.json"
# The same profile with SCMP_ACT_LOG for what it does not allow: the kernel logs each such
# call (kernel/seccomp.c, seccomp_log) instead of failing it, so a run shows what is missing.
# (An errno goes only with SCMP_ACT_ERRNO: crun refuses the profile otherwise.)
sed -e 's/"defaultAction": *"SCMP_ACT_ERRNO"/"defaultAction": "SCMP_ACT_LOG"/' -e '/"defaultErrnoRet"/d' \
	"$ctx/seccomp.json" > "$work/seccomp/pghotd-log.json"

# play MANIFEST POD [PROFILE]: the manifest's pod with podman run: the app container, then
# pghotd in the app's pid namespace (what shareProcessNamespace gives a pod) with the
# manifest's ConfigMap as its config, its added capabilities (all others dropped), a read-only
# root, no privilege escalation, /run/pghotd on a tmpfs (the emptyDir), DAMON's sysfs where the
# manifest mounts it, and seccomp PROFILE (the runtime's default without one). podman kube
# play would read the manifest itself, but in this guest its pods fail to start (crun:
# mknod /dev/null: EPERM, in the pod's infra container) where plain containers run.
play() {
	local manifest=$1 pod=$2 profile=${3:-} caps c
	local args=(--network none --pid "container:$pod-app" --cap-drop all --read-only
		--security-opt no-new-privileges --tmpfs /run/pghotd -v "$work/$pod.conf:/etc/pghotd:ro")
	mkdir -p "$work/$pod.conf"
	# The ConfigMap's pghotd.toml: the lines after `pghotd.toml: |`, four spaces deeper.
	sed -n '/pghotd.toml: |/,/^---/{/pghotd.toml: |/d;/^---/d;s/^    //p}' "$manifest" > "$work/$pod.conf/pghotd.toml"
	caps=$(sed -n 's/.*add: \[\(.*\)\].*/\1/p' "$manifest" | tr -d '" ' | tr ',' ' ')
	for c in $caps; do args+=(--cap-add "$c"); done
	! grep -q 'mountPath: /sys/kernel/mm/damon' "$manifest" || args+=(-v /sys/kernel/mm/damon:/sys/kernel/mm/damon)
	[ -z "$profile" ] || args+=(--security-opt "seccomp=$work/seccomp/$profile")
	info "$pod: $manifest: caps ${caps:-none}, seccomp ${profile:-runtime default}"
	# The app measures where its own pages are with move_pages(2) queries (the hot_fast_pct
	# it reports), which the runtime's default profile refuses too: it runs unconfined. A real
	# app needs no such thing.
	pm run -d --name "$pod-app" --network none --security-opt seccomp=unconfined "$app_image" \
		> /dev/null 2> "$work/play.out" &&
		pm run -d --name "$pod-pghotd" "${args[@]}" "$pghotd_image" --config /etc/pghotd/pghotd.toml \
			> /dev/null 2>> "$work/play.out" ||
		sed 's/^/rig: play: /' "$work/play.out"
}
down() {
	pm rm -f "$1-pghotd" > /dev/null 2>&1
	pm rm -f "$1-app" > /dev/null 2>&1
}
# status_of CONTAINER FIELD: a field of its main process's /proc/PID/status.
status_of() {
	local pid
	pid=$(pm inspect -f '{{.State.Pid}}' "$1" 2>/dev/null)
	[ -n "$pid" ] && [ "$pid" != 0 ] && awk -v f="$2:" '$1 == f { print $2 }' "/proc/$pid/status"
}
# run_app_with POD: waits for the app to end while pghotd works, keeping pghotd's last
# counters in $work/POD.stats; the app's output lands in $work/POD.app.
run_app_with() {
	local pod=$1 end
	end=$(awk -v t="$(now)" -v s="$((app_s + 60))" 'BEGIN { print t + s }')
	while [ "$(pm inspect -f '{{.State.Running}}' "$pod-app" 2>/dev/null)" = true ] && ! ge "$(now)" "$end"; do
		pm exec "$pod-pghotd" /usr/bin/pghotctl stats > "$work/$pod.stats.new" 2>/dev/null &&
			mv "$work/$pod.stats.new" "$work/$pod.stats"
		sleep 2
	done
	pm logs "$pod-app" > "$work/$pod.app" 2>&1
}
stat_of() { awk -v n="$2" '$1 == n { print $2 }' "$work/$1.stats" 2>/dev/null; }

# --- the runtime's default seccomp profile refuses move_pages --------------------------------
# The least-privilege manifest without its seccomp annotation: podman's default profile. pghotd
# must stop at once with exit 3 and say what to do, not run without moving anything.
pod=app-with-pghotd-lp
play "$ctx/sidecar-least-privilege.yaml" "$pod"
wait_for 60 sh -c "[ \"\$(podman inspect -f '{{.State.Running}}' $pod-pghotd)\" = false ]"
code=$(pm inspect -f '{{.State.ExitCode}}' "$pod-pghotd" 2>/dev/null)
pm logs "$pod-pghotd" > "$work/lp-default.log" 2>&1
said=$(grep -c 'seccomp' "$work/lp-default.log")
ok=1
[ "$code" = 3 ] && [ "$said" -ge 1 ] && ok=0
check runtime_default_refused "$ok" "exit_code=${code:-none} log: $(grep -m1 'move_pages' "$work/lp-default.log" | cut -c1-240)"
down "$pod"

# --- least privilege: soft-dirty, CAP_SYS_PTRACE + CAP_DAC_OVERRIDE, pghotd.json -------------
t0=$(now)
play "$ctx/sidecar-least-privilege.yaml" "$pod" pghotd.json
wait_for 30 sh -c "podman exec $pod-pghotd /usr/bin/pghotctl status"
seccomp=$(status_of "$pod-pghotd" Seccomp)
capeff=$(status_of "$pod-pghotd" CapEff)
app_uid=$(status_of "$pod-app" Uid)
run_app_with "$pod"
hot=$(json_num "$work/$pod.app" hot_fast_pct)
cold=$(json_num "$work/$pod.app" cold_fast_mb)
promoted=$(stat_of "$pod" pgpromote_success)
denied=$(stat_of "$pod" softdirty_denied)
# CAP_DAC_OVERRIDE is bit 1, CAP_SYS_PTRACE bit 19 (include/uapi/linux/capability.h).
ok=1
[ "$seccomp" = 2 ] && [ "$capeff" = 0000000000080002 ] && [ "${promoted:-0}" -gt 0 ] && ge "$hot" 90 && ok=0
check least_privilege_promotes "$ok" "seccomp=${seccomp:-?} cap_eff=${capeff:-?} app_uid=$(echo "$app_uid" | cut -f1) hot_fast_pct=${hot:--} cold_fast_mb=${cold:--} pgpromote_success=${promoted:--} softdirty_denied=${denied:--}"
figure least_privilege_hot_fast_pct "${hot:--}"
figure least_privilege_s "$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')"
down "$pod"

# --- CAP_SYS_ADMIN, auto source, every call the profile does not allow logged ---------------
# sidecar.yaml as shipped, with pghotd-log.json: whatever source auto picks here, a system
# call pghotd makes that pghotd.json would refuse shows in the kernel's audit log.
since=$(date '+%Y-%m-%d %H:%M:%S')
pod=app-with-pghotd
play "$ctx/sidecar.yaml" "$pod" pghotd-log.json
wait_for 30 sh -c "podman exec $pod-pghotd /usr/bin/pghotctl status"
pm exec "$pod-pghotd" /usr/bin/pghotctl status > "$work/admin-status.out" 2>&1
run_app_with "$pod"
hot=$(json_num "$work/$pod.app" hot_fast_pct)
promoted=$(stat_of "$pod" pgpromote_success)
source=$(sed -n 's/^sources\?: *//p' "$work/admin-status.out" | head -n 1)
# The control that the log is seen at all: the workload, under the same profile, makes calls
# pghotd does not (mbind, to place its buffer), so it must show there.
pm run --rm --network none --security-opt seccomp="$work/seccomp/pghotd-log.json" "$app_image" \
	--size-mb 8 --hot-mb 1 --node 2 --duration 1 --pattern hot-scattered > /dev/null 2>&1
sleep 1
# seccomp_log lines: audit records, in the kernel log (no audit daemon) and in journald.
{
	journalctl -q --no-pager _TRANSPORT=audit --since "$since" 2>/dev/null
	dmesg 2>/dev/null
} | grep -E 'type=1326|SECCOMP' > "$work/seccomp-log-all.txt"
grep 'comm="pghotd"' "$work/seccomp-log-all.txt" > "$work/seccomp-log.txt"
control=$(grep -c 'comm="pghot-workload"' "$work/seccomp-log-all.txt")
calls=$(grep -o 'syscall=[0-9]*' "$work/seccomp-log.txt" | sort -u | tr '\n' ' ')
ok=1
[ "${promoted:-0}" -gt 0 ] && [ "$control" -gt 0 ] && [ ! -s "$work/seccomp-log.txt" ] && ok=0
check sys_admin_profile_complete "$ok" "source=${source:-?} hot_fast_pct=${hot:--} pgpromote_success=${promoted:--} calls_outside_profile=${calls:-none} control_lines=$control"
figure sys_admin_hot_fast_pct "${hot:--}"
down "$pod"

echo SERVICE-END
