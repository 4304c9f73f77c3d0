#!/usr/bin/env bash
# fio with its libiscsi engine, as a cached test helper.
#
# Debian's fio is built without the libiscsi engine. This script builds fio from Debian's
# source package of the installed fio version (Debian's patches included), configured with
# libiscsi (and libnbd, so the same binary also has the nbd engine), and installs the binary
# into a cache:
#
#   ${WEFT_CACHE_DIR:-$HOME/.cache/weft}/fio-libiscsi/<source version>/fio
#
# It prints that path on stdout (everything else goes to stderr), so callers do
#   export WEFT_FIO_LIBISCSI="$(scripts/build-fio-libiscsi.sh)"
# When the cached binary exists and `fio --enghelp=libiscsi` works it does nothing else.
#
#   scripts/build-fio-libiscsi.sh           build if needed, print the path
#   scripts/build-fio-libiscsi.sh --check   print the path if the cached binary works, else
#                                           exit 1 (never builds, never installs anything)
#
# Building needs Debian's fio installed (its version picks the source), deb-src entries (added
# as /etc/apt/sources.list.d/weft-deb-src.sources when missing) and the build dependencies
# below; as root on Debian the script installs what is missing with apt. Only the fio binary
# is built (`make -j2 fio`, no docs, no packaging): about a minute on 2 cores.
set -euo pipefail

die() {
  echo "build-fio-libiscsi: $*" >&2
  exit 1
}
say() { echo "build-fio-libiscsi: $*" >&2; }

mode=build
case "${1:-}" in
  "") ;;
  --check) mode=check ;;
  -h | --help)
    sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *) die "unknown argument '$1' (expected nothing or --check)" ;;
esac

command -v dpkg-query >/dev/null || die "needs Debian (dpkg-query not found)"
src_version=$(dpkg-query -W -f='${source:Version}' fio 2>/dev/null) ||
  die "Debian's fio is not installed: apt-get install fio (its version picks the source to build)"
[ -n "$src_version" ] || die "cannot read the source version of the installed fio"
src_name=$(dpkg-query -W -f='${source:Package}' fio)

cache_root="${WEFT_CACHE_DIR:-$HOME/.cache/weft}/fio-libiscsi"
dest_dir="$cache_root/$src_version"
dest="$dest_dir/fio"

works() {
  [ -x "$1" ] && "$1" --enghelp=libiscsi >/dev/null 2>&1
}

if works "$dest"; then
  echo "$dest"
  exit 0
fi
if [ "$mode" = check ]; then
  die "no working fio with the libiscsi engine at $dest: run scripts/build-fio-libiscsi.sh"
fi

mkdir -p "$cache_root"
# One build at a time (two test runs starting together wait for each other).
exec 9>"$cache_root/.lock"
flock -w 900 9 || die "another build holds $cache_root/.lock for more than 15 minutes"
if works "$dest"; then
  echo "$dest"
  exit 0
fi

is_root() { [ "$(id -u)" = 0 ]; }
apt_get() {
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 "$@"
}

# Build dependencies: a compiler, dpkg-source (to unpack and patch), pkg-config, and the
# libraries of the engines we want. Checked by file so a non-root user with them installed
# needs nothing from apt.
declare -A need=(
  [gcc]=build-essential [make]=build-essential [dpkg-source]=dpkg-dev
  [pkg-config]=pkg-config
)
declare -A need_file=(
  [/usr/include/iscsi/iscsi.h]=libiscsi-dev
  [/usr/include/libnbd.h]=libnbd-dev
  [/usr/include/libaio.h]=libaio-dev
  [/usr/include/zlib.h]=zlib1g-dev
)
missing=()
for tool in "${!need[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("${need[$tool]}")
done
for f in "${!need_file[@]}"; do
  [ -e "$f" ] || missing+=("${need_file[$f]}")
done
if [ ${#missing[@]} -gt 0 ]; then
  packages=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
  is_root && command -v apt-get >/dev/null ||
    die "missing build dependencies: $packages(install them as root: apt-get install -y $packages)"
  say "installing build dependencies: $packages"
  apt_get update -qq
  # shellcheck disable=SC2086
  apt_get install -y -qq --no-install-recommends $packages >&2
fi

# The source package: `apt-get source` needs deb-src entries.
have_source() {
  apt-get source --print-uris "$src_name=$src_version" 2>/dev/null | grep -q "\.dsc'"
}
if ! have_source; then
  is_root || die "apt has no deb-src entry for $src_name $src_version; as root this script \
adds /etc/apt/sources.list.d/weft-deb-src.sources (or add deb-src lines yourself and apt-get update)"
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  [ -n "$codename" ] || die "cannot tell the Debian release from /etc/os-release"
  list=/etc/apt/sources.list.d/weft-deb-src.sources
  if [ ! -e "$list" ]; then
    say "adding deb-src entries for $codename: $list"
    cat >"$list" <<EOF
# Added by weft's scripts/build-fio-libiscsi.sh: Debian sources (apt-get source fio).
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $codename $codename-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: $codename-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  fi
  apt_get update -qq
  have_source || die "apt has no source package $src_name=$src_version even with $list \
(is the installed fio from another archive? apt-cache showsrc $src_name)"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/fio-libiscsi-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
say "fetching the source of $src_name $src_version into $work"
started=$SECONDS
# (As root apt warns that its sandbox user cannot write here: harmless, hence the log.)
apt-get source "$src_name=$src_version" >source.log 2>&1 || {
  tail -n 20 source.log >&2
  die "apt-get source $src_name=$src_version failed (log above)"
}
srcdir=$(find . -maxdepth 1 -mindepth 1 -type d -name "$src_name-*" | head -n 1)
[ -n "$srcdir" ] || die "apt-get source unpacked no $src_name-* directory"
cd "$srcdir"

say "configuring with libiscsi"
# --disable-native: runs on any x86-64 CI machine. libiscsi is opt-in in fio's configure;
# libnbd too (the nbd engine, as Debian's fio has it). Other engines are detected as usual.
./configure --disable-native --enable-libiscsi --enable-libnbd >configure.log 2>&1 || {
  tail -n 30 configure.log >&2
  die "fio's configure failed (log above)"
}
grep -Eq '^iscsi engine +yes' configure.log || {
  grep -Ei 'iscsi' configure.log >&2 || true
  die "fio's configure did not enable the libiscsi engine (is libiscsi-dev installed?)"
}
say "building (make -j2 fio)"
make -j2 fio >make.log 2>&1 || {
  tail -n 40 make.log >&2
  die "building fio failed (log above)"
}
works ./fio || die "the fio just built has no working libiscsi engine: $(./fio --enghelp=libiscsi 2>&1 | head -n 5)"

mkdir -p "$dest_dir"
cp ./fio "$dest_dir/fio.tmp.$$"
mv -f "$dest_dir/fio.tmp.$$" "$dest"
{
  echo "source: $src_name $src_version (apt-get source), configure --disable-native --enable-libiscsi --enable-libnbd"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) in $((SECONDS - started)) s on $(uname -m)"
  "$dest" --version
} >"$dest_dir/BUILD-INFO"
say "built $("$dest" --version) with the libiscsi engine in $((SECONDS - started)) s"
echo "$dest"
