#!/usr/bin/env bash
# Format (clang-format, .clang-format) and static analysis (clang-tidy, .clang-tidy) of the C++
# sources, and shellcheck of the programs run on remote hosts (src/remote/*.sh), of the bash
# completion, of the package tests and of the test cluster; fails on any difference or finding.
# clang-tidy reads the compile commands of a configure of its own (build-lint/, nothing built).
set -euo pipefail
cd "$(dirname "$0")/.."
# The tree holds what was written, never what a run left: the top holds only the files named
# here (a profiler's output was once committed there), and no tracked file is one .gitignore
# names.
echo "lint: the tree's top and .gitignore"
top='\.clang-format|\.clang-tidy|\.gitignore|CMakeLists\.txt|README\.md'
stray=$({
  git ls-files | grep -v / | grep -vxE "$top" || true
  git ls-files -ci --exclude-standard
} | sort -u)
if [ -n "$stray" ]; then
  echo "lint: files that a run left, not sources, are tracked:" >&2
  echo "$stray" >&2
  exit 1
fi
echo "lint: the rooms' layers (docs/architecture.md)"
python3 .ci/layers.py
scripts=(src/remote/*.sh)
echo "lint: shellcheck -s sh on ${#scripts[@]} files"
shellcheck -s sh "${scripts[@]}"
bash_scripts=(completions/msrun-ssh.bash tests/package/*.sh tests/cluster/*.sh)
echo "lint: shellcheck on ${#bash_scripts[@]} bash files"
shellcheck "${bash_scripts[@]}"
mapfile -t files < <(git ls-files 'src/*.cc' 'include/*.h' 'tests/*.cc' 'tests/*.h')
echo "lint: clang-format on ${#files[@]} files"
clang-format --dry-run --Werror "${files[@]}"
# One command per source (CI's build/ is a unity build) and no precompiled header (g++'s .gch is
# not clang's, and each source must compile with its own includes alone), with -Werror: clang's
# own warnings on a source are errors clang-tidy reports. The configure writes the one generated
# header, remote/programs.h.
db=build-lint
cmake -S . -B "$db" -DCMAKE_BUILD_TYPE=Release -DMSRUN_SSH_WERROR=ON -DMSRUN_SSH_UNITY=OFF \
  -DMSRUN_SSH_PCH=OFF -DMSRUN_SSH_TESTS=OFF >/dev/null
mapfile -t sources < <(git ls-files 'src/*.cc')
echo "lint: clang-tidy on ${#sources[@]} files"
out=$(mktemp)
printf '%s\n' "${sources[@]}" | xargs -P "$(nproc)" -n 4 clang-tidy -p "$db" --quiet >"$out" 2>&1 || true
grep -v "warnings generated" "$out" || true
if grep -qE "(error|warning):" "$out"; then
  rm -f "$out"
  echo "lint: clang-tidy found problems" >&2
  exit 1
fi
rm -f "$out"
echo "lint: clean"
