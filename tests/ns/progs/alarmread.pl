#!/usr/bin/perl
# alarmread.pl: Perl's timeout idiom (alarm, a handler that dies, a blocking sysread) on a connection whose server never answers (t_sock_signal).
#   alarmread.pl server HOST PORT            echoes a line once per connection, then reads and says nothing
#   alarmread.pl client HOST PORT US ROUNDS  ROUNDS reads, each ended by a ualarm(US) whose handler dies:
#                                            "alarm ended N of ROUNDS reads, worst MS ms"
use strict;
use IO::Socket::INET;
use Time::HiRes qw(ualarm time);
my ($mode, $host, $port, $us, $rounds) = @ARGV;
if ($mode eq 'server') {
	my $l = IO::Socket::INET->new(LocalAddr => $host, LocalPort => $port, Listen => 16, ReuseAddr => 1) or die "listen: $!";
	while (my $c = $l->accept) {
		sysread($c, my $line, 100) or next;
		syswrite($c, $line);
		1 while sysread($c, my $b, 65536);   # silent until EOF
		close $c;
	}
	exit 0;
}
my $s = IO::Socket::INET->new(PeerAddr => $host, PeerPort => $port) or die "connect: $!";
syswrite($s, "hi\n");
sysread($s, my $b0, 10) == 3 or die "no echo";
my ($ended, $worst) = (0, 0);
for my $i (1 .. $rounds) {
	my $t0 = time;
	my $r = eval {
		local $SIG{ALRM} = sub { die "timeout\n" };
		ualarm($us);
		my $n = sysread($s, my $b, 10);
		ualarm(0);
		"read " . ($n // "error $!");
	} // $@;
	my $dt = time - $t0;
	$worst = $dt if $dt > $worst;
	$ended++ if $r eq "timeout\n";
	print "round $i: $r" if $r ne "timeout\n";
}
printf "alarm ended %d of %d reads, worst %.1f ms\n", $ended, $rounds, $worst * 1000;
exit($ended == $rounds ? 0 : 1);
