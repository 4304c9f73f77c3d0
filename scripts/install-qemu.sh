#!/usr/bin/env bash
# Install qemu-img/qemu-io with their iSCSI driver: Debian's qemu-utils and qemu-block-extra
# at the same version (the driver module only loads into the qemu it was built with). A
# qemu-utils from another source is replaced. Run as root on Debian.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
if qemu-img --help 2>/dev/null | grep -qw iscsi; then
  exit 0
fi
apt-get update -qq
version=$(apt-cache policy qemu-block-extra | awk '/Candidate:/ {print $2}')
apt-get install -y -qq --allow-downgrades --allow-change-held-packages \
  "qemu-utils=$version" "qemu-block-extra=$version"
qemu-img --help | grep -qw iscsi
