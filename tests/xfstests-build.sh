#!/bin/sh
# Build an fstests (xfstests) checkout so that powercut's exported tests can
# run with its ./check:
#
#   tests/xfstests-build.sh ~/.cache/powercut/xfstests
#   POWERCUT_XFSTESTS=~/.cache/powercut/xfstests pytest tests/integration/test_export.py
#
# It checks for the Debian packages the build needs and names the missing
# ones, then runs fstests' own build (make: configure, then src/, ltp/ and
# the group lists) in the checkout itself. It writes nothing anywhere else.
# A second run only rebuilds what changed.
set -eu

usage() {
	echo "usage: $0 CHECKOUT" >&2
	echo "  CHECKOUT: an fstests checkout, e.g. a clone of" >&2
	echo "  git://git.kernel.org/pub/scm/fs/xfs/xfstests-dev.git" >&2
	exit 2
}
[ $# = 1 ] || usage
checkout=$1
[ -f "$checkout/check" ] && [ -f "$checkout/common/dmlogwrites" ] ||
	{ echo "$0: $checkout: not an fstests checkout (no check or common/dmlogwrites)" >&2; exit 2; }

# What the build needs (fstests' README lists these for Debian), by a file each ships.
missing=
need() { # package file-or-command
	case $2 in
	/*) [ -e "$2" ] || missing="$missing $1" ;;
	*) command -v "$2" > /dev/null 2>&1 || missing="$missing $1" ;;
	esac
}
need make make
need gcc gcc
need autoconf autoconf
need automake automake
need libtool libtoolize
need libtool-bin libtool
need gawk gawk
need pkg-config pkg-config
need uuid-dev /usr/include/uuid/uuid.h
need xfslibs-dev /usr/include/xfs/xfs.h
need libattr1-dev /usr/include/attr/libattr.h
need libacl1-dev /usr/include/acl/libacl.h
need libaio-dev /usr/include/libaio.h
need libgdbm-dev /usr/include/gdbm.h
need libgdbm-compat-dev /usr/include/ndbm.h
need liburing-dev /usr/include/liburing.h
need libcap-dev /usr/include/sys/capability.h
# What its tests run (the dm-log-writes tests need xfs_io, attr tools and dmsetup).
need xfsprogs xfs_io
need attr setfattr
need acl chacl
need dmsetup dmsetup
need bc bc
need psmisc fuser
need uuid-runtime uuidgen
if [ -n "$missing" ]; then
	echo "$0: missing Debian packages:$missing" >&2
	echo "  install them: apt-get install$missing" >&2
	exit 3
fi

jobs=$(getconf _NPROCESSORS_ONLN 2> /dev/null || echo 1)
cd "$checkout"
make -j"$jobs"

for built in src/log-writes/replay-log src/renameat2 ltp/fsx; do
	[ -x "$built" ] || { echo "$0: the build did not make $built" >&2; exit 1; }
done
echo "fstests built in $(pwd)"
