#!/usr/bin/env bash
# The Python package `gpucomm` (pyproject.toml, setup.py, python/gpucomm/): installs it with pip into
# fresh virtual environments, from this checkout and from a copy of it without build folders, and
# checks in each that
#   - `import gpucomm` works outside the repository, gpucomm.get_include() is inside the environment
#     (not the repository's include/), holds gpucomm/gpucomm.cuh and exactly the files of
#     include/gpucomm/ with the same contents;
#   - gpucomm.__version__ and `python -m gpucomm --version` are config.hpp's GPUCOMM_VERSION_*;
#   - a .cu including <gpucomm/gpucomm.cuh> compiles with
#     nvcc -std=c++20 -arch=sm_90 -I"$(python -m gpucomm --include)" -c;
#   - the install left nothing in the checkout that git would show (build output is ignored).
# Needs python3 with venv (Debian: python3-venv), pip's access to PyPI or a wheel mirror for
# setuptools and wheel (the isolated build), and nvcc (CUDA 13: $NVCC, PATH or /usr/local/cuda). No
# GPU. Exits 0 when every check passes, 1 with a FAIL line per failed check otherwise.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python=${PYTHON:-python3}
failures=0
pass() { echo "PASS  $*"; }
fail() {
  echo "FAIL  $*" >&2
  failures=$((failures + 1))
}
die() {
  echo "FAIL  $*" >&2
  exit 1
}

nvcc=${NVCC:-}
if [ -z "$nvcc" ]; then
  if command -v nvcc > /dev/null 2>&1; then nvcc=$(command -v nvcc)
  elif [ -x /usr/local/cuda/bin/nvcc ]; then nvcc=/usr/local/cuda/bin/nvcc
  else die "nvcc not found (set NVCC, put it on PATH, or install the CUDA toolkit in /usr/local/cuda)"
  fi
fi
command -v "$python" > /dev/null 2>&1 || die "$python not found (set PYTHON)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpucomm-pkg.XXXXXX") || die "mktemp failed"
trap 'rm -rf "$tmp"' EXIT

expected=$(sed -n 's/^[[:space:]]*#[[:space:]]*define[[:space:]]\{1,\}GPUCOMM_VERSION_\(MAJOR\|MINOR\|PATCH\)[[:space:]]\{1,\}\([0-9]\{1,\}\).*/\2/p' \
  "$root/include/gpucomm/config.hpp" | paste -sd. -)
[[ $expected =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "could not read GPUCOMM_VERSION_MAJOR/MINOR/PATCH from include/gpucomm/config.hpp (got '$expected')"

cat > "$tmp/tiny.cu" << 'EOF'
// Compiled against the installed package's headers: the include path works and the headers are whole.
#include <gpucomm/gpucomm.cuh>

__global__ void __launch_bounds__(1024)
    tiny(gpucomm::comm<gpucomm::NVLinkStore> c, gpucomm::collective_workspace ws, float* x, std::size_t n) {
  auto block = cooperative_groups::this_thread_block();
  gpucomm::allreduce(c, block, ws, x, x, n, gpucomm::reduction::sum{});
}
static_assert(gpucomm::version_major >= 0);
EOF

git_state() {  # the untracked files git shows in the checkout (ignored ones not)
  git -C "$root" ls-files --others --exclude-standard 2> /dev/null
}
in_git=0
git -C "$root" rev-parse --is-inside-work-tree > /dev/null 2>&1 && in_git=1
[ "$in_git" -eq 1 ] && git_state > "$tmp/git-before.txt"

# check_install NAME SOURCE: a fresh venv, pip install SOURCE, then the checks above.
check_install() {
  local name=$1 source=$2 venv="$tmp/venv-$1" inc version
  echo "== $name: pip install $source"
  if ! "$python" -m venv "$venv" > "$tmp/$name-venv.log" 2>&1; then
    cat "$tmp/$name-venv.log" >&2
    fail "$name: python3 -m venv failed (Debian/Ubuntu: apt-get install python3-venv)"
    return
  fi
  local start=$SECONDS
  if ! "$venv/bin/python" -m pip install --disable-pip-version-check --no-input "$source" > "$tmp/$name-pip.log" 2>&1; then
    tail -n 40 "$tmp/$name-pip.log" >&2
    fail "$name: pip install $source failed (log above)"
    return
  fi
  pass "$name: pip install ($((SECONDS - start)) s)"
  # From an empty directory, so that nothing of the repository is importable by accident.
  mkdir -p "$tmp/cwd"
  if ! inc=$(cd "$tmp/cwd" && "$venv/bin/python" -c 'import gpucomm; print(gpucomm.get_include())'); then
    fail "$name: import gpucomm / gpucomm.get_include() failed"
    return
  fi
  case $inc in
    "$venv"/*) pass "$name: gpucomm.get_include() = $inc" ;;
    *) fail "$name: gpucomm.get_include() = $inc is outside the venv (the headers were not installed)" ;;
  esac
  if [ -f "$inc/gpucomm/gpucomm.cuh" ]; then pass "$name: $inc/gpucomm/gpucomm.cuh exists"
  else fail "$name: $inc/gpucomm/gpucomm.cuh is missing"
  fi
  if diff -r "$root/include/gpucomm" "$inc/gpucomm" > "$tmp/$name-diff.txt" 2>&1; then
    pass "$name: the installed headers are include/gpucomm/ ($(find "$inc/gpucomm" -type f | wc -l) files)"
  else
    head -n 20 "$tmp/$name-diff.txt" >&2
    fail "$name: the installed headers differ from include/gpucomm/ (diff above)"
  fi
  version=$(cd "$tmp/cwd" && "$venv/bin/python" -c 'import gpucomm; print(gpucomm.__version__)')
  if [ "$version" = "$expected" ]; then pass "$name: gpucomm.__version__ = $version"
  else fail "$name: gpucomm.__version__ = '$version', config.hpp says $expected"
  fi
  version=$(cd "$tmp/cwd" && "$venv/bin/python" -m gpucomm --version)
  [ "$version" = "$expected" ] || fail "$name: python -m gpucomm --version printed '$version', expected $expected"
  start=$SECONDS
  if (cd "$tmp" && "$nvcc" -std=c++20 -arch=sm_90 -I"$("$venv/bin/python" -m gpucomm --include)" \
    -c tiny.cu -o "tiny-$name.o") > "$tmp/$name-nvcc.log" 2>&1; then
    pass "$name: nvcc -std=c++20 -arch=sm_90 -I\$(python -m gpucomm --include) -c tiny.cu ($((SECONDS - start)) s)"
  else
    tail -n 40 "$tmp/$name-nvcc.log" >&2
    fail "$name: a .cu including <gpucomm/gpucomm.cuh> did not compile against the installed headers (log above)"
  fi
}

# 1. From the checkout, as a user would.
check_install checkout "$root"

# 2. From a copy without build output (build*/, *.egg-info, .git, .deps), as CI's fresh clone is.
mkdir -p "$tmp/copy"
if tar -C "$root" --exclude='./build*' --exclude='*.egg-info' --exclude=./.git --exclude=./.deps \
  --exclude='__pycache__' -cf - . | tar -C "$tmp/copy" -xf -; then
  check_install copy "$tmp/copy"
  if [ -n "$(find "$tmp/copy" -maxdepth 2 -name '*.egg-info' -not -path "$tmp/copy/build/*")" ]; then
    fail "copy: the build left an *.egg-info outside build/"
  fi
else
  fail "could not copy the checkout to $tmp/copy"
fi

if [ "$in_git" -eq 1 ]; then
  # New untracked files that a Python build writes (others may appear while people work in the tree).
  git_state > "$tmp/git-after.txt"
  comm -13 <(sort "$tmp/git-before.txt") <(sort "$tmp/git-after.txt") |
    grep -E '(^|/)(build[^/]*|dist)/|\.egg-info(/|$)|\.whl$|^python/' > "$tmp/git-new.txt"
  if [ -s "$tmp/git-new.txt" ]; then
    cat "$tmp/git-new.txt" >&2
    fail "pip's build left files in the checkout that .gitignore does not cover (listed above)"
  else
    pass "the installs left no build output in the checkout that git shows"
  fi
fi

if [ "$failures" -eq 0 ]; then
  echo "check_package: PASS"
  exit 0
fi
echo "check_package: FAIL ($failures check(s))" >&2
exit 1
