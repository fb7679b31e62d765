"""Every code block of docs/*.md and README.md runs, so the documentation cannot rot.

What each fenced block's language means here:
    python          executed; the blocks of one file share a namespace, in order
    pycon           a doctest (`>>>` lines, shown output compared with ELLIPSIS and
                    NORMALIZE_WHITESPACE), in the same namespace as the file's python blocks
    relay, rly      relayish text: parsed (rl.parse for `def`/`type`, else rl.parse_expr) and
                    type-checked
    console         `$ relayish ...` commands run in-process through relayish.cli.main; the lines
                    after a command are its expected output (stdout and stderr as a terminal
                    shows them, compared like a doctest; `...` matches anything); a last line
                    `(exit status N)` gives the expected exit status, 0 otherwise
    sh              commands to copy: relayish commands run as above (exit status 0), the other
                    commands of README's set-up are checked for what they name
    text, ebnf      not code (grammars, output listings): nothing to run
Any other language, or none, fails: a new code block must say how it is checked.

An HTML comment on the line just before a fence annotates the block:
    <!-- docs: file NAME -->   also write the block as NAME in the directory the file's
                               console commands run in (next to a link to examples/)
    <!-- docs: skip REASON --> do not run it; only for what cannot run here (e.g. a GPU)
"""
from __future__ import annotations

import contextlib
import doctest
import io
import pathlib
import re
import shlex
import sys
import textwrap
import tomllib
from dataclasses import dataclass, field

import numpy as np
import pytest

import relayish as rl
from relayish.cli import main as cli_main

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC_FILES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]

RUNNABLE = {"python", "pycon", "relay", "rly", "console", "sh"}
NOT_CODE = {"text", "ebnf"}
DOCTEST_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE

_FENCE = re.compile(r"^(\s*)```\s*([A-Za-z0-9_+-]*)[^`]*$")
_MARK = re.compile(r"^\s*<!--\s*docs:\s*(file|skip)\s+(.*?)\s*-->\s*$")
_EXIT = re.compile(r"^\(exit status (\d+)\)$")


@dataclass
class Block:
    path: pathlib.Path
    line: int                  # 1-based line of the opening fence
    lang: str
    text: str
    marks: dict = field(default_factory=dict)

    @property
    def name(self):
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def extract_blocks(path):
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, k = [], 0
    while k < len(lines):
        m = _FENCE.match(lines[k])
        if m is None:
            k += 1
            continue
        indent, lang = m.group(1), m.group(2).lower()
        start, body = k, []
        k += 1
        while k < len(lines) and lines[k].strip() != "```":
            body.append(lines[k][len(indent):] if lines[k].startswith(indent) else lines[k])
            k += 1
        if k == len(lines):
            raise AssertionError(f"{path.name}:{start + 1}: this ``` block is never closed")
        marks = {}
        j = start - 1
        while j >= 0 and _MARK.match(lines[j]):
            kind, value = _MARK.match(lines[j]).groups()
            marks[kind] = value
            j -= 1
        blocks.append(Block(path, start + 1, lang, "\n".join(body) + "\n", marks))
        k += 1
    return blocks


BLOCKS = [b for path in DOC_FILES for b in extract_blocks(path)]


def test_the_docs_exist():
    names = {p.name for p in DOC_FILES}
    assert {"index.md", "api.md", "text-format.md", "cli.md", "tutorial.md", "README.md"} <= names


def test_no_link_outside_the_project():
    """A clone has no ../shared: the docs link only into the repository."""
    for path in DOC_FILES:
        prose = re.sub(r"```.*?```|`[^`\n]*`", "", path.read_text(encoding="utf-8"), flags=re.S)
        for target in re.findall(r"\]\(([^)#\s]+)", prose):
            if re.match(r"[a-z]+://", target):
                continue
            assert (path.parent / target).resolve().is_relative_to(ROOT), (path.name, target)
            assert (path.parent / target).exists(), f"{path.name} links {target}, which does not exist"


def test_every_public_name_is_in_the_api_reference():
    """A name added to `relayish` without a line in docs/api.md fails here."""
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    undocumented = [name for name in dir(rl) if not name.startswith("_")
                    if not re.search(rf"rl\.{name}\b|`{name}\(", text)]
    assert not undocumented, f"docs/api.md does not describe rl.{', rl.'.join(undocumented)}"
    assert "rl.__version__" in text


# ---- the per-file namespace of python and pycon blocks ---------------------------------------

class _FileState:
    def __init__(self):
        self.namespace = {"__name__": "__docs__"}
        self.done = 0                # blocks of the file run so far (in order)
        self.failed = None           # the line of a block that failed
        self.printoptions = np.get_printoptions()


_STATES: dict = {}


def _run_in_namespace(block):
    """Run the file's python/pycon blocks up to `block`, in order, once each."""
    state = _STATES.setdefault(block.path, _FileState())
    chain = [b for b in BLOCKS if b.path == block.path and b.lang in ("python", "pycon")]
    target = chain.index(block)
    while state.done <= target:
        current = chain[state.done]
        if state.failed is not None:
            pytest.fail(f"the block at line {state.failed} of {block.path.name} failed; "
                        "the later blocks share its namespace")
        state.done += 1
        if "skip" in current.marks:
            continue
        saved = np.get_printoptions()
        np.set_printoptions(**state.printoptions)     # a doc may set them; no other test sees it
        try:
            (_exec_python if current.lang == "python" else _exec_pycon)(current, state.namespace)
        except BaseException:
            state.failed = current.line
            raise
        finally:
            state.printoptions = np.get_printoptions()
            np.set_printoptions(**saved)


def _exec_python(block, namespace):
    # leading newlines make tracebacks point at the doc's own line numbers
    code = compile("\n" * block.line + block.text, str(block.path), "exec")
    exec(code, namespace)  # noqa: S102 - our own documentation


def _exec_pycon(block, namespace):
    test = doctest.DocTestParser().get_doctest(block.text, namespace, block.name, str(block.path),
                                               block.line)
    report = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=DOCTEST_FLAGS)
    runner.run(test, out=report.write, clear_globs=False)
    namespace.update(test.globs)
    if runner.failures:
        pytest.fail(f"{block.name}: doctest failed\n{report.getvalue()}", pytrace=False)


# ---- text blocks -----------------------------------------------------------------------------

def _strip_comments(text):
    return re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)


def _check_text(block):
    code = _strip_comments(block.text).lstrip()
    if re.match(r"(#\[|def\s*@|type\s)", code):
        rl.infer_type(rl.parse(block.text, filename=block.name))
    else:
        rl.infer_type(rl.parse_expr(block.text, filename=block.name))


# ---- command blocks --------------------------------------------------------------------------

@dataclass
class Command:
    line: int
    text: str
    expected: list           # output lines shown after the command (console blocks)


def _commands(block):
    lines = block.text.splitlines()
    commands = []
    for k, line in enumerate(lines):
        number = block.line + 1 + k
        if block.lang == "console":
            if line.startswith("$ "):
                commands.append(Command(number, line[2:], []))
            elif commands:
                commands[-1].expected.append(line)
            elif line.strip():
                raise AssertionError(f"{block.name}: output before the first `$ ` command")
        elif line.strip() and not line.lstrip().startswith("#"):
            commands.append(Command(number, line.strip(), []))
    if not commands:
        raise AssertionError(f"{block.name}: a {block.lang} block without a command")
    return commands


def _work_dir(path, tmp_path):
    """The directory a doc's commands run in: its `docs: file` blocks and a link to examples/."""
    (tmp_path / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    for b in BLOCKS:
        if b.path == path and "file" in b.marks:
            (tmp_path / b.marks["file"]).write_text(b.text, encoding="utf-8")
    return tmp_path


def _run_cli(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            status = cli_main(argv)
        except SystemExit as exit_:          # argparse: --help, --version, usage errors
            status = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    return status, out.getvalue()


def _check_setup_segment(words, where):
    """README's set-up commands other than relayish: check what they name exists."""
    if words[:3] == ["pip", "install", "-e"]:
        spec = words[3]
        extras = re.fullmatch(r'\.(?:\[([a-z0-9_,-]+)\])?', spec)
        assert extras, f"{where}: pip installs {spec!r}, not this project"
        declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        declared = set(declared.get("optional-dependencies", {}))
        for extra in filter(None, (extras.group(1) or "").split(",")):
            assert extra in declared, f"{where}: no extra [{extra}] in pyproject.toml"
        return
    if words[:3] == ["python", "-m", "pytest"]:
        return                            # the test run itself: nothing to check from inside it
    raise AssertionError(f"{where}: the docs test has no way to check `{' '.join(words)}`")


def _relayish_argv(words):
    if words[:1] == ["relayish"]:
        return words[1:]
    if words[:3] == ["python", "-m", "relayish"]:
        import importlib.util
        assert importlib.util.find_spec("relayish.__main__") is not None, \
            "`python -m relayish` needs relayish/__main__.py"
        return words[3:]
    return None


def _run_commands(block, tmp_path, monkeypatch):
    monkeypatch.chdir(_work_dir(block.path, tmp_path))
    monkeypatch.setenv("COLUMNS", "100")       # argparse wraps --help text at the terminal width
    for command in _commands(block):
        where = f"{block.path.name}:{command.line}"
        for segment in command.text.split("&&"):
            words = shlex.split(segment)
            argv = _relayish_argv(words)
            if argv is None:
                assert block.lang == "sh", f"{where}: a console block runs relayish commands only"
                _check_setup_segment(words, where)
                continue
            status, output = _run_cli(argv)
            expected, want_status = list(command.expected), 0
            while expected and not expected[-1].strip():
                expected.pop()
            if expected and _EXIT.match(expected[-1].strip()):
                want_status = int(_EXIT.match(expected.pop().strip()).group(1))
            assert status == want_status, (f"{where}: `{command.text}` exited with {status}, "
                                           f"the doc says {want_status}\n{output}")
            if expected:
                want = "\n".join(expected) + "\n"
                checker = doctest.OutputChecker()
                assert checker.check_output(want, output, DOCTEST_FLAGS), (
                    f"{where}: `{command.text}` printed\n{textwrap.indent(output, '    ')}"
                    f"the doc shows\n{textwrap.indent(want, '    ')}")


# ---- the test --------------------------------------------------------------------------------

@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.name}-{b.lang or 'none'}" for b in BLOCKS])
def test_doc_block(block, tmp_path, monkeypatch):
    if "skip" in block.marks:
        # only a block that cannot run on this machine may carry the mark, and it says why
        assert len(block.marks["skip"]) > 10, f"{block.name}: say why the block is skipped"
        pytest.skip(f"{block.name}: {block.marks['skip']}")
    assert block.lang in RUNNABLE | NOT_CODE, (
        f"{block.name}: a ```{block.lang} block; mark it python, pycon, relay, console, sh, "
        "or text/ebnf when it is not code")
    if block.lang in ("python", "pycon"):
        _run_in_namespace(block)
    elif block.lang in ("relay", "rly"):
        _check_text(block)
    elif block.lang in ("console", "sh"):
        _run_commands(block, tmp_path, monkeypatch)
