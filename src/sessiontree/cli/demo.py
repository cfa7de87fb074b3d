"""``sessiontree demo``: the whole idea in one offline run, on scripted models.

A scripted agent checks the weather, pauses before a risky ``send_email``, a
human approves, the run resumes and finishes; then a checkpoint taken before
the email is forked and re-run with another scripted model, and the tree is
drawn; the last line says how to open it in a browser. Nothing leaves the machine.
"""

from __future__ import annotations

import click

from ..loop import aresume, arun, decide
from ..steps import Approve
from ..store import Store
from ..testing import ScriptedModel, reply, tool_call
from ..tools import tool
from .common import abbreviations, command, open_store
from .render import tree_lines
from .stepview import print_steps


@tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    return f"Sunny in {city}, 21C, light wind"


@tool(idempotent=False)  # not safe to repeat, so it requires approval: the run pauses
def send_email(to: str, subject: str, body: str) -> str:
    """Send an email. Not safe to repeat: a human approves each one."""
    return f"email to {to} queued: {subject!r}"


TOOLS = [get_weather, send_email]


def heading(text: str) -> None:
    click.echo()
    click.secho(f"== {text}", bold=True)


def run_demo(store: Store) -> None:
    click.echo(f"database: {store.path}")
    session = store.create_session("demo: weather report")
    question = "What's the weather in Paris? Email the forecast to bob@example.com."
    session.append({"role": "system", "content": "You are a careful assistant with tools."})
    session.append({"role": "user", "content": question})
    click.echo(f"session {session.id}")
    click.echo(f"user: {question}")

    heading("1. run: the agent checks the weather, then wants to send an email")
    first = ScriptedModel(
        [
            reply(None, tool_call("get_weather", {"city": "Paris"}, id="call_weather")),
            reply(
                "Paris is sunny. I'll email Bob.",
                tool_call(
                    "send_email",
                    {"to": "bob@example.com", "subject": "Paris forecast", "body": "Sunny, 21C, light wind."},
                    id="call_email",
                ),
            ),
        ],
        model="scripted-a",
    )
    # No "decide with"/"then resume" lines: the demo does both itself, below.
    final = print_steps(arun(store, session, call=first, tools=TOOLS), hints=False)
    assert final is not None and final.node is not None
    pause_id = final.node.id
    weather_answer = [n for n in session.path("main") if n.payload.get("role") == "tool"][0]
    session.checkpoint("weather-known", at=weather_answer)
    click.echo(f"checkpoint weather-known -> {weather_answer.id}")

    heading("2. a human approves (from any process, any time later)")
    pending = [p.id for p in store.pending()]
    click.echo(f"pending pauses: {len(pending)}")
    decide(store, pause_id, {"call_email": Approve()}, by="demo-operator")
    click.echo("approved call_email")

    heading("3. resume: the email goes out and the agent finishes")
    print_steps(
        aresume(
            store,
            pause_id,
            call=ScriptedModel(["Done: Bob has the Paris forecast (sunny, 21C)."], model="scripted-a"),
            tools=TOOLS,
        )
    )

    heading("4. fork the checkpoint and re-run with another model")
    session.fork("experiment", at="weather-known")
    second = ScriptedModel(
        ["Paris: sunny, 21C. I drafted the email but did not send it."], model="scripted-b"
    )
    print_steps(arun(store, session, "experiment", call=second, tools=TOOLS))

    heading("5. the tree")
    nodes = session.tree()
    for line in tree_lines(
        nodes,
        session.branches(),
        session.checkpoints(),
        {p.id for p in session.pending()},
        abbreviations(store, [n.id for n in nodes]),
    ):
        click.echo(line)
    click.echo()
    short = abbreviations(store, [session.id])[session.id]
    ctx = click.get_current_context(silent=True)  # the hints carry its --db
    explore = (
        ("tree", short),
        ("log", "experiment", "-s", short),
        ("diff", "main", "experiment", "-s", short),
    )
    click.echo("explore: " + "   ".join(command(ctx, *words) for words in explore))
    click.echo(
        f"see it in a browser: {command(ctx, 'html', short, '-o', 'demo.html')}"
        f"   (or: {command(ctx, 'serve')})"
    )


@click.command()
@click.pass_context
def demo(ctx: click.Context) -> None:
    """An offline tour: pause before a risky tool, approve, resume, fork a checkpoint, rerun."""
    run_demo(open_store(ctx, write=True))


COMMANDS = [demo]
