"""``powercut log info|list|replay|replay-log``: look into a dm-log-writes log and replay it."""

from __future__ import annotations

import argparse
import itertools
import logging
import sys
from collections.abc import Callable

from devicemapper.logformat import LogEntry, LogFlag, LogReader, flags_str, summarize
from devicemapper.replay import Replayer, require_unused
from framework.core.errors import PowercutError

log = logging.getLogger(__name__)

Handler = Callable[[argparse.Namespace], int]


def _printable(text: str) -> str:
    """Mark text with undecodable bytes shown as escapes, safe for any terminal."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _reporting_errors(handler: Handler) -> Handler:
    """Turn a PowercutError into one line on stderr and exit status 2."""

    def wrapped(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except PowercutError as exc:
            message = " ".join(str(exc).split())
            print(f"powercut: {message}", file=sys.stderr)
            return 2

    wrapped.__name__ = handler.__name__
    wrapped.__doc__ = handler.__doc__
    return wrapped


def _json_text(obj: object) -> str:
    """``obj`` as indented JSON; json is imported only by the commands that print it, so
    `log replay-log`, which fstests-style scripts start once per replay, starts faster."""
    import json

    return json.dumps(obj, indent=2)


def _entry_dict(entry: LogEntry) -> dict[str, object]:
    return {
        "index": entry.index,
        "sector": entry.sector,
        "nr_sectors": entry.nr_sectors,
        "flags": flags_str(entry.flags),
        "mark": None if entry.mark is None else _printable(entry.mark),
        "header_offset": entry.header_offset,
    }


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


@_reporting_errors
def cmd_info(args: argparse.Namespace) -> int:
    """Summarise a log: entries, marks, flushes, FUAs, discards, payload."""
    with LogReader(args.log) as reader:
        summary = summarize(reader, per_mark=args.per_mark)
        size_bytes = reader.size_bytes
    intervals = summary.intervals
    if args.json:
        data = summary.to_dict()
        data["log"] = args.log
        data["log_bytes"] = size_bytes
        data["marks"] = [{"index": i, "mark": _printable(m)} for i, m in summary.marks]
        if args.per_mark:
            data["per_mark"] = [{**i.to_dict(), "mark": _printable(i.mark)} for i in intervals]
        print(_json_text(data))
        return 0
    print(f"log:           {args.log} ({size_bytes} bytes)")
    print(f"sectorsize:    {summary.sectorsize}")
    print(f"entries:       {summary.entries}")
    print(f"writes:        {summary.writes}")
    print(f"payload bytes: {summary.payload_bytes}")
    print(f"flushes:       {summary.flushes}")
    print(f"FUAs:          {summary.fuas}")
    print(f"discards:      {summary.discards} ({summary.discard_bytes} bytes)")
    print(f"marks:         {len(summary.marks)}")
    if not args.per_mark:
        for index, mark in summary.marks:
            print(f"  {index:>10}  {_printable(mark)}")
        return 0
    print(f"  {'index':>10}  {'writes':>6} {'KiB':>8} {'runs':>5} {'flushes':>7} {'FUAs':>5}  "
          "mark (what reached the device since the mark before)")
    for i in intervals:
        print(f"  {i.index:>10}  {i.writes:>6} {i.payload_bytes / 1024:>8.1f} {i.runs:>5} "
              f"{i.flushes:>7} {i.fuas:>5}  {_printable(i.mark)}")
    return 0


@_reporting_errors
def cmd_list(args: argparse.Namespace) -> int:
    """One line per entry: index, sector, nr_sectors, flags, mark."""
    rows: list[dict[str, object]] = []
    with LogReader(args.log) as reader:
        if not args.json:
            print(f"{'index':>10} {'sector':>12} {'nr_sectors':>10}  {'flags':<24} mark")
        for entry in reader.iter_entries(args.start):
            if args.limit is not None and entry.index >= args.start + args.limit:
                break
            if args.json:
                rows.append(_entry_dict(entry))
            else:
                mark = "" if entry.mark is None else _printable(entry.mark)
                print(
                    f"{entry.index:>10} {entry.sector:>12} {entry.nr_sectors:>10}  "
                    f"{flags_str(entry.flags):<24} {mark}".rstrip()
                )
    if args.json:
        print(_json_text(rows))
    return 0


@_reporting_errors
def cmd_replay(args: argparse.Namespace) -> int:
    """Replay a log onto a device or file up to an entry, mark, FUA or flush."""
    require_unused(args.target)
    with Replayer(args.log, args.target, discard=not args.no_discard) as replayer:
        if args.to is not None:
            entry = replayer.replay_to(args.to)
        elif args.to_mark is not None:
            entry = replayer.replay_to_mark(args.to_mark)
        elif args.next_fua is not None:
            entry = replayer.replay_next_fua(args.next_fua)
        else:
            entry = replayer.replay_next_flush(args.next_flush)
        result = {
            "log": args.log,
            "target": args.target,
            "last_entry": None if entry is None else entry.index,
            "last_flags": None if entry is None else flags_str(entry.flags),
            "entries_applied": replayer.entries_applied,
            "bytes_written": replayer.bytes_written,
            "bytes_discarded": replayer.bytes_discarded,
        }
    if args.json:
        print(_json_text(result))
    else:
        print(
            f"replayed entries 0..{result['last_entry']} ({result['last_flags']}) onto "
            f"{args.target}: {result['bytes_written']} bytes written, "
            f"{result['bytes_discarded']} bytes discarded"
        )
    return 0


#: What fstests' replay-log (src/log-writes) prints for the log version it reads.
REPLAY_LOG_VERSION = 1


def _should_stop(entry: LogEntry, stop_flags: int, mark: str | None) -> bool:
    """replay-log's stop rule: a flag asked for; with --end-mark, only that mark."""
    if not entry.flags & stop_flags:
        return False
    if not stop_flags & LogFlag.MARK:
        return True
    return bool(entry.flags & LogFlag.MARK) and entry.mark == mark


def _is_last(entry: LogEntry, n: int, limit: int, stop_flags: int, mark: str | None) -> bool:
    """Whether replay-log stops after ``entry``, the ``n``-th it reads (1-based)."""
    return bool(limit and n == limit) or _should_stop(entry, stop_flags, mark)


@_reporting_errors
def cmd_replay_log(args: argparse.Namespace) -> int:
    """The command line of fstests' replay-log (src/log-writes/replay-log.c), so that
    scripts calling it can call powercut: the same options, the same output (entry@sector
    for --find, the count for --num-entries, the one-line log summary without --replay),
    exit 1 where it exits 1. Replay is powercut's own (devicemapper.replay)."""
    stop_flags = ((LogFlag.FLUSH if args.next_flush else 0) | (LogFlag.FUA if args.next_fua else 0)
                  | (LogFlag.MARK if args.end_mark is not None else 0))
    with LogReader(args.log) as reader:
        sectorsize, total = reader.sectorsize, reader.nr_entries
        if args.start_mark is not None:
            found = next((e for e in reader.iter_entries()
                          if e.flags & LogFlag.MARK and e.mark == args.start_mark), None)
            if found is None:
                print("Couldn't find starting mark", file=sys.stderr)
                return 1
            start = found.index + 1  # replay-log reads the mark entry before it goes on
        else:
            if args.start_entry >= total:
                print("Invalid entry number", file=sys.stderr)
                return 1
            start = args.start_entry
        stop: LogEntry | None = None
        if args.find:
            stop = next((e for n, e in enumerate(reader.iter_entries(start), 1)
                         if _is_last(e, n, args.limit, stop_flags, args.end_mark)), None)
            if stop is None:
                print("Couldn't find entry", file=sys.stderr)
                return 1
            print(f"{stop.index}@{stop.payload_end // sectorsize}")
            return 0
        if args.num_entries:
            print(total)
            return 0
        if not args.replay:
            print(f"Log version={REPLAY_LOG_VERSION}, sectorsize={sectorsize}, entries={total}")
            return 0
    require_unused(args.replay)
    with Replayer(args.log, args.replay, discard=not args.no_discard) as replayer:
        # The stop rule runs as the entries are applied: one pass over the log.
        until: Callable[[LogEntry], bool] | None = None
        if args.limit or stop_flags:
            applied = itertools.count(1)
            until = lambda e: _is_last(e, next(applied), args.limit, stop_flags, args.end_mark)  # noqa: E731
        replayer.replay_range(start, total, until=until)
    return 0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``log`` with its sub-commands to the top-level sub-parsers."""
    parser = subparsers.add_parser(
        "log",
        help="inspect or replay a dm-log-writes log",
        description="Inspect or replay a dm-log-writes log (a file or a block device).",
    )
    verbs = parser.add_subparsers(dest="log_command", metavar="VERB", required=True)

    info = verbs.add_parser("info", help="summarise a log", description=cmd_info.__doc__)
    info.add_argument("log", metavar="LOG", help="log file or device")
    info.add_argument("--json", action="store_true", help="print JSON")
    info.add_argument("--per-mark", action="store_true",
                      help="also count what reached the device between each mark and the one "
                           "before: writes, payload, runs (writes not contiguous with the write "
                           "completed before them), flushes, FUAs; a crash run's log has a mark "
                           "after each durability op, so this is what each one cost")
    info.set_defaults(func=cmd_info)

    lst = verbs.add_parser("list", help="list the entries of a log", description=cmd_list.__doc__)
    lst.add_argument("log", metavar="LOG", help="log file or device")
    lst.add_argument("--json", action="store_true", help="print JSON")
    lst.add_argument(
        "--start", type=_non_negative, default=0, metavar="N", help="first entry (default 0)"
    )
    lst.add_argument(
        "--limit", type=_non_negative, default=None, metavar="N", help="list at most N entries"
    )
    lst.set_defaults(func=cmd_list)

    rep = verbs.add_parser(
        "replay", help="replay a log onto a target", description=cmd_replay.__doc__
    )
    rep.add_argument("log", metavar="LOG", help="log file or device")
    rep.add_argument("target", metavar="TARGET", help="existing file or block device to write")
    where = rep.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--to", type=_non_negative, metavar="ENTRY", help="replay through this entry index"
    )
    where.add_argument("--to-mark", metavar="MARK", help="replay through the first mark MARK")
    where.add_argument(
        "--next-fua",
        type=int,
        metavar="N",
        help="replay through the first FUA after entry N (-1: the first FUA)",
    )
    where.add_argument(
        "--next-flush",
        type=int,
        metavar="N",
        help="replay through the first flush after entry N (-1: the first flush)",
    )
    rep.add_argument(
        "--no-discard", action="store_true", help="skip discard entries instead of zeroing"
    )
    rep.add_argument("--json", action="store_true", help="print JSON")
    rep.set_defaults(func=cmd_replay)

    compat = verbs.add_parser(
        "replay-log", help="fstests' replay-log command line (--log, --replay, --find, ...)",
        description=cmd_replay_log.__doc__,
        epilog="not taken: --fsck, --check, --start-sector, --end-sector and -v")
    compat.add_argument("--log", required=True, metavar="LOG", help="log file or device")
    compat.add_argument("--replay", metavar="DEVICE", help="replay onto this file or device")
    compat.add_argument("--limit", type=_non_negative, default=0, metavar="N",
                        help="number of entries to replay (or to search, with --find)")
    compat.add_argument("--next-flush", action="store_true", help="replay to/find the next flush")
    compat.add_argument("--next-fua", action="store_true", help="replay to/find the next FUA")
    start = compat.add_mutually_exclusive_group()
    start.add_argument("--start-entry", type=_non_negative, default=0, metavar="N",
                       help="start at entry N (earlier entries are not replayed)")
    start.add_argument("--start-mark", metavar="MARK",
                       help="start just after the first mark MARK")
    compat.add_argument("--end-mark", metavar="MARK", help="replay to/find the mark MARK")
    compat.add_argument("--find", action="store_true",
                        help="print ENTRY@SECTOR of the entry the other options stop at "
                             "(SECTOR: where the next entry starts, in log sectors)")
    compat.add_argument("--num-entries", action="store_true",
                        help="print the number of entries in the log")
    compat.add_argument("--no-discard", action="store_true", help="skip discard entries")
    compat.set_defaults(func=cmd_replay_log)
