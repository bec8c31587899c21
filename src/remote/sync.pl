# Sync on a host (run by sync.sh): the same program as sync.py, in Perl, which starts in a few
# milliseconds where python3 takes ~100 ms of CPU. sync.sh runs it when the host has perl, else
# sync.py. One program, up to three steps on one channel; DEST is $ARGV[0], the token $ARGV[1]. A
# token "-" is read from stdin's first line before anything else (an empty line: none; EOF there:
# exit 0), so that the program can be started before it is needed and wait (READY s at most).
# 1. The manifest: lists DEST as JSON lines, one per entry: {"t": f|d|l, "m": mode, "s": size,
#    "n": mtime_ns, "p": path, "l": symlink text}; a path or text that is not UTF-8 comes as "px" /
#    "lx" in hex. Then {"marker": TOKEN} (what DEST/.msrun-sync-id held, "" if nothing) and
#    {"end": true}. With a token, it removes the temporary files an interrupted sync left and
#    writes the token to the marker (atomically, DEST created when missing).
# 2. When stdin then brings a request (a line that begins with "{"), {"hash": [hex paths]}: it
#    answers {"marker": TOKEN now}, {"p"|"px": path, "h": sha256 hex} per path ("" when
#    unreadable) and {"end": true}.
# 3. When stdin then brings anything else: the record stream, applied to DEST (see sync.py for the
#    records, the refusals and the result lines, which are the same).
# EOF where step 2 or 3 could begin ends the program (exit 0); WAIT seconds of silence there, or
# IDLE seconds within the stream, count as EOF (a launcher gone without sshd noticing).
#
# Mtimes are exact to the nanosecond, as the launcher compares them: on x86_64 and aarch64 Linux
# through the newfstatat and utimensat system calls (Perl's own stat has whole seconds, and
# Time::HiRes's floating seconds lose the last digits). Elsewhere through Time::HiRes: correct
# copies still, but a file whose mtime came out a few nanoseconds off is compared by its hash.
#
# It loads as little as it can (a host pays every millisecond of its start on every sync): no
# Config where the kernel names the architecture (/proc/sys/kernel/arch, Linux 6.1 and later; a
# perl with 8-byte pointers there uses that architecture's calls), no Fcntl or Errno (Linux's
# errno numbers below 35 and its file type bits are the same on every architecture; the open flags
# come from the table below), Digest::SHA only when asked to hash.
use strict;

my ($DEST, $TOKEN) = (@ARGV, '', '');
my ($MARK, $TMP) = ('.msrun-sync-id', '.msrun-sync.tmp.');
my ($WAIT, $IDLE, $READY) = (600, 30, 86400);
# A listing or hashing that takes long sends what it has (or an empty line) every BEAT seconds:
# the launcher gives a host up after 120 s without a byte (a tree of millions of files on NFS, a
# file of tens of GB to hash).
my ($BEAT, $SENT) = (10, time);
my ($AT_FDCWD, $AT_SYMLINK_NOFOLLOW) = (-100, 0x100);
# newfstatat, utimensat, the unpack template of struct stat's st_mode, st_size, st_mtime and its
# nanoseconds (at 24 or 16, 48, 88, 96), and O_NOFOLLOW.
my %CALLS_OF_ARCH = (
  x86_64 => [262, 280, 'x24 L x20 q x32 q q', 0400000],
  aarch64 => [79, 88, 'x16 L x28 q x32 q q', 0100000],
);
my $CALLS = $^O eq 'linux' && length(pack 'p', '') == 8 ? $CALLS_OF_ARCH{arch()} : undef;
my $STAT = "\0" x 256;
my $PLAIN = qr/\A[\x20-\x21\x23-\x5b\x5d-\x7e]*\z/;  # a JSON string as it is: nothing to escape
my ($EINTR, $ENOENT, $EEXIST, $ENOTEMPTY) = (4, 2, 17, 39);
my ($S_IFMT, $S_IFDIR, $S_IFLNK, $S_IFREG) = (0170000, 0040000, 0120000, 0100000);
# O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW
my $OPEN_NEW = $CALLS ? 1 | 0100 | 0200 | $CALLS->[3] : do {
  require Fcntl;
  Fcntl::O_WRONLY() | Fcntl::O_CREAT() | Fcntl::O_EXCL() | Fcntl::O_NOFOLLOW();
};
# Without Time::HiRes (not in perl-base either) mtimes are whole seconds: files whose mtime then
# differs from the launcher's are compared by their hash.
my $HIRES = $CALLS || eval { require Time::HiRes; 1 };

my ($IN, $OUT) = ('', '');
my %state = (tmp => undef, files => 0, bytes => 0, deleted => 0);
my %checked;
binmode STDIN;
binmode STDOUT;

# The architecture perl runs on ("x86_64"): the kernel's when it says, else the one perl was
# built for.
sub arch {
  if (open my $f, '<', '/proc/sys/kernel/arch') {
    my $arch = <$f> // '';
    chomp $arch;
    return $arch if length $arch;
  }
  require Config;
  return (split /-/, $Config::Config{archname} // $Config::Config{myarchname})[0];
}

# (mode, size, mtime in ns) of PATH itself (a symlink is not followed); () with $! set on failure.
sub lst {
  my ($path) = @_;
  if ($CALLS) {
    return () if syscall($CALLS->[0], $AT_FDCWD, "$path", $STAT, $AT_SYMLINK_NOFOLLOW) != 0;
    my ($mode, $size, $sec, $nsec) = unpack $CALLS->[2], $STAT;
    return ($mode, $size, $sec * 1_000_000_000 + $nsec);
  }
  if (!$HIRES) {
    my @st = CORE::lstat($path) or return ();
    return ($st[2], $st[7], $st[9] * 1_000_000_000);
  }
  my @st = Time::HiRes::lstat($path) or return ();
  my $whole = (CORE::lstat($path))[9] // int($st[9]);
  return ($st[2], $st[7], $whole * 1_000_000_000 + int(($st[9] - $whole) * 1e9 + 0.5));
}

sub set_mtime {
  my ($path, $ns) = @_;
  my ($sec, $nsec);
  {
    use integer;
    ($sec, $nsec) = ($ns / 1_000_000_000, $ns % 1_000_000_000);
  }
  ($sec, $nsec) = ($sec - 1, $nsec + 1_000_000_000) if $nsec < 0;
  if ($CALLS) {
    my $times = pack 'q4', $sec, $nsec, $sec, $nsec;
    syscall($CALLS->[1], $AT_FDCWD, "$path", $times, 0) == 0 or die "$path: $!\n";
  } elsif ($sec < 0 || !$HIRES) {  # Time::HiRes refuses times before 1970
    utime $sec, $sec, $path or die "$path: $!\n";
  } else {
    Time::HiRes::utime($sec + $nsec / 1e9, $sec + $nsec / 1e9, $path) or die "$path: $!\n";
  }
}

sub is_dir { return ($_[0] & $S_IFMT) == $S_IFDIR }

sub quote {
  my ($s) = @_;
  $s =~ s/(["\\])/\\$1/g;
  $s =~ s/([\x00-\x1f])/sprintf('\\u%04x', ord $1)/ge;
  return qq("$s");
}

sub is_utf8 {
  return $_[0] =~ /\A(?:[\x00-\x7f]|[\xc2-\xdf][\x80-\xbf]|\xe0[\xa0-\xbf][\x80-\xbf]
      |[\xe1-\xec\xee\xef][\x80-\xbf]{2}|\xed[\x80-\x9f][\x80-\xbf]|\xf0[\x90-\xbf][\x80-\xbf]{2}
      |[\xf1-\xf3][\x80-\xbf]{3}|\xf4[\x80-\x8f][\x80-\xbf]{2})*\z/x;
}

# The JSON member KEY: NAME (a path or a symlink's text): a string when NAME is UTF-8, else
# "KEYx": its bytes in hex.
sub name {
  my ($k, $v) = @_;
  return qq("$k": "$v") if $v =~ $PLAIN;
  return qq("$k": ) . quote($v) if is_utf8($v);
  return qq("${k}x": ") . unpack('H*', $v) . '"';
}

# A JSON line from [key, value, ...]: "end" as true, "p" as name() says, every other value a
# string (non-UTF-8 bytes there become "?").
sub emit {
  my @parts;
  while (my ($k, $v) = splice @_, 0, 2) {
    if ($k eq 'end') {
      push @parts, qq("$k": true);
    } elsif ($k eq 'p') {
      push @parts, name($k, $v);
    } else {
      $v =~ s/[\x80-\xff]/?/g unless is_utf8($v);
      push @parts, qq("$k": ) . quote($v);
    }
  }
  $OUT .= '{' . join(', ', @parts) . "}\n";
}

sub beat {
  return if time - $SENT < $BEAT;
  $OUT .= "\n" unless length $OUT;
  flush_out();
}

sub flush_out {
  $SENT = time;
  while (length $OUT) {
    my $n = syswrite STDOUT, $OUT;
    if (!defined $n) {
      next if $! == $EINTR;
      exit 2;
    }
    substr($OUT, 0, $n, '');
  }
}

sub random_hex { return unpack 'H*', pack('N3', map { int rand 4294967296 } 1 .. 3) }

sub random_name { return $TMP . random_hex() }

# Lists the directory TOP (REL from DEST): its entries, then its subdirectories'. Each entry is
# looked up relative to the open directory (newfstatat on its descriptor: no walk of the whole path
# again) where the calls are known and perl gives directory handles a descriptor. An entry gone
# since the directory was read (a file renamed over, a neighbour's marker on a shared DEST) is
# left out; a subdirectory that cannot be listed is an error that names it (p), which the
# launcher passes over when it excludes that directory.
sub walk {
  my ($top, $rel) = @_;
  my $dh;
  if (!opendir $dh, $top) {
    return if $! == $ENOENT && length $rel;
    emit(error => "cannot list $top: $!", length $rel ? (p => $rel) : ());
    return;
  }
  my @names = readdir $dh;
  my $fd = $CALLS ? fileno $dh : undef;
  my $pre = length $rel ? "$rel/" : '';
  my $plain = $pre =~ $PLAIN;
  my @dirs;
  for my $name (@names) {
    next if $name eq '.' || $name eq '..';
    beat();
    my $path = "$top/$name";
    if (length $TOKEN && index($name, $TMP) == 0) {
      unlink $path;
      next;
    }
    next if !length $rel && index($name, "$MARK.tmp.") == 0;  # a host's marker on its way
    my ($mode, $size, $mtime);
    if (defined $fd) {
      if (syscall($CALLS->[0], $fd, "$name", $STAT, $AT_SYMLINK_NOFOLLOW) != 0) {
        next if $! == $ENOENT;
        die "$path: $!\n";
      }
      my ($sec, $nsec);
      ($mode, $size, $sec, $nsec) = unpack $CALLS->[2], $STAT;
      $mtime = $sec * 1_000_000_000 + $nsec;
    } elsif (!(($mode, $size, $mtime) = lst($path))) {
      next if $! == $ENOENT;
      die "$path: $!\n";
    }
    my $type = $mode & $S_IFMT;
    my $t = $type == $S_IFREG ? 'f' : $type == $S_IFDIR ? 'd' : $type == $S_IFLNK ? 'l' : next;
    my $r = "$pre$name";
    my $p = $plain && $name =~ $PLAIN ? qq("p": "$r") : name(p => $r);
    my $link = '';
    if ($t eq 'l') {
      my $target = readlink $path;
      next if !defined $target && $! == $ENOENT;
      die "$path: $!\n" unless defined $target;
      $link = ', ' . name(l => $target);
    }
    $OUT .= qq({"t": "$t", "m": ) . ($mode & 07777) . qq(, "s": $size, "n": $mtime, $p$link}\n);
    push @dirs, [$path, $r] if $t eq 'd';
  }
  closedir $dh;
  walk(@$_) for @dirs;
}

sub marker {
  open my $f, '<:raw', "$DEST/$MARK" or return '';
  read $f, my $text, 200;
  $text //= '';
  $text =~ s/\A\s+|\s+\z//g;
  $text =~ s/[^\x20-\x7e]/?/g;
  return $text;
}

sub make_dirs {
  my ($dir) = @_;
  return if -d $dir;
  (my $parent = $dir) =~ s{/+[^/]*/*\z}{};
  make_dirs($parent) if length $parent && $parent ne $dir;
  mkdir $dir or $! == $EEXIST or die "$dir: $!\n";
}

# Writes the token to the marker, if it can: on a read-only mount (code mounted read-only on
# compute nodes), or DEST no directory, the hosts that share DEST read back the same old marker,
# and only what has to change, if anything, fails, with its own error (a sync with nothing to do
# failed here, and "DEST is not a directory" gave way to the marker's "Not a directory").
sub write_marker {
  my $tmp = "$DEST/$MARK.tmp." . random_hex();
  my $ok = eval {
    make_dirs($DEST);
    open my $f, '>', $tmp or die;
    print {$f} "$TOKEN\n" or die;
    close $f or die;
    rename $tmp, "$DEST/$MARK" or die;
    1;
  };
  unlink $tmp unless $ok;
}

sub manifest {
  my $ok = eval {
    if (-d $DEST) {
      walk($DEST, '');
    } elsif (-e $DEST || -l $DEST) {
      emit(error => "$DEST is not a directory");
    }
    emit(marker => marker());
    write_marker() if length $TOKEN;
    1;
  };
  if (!$ok) {
    chomp(my $why = $@);
    emit(error => $why);
  }
  emit(end => 1);
  flush_out();
}

# The SHA-256 of DEST/PATH in hex, "" when it cannot be read. Digest::SHA is not in perl-base
# (Debian's and Ubuntu's essential perl, all a minimal host may have): coreutils' sha256sum then.
my $DIGEST;
sub sha256 {
  my ($path) = @_;
  open my $f, '<:raw', "$DEST/$path" or return '';
  $DIGEST //= eval { require Digest::SHA; 1 } ? 1 : 0;
  if ($DIGEST) {
    my $h = Digest::SHA->new(256);
    while (1) {
      my $n = read $f, my $chunk, 1 << 24;
      return '' unless defined $n;
      last if !$n;
      $h->add($chunk);
      beat();
    }
    return $h->hexdigest;
  }
  close $f;
  open my $sum, '-|', 'sha256sum', '-b', '--', "$DEST/$path" or return '';
  my $line = <$sum> // '';
  close $sum or return '';
  return $line =~ /\A\\?([0-9a-f]{64}) / ? $1 : '';  # \ first: sha256sum escaped the name
}

sub answer {
  my ($request) = @_;
  emit(marker => marker());
  my ($list) = $request =~ /\[(.*)\]/s;
  for my $hex (($list // '') =~ /"([0-9a-fA-F]*)"/g) {
    my $raw = pack 'H*', $hex;
    emit(p => $raw, h => sha256($raw));
  }
  emit(end => 1);
  flush_out();
}

# Reads more of stdin into $IN, waiting at most SECS; false at EOF or after SECS of silence.
sub fill {
  my ($secs) = @_;
  my $n;
  my $ok = eval {
    local $SIG{ALRM} = sub { die "silent\n" };
    alarm $secs;
    do { $n = sysread STDIN, $IN, 1 << 20, length $IN } until defined $n || $! != $EINTR;
    alarm 0;
    1;
  };
  alarm 0;
  return $ok && $n;
}

# The first byte of what comes next on stdin, left there; '' for EOF.
sub next_step {
  fill($WAIT) if !length $IN;
  return substr $IN, 0, 1;
}

sub read_line {
  while (index($IN, "\n") < 0) { last unless fill($WAIT) }
  my $end = index $IN, "\n";
  return substr $IN, 0, $end < 0 ? length $IN : $end + 1, '';
}

sub readn {
  my ($n) = @_;
  while (length $IN < $n) { fill($IDLE) or die "eof\n" }
  return substr $IN, 0, $n, '';
}

sub refuse { die "refused: $_[0]\n" }

sub safe {
  my ($path) = @_;
  my @parts = split m{/}, $path, -1;
  if (!length $path || $path =~ m{\A/|\0} || grep { $_ eq '' || $_ eq '.' || $_ eq '..' } @parts) {
    refuse("refused path '$path': not a plain relative path");
  }
  my $parent = $DEST;
  for my $p (@parts[0 .. $#parts - 1]) {
    $parent .= "/$p";
    next if $checked{$parent};
    my ($mode) = lst($parent) or die "$parent: $!\n";
    refuse("refused path '$path': '$p' is not a directory") unless is_dir($mode);
    $checked{$parent} = 1;
  }
  return "$DEST/$path";
}

# Python's caches in directory DIR (__pycache__/ and *.pyc, which every sync leaves out, so never
# deletes one by one): they go with DIR, so that a package made a module (a directory replaced by
# a file) is not kept by the caches its runs left. Nothing else excluded goes.
sub drop_caches {
  my ($dir) = @_;
  opendir(my $dh, $dir) or return;
  my @names = grep { $_ ne '.' && $_ ne '..' } readdir $dh;
  closedir $dh;
  for my $n (@names) {
    my ($m) = lst("$dir/$n");
    next unless defined $m;
    if ($n eq '__pycache__' && is_dir($m)) {
      opendir(my $ch, "$dir/$n") or next;
      unlink "$dir/$n/$_" for grep { /\.pyc\z/ } readdir $ch;
      closedir $ch;
      rmdir "$dir/$n";
    } elsif ($n =~ /\.pyc\z/ && !is_dir($m)) {
      unlink "$dir/$n";
    }
  }
}

# A file or symlink about to take FULL's place: a directory still there holds excluded files.
sub not_a_directory {
  my ($full) = @_;
  my ($m) = lst($full);
  die "$full: a directory holding files the sync leaves out is in the way (remove it here)\n"
    if defined $m && is_dir($m);
}

sub delete_entry {
  my ($full) = @_;
  %checked = ();
  my ($mode) = lst($full);
  if (!defined $mode) {
    return if $! == $ENOENT;
    die "$full: $!\n";
  }
  writable_dir($full);
  if (is_dir($mode)) {
    if (!rmdir $full) {
      return unless $! == $ENOTEMPTY || $! == $EEXIST;
      drop_caches($full);
      rmdir $full or return;  # a directory that still holds excluded files stays
    }
  } else {
    unlink $full or $! == $ENOENT or die "$full: $!\n";
  }
  $state{deleted}++;
}

# Directories whose mode would keep their owner from writing in them (0555) get it at the
# stream's end (finish), as do those such a mode already kept closed: DIR -> mode.
my %LATE;

sub directory {
  my ($full, $mode) = @_;
  my ($have) = lst($full);
  if (defined $have) {
    refuse("cannot make directory '$full': something else is there") unless is_dir($have);
  } else {
    die "$full: $!\n" unless $! == $ENOENT;
    mkdir $full, 0700 or die "$full: $!\n";
  }
  delete $LATE{$full};
  $LATE{$full} = $mode if !($mode & 0200);
  chmod exists $LATE{$full} ? $mode | 0700 : $mode, $full or die "$full: $!\n";
}

sub dir_of { (my $d = $_[0]) =~ s{/[^/]*\z}{}; return $d }

# Opens the directory of FULL for a change in it when its mode keeps its owner (us) out.
sub writable_dir {
  my $dir = dir_of($_[0]);
  return if exists $LATE{$dir} || -w $dir && -x _;
  my @st = lstat $dir or return;
  return unless $st[4] == $> && is_dir($st[2]);
  $LATE{$dir} = $st[2] & 07777;
  chmod(($st[2] & 07777) | 0700, $dir) or die "$dir: $!\n";
}

sub finish { chmod $LATE{$_}, $_ for keys %LATE }

sub write_file {
  my ($full, $mode, $mtime, $size) = @_;
  writable_dir($full);
  my $tmp = dir_of($full) . '/' . random_name();
  $state{tmp} = $tmp;
  sysopen my $fh, $tmp, $OPEN_NEW, 0600 or die "$tmp: $!\n";
  binmode $fh;
  my $left = $size;
  while ($left > 0) {
    fill($IDLE) or die "eof\n" if !length $IN;
    my $take = length $IN;
    $take = $left if $left < $take;
    my $chunk = substr $IN, 0, $take, '';
    for (my $off = 0; $off < length $chunk;) {
      my $n = syswrite $fh, $chunk, length($chunk) - $off, $off;
      die "$tmp: $!\n" unless defined $n || $! == $EINTR;
      $off += $n // 0;
    }
    $left -= length $chunk;
  }
  chmod $mode, $fh or die "$tmp: $!\n";
  close $fh or die "$tmp: $!\n";
  set_mtime($tmp, $mtime);
  not_a_directory($full);
  rename $tmp, $full or die "$full: $!\n";
  $state{tmp} = undef;
  $state{files}++;
  $state{bytes} += $size;
}

# Whether TARGET, a symlink's text at PATH, leads out of DEST.
sub leaves {
  my ($path, $target) = @_;
  return 1 if $target =~ m{\A/};
  my @up;
  for my $p (split(m{/}, dir_of("/$path")), split(m{/}, $target)) {
    next if $p eq '' || $p eq '.';
    if ($p ne '..') {
      push @up, $p;
    } elsif (@up && $up[-1] ne '..') {
      pop @up;
    } else {
      push @up, '..';
    }
  }
  return @up && $up[0] eq '..';
}

sub symlink_entry {
  my ($path, $full, $target) = @_;
  refuse("refused symlink '$path' -> '$target': it leads out of the directory")
    if leaves($path, $target);
  writable_dir($full);
  my $tmp = dir_of($full) . '/' . random_name();
  $state{tmp} = $tmp;
  symlink $target, $tmp or die "$tmp: $!\n";
  not_a_directory($full);
  rename $tmp, $full or die "$full: $!\n";
  $state{tmp} = undef;
  $state{files}++;
}

sub attrs {
  my ($full, $mode, $mtime) = @_;
  my ($have) = lst($full);
  refuse("cannot set the mode of '$full': not a file") unless defined $have && ($have & $S_IFMT) == $S_IFREG;
  chmod $mode, $full or die "$full: $!\n";
  set_mtime($full, $mtime);
}

sub record {
  my ($kind, $mode, $mtime, $size, $n) = unpack 'a N q> Q> N', readn(25);
  return 0 if $kind eq 'E';
  my $path = readn($n);
  my $full = safe($path);
  $mode &= 07777;
  if ($kind eq 'X') {
    delete_entry($full);
  } elsif ($kind eq 'D') {
    directory($full, $mode);
  } elsif ($kind eq 'F') {
    write_file($full, $mode, $mtime, $size);
  } elsif ($kind eq 'L') {
    symlink_entry($path, $full, readn($size));
  } elsif ($kind eq 'A') {
    attrs($full, $mode, $mtime);
  } else {
    refuse("unknown record type '$kind'");
  }
  return 1;
}

sub apply {
  my $ok = eval {
    make_dirs($DEST);
    1 while record();
    1;
  };
  finish();
  if ($ok) {
    $OUT .= "msrun-sync: done $state{files} $state{bytes} $state{deleted}\n";
    flush_out();
    return 0;
  }
  my $why = $@;
  unlink $state{tmp} if defined $state{tmp};
  if ($why eq "eof\n") {
    $OUT .= "msrun-sync: interrupted\n";
    flush_out();
    return 1;
  }
  $why =~ s/\Arefused: //;
  $OUT .= "msrun-sync: error: $why";
  flush_out();
  return 2;
}

$SIG{PIPE} = 'IGNORE';
if ($TOKEN eq '-') {  # the token is stdin's first line (empty: none); EOF first: nothing to do
  $WAIT = $READY;
  $TOKEN = read_line();
  exit 0 unless $TOKEN =~ s/\n\z//;
  $TOKEN =~ s/\A\s+|\s+\z//g;
  $WAIT = 600;
}
manifest();
my $step = next_step();
if ($step eq '{') {
  answer(read_line());
  $step = next_step();
}
exit(length $step ? apply() : 0);
