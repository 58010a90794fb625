"""Route freshness failures to people: one GitHub issue per failing (lab, matrix entry), and one
per yanked pin of a matrix entry.

    python ci/route_failures.py freshness.json [--dry-run]
    python ci/route_failures.py --pins release-check.json [--dry-run]   # or verify-pins --out pins.json

Reads the report that ``rocmlab report --format json`` wrote. For each pair on a matrix entry:

- failing or flaky, no open issue: open one (label ``freshness``) naming the failing cell,
  the traceback tail, the package versions that changed since the last pass, and links to
  the CI log and the executed notebook;
- failing or flaky, issue open: rewrite its body with the newest run and add a comment;
- passing again (its latest attempt passed), issue open: close it with a comment;
- anything else (never run, skipped, stale): leave the issue as it is.

Issues are found by the marker ``<!-- rocmlab-freshness lab=LAB entry=ENTRY -->`` in their body.

``--pins`` reads the ``yanked`` list of ``rocmlab releases check --json`` (or of ``verify-pins
--out``): a yanked pin opens an issue (same label) or updates it while it stays yanked; an open
pin issue whose pin is no longer reported is closed, unless the check was partial. Marker:
``<!-- rocmlab-pin entry=ENTRY package=PACKAGE -->``.
Uses the ``gh`` CLI (GH_TOKEN in CI). Needs only the standard library.
"""

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

LABEL = "freshness"
MARKER = re.compile(r"<!-- rocmlab-freshness lab=(?P<lab>\S+) entry=(?P<entry>\S+) -->")
PIN_MARKER = re.compile(r"<!-- rocmlab-pin entry=(?P<entry>\S+) package=(?P<package>\S+) -->")
FAILING = ("failing", "flaky")
PASSING = ("verified", "outdated")


def gh(*args: str, dry_run: bool = False) -> str:
    if dry_run:
        print("gh " + " ".join(args))
        return ""
    done = subprocess.run(["gh", *args], capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"gh {' '.join(args[:2])} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return done.stdout


def open_issues(dry_run: bool, marker: re.Pattern = MARKER) -> dict[tuple[str, str], int]:
    """(lab, entry) → number of the open freshness issue (with PIN_MARKER: (entry, package))."""
    text = gh("issue", "list", "--state", "open", "--label", LABEL, "--limit", "500", "--json", "number,body")
    found = {}
    for issue in json.loads(text or "[]"):
        match = marker.search(issue.get("body") or "")
        if match:
            found[tuple(match.groups())] = issue["number"]
    return found


def title(lab: str, entry: str) -> str:
    return f"freshness: {lab} fails on {entry}"


def body(lab: dict, entry: str, cell: dict) -> str:
    run = cell.get("last_run") or {}
    last_pass = cell.get("last_pass")
    failing = run.get("failing_cell") or {}
    links = run.get("links") or {}
    notebook = links.get("notebook") or ""
    if not notebook.startswith("http"):  # a path on the report job's disk means nothing in an issue
        notebook = f"{run['run_url']}#artifacts" if run.get("run_url") else ""
    lines = [
        f"<!-- rocmlab-freshness lab={lab['id']} entry={entry} -->",
        f"**{lab['id']}** (v{lab['version']}) is **{cell['verdict']}** on **{entry}**.",
        "",
        f"- latest run: {run.get('at')} ({run.get('status')}, profile {run.get('profile')}, commit `{run.get('commit') or 'unknown'}`)",
        f"- failing cell: {_failing_cell(failing, cell)}",
        f"- last pass on {entry}: "
        + (f"{last_pass['at']} (commit `{last_pass.get('commit') or 'unknown'}`)" if last_pass else "never"),
        f"- log: {links.get('log') or 'no CI run recorded'}",
        f"- executed notebook: {notebook or 'not kept'}"
        + (f" (artifact `results-{entry}`, file `{entry}/{lab['id']}.ipynb`)" if links.get("log") else ""),
        "",
        "Package versions changed since the last pass:",
        "",
    ]
    changed = cell.get("changed_since_pass") or []
    lines += (
        [f"- {change}" for change in changed]
        if changed
        else ["- none recorded" if last_pass else "- (no pass to compare with)"]
    )
    source = failing.get("source")
    if source:
        lines += ["", "Failing cell source:", "", "```python", source.rstrip(), "```"]
    tail = run.get("traceback_tail")
    if tail:
        lines += ["", "Traceback (tail):", "", "```", tail.rstrip(), "```"]
    lines += ["", "Opened and kept up to date by the freshness workflow; closed when the pair passes again."]
    return "\n".join(lines) + "\n"


def _failing_cell(failing: dict, cell: dict) -> str:
    if failing.get("ename"):
        return f"cell {failing.get('index')}: `{failing['ename']}: {' '.join(str(failing.get('evalue', '')).split())[:300]}`"
    return cell.get("detail") or "unknown"


def route(report: dict, dry_run: bool = False) -> list[str]:
    """Open, update or close issues; returns what was done, one line per action."""
    matrix = {c["name"] for c in report["columns"] if c["kind"] != "other"}
    done = []
    gh(
        "label",
        "create",
        LABEL,
        "--color",
        "B60205",
        "--description",
        "a lab fails on a release matrix entry",
        "--force",
        dry_run=dry_run,
    )
    known = open_issues(dry_run) if not dry_run else {}
    for lab in report["labs"]:
        for entry, cell in lab["cells"].items():
            if entry not in matrix:
                continue
            number = known.get((lab["id"], entry))
            if cell["verdict"] in FAILING:
                done.append(_report_failure(lab, entry, cell, number, dry_run))
            elif number is not None and passes(cell):
                run = cell.get("last_pass") or {}
                comment = (
                    f"Passes again on {entry}: {run.get('at')}"
                    + (f" ({run['run_url']})" if run.get("run_url") else "")
                    + "."
                )
                gh("issue", "close", str(number), "--comment", comment, dry_run=dry_run)
                done.append(f"closed #{number}: {lab['id']} on {entry}")
    return done


def passes(cell: dict) -> bool:
    """Verified, or its latest run passed (on other pins or long ago: not verified, but not failing)."""
    return cell["verdict"] in PASSING or (cell.get("last_run") or {}).get("status") == "passed"


def _report_failure(lab: dict, entry: str, cell: dict, number: int | None, dry_run: bool) -> str:
    with tempfile.TemporaryDirectory() as folder:
        body_file = Path(folder) / "body.md"
        body_file.write_text(body(lab, entry, cell), encoding="utf-8")
        if number is None:
            gh(
                "issue",
                "create",
                "--title",
                title(lab["id"], entry),
                "--body-file",
                str(body_file),
                "--label",
                LABEL,
                dry_run=dry_run,
            )
            return f"opened: {lab['id']} on {entry}"
        gh("issue", "edit", str(number), "--body-file", str(body_file), dry_run=dry_run)
    run = cell.get("last_run") or {}
    comment = f"Still {cell['verdict']} in the run of {run.get('at')}: {cell.get('detail', '')[:500]}"
    if run.get("run_url"):
        comment += f" ({run['run_url']})"
    gh("issue", "comment", str(number), "--body", comment, dry_run=dry_run)
    return f"updated #{number}: {lab['id']} on {entry}"


def pin_body(pin: dict) -> str:
    return (
        f"<!-- rocmlab-pin entry={pin['entry']} package={pin['package']} -->\n"
        f"**{pin['package']}=={pin['version']}**, pinned by **{pin['entry']}** in env/matrix.toml, is yanked: "
        f"{pin.get('reason') or 'no reason given'}.\n\n"
        f"- release: {pin.get('url') or 'https://pypi.org/project/' + pin['package'] + '/'}\n"
        "- a yanked release still installs with `==`, but pip warns and the maintainers withdrew it: move the pin\n"
        "  (`rocmlab releases check --apply` proposes the newest release that fits pyproject.toml's caps)\n\n"
        "Opened and kept up to date by the release check; closed when the pin is no longer yanked.\n"
    )


def route_pins(report: dict, dry_run: bool = False) -> list[str]:
    """Open or update one issue per yanked pin; close those whose pin is fine again (complete reports only,
    entries the report lists in ``checked`` only)."""
    done = []
    gh(
        "label",
        "create",
        LABEL,
        "--color",
        "B60205",
        "--description",
        "a lab fails on a release matrix entry",
        "--force",
        dry_run=dry_run,
    )
    known = open_issues(dry_run, PIN_MARKER) if not dry_run else {}
    reported = set()
    for pin in report.get("yanked") or []:
        key = (pin["entry"], pin["package"])
        reported.add(key)
        number = known.get(key)
        with tempfile.TemporaryDirectory() as folder:
            body_file = Path(folder) / "body.md"
            body_file.write_text(pin_body(pin), encoding="utf-8")
            if number is None:
                pin_title = f"pins: {pin['package']}=={pin['version']} of {pin['entry']} is yanked"
                gh(
                    "issue",
                    "create",
                    "--title",
                    pin_title,
                    "--body-file",
                    str(body_file),
                    "--label",
                    LABEL,
                    dry_run=dry_run,
                )
                done.append(f"opened: {pin['package']}=={pin['version']} of {pin['entry']} is yanked")
                continue
            gh("issue", "edit", str(number), "--body-file", str(body_file), dry_run=dry_run)
        gh(
            "issue",
            "comment",
            str(number),
            "--body",
            f"Still yanked: {pin['package']}=={pin['version']}.",
            dry_run=dry_run,
        )
        done.append(f"updated #{number}: {pin['package']} of {pin['entry']}")
    # Only a complete report closes, and only the issues of entries whose pins it checked: the release
    # check looks at every CPU entry that is not eol, verify-pins at the current ones, and neither may
    # close what only the other one saw (an issue that opened and closed in the same run).
    checked = set(report.get("checked") or [])
    if not report.get("partial"):
        for key, number in sorted(known.items()):
            if key not in reported and key[0] in checked:
                comment = f"{key[1]} of {key[0]} is no longer a yanked pin (the pin moved, or the yank was undone)."
                gh("issue", "close", str(number), "--comment", comment, dry_run=dry_run)
                done.append(f"closed #{number}: {key[1]} of {key[0]}")
    return done


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "report", help="the JSON written by `rocmlab report --format json` (with --pins: by releases check)"
    )
    parser.add_argument(
        "--pins", action="store_true", help="route the yanked pins of a release check or verify-pins report"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the gh commands instead of running them")
    args = parser.parse_args(argv)
    try:
        with open(args.report, encoding="utf-8") as handle:
            report = json.load(handle)
    except (OSError, json.JSONDecodeError) as exc:
        print(f"{args.report}: cannot read the freshness report ({exc})", file=sys.stderr)
        return 2
    try:
        actions = route_pins(report, dry_run=args.dry_run) if args.pins else route(report, dry_run=args.dry_run)
    except RuntimeError as exc:
        print(f"routing failed: {exc}", file=sys.stderr)
        return 1
    for action in actions:
        print(action)
    print(f"{len(actions)} issue action(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
