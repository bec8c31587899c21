# The launch agent of one job on one host (include/msrun_ssh/agent.h): started once per host
# through the user's login shell (agent.sh), it starts the job's commands there itself, each with
# /bin/sh -c in a session of its own (else in a process group of its own), and
# carries their stdin, stdout, stderr and ends over its own stdin and stdout. So a host pays its
# login rc once per job, not once per process. Perl, because it is on nearly every host (Debian's
# and Ubuntu's perl-base is essential) and starts in a few milliseconds, where python3 takes
# ~100 ms of CPU.
#
# Frames, both ways: one op byte, the channel id and the payload length (unsigned 32-bit, big
# endian), the payload. Launcher to agent: S spawn (payload: the command), P spawn a process of
# the job without a shell (payload: NUL separated, its workdir or "" for none, flags, the number
# of environment words, those NAME=VALUE words, its argv; agent.h), I stdin bytes, E end
# of stdin, K signal its process group (payload: the signal's name without SIG). Agent to
# launcher: o stdout bytes, e stderr bytes, x exit ("STATUS" or "STATUS NAME" when a signal ended
# it, STATUS being 128+N), c closed (exited and both outputs at their end), f could not start
# (payload: why). Before the first frame the agent writes the line HELLO, so that whatever the
# login rc printed can be told from the frames.
#
# Its first argument is the idle limit in seconds: with no command running and no byte from the
# launcher for that long (a host cut off from it, whose connection never ends), the agent exits.
# The next three are the user's PERL5LIB, PERL5OPT and PERLLIB as agent.sh hands them over, set
# again for the commands. Its own handles are raw whatever PERLIO or PERL_UNICODE say.
#
# The launcher's bytes are always read, also while the launcher reads slowly: the agent buffers
# at most MAX_OUT bytes for it and stops reading the commands' outputs meanwhile (they block, as
# over a channel of their own), never the heartbeats meant for a watchdog. The end of the
# agent's stdin (the launcher or the connection gone) ends the agent at once: its commands see
# their stdin end, which a watchdog takes for a lost launcher.
#
# Once the job's watchdog on this host (the command that runs msrun-ssh-watchdog) has ended, no
# command starts here any more: it has swept the host for the last time, and a spawn that reaches
# the agent after it (frames held up by a cut link and delivered when it heals) would run with
# nothing left to end it. The one exception is `msrun-ssh stop`'s program (msrun-ssh-stop), which
# starts nothing and ends itself: the launcher sends it when a watchdog ended before its time, to
# sweep the host in its place.
#
# A P frame's process is what `cd -- DIR && exec env -- ENV... ARGV` under /bin/sh -c would start
# (process_command, command.h), with stack_site.sh's step when flagged "s" (the job's stack-dump
# directory made by the watchdog: found, not made) and stdin from /dev/null when flagged "n": the
# agent's child does the cd, the environment and the step itself and execs ARGV, so a process
# costs its host one fork and one exec instead of four execs. PWD is set as cd would set it. The
# job's watchdog comes as a P frame too, flagged "w", with no workdir: its sh is exec'd directly.
#
# The job's watchdog started told so (its last word "agent") reads its control bytes with the
# shell's read, not with a process per byte (watchdog.sh): the agent hands it each byte followed by
# a newline, and ends its stdin once no byte came for it for its silence limit T (its third word),
# unless the last byte other than a heartbeat 'h' was 'z' (the job paused: it waits for `fg` with
# no limit). The limit is checked only in a turn that read nothing from the launcher, so bytes
# already sent (an agent starved of CPU while they came) are read first.
#
# A child's end is seen by SIGCHLD, which interrupts select; one that comes between the last
# reap and select is seen at the next turn, at most REAP_S later.
#
# Its start is paid on every host of every job, so it loads no module on the machines whose
# constants it knows (Linux on x86_64, aarch64, riscv64, loongarch64: the kernel's generic errno,
# fcntl and signal numbers): Config, Errno and Fcntl together cost more CPU than the rest of the
# agent's start. It tells those machines by its own ELF header (/proc/self/exe); elsewhere it
# loads the three modules. Nor does it load strict.pm (a third of a millisecond more per host): the
# unit tests compile it under strict (CommandSyntax).
#
# Its command line (ps, /proc/PID/cmdline), and that of a child between its fork and its exec: the
# watchdog's sweep (sweep.sh) knows the agent's children not yet exec'd by it.
$0 = 'msrun-ssh-agent';
my $HELLO = "\nmsrun-ssh-agent 1\n";
my $MAX_OUT = 1 << 20;
my $CHUNK = 65536;
my $REAP_S = 0.25;
my ($watchdog_pid, $watchdog_gone);
my ($dog, $dog_silence, $dog_heard, $dog_paused);    # the watchdog reading lines (see the top)
my $IDLE_S = length($ARGV[0] // '') ? $ARGV[0] + 0 : undef;
my @KEPT = qw(PERL5LIB PERL5OPT PERLLIB);
for my $i (0 .. $#KEPT) {
  my $value = $ARGV[$i + 1] // '';
  $ENV{$KEPT[$i]} = substr($value, 1) if length $value;
}
# setsid(2) by its number where it is known (perl has no call of its own without POSIX.pm, whose
# loading costs more than the whole agent), else setsid(1), else a process group of its own.
my %SETSID_OF_MACHINE = (62 => 112, 183 => 157, 243 => 157, 258 => 157);    # ELF e_machine
my %CLOCK_GETTIME_OF_MACHINE = (62 => 228, 183 => 113, 243 => 113, 258 => 113);
my $MACHINE = $^O eq 'linux' ? elf_machine() : 0;
my $SETSID_NR = $SETSID_OF_MACHINE{$MACHINE};
my $CLOCK_NR = $CLOCK_GETTIME_OF_MACHINE{$MACHINE};
my ($EAGAIN, $EINTR, $ENOENT, $F_GETFL, $F_SETFL, $O_NONBLOCK, @SIG_NAME);
if (defined $SETSID_NR) {
  ($EAGAIN, $EINTR, $ENOENT, $F_GETFL, $F_SETFL, $O_NONBLOCK) = (11, 4, 2, 3, 4, 2048);
  @SIG_NAME = qw(ZERO HUP INT QUIT ILL TRAP ABRT BUS FPE KILL USR1 SEGV USR2 PIPE ALRM TERM STKFLT
    CHLD CONT STOP TSTP TTIN TTOU URG XCPU XFSZ VTALRM PROF WINCH IO PWR SYS);
} else {
  require Config;
  require Errno;
  require Fcntl;
  require Time::HiRes;
  Config->import;    # %Config
  our %Config;
  ($EAGAIN, $EINTR, $ENOENT) = (Errno::EAGAIN(), Errno::EINTR(), Errno::ENOENT());
  ($F_GETFL, $F_SETFL, $O_NONBLOCK) = (Fcntl::F_GETFL(), Fcntl::F_SETFL(), Fcntl::O_NONBLOCK());
  @SIG_NAME = split ' ', $Config{sig_name};
}
my ($SETSID) = grep { -x } map { "$_/setsid" } split /:/, ($ENV{PATH} // '') . ':/usr/bin:/bin';

my %children;    # channel id -> child: {cid, pid, fin, pending, eof, outs => {fd => [handle, op]}, status}
my %by_fd;       # output fd -> child
my %by_pid;      # pid -> child
my $out = $HELLO;
my $inbuf = '';

$SIG{CHLD} = sub { };
$SIG{PIPE} = 'IGNORE';
binmode STDIN;
binmode STDOUT;
nonblocking(\*STDOUT);

# The e_machine field of this perl's ELF header (little-endian, as on every machine named above),
# or 0.
sub elf_machine {
  open(my $exe, '<', '/proc/self/exe') or return 0;
  binmode $exe;
  my $n = sysread($exe, my $head, 20);
  return 0 unless $n && $n == 20 && substr($head, 0, 4) eq "\x7fELF" && ord(substr($head, 5, 1)) == 1;
  return unpack('v', substr($head, 18, 2));
}

# Seconds on the monotonic clock (clock_gettime(2) by its number where it is known).
sub now {
  return Time::HiRes::time() unless defined $CLOCK_NR;
  my $ts = "\0" x 16;
  return time if syscall($CLOCK_NR, 1, $ts) != 0;    # CLOCK_MONOTONIC
  my ($sec, $nsec) = unpack('q q', $ts);
  return $sec + $nsec / 1e9;
}

sub nonblocking {
  my ($fh) = @_;
  my $flags = fcntl($fh, $F_GETFL, 0);
  fcntl($fh, $F_SETFL, $flags | $O_NONBLOCK) if defined $flags;
}

sub send_frame {
  my ($op, $cid, $payload) = @_;
  $payload //= '';
  $out .= pack('a N N', $op, $cid, length $payload) . $payload;
}

# In the child: a session of its own (setsid(2), else setsid(1) in front of @argv, else a process
# group of its own), then exec @argv.
sub start_child {
  my (@argv) = @_;
  $SIG{$_} = 'DEFAULT' for grep { exists $SIG{$_} } qw(PIPE XFSZ CHLD);
  if (!(defined $SETSID_NR && syscall($SETSID_NR) >= 0)) {
    exec {$SETSID} 'setsid', @argv if $SETSID;
    setpgrp(0, 0);
  }
  { exec {$argv[0]} @argv }
  my $errno = $! + 0;
  syswrite(STDERR, "msrun-ssh-agent: cannot run $argv[0]: $!\n");
  exit($errno == $ENOENT ? 127 : 126);
}

# In the child, a P frame's process (see the top): cd, environment, stack-dump step, exec.
sub start_process {
  my ($dir, $flags, $count, @words) = split /\0/, $_[0], -1;
  my @env = splice(@words, 0, $count // 0);
  if (length $dir) {
    if (!chdir $dir) {
      syswrite(STDERR, "msrun-ssh-agent: cannot cd to $dir: $!\n");
      exit 2;
    }
    # cd's logical PWD: the path as given; the kernel's when it is relative or not plain.
    my $plain = $dir =~ m{^/} && $dir !~ m{//|(^|/)\.\.?(/|\z)};
    my $pwd = $plain ? $dir =~ s{/+\z}{}r : readlink('/proc/self/cwd');
    $ENV{OLDPWD} = $ENV{PWD} if defined $ENV{PWD};
    $ENV{PWD} = length($pwd // '') ? $pwd : '/';
  }
  for (@env) {
    my ($name, $value) = split /=/, $_, 2;
    $ENV{$name} = $value;
  }
  if ($flags =~ /s/) {
    my $tmp = length($ENV{TMPDIR} // '') ? $ENV{TMPDIR} : '/tmp';
    my $d = "$tmp/msrun-ssh-stacks-" . ($ENV{MSRUN_SSH_JOB} // '');
    my $error_file = $ENV{TORCHELASTIC_ERROR_FILE} // '';
    if (!-l $d && -d _ && -o _ && -f "$d/sitecustomize.py") {
      $ENV{MSRUN_SSH_STACK_DIR} = $d;
      $ENV{PYTHONPATH} = length($ENV{PYTHONPATH} // '') ? "$d:$ENV{PYTHONPATH}" : $d;
      $ENV{TORCHELASTIC_ERROR_FILE} = "$d/$1" if $error_file =~ m{^\@msrun-ssh-job-dir\@/(.*)\z}s;
    } elsif ($error_file =~ m{^\@msrun-ssh-job-dir\@/}) {
      delete $ENV{TORCHELASTIC_ERROR_FILE};
    }
  }
  if ($flags =~ /n/ && !open(STDIN, '<', '/dev/null')) {
    syswrite(STDERR, "msrun-ssh-agent: cannot open /dev/null: $!\n");
    exit 126;
  }
  start_child(@words);
}

# Starts a child on channel $cid: /bin/sh -c $command, or with $launch (a P frame's payload) the
# process it describes.
sub spawn {
  my ($cid, $command, $launch) = @_;
  return send_frame('f', $cid, "the job's watchdog on this host has ended: nothing starts here")
    if $watchdog_gone && ($launch || $command !~ /msrun-ssh-stop/);
  my $flags = $launch ? (split /\0/, $command, 3)[1] : '';
  # A process whose stdin is /dev/null (flag n) gets no stdin pipe: start_process opens it.
  my $stdin = $flags !~ /n/;
  my @pipes;
  for ($stdin ? 0 .. 2 : 1 .. 2) {
    my ($r, $w);
    if (!pipe($r, $w)) {
      my $why = "$!";
      close $_ for map { @$_ } grep { defined } @pipes;
      return send_frame('f', $cid, $why);
    }
    binmode $r;
    binmode $w;
    $pipes[$_] = [$r, $w];
  }
  my $pid = fork;
  if (!defined $pid) {
    my $why = "$!";
    close $_ for map { @$_ } grep { defined } @pipes;
    return send_frame('f', $cid, $why);
  }
  if ($pid == 0) {
    (!$stdin || open(STDIN, '<&', $pipes[0][0])) && open(STDOUT, '>&', $pipes[1][1])
      && open(STDERR, '>&', $pipes[2][1])
      && ($launch ? start_process($command) : start_child('/bin/sh', '-c', $command));
    exit 127;
  }
  close $pipes[0][0] if $stdin;
  close $pipes[1][1];
  close $pipes[2][1];
  my $child = {cid => $cid, pid => $pid, fin => $stdin ? $pipes[0][1] : undef, pending => '',
    eof => 0, outs => {}};
  for ([$pipes[1][0], 'o'], [$pipes[2][0], 'e']) {
    nonblocking($_->[0]);
    $child->{outs}{fileno $_->[0]} = $_;
    $by_fd{fileno $_->[0]} = $child;
  }
  nonblocking($child->{fin}) if $stdin;
  $children{$cid} = $child;
  $by_pid{$pid} = $child;
  $watchdog_pid = $pid if $launch ? $flags =~ /w/ : $command =~ /msrun-ssh-watchdog/;
  if ($launch && $flags =~ /w/ && $command =~ /\0msrun-ssh-watchdog\0[^\0]*\0([0-9.]+)\0.*\0agent\z/s) {
    ($dog, $dog_silence, $dog_heard, $dog_paused) = ($child, $1, now(), 0);
  }
}

sub control {
  my ($op, $cid, $payload) = @_;
  return spawn($cid, $payload) if $op eq 'S';
  return spawn($cid, $payload, 1) if $op eq 'P';
  my $child = $children{$cid} or return;
  if ($op eq 'I' && $child->{fin}) {
    if ($dog && $child == $dog) {
      $dog_heard = now();
      for my $byte (split //, $payload) {
        $dog_paused = $byte eq 'z' ? 1 : $byte eq 'h' ? $dog_paused : 0;
      }
      $payload =~ s/(.)/$1\n/gs;
    }
    $child->{pending} .= $payload;
  } elsif ($op eq 'E') {
    $child->{eof} = 1;
  } elsif ($op eq 'K' && $payload =~ /^[A-Z0-9]+$/) {
    # Before its setsid the command is not a group yet: then it alone, so it never starts.
    kill("-$payload", $child->{pid}) or kill($payload, $child->{pid});
  }
  feed_stdin($child);
}

sub close_stdin {
  my ($child) = @_;
  close $child->{fin};
  $child->{fin} = undef;
  $child->{pending} = '';
}

sub feed_stdin {
  my ($child) = @_;
  return unless $child->{fin};
  while (length $child->{pending}) {
    my $n = syswrite($child->{fin}, $child->{pending});
    if (!defined $n) {
      return if $! == $EAGAIN || $! == $EINTR;
      return close_stdin($child);
    }
    substr($child->{pending}, 0, $n, '');
  }
  close_stdin($child) if $child->{eof};
}

sub read_control {
  my $n = sysread(STDIN, my $data, $CHUNK);
  return if !defined $n && ($! == $EAGAIN || $! == $EINTR);
  exit 0 if !$n;
  $inbuf .= $data;
  while (length $inbuf >= 9) {
    my ($op, $cid, $size) = unpack('a N N', $inbuf);
    last if length $inbuf < 9 + $size;
    my $payload = substr($inbuf, 9, $size);
    substr($inbuf, 0, 9 + $size, '');
    control($op, $cid, $payload);
  }
}

sub read_output {
  my ($fd) = @_;
  my $child = $by_fd{$fd};
  my ($fh, $op) = @{$child->{outs}{$fd}};
  my $n = sysread($fh, my $data, $CHUNK);
  return if !defined $n && ($! == $EAGAIN || $! == $EINTR);
  return send_frame($op, $child->{cid}, $data) if $n;
  close $fh;
  delete $by_fd{$fd};
  delete $child->{outs}{$fd};
  maybe_closed($child);
}

sub reap {
  while (%by_pid) {
    my $pid = waitpid(-1, 1);    # WNOHANG
    return if $pid <= 0;
    my $child = delete $by_pid{$pid} or next;
    $watchdog_gone = 1 if defined $watchdog_pid && $pid == $watchdog_pid;
    my $raw = $?;
    if ($raw & 127) {
      my $n = $raw & 127;
      $child->{status} = sprintf('%d %s', 128 + $n, $SIG_NAME[$n] // $n);
    } else {
      $child->{status} = $raw >> 8;
    }
    send_frame('x', $child->{cid}, $child->{status});
    maybe_closed($child);
  }
}

sub maybe_closed {
  my ($child) = @_;
  return if !defined $child->{status} || %{$child->{outs}};
  close_stdin($child) if $child->{fin};
  send_frame('c', $child->{cid});
  delete $children{$child->{cid}};
}

sub flush {
  while (length $out) {
    my $n = syswrite(STDOUT, $out);
    return if !defined $n;
    substr($out, 0, $n, '');
  }
}

while (1) {
  flush();
  my ($rin, $win) = ('', '');
  vec($rin, 0, 1) = 1;
  vec($win, 1, 1) = 1 if length $out;
  if (length $out < $MAX_OUT) {
    vec($rin, $_, 1) = 1 for keys %by_fd;
  }
  for my $child (values %children) {
    vec($win, fileno $child->{fin}, 1) = 1 if $child->{fin} && length $child->{pending};
  }
  my $timeout = %children ? $REAP_S : $IDLE_S;
  my $ready = select(my $rout = $rin, my $wout = $win, undef, $timeout);
  exit 0 if $ready == 0 && !%children && defined $IDLE_S;
  my $heard = $ready > 0 && vec($rout, 0, 1);
  if ($ready > 0) {
    read_control() if $heard;
    for my $fd (keys %by_fd) {
      read_output($fd) if vec($rout, $fd, 1) && $by_fd{$fd};
    }
  }
  feed_stdin($_) for values %children;
  reap();
  # Not in a turn that read the launcher: what it read may end before a heartbeat it sent.
  close_stdin($dog)
    if !$heard && $dog && $dog->{fin} && !$dog_paused && now() - $dog_heard > $dog_silence;
}
