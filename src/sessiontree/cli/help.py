"""``sessiontree --help`` groups the verbs by what they act on; ``sessiontree help [COMMAND]``.

Contract: ``SECTIONS`` is the one place that says which section a verb is listed under.
Grouping changes only how the help lists the commands: every command keeps its name.
A command no section names is still listed, under "Other commands", so a new verb is
never hidden from the help.
"""

from __future__ import annotations

import click

SECTIONS: dict[str, tuple[str, ...]] = {
    "Inspect": (
        "sessions",
        "tree",
        "log",
        "show",
        "branches",
        "diff",
        "search",
        "stats",
        "usage",
        "sql",
    ),
    "Sessions and branches": (
        "append",
        "edit",
        "fork",
        "checkpoint",
        "move-branch",
        "rename-branch",
        "delete-branch",
        "delete-checkpoint",
        "archive",
        "delete",
        "trash",
        "restore",
        "empty-trash",
    ),
    "Runs and approvals": (
        "run",
        "resume",
        "pending",
        "approve",
        "reject",
        "edit-call",
        "worker",
        "rerun",
        "replay",
        "compare",
        "score",
        "promote",
        "demo",
    ),
    "Import/export": ("import", "export", "copy", "html"),
    "Serve": ("serve", "decider-token", "mcp"),
    "Maintenance": ("migrate", "verify", "backup", "prune", "retention", "search-index"),
    "Help": ("help",),
}
OTHER = "Other commands"


def format_sections(group: click.Group, ctx: click.Context, formatter: click.HelpFormatter) -> None:
    """Write the group's commands as one definition list per section (for ``format_commands``)."""
    listed: dict[str, click.Command] = {}
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is not None and not command.hidden:
            listed[name] = command
    if not listed:
        return
    named = {name for names in SECTIONS.values() for name in names}
    sections = [(title, [n for n in names if n in listed]) for title, names in SECTIONS.items()]
    sections.append((OTHER, [n for n in listed if n not in named]))
    longest = max(len(name) for name in listed)
    width = formatter.width - 6 - longest
    for title, names in sections:
        if not names:
            continue
        with formatter.section(title):  # names padded: one column for every section
            formatter.write_dl(
                [(name.ljust(longest), listed[name].get_short_help_str(width)) for name in names]
            )


@click.command("help")
@click.argument("command", required=False)
@click.pass_context
def help_(ctx: click.Context, command: str | None) -> None:
    """Show a command's help (`sessiontree help run`), or this list."""
    root = ctx.find_root()
    group = root.command
    if not command:
        click.echo(group.get_help(root))
        return
    assert isinstance(group, click.Group)
    found = group.get_command(root, command)
    if found is None:
        raise click.ClickException(f"no command {command!r}; `sessiontree --help` lists them")
    with found.make_context(command, [], parent=root, resilient_parsing=True) as sub:
        click.echo(found.get_help(sub))


COMMANDS = [help_]
