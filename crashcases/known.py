"""Known behaviour: failing states that documented kernel or filesystem behaviour explains.

Like the expunge lists of kdevops, a known-behaviour list names findings that
are real and understood (a filesystem that never flushes the disk cache, a
documented weaker guarantee). A run reports a state whose every finding such
an entry explains as ``known`` instead of failing, keeps its raw outcome and
the ids of the entries that explained it, and says at the end which entries
applied but explained nothing ("did not reproduce here: fixed?"); a ``file:``
workload, one sequence, says it only of the entry whose reproducer it is.

The list is TOML: the shipped ``crashcases/known.toml`` plus any ``--known
FILE``. Every entry is one ``[[known]]`` table::

    [[known]]
    id = "jfs-no-cache-flush"      # letters, digits, '.', '_', '-'; unique
    fstype = "jfs"                 # or target = "jfs*": a glob, exactly one of the two
    kernel_min = "6.1.0"           # guest kernel release, inclusive; absent: any
    kernel_max = "6.12.999"        # "6.12" covers every 6.12.x release
    run = "crash"                  # crash or cut; absent: both
    case = "gen:*"                 # glob on the case spec; absent: any
    op = "fsync*"                  # glob on the durability op of the broken promise
    variants = ["prefix", "subset"]  # crash-state variant kinds; absent: any
    findings = ["data-loss"]       # outcomes and/or finding kinds it explains
    fsck_says = "ref count is"     # regex: every problem line of the read-only fsck matches
    reason = "One or two sentences: what happens and why."
    source = "fs/jfs/jfs_logmgr.c lbmStartIO(), Linux 6.1"   # and/or link = "https://..."

Kernel releases compare as tuples of their leading numeric parts: Debian's
``6.1.0-28-amd64`` is (6, 1, 0, 28). A release is at or above ``kernel_min``
when, padded with zeros to its length, it is not smaller; at or below
``kernel_max`` when its first ``len(kernel_max)`` parts are not larger. A run
whose kernel is unknown matches no entry that gives a range.

What a failing state must have explained, item by item: every finding, and
an outcome its findings do not account for (fsck had to repair, the mount
failed, a step hung) when that outcome fails the target. A finding is
explained by an entry that lists its kind or the outcome it implies
(``data-loss`` for any lost or wrong promise, ``corrupt`` for ``io-error``),
whose ``op`` glob matches the kind of the durability op of the finding's
mark (a finding without a mark matches only entries without ``op``), and
whose ``variants`` hold the state's variant. A state with one unexplained
item keeps failing.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import importlib.resources
import os
import re
import tomllib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crashcases.check import LOSS_KINDS, CheckResult, outcome_of
from crashcases.execute import mark_name
from crashcases.oracle.finding import FindingKind
from crashcases.oracle.log import OracleLog
from crashcases.vocabulary import Outcome, VariantKind, fails
from crashcases.workload.ops import DURABILITY_OPS, Workload
from framework.core.errors import ConfigError
from recovery.targets import JournalPlacement, Target

#: The list that ships with powercut (a resource of this package).
SHIPPED = "known.toml"
RUN_KINDS = ("crash", "cut")
#: Outcomes and finding kinds an entry may name ("ok" explains nothing).
EXPLAINABLE = tuple(dict.fromkeys(
    [o.value for o in Outcome if o is not Outcome.OK] + [k.value for k in FindingKind]))
OP_KINDS = tuple(sorted(str(k) for k in DURABILITY_OPS))
ENTRY_KEYS = ("id", "fstype", "target", "journal", "kernel_min", "kernel_max", "run", "case",
              "op", "variants", "findings", "reason", "link", "source", "fix", "fix_subject",
              "fixed_in", "fixed_in_stable", "no_fix_checked", "fsck", "fsck_says", "report",
              "checked_on")
_COMMIT = re.compile(r"^[0-9a-f]{12,40}$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
#: A bug report folder in powercut's repository (powercut export --report wrote it).
_REPORT = re.compile(r"^docs/reports/[A-Za-z0-9][A-Za-z0-9._-]*$")
JOURNALS = tuple(p.value for p in JournalPlacement)
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_RELEASE = re.compile(r"^\d+([.-]\d+)*$")


# --- kernel releases -----------------------------------------------------------------


def release_key(release: str) -> tuple[int, ...]:
    """The leading numeric parts of a kernel release: '6.1.0-28-amd64' -> (6, 1, 0, 28)."""
    parts: list[int] = []
    for word in re.split(r"[.\-+~_]", release.strip()):
        if not word.isdigit():
            break
        parts.append(int(word))
    return tuple(parts)


def in_release_range(release: str | None, low: str | None, high: str | None) -> bool:
    """Whether ``release`` lies in [low, high] (either end absent: open)."""
    if low is None and high is None:
        return True
    if not release:
        return False
    have = release_key(release)
    if not have:
        return False
    if low is not None:
        lo = release_key(low)
        if have + (0,) * max(0, len(lo) - len(have)) < lo:
            return False
    if high is not None:
        hi = release_key(high)
        padded = have + (0,) * max(0, len(hi) - len(have))
        if padded[: len(hi)] > hi:
            return False
    return True


# --- entries -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Scope:
    """Where entries may apply: one target in one run, on one kernel."""

    run: str  # crash or cut
    target: str
    fstype: str
    case: str
    kernel: str | None
    #: Variant kinds the run checks (crash runs); empty for power cuts.
    variants: tuple[str, ...] = ()
    journal: str = ""  # the target's journal placement (JournalPlacement value)


@dataclass(frozen=True, slots=True)
class Item:
    """One thing a failing state must have explained: a finding, or an outcome beyond them."""

    kind: str  # a finding kind, or an outcome
    outcome: str  # the outcome it implies
    op: str | None  # kind of the durability op whose promise broke (None: no promise)
    text: str  # for people


@dataclass(frozen=True, slots=True)
class KnownEntry:
    id: str
    findings: tuple[str, ...]
    reason: str
    fstype: str | None = None
    target: str | None = None
    journal: str | None = None  # a journal placement: internal, external or none
    kernel_min: str | None = None
    kernel_max: str | None = None
    run: str | None = None
    case: str | None = None
    op: str | None = None
    variants: tuple[str, ...] = ()
    link: str | None = None
    source: str | None = None
    #: The upstream (mainline) fix, its subject, the release it is first in, and the stable
    #: releases that took it; or the date it was last checked that there is none.
    fix: str | None = None
    fix_subject: str | None = None
    fixed_in: str | None = None
    fixed_in_stable: tuple[str, ...] = ()
    no_fix_checked: str | None = None
    #: "repaired": explains a state only if its read-only fsck found errors that the repair
    #: fixed (behaviour whose mark is fsck cleaning up after it).
    fsck: str | None = None
    #: A regular expression: explains a state only if its read-only fsck reported problems
    #: and every one of them matches (``fsck_problems``: each line that is not progress,
    #: summary or version); output that may have been cut matches nothing. It tells one
    #: bug's fsck signature from another's on the same outcome.
    fsck_says: str | None = None
    #: The bug report written for it (a folder of powercut's repository: report.md, the
    #: fstests tests, the candidate fix), and the kernels it was seen on, each with the
    #: date ("7.3.4+deb13-amd64 2026-11-29").
    report: str | None = None
    checked_on: tuple[str, ...] = ()
    file: str = ""  # the list it came from

    def fsck_matches(self, check: CheckResult | None) -> bool:
        if self.fsck is not None and not (
                check is not None and check.fsck_check not in ("", "clean")
                and check.fsck_repair == "repaired"):
            return False
        if self.fsck_says is None:
            return True
        if check is None:
            return False
        problems = fsck_problems(check.fsck_check_output)
        return bool(problems) and all(re.search(self.fsck_says, p) for p in problems or ())

    @property
    def upstream(self) -> str:
        """The upstream fix in words ("" when the entry does not say)."""
        if self.fix:
            stable = f", {', '.join(self.fixed_in_stable)}" if self.fixed_in_stable else ""
            return (f"fixed upstream by {self.fix[:12]} \"{self.fix_subject}\" "
                    f"(Linux {self.fixed_in}{stable})")
        if self.no_fix_checked:
            return f"no upstream fix (checked {self.no_fix_checked})"
        return ""

    @property
    def reference(self) -> str:
        """Where the behaviour is documented: the source, the link, or both."""
        return "; ".join(x for x in (self.source, self.link,
                                     f"report: {self.report}/report.md" if self.report else "")
                          if x)

    def applies(self, scope: Scope) -> bool:
        """Whether this entry could explain anything in ``scope`` (everything but the state)."""
        if self.fstype is not None and not fnmatch.fnmatchcase(scope.fstype, self.fstype):
            return False
        if self.target is not None and not fnmatch.fnmatchcase(scope.target, self.target):
            return False
        if self.journal is not None and self.journal != scope.journal:
            return False
        if self.run is not None and self.run != scope.run:
            return False
        if self.case is not None and not fnmatch.fnmatchcase(scope.case, self.case):
            return False
        if self.variants and not set(self.variants) & set(scope.variants):
            return False
        return in_release_range(scope.kernel, self.kernel_min, self.kernel_max)

    def explains(self, item: Item, variant: str | None) -> bool:
        """Whether this entry (already known to apply) explains ``item`` of a state."""
        if item.kind not in self.findings and item.outcome not in self.findings:
            return False
        if self.op is not None and (item.op is None or not fnmatch.fnmatchcase(item.op, self.op)):
            return False
        return not self.variants or variant in self.variants


def _fail(source: str, entry: str, key: str, what: str) -> ConfigError:
    return ConfigError(f"{source}: known entry {entry}: {key}: {what}")


def _text(raw: Mapping[str, Any], key: str, source: str, entry: str) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise _fail(source, entry, key, f"expected a non-empty string, got {value!r}")
    return value.strip()


def _words(raw: Mapping[str, Any], key: str, source: str, entry: str) -> tuple[str, ...]:
    value = raw.get(key)
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if (not isinstance(value, list) or not value
            or not all(isinstance(v, str) and v.strip() for v in value)):
        raise _fail(source, entry, key, f"expected a string or a non-empty list of strings, "
                                        f"got {value!r}")
    return tuple(dict.fromkeys(v.strip() for v in value))


def parse_entry(raw: Any, *, source: str, number: int) -> KnownEntry:
    """One ``[[known]]`` table; every error names the file, the entry and the field."""
    entry = f"#{number}"
    if not isinstance(raw, dict):
        raise _fail(source, entry, "known", "expected a table ([[known]])")
    ident = raw.get("id")
    if isinstance(ident, str) and ident:
        entry = repr(ident)
    if not isinstance(ident, str) or not _ID.match(ident):
        what = "missing" if ident is None else (
            f"{ident!r}: expected letters, digits, '.', '_' or '-' (starting with a letter "
            "or digit)")
        raise _fail(source, entry, "id", what)
    unknown = sorted(set(raw) - set(ENTRY_KEYS))
    if unknown:
        raise _fail(source, entry, unknown[0], f"unknown key (expected: {', '.join(ENTRY_KEYS)})")
    fstype, target = _text(raw, "fstype", source, entry), _text(raw, "target", source, entry)
    if (fstype is None) == (target is None):
        raise _fail(source, entry, "fstype", "give exactly one of fstype and target "
                                             "(a glob on the filesystem type or the target name)")
    journal = _text(raw, "journal", source, entry)
    if journal is not None and journal not in JOURNALS:
        raise _fail(source, entry, "journal", f"{journal!r}: expected {', '.join(JOURNALS)}")
    bounds = {}
    for key in ("kernel_min", "kernel_max"):
        value = _text(raw, key, source, entry)
        if value is not None and not _RELEASE.match(value):
            raise _fail(source, entry, key, f"{value!r}: expected a release such as 6.1.0 "
                                            "or 6.12.999 (numbers and dots)")
        bounds[key] = value
    if (bounds["kernel_min"] and bounds["kernel_max"]
            and not in_release_range(bounds["kernel_min"], None, bounds["kernel_max"])):
        raise _fail(source, entry, "kernel_max", f"{bounds['kernel_max']!r} is below "
                                                 f"kernel_min {bounds['kernel_min']!r}")
    run = _text(raw, "run", source, entry)
    if run is not None and run not in RUN_KINDS:
        raise _fail(source, entry, "run", f"{run!r}: expected {' or '.join(RUN_KINDS)}")
    op = _text(raw, "op", source, entry)
    if op is not None and not fnmatch.filter(OP_KINDS, op):
        raise _fail(source, entry, "op", f"{op!r} matches no durability op "
                                         f"({', '.join(OP_KINDS)})")
    variants = _words(raw, "variants", source, entry)
    kinds = [v.value for v in VariantKind]
    for v in variants:
        if v not in kinds:
            raise _fail(source, entry, "variants", f"{v!r}: expected {', '.join(kinds)}")
    if variants and run == "cut":
        raise _fail(source, entry, "variants", "power cuts have no crash-state variants")
    findings = _words(raw, "findings", source, entry)
    if not findings:
        raise _fail(source, entry, "findings", "missing: name the outcomes or finding kinds "
                                               f"it explains ({', '.join(EXPLAINABLE)})")
    for f in findings:
        if f not in EXPLAINABLE:
            raise _fail(source, entry, "findings", f"{f!r}: expected {', '.join(EXPLAINABLE)}")
    reason = _text(raw, "reason", source, entry)
    if reason is None:
        raise _fail(source, entry, "reason", "missing: say in a sentence or two what happens "
                                             "and why")
    link, where = _text(raw, "link", source, entry), _text(raw, "source", source, entry)
    if link is None and where is None:
        raise _fail(source, entry, "source", "missing: give source (e.g. 'fs/x/y.c f(), Linux "
                                             "6.1') or link (a URL), or both")
    if link is not None and not re.match(r"^https?://\S+$", link):
        raise _fail(source, entry, "link", f"{link!r}: expected an http(s) URL")
    fsck = _text(raw, "fsck", source, entry)
    if fsck is not None and fsck != "repaired":
        raise _fail(source, entry, "fsck", f"{fsck!r}: expected \"repaired\" (the read-only "
                                           "check found errors and the repair fixed them)")
    says = _text(raw, "fsck_says", source, entry)
    if says is not None:
        try:
            re.compile(says)
        except re.error as exc:
            raise _fail(source, entry, "fsck_says", f"{says!r}: not a regular expression "
                                                    f"({exc})") from None
    fix, checked = _text(raw, "fix", source, entry), _text(raw, "no_fix_checked", source, entry)
    if fix is not None and checked is not None:
        raise _fail(source, entry, "fix", "give fix (the upstream commit) or no_fix_checked "
                                          "(the date none was found), not both")
    if fix is not None and not _COMMIT.match(fix):
        raise _fail(source, entry, "fix", f"{fix!r}: expected a commit id (12 to 40 hex digits)")
    if checked is not None and not _DATE.match(checked):
        raise _fail(source, entry, "no_fix_checked", f"{checked!r}: expected a date YYYY-MM-DD")
    fix_subject, fixed_in = _text(raw, "fix_subject", source, entry), _text(raw, "fixed_in", source, entry)
    if fix is not None and (fix_subject is None or fixed_in is None):
        raise _fail(source, entry, "fix", "a fix needs fix_subject and fixed_in (the mainline "
                                          "release it is first in)")
    report = _text(raw, "report", source, entry)
    if report is not None and not _REPORT.match(report):
        raise _fail(source, entry, "report", f"{report!r}: expected docs/reports/NAME, a report "
                                             "folder of powercut's repository")
    checked_on = _words(raw, "checked_on", source, entry)
    for seen in checked_on:
        if not re.match(r"^\S+ \d{4}-\d{2}-\d{2}$", seen):
            raise _fail(source, entry, "checked_on", f"{seen!r}: expected 'RELEASE YYYY-MM-DD' "
                                                     "(or a list of them), a kernel and the day")
    return KnownEntry(id=ident, findings=findings, reason=reason, fstype=fstype, target=target,
                      journal=journal, kernel_min=bounds["kernel_min"], kernel_max=bounds["kernel_max"], run=run,
                      case=_text(raw, "case", source, entry), op=op, variants=variants,
                      link=link, source=where, fix=fix, fix_subject=fix_subject,
                      fixed_in=fixed_in, fixed_in_stable=_words(raw, "fixed_in_stable", source, entry),
                      no_fix_checked=checked, fsck=fsck, fsck_says=says, report=report,
                      checked_on=checked_on, file=source)


#: Lines of fsck output that report no problem: its passes and progress, the summary and
#: warnings it prints about the device, its version, a question alone on its line (it
#: belongs to the problem on the line before); "Info:" lines, the kernel versions quoted
#: under them, a check that passed ("[Ok..]") and the image size.
_FSCK_INFO = re.compile(r"^(|Pass \d.*|/dev/.*|\*+.*|[\w.-]+ \d+\.\d+[\w.]* \(.*\)|"
                        r"Running additional passes.*|[A-Za-z /+]+\? no|Info: .*|"
                        r"(from |to )?\".*\"|.* \[Ok\.\.\]( \[0x[0-9a-f]+\])?|"
                        r"\[FSCK\] Max image size: .*)$")


def fsck_problems(output: str) -> list[str] | None:
    """The problems in a read-only fsck's output as ``crashcases.check`` keeps it (a command
    line, then the output's last lines): every line that is not progress, summary, version
    or a question alone. None when the output may have been cut (as many lines as are
    kept), since a problem may have been in the part left out."""
    from crashcases.check import OUTPUT_LINES

    lines = [line.strip() for line in output.splitlines()[1:]]
    if len(lines) >= OUTPUT_LINES:
        return None
    return [text for text in lines if not _FSCK_INFO.match(text)]


def parse_known(text: str, *, source: str) -> tuple[KnownEntry, ...]:
    """The entries of one known-behaviour TOML file (``source`` names it in errors)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    unknown = sorted(set(raw) - {"known"})
    if unknown:
        raise ConfigError(f"{source}: unknown key {unknown[0]!r} (entries are [[known]] tables)")
    tables = raw.get("known", [])
    if not isinstance(tables, list):
        raise ConfigError(f"{source}: 'known' must be an array of tables ([[known]])")
    entries = [parse_entry(t, source=source, number=i) for i, t in enumerate(tables, 1)]
    seen: set[str] = set()
    for e in entries:
        if e.id in seen:
            raise _fail(source, repr(e.id), "id", "defined twice in this file")
        seen.add(e.id)
    return tuple(entries)


def shipped_text() -> str:
    return importlib.resources.files("crashcases").joinpath(SHIPPED).read_text(encoding="utf-8")


@dataclass(frozen=True, slots=True)
class KnownList:
    entries: tuple[KnownEntry, ...] = ()
    files: tuple[str, ...] = ()
    #: Judge states against the entries and report which reproduced and which did not, but
    #: report every failing state as failing (--ignore-known: does a known bug still show?).
    ignore: bool = False

    def matcher(self, *, run: str, target: Target, case: str, kernel: str | None,
                marks: Mapping[str, str], variants: Sequence[str] = ()) -> KnownMatcher:
        """A matcher for the states of ``target`` in one run (see KnownMatcher)."""
        scope = Scope(run, target.name, target.fstype, case, kernel, tuple(variants),
                      JournalPlacement(target.journal).value)
        return KnownMatcher(self, scope, target, marks)


def load_known(paths: Iterable[str | os.PathLike[str]] = (), *, shipped: bool = True) -> KnownList:
    """The shipped list (unless ``shipped`` is false) and the user's files, in that order.

    An id may appear once across them all: one id, one behaviour."""
    entries: list[KnownEntry] = []
    files: list[str] = []
    if shipped:
        entries += parse_known(shipped_text(), source=SHIPPED)
        files.append(SHIPPED)
    for path in paths:
        source = os.fspath(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{source}: cannot read known-behaviour file: "
                              f"{exc.strerror or exc}") from exc
        got = parse_known(text, source=source)
        by_id = {e.id: e for e in entries}
        for e in got:
            if e.id in by_id:
                raise _fail(source, repr(e.id), "id", f"already defined in {by_id[e.id].file}")
        entries += got
        files.append(source)
    return KnownList(tuple(entries), tuple(files))


# --- matching states -------------------------------------------------------------------


def recorded_marks(oracle: OracleLog) -> dict[str, str]:
    """Mark name -> kind of the durability op it follows, as the recording placed them."""
    return {m.name: m.kind for m in oracle.mark_records}


def mark_ops(workload: Workload) -> dict[str, str]:
    """Mark name -> kind of the durability op it follows, as execute() numbers the marks
    (for runs without a recorded oracle on the host: power cuts)."""
    durable = [op for op in workload.ops if op.kind in DURABILITY_OPS]
    return {mark_name(i): str(op.kind) for i, op in enumerate(durable)}


def guest_kernel(environment: Mapping[str, Any]) -> str | None:
    """The guest kernel's release from a run's environment (set once a guest booted)."""
    guest = environment.get("guest") or {}
    release = guest.get("kernel") if isinstance(guest, Mapping) else None
    return str(release) if release else None


def _implied(kind: str) -> str:
    """The outcome a finding kind makes a state (check.outcome_of's rule)."""
    if kind in {k.value for k in LOSS_KINDS}:
        return Outcome.DATA_LOSS.value
    return Outcome.CORRUPT.value if kind == FindingKind.IO_ERROR.value else kind


def items_of(outcome: Outcome, check: CheckResult | None, target: Target,
             marks: Mapping[str, str]) -> list[Item]:
    """What must be explained for a state with ``outcome`` (and its check, if it has one)."""
    items = []
    findings = check.findings if check is not None else []
    for f in findings:
        kind = str(f.get("kind"))
        mark = f.get("mark")
        op = marks.get(mark) if mark else None
        where = f" (promise of {mark}, {op or 'unknown op'})" if mark else ""
        items.append(Item(kind, _implied(kind), op, f"{kind}: {f.get('path') or '.'}{where}"))
    implied = {i.outcome for i in items}
    rest: Outcome | None = outcome
    if outcome.value in implied and check is not None:
        # The findings account for the outcome; what do mount and fsck say on their own?
        rest = outcome_of(dataclasses.replace(check, findings=[]))
    if rest is not None and rest.value not in implied and fails(rest, target):
        items.append(Item(rest.value, rest.value, None, f"outcome {rest.value}"))
    return items


@dataclass(frozen=True, slots=True)
class KnownVerdict:
    """How the list judged one failing state that at least one entry explained in part."""

    known: bool  # every item explained: report as known
    ids: tuple[str, ...]  # the entries that explained something
    unexplained: tuple[str, ...] = ()  # items no entry explained

    def to_dict(self) -> dict[str, Any]:
        return {"known": self.known, "ids": list(self.ids), "unexplained": list(self.unexplained)}


@dataclass
class KnownMatcher:
    """Judges the states of one target in one run; remembers what each entry explained."""

    known_list: KnownList
    scope: Scope
    target: Target
    marks: Mapping[str, str]
    verdicts: dict[str, KnownVerdict] = field(default_factory=dict)
    applicable: tuple[KnownEntry, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        # An entry about one kind of durability op cannot show in a workload without
        # such an op: it is not applicable there (and so never "did not reproduce").
        kinds = set(self.marks.values())
        self.applicable = tuple(
            e for e in self.known_list.entries
            if e.applies(self.scope)
            and (e.op is None or not kinds or any(fnmatch.fnmatchcase(k, e.op) for k in kinds)))

    def judge(self, key: str, outcome: Outcome, check: CheckResult | None,
              variant: str | None = None) -> KnownVerdict | None:
        """The verdict on state ``key`` (None: not failing, or no entry explains any of it)."""
        self.verdicts.pop(key, None)
        if not self.applicable or not fails(outcome, self.target):
            return None
        items = items_of(outcome, check, self.target, self.marks)
        ids: dict[str, None] = {}
        missing = []
        for item in items:
            hits = [e.id for e in self.applicable
                    if e.explains(item, variant) and e.fsck_matches(check)]
            ids.update(dict.fromkeys(hits))
            if not hits:
                missing.append(item.text)
        if not ids:
            return None
        verdict = KnownVerdict(bool(items) and not missing, tuple(ids), tuple(missing))
        self.verdicts[key] = verdict
        return verdict

    def is_known(self, key: str) -> bool:
        v = self.verdicts.get(key)
        return v is not None and v.known and not self.known_list.ignore

    def known_ids(self, key: str) -> tuple[str, ...] | None:
        """The ids that made ``key`` known (None: it is not known, or the list is set aside,
        so that what a run stores agrees with its verdict)."""
        v = self.verdicts.get(key)
        return v.ids if v is not None and self.is_known(key) else None

    def entry(self, entry_id: str) -> KnownEntry:
        return next(e for e in self.known_list.entries if e.id == entry_id)

    def message(self, key: str) -> str:
        """One line for a known state: the entries and their reasons."""
        ids = self.known_ids(key) or ()
        if len(ids) == 1:
            e = self.entry(ids[0])
            return f"known: {e.id}: {e.reason} ({e.reference}{'; ' + e.upstream if e.upstream else ''})"
        return f"known: {', '.join(ids)}: " + "; ".join(
            f"{i}: {self.entry(i).reason} ({self.entry(i).reference})" for i in ids)

    def counts(self) -> dict[str, int]:
        """Entry id -> states it explained (wholly or in part)."""
        c: Counter[str] = Counter()
        for v in self.verdicts.values():
            c.update(v.ids)
        return {e.id: c[e.id] for e in self.applicable if c[e.id]}

    def silent(self) -> list[KnownEntry]:
        """Entries that applied here but explained nothing: fixed, or this run missed it.

        A ``file:`` workload is one sequence, usually one bug's reproducer: an entry is
        silent there only if the workload is its own (its report's workload or a copy
        named after the report, or its ``case`` names the file); that another bug's
        sequence did not show this one says nothing about a fix."""
        seen = self.counts()
        return [e for e in self.applicable if e.id not in seen and self._tests(e)]

    def _tests(self, entry: KnownEntry) -> bool:
        """Whether this run's workload could show ``entry`` at all (see ``silent``)."""
        case = self.scope.case
        if not case.startswith("file:"):
            return True
        if entry.case is not None:
            return True  # its case glob matched this very file (applies() checked it)
        path = Path(case.removeprefix("file:"))
        # docs/reports/NAME/workload.json, or a copy named NAME.json (known-recheck's)
        return entry.report is not None and Path(entry.report).name in (path.parent.name,
                                                                        path.stem)

    def not_reproduced(self) -> list[dict[str, Any]]:
        return [{"id": e.id, "target": self.scope.target, "kernel": self.scope.kernel,
                 "message": not_reproduced_message(e, self.scope), "reason": e.reason,
                 "reference": e.reference, "upstream": e.upstream, "file": e.file}
                for e in self.silent()]

    def report(self) -> dict[str, Any]:
        """The run's account of the list for results.json."""
        known = sum(1 for v in self.verdicts.values() if v.known)
        return {"files": list(self.known_list.files), "target": self.scope.target,
                "kernel": self.scope.kernel, "applicable": [e.id for e in self.applicable],
                "states": known, "explained": self.counts(),
                "not_reproduced": self.not_reproduced()}


def not_reproduced_message(entry: KnownEntry, scope: Scope) -> str:
    fix = f"; {entry.upstream}" if entry.fix else ""
    return (f"known entry {entry.id} did not reproduce here (fixed?): {scope.run} run of "
            f"{scope.target} on kernel {scope.kernel or 'unknown'}{fix}")
