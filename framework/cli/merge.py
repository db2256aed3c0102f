"""``powercut merge``: combine the results databases of CI shards (or of any runs)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from framework.core.store import Store, StoreError, merge
from framework.study.engine import missing_shards

DESCRIPTION = """\
Copy every run of the databases IN into OUT (created if missing). Runs are
matched by uuid: the shards of one study (`powercut run --shard I/N
--run-uuid ID`, each with its own --db) share their study run, so after the
merge it holds every shard's steps, as one unsharded run would. Targets,
recordings, crash points and results are matched by their natural keys, so
merging a database twice adds nothing. A merged run's status is its worst
shard's (failed > running > interrupted > finished). A sharded study whose
shards are not all merged, or not all finished, is reported by name and the
exit status is 2: it is never a smaller run.
"""

EPILOG = """\
examples:
  powercut run quick --shard 0/3 --run-uuid ci-1234 --db shard0.sqlite   # one per CI job
  powercut merge all.sqlite shard0.sqlite shard1.sqlite shard2.sqlite
  powercut report latest --db all.sqlite
"""


def cmd_merge(args: argparse.Namespace) -> int:
    out = Path(args.out)
    inputs = [Path(p) for p in args.inputs]
    for path in inputs:
        if not path.is_file():
            raise StoreError(f"{path}: no such results database")
        if path.resolve() == out.resolve():
            raise StoreError(f"{path}: is the output database too; name another OUT")
    merge(out, inputs)
    with Store(out) as store:
        runs = store.runs()
        top = [r for r in runs if r.parent_id is None]
    print(f"{out}: {len(runs)} runs ({len(top)} top-level) from {len(inputs)} database(s)")
    for r in top[-10:]:
        steps = sum(1 for x in runs if x.parent_id == r.id)
        print(f"  run {r.id}: {r.kind or 'run'} {r.study!r}, {r.status.value}"
              + (f", {steps} steps" if steps else ""))
    gaps = [(r, gap) for r in top for gap in missing_shards(r)]
    for r, gap in gaps:
        print(f"powercut merge: run {r.id} ({r.study}): {gap}", file=sys.stderr)
    # A sharded run without all its shards is not a smaller run: it is an error.
    return 2 if gaps else 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("merge", help="combine results databases (CI shards) into one",
                       description=DESCRIPTION, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", metavar="OUT", help="database to merge into (created if missing)")
    p.add_argument("inputs", metavar="IN", nargs="+", help="databases to copy runs from")
    p.set_defaults(func=cmd_merge)
