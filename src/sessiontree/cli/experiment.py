"""Experiment commands: replay, rerun, compare, score, promote."""

from __future__ import annotations

import json
import sys
from typing import Any, Literal

import click

from .. import recipe as recipes
from ..experiments import Divergence, ReplayReport, Variant
from ..experiments import compare as compare_branches
from ..experiments import replay as replay_branch
from ..experiments import rerun as rerun_at
from ..names import shown
from ..options import RunOptions
from ..providers.script import PREFIX as SCRIPT_PREFIX
from ..scoring import promote as promote_branch
from ..scoring import score as score_branch
from . import complete
from .common import echo_json, echo_result, open_store, open_target, targets
from .inspect import diff_lines, json_option, session_json, session_option
from .params import PRICE_HELP, parse_price
from .render import one_line, table
from .running import (
    MCP_META,
    api_key_option,
    approver,
    base_url_option,
    continue_from,
    given_flags,
    given_servers,
    key_variable,
    limits_of,
    make_call,
    mcp_option,
    model_spelling,
    offered_tools,
    provider_of,
    recorded_tools,
    rerun_options,
)


@click.command()
@click.argument("branch", shell_complete=complete.refs)
@session_option
@click.option(
    "--tool-results",
    "mode",
    type=click.Choice(["recorded", "live"]),
    default="recorded",
    show_default=True,
    help="Play back the recorded tool results, or run the tools given with --tools and --mcp again.",
)
@click.option(
    "--tools",
    "tool_specs",
    multiple=True,
    help="With --tool-results live: the tools, as module, module:attribute or file.py (repeatable).",
)
@mcp_option
@click.option("--into", help="Name of the new branch (default: BRANCH-replay).")
@click.option(
    "-m",
    "--model",
    help="Replay against this model instead of the recorded replies: PROVIDER/MODEL as for run "
    "--model, or script:PATH (a file of replies). Never read from SESSIONTREE_MODEL.",
)
@base_url_option
@api_key_option
@json_option
@click.pass_context
def replay(
    ctx: click.Context,
    branch: str,
    session: str | None,
    mode: Literal["recorded", "live"],
    tool_specs: tuple[str, ...],
    into: str | None,
    model: str | None,
    base_url: str | None,
    api_key_env: str,
    as_json: bool,
) -> None:
    """Re-run BRANCH against its recording, turn by turn; exit 1 if it diverges.

    The recorded user messages are fed back as the branch had them, and each turn's
    agent run is compared with the recording's.
    """
    for flag, given in (("--tools", tool_specs), ("--mcp", ctx.meta.get(MCP_META))):
        if given and mode != "live":
            raise click.ClickException(f"{flag} only applies with --tool-results live")
    call = make_call(base_url, model, api_key_env, False, ()) if model else None
    store, s, ref = open_target(ctx, branch, session)
    tools = offered_tools(ctx, tool_specs)
    report = replay_branch(store, ref, session=s, tools=mode, implementations=tools, into=into, call=call)
    if as_json:
        echo_json(report.to_dict())
    else:
        for line in replay_lines(report):
            click.echo(line)
    if not report.matched:
        ctx.exit(1)


def replay_lines(report: ReplayReport) -> list[str]:
    """A replay report for a person: one line when it matched, else where each turn diverged."""
    head = f"replayed {report.recorded} into {report.branch}"
    turns = report.turns
    if report.matched:
        of = f" of {len(turns)} turn(s)" if len(turns) > 1 else ""
        return [f"{head}: all {report.compared} message(s){of} matched ({report.final})"]
    first = report.divergence
    assert first is not None  # a report that did not match says where
    shown_at = f"diverged at message {first.index + 1} of {report.compared}"
    if len(turns) == 1:
        return [head + ": " + shown_at, *compared_lines(first, "  ")]
    diverged = sum(not t.matched for t in turns)
    lines = [f"{head}: {diverged} of {len(turns)} turn(s) diverged, the first {shown_at}"]
    for t in turns:
        span = (
            f"message {t.first + 1}" if t.compared == 1 else f"messages {t.first + 1}-{t.first + t.compared}"
        )
        if t.final == "not replayed":
            lines.append(f"  turn {t.turn} ({span}): not replayed")
        elif t.divergence is None:
            lines.append(f"  turn {t.turn} ({span}): matched ({t.final})")
        else:
            d = t.divergence
            lines.append(f"  turn {t.turn} ({span}): diverged at message {d.index + 1} ({t.final})")
            lines += compared_lines(d, "    ")
    return lines


def compared_lines(d: Divergence, indent: str) -> list[str]:
    """What the recording had and what the replay wrote instead, cut to fit a screen."""
    return [f"{indent}expected: {one_line(d.expected, 300)}", f"{indent}actual:   {one_line(d.actual, 300)}"]


AGAIN = "again"
"""The name of rerun's one variant when none is given: the recorded model, again."""


def parse_variant(spec: str) -> tuple[str, str, dict]:
    """``NAME=MODEL[:key=value,...]``; values are JSON when they parse, else text. MODEL may
    be ``script:PATH`` (a script file, PATH without a colon)."""
    name, sep, rest = spec.partition("=")
    prefix = SCRIPT_PREFIX if rest.startswith(SCRIPT_PREFIX) else ""
    named, _, options = rest[len(prefix) :].partition(":")
    model = prefix + named if named else ""
    if not sep or not name or not model:
        raise click.BadParameter(f"{spec!r}: expected NAME=MODEL[:key=value,...]", param_hint="--variant")
    params = {}
    for item in filter(None, options.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} in {spec!r}: expected key=value", param_hint="--variant")
        try:
            params[key] = json.loads(value)
        except ValueError:
            params[key] = value
    return name, model, params


@click.command()
@click.argument("at", shell_complete=complete.refs)
@session_option
@click.option(
    "--variant",
    "variant_specs",
    multiple=True,
    help="NAME=MODEL[:key=value,...] (repeatable); MODEL is PROVIDER/MODEL as for run --model "
    "(anthropic/..., responses/..., openai/..., script:PATH); key system=... sets a system "
    "prompt, key base_url=... this variant's endpoint instead of --base-url. Default: one "
    f"variant, {AGAIN}, on the model the run at AT recorded.",
)
@click.option(
    "-n",
    "--runs",
    "repetitions",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Runs per variant.",
)
@click.option("--concurrency", default=4, show_default=True, type=click.IntRange(min=1), help="Runs at once.")
@click.option("--prefix", default="", help="Prefix for the new branch names.")
@rerun_options
@json_option
@click.pass_context
def rerun(
    ctx: click.Context,
    /,
    at: str,
    session: str | None,
    variant_specs: tuple[str, ...],
    repetitions: int,
    concurrency: int,
    prefix: str,
    base_url: str | None,
    api_key_env: str,
    tool_specs: tuple[str, ...],
    policy: str,
    max_steps: int,
    params: tuple[tuple[str, str], ...],
    as_json: bool,
    **_limits: Any,  # the budgets and --parallel-tools, read through ctx (given_flags)
) -> None:
    """Run each variant from AT (a checkpoint, branch or node) on a branch of its own.

    The base URL, parameters, tools, --approve, --max-steps, the budgets and
    --parallel-tools are those the run at AT recorded (its recipe), unless given; a flag
    given replaces its item, and says so. Each run has the budgets of its own.
    """
    for spec in variant_specs:  # a mistake in a variant is refused before the store is opened
        parse_variant(spec)
    store, s, ref = open_target(ctx, at, session)
    recorded = recipes.near(s, s.resolve(ref))
    given = given_flags(ctx)
    chosen, said = continue_from(recorded, dict(ctx.params), given)
    for line in said:
        click.echo(line, err=True)
    if not variant_specs and (chosen.model is None or "model" in chosen.missing()):
        raise click.UsageError(
            "give --variant NAME=MODEL: no run recorded at or after AT names a model to run again"
        )
    specs = variant_specs or (f"{AGAIN}={chosen.model}",)
    tools = recorded_tools(chosen, recorded=recorded is not None and "tool_specs" not in given)
    chosen = given_servers(chosen)  # the variants' runs record the servers they use
    variants: list[Variant] = []
    for spec in specs:
        name, variant_model, variant_params = parse_variant(spec)
        if name in {v.name for v in variants}:
            raise click.BadParameter(
                f"two variants are named {shown(name)}: each needs a name of its own", param_hint="--variant"
            )
        system = variant_params.pop("system", None)
        # Variants of several providers each need their own endpoint (a mock's, say).
        variant_url = variant_params.pop("base_url", None) or chosen.base_url
        pairs = tuple((k, json.dumps(v)) for k, v in chosen.params.items())
        # Never streamed: concurrent runs would interleave their tokens on one terminal.
        # The variable --api-key-env names; else the recorded one for the recorded model, and
        # for any other model its provider's usual one.
        recorded_key = chosen.api_key_env is not None and model_spelling(variant_model) == chosen.model
        given_key = True if recorded_key and "api_key_env" not in given else None
        key_env = chosen.api_key_env if given_key and chosen.api_key_env else api_key_env
        call = make_call(variant_url, variant_model, key_env, False, pairs, key_env_given=given_key)
        recipe = chosen.replace(
            provider=provider_of(call),
            api_key_env=key_variable(variant_model, key_env, given_key),
            base_url=variant_url,
            model=model_spelling(variant_model),
            params={**chosen.params, **variant_params},
            stream=False,
            system=system,
        )
        variants.append(Variant(name, call, variant_params, system, recipe))
    # Every run's options, built once. rerun has no --context-budget or --pause-expires
    # (rerun_options): its runs neither compact nor give their pauses a deadline.
    options = RunOptions(
        approve=approver(chosen.approve),
        max_steps=chosen.max_steps,
        limits=limits_of(chosen),
        parallel_tools=chosen.parallel_tools,
    )
    total = len(variants) * repetitions
    with click.progressbar(length=total, label="running", file=sys.stderr) as bar:
        results = rerun_at(
            store,
            ref,
            variants,
            repetitions,
            session=s,
            tools=tools,
            options=options,
            concurrency=concurrency,
            prefix=prefix,
            progress=lambda done, _total, _result: bar.update(1),
        )
    if as_json:
        echo_json([r.__dict__ for r in results])
        return
    for line in table(
        [[r.branch, r.variant, r.reason, one_line(r.error or "", 50)] for r in results],
        ["BRANCH", "VARIANT", "RESULT", "ERROR"],
    ):
        click.echo(line)


@click.command()
@click.argument("branches", nargs=-1, required=True, shell_complete=complete.refs)
@session_option
@click.option("--price", "prices", multiple=True, help=PRICE_HELP)
@json_option
@click.pass_context
def compare(
    ctx: click.Context, branches: tuple[str, ...], session: str | None, prices: tuple[str, ...], as_json: bool
) -> None:
    """Compare branches from their common ancestor: answers, steps, tokens, cost.

    A node id names its own session, and branch or checkpoint names are read in that
    session (else in --session, else in the latest).
    """
    price_table = dict(parse_price(p) for p in prices) or None
    store = open_store(ctx)
    s, refs = targets(store, branches, session)
    result = compare_branches(store, refs, session=s, prices=price_table)
    if as_json:
        echo_json(result.to_dict())
        return
    rows = [
        [
            b.branch,
            b.status,
            b.steps,
            b.tool_calls,
            b.usage.input_tokens,
            b.usage.output_tokens,
            f"{b.usage.latency_ms:.0f}",
            "-" if b.cost is None else f"{b.cost:.6f}",
            one_line(b.final or "", 40),
        ]
        for b in result.branches
    ]
    headers = ["BRANCH", "STATUS", "STEPS", "TOOLS", "IN", "OUT", "MS", "COST", "FINAL"]
    if any(b.usage.cache_creation_input_tokens or b.usage.cache_read_input_tokens for b in result.branches):
        headers[6:6] = ["CACHE-W", "CACHE-R"]  # only when a provider reported its cache
        for row, b in zip(rows, result.branches, strict=True):
            row[6:6] = [b.usage.cache_creation_input_tokens, b.usage.cache_read_input_tokens]
    if any(b.scores for b in result.branches):  # only when something was judged
        headers.insert(-1, "SCORE")
        for row, b in zip(rows, result.branches, strict=True):
            row.insert(-1, " ".join(f"{k}={v:g}" for k, v in b.scores.items()) or "-")
    for line in table(rows, headers):
        click.echo(line)
    if len(branches) == 2:
        click.echo()
        for line in diff_lines(store, s.diff(refs[0], refs[1]), branches[0], branches[1]):
            click.echo(line)


@click.command()
@click.argument("branch", shell_complete=complete.refs)
@click.argument("value", type=float)
@click.option("--scorer", default="human", show_default=True, help="Who or what judged it.")
@click.option("--note", help="Why: kept on the score node.")
@session_json
def score(
    ctx: click.Context,
    branch: str,
    value: float,
    scorer: str,
    note: str | None,
    session: str | None,
    as_json: bool,
) -> None:
    """Record a score for BRANCH (a score node on it; compare shows the latest per scorer).

    A scorer written in Python (a model as judge, a test suite) uses
    sessiontree.scoring.score, which also records the judge's own model call.
    """
    store, s, ref = open_target(ctx, branch, session)
    node = score_branch(store, ref, value, session=s, name=scorer, note=note)
    echo_result(as_json, node.to_dict(), f"scored {ref} {scorer}={value:g} -> {node.id}")


@click.command()
@click.argument("branch", shell_complete=complete.refs)
@click.option("--to", "into", default="main", show_default=True, help="The branch that moves.")
@click.option("--keep", help="Checkpoint name for its old head (default: TO-before-BRANCH).")
@session_json
def promote(
    ctx: click.Context, branch: str, into: str, keep: str | None, session: str | None, as_json: bool
) -> None:
    """Move main (or --to) to BRANCH's head, checkpointing the head it had, in one step."""
    store, s, ref = open_target(ctx, branch, session)
    done = promote_branch(store, ref, session=s, target=into, checkpoint=keep)
    echo_result(
        as_json,
        done.to_dict(),
        f"branch {done.branch} -> {done.to} (its old head {done.previous} is checkpoint {done.checkpoint})",
    )


COMMANDS = [replay, rerun, compare, score, promote]
