# Shared by gpucomm's scripts: finding the CUDA toolkit, installing missing Debian packages, probing MPS.

# nvcc on PATH, or the toolkit's usual place.
gpucomm_find_nvcc() {
  if command -v nvcc >/dev/null 2>&1; then command -v nvcc; return; fi
  for c in /usr/local/cuda/bin/nvcc /usr/local/cuda-13.0/bin/nvcc; do
    if [ -x "$c" ]; then echo "$c"; return; fi
  done
  echo "gpucomm needs the CUDA toolkit 13 (nvcc); install it from NVIDIA's packages and re-run." >&2
  exit 1
}

# gpucomm_need CHECK PACKAGE...: CHECK is a command name or an absolute path; when it is missing,
# the packages are installed with apt-get (as root, or through sudo).
GPUCOMM_MISSING_PACKAGES=()
gpucomm_need() {
  local check=$1; shift
  if [[ $check == /* ]]; then [ -e "$check" ] && return 0
  else command -v "$check" >/dev/null 2>&1 && return 0; fi
  GPUCOMM_MISSING_PACKAGES+=("$@")
}
# gpucomm_apt ARGS...: apt-get as root (or through sudo); stops with a message where there is no
# apt-get. The package lists are updated once, before the first call that needs them.
GPUCOMM_APT_UPDATED=0
gpucomm_apt() {
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "Missing packages: ${GPUCOMM_MISSING_PACKAGES[*]:-$*}; install them with your package manager." >&2
    exit 1
  fi
  if [ "$GPUCOMM_APT_UPDATED" -eq 0 ]; then $sudo apt-get update -qq; GPUCOMM_APT_UPDATED=1; fi
  [ $# -eq 0 ] || DEBIAN_FRONTEND=noninteractive $sudo apt-get "$@"
}
# gpucomm_need_newest GLOB PATTERN: when no file matches GLOB, the newest Debian package whose name
# matches the extended regular expression PATTERN is installed (for versioned names such as
# linux-headers-<version>-common).
gpucomm_need_newest() {
  local pkg
  compgen -G "$1" > /dev/null && return 0
  gpucomm_apt  # the package lists, for apt-cache
  pkg=$(apt-cache search --names-only "$2" | awk '{print $1}' | { grep -E "$2" || true; } | sort -V | tail -n 1)
  if [ -z "$pkg" ]; then echo "No Debian package matches $2 (needed for $1)." >&2; exit 1; fi
  GPUCOMM_MISSING_PACKAGES+=("$pkg")
}
gpucomm_install_missing() {
  [ ${#GPUCOMM_MISSING_PACKAGES[@]} -eq 0 ] && return 0
  echo "Installing missing packages: ${GPUCOMM_MISSING_PACKAGES[*]}"
  gpucomm_apt install -y -qq --no-install-recommends "${GPUCOMM_MISSING_PACKAGES[@]}" >/dev/null
  GPUCOMM_MISSING_PACKAGES=()
}

# NVLink multicast stays off in everything gpucomm launches (it can take shared GPUs out of service).
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1

# mps_probe TRIES: whether the CUDA MPS daemon that the caller's mps_vars array names (its
# CUDA_MPS_* settings; empty: the environment's) answers, trying up to TRIES times a second apart.
mps_probe() {
  local i
  for ((i = 0; i < $1; i++)); do
    [ "$i" -gt 0 ] && sleep 1
    echo get_server_list | timeout 10 env "${mps_vars[@]}" nvidia-cuda-mps-control > /dev/null 2>&1 && return 0
  done
  return 1
}
