#!/usr/bin/env bash
# Brings a fresh clone to a runnable state: Debian packages, npm dependencies,
# TypeScript and native builds. Every step checks before it acts, so a second
# run on a ready machine takes a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

say() { echo "[setup] $*" >&2; }

# Debian packages the build, tests, demo and benchmarks use. libfuse2: the
# library fuse-native's prebuilt addon links; fuse3: fusermount3 and /dev/fuse
# tooling; fio, git, rsync: the FUSE tests drive the mount with them. Images and
# sandboxes: erofs-utils (mkfs.erofs builds layers), zstd (zstd-compressed OCI
# layers), lz4 (lz4 layers), umoci and skopeo (independent OCI tools for fixtures and round
# trips), docker-registry (a real OCI registry for tests), podman (the peer the
# export test and benchmarks compare with), runc (the OCI runtime), debootstrap
# (the demo's and benchmarks' Debian base image), busybox-static (the agent
# tests' minimal container rootfs).
APT_PACKAGES=(python3 make g++ util-linux procps libfuse2 fuse3 fio git rsync
  erofs-utils zstd lz4 umoci skopeo docker-registry podman runc debootstrap busybox-static)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  if [ "$(id -u)" != 0 ]; then say "need root to apt-get install ${missing[*]}"; exit 1; fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# npm ci when node_modules is missing or was installed from another lockfile.
lock_hash=$(sha256sum package-lock.json | cut -d' ' -f1)
stamp=node_modules/.strata-lock-hash
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$lock_hash" ]; then
  say "installing npm dependencies (npm ci)"
  # Install scripts are skipped on purpose: npm 11 may refuse them anyway, every
  # dependency we use ships a prebuilt binary, and our own native code is built
  # explicitly below.
  npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2
  echo "$lock_hash" > "$stamp"
fi

bash scripts/build.sh
