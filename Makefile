# powercut: one-command set-up, main job and tests.
#   make run    install what is missing, then run the default study (quick)
#   make test   install what is missing, then run the tests, and beside them lint, types,
#               import contracts and the docs build
#   make image  the container image localhost/powercut:bookworm (needs podman and debootstrap)
# Set-up is idempotent: a second call only checks (about a second).

# The virtualenv's interpreter: Debian's own where there is one. Guests run it under emulation
# for every task, so its start counts: in a TCG guest it started a crash check task's imports in
# 1.8-2.4 s against 2.5-3.3 s for a python3 3.11 built with a shared libpython and without
# --enable-optimizations, and started bare in 0.21-0.26 s against 0.45-0.49 s
# (bench/guest_python.py, medians of 7, two runs).
# Any python3 >= 3.11 works: make setup PYTHON=... (Debian's is used only when it is 3.11 or
# later; otherwise the python3 on the PATH).
PYTHON ?= $(if $(filter True,$(shell /usr/bin/python3 -c 'import sys; print(sys.version_info >= (3, 11))' 2>/dev/null)),/usr/bin/python3,python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMPS := .stamps

# Debian packages: the guest kernel and its tools, filesystems, benchmarks.
# gcc and python3-dev build the compiled log walker (devicemapper/_lognative.c); python3-venv
# lets Debian's python3 make the virtualenv; make to bc build kernels from Debian's sources
# (powercut ci --kernel-source, the zoo).
APT_PACKAGES := qemu-system-x86 qemu-utils linux-image-amd64 busybox-static \
	dmsetup kmod cpio e2fsprogs e2fsck-static xfsprogs btrfs-progs f2fs-tools jfsutils \
	reiserfsprogs fio bonnie++ postmark dbench fsmark attr chromium \
	gcc libc6-dev python3-dev python3-venv \
	make flex bison bc libelf-dev libssl-dev

.PHONY: setup bytecode run test lint docs unit integration clean kernels image
setup: apt $(STAMPS)/venv $(STAMPS)/native bytecode $(BIN)/actionlint

apt:
	@missing=$$(for p in $(APT_PACKAGES); do \
		dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; \
	done); \
	if [ -n "$$missing" ]; then \
		echo "powercut setup: installing Debian packages:" $$missing; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi

$(STAMPS)/venv: pyproject.toml
	@mkdir -p $(STAMPS)
	@[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $@

# The compiled log walker, built into the source tree next to devicemapper/native.py:
# the guest runs this tree and venv read-only over 9p, so it finds the same module, and
# nothing is compiled at run time. Without a compiler the log is walked in Python.
NATIVE_SOURCES := devicemapper/_lognative.c devicemapper/_lognative.h \
	devicemapper/_lognative_plan.c devicemapper/build_native.py
$(STAMPS)/native: $(NATIVE_SOURCES) | $(STAMPS)/venv
	@if $(BIN)/python -W ignore -m devicemapper.build_native; then touch $@; fi

# Bytecode of powercut's own modules, written once here. Guests run this tree read-only over
# 9p with PYTHONDONTWRITEBYTECODE, and so do hosts where that is set: without it every guest
# program compiles every module it imports, each time: under TCG on a quiet 2-core host a
# check task started in 3.3 to 4.2 s with it, 4.3 to 5.0 s without (bench/crash.py, "task
# start", random:200, three runs each). compileall skips what is up to date. A tree it cannot
# write to (read-only) still works, more slowly: the step says so and setup goes on.
bytecode: | $(STAMPS)/venv
	@$(BIN)/python -m compileall -q framework devicemapper crashcases recovery bench > /dev/null \
		|| echo "powercut setup: could not write the modules' bytecode (read-only tree?);" \
			"guests will compile powercut's modules at every start"

# actionlint checks the GitHub Actions example (tests/unit/test_ci_examples.py); it is a Go
# program, built from the Go module proxy where Go is installed (the test says why it
# skips where it is not).
ACTIONLINT := github.com/rhysd/actionlint/cmd/actionlint@v1.7.12
$(BIN)/actionlint: | $(STAMPS)/venv
	@if command -v go > /dev/null; then \
		GOBIN=$(abspath $(BIN)) go install $(ACTIONLINT) || echo "powercut setup: could not build actionlint"; \
	else echo "powercut setup: no Go, so no actionlint (its test is skipped)"; fi

run: setup
	$(BIN)/powercut run

lint: $(STAMPS)/venv
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

# The documentation site (docs/, mkdocs.yml), built strictly: a broken link, a page left
# out of the nav or a reference page the code can no longer generate fails. It is built
# into a temporary directory, so nothing lands in the checkout.
# (No --quiet: it hides the warnings that --strict counts, and the build then passes.)
docs: $(STAMPS)/venv
	@site=$$(mktemp -d) && trap 'rm -rf "$$site"' EXIT && \
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir "$$site"

# Two workers: a guest under TCG leaves a core idle much of the time. worksteal: a worker
# that runs out takes tests from the other, so the longest tests (started first, see
# tests/integration/conftest.py) do not leave one worker alone at the end.
# Lint, types, import contracts and the docs build (about 25 s of one core) run beside the
# tests, their output held until the tests end; either failing fails the target.
test: setup
	@checks=$$(mktemp); trap 'rm -f "$$checks"' EXIT; \
	{ $(MAKE) -k --no-print-directory lint docs > "$$checks" 2>&1; echo $$? >> "$$checks"; } & \
	$(BIN)/pytest -q -n 2 --dist worksteal --durations=15; tests=$$?; \
	wait; static=$$(tail -n 1 "$$checks"); \
	echo "---- make lint docs (beside the tests): exit $$static"; sed '$$d' "$$checks"; \
	[ "$$tests" = 0 ] && [ "$$static" = 0 ]

unit: $(STAMPS)/venv
	$(BIN)/pytest -q tests/unit

integration: setup
	$(BIN)/pytest -q -n 2 --dist worksteal -m integration tests/integration

# Kernels to compare with (--kernel-release): the newest 6.12 and the newest 7.x build
# Debian's archive offers, fetched into powercut's kernel cache (powercut kernels; the
# system's apt configuration is read, never changed).
kernels: setup
	$(BIN)/powercut kernels fetch 6.12 7

# The container image (.ci/container/Containerfile): Debian bookworm with this checkout and
# `make setup` done, and the kernels the CI examples boot; built from a debootstrap base, so
# no registry is needed. setup does not install podman and debootstrap; the script names them.
image:
	.ci/container/build

clean:
	rm -rf $(VENV) $(STAMPS) .pytest_cache .mypy_cache .ruff_cache build devicemapper/_lognative*.so
	find framework devicemapper crashcases recovery bench tests -name __pycache__ -prune -exec rm -rf {} +
