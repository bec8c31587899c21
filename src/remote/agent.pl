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
# of environment words, those NAME=VALUE words, its argv; agent.h), W be the job's watchdog on
# this channel (payload: NUL separated, the watchdog's arguments J T G L W, then the text of the
# stack-dump directory's sitecustomize.py; see below), M be the job's sampler on this channel
# (payload: NUL separated, its arguments JOB INTERVAL RANKS, then sampler.pl's text; see below), I
# stdin bytes, E end of stdin, K signal its process group (payload: the signal's name without
# SIG), N nothing (the launcher is there: an agent waiting for its host's next command, while the
# other hosts finish a step, is not idle). Agent to
# launcher: o stdout bytes, e stderr bytes, a stdin bytes taken (the count, in decimal: see
# close_stdin), x exit ("STATUS" or "STATUS NAME" when a signal ended
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
# agent's stdin (the launcher or the connection gone) ends the agent at once, after its
# watchdog's teardown when it is the job's watchdog (below): its commands see their stdin end.
#
# Once the job's watchdog on this host has ended, no command starts here any more: it has swept
# the host for the last time, and a spawn that reaches the agent after it (frames held up by a
# cut link and delivered when it heals) would run with nothing left to end it. The one exception
# is `msrun-ssh stop`'s program (msrun-ssh-stop), which starts nothing and ends itself: the
# launcher sends it when a watchdog ended before its time, to sweep the host in its place.
#
# A P frame's process is what `cd -- DIR && exec env -- ENV... ARGV` under /bin/sh -c would start
# (process_command, command.h), with stack_site.sh's step when flagged "s" (the job's stack-dump
# directory made by the watchdog: found, not made) and stdin from /dev/null when flagged "n": the
# agent makes the environment, the step and the program's path itself before its fork (plan_of),
# and its child makes only the start's system calls (the descriptors, the cd, setsid) and execs
# ARGV, so a process costs its host one fork and one exec instead of four execs, and its child
# runs no Perl (each interpreter page it wrote to would cost it a copy-on-write fault).
#
# The job's watchdog (W frame) is the agent itself: no process of its own, and its sweeps read
# /proc here, with no grep. It keeps watchdog.sh's protocol on its channel (the lines it prints,
# the control bytes it reads: command.h) and its sweeps find what sweep.sh's find under the agent:
# the processes whose environment holds MSRUN_SSH_JOB=J, and the agent's own P children (a process
# of the job is one from its fork, before its exec marks it). A byte other than a heartbeat 'h'
# stops the silence limit T only when it is 'z' (the job paused: it waits for `fg` with no limit);
# the limit is checked only in a turn that read nothing from the launcher, so bytes already sent
# (an agent starved of CPU while they came) are read first. The end of the agent's stdin (the
# launcher or the connection gone) is the launcher lost: the agent ends the commands' stdin, tears
# the job down and then exits. SIGTERM to the agent (a batch system ending the job step, a host
# shutting down) kills every process of the job at once, as watchdog.sh's trap does.
#
# The job's sampler (M frame) runs inside the agent too: sampler.pl's program, compiled by eval in
# a package of its own, returns a closure that takes one sample, and the agent's loop calls it
# every INTERVAL seconds and sends each line on the sampler's channel: no fork, no exec, no Perl
# start. The first sample is taken at once. The channel ends with status 0 at the end of its
# stdin or after the sampler's last sample, with 128+N at a K frame, with 1 (and why, on its
# stderr) when the program dies; the agent goes on.
#
# A child's end is seen by SIGCHLD, which interrupts select; the signal's handler also marks it,
# and a turn that finds the mark before its select does not wait (nor does one that finds
# SIGTERM's), so that a signal that came since the last reap is not left waiting. Only one that
# comes in the few ops between that check and the system call waits for the turn's end, TURN_S at
# most. Nothing else ends a turn by the clock: what is due (a watchdog's silence limit, its
# grace, a sampler's next sample) sets the turn's end itself, so an agent waiting for its job
# wakes only for the launcher's heartbeats and once per TURN_S.
#
# Its start is paid on every host of every job, so it loads no module on the machines whose
# constants it knows (Linux on x86_64, aarch64, riscv64, loongarch64: the kernel's generic errno,
# fcntl and signal numbers): Config, Errno and Fcntl together cost more CPU than the rest of the
# agent's start. It tells those machines by its own ELF header (/proc/self/exe); elsewhere it
# loads the three modules. Nor does it load strict.pm (a third of a millisecond more per host): the
# unit tests compile it under strict (CommandSyntax).
#
# Its command line (ps, /proc/PID/cmdline), and that of a child between its fork and its exec.
$0 = 'msrun-ssh-agent';
my $HELLO = "\nmsrun-ssh-agent 1\n";
my $MAX_OUT = 1 << 20;
my $CHUNK = 65536;
my $TURN_S = 2;
my $chld = 0;    # a SIGCHLD came since the last reap
my $EXEC_WAIT_S = 0.5;    # the longest wait for a child's exec (spawn)
my ($watchdog_pid, $watchdog_gone);
# The job's watchdog when the agent is it (W frame; see the top): {cid, job, silence, grace,
# lost_grace, in (bytes not handled yet), eof, heard, paused, phase, wake, steps, then, sweeps}.
my $wd;
my $GRACE_STEP = 0.2;    # kWatchdogGraceStepS (command.h)
my ($gone, $terminated);    # the agent's stdin has ended; a SIGTERM came
my $IDLE_S = length($ARGV[0] // '') ? $ARGV[0] + 0 : undef;
my @KEPT = qw(PERL5LIB PERL5OPT PERLLIB);
for my $i (0 .. $#KEPT) {
  my $value = $ARGV[$i + 1] // '';
  $ENV{$KEPT[$i]} = substr($value, 1) if length $value;
}
# System calls by their numbers where they are known (ELF e_machine: x86_64, then the kernel's
# generic table of aarch64, riscv64 and loongarch64): perl has no setsid, dup3 or execve of its
# own without POSIX.pm, whose loading costs more than the whole agent. Elsewhere setsid(1), else a
# process group of its own, and every child starts the way of Perl's exec (start_child).
my %NR_X86_64 = (setsid => 112, clock_gettime => 228, execve => 59, dup3 => 292, chdir => 80,
  rt_sigaction => 13, prctl => 157);
my %NR_GENERIC = (setsid => 157, clock_gettime => 113, execve => 221, dup3 => 24, chdir => 49,
  rt_sigaction => 134, prctl => 167);
my %NR_OF_MACHINE = (62 => \%NR_X86_64, 183 => \%NR_GENERIC, 243 => \%NR_GENERIC,
  258 => \%NR_GENERIC);
my $MACHINE = $^O eq 'linux' ? elf_machine() : 0;
my $NR = $NR_OF_MACHINE{$MACHINE};
my $SETSID_NR = $NR ? $NR->{setsid} : undef;
my $CLOCK_NR = $NR ? $NR->{clock_gettime} : undef;
# The agent is the subreaper of what its children leave (prctl PR_SET_CHILD_SUBREAPER): a process
# that outlives its parent (a daemon's double fork, `setsid cmd &`) becomes the agent's child, not
# init's. So once the agent has no child at all, nothing it started lives any more, nor anything
# those started, and the watchdog's sweep reads no process's environment (job_pids), unless its
# last read found the job's processes: one outside the agent's tree (a task srun started, a
# daemon's child with the job's environment) that a sweep saw while the agent had children is
# then still found and ended. One that only ever ran outside the tree, the agent's own processes
# all ended by then, is not looked for (a look at every process of the host, at each job's end).
my $SUBREAPER = $NR && syscall($NR->{prctl}, 36, 1, 0, 0, 0) == 0;
my $childless = 0;    # the last waitpid found no child at all
my $read_found = 0;   # the last read of /proc found a process of the job
my $DEVNULL;          # /dev/null, opened once, for the stdin of the processes flagged "n"
my ($EAGAIN, $EINTR, $ENOENT, $ECHILD, $F_GETFL, $F_SETFL, $O_NONBLOCK, @SIG_NAME);
if (defined $SETSID_NR) {
  ($EAGAIN, $EINTR, $ENOENT, $ECHILD, $F_GETFL, $F_SETFL, $O_NONBLOCK) = (11, 4, 2, 10, 3, 4, 2048);
  @SIG_NAME = qw(ZERO HUP INT QUIT ILL TRAP ABRT BUS FPE KILL USR1 SEGV USR2 PIPE ALRM TERM STKFLT
    CHLD CONT STOP TSTP TTIN TTOU URG XCPU XFSZ VTALRM PROF WINCH IO PWR SYS);
} else {
  require Config;
  require Errno;
  require Fcntl;
  require Time::HiRes;
  Config->import;    # %Config
  our %Config;
  ($EAGAIN, $EINTR, $ENOENT, $ECHILD) =
    (Errno::EAGAIN(), Errno::EINTR(), Errno::ENOENT(), Errno::ECHILD());
  ($F_GETFL, $F_SETFL, $O_NONBLOCK) = (Fcntl::F_GETFL(), Fcntl::F_SETFL(), Fcntl::O_NONBLOCK());
  @SIG_NAME = split ' ', $Config{sig_name};
}
my ($SETSID) = grep { -x } map { "$_/setsid" } split /:/, ($ENV{PATH} // '') . ':/usr/bin:/bin';

my %children;    # channel id -> child: {cid, pid, fin, pending, eof, outs => {fd => [handle, op]}, status}
my %by_fd;       # output fd -> child
my %by_pid;      # pid -> child
my %samplers;    # channel id -> sampler: {cid, sample (sampler.pl's closure), every, at}
my $out = $HELLO;
my $inbuf = '';

$SIG{CHLD} = sub { $chld = 1 };
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
  $SIG{$_} = 'DEFAULT' for grep { exists $SIG{$_} } qw(PIPE XFSZ CHLD TERM HUP);
  if (!(defined $SETSID_NR && syscall($SETSID_NR) >= 0)) {
    exec {$SETSID} 'setsid', @argv if $SETSID;
    setpgrp(0, 0);
  }
  exec_or_say(@argv);
}

sub exec_or_say {
  my (@argv) = @_;
  { exec {$argv[0]} @argv }
  my $errno = $! + 0;
  syswrite(STDERR, "msrun-ssh-agent: cannot run $argv[0]: $!\n");
  exit($errno == $ENOENT ? 127 : 126);
}

# A P frame's process as cd would leave it: its logical PWD after a cd to $dir (the path as
# given; undef when it is relative or not plain: the kernel's, known after the cd).
sub pwd_after_cd {
  my ($dir) = @_;
  return undef if $dir !~ m{^/} || $dir =~ m{//|(^|/)\.\.?(/|\z)};
  return $dir =~ s{/+\z}{}r;
}

# The environment of a P frame's process (see the top), made in %$env: cd's PWD and OLDPWD when
# it has a workdir, the frame's NAME=VALUE words, then stack_site.sh's step when flagged "s".
sub process_env {
  my ($env, $pwd, $flags, @set) = @_;
  if (defined $pwd) {
    $env->{OLDPWD} = $env->{PWD} if defined $env->{PWD};
    $env->{PWD} = length $pwd ? $pwd : '/';
  }
  for (@set) {
    my ($name, $value) = split /=/, $_, 2;
    $env->{$name} = $value;
  }
  return if $flags !~ /s/;
  my $d = stack_dir($env->{MSRUN_SSH_JOB} // '', $env);
  my $error_file = $env->{TORCHELASTIC_ERROR_FILE} // '';
  if (!-l $d && -d _ && -o _ && -f "$d/sitecustomize.py") {
    $env->{MSRUN_SSH_STACK_DIR} = $d;
    $env->{PYTHONPATH} = length($env->{PYTHONPATH} // '') ? "$d:$env->{PYTHONPATH}" : $d;
    $env->{TORCHELASTIC_ERROR_FILE} = "$d/$1" if $error_file =~ m{^\@msrun-ssh-job-dir\@/(.*)\z}s;
  } elsif ($error_file =~ m{^\@msrun-ssh-job-dir\@/}) {
    delete $env->{TORCHELASTIC_ERROR_FILE};
  }
}

# A P frame's payload (see the top) in its parts, {dir, flags, set, argv}; an S frame's command
# as the start of /bin/sh -c COMMAND, without a workdir, flags or variables of its own.
sub start_of {
  my ($payload, $launch) = @_;
  return {dir => '', flags => '', set => [], argv => ['/bin/sh', '-c', $payload]} if !$launch;
  my ($dir, $flags, $count, @argv) = split /\0/, $payload, -1;
  my @set = splice(@argv, 0, $count // 0);
  return {dir => $dir, flags => $flags // '', set => \@set, argv => \@argv};
}

# In the child, a start (start_of) the agent could not plan: cd, environment, stack-dump step,
# exec.
sub start_process {
  my ($start) = @_;
  my ($dir, $flags) = @$start{qw(dir flags)};
  my $pwd;
  if (length $dir) {
    if (!chdir $dir) {
      syswrite(STDERR, "msrun-ssh-agent: cannot cd to $dir: $!\n");
      exit 2;
    }
    $pwd = pwd_after_cd($dir) // readlink('/proc/self/cwd') // '';
  }
  process_env(\%ENV, $pwd, $flags, @{$start->{set}});
  if ($flags =~ /n/ && !open(STDIN, '<', '/dev/null')) {
    syswrite(STDERR, "msrun-ssh-agent: cannot open /dev/null: $!\n");
    exit 126;
  }
  start_child(@{$start->{argv}});
}

# A child's start made whole in the agent, before its fork, so that the child runs no Perl
# between its fork and its exec but system calls (each page of the interpreter a child writes to
# costs it a copy-on-write fault): {dir, argv, env, path, envw, argvp, envp}, argvp and envp being
# execve's arguments packed (pointers to the words of argv and envw). Undef where it cannot be
# made here (a workdir, a PATH entry or a TMPDIR that only the child's cd resolves, a program not
# found), and on machines whose calls it does not know: then the child starts as before
# (start_process, start_child), which also says why a start failed.
sub plan_of {
  my ($start) = @_;
  return undef if !$NR;
  my ($dir, $flags, $argv) = @$start{qw(dir flags argv)};
  my %env = %ENV;
  my $pwd;
  if (length $dir) {
    $pwd = pwd_after_cd($dir);
    return undef if !defined $pwd;
  }
  process_env(\%env, $pwd, $flags, @{$start->{set}});
  return undef if $flags =~ /s/ && stack_dir('', \%env) !~ m{^/};
  my $path = program_path($argv->[0] // '', $env{PATH});
  return undef if !defined $path || ($flags =~ /n/ && !($DEVNULL //= devnull()));
  my @envw = map { "$_=$env{$_}" } keys %env;
  my $plan = {dir => $dir, argv => $argv, env => \%env, path => $path, envw => \@envw};
  $plan->{argvp} = pack('p*', @$argv, undef);
  $plan->{envp} = pack('p*', @envw, undef);
  return $plan;
}

sub devnull {
  open(my $null, '<', '/dev/null') or return undef;
  return $null;
}

# Where execvp would find $name on $search (a PATH; unset: /bin:/usr/bin): undef when not found,
# or when an entry before it is relative or empty (the child's cwd).
sub program_path {
  my ($name, $search) = @_;
  return undef if !length $name;
  return $name if $name =~ m{/};
  for my $d (split /:/, $search // '/bin:/usr/bin', -1) {
    return undef if $d !~ m{^/};
    return "$d/$name" if -f "$d/$name" && -x _;
  }
  return undef;
}

# In the child, a planned start (plan_of): signals back to their defaults, stdin, stdout and
# stderr from @fds, the workdir, a session of its own, execve, each one system call. Where a
# call fails, Perl's way of the start goes on from there and says why.
sub start_planned {
  my ($plan, @fds) = @_;
  my $default = "\0" x 32;    # struct sigaction: SIG_DFL, no flags, an empty mask
  # HUP, PIPE, TERM, CHLD and XFSZ, as start_child's %SIG
  syscall($NR->{rt_sigaction}, $_, $default, 0, 8) for 1, 13, 15, 17, 25;
  for my $to (0 .. 2) {
    return if syscall($NR->{dup3}, $fds[$to], $to, 0) != $to;
  }
  if (length $plan->{dir} && syscall($NR->{chdir}, $plan->{dir}) != 0) {
    syswrite(STDERR, "msrun-ssh-agent: cannot cd to $plan->{dir}: $!\n");
    exit 2;
  }
  setpgrp(0, 0) if syscall($SETSID_NR) < 0;
  syscall($NR->{execve}, $plan->{path}, $plan->{argvp}, $plan->{envp});
  %ENV = %{$plan->{env}};
  exec_or_say(@{$plan->{argv}});
}

# Starts a child on channel $cid: an S frame's /bin/sh -c $command, or with $launch a P frame's
# process; $start: its start_of, $plan: its plan_of, both made before.
sub spawn {
  my ($cid, $command, $launch, $start, $plan) = @_;
  return send_frame('f', $cid, "the job's watchdog on this host has ended: nothing starts here")
    if $watchdog_gone && ($launch || $command !~ /msrun-ssh-stop/);
  # A process whose stdin is /dev/null (flag n) gets no stdin pipe: start_process opens it.
  my $stdin = $start->{flags} !~ /n/;
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
  my @fds = !$plan ? () : map { fileno $_ } ($stdin ? $pipes[0][0] : $DEVNULL), $pipes[1][1],
    $pipes[2][1];
  # Closed in the child by its exec (close-on-exec, as every pipe Perl makes above fd 2).
  my ($execd, $execing);
  ($execd, $execing) = () if !pipe($execd, $execing);
  my $pid = fork;
  if (!defined $pid) {
    my $why = "$!";
    close $_ for grep { defined } $execd, $execing, map { @$_ } grep { defined } @pipes;
    return send_frame('f', $cid, $why);
  }
  if ($pid == 0) {
    start_planned($plan, @fds) if $plan;
    (!$stdin || open(STDIN, '<&', $pipes[0][0])) && open(STDOUT, '>&', $pipes[1][1])
      && open(STDERR, '>&', $pipes[2][1])
      && start_process($start);
    exit 127;
  }
  # The agent waits for its child's exec (or end) before it goes on: until then every page of the
  # agent is shared with the child, and each one it writes would cost a copy and, with the child
  # on another CPU, a TLB shootdown; after it, a write costs a fault without a copy. Bounded: a
  # child stuck before its exec (a cd into a hung mount) does not stop the agent.
  if ($execd) {
    close $execing;
    vec(my $rin = '', fileno $execd, 1) = 1;
    select($rin, undef, undef, $EXEC_WAIT_S);
    close $execd;
  }
  close $pipes[0][0] if $stdin;
  close $pipes[1][1];
  close $pipes[2][1];
  my $child = {cid => $cid, pid => $pid, fin => $stdin ? $pipes[0][1] : undef, pending => '',
    eof => 0, outs => {}, job => $launch};
  for ([$pipes[1][0], 'o'], [$pipes[2][0], 'e']) {
    nonblocking($_->[0]);
    $child->{outs}{fileno $_->[0]} = $_;
    $by_fd{fileno $_->[0]} = $child;
  }
  nonblocking($child->{fin}) if $stdin;
  $children{$cid} = $child;
  $by_pid{$pid} = $child;
  $watchdog_pid = $pid if !$launch && $command =~ /msrun-ssh-watchdog/;
}

sub control {
  my ($op, $cid, $payload, $start, $plan) = @_;
  return if $op eq 'N';
  return spawn($cid, $payload, 0, $start, $plan) if $op eq 'S';
  return spawn($cid, $payload, 1, $start, $plan) if $op eq 'P';
  return wd_start($cid, $payload) if $op eq 'W';
  return sampler_start($cid, $payload) if $op eq 'M';
  if (my $sampler = $samplers{$cid}) {
    return sampler_end($sampler, 0) if $op eq 'E';
    if ($op eq 'K') {
      my ($n) = grep { $SIG_NAME[$_] eq $payload } 0 .. $#SIG_NAME;
      sampler_end($sampler, defined $n ? sprintf('%d %s', 128 + $n, $payload) : 1);
    }
    return;
  }
  if ($wd && $cid == $wd->{cid}) {
    if ($op eq 'I') {
      $wd->{heard} = now();
      for my $byte (split //, $payload) {
        $wd->{paused} = $byte eq 'z' ? 1 : $byte eq 'h' ? $wd->{paused} : 0;
      }
      $wd->{in} .= $payload;
    }
    $wd->{eof} = 1 if $op eq 'E';
    return;
  }
  my $child = $children{$cid} or return;
  if ($op eq 'I' && $child->{fin}) {
    $child->{pending} .= $payload;
  } elsif ($op eq 'I') {
    send_frame('a', $cid, length $payload);    # its stdin is closed: dropped, as by a pipe
  } elsif ($op eq 'E') {
    $child->{eof} = 1;
  } elsif ($op eq 'K' && $payload =~ /^[A-Z0-9]+$/) {
    # Before its setsid the command is not a group yet: then it alone, so it never starts. Once
    # reaped, its pid is no longer its own (the system may give it to any process); its group's
    # id stays reserved while what is left of the group lives: then the group only.
    kill("-$payload", $child->{pid}) or defined $child->{status} or kill($payload, $child->{pid});
  }
  feed_stdin($child);
}

# What the launcher sent for a command's stdin is said taken (an a frame: the byte count) once it
# is in the command's pipe or dropped with it: the launcher keeps at most so much unsaid (the sync's
# flow control), so the agent never holds more of a stream than that.
sub close_stdin {
  my ($child) = @_;
  send_frame('a', $child->{cid}, length $child->{pending}) if length $child->{pending};
  close $child->{fin};
  $child->{fin} = undef;
  $child->{pending} = '';
}

sub feed_stdin {
  my ($child) = @_;
  return unless $child->{fin};
  my $fed = 0;
  while (length $child->{pending}) {
    my $n = syswrite($child->{fin}, $child->{pending});
    if (!defined $n) {
      last if $! == $EAGAIN || $! == $EINTR;
      send_frame('a', $child->{cid}, $fed) if $fed;
      return close_stdin($child);
    }
    substr($child->{pending}, 0, $n, '');
    $fed += $n;
  }
  send_frame('a', $child->{cid}, $fed) if $fed;
  close_stdin($child) if $child->{eof} && !length $child->{pending};
}

# Whether the launcher's bytes wait to be read (or its end), without waiting for them.
sub stdin_waits {
  return 0 if $gone;
  my $r = '';
  vec($r, 0, 1) = 1;
  return select($r, undef, undef, 0) != 0;    # -1 (a signal): not known, looked at next turn
}

sub read_control {
  my $n = sysread(STDIN, my $data, $CHUNK);
  return if !defined $n && ($! == $EAGAIN || $! == $EINTR);
  if (!$n) {
    exit 0 if !$wd;
    %samplers = ();
    # The launcher gone: the watchdog tears the job down, then the agent exits (wd_end).
    ($gone, $wd->{eof}, $out) = (1, 1, '');
    close_stdin($_) for grep { $_->{fin} } values %children;
    return;
  }
  $inbuf .= $data;
  my @frames;
  while (length $inbuf >= 9) {
    my ($op, $cid, $size) = unpack('a N N', $inbuf);
    last if length $inbuf < 9 + $size;
    push @frames, [$op, $cid, substr($inbuf, 9, $size)];
    substr($inbuf, 0, 9 + $size, '');
  }
  # The starts of a run of P and S frames are all planned before the first of them forks: a fork
  # write-protects the agent's pages, and every page a plan wrote after it would cost a fault.
  # A run ends at any other frame (a W frame makes the stack-dump directory the plans look for).
  for my $i (0 .. $#frames) {
    for (my $j = $i; $j <= $#frames && $frames[$j][0] =~ /^[PS]\z/; $j++) {
      last if exists $frames[$j][3];
      $frames[$j][3] = start_of($frames[$j][2], $frames[$j][0] eq 'P');
      $frames[$j][4] = plan_of($frames[$j][3]);
    }
    control(@{$frames[$i]});
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

# Reaps every child that ended: the agent's commands (their status is sent) and what they left
# (the agent is its subreaper: reaped without a word).
sub reap {
  $chld = 0;
  while (1) {
    my $pid = waitpid(-1, 1);    # WNOHANG
    $childless = $pid == -1 && $! == $ECHILD;
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
  $out = '' if $gone;    # nobody reads it any more
  while (length $out) {
    my $n = syswrite(STDOUT, $out);
    return if !defined $n;
    substr($out, 0, $n, '');
  }
}

# ---- The job's sampler, run by the agent itself (M frame; see the top) ----

sub sampler_start {
  my ($cid, $payload) = @_;
  my ($job, $interval, $ranks, $program) = split /\0/, $payload, 4;
  my ($sample, $every) = do {
    local @ARGV = ($job, $interval, $ranks);
    eval "package msrun_ssh_sampler_$cid; " . ($program // '');
  };
  my $sampler = {cid => $cid, sample => $sample, every => $every};
  return sampler_end($sampler, 1, $@ || 'no sampler in its program') if ref $sample ne 'CODE';
  $samplers{$cid} = $sampler;
  sample($sampler);
}

# Takes a sample and sends its line; the sampler ends after its last.
sub sample {
  my ($sampler) = @_;
  my ($line, $last) = eval { $sampler->{sample}->() };
  return sampler_end($sampler, 1, $@ || 'no sample') if !defined $line;
  send_frame('o', $sampler->{cid}, $line);
  return sampler_end($sampler, 0) if $last;
  $sampler->{at} = now() + $sampler->{every};
}

sub sampler_end {
  my ($sampler, $status, $why) = @_;
  send_frame('e', $sampler->{cid}, "msrun-ssh-agent: the sampler failed: $why" =~ s/\n*\z/\n/r)
    if defined $why;
  send_frame('x', $sampler->{cid}, $status);
  send_frame('c', $sampler->{cid});
  delete $samplers{$sampler->{cid}};
}

# ---- The job's watchdog, run by the agent itself (W frame; see the top) ----

sub wd_say { send_frame('o', $wd->{cid}, "$_[0]\n") }

# Starts the watchdog: J T G L W, then stack_site.py's text (watchdog.sh's start).
sub wd_start {
  my ($cid, $payload) = @_;
  my ($job, $silence, $grace, $lost_grace, $workdir, $site) = split /\0/, $payload, 6;
  $wd = {cid => $cid, job => $job, silence => $silence, grace => $grace, lost_grace => $lost_grace,
    in => '', heard => now(), paused => 0, phase => 'run'};
  $SIG{TERM} = sub { $terminated = 1 };
  $SIG{HUP} = 'IGNORE';    # as watchdog.sh: a hangup is no reason to stop watching
  my $name;
  if (open(my $f, '<', '/proc/sys/kernel/hostname')) { $name = <$f> }
  $name = `uname -n` if !length($name // '');
  chomp($name //= '');
  if (length $workdir && !(-d $workdir && -x _)) {
    wd_say('msrun-ssh-watchdog: no workdir');
    return wd_end();
  }
  make_stacks($site);
  wd_say("msrun-ssh-watchdog: ready $$ $name");
}

# The watchdog has ended: its channel exits with status 0 and closes; nothing starts here any more.
sub wd_end {
  send_frame('x', $wd->{cid}, 0);
  send_frame('c', $wd->{cid});
  $wd = undef;
  $watchdog_gone = 1;
  $SIG{TERM} = 'DEFAULT';
  if ($gone) {
    flush();
    exit 0;
  }
}

# The job's stack-dump directory on this host (stack_dir.sh), under the TMPDIR of %$env (the
# agent's own by default).
sub stack_dir {
  my ($job, $env) = @_;
  $env //= \%ENV;
  return (length($env->{TMPDIR} // '') ? $env->{TMPDIR} : '/tmp') . "/msrun-ssh-stacks-$job";
}

# Makes it with $site as its sitecustomize.py, as stack_site does with "first": a directory that
# exists already must be this user's and not a link.
sub make_stacks {
  my ($site) = @_;
  my $d = stack_dir($wd->{job});
  return if !-l $d && -d _ && -o _ && -f "$d/sitecustomize.py";
  return if !length($site // '') || !(mkdir($d, 0700) || (!-l $d && -d _ && -o _));
  open(my $f, '>', "$d/sitecustomize.py") or return;
  print $f $site;
  close $f;
}

# Removes it once the job's processes are gone (sweep.sh's forget_stacks); a link is not followed,
# nor a directory of that name that is another user's or that others may write in (another user
# could make one, at a later attempt's predictable name, and swap its entries for links while the
# tree is removed).
sub forget_stacks {
  my $d = stack_dir($wd->{job});
  remove_tree($d) if !-l $d && -d _ && -o _ && !((lstat _)[2] & 022);
}

sub remove_tree {
  my ($path) = @_;
  return unlink $path if -l $path || !-d _;
  opendir(my $dh, $path) or return;
  remove_tree("$path/$_") for grep { $_ ne '.' && $_ ne '..' } readdir $dh;
  closedir $dh;
  rmdir $path;
}

# The pids of the job's processes on this host but the agent: every process whose environment
# holds MSRUN_SSH_JOB=J, and the agent's P children not reaped yet (sweep.sh's find_pids). None,
# without a look at /proc, once the agent, their subreaper, has no child left, unless its last look
# found some (a process of the job outside its tree, which that look saw).
sub job_pids {
  reap();
  return () if $SUBREAPER && $childless && !$read_found;
  my %pids = map { $_->{pid} => 1 } grep { $_->{job} } values %by_pid;
  my $marker = "MSRUN_SSH_JOB=$wd->{job}";
  opendir(my $proc, '/proc') or return keys %pids;
  for my $pid (readdir $proc) {
    next if $pid !~ /^[0-9]+\z/ || $pid == $$ || $pids{$pid};
    open(my $f, '<', "/proc/$pid/environ") or next;
    local $/;
    my $env = <$f>;
    $pids{$pid} = 1 if defined $env && $env =~ /(?:\A|\0)\Q$marker\E(?:\0|\z)/;
  }
  $read_found = %pids ? 1 : 0;
  return keys %pids;
}

# Sends $sig to every process of the job, as a process group when it leads one; with $say a line
# "killed PID SIGNAME COMMAND" per process signalled. True when it signalled one.
sub signal_job {
  my ($sig, $say) = @_;
  my $found = 0;
  for my $p (job_pids()) {
    my $argv = '';
    if ($say && open(my $f, '<', "/proc/$p/cmdline")) {
      local $/;
      $argv = <$f> // '';
      $argv =~ tr/\0/ /;
    }
    next unless kill($sig, -$p) || kill($sig, $p);
    $found = 1;
    wd_say("killed $p SIG$sig $argv") if $say;
  }
  return $found;
}

# The next control byte ('' once the launcher counts as gone), or undef while none has come.
sub wd_byte {
  return substr($wd->{in}, 0, 1, '') if length $wd->{in};
  return $wd->{eof} ? '' : undef;
}

# SIGTERM, then up to $steps steps of GRACE_STEP while any process of the job lives, then
# SIGKILL (sweep.sh's teardown); then $then: 'done' or 'lost'.
sub wd_teardown {
  my ($steps, $then) = @_;
  @$wd{qw(phase steps then)} = ('grace', $steps, $then);
  return wd_torn_down() if !signal_job('TERM', 1);
  wd_grace();
}

sub wd_grace {
  if ($wd->{steps}-- <= 0 || !job_pids()) {
    signal_job('KILL', 1);
    return wd_torn_down();
  }
  $wd->{wake} = now() + $GRACE_STEP;
}

# After a requested teardown: done. After losing the launcher: four more sweeps over one second
# (a command whose start was under way may appear after the first), then the end.
sub wd_torn_down {
  if ($wd->{then} eq 'lost') {
    @$wd{qw(phase sweeps wake)} = ('sweeps', 4, now() + 0.25);
    return;
  }
  forget_stacks();
  wd_say('msrun-ssh-watchdog: done');
  wd_end();
}

# Handles what came and what is due (watchdog.sh's loop).
sub wd_step {
  while ($wd) {
    my $phase = $wd->{phase};
    my $due = $wd->{wake} && now() >= $wd->{wake};
    if ($phase eq 'grace') {
      # 'K' (a second Ctrl-C) ends the grace at once; heartbeats are still answered.
      while (length $wd->{in}) {
        my $c = substr($wd->{in}, 0, 1, '');
        if ($c eq 'K') {
          $wd->{wake} = undef;
          signal_job('KILL', 1);
          return wd_torn_down();
        }
        wd_say('h') if $c eq 'h';
      }
      return if !$due;
      $wd->{wake} = undef;
      wd_grace();
      next;
    }
    if ($phase eq 'abort' || $phase eq 'sweeps') {
      return if !$due;
      $wd->{wake} = undef;
      if ($phase eq 'abort') {
        wd_teardown($wd->{grace}, 'done');
        next;
      }
      signal_job('KILL', 1);
      if (--$wd->{sweeps} > 0) {
        $wd->{wake} = now() + 0.25;
        return;
      }
      forget_stacks();
      return wd_end();
    }
    my $c = wd_byte();
    return if !defined $c;
    if ($phase eq 'paused') {
      # Stopped until the next byte other than a heartbeat, with no time limit: it resumes the
      # processes first; 'r' goes on as before, any other byte is handled as such.
      if ($c eq 'h') {
        wd_say('h');
        next;
      }
      signal_job('CONT', 0);
      $wd->{phase} = 'run';
      if ($c eq 'r') {
        wd_say('msrun-ssh-watchdog: resumed');
        next;
      }
    }
    if ($c eq 'h') {
      wd_say('h');
    } elsif ($c eq 'z') {
      signal_job('STOP', 0);
      wd_say('msrun-ssh-watchdog: paused');
      $wd->{phase} = 'paused';
    } elsif ($c eq 'q' || $c eq 'k') {
      wd_teardown($wd->{grace}, 'done');
    } elsif ($c eq 'a') {
      # Every process of the job that leads its process group and runs Python gets SIGABRT (it
      # prints its threads' stacks and ends); one second for them to write, then the teardown.
      for my $p (job_pids()) {
        kill('ABRT', $p) if kill(0, -$p) && (readlink("/proc/$p/exe") // '') =~ /python/;
      }
      @$wd{qw(phase wake)} = ('abort', now() + 1);
    } elsif ($c eq 'K') {
      signal_job('KILL', 1);
      forget_stacks();
      wd_say('msrun-ssh-watchdog: done');
      wd_end();
    } else {
      wd_say('msrun-ssh-watchdog: launcher lost');
      wd_teardown($wd->{lost_grace}, 'lost');
    }
  }
}

while (1) {
  flush();
  my ($rin, $win) = ('', '');
  vec($rin, 0, 1) = 1 if !$gone;
  vec($win, 1, 1) = 1 if length $out;
  if (length $out < $MAX_OUT) {
    vec($rin, $_, 1) = 1 for keys %by_fd;
  }
  for my $child (values %children) {
    vec($win, fileno $child->{fin}, 1) = 1 if $child->{fin} && length $child->{pending};
  }
  my $timeout = %children || $wd ? $TURN_S : $IDLE_S;
  my $now = now();
  if ($wd) {
    $timeout = $wd->{wake} - $now if $wd->{wake} && $wd->{wake} - $now < $timeout;
    # The silence limit's end (checked below, in a turn that read nothing), just past it.
    my $silent = $wd->{heard} + $wd->{silence} + 0.01 - $now;
    $timeout = $silent if !$wd->{eof} && !$wd->{paused} && $silent < $timeout;
  }
  for my $sampler (values %samplers) {
    my $wait = $sampler->{at} - $now;
    $timeout = $wait if !defined $timeout || $wait < $timeout;
  }
  $timeout = 0 if (defined $timeout && $timeout < 0) || ($terminated && $wd);
  # A SIGCHLD since the last reap: a turn with no wait, as if it had interrupted select.
  my ($rout, $wout) = ($rin, $win);
  my $ready = $chld ? -1 : select($rout, $wout, undef, $timeout);
  exit 0 if $ready == 0 && !%children && !$wd && !%samplers && defined $IDLE_S;
  my $heard = $ready > 0 && vec($rout, 0, 1);
  if ($ready > 0) {
    read_control() if $heard;
    for my $fd (keys %by_fd) {
      read_output($fd) if vec($rout, $fd, 1) && $by_fd{$fd};
    }
  }
  feed_stdin($_) for values %children;
  reap();
  for my $sampler (values %samplers) {
    sample($sampler) if $samplers{$sampler->{cid}} && now() >= $sampler->{at};
  }
  next if !$wd;
  # Not in a turn that read the launcher: what it read may end before a heartbeat it sent. Nor
  # while bytes wait unread: they may have come while this turn ran (a sample's tool, the agent
  # stopped and continued, a turn with no wait for a SIGCHLD); the next turn reads them first.
  $wd->{eof} = 1
    if !$heard && !$wd->{paused} && now() - $wd->{heard} > $wd->{silence} && !stdin_waits();
  if ($terminated) {
    # Said first: the launcher takes the ends the kill brings for the teardown's, not the cause.
    wd_say('msrun-ssh-watchdog: terminated');
    signal_job('KILL', 1);
    forget_stacks();
    wd_end();
    flush();
    exit 0;
  }
  wd_step();
}
