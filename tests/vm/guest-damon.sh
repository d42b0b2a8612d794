# shellcheck shell=sh
# The kernel's DAMON as a promoter, for the rig's guests (sourced by rig-init.sh in the busybox
# guest, as /etc/pghot-damon.sh, and by debian-app.sh in the Debian guest). The caller defines
# info and err and sets RIG_NODE (the slow node), RIG_TARGET_NID, RIG_DAMON_MAX_REGIONS,
# RIG_DAMON_QUOTA_MB and RIG_DAMON_RESET_MS.

# put VALUE FILE: write VALUE to the sysfs FILE; the first failure is kept in put_failed.
put_failed=
put() {
	if ! echo "$1" 2>/dev/null > "$2"; then
		[ -n "$put_failed" ] || put_failed="$2 <- $1"
	fi
}
# damon_on: one kdamond, paddr ops over node RIG_NODE's physical memory, one migrate_hot scheme
# to RIG_TARGET_NID with an explicit access pattern and a size quota; sets kdamond_pid.
damon_on() {
	D=/sys/kernel/mm/damon/admin/kdamonds
	C=$D/0/contexts/0
	S=$C/schemes/0
	bs=$((0x$(cat /sys/devices/system/memory/block_size_bytes)))
	# The node's physical ranges: runs of consecutive memory block indices x block size.
	runs=$(for m in /sys/devices/system/node/node"$RIG_NODE"/memory[0-9]*; do echo "${m##*memory}"; done | sort -n |
		awk 'NR == 1 { s = $1; p = $1; next } $1 == p + 1 { p = $1; next } { print s, p + 1; s = $1; p = $1 } END { if (NR) print s, p + 1 }')
	put 1 "$D/nr_kdamonds"
	put 1 "$D/0/contexts/nr_contexts"
	put paddr "$C/operations"
	put "$RIG_DAMON_MAX_REGIONS" "$C/monitoring_attrs/nr_regions/max"
	put 1 "$C/targets/nr_targets"
	put "$(echo "$runs" | grep -c .)" "$C/targets/0/regions/nr_regions"
	i=0
	ranges=
	while read -r first end; do
		put $((first * bs)) "$C/targets/0/regions/$i/start"
		put $((end * bs)) "$C/targets/0/regions/$i/end"
		ranges="$ranges $(printf '0x%x-0x%x' $((first * bs)) $((end * bs)))"
		i=$((i + 1))
	done <<-EOR
		$runs
	EOR
	put 1 "$C/schemes/nr_schemes"
	put migrate_hot "$S/action"
	put "$RIG_TARGET_NID" "$S/target_nid"
	# Every access_pattern min/max defaults to 0/0, which matches (almost) nothing: set all six.
	put 0 "$S/access_pattern/sz/min"
	put 18446744073709551615 "$S/access_pattern/sz/max"
	put 1 "$S/access_pattern/nr_accesses/min"
	put 4294967295 "$S/access_pattern/nr_accesses/max"
	put 0 "$S/access_pattern/age/min"
	put 4294967295 "$S/access_pattern/age/max"
	# Size quota per reset interval, hottest (by nr_accesses) first when it bites.
	put $((RIG_DAMON_QUOTA_MB * 1048576)) "$S/quotas/bytes"
	put "$RIG_DAMON_RESET_MS" "$S/quotas/reset_interval_ms"
	put 0 "$S/quotas/weights/sz_permil"
	put 1000 "$S/quotas/weights/nr_accesses_permil"
	put 0 "$S/quotas/weights/age_permil"
	put on "$D/0/state"
	[ -z "$put_failed" ] || err "DAMON set-up failed at $put_failed"
	kdamond_pid=$(cat "$D/0/pid" 2>/dev/null)
	info "damon: paddr regions$ranges migrate_hot -> node $RIG_TARGET_NID, nr_accesses >= 1, quota ${RIG_DAMON_QUOTA_MB} MiB / ${RIG_DAMON_RESET_MS} ms, sample/aggr $(cat "$C/monitoring_attrs/intervals/sample_us")/$(cat "$C/monitoring_attrs/intervals/aggr_us") us, regions $(cat "$C/monitoring_attrs/nr_regions/min")..$(cat "$C/monitoring_attrs/nr_regions/max"); state=$(cat "$D/0/state") kdamond pid ${kdamond_pid:--}"
}

# damon_off: the scheme's statistics into damon_stats (damon_nr_tried=... ...), then DAMON off.
damon_off() {
	S=/sys/kernel/mm/damon/admin/kdamonds/0/contexts/0/schemes/0
	echo update_schemes_stats > /sys/kernel/mm/damon/admin/kdamonds/0/state 2>/dev/null
	damon_stats=
	for f in nr_tried sz_tried nr_applied sz_applied qt_exceeds; do
		damon_stats="$damon_stats damon_$f=$(cat $S/stats/$f 2>/dev/null || echo -)"
	done
	echo off > /sys/kernel/mm/damon/admin/kdamonds/0/state || err "cannot turn DAMON off"
}
