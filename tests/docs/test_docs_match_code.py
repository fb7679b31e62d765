"""The user docs against the code where a fact is written in both (issue 28: cli.md said
`minimize` defaulted to `--backend jax`, api.md said 20,000 lets where the code counts 35,000
nodes, docs/index.md left out `opt`): the option tables of docs/cli.md against the command's
argparse defaults and choices, its command list and exit statuses, and the limits and defaults
docs/api.md states."""
import argparse
import inspect
import os
import re

import pytest

import relayish as rl
from relayish import cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read(name):
    with open(os.path.join(ROOT, "docs", name), encoding="utf-8") as fh:
        return fh.read()


def subparsers():
    parser = cli._parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def option_tables():
    """{command: {option: default text or None}} from the tables under each `## relayish X`."""
    tables, command = {}, None
    for line in read("cli.md").splitlines():
        heading = re.match(r"## relayish (\w+)", line)
        if heading:
            command = heading.group(1)
            continue
        row = re.match(r"\| `(--[a-z0-9-]+)[^`]*` \|(.*)", line)
        if command and row:
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", row.group(2))][:-1]
            default = cells[1] if len(cells) > 1 else None
            tables.setdefault(command, {})[row.group(1)] = default
    return tables


def test_every_option_of_the_docs_tables_has_the_default_the_command_has():
    tables = option_tables()
    commands = subparsers()
    assert {"run", "minimize", "fmt"} <= set(tables)
    checked = 0
    for command, options in tables.items():
        actions = {s: a for a in commands[command]._actions for s in a.option_strings}
        for option, default in options.items():
            assert option in actions, f"cli.md documents {command} {option}, which it lacks"
            action = actions[option]
            if default is None or action.default in (None, False):
                continue
            shown = default.strip("`")
            assert shown == str(action.default), (command, option, default, action.default)
            checked += 1
    assert checked >= 6


def test_every_option_of_run_and_minimize_is_in_the_docs_tables():
    tables = option_tables()
    for command in ("run", "minimize"):
        documented = set(tables[command])
        for action in subparsers()[command]._actions:
            long = [s for s in action.option_strings if s.startswith("--") and s != "--help"]
            if long:
                assert long[0] in documented, f"{command} {long[0]} is not in cli.md's table"


def test_backend_choices_are_the_ones_the_docs_name():
    tables = option_tables()
    for command in ("run", "minimize"):
        action = next(a for a in subparsers()[command]._actions if "--backend" in a.option_strings)
        row = next(line for line in read("cli.md").split("## relayish " + command, 1)[1]
                   .splitlines() if line.startswith("| `--backend"))
        for choice in action.choices:
            assert f"`{choice}`" in row or f"{choice}\\|" in row or f"|{choice}" in row, \
                (command, choice, row)
        assert tables[command]["--backend"].strip("`") == action.default


def test_the_command_lists_name_every_command():
    commands = set(subparsers())
    synopsis = read("cli.md").split("```text", 1)[1].split("```", 1)[0]
    index_row = next(line for line in read("index.md").splitlines() if "[cli.md]" in line)
    for command in commands:
        assert f"relayish {command}" in synopsis, command
        assert f"`{command}`" in index_row, f"docs/index.md does not list `{command}`"
        assert f"## relayish {command}" in read("cli.md"), command


def test_the_exit_statuses_are_the_code_s():
    table = dict(re.findall(r"^\| (\d+) \| (.*) \|$", read("cli.md"), re.M))
    assert {int(k) for k in table} == {cli.EXIT_OK, cli.EXIT_ERROR, cli.EXIT_USAGE,
                                       cli.EXIT_NOT_CONVERGED, cli.EXIT_INTERRUPTED}
    assert "bad option value" in table[str(cli.EXIT_USAGE)]


def test_the_default_pipeline_and_its_size_limit_are_the_code_s():
    from relayish.ir.passes import manager
    api = read("api.md")
    pipeline = ", ".join(p.name for p in manager.DEFAULT_PASSES)
    assert f"The default pipeline is\n`{pipeline}`" in api
    limit = re.search(r"a program of more than ([\d,]+) nodes", api)
    assert limit, "api.md no longer states the size past which only dead_code runs"
    assert int(limit.group(1).replace(",", "")) == manager.FULL_PIPELINE_LIMIT


@pytest.mark.parametrize("name", ["method", "tol", "max_iter", "backend", "device"])
def test_minimize_s_documented_signature_has_its_defaults(name):
    documented = re.search(r"\*\*`rl\.optim\.minimize\((.*?)\)`\*\*", read("api.md"), re.S)
    assert documented
    shown = dict(re.findall(r"(\w+)=([^,\s)]+)", documented.group(1)))
    default = inspect.signature(rl.optim.minimize).parameters[name].default
    assert shown[name] == repr(default).replace("'", '"') or float(shown[name]) == default


def test_the_tutorial_s_gpu_error_class_is_the_code_s():
    text = read("tutorial.md")
    assert '`device="gpu"`' in text and "`rl.CompileError`" in text
    from relayish.backend.jax import devices
    assert "CompileError(" in inspect.getsource(devices.resolve_device)
