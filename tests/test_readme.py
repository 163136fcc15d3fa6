"""The README and the guides: every command they show parses, every file they name exists, and the
README's Python snippets run as written."""

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))


def _blocks(path: Path, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", path.read_text(), flags=re.S)


def _commands(path: Path) -> list[str]:
    """Shell lines of the bash blocks, continuation lines joined, comments dropped."""
    lines = []
    for block in _blocks(path, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def test_readme_is_a_short_guide():
    assert len(README.read_text().splitlines()) <= 300
    for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text()):
        assert (ROOT / link).is_file(), link


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.name)
def test_every_cli_command_shown_parses(path):
    from rehearsal_gym.cli import build_parser

    parser = build_parser()
    for line in _commands(path):
        for part in line.split("&&"):
            words = shlex.split(part)
            if words[:1] != ["rehearsal-gym"] or "..." in words:
                continue  # "..." stands for the flags of the line above
            if "--help" in words:
                continue
            parser.parse_args(words[1:])  # exits (SystemExit) on an unknown option or value


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.name)
def test_every_script_shown_exists(path):
    for line in _commands(path):
        for word in shlex.split(line):
            if word.endswith(".py") and "/" in word:
                assert (ROOT / word).is_file(), f"{path.name}: {word}"


def test_readme_python_snippets_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the training snippet writes runs/ here
    for code in _blocks(README, "python"):
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    assert (tmp_path / "runs" / "quickstart" / "result.json").is_file()
