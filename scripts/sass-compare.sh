#!/usr/bin/env bash
# Compare the SASS of gpucomm's benchmark kernels between two revisions, so that a refactor of the
# library can show that it left the hot paths alone (or exactly where it did not):
#   scripts/sass-compare.sh [--out FILE] [--keep] [--max-diff-lines N] [-j N]
#                           [--rename-new REGEX=REPLACEMENT ...] BASE_REV [NEW_REV]
# NEW_REV defaults to the working tree as it is (uncommitted changes and untracked files included),
# built from the repository root into a build folder of its own. A committed revision is built from a
# temporary git worktree, removed on exit. Each side: CMake (Ninja, Release, sm_90, tests, examples
# and the NVSHMEM/NCCL peers off), only the target bench_gpucomm (benchmarks/gpucomm/*.cu,
# GPUCOMM_DEBUG=0), then `cuobjdump -sass`. scripts/sass_compare.py splits the listings per kernel,
# matches kernels by translation unit and mangled name and classifies each one: identical, same
# after renumbering constant-bank offsets (the parameter layout moved: c[0x0][0x...] differ only),
# differs (with a diff of the normalized SASS), or present on one side only. --rename-new rewrites
# the new side's mangled names first (sass_compare.py says when), and the report lists it.
# Writes a markdown report (default ./sass-compare.md) and prints a one-line summary on stdout;
# progress goes to stderr. --keep leaves the build folders and the SASS listings in the temporary
# folder it names. Needs cuobjdump and nvdisasm: from beside nvcc, from PATH, or from the PyPI
# wheels nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm (installed with pip when none is found).
# Time: about a minute per side on 2 cores.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(git -C "$here/.." rev-parse --show-toplevel)
# shellcheck source=scripts/lib/common.sh
source "$here/lib/common.sh"

usage() { awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; }
out=sass-compare.md
keep=0
max_diff_lines=200
renames=()
jobs=$(nproc 2>/dev/null || echo 2)
revs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift ;;
    --out=*) out=${1#--out=} ;;
    --keep) keep=1 ;;
    --max-diff-lines) max_diff_lines=$2; shift ;;
    --rename-new) renames+=(--rename-new "$2"); shift ;;
    --rename-new=*) renames+=(--rename-new "${1#--rename-new=}") ;;
    -j) jobs=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    *) revs+=("$1") ;;
  esac
  shift
done
if [ ${#revs[@]} -lt 1 ] || [ ${#revs[@]} -gt 2 ]; then usage >&2; exit 2; fi
[[ $out == /* ]] || out=$PWD/$out
resolve() { git -C "$root" rev-parse --verify --quiet "$1^{commit}" || { echo "not a revision: $1" >&2; exit 2; }; }
base_sha=$(resolve "${revs[0]}")
new_sha=""
if [ ${#revs[@]} -eq 2 ]; then new_sha=$(resolve "${revs[1]}"); fi

say() { echo "sass-compare: $*" >&2; }

gpucomm_need cmake cmake
gpucomm_need ninja ninja-build
gpucomm_need c++filt binutils
gpucomm_need python3 python3
gpucomm_install_missing
nvcc=${NVCC:-$(gpucomm_find_nvcc)}
nvcc_release=$("$nvcc" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
nvcc_build=$("$nvcc" --version | sed -n 's/.*\(release .*\)/\1/p')

# ---- cuobjdump (and the nvdisasm it runs) ----------------------------------------------------------
site_dirs() {
  python3 -c "import site, sysconfig; d = set(site.getsitepackages() + [site.getusersitepackages()] + [sysconfig.get_paths()[k] for k in ('purelib', 'platlib')]); print('\n'.join(sorted(d)))" 2>/dev/null || true
}
find_tool() {  # find_tool NAME: prints its path, or nothing
  local d sub
  if [ -x "$(dirname "$nvcc")/$1" ]; then echo "$(dirname "$nvcc")/$1"; return; fi
  if command -v "$1" 2>/dev/null; then return; fi
  while IFS= read -r d; do
    for sub in "nvidia/cu${nvcc_release%%.*}/bin" "nvidia/cuda_$1/bin"; do  # CUDA 13 and 12 wheel layouts
      if [ -n "$d" ] && [ -x "$d/$sub/$1" ]; then echo "$d/$sub/$1"; return; fi
    done
  done < <(site_dirs)
  return 0
}
cuobjdump=$(find_tool cuobjdump)
nvdisasm=$(find_tool nvdisasm)
if [ -z "$cuobjdump" ] || [ -z "$nvdisasm" ]; then
  major=${nvcc_release%%.*}
  say "cuobjdump/nvdisasm not found: installing nvidia-cuda-cuobjdump==$major.* and nvidia-cuda-nvdisasm==$major.* with pip"
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check \
    "nvidia-cuda-cuobjdump==$major.*" "nvidia-cuda-nvdisasm==$major.*" >&2
  cuobjdump=$(find_tool cuobjdump)
  nvdisasm=$(find_tool nvdisasm)
  if [ -z "$cuobjdump" ] || [ -z "$nvdisasm" ]; then
    echo "sass-compare needs cuobjdump and nvdisasm (CUDA toolkit, or pip nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)" >&2
    exit 1
  fi
fi
PATH="$(dirname "$nvdisasm"):$PATH"  # cuobjdump -sass runs nvdisasm from PATH
export PATH
cuobjdump_version=$("$cuobjdump" --version | sed -n 's/.*\(release .*\)/\1/p')

# ---- the two sides ---------------------------------------------------------------------------------
work=$(mktemp -d "${TMPDIR:-/tmp}/gpucomm-sass.XXXXXX")
worktrees=()
cleanup() {
  local wt
  for wt in "${worktrees[@]}"; do git -C "$root" worktree remove --force "$wt" >/dev/null 2>&1 || true; done
  git -C "$root" worktree prune >/dev/null 2>&1 || true
  if [ "$keep" = 1 ]; then say "kept $work (build-*/, *.sass)"; else rm -rf "$work"; fi
}
trap cleanup EXIT

checkout() {  # checkout SHA DIR: a detached worktree of SHA at DIR
  git -C "$root" worktree add --detach --quiet "$2" "$1"
  worktrees+=("$2")
}

build_and_dump() {  # build_and_dump SIDE SRC: builds bench_gpucomm from SRC, writes $work/SIDE.sass
  local side=$1 src=$2 dir=$work/build-$1 log=$work/build-$1.log t0=$SECONDS
  say "$side: configuring and building bench_gpucomm from $src (log: $log)"
  if ! { cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$nvcc" \
           -DCMAKE_CUDA_ARCHITECTURES=90 -DGPUCOMM_BUILD_TESTS=OFF -DGPUCOMM_BUILD_EXAMPLES=OFF \
           -DGPUCOMM_BUILD_BENCHMARKS=ON -DGPUCOMM_BENCH_NVSHMEM=OFF -DGPUCOMM_BENCH_NCCL=OFF &&
         cmake --build "$dir" --target bench_gpucomm --parallel "$jobs"; } >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "sass-compare: the $side build failed (full log above: $log)" >&2
    keep=1
    exit 1
  fi
  local exe
  exe=$(find "$dir" -type f -name bench_gpucomm -perm -u+x | head -n 1)
  [ -n "$exe" ] || { echo "sass-compare: no bench_gpucomm under $dir" >&2; exit 1; }
  "$cuobjdump" -sass "$exe" >"$work/$side.sass"
  say "$side: built and dumped in $((SECONDS - t0)) s ($(grep -c 'Function :' "$work/$side.sass") kernels)"
}

describe() {  # the hash, the date and the subject (cut at 100 characters) of a commit
  local subject
  subject=$(git -C "$root" log -1 --format=%s "$1")
  if [ ${#subject} -gt 100 ]; then subject="${subject:0:97}..."; fi
  echo "\`$(git -C "$root" rev-parse "$1")\` ($(git -C "$root" log -1 --format=%cd --date=short "$1")) ${subject//|/\\|}"
}

header=$work/header.md
base_label=$(git -C "$root" rev-parse --short "$base_sha")
{
  echo "| side | revision |"
  echo "| --- | --- |"
  echo "| base (\`$base_label\`) | $(describe "$base_sha") |"
} >"$header"

if [ -n "$new_sha" ]; then
  new_label=$(git -C "$root" rev-parse --short "$new_sha")
  if [ "$new_label" = "$base_label" ]; then new_label="$new_label (new)"; fi
  echo "| new (\`$new_label\`) | $(describe "$new_sha") |" >>"$header"
  new_src=$work/src-new
  checkout "$new_sha" "$new_src"
else
  head_sha=$(git -C "$root" rev-parse HEAD)
  new_label="working tree"
  new_src=$root
  stat=$(git -C "$root" diff --stat HEAD)
  untracked=$(git -C "$root" ls-files --others --exclude-standard)
  if [ -z "$stat" ] && [ -z "$untracked" ]; then
    echo "| new (working tree) | $root, clean: same as HEAD $(describe "$head_sha") |" >>"$header"
  else
    summary=$(git -C "$root" diff --shortstat HEAD | sed 's/^ *//')
    if [ -n "$untracked" ]; then summary="${summary:+$summary; }$(wc -l <<<"$untracked") untracked file(s)"; fi
    echo "| new (working tree) | $root at HEAD $(describe "$head_sha"), with uncommitted changes: $summary |" >>"$header"
    {
      echo
      echo "Uncommitted changes in the working tree just before it was built (\`git diff --stat HEAD\`, untracked"
      echo "files; edits made while it was building may or may not be in it):"
      echo
      echo '```'
      if [ -n "$stat" ]; then echo "$stat"; fi
      if [ -n "$untracked" ]; then git -C "$root" ls-files --others --exclude-standard | sed 's/^/?? /'; fi
      echo '```'
    } >>"$header.tail"
  fi
fi
{
  echo
  echo "- target \`bench_gpucomm\` (benchmarks/gpucomm/{main,bw,latency,sync}.cu, GPUCOMM_DEBUG=0), CMake Release, sm_90"
  echo "- nvcc: $(basename "$nvcc") ($nvcc_build)"
  echo "- SASS: $(basename "$cuobjdump") ($cuobjdump_version), $(date -u '+%Y-%m-%d %H:%M UTC')"
  if [ -f "$header.tail" ]; then cat "$header.tail"; fi
} >>"$header"

# The new side first: a working tree is then built right after its changes were listed above.
build_and_dump new "$new_src"
base_src=$work/src-base
checkout "$base_sha" "$base_src"
build_and_dump base "$base_src"

python3 "$here/sass_compare.py" --base "$work/base.sass" --new "$work/new.sass" \
  --base-root "$base_src" --new-root "$new_src" --base-label "$base_label" --new-label "$new_label" \
  --header "$header" --out "$out" --max-diff-lines "$max_diff_lines" "${renames[@]}"
say "report: $out"
