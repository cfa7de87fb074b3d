"""``python -m sessiontree`` is the ``sessiontree`` command."""

from .cli import cli

if __name__ == "__main__":
    cli(prog_name="sessiontree")
