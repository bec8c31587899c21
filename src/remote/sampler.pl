# The sampler of a running job on one host (watch.h): perl -e THIS JOB INTERVAL RANKS. Every
# INTERVAL seconds it prints one JSON line about the job's processes here, found by the job's
# marker in their environment (MSRUN_SSH_JOB=JOB, as the sweep finds them), grouped by rank, of
# the ranks RANKS names (comma-separated rank words, "sched" for the scheduler: the host's own; a
# process of another rank is another host's, seen here when hosts share a pid namespace):
#   {"t": SECONDS (monotonic), "hz": CLOCK TICKS PER SECOND, "cpu": [ticks of /proc/stat's cpu
#    line: user nice system idle iowait irq softirq steal], "load": 1-minute load, "mem_kb":
#    [MemTotal, MemAvailable], "ranks": [{"rank": "0" | "sched", "pids": N, "cpu": utime+stime
#    ticks, "wait_ns": run-queue wait of every thread (schedstat), both counted from each
#    process's first sample on and never going down, "rss_kb": N, "thr_ns": the CPU
#    throttling of its cgroup (cpu.stat; -1 when unknown), "state": "R"|"S"|"D"|...}],
#    "accel": [utilisation % of each GPU / NPU] when nvidia-smi or npu-smi is installed (asked
#    every RESCAN-th sample: a tool's run costs more than the rest)}
# Only core Perl, no module (the unit tests compile it under strict and warnings); it reads /proc
# and /sys and nothing else, and ends when its stdin ends (the launcher or the agent is gone) or
# after 10 scans without a process of the job. It
# reads every process's environ (a host may run thousands) only every RESCAN-th sample, or when
# it knows of no process of the job in its first RESCAN samples (the processes are starting); in
# between, the processes it found. A host whose job processes have all ended is not scanned in
# full every second.
#
# The launch agent runs it inside itself (agent.pl's M frame): compiled by its eval, the program
# returns its one-sample closure and its interval instead of looping, and the agent takes the
# samples on its own loop. A host then pays no fork and no Perl start for its sampler. The
# closure returns the line and whether it is the last (the 10th scan without a process).
my ($job, $interval, $ranks) = @ARGV;
$interval = 1 if !$interval || $interval < 0.1;
my %mine = map { $_ => 1 } split /,/, ($ranks // '');
# Every path read is under $ROOT: "" on a host; the unit tests point it at a tree of fixture files
# (/proc, and cgroup v1 and v2 under /sys/fs/cgroup).
my $ROOT = $ENV{MSRUN_SSH_SAMPLER_ROOT} // '';
my $RESCAN = 5;

sub slurp {
  my ($path) = @_;
  open(my $fh, '<', "$ROOT$path") or return undef;
  local $/;
  my $text = <$fh>;
  close $fh;
  return $text;
}

# The cgroup's throttled time in ns: v1 cpu controller (throttled_time, ns) or v2
# (throttled_usec); -1 when there is none to read.
my %throttle_path;
sub throttled_ns {
  my ($pid) = @_;
  my $cg = slurp("/proc/$pid/cgroup") // return -1;
  my $path;
  for my $line (split /\n/, $cg) {
    my (undef, $controllers, $p) = split /:/, $line, 3;
    next unless defined $p;
    if ($controllers eq '') { $path //= "/sys/fs/cgroup$p/cpu.stat"; next }
    for my $c (split /,/, $controllers) {
      $path = "/sys/fs/cgroup/$controllers$p/cpu.stat" if $c eq 'cpu';
    }
  }
  return -1 unless defined $path;
  my $stat = slurp($path) // return -1;
  return $1 if $stat =~ /^throttled_time (\d+)/m;
  return $1 * 1000 if $stat =~ /^throttled_usec (\d+)/m;
  return -1;
}

# Each thread's run-queue wait (ns): tid -> ns; undef when the task directory cannot be read.
sub thread_waits {
  my ($pid) = @_;
  my %w;
  opendir(my $dh, "$ROOT/proc/$pid/task") or return undef;
  for my $tid (readdir $dh) {
    next unless $tid =~ /^\d+$/;
    my $s = slurp("/proc/$pid/task/$tid/schedstat") // next;
    my (undef, $wait) = split ' ', $s;
    $w{$tid} = $wait // 0;
  }
  closedir $dh;
  return \%w;
}

my $marker = "\0MSRUN_SSH_JOB=$job\0";  # in "\0" . environ
my $empty = 0;
# The job's processes found by the last scan: pid -> {who: its rank word, start: its start time,
# base_cpu: its CPU ticks at its first sample, tw: its threads' run-queue waits at the last one,
# cpu_n, wait_n: what it counted since its first}. A rank's figures count each process's only from its first sample on (a child found up to
# RESCAN samples late brought all its CPU time into one sample: a rank at a steady 0.3 CPU read as
# 6, a false straggler), and keep what an ended one had counted (%gone: the sums never go down).
my %known;
my %gone;  # rank word -> [cpu ticks, wait ns] counted by its processes that ended
sub max0 { my ($x, $y) = @_; $y //= 0; return $x > $y ? $x : $y }
sub forget {
  my ($k) = @_;
  return unless defined $k->{base_cpu};
  $gone{$k->{who}}[0] += $k->{cpu_n};
  $gone{$k->{who}}[1] += $k->{wait_n} // 0;
}
my %found = map { my $t = $_; ($t => scalar grep { -x "$_/$t" } split /:/, ($ENV{PATH} // '')) }
  qw(nvidia-smi npu-smi timeout);
my ($tool) = grep { $found{$_} } qw(nvidia-smi npu-smi);
# The tool runs inside the agent's loop: one that hangs (a sick device) must not hold it, its
# heartbeats and its teardown. Under coreutils' timeout it gets TOOL_S seconds (the tests set
# fewer), and a tool that ran out of them is not asked again in this job.
my $TOOL_S = ($ENV{MSRUN_SSH_SAMPLER_TOOL_S} // '') =~ /^\d+(\.\d+)?$/
  ? $ENV{MSRUN_SSH_SAMPLER_TOOL_S} : 5;
my $run = $found{timeout} ? "timeout -s KILL $TOOL_S " : '';
my @accel;  # the last utilisations read

# Each accelerator's utilisation: nvidia-smi's utilization.gpu; npu-smi's AICore(%), the first
# figure of each chip row ("| CHIP | BUS-ID | AICore(%) ...").
sub accel {
  my @u;
  if ($tool eq 'nvidia-smi') {
    @u = grep { /^\d+(\.\d+)?$/ } map { s/\s+//gr } split /\n/,
      `${run}nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits 2>/dev/null`;
  } else {
    for (split /\n/, `${run}npu-smi info 2>/dev/null`) {
      push @u, $1 if /^\|\s*\d+\s*\|\s*[0-9A-Fa-f]{4,}:\S+\s*\|\s*(\d+(?:\.\d+)?)/;
    }
  }
  $tool = undef if $run && ($? >> 8 == 124 || $? >> 8 == 137 || ($? & 127) == 9);
  return @u;
}
my $scans = 0;
my $sample = sub {
  my %rank;
  my $every = $scans++ % $RESCAN == 0;
  @accel = accel() if $tool && $every;
  if ($every || (!%known && $scans <= $RESCAN)) {
    my %now;
    opendir(my $proc, "$ROOT/proc") or die "no /proc\n";
    my @pids = grep { /^\d+$/ } readdir $proc;
    closedir $proc;
    for my $pid (@pids) {
      my $env = slurp("/proc/$pid/environ") // next;
      $env = "\0$env";
      next if index($env, $marker) < 0;
      my $who = $env =~ /\0MS_ROLE=MS_SCHED\0/ ? 'sched'
        : $env =~ /\0RANK_ID=(\d+)\0/ ? $1
        : $env =~ /\0RANK=(\d+)\0/ ? $1 : 'other';
      my $stat = slurp("/proc/$pid/stat") // next;
      $stat =~ s/^.*\) //s;
      next unless !%mine || $mine{$who};
      my $start = (split ' ', $stat)[19];
      my $k = $known{$pid};
      $now{$pid} = $k && $k->{start} eq $start ? $k : {who => $who, start => $start};
    }
    for my $pid (keys %known) {
      forget($known{$pid}) unless $now{$pid} && $now{$pid} == $known{$pid};
    }
    %known = %now;
  }
  for my $pid (keys %known) {
    my $k = $known{$pid};
    my $stat = slurp("/proc/$pid/stat") // '';
    $stat =~ s/^.*\) //s;    # after the command name, which may hold anything
    my @f = split ' ', $stat;  # f[0] is field 3 (state), f[19] field 22 (start time)
    if (@f < 20 || $f[19] ne $k->{start}) { forget($k); delete $known{$pid}; next }  # gone, or reused
    my $r = $rank{$k->{who}} //= {pids => 0, cpu => 0, wait_ns => 0, rss_kb => 0, thr_ns => -1,
                                  state => 'S'};
    my $cpu = $f[11] + $f[12];
    $k->{base_cpu} //= $cpu;
    $k->{cpu_n} = max0($cpu - $k->{base_cpu}, $k->{cpu_n});
    # The wait, thread by thread: what each thread waited since the last sample (a thread new
    # since then, all of its own). Summed over the threads alive, it went down when one ended and
    # stood still until the others made that up. Unreadable this time: counted at the next.
    $k->{wait_n} //= 0;
    if (my $tw = thread_waits($pid)) {
      if ($k->{tw}) {
        for my $tid (keys %$tw) {
          my $was = $k->{tw}{$tid};
          $k->{wait_n} += defined $was ? max0($tw->{$tid} - $was) : $tw->{$tid};
        }
      }
      $k->{tw} = $tw;
    }
    $r->{pids}++;
    $r->{cpu} += $k->{cpu_n};
    $r->{rss_kb} += $1 if (slurp("/proc/$pid/status") // '') =~ /^VmRSS:\s+(\d+)/m;
    $r->{wait_ns} += $k->{wait_n};
    $r->{state} = $f[0] if $f[0] eq 'R' || ($f[0] eq 'D' && $r->{state} ne 'R');
    $r->{thr_ns} = throttled_ns($pid) if $r->{thr_ns} < 0;
  }
  for my $who (keys %rank) {
    next unless $gone{$who};
    $rank{$who}{cpu} += $gone{$who}[0];
    $rank{$who}{wait_ns} += $gone{$who}[1];
  }
  my @cpu = ((slurp('/proc/stat') // '') =~ /^cpu\s+(.*)$/m ? (split ' ', $1)[0 .. 7] : ());
  my ($load) = split ' ', (slurp('/proc/loadavg') // '0');
  my $mem = slurp('/proc/meminfo') // '';
  my ($total) = $mem =~ /^MemTotal:\s+(\d+)/m;
  my ($avail) = $mem =~ /^MemAvailable:\s+(\d+)/m;
  my @ranks = map {
    my $r = $rank{$_};
    sprintf('{"rank":"%s","pids":%d,"cpu":%d,"wait_ns":%d,"rss_kb":%d,"thr_ns":%d,"state":"%s"}',
            $_, @$r{qw(pids cpu wait_ns rss_kb thr_ns state)})
  } sort keys %rank;
  my $t = slurp('/proc/uptime') // '0';
  $empty = %rank ? 0 : $empty + 1;
  return (sprintf('{"t":%s,"hz":100,"cpu":[%s],"load":%s,"mem_kb":[%d,%d],"ranks":[%s]%s}' . "\n",
                  (split ' ', $t)[0], join(',', map { $_ // 0 } @cpu), $load, $total // 0,
                  $avail // 0, join(',', @ranks),
                  $tool ? ',"accel":[' . join(',', @accel) . ']' : ''), $empty >= 10);
};
return ($sample, $interval) if caller;    # in the agent (see the top)

$| = 1;
my $stdin = '';
vec($stdin, fileno(STDIN), 1) = 1;
while (1) {
  my ($line, $last) = $sample->();
  print $line;
  exit 0 if $last;
  my $ready = select(my $rin = $stdin, undef, undef, $interval);
  if ($ready > 0) {  # what comes on stdin is not for us: its end is
    my $n = sysread(STDIN, my $buf, 4096);
    exit 0 if !$n;
    select(undef, undef, undef, $interval);
  }
}
