"""mkdocs hook: the reference pages that are made from the code at build time.

Nothing here is copied by hand, so the site cannot drift from the code:
- reference/commands/NAME.md: one page per command, its parser's own --help;
- ``<!-- powercut:known -->`` in a page: the shipped known-behaviour list, as a table;
- ``<!-- powercut:schema -->`` in a page: the results store's schema, dumped from a
  fresh database that the store itself created.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import inspect
import sqlite3
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parent.parent
COMMANDS_DIR = "reference/commands"
HELP_WIDTH = 80  # columns of the --help text: what a code block on the page shows


# ---- commands --------------------------------------------------------------


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each sub-command of ``parser``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            return [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return []


def _help(parser: argparse.ArgumentParser) -> str:
    # A fixed width: the terminal that runs mkdocs must not change the page. (typeshed's
    # formatter protocol names only prog; every argparse.HelpFormatter takes width.)
    parser.formatter_class = functools.partial(
        parser.formatter_class, width=HELP_WIDTH)  # type: ignore[call-arg]
    return parser.format_help()


def _sentence(summary: str) -> str:
    return summary[:1].upper() + summary[1:] + "."


def _command_page(name: str, summary: str, parser: argparse.ArgumentParser) -> str:
    lines = [f"# powercut {name}", "", _sentence(summary), "",
             "```text", _help(parser).rstrip(), "```", ""]
    for sub, sub_summary, sub_parser in _subcommands(parser):
        lines += [f"## powercut {name} {sub}", "", _sentence(sub_summary), "",
                  "```text", _help(sub_parser).rstrip(), "```", ""]
    return "\n".join(lines)


def command_pages() -> dict[str, str]:
    """Markdown of reference/commands/: an index and a page per command, by file name."""
    from framework.cli import build_parser

    parser = build_parser()
    commands = sorted(_subcommands(parser), key=lambda command: command[0])
    pages = {f"{name}.md": _command_page(name, summary, sub) for name, summary, sub in commands}
    rows = [f"| [`{name}`]({name}.md) | {summary} |" for name, summary, _ in commands]
    pages["index.md"] = "\n".join([
        "# Commands", "",
        "Every page here is the command's own `--help`, generated from powercut's argument",
        "parser when the site is built.", "",
        "| command | what it does |", "|---|---|", *rows, "",
        "## powercut", "", "```text", _help(parser).rstrip(), "```", "",
    ])
    return pages


# ---- known behaviour -------------------------------------------------------


def _cell(value: Any) -> str:
    text = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _applies_to(entry: dict[str, Any]) -> str:
    parts = [f"`{entry[key]}`" for key in ("fstype", "target") if key in entry]
    low, high = entry.get("kernel_min"), entry.get("kernel_max")
    if low or high:
        parts.append(f"kernel {low or 'any'} to {high or 'any'}")
    for key in ("journal", "run", "case", "op", "variants"):
        if key in entry:
            parts.append(f"{key}: {_cell(entry[key])}")
    return "; ".join(parts)


def known_table() -> str:
    """The shipped known-behaviour list as a markdown table."""
    found = sorted(ROOT.glob("crashcases/**/known.toml"))
    if len(found) != 1:
        raise RuntimeError(f"expected one known.toml under crashcases/, found {len(found)}")
    path = found[0]
    entries = tomllib.loads(path.read_text())["known"]
    rows = []
    for e in entries:
        why = _cell(e["reason"])
        if "source" in e:
            why += f"<br><br>*Where:* {_cell(e['source'])}"
        if "link" in e:
            why += f" ([link]({e['link']}))"
        seen = e.get("checked_on") or []
        seen = _cell([seen] if isinstance(seen, str) else seen) or "-"
        rows.append(f"| `{e['id']}` | {_applies_to(e)} | {_cell(e['findings'])} | {why} | "
                    f"{_upstream(e)} | {seen} |")
    return "\n".join([
        f"{len(entries)} entries in `{path.relative_to(ROOT)}`, read when this site was built.", "",
        "| id | applies to | findings | why, and where in the kernel | upstream fix | seen on |",
        "|---|---|---|---|---|---|", *rows, "",
    ])


def _upstream(e: dict) -> str:
    if "fix" in e:
        url = f"https://git.kernel.org/pub/scm/linux/kernel/git/torvalds/linux.git/commit/?id={e['fix']}"
        stable = f"; stable {', '.join(e.get('fixed_in_stable', []))}" if e.get("fixed_in_stable") else ""
        return f"[{e['fix'][:12]}]({url}) {_cell(e['fix_subject'])} (Linux {e['fixed_in']}{stable})"
    if "no_fix_checked" in e:
        return f"none (checked {e['no_fix_checked']})"
    return "not checked"


# ---- store schema ----------------------------------------------------------


def schema() -> str:
    """The store's tables and indexes, from a database the store has just created."""
    from framework.core import store

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "powercut.sqlite"
        with store.Store(path):
            pass
        with contextlib.closing(sqlite3.connect(path)) as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            rows = db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master "
                              "WHERE sql IS NOT NULL ORDER BY rowid").fetchall()
    lines = [inspect.cleandoc(store.__doc__ or ""), "",
             f"Schema version {version} (`PRAGMA user_version`).", ""]
    for _, name, _, sql in (r for r in rows if r[0] == "table"):
        indexes = [r[3] for r in rows if r[0] == "index" and r[2] == name]
        lines += [f"## {name}", "", "```sql",
                  *(inspect.cleandoc(s) + ";" for s in [sql, *indexes]), "```", ""]
    return "\n".join(lines)


# ---- mkdocs events ---------------------------------------------------------

MARKERS = {"<!-- powercut:known -->": known_table, "<!-- powercut:schema -->": schema}


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for name, content in command_pages().items():
        files.append(File.generated(config, f"{COMMANDS_DIR}/{name}", content=content))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    for marker, make in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    return markdown
