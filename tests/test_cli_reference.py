"""docs/cli.md is generated from the commands; this fails when the two drift apart."""

from pathlib import Path

from sessiontree.cli import cli
from sessiontree.cli.reference import markdown

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def test_cli_reference_is_up_to_date():
    assert DOC.read_text() == markdown(), (
        "docs/cli.md is stale: run `python -m sessiontree.cli.reference > docs/cli.md`"
    )


def test_every_command_is_documented_with_help():
    text = DOC.read_text()
    for name, command in cli.commands.items():
        assert f"## sessiontree {name}\n" in text
        assert command.help, f"{name} has no help text"
