#!/bin/sh
# Issue 20's bar for move_shared, on the tiered guest: a shared anonymous mapping of two
# processes on the slow node 2 is counted pgpromote_fail_shared without move_shared and
# promoted with it. Run in the Debian guest as the exec scenario:
#
#   tests/vm/rig.sh --guest debian exec --exec tests/vm/shared-pages.sh
#
# A perl process (perl-base: syscall and fork are built in) maps 64 pages MAP_SHARED |
# MAP_ANONYMOUS under numactl --membind=2, fills them, forks; the child writes every page, so
# both map them (numa_maps: mapmax=2 N2=64). The installed pghotd replays a trace that samples
# each of the child's pages twice on node 2, first with the defaults, then with --move-shared
# true. One line per check: SHARED-CHECK NAME true|false DETAIL.
set -u
PAGES=64
work=$(mktemp -d)
dpkg -i /opt/pghot-rig/pghotd.deb >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log"; exit 1; }

check() { echo "SHARED-CHECK $1 $2 $3"; }

numactl --membind=2 perl -e '
	my ($pages, $ps) = (shift, 4096);
	my $len = $pages * $ps;
	# mmap(NULL, len, PROT_READ|PROT_WRITE, MAP_SHARED|MAP_ANONYMOUS, -1, 0) on x86_64.
	my $addr = syscall(9, 0, $len, 3, 0x21, -1, 0);
	die "mmap: $!\n" if $addr == -1;
	open(my $rnd, "<", "/dev/urandom") or die;
	syscall(0, fileno($rnd), $addr, $len) == $len or die "fill: $!\n";
	my $child = fork() // die "fork: $!\n";
	if ($child == 0) {
		# read(2) from /dev/zero into the mapping writes every page: the child maps them
		# too (the same pages: MAP_SHARED, no copy on write).
		open(my $zero, "<", "/dev/zero") or die;
		syscall(0, fileno($zero), $addr, $len) == $len or die "touch: $!\n";
		$| = 1;
		printf "child %d addr 0x%x\n", $$, $addr;
		sleep 600;
		exit 0;
	}
	sleep 600;
' "$PAGES" >"$work/perl.out" 2>&1 &
holder=$!
i=0
while ! grep -q '^child ' "$work/perl.out" 2>/dev/null && [ $i -lt 100 ]; do
	sleep 0.1
	i=$((i + 1))
done
read -r _ child _ addr <"$work/perl.out" || { cat "$work/perl.out"; exit 1; }
addr_dec=$(printf '%d' "$addr")
maps_line() { grep "^$(printf '%x' "$addr_dec") " "/proc/$child/numa_maps"; }
# numa_maps: "ADDR default file=/dev/zero\040(deleted) dirty=64 mapmax=2 active=0 N2=64 ...".
has() { case " $1 " in *" $2 "*) return 0 ;; *) return 1 ;; esac; }
before=$(maps_line)
if has "$before" mapmax=2 && has "$before" "N2=$PAGES"; then ok=true; else ok=false; fi
check shared_on_node2 "$ok" "$before"

# Two samples per page on node 2, from CPU 0 (nearest top-tier node: 0).
t=1000000000
: >"$work/samples.trace"
echo '# pghot-trace v1' >>"$work/samples.trace"
for round in 1 2; do
	p=0
	while [ $p -lt $PAGES ]; do
		t=$((t + 1000))
		printf '%d 0 %d %d 0x%x - L extmem 2\n' "$t" "$child" "$child" $((addr_dec + p * 4096)) >>"$work/samples.trace"
		p=$((p + 1))
	done
done

counter() { sed -n "s/.*\"$2\": *\\([0-9]*\\).*/\\1/p" "$1" | head -n 1; }
run_pghotd() {
	name=$1
	shift
	/usr/bin/pghotd --source "trace:$work/samples.trace" --pid "$child" --control-socket '' \
		--stats-json "$work/$name.json" "$@" >"$work/$name.log" 2>&1
}
run_pghotd default
shared=$(counter "$work/default.json" pgpromote_fail_shared)
promoted=$(counter "$work/default.json" pgpromote_success)
after_default=$(maps_line)
if [ "$shared" = "$PAGES" ] && [ "$promoted" = 0 ]; then ok=true; else ok=false; fi
check without_move_shared "$ok" "fail_shared=$shared success=$promoted; $after_default"
[ "$ok" = true ] || cat "$work/default.log"

run_pghotd move-shared --move-shared true
shared=$(counter "$work/move-shared.json" pgpromote_fail_shared)
promoted=$(counter "$work/move-shared.json" pgpromote_success)
after=$(maps_line)
# Moved for both processes, to the top tier (node 0 or 1), still shared.
case $after in
*N2=*) on_fast=false ;;
*) if has "$after" mapmax=2; then on_fast=true; else on_fast=false; fi ;;
esac
if [ "$promoted" = "$PAGES" ] && [ "${shared:-0}" = 0 ] && [ "$on_fast" = true ]; then ok=true; else ok=false; fi
check with_move_shared "$ok" "fail_shared=$shared success=$promoted; $after"
[ "$ok" = true ] || cat "$work/move-shared.log"
kill "$child" "$holder" 2>/dev/null
