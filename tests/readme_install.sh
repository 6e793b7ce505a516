#!/usr/bin/env bash
# The README's install commands, run as written (the sh block after its "install:" marker) in a copy
# of the checkout with HOME in a scratch folder, then a consumer project built against what they
# installed with find_package: the newcomer's path from the README, checked in CI.
#   tests/readme_install.sh SOURCE WORK NVCC GENERATOR
set -euo pipefail
src=$1 work=$2 nvcc=$3 generator=$4
rm -rf "$work" && mkdir -p "$work/src" "$work/home"
if git -C "$src" rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  git -C "$src" ls-files -z | tar -C "$src" --null -T - -cf - | tar -C "$work/src" -xf -
else
  cp -a "$src/." "$work/src/"
fi
commands=$(awk '/<!-- install: /{ marked = 1; next } marked && /^```sh$/ { inside = 1; next }
                inside && /^```$/ { exit } inside { print }' "$src/README.md")
[ -n "$commands" ] || { echo "README.md: no sh block after an 'install:' marker" >&2; exit 1; }
echo "README's install commands:"; echo "$commands"
(cd "$work/src" && HOME="$work/home" CUDACXX="$nvcc" bash -euo pipefail -c "$commands")
cmake -S "$src/tests/consumer" -B "$work/consumer" -G "$generator" -DCMAKE_CUDA_COMPILER="$nvcc" \
  -DGPUCOMM_CONSUME=find_package -DGPUCOMM_SOURCE_DIR="$src" -DCMAKE_PREFIX_PATH="$work/home/.local"
cmake --build "$work/consumer"
echo "readme.install: the consumer built against the README's install"
