"""The ``sessiontree`` command line: inspect, edit, run and maintain a store.

Contract: the database comes from ``--db``, then ``SESSIONTREE_DB``, then a
default file in the user's data directory (created on first use). Listings
and write commands take ``--json``. Ids may be abbreviated to a unique prefix. User mistakes exit
non-zero with a one-line message and no traceback.
"""

from __future__ import annotations

import click

from .. import __version__
from .common import SessionTreeGroup


@click.group(cls=SessionTreeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sessiontree")
@click.option(
    "--db",
    type=click.Path(dir_okay=False),
    envvar="SESSIONTREE_DB",
    help="Database file or postgresql:// URL. Default: $SESSIONTREE_DB, else sessiontree.db in your"
    " data directory.",
)
def cli(db: str | None) -> None:
    """Agent conversations as trees in SQLite: inspect, branch, run and resume them."""


def _register() -> None:
    from . import (
        admin,
        demo,
        experiment,
        find,
        help,
        inspect,
        pointers,
        refs,
        retention,
        running,
        sql,
        transfer,
        view,
    )

    for module in (
        inspect,
        find,
        refs,
        pointers,
        running,
        experiment,
        view,
        admin,
        retention,
        transfer,
        sql,
        demo,
        help,
    ):
        for command in module.COMMANDS:
            cli.add_command(command)


_register()
