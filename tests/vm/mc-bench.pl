#!/usr/bin/perl
# A memcached client for the Debian rig (debian-app.sh, --app memcached): Debian has no
# memcached load generator that can confine its GETs to a subset of the keys, which is what
# gives the server a hot part scattered through its slabs. Text protocol (memcached's
# doc/protocol.txt: "set <key> <flags> <exptime> <bytes> [noreply]", "get <key>*").
#
#   mc-bench.pl load KEYS VALUE_BYTES          set key:0 .. key:KEYS-1 in random order
#   mc-bench.pl get HOT_KEYS REQUESTS BATCH    multi-gets of BATCH random keys < HOT_KEYS;
#                                              prints "keys_per_s p50_ms p99_ms" (per request)
#   mc-bench.pl stats                          the server's counters, "name=value" a line
use strict;
use warnings;
use IO::Socket::INET;
use Time::HiRes qw(time);

my $host = $ENV{MC_HOST} // '127.0.0.1:11211';
my $s = IO::Socket::INET->new(PeerAddr => $host, Proto => 'tcp') or die "connect $host: $!\n";
$s->autoflush(1);
srand(42);
my ($cmd, @a) = @ARGV;
$cmd //= '';
if ($cmd eq 'load') {
	my ($keys, $bytes) = @a;
	my @order = (0 .. $keys - 1);
	for (my $i = $#order; $i > 0; $i--) {    # Fisher-Yates: random insertion order
		my $j = int(rand($i + 1));
		@order[$i, $j] = @order[$j, $i];
	}
	my $val = 'v' x $bytes;
	my $buf = '';
	for my $k (@order) {
		$buf .= "set key:$k 0 0 $bytes noreply\r\n$val\r\n";
		if (length($buf) > 65536) { print $s $buf or die "write: $!\n"; $buf = ''; }
	}
	print $s "${buf}version\r\n" or die "write: $!\n";
	my $line = <$s> // die "no answer after the load\n";
	$line =~ /^VERSION/ or die "unexpected answer after the load: $line";
} elsif ($cmd eq 'get') {
	my ($hot, $requests, $batch) = @a;
	my @lat;
	my $t0 = time;
	for (1 .. $requests) {
		my $req = 'get' . join('', map { ' key:' . int(rand($hot)) } 1 .. $batch) . "\r\n";
		my $t = time;
		print $s $req or die "write: $!\n";
		while (my $line = <$s>) {
			last if $line eq "END\r\n";
			if ($line =~ /^VALUE \S+ \d+ (\d+)/) {
				my $n = $1 + 2;
				my $got = 0;
				while ($got < $n) {
					my $r = read($s, my $chunk, $n - $got) or die "read: $!\n";
					$got += $r;
				}
			} else {
				die "unexpected line: $line";
			}
		}
		push @lat, time - $t;
	}
	my $wall = time - $t0;
	my @sorted = sort { $a <=> $b } @lat;
	printf "%.1f %.3f %.3f\n", $requests * $batch / $wall, 1000 * $sorted[int(@sorted * 0.5)],
		1000 * $sorted[int(@sorted * 0.99)];
} elsif ($cmd eq 'stats') {
	# The server's own counters ("stats", doc/protocol.txt: "STAT <name> <value>" lines, then
	# "END"), one "name=value" per line, for the rig to tell what the server did in a phase.
	print $s "stats\r\n" or die "write: $!\n";
	while (my $line = <$s>) {
		last if $line eq "END\r\n";
		print "$1=$2\n" if $line =~ /^STAT (\S+) (\S+)\r\n$/;
	}
} else {
	die "usage: mc-bench.pl load KEYS VALUE_BYTES | get HOT_KEYS REQUESTS BATCH | stats\n";
}
