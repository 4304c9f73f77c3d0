#!/usr/bin/env bash
# Install qemu-img/qemu-io with their iSCSI driver: Debian's qemu-utils and qemu-block-extra
# at the same version (the driver module only loads into the qemu it was built with). Run as
# root on Debian. Does nothing when the driver already loads (scripts/qemu-iscsi-ok.sh).
#
# - qemu-utils installed and apt offers qemu-block-extra at that very version (same origin,
#   e.g. bookworm-backports is configured): only qemu-block-extra is added.
# - otherwise (no qemu-utils, or one whose qemu-block-extra apt cannot get, such as a
#   preinstalled backports 10.0 on a Debian 12 without backports in its sources): both at
#   apt's candidate for qemu-block-extra, downgrading qemu-utils if need be.
# Then the real check runs again, and this fails loudly if the driver still does not load.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
here=$(dirname "$0")
if "$here/qemu-iscsi-ok.sh" 2>/dev/null; then
  exit 0
fi
echo "install-qemu: qemu-img's iSCSI driver does not load; installing a matching" \
  "qemu-utils + qemu-block-extra pair"

apt-get update -qq
installed=
if line=$(dpkg-query -W -f='${db:Status-Abbrev}|${Version}' qemu-utils 2>/dev/null) &&
  [[ $line == ii* ]]; then
  installed=${line#*|}
fi
# Every version of qemu-block-extra apt can install.
available=$(apt-cache madison qemu-block-extra | awk -F'|' '{gsub(/ /, "", $2); print $2}')
if [ -n "$installed" ] && grep -qxF -- "$installed" <<<"$available"; then
  version=$installed
  echo "install-qemu: qemu-block-extra=$version, the version of the installed qemu-utils"
else
  version=$(apt-cache policy qemu-block-extra | awk '/Candidate:/ {print $2}')
  if [ -z "$version" ] || [ "$version" = "(none)" ]; then
    echo "install-qemu: apt has no qemu-block-extra (is this Debian with main in its" \
      "sources?)" >&2
    exit 1
  fi
  echo "install-qemu: qemu-utils=$version and qemu-block-extra=$version" \
    "(installed qemu-utils: ${installed:-none}; apt has no qemu-block-extra of that version)"
fi
apt-get install -y -qq --allow-downgrades --allow-change-held-packages \
  "qemu-utils=$version" "qemu-block-extra=$version"

if ! "$here/qemu-iscsi-ok.sh"; then
  echo "install-qemu: FAILED: qemu-img's iSCSI driver still does not load after installing" \
    "qemu-utils=$version qemu-block-extra=$version" >&2
  exit 1
fi
echo "install-qemu: qemu-img $(qemu-img --version | sed -n '1s/.*version //p') loads its" \
  "iSCSI driver"
