#!/usr/bin/env bash
# Exit 0 when qemu-img's iSCSI driver really loads, 1 (with the reason on stderr) when not.
#
# `qemu-img --help` is no proof: qemu 10 lists iscsi among its formats even when the module
# (Debian's qemu-block-extra, which must be the very version of qemu-utils) is missing or from
# another build, and then fails with "Unable to load module iscsi". So this opens an iSCSI URL
# on a closed loopback port: a driver that loads gets as far as connecting and reports an
# iSCSI connection error; a missing one says "Unable to load module", "Unknown protocol" or
# "Unknown driver" (and "Must specify either driver or file").
#
# Usage: scripts/qemu-iscsi-ok.sh [PORT]   (PORT: a closed port on 127.0.0.1, default 9)
set -uo pipefail
port=${1:-9}
url="iscsi://127.0.0.1:$port/iqn.2000-01.invalid:qemu-iscsi-ok/0"

packages() {
  # The Debian package pair, for the message (the real check is the one above).
  if command -v dpkg-query >/dev/null 2>&1; then
    local line
    for p in qemu-utils qemu-block-extra; do
      line=$(dpkg-query -W -f='${db:Status-Abbrev}|${Version}' "$p" 2>/dev/null) || line=
      case $line in
        ii*) echo "  $p ${line#*|}" ;;
        *) echo "  $p not installed" ;;
      esac
    done >&2
  fi
}

if ! command -v qemu-img >/dev/null 2>&1; then
  echo "qemu-iscsi-ok: qemu-img is not installed (Debian: qemu-utils + qemu-block-extra;" \
    "run scripts/install-qemu.sh as root)" >&2
  exit 1
fi

out=$(timeout 20 qemu-img info "$url" 2>&1)
rc=$?
case $out in
  *"Unable to load module"* | *"Unknown protocol"* | *"Unknown driver"* | \
    *"Must specify either driver or file"* | *"Failed to initialize module"*)
    echo "qemu-iscsi-ok: qemu-img's iSCSI driver does not load (missing, or qemu-block-extra" \
      "is not the version of qemu-utils; fix: scripts/install-qemu.sh as root):" >&2
    echo "$out" | sed 's/^/  /' >&2
    packages
    exit 1
    ;;
esac
if [ "$rc" = 124 ]; then
  # Still connecting after 20 s: the driver loaded (it is trying the network).
  exit 0
fi
if [ "$rc" != 0 ] && printf '%s' "$out" | grep -q 'iSCSI'; then
  # "iSCSI: Failed to connect to LUN : ..." and the like: the driver ran.
  exit 0
fi
echo "qemu-iscsi-ok: unexpected answer from qemu-img info $url (exit $rc):" >&2
echo "$out" | sed 's/^/  /' >&2
packages
exit 1
