#!/usr/bin/env bash
# The test command: installs the client tools the end-to-end tests drive (when run as root on
# Debian and one is missing), then runs every test of the workspace. The cluster tests start
# real etcd, d.node and c.node processes on loopback.
set -euo pipefail
cd "$(dirname "$0")/.."

# tool -> Debian package
declare -A needed=(
  [fio]=fio [nbdinfo]=libnbd-bin [nbdfuse]=libnbd-bin [nbdkit]=nbdkit
  [fusermount3]=fuse3
  [mkfs.ext4]=e2fsprogs [chromium]=chromium [etcd]=etcd-server
  [iscsi-ls]=libiscsi-bin [iscsi-test-cu]=libiscsi-bin [tgtd]=tgt
  [promtool]=prometheus
)
missing=()
for tool in "${!needed[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("${needed[$tool]}")
done
# PostgreSQL's server binaries (initdb, pg_ctl, postgres) are not on PATH on Debian.
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
if [ ${#missing[@]} -gt 0 ]; then
  packages=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing test peers: $packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq $packages
  else
    echo "the tests need these Debian packages: $packages (run as root, or install them)" >&2
    exit 1
  fi
fi

# qemu's iSCSI driver (qemu-block-extra, matched to qemu-utils): checked by loading it, since
# `qemu-img --help` lists iscsi even when the module cannot load.
if ! scripts/qemu-iscsi-ok.sh 2>/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing qemu's iSCSI driver"
    scripts/install-qemu.sh
  else
    scripts/qemu-iscsi-ok.sh || true
    echo "the tests need qemu-img with its iSCSI driver (Debian: qemu-utils and qemu-block-extra" \
      "of the same version): run scripts/install-qemu.sh as root" >&2
    exit 1
  fi
fi

# fio with the libiscsi engine (Debian's fio has none): built from Debian's fio source into a
# cache once (~30 s), then found there; crates/cli/tests/iscsi_fio.rs reads WEFT_FIO_LIBISCSI.
if [ -z "${WEFT_FIO_LIBISCSI:-}" ]; then
  if WEFT_FIO_LIBISCSI=$(scripts/build-fio-libiscsi.sh --check 2>/dev/null); then
    :
  elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "building fio with the libiscsi engine (scripts/build-fio-libiscsi.sh)"
    WEFT_FIO_LIBISCSI=$(scripts/build-fio-libiscsi.sh)
  else
    echo "the tests need fio with the libiscsi engine: run scripts/build-fio-libiscsi.sh" \
      "(as root it installs its build dependencies), or set WEFT_FIO_LIBISCSI" >&2
    exit 1
  fi
fi
export WEFT_FIO_LIBISCSI

# A test build and the tests' data dirs take about 10 GB; a full disk shows up as d.nodes
# answering "no space" in unrelated tests, so say it first.
for dir in . "${TMPDIR:-/tmp}"; do
  avail_kib=$(df -Pk "$dir" | awk 'NR == 2 { print $4 }')
  if [ -n "$avail_kib" ] && [ "$avail_kib" -lt $((12 * 1024 * 1024)) ]; then
    echo "warning: only $((avail_kib / 1024 / 1024)) GiB free under $dir; the build and the tests need about 12 GiB" >&2
  fi
done

exec cargo test --workspace "$@"
