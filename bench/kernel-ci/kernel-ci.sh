#!/bin/sh
# Kernel CI on real kernels: powercut ci verdicts for Debian kernel packages,
# for a configuration (barrier=0), and for kernels built here from Debian's
# linux-source-6.1: unpatched, with a one-line patch that breaks crash
# consistency (jbd2-commit-without-flush.patch), and with a candidate fix for
# the external-journal flush (jbd2-external-journal-data-flush.patch). Not
# part of the test suite: under TCG it takes one to two hours.
#
#   bench/kernel-ci/kernel-ci.sh build DIR      build the three kernels into DIR
#   bench/kernel-ci/kernel-ci.sh debian DIR     verdicts on Debian kernels and barrier=0
#   bench/kernel-ci/kernel-ci.sh built DIR      verdicts on the unpatched and patched kernels
#   bench/kernel-ci/kernel-ci.sh verdicts DIR   debian, then built
#   bench/kernel-ci/kernel-ci.sh all DIR        build, then verdicts
#   bench/kernel-ci/kernel-ci.sh extjournal DIR ext4/logdev crash runs (gen:seq2, 60
#                                               sequences) on the Debian, unpatched and
#                                               fixed kernels: outcome counts of each
#
# DIR is a work directory outside the checkout (the source tree, the two
# kernels, the databases and run directories go there). Environment:
#   POWERCUT   the powercut command (default: the checkout's .venv/bin/powercut)
#   JOBS       make -j (default: nproc)
#   OLD_61     an older Debian 6.1 kernel release to judge (default: the oldest
#              linux-image-6.1.0-N-amd64 apt offers); installed if missing
#   NEW_612    a 6.12 release (default: the newest apt offers); installed if missing
#   RERUNS, MAX_RERUNS  ci's --reruns and --max-reruns (default 2 and 3)
# Each verdict prints the command, its exit status, the wall time and where its
# markdown summary is; verdicts.txt in DIR collects them.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
POWERCUT=${POWERCUT:-$top/.venv/bin/powercut}
JOBS=${JOBS:-$(nproc)}

usage() {
	sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}
[ $# = 2 ] || usage
what=$1
dir=$2
case $what in build|debian|built|verdicts|all|extjournal) ;; *) usage ;; esac
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
case $dir in "$top"|"$top"/*) echo "$0: $dir: use a directory outside the checkout" >&2; exit 2 ;; esac

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

apt_install() { # install the packages that are not installed yet
	missing=
	for p in "$@"; do
		dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'ok installed' || missing="$missing $p"
	done
	[ -z "$missing" ] && return 0
	echo "kernel-ci: installing$missing"
	as_root apt-get update -qq
	# shellcheck disable=SC2086
	DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends $missing
}

elapsed() { echo $(( $(date +%s) - $1 )); }

build_one() { # NAME: build the tree as it is now and install it into $dir/NAME
	name=$1
	start=$(date +%s)
	make -s -j"$JOBS" bzImage modules
	release=$(make -s kernelrelease)
	rm -rf "${dir:?}/$name"
	mkdir -p "$dir/$name"
	make -s modules_install INSTALL_MOD_PATH="$dir/$name"
	cp arch/x86/boot/bzImage "$dir/$name/bzImage"
	cp .config "$dir/$name/config-$release"
	echo "kernel-ci: $name $release built and installed in $(elapsed "$start") s: $dir/$name"
}

build() {
	apt_install linux-source-6.1 build-essential flex bison bc libelf-dev libssl-dev
	src=$dir/linux-source-6.1
	if [ ! -f "$src/Makefile" ]; then
		echo "kernel-ci: unpacking /usr/src/linux-source-6.1.tar.xz"
		tar -C "$dir" -xJf /usr/src/linux-source-6.1.tar.xz
	fi
	cd "$src"
	# Start clean of the patch whatever an interrupted run left behind.
	for p in jbd2-commit-without-flush jbd2-external-journal-data-flush; do
		if patch -p1 -R --dry-run -s -f < "$here/$p.patch" > /dev/null 2>&1; then
			patch -p1 -R -s < "$here/$p.patch"
		fi
	done
	make -s x86_64_defconfig
	scripts/kconfig/merge_config.sh -m .config kernel/configs/kvm_guest.config \
		"$top/framework/zoo/guest.config" > /dev/null
	make -s olddefconfig
	# merge_config warns and carries on when an option does not take: refuse instead.
	grep '^CONFIG_.*=y$' "$top/framework/zoo/guest.config" | while read -r line; do
		grep -qx "$line" .config || { echo "kernel-ci: $line did not take in .config" >&2; exit 1; }
	done
	build_one unpatched
	patch -p1 -s < "$here/jbd2-commit-without-flush.patch"
	build_one patched
	patch -p1 -R -s < "$here/jbd2-commit-without-flush.patch"
	patch -p1 -s < "$here/jbd2-external-journal-data-flush.patch"
	build_one extjournal-fix
	patch -p1 -R -s < "$here/jbd2-external-journal-data-flush.patch"
}

newest() { apt-cache search --names-only "$1" | cut -d' ' -f1 | sort -V | tail -1; }
oldest() { apt-cache search --names-only "$1" | cut -d' ' -f1 | sort -V | head -1; }

verdict() { # LABEL EXPECTED powercut-ci-arguments...
	label=$1 expected=$2
	shift 2
	echo "kernel-ci: [$label] $POWERCUT ci $*"
	start=$(date +%s)
	status=0
	"$POWERCUT" ci --study "$here/consistency.toml" --db "$dir/ci.sqlite" \
		--results "$dir/results" --summary "$dir/$label.md" --junit "$dir/$label.xml" \
		--reruns "${RERUNS:-2}" --max-reruns "${MAX_RERUNS:-3}" "$@" \
		> "$dir/$label.out" 2>&1 || status=$?
	line="$label: exit $status (expected $expected) in $(elapsed "$start") s; summary $dir/$label.md"
	echo "kernel-ci: $line"
	echo "$line" >> "$dir/verdicts.txt"
}

baseline() { # the study on the default Debian kernel, once per DIR
	[ -f "$dir/baseline.sqlite" ] && return 0
	start=$(date +%s)
	"$POWERCUT" run "$here/consistency.toml" --targets-file "$here/ext4-ci.toml" --no-report \
		--db "$dir/baseline.tmp.sqlite" --results "$dir/results" > "$dir/baseline.out" 2>&1 ||
		{ echo "kernel-ci: the baseline run failed: $dir/baseline.out" >&2; exit 1; }
	mv "$dir/baseline.tmp.sqlite" "$dir/baseline.sqlite"
	echo "baseline (default Debian kernel): $(elapsed "$start") s" | tee -a "$dir/verdicts.txt"
}

debian() { # verdicts that need no kernel built here
	old=${OLD_61:-$(oldest '^linux-image-6\.1\.0-[0-9]+-amd64$' | sed 's/^linux-image-//')}
	new=${NEW_612:-$(newest '^linux-image-6\.12\.[0-9]+\+deb12-amd64$' | sed 's/^linux-image-//')}
	apt_install "linux-image-$old" "linux-image-$new"
	baseline
	base="--baseline $dir/baseline.sqlite"
	ordered=$here/ext4-ci.toml
	# shellcheck disable=SC2086
	{
		verdict same-kernel 0 $base --targets-file "$ordered"
		verdict barrier0 1 $base --targets-file "$here/ext4-ci-barrier0.toml"
		verdict "debian-$old" 0 $base --targets-file "$ordered" --kernel-release "$old"
		verdict "debian-$new" 0 $base --targets-file "$ordered" --kernel-release "$new"
	}
}

built() { # verdicts on the two kernels built here
	[ -f "$dir/unpatched/bzImage" ] && [ -f "$dir/patched/bzImage" ] ||
		{ echo "$0: no kernels in $dir: run '$0 build $dir' first" >&2; exit 2; }
	baseline
	base="--baseline $dir/baseline.sqlite"
	ordered=$here/ext4-ci.toml
	# shellcheck disable=SC2086
	{
		verdict unpatched 0 $base --targets-file "$ordered" \
			--kernel "$dir/unpatched/bzImage" --modules "$dir/unpatched"
		verdict patched 1 $base --targets-file "$ordered" \
			--kernel "$dir/patched/bzImage" --modules "$dir/patched"
	}
}

extjournal() { # ext4 with its journal on a disk of its own: crash runs on three kernels
	[ -f "$dir/unpatched/bzImage" ] && [ -f "$dir/extjournal-fix/bzImage" ] ||
		{ echo "$0: no kernels in $dir: run '$0 build $dir' first" >&2; exit 2; }
	for kernel in debian unpatched extjournal-fix; do
		set -- --target ext4/logdev --case gen:seq2 --max-sequences 60 --variants prefix \
			--db "$dir/extjournal.sqlite" --results "$dir/results"
		[ "$kernel" = debian ] || set -- "$@" --kernel "$dir/$kernel/bzImage" --modules "$dir/$kernel"
		start=$(date +%s)
		status=0
		"$POWERCUT" crash "$@" > "$dir/extjournal-$kernel.out" 2>&1 || status=$?
		line="extjournal-$kernel: exit $status in $(elapsed "$start") s; $(grep -m1 -o 'results: [^ ]*' "$dir/extjournal-$kernel.out")"
		echo "kernel-ci: $line"
		echo "$line" >> "$dir/verdicts.txt"
	done
}

case $what in
extjournal) extjournal ;;
build) build ;;
debian) debian; cat "$dir/verdicts.txt" ;;
built) built; cat "$dir/verdicts.txt" ;;
verdicts) debian; built; cat "$dir/verdicts.txt" ;;
all) build; debian; built; cat "$dir/verdicts.txt" ;;
esac
