"""Run the benchmark suite: every entry of ``benchmarks/manifest.toml``, one after another.

Usage (from anywhere; the scripts run from the repository root with this interpreter)::

    python benchmarks/run.py                   # every benchmark in full mode (hours), into benchmarks/results
    python benchmarks/run.py --quick           # a smoke pass (--quick runs), into benchmarks/results/quick
    python benchmarks/run.py --only m2m kde    # some entries only
    python benchmarks/run.py --list [--markdown]   # the manifest as a list or a markdown table
    python benchmarks/run.py --dry-run         # what would run, and what would be skipped and why

Entries run serially, never in parallel (they time each other); nothing else should run on the
machine meanwhile. An entry whose requirements are missing (``needs``) is skipped with the reason;
an entry without a quick run is skipped under ``--quick``. The run fails (exit status 1) if any
entry fails or does not write each of its result files.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
MANIFEST = BENCH_DIR / "manifest.toml"
OUT = "{out}"


@dataclass(frozen=True)
class Requirement:
    """Something an entry needs beyond the project's ``[test,bench]`` install."""

    name: str
    hint: str
    modules: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()
    env: tuple[str, ...] = ()

    def missing(self) -> str | None:
        """Why the requirement is not met here (``None``: it is)."""
        for m in self.modules:
            if importlib.util.find_spec(m) is None:
                return f"no module {m!r}"
        for c in self.commands:
            if shutil.which(c) is None:
                return f"no {c!r} on PATH"
        for v in self.env:
            value = os.environ.get(v)
            if not value:
                return f"${v} not set"
            if not os.access(value, os.X_OK):
                return f"${v}={value} is not an executable"
        return None


@dataclass(frozen=True)
class Entry:
    """One benchmark of the manifest: a script with its arguments and the files it writes."""

    name: str
    what: str
    command: tuple[str, ...]
    results: tuple[str, ...]
    needs: tuple[str, ...] = ()
    quick: bool = True
    rename: dict[str, str] = field(default_factory=dict)

    @property
    def script(self) -> str:
        return self.command[0]

    def argv(self, out_dir: Path | str, quick: bool = False) -> list[str]:
        """The command line (after the interpreter) with ``{out}`` replaced by ``out_dir``."""
        args = [a.replace(OUT, str(out_dir)) for a in self.command[1:]]
        return [f"benchmarks/{self.script}", *args, *(["--quick"] if quick else [])]

    def shown(self) -> str:
        """The command as the manifest states it, for listings."""
        return " ".join(["python", f"benchmarks/{self.script}", *self.command[1:]])


@dataclass
class Manifest:
    entries: list[Entry]
    requires: dict[str, Requirement]

    def by_name(self) -> dict[str, Entry]:
        return {e.name: e for e in self.entries}

    def missing(self, entry: Entry) -> list[str]:
        """Why ``entry`` cannot run here: each unmet requirement with its hint."""
        out = []
        for need in entry.needs:
            why = self.requires[need].missing()
            if why is not None:
                out.append(f"needs {need} ({why}; {self.requires[need].hint})")
        return out


def load_manifest(path: Path = MANIFEST) -> Manifest:
    """Read and check the manifest (unique names, known keys and requirements, ``{out}`` in
    every command, rename targets among the results)."""
    with open(path, "rb") as f:
        data = tomllib.load(f)
    requires = {
        name: Requirement(
            name,
            spec["hint"],
            tuple(spec.get("modules", ())),
            tuple(spec.get("commands", ())),
            tuple(spec.get("env", ())),
        )
        for name, spec in data.get("requires", {}).items()
    }
    known = {"name", "what", "command", "results", "needs", "quick", "rename"}
    entries = []
    for raw in data["bench"]:
        unknown = set(raw) - known
        if unknown:
            raise ValueError(f"{path.name}: entry {raw.get('name')!r} has unknown keys {sorted(unknown)}")
        e = Entry(
            name=raw["name"],
            what=raw["what"],
            command=tuple(raw["command"]),
            results=tuple(raw["results"]),
            needs=tuple(raw.get("needs", ())),
            quick=bool(raw.get("quick", True)),
            rename=dict(raw.get("rename", {})),
        )
        if not any(OUT in a for a in e.command):
            raise ValueError(f"{path.name}: {e.name}'s command does not say where to write ({OUT})")
        if not (BENCH_DIR / e.script).is_file():
            raise ValueError(f"{path.name}: {e.name}'s script {e.script} does not exist")
        for need in e.needs:
            if need not in requires:
                raise ValueError(f"{path.name}: {e.name} needs {need!r}, not in [requires]")
        for target in e.rename.values():
            if target not in e.results:
                raise ValueError(f"{path.name}: {e.name} renames to {target!r}, not one of its results")
        entries.append(e)
    names = [e.name for e in entries]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"{path.name}: names used twice: {dupes}")
    return Manifest(entries, requires)


# -- listing ---------------------------------------------------------------------------------------


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(manifest: Manifest) -> str:
    """The manifest as a markdown table (the one in ``benchmarks/README.md``)."""
    lines = [
        "| name | what it measures | command | results | needs | quick |",
        "|---|---|---|---|---|---|",
    ]
    for e in manifest.entries:
        results = ", ".join(f"[`{r}`](results/{r})" for r in e.results)
        lines.append(
            f"| `{e.name}` | {_md(e.what)} | `{_md(e.shown())}` | {results} | "
            f"{', '.join(e.needs) or '–'} | {'yes' if e.quick else 'no'} |"
        )
    return "\n".join(lines)


def plain_list(manifest: Manifest) -> str:
    out = []
    for e in manifest.entries:
        flags = [f"needs {', '.join(e.needs)}"] if e.needs else []
        flags += [] if e.quick else ["full run only"]
        out.append(f"{e.name}{' (' + '; '.join(flags) + ')' if flags else ''}")
        out.append(f"    {e.what}")
        out.append(f"    $ {e.shown()}")
        out.append(f"    -> {', '.join(e.results)}")
    return "\n".join(out)


# -- running ---------------------------------------------------------------------------------------


def _shown_path(p: Path) -> str:
    """``p`` relative to the repository root when inside it (what the reports record)."""
    try:
        return str(p.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(p.resolve())


def run_entry(entry: Entry, out_dir: Path, quick: bool) -> str | None:
    """Run one entry into ``out_dir``; ``None`` on success, else why it failed."""
    out_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"bench_{entry.name}_")) if entry.rename else None
    target = scratch if scratch is not None else out_dir
    cmd = [sys.executable, *entry.argv(_shown_path(target), quick)]
    print(f"$ {shlex.join(cmd)}", flush=True)
    start = time.time()
    try:
        proc = subprocess.run(cmd, cwd=REPO_ROOT)
        if proc.returncode != 0:
            return f"exit status {proc.returncode}"
        if scratch is not None:
            for src, dst in entry.rename.items():
                if not (scratch / src).exists():
                    return f"did not write {src}"
                shutil.move(str(scratch / src), str(out_dir / dst))
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    stale = [
        r for r in entry.results if not (out_dir / r).exists() or (out_dir / r).stat().st_mtime < start - 1
    ]
    if stale:
        return f"did not write {', '.join(stale)}"
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a smoke pass: each entry with a quick run, --quick")
    p.add_argument("--only", nargs="+", metavar="NAME", help="run these entries only (in manifest order)")
    p.add_argument(
        "--out-dir",
        type=Path,
        default=None,
        help="where results go (default: benchmarks/results, benchmarks/results/quick with --quick)",
    )
    p.add_argument("--list", action="store_true", help="list the manifest and exit")
    p.add_argument("--markdown", action="store_true", help="with --list: as a markdown table")
    p.add_argument("--dry-run", action="store_true", help="print what would run or be skipped, run nothing")
    p.add_argument("--manifest", type=Path, default=MANIFEST, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    manifest = load_manifest(args.manifest)
    if args.list:
        print(markdown_table(manifest) if args.markdown else plain_list(manifest))
        return 0
    entries = manifest.entries
    if args.only:
        known = manifest.by_name()
        unknown = [n for n in args.only if n not in known]
        if unknown:
            p.error(f"unknown entries {unknown}; see --list")
        entries = [e for e in entries if e.name in set(args.only)]
    out_dir = args.out_dir or (RESULTS_DIR / "quick" if args.quick else RESULTS_DIR)
    mode = "quick smoke pass" if args.quick else "full runs"
    print(f"{len(entries)} benchmark(s), {mode}, results in {_shown_path(out_dir)}", flush=True)
    outcome: dict[str, list[Any]] = {"ok": [], "skipped": [], "failed": []}
    t_all = time.monotonic()
    for k, e in enumerate(entries, 1):
        head = f"[{k}/{len(entries)}] {e.name}"
        why = manifest.missing(e)
        if args.quick and not e.quick:
            why = ["no quick run (full run only)", *why]
        if why:
            print(f"{head}: skipped: {'; '.join(why)}", flush=True)
            outcome["skipped"].append((e.name, why[0]))
            continue
        print(f"{head}: {e.what}", flush=True)
        if args.dry_run:
            print(f"$ {shlex.join([sys.executable, *e.argv(_shown_path(out_dir), args.quick)])}")
            outcome["ok"].append((e.name, 0.0))
            continue
        t0 = time.monotonic()
        try:
            failure = run_entry(e, out_dir, args.quick)
        except KeyboardInterrupt:
            print(f"{head}: interrupted", flush=True)
            outcome["failed"].append((e.name, "interrupted"))
            break
        seconds = time.monotonic() - t0
        if failure is None:
            print(f"{head}: ok ({seconds:.0f} s)", flush=True)
            outcome["ok"].append((e.name, seconds))
        else:
            print(f"{head}: FAILED ({failure}; {seconds:.0f} s)", flush=True)
            outcome["failed"].append((e.name, failure))
    minutes = (time.monotonic() - t_all) / 60
    ran = "would run" if args.dry_run else "ok"
    print(
        f"\n{len(outcome['ok'])} {ran}, {len(outcome['skipped'])} skipped, {len(outcome['failed'])} failed "
        f"({minutes:.1f} min)"
    )
    for name, why in outcome["skipped"]:
        print(f"  skipped {name}: {why}")
    for name, why in outcome["failed"]:
        print(f"  FAILED {name}: {why}")
    return 1 if outcome["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
