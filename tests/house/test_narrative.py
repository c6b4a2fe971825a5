"""The repository speaks of the software only, and points nowhere outside itself.

Every tracked text file is checked against :data:`RULES`: numbered work sessions and the run
labels made from them, work-item numbers, people's roles, a specification or data folder outside
the checkout. A pattern that is a real technical term in one file is allowed there, and only
there, by :data:`ALLOW` (each entry says why). A second test checks that no relative link and no
absolute path in a tracked file leads outside the checkout.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: rule name -> pattern (matched case-insensitively unless the pattern says otherwise)
RULES: dict[str, str] = {
    "numbered session": r"\bsessions? \d+|\bsession \d+'s\b",
    "run label in a file name": r"\b[\w-]+-s\d{1,2}(?:-[\w-]+)?\.(?:md|json|png|svg|csv)\b",
    "work-item number": r"\bissues? #?\d+\b|\btasks? \d+\b|\bitems? #\d+\b",
    "bare #number": r"(?<![\w/&#])#\d{2,3}\b",
    "a person's role": r"\bengineer [A-Z]\b|\b(?:other|another|five|seven) engineer|\bengineers['’]|\bhelper [A-Z]\b",
    "the owner": r"\bthe owner\b",
    "specification outside the repository": r"SPEC §|SPEC\.md",
    "path outside the repository": r"\.\./shared\b|\bshared/ENVIRONMENT\.md|/work/",
    "work-tree narration": r"untracked modules|lead-demo",
}

#: (rule, file, text the matching line contains) -> why it is allowed there
ALLOW: dict[tuple[str, str, str], str] = {
    # the corpus writer lock's record of who holds it is called its owner
    ("the owner", "storage/lock.py", ""): "the lock owner record (storage.lock.LockOwner)",
    ("the owner", "tests/ops/test_ops_concurrent.py", "the owner it names"): "the lock owner record",
    # a sentence of the demo text used as input
    ("the owner", "tests/embed/test_embed_real_server.py", "owner of the slipper"): "input text (Cinderella)",
    # the evaluation data's default location: ARBORAG_DATA_DIR / --data-dir override it
    ("path outside the repository", "arborag/cli/evaluate.py", "../shared/data"): "the --data-dir default, stated in its help",
    ("path outside the repository", "tasks/evaluation/datasets.py", "../shared/data"): "the data-dir default it implements",
    ("path outside the repository", "tests/conftest.py", "shared"): "the data-dir default the shared_data tests read",
    ("path outside the repository", "pyproject.toml", "../shared/data"): "the shared_data marker's description",
    ("path outside the repository", "docs/EVALUATION.md", "../shared/data"): "the --data-dir default, documented",
}

#: Rewritten by the benchmark reports' own cleanup; the exclusion is removed when that lands.
EXCLUDED: tuple[str, ...] = ()
#: This file: its rules and examples spell out what they catch.
SELF = "tests/house/test_narrative.py"


def _tracked_text_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    files = []
    for name in out.decode("utf-8").split("\0"):
        if not name or name.startswith(EXCLUDED) or name == SELF or not (REPO / name).is_file():
            continue
        data = (REPO / name).read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary (images)
        files.append(name)
    return files


def _allowed(rule: str, name: str, line: str) -> bool:
    return any(r == rule and f == name and text in line for (r, f, text) in ALLOW)


def _findings(name: str, text: str) -> list[str]:
    found = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for rule, pattern in RULES.items():
            for m in re.finditer(pattern, line, re.I if rule not in ("a person's role",) else 0):
                if not _allowed(rule, name, line):
                    found.append(f"{name}:{lineno}: {rule}: {m.group(0)!r}")
    return found


def test_the_rules_catch_what_they_name() -> None:
    examples = {
        "numbered session": "measured in session 21 on the VM",
        "run label in a file name": "see soak-s14.md for the run",
        "work-item number": "the default until issue 25",
        "bare #number": "fixed in #48",
        "a person's role": "another engineer's test run was finishing",
        "the owner": "a choice left to the owner",
        "specification outside the repository": "as SPEC §6 says",
        "path outside the repository": "see ../shared/SPEC.md",
        "work-tree narration": "(plus untracked modules in the work tree)",
    }
    assert set(examples) == set(RULES)
    for rule, sample in examples.items():
        assert _findings("x.md", sample), f"{rule} does not catch {sample!r}"
    # technical text that must pass
    for ok in ("an s3:// corpus", "UAX#29 word breaks", "color:#444444", "lmcinnes/umap#1277",
               "a civil engineer built it", "docs/METHODS.md §6.4", "pytest's session fixture"):
        assert not _findings("x.md", ok), ok


def test_tracked_files_speak_of_the_software_only() -> None:
    found = []
    for name in _tracked_text_files():
        found += _findings(name, (REPO / name).read_text(encoding="utf-8", errors="replace"))
    assert not found, "text about how the repository was made, or pointing outside it:\n" + "\n".join(found)


def test_tracked_file_names_carry_no_run_labels() -> None:
    bad = [n for n in _tracked_text_files() if re.search(r"[-_]s(?!3(?!\d))\d{1,2}(?=[-_.])", Path(n).name)]
    assert not bad, f"file names with run labels: {bad}"


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_no_link_leads_outside_the_checkout() -> None:
    outside = []
    for name in _tracked_text_files():
        if not name.endswith(".md"):
            continue
        page = REPO / name
        for link in _LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"^[a-z][a-z0-9+.-]*:", link) or link.startswith("#"):
                continue  # a URL or an anchor on the page
            target = (page.parent / link.split("#", 1)[0]).resolve()
            if not target.is_relative_to(REPO):
                outside.append(f"{name}: {link}")
    assert not outside, f"links outside the checkout: {outside}"
