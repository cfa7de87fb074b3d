"""Commands that run the agent loop: run, resume and worker. ``make_call`` turns
``--base-url``/``--model`` into the model call (``PROVIDER/MODEL``, providers.naming);
rerun and replay use it too. ``--pause-expires``, ``--webhook`` and
``--webhook-secret-env`` (``pause_options``) give a run's pauses a deadline and a
notification; ``worker --on-expiry reject`` continues expired pauses."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import inspect
import json
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click

from .. import recipe as recipes
from ..errors import ToolsUnavailable
from ..limits import Limits
from ..loop import aresume, arun
from ..notify import Webhook
from ..options import RunOptions
from ..recipe import Recipe
from ..steps import Approve, Final, Pause, ToolCall
from ..tools import Tool, as_tools
from ..worker import DEFAULT_POLL, awork
from . import complete
from .common import import_extra, open_store, pick_session
from .params import Dollars, Duration, Seconds, parse_price
from .refs import require_branch, require_settled
from .render import one_line
from .stepview import exit_code, print_steps


def load_tools(specs: tuple[str, ...]) -> list[Tool]:
    """Tools from ``module``, ``module:attribute`` or ``path/to/file.py`` specs.

    A whole module offers its ``Tool`` objects (``@tool`` functions, and lists of them: the
    same tool found twice is one); a module with none is refused rather than offering no
    tools. ``:attribute`` may also name a plain function (or a list), which becomes a tool.
    Modules are imported with the current directory on ``sys.path``, as ``python -m`` does.
    """
    found: list[Tool | Callable[..., Any]] = []
    for spec in specs:
        target, _, attribute = spec.partition(":")
        module = _import_tools_module(target)
        if attribute and not hasattr(module, attribute):
            raise click.BadParameter(f"{target} has no attribute {attribute!r}", param_hint="--tools")
        if attribute:
            value = getattr(module, attribute)
            items = list(value) if isinstance(value, list | tuple) else [value]
            if not items or not all(isinstance(item, Tool) or inspect.isfunction(item) for item in items):
                raise click.BadParameter(
                    f"{spec} is not a tool, a function or a list of them", param_hint="--tools"
                )
            found += items
            continue
        tools = [
            item
            for value in vars(module).values()
            for item in (value if isinstance(value, list | tuple) else [value])
            if isinstance(item, Tool)
        ]
        if not tools:
            raise click.BadParameter(
                f"{target} has no tools: mark its functions with @tool (from sessiontree import tool),"
                f" or name one as {target}:FUNCTION",
                param_hint="--tools",
            )
        found += tools
    try:
        return list(as_tools(found).values())
    except ValueError as e:  # two different tools of one name
        raise click.BadParameter(str(e), param_hint="--tools") from None


def _import_tools_module(target: str) -> Any:
    try:
        if target.endswith(".py"):
            module_spec = importlib.util.spec_from_file_location(Path(target).stem, target)
            if module_spec is None or module_spec.loader is None:
                raise ImportError(f"cannot load {target}")
            module = importlib.util.module_from_spec(module_spec)
            # Its own directory on the path while it runs, as `python FILE` has: a tools
            # file importing a module beside it loads from any directory.
            with _on_path(str(Path(target).absolute().parent)):
                module_spec.loader.exec_module(module)
            return module
        with _on_path(os.getcwd()):
            return importlib.import_module(target)
    except (ImportError, OSError, SyntaxError) as e:
        raise click.BadParameter(f"cannot import {target}: {e}", param_hint="--tools") from None


@contextlib.contextmanager
def _on_path(directory: str) -> Iterator[None]:
    """``directory`` first on ``sys.path`` for a while (unless it is there already)."""
    added = directory not in sys.path and not (directory == os.getcwd() and "" in sys.path)
    if added:
        sys.path.insert(0, directory)
    try:
        yield
    finally:
        if added and directory in sys.path:
            sys.path.remove(directory)


def _found_here(target: str) -> Path | None:
    """The file of module ``target`` when it is a plain module found in the current
    directory (``mytools`` for ./mytools.py), else None (a package, or installed)."""
    if "." in target:
        return None
    with _on_path(os.getcwd()):
        try:
            module_spec = importlib.util.find_spec(target)
        except (ImportError, ValueError):
            return None
    origin = getattr(module_spec, "origin", None)
    if module_spec is None or module_spec.submodule_search_locations is not None or not origin:
        return None
    found = Path(origin)
    return found if found.suffix == ".py" and found.parent == Path.cwd() else None


APPROVE_POLICIES = ("default", "all", "none")


def approver(policy: str) -> Callable[[ToolCall], Any] | None:
    """``--approve``: None leaves the library's rule (tools marked requires_approval
    pause); ``all`` pauses every call; ``none`` runs every call."""
    if policy == "all":
        return lambda call: Pause(f"--approve all: {call.name} needs a human")
    if policy == "none":
        return lambda call: Approve()
    return None


def options(*decorators: Callable) -> Callable[[Callable], Callable]:
    """Apply option decorators in the order they are listed (= the order of --help)."""

    def apply(function: Callable) -> Callable:
        for decorator in reversed(decorators):
            function = decorator(function)
        return function

    return apply


base_url_option = click.option(
    "--base-url",
    envvar="SESSIONTREE_BASE_URL",
    help="OpenAI-compatible endpoint, e.g. http://localhost:11434/v1 (env SESSIONTREE_BASE_URL).",
)
SCRIPT_HELP = (
    "script:PATH plays PATH instead, with no server: a JSONL file of assistant messages, one "
    "reply a line; a call gets reply k+1 when k assistant messages follow the last user "
    "message in what it sends, so each user turn starts at line 1 (see docs/providers.md)."
)
model_option = click.option(
    "-m",
    "--model",
    envvar="SESSIONTREE_MODEL",
    help="Model as PROVIDER/MODEL (env SESSIONTREE_MODEL): anthropic/NAME (Messages API), "
    "responses/NAME (OpenAI Responses), openai/NAME (chat completions), each at its own "
    "endpoint unless --base-url names another, its key from ANTHROPIC_API_KEY or "
    "OPENAI_API_KEY unless --api-key-env is given; any other NAME (slashes and all) is a "
    "chat-completions model on --base-url; " + SCRIPT_HELP,
)
api_key_option = click.option(
    "--api-key-env",
    default="OPENAI_API_KEY",
    show_default=True,
    help="Environment variable holding the API key.",
)
no_stream_option = click.option(
    "--no-stream", is_flag=True, help="Wait for whole replies instead of streaming."
)
tools_option = click.option(
    "--tools",
    "tool_specs",
    multiple=True,
    help="Tools to offer: module, module:attribute or file.py (repeatable).",
)
MCP_META = "sessiontree.mcp"
MCP_SOURCE = recipes.MCP  # how a recipe names an MCP server among its tools (see recorded_tools)


def _remember_mcp(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> None:
    # Kept in ctx.meta rather than passed as a parameter: every command that runs a model
    # gets --mcp through these shared options, and reads it through offered_tools.
    ctx.meta[MCP_META] = value


mcp_option = click.option(
    "--mcp",
    "mcp_specs",
    multiple=True,
    expose_value=False,
    callback=_remember_mcp,
    metavar="'COMMAND ARGS'|URL",
    help="Also offer the tools of this MCP server (repeatable): a command run over stdio, or an "
    "http(s) URL ('bearer-env:NAME URL' sends the token in $NAME); 'untrusted:...' makes every one "
    "of its tools ask first (needs the mcp extra; see docs/mcp.md).",
)


def offered_tools(ctx: click.Context, tool_specs: tuple[str, ...]) -> list[Tool]:
    """``--tools`` and ``--mcp`` together; MCP connections close when the command ends."""
    return load_tools(tool_specs) + mcp_tools_for(ctx.meta.get(MCP_META, ()))


def mcp_tools_for(specs: Sequence[str], held: list[Any] | None = None) -> list[Tool]:
    """The tools of each ``--mcp`` server (see docs/mcp.md); the mcp extra is imported
    only when one is given. Each connection stays open until the command ends or, given
    ``held``, is added there for the caller to close (``close_held``): a worker ends a
    pause's servers once its run has ended, and one on a thread has no command at all."""
    if not specs:
        return []
    mcp_tools = import_extra("..integrations.mcp_tools", "mcp_tools", "mcp", "--mcp")
    tools: list[Tool] = []
    for spec in specs:
        try:
            connection = mcp_tools(spec)
        except ToolsUnavailable as e:
            raise click.BadParameter(str(e), param_hint="--mcp") from None
        if held is not None:
            held.append(connection)
        else:
            click.get_current_context().call_on_close(connection.close)
        tools += connection.tools
    return tools


def mcp_given() -> tuple[str, ...]:
    """The ``--mcp`` specs on this command line (none outside a command: ``serve --work``)."""
    ctx = click.get_current_context(silent=True)
    return tuple(ctx.meta.get(MCP_META, ())) if ctx is not None else ()


def given_servers(recipe: Recipe) -> Recipe:
    """``recipe`` with the MCP servers given with ``--mcp`` on this command line in place
    of those it names (none given: as it is), so that a run records the servers it used.
    A server whose spec holds a credential is said on stderr: the recipe keeps it withheld
    (``recipe.withheld``), and a later resume needs ``--mcp`` again."""
    given = mcp_given()
    if not given:
        return recipe
    for spec in given:
        if (credential := recipes.withheld(spec)[1]) is not None:
            click.echo(
                f"--mcp: the server's arguments hold a credential ({credential}), which a recipe never"
                " holds: a resume of this run needs --mcp again",
                err=True,
            )
    kept = tuple(t for t in recipe.tools if not t.startswith((MCP_SOURCE, recipes.MCP_WITHHELD)))
    return recipe.replace(tools=(*kept, *(MCP_SOURCE + spec for spec in given)))


def close_held(held: list[Any]) -> None:
    """Close the MCP connections ``mcp_tools_for`` added to ``held``, and forget them."""
    while held:
        held.pop().close()


approve_option = click.option(
    "--approve",
    "policy",
    type=click.Choice(APPROVE_POLICIES),
    default="default",
    show_default=True,
    help="Which tool calls pause for a human: default: calls to tools marked requires_approval "
    "(by default the non-idempotent ones); all: every call; none: no call.",
)
max_steps_option = click.option(
    "--max-steps", type=click.IntRange(min=0), default=20, show_default=True, help="Model calls per run."
)
params_option = click.option(
    "-o",
    "--option",
    "params",
    multiple=True,
    type=(str, str),
    help="Extra request parameter, e.g. -o temperature 0.2 (repeatable).",
)


def _check_prices(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    for spec in value:  # refused as it is parsed, before anything is opened or run
        parse_price(spec)
    return value


# A run's budgets (sessiontree.limits) and how many calls of a batch run at once. The token
# budget is --max-tokens-total: a request's max_tokens (-o max_tokens N) is another thing.
limit_options = options(
    click.option(
        "--max-tokens-total",
        type=click.IntRange(min=1),
        metavar="N",
        help="Stop the run before a model call once its model calls used N tokens in all "
        "(input, output and prompt-cache tokens; not a reply's max_tokens).",
    ),
    click.option(
        "--max-seconds",
        type=Seconds(minimum=0.001),
        metavar="S",
        help="Stop the run before a model call or a batch of tools once S seconds have passed "
        "(a running tool is not interrupted).",
    ),
    click.option(
        "--max-cost",
        type=Dollars(),
        metavar="DOLLARS",
        help="Stop the run before a model call once it cost DOLLARS, priced with --price (a model "
        "with no price stops it too).",
    ),
    click.option(
        "--price",
        "prices",
        multiple=True,
        callback=_check_prices,
        metavar="MODEL=IN,OUT[,CW,CR]",
        help="Price of MODEL for --max-cost in dollars per million input and output tokens, "
        "and optionally cache writes and reads (repeatable; by default 1.25x and 0.1x input).",
    ),
    click.option(
        "--max-repeats",
        type=click.IntRange(min=1),
        metavar="N",
        help="Stop the run before the model's same tool calls (names and arguments) would run "
        "the (N+1)th time in a row: a model stuck in a loop.",
    ),
    click.option(
        "--parallel-tools",
        type=click.IntRange(min=1),
        default=4,
        show_default=True,
        metavar="N",
        help="Calls of one batch that run at once (1: one after another; a tool marked "
        "parallel=False always runs alone).",
    ),
)
json_steps_option = click.option(
    "--json", "as_json", is_flag=True, help="Print each step as a JSON object, one per line."
)

# What a run is given besides its model: the tools, who approves, its steps, request
# parameters and budgets (the flags options_of and the recipe read).
_run_options = (tools_option, mcp_option, approve_option, max_steps_option, params_option, limit_options)
# run, resume and worker; rerun takes the same minus --model and --no-stream (variants
# name their models; reruns never stream).
model_options = options(base_url_option, model_option, api_key_option, no_stream_option, *_run_options)
rerun_options = options(base_url_option, api_key_option, *_run_options)


webhook_options = options(
    click.option(
        "--webhook",
        "webhook_url",
        metavar="URL",
        help="POST each pause to URL as JSON, signed (X-Sessiontree-Signature: sha256=HMAC of the "
        "body), after it is committed; retried, given up after 30 s, failures logged.",
    ),
    click.option(
        "--webhook-secret-env",
        default="SESSIONTREE_WEBHOOK_SECRET",
        show_default=True,
        help="Environment variable holding the webhook's signing secret.",
    ),
)
"""``--webhook`` and its secret (``make_webhook``): run, resume, worker and serve --work."""

pause_options = options(
    click.option(
        "--pause-expires",
        type=Duration(),
        help="Deadline of a pause whose tool sets none, e.g. 90s, 15m, 1h, 2d: after it the pause "
        "is 'expired' and can no longer be decided (see worker --on-expiry).",
    ),
    webhook_options,
)


def on_expiry_option(help: str) -> Callable[[Callable], Callable]:
    """``--on-expiry keep|reject`` (``awork``'s ``on_expiry``): worker and serve --work."""
    return click.option(
        "--on-expiry", type=click.Choice(["keep", "reject"]), default="keep", show_default=True, help=help
    )


def make_webhook(url: str | None, secret_env: str) -> Webhook | None:
    """``--webhook URL`` signed with the secret in ``$secret_env``, or None."""
    if url is None:
        return None
    secret = os.environ.get(secret_env)
    if not secret:
        raise click.UsageError(
            f"--webhook needs a signing secret: set ${secret_env}"
            " (or name another variable with --webhook-secret-env)"
        )
    try:
        return Webhook(url, secret)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--webhook") from None


QUIET_WAIT = 1.0
"""Seconds a command waits for its webhook deliveries before it says it is waiting."""


def finish_deliveries(hook: Webhook | None) -> None:
    """Before the command exits: let the queued deliveries end, within their deadline. A
    receiver that answers at once is waited for quietly; a slow or dead one is named on
    stderr (its host only: a webhook's URL may hold a token) with how long the wait may
    last, and Ctrl-C stops the wait, the command keeping its exit code (the pause is
    committed before any delivery starts)."""
    if hook is None or hook.wait(QUIET_WAIT):
        return
    host = urlsplit(hook.url).netloc
    click.echo(
        f"webhook: waiting for {host} to take the pause (up to {hook.deadline:g} s;"
        " Ctrl-C stops waiting, the pause is stored either way)",
        err=True,
    )
    try:
        done = hook.wait(hook.deadline + 1)
    except KeyboardInterrupt:
        click.echo("webhook: stopped waiting; the delivery was cut off", err=True)
        return
    if not done:
        click.echo("webhook: a delivery was still under way when the command ended", err=True)


# Request fields that options of their own set (or that the adapter fills in).
OWN_OPTIONS = {
    "model": "use --model",
    "stream": "use --no-stream to turn streaming off",
    "stream_options": "the adapter sets it",
    "messages": "the branch is the conversation",
    "tools": "use --tools",
    "api_key": "the key is read from the variable --api-key-env names",
    "api_key_env": "use --api-key-env",
}


def make_call(
    base_url: str | None,
    model: str | None,
    api_key_env: str,
    stream: bool,
    params: tuple[tuple[str, str], ...],
    *,
    key_env_given: bool | None = None,
) -> Any:
    """The model call ``--base-url``/``--model`` name (``PROVIDER/MODEL``, see
    providers.naming): ``script:PATH`` plays a script file (no server), ``anthropic/``,
    ``responses/`` and ``openai/`` their API (at --base-url, else the provider's own),
    a name without a provider a chat-completions model on --base-url. The key is read
    from ``key_env(model, api_key_env, key_env_given)``."""
    from ..providers import naming

    if not base_url and not model:
        raise click.UsageError(
            "give --base-url and --model (or SESSIONTREE_BASE_URL and SESSIONTREE_MODEL), "
            f"or --model {naming.SCRIPT_PREFIX}PATH to play a script file with no server"
        )
    if not model:
        raise click.UsageError("give --model (or SESSIONTREE_MODEL)")
    try:
        provider, _, named = naming.parse(model)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--model") from None
    # A script takes the request parameters of the server it stands for.
    extra = request_params(params, naming.adapter("openai" if provider == "script" else provider))
    if provider == "script":
        # A base URL (set in the environment, say) is not used: the script is the model.
        return naming.model(model, stream=stream, **extra)
    if not base_url and not named:
        raise click.UsageError(
            f"give --base-url (or SESSIONTREE_BASE_URL), or name the provider: --model openai/{model}"
            " for api.openai.com, anthropic/MODEL or responses/MODEL"
        )
    key_env = key_variable(model, api_key_env, key_env_given)
    try:
        return naming.model(
            model, base_url or None, os.environ.get(key_env), api_key_env=None, stream=stream, **extra
        )
    except ValueError as e:
        if "API key" in str(e):  # a control character: the message names it, never quotes it
            raise click.ClickException(f"${key_env}: {e}") from None
        raise click.BadParameter(str(e), param_hint="-o") from None


def key_variable(model: str | None, api_key_env: str, given: bool | None = None) -> str:
    """The variable a model's key is read from: ``api_key_env`` when it was ``given`` (None:
    when --api-key-env was on this command line), else the provider's usual one."""
    from ..providers import naming

    if given is None:  # --api-key-env left at its default means the provider's usual variable
        context = click.get_current_context(silent=True)
        given = context is not None and context.get_parameter_source("api_key_env") not in (
            None,
            click.core.ParameterSource.DEFAULT,
        )
    if given:
        return api_key_env
    try:
        provider = naming.parse(model or "")[0]
    except ValueError:
        return api_key_env
    return naming.KEY_ENVS.get(provider, api_key_env)


# -- recipes: what a run records, and how resume/worker continue from it ----------

RECIPE_FLAGS: dict[str, tuple[str, str]] = {
    # click parameter -> (Recipe field, the flag as a user types it)
    "base_url": ("base_url", "--base-url"),
    "model": ("model", "--model"),
    "api_key_env": ("api_key_env", "--api-key-env"),
    "no_stream": ("stream", "--no-stream"),
    "tool_specs": ("tools", "--tools"),
    "policy": ("approve", "--approve"),
    "max_steps": ("max_steps", "--max-steps"),
    "params": ("params", "-o"),
    "pause_expires": ("pause_expires", "--pause-expires"),
    "context_budget": ("context_budget", "--context-budget"),
    "keep_last": ("keep_last", "--keep-last"),
    "parallel_tools": ("parallel_tools", "--parallel-tools"),
    # each sets one item of the recipe's limits (a dict: sessiontree.Limits's fields)
    "max_tokens_total": ("limits.tokens", "--max-tokens-total"),
    "max_seconds": ("limits.seconds", "--max-seconds"),
    "max_cost": ("limits.cost", "--max-cost"),
    "prices": ("limits.prices", "--price"),
    "max_repeats": ("limits.repeats", "--max-repeats"),
}
"""The flags of run/resume/worker/rerun that set an item of the recipe (``limits.X``: the
item X of its limits)."""
LIMITS = "limits."
_FILLED = ("base_url", "model", "stream")
"""Fields a recipe may lack (a library run records what its call told): the flags' value
(or environment default) fills them. Elsewhere None means "none" (no budget, no deadline)."""


def tool_references(specs: tuple[str, ...]) -> tuple[str, ...]:
    """``--tools`` specs as a recipe records them: a file path made absolute, a module found
    in the current directory as its file (so a resume in another directory finds it), any
    other module as given."""
    found = []
    for spec in specs:
        target, sep, attribute = spec.partition(":")
        if target.endswith(".py"):
            target = str(Path(target).absolute())
        elif (here := _found_here(target)) is not None:
            target = str(here)
        found.append(target + sep + attribute)
    return tuple(found)


def model_spelling(model: str | None) -> str | None:
    """``--model`` as a recipe records it: as given, a script's path made absolute."""
    from ..providers.script import PREFIX

    if model and model.startswith(PREFIX) and model[len(PREFIX) :]:
        return PREFIX + str(Path(model[len(PREFIX) :]).absolute())
    return model


def flag_values(values: dict[str, Any]) -> dict[str, Any]:
    """The recipe items the flags in ``values`` (click parameter -> value) stand for."""
    from ..providers import openai_compatible

    converted = {
        "base_url": lambda v: v,
        "model": model_spelling,
        "api_key_env": lambda v: v,
        "no_stream": lambda v: not v,
        "tool_specs": tool_references,
        "policy": lambda v: v,
        "max_steps": lambda v: v,
        "params": lambda v: request_params(v, openai_compatible),
        "pause_expires": lambda v: v,
        "context_budget": lambda v: v,
        "keep_last": lambda v: v,
        "parallel_tools": lambda v: v,
        "max_tokens_total": lambda v: v,
        "max_seconds": lambda v: v,
        "max_cost": lambda v: v,
        "prices": lambda v: dict(parse_price(p) for p in v) or None,
        "max_repeats": lambda v: v,
    }
    return {RECIPE_FLAGS[k][0]: converted[k](v) for k, v in values.items() if k in RECIPE_FLAGS}


def _item(recipe: Recipe, name: str) -> Any:
    """The recipe's value of ``name``: a field, or ``limits.X``, an item of its limits."""
    if name.startswith(LIMITS):
        return (recipe.limits or {}).get(name[len(LIMITS) :])
    return getattr(recipe, name)


def _fold_limits(items: dict[str, Any], recorded: Any = None) -> dict[str, Any]:
    """``items`` with its ``limits.X`` entries put into one ``limits`` dict, over the
    ``recorded`` one: the form ``Limits`` takes, checked (--max-cost needs --price)."""
    parts = {k[len(LIMITS) :]: items.pop(k) for k in list(items) if k.startswith(LIMITS)}
    if not parts:
        return items
    merged = {k: v for k, v in {**(recorded or {}), **parts}.items() if v is not None}
    if merged.get("cost") is not None and not merged.get("prices"):
        raise click.UsageError(
            "--max-cost needs the price of the model: --price MODEL=INPUT,OUTPUT (dollars per million tokens)"
        )
    items["limits"] = asdict(Limits(**merged)) if merged else None
    return items


def limits_of(recipe: Recipe) -> Limits | None:
    """The ``Limits`` a recipe records (None: no budget); a recording that is not one is
    refused in one line."""
    if not recipe.limits:
        return None
    try:
        return Limits(**recipe.limits)
    except (TypeError, ValueError) as e:
        raise click.ClickException(f"the recorded limits cannot be used: {e}") from None


def recipe_from_flags(values: dict[str, Any], call: Any = None, system: str | None = None) -> Recipe:
    """The recipe of a run the flags in ``values`` describe (``run``, ``rerun``)."""
    items = _fold_limits(flag_values(values))
    script = isinstance(items.get("model"), str) and items["model"].startswith("script:")
    if script:
        items["base_url"] = None  # a script needs no server: a base URL set in the environment is not used
    if "api_key_env" in items:  # the variable the key was read from (the provider's usual, by default)
        items["api_key_env"] = key_variable(items.get("model"), items["api_key_env"])
    return Recipe(provider=provider_of(call), system=system, **items)


def provider_of(call: Any) -> str | None:
    """The provider kind of a call ``make_call`` built: the adapter's ``provider``, else its
    module's name (any call it builds can be built again from the model's spelling)."""
    if call is None:
        return None
    return getattr(call, "provider", None) or type(call).__module__.rsplit(".", 1)[-1]


def continue_from(
    recorded: Recipe | None, defaults: dict[str, Any], given: dict[str, Any]
) -> tuple[Recipe, list[str]]:
    """The recipe a continued run uses: ``recorded`` with each flag ``given`` on the command
    line in place of its item, and what to say about that on stderr. ``defaults`` (every
    flag's value, given or not) fill what the recording lacks; without a recording they are
    the recipe, as before recipes were recorded."""
    if recorded is None:
        return recipe_from_flags({**defaults, **given}), []
    said = []
    fallback = flag_values(defaults)
    changes = {k: v for k, v in fallback.items() if k in _FILLED and getattr(recorded, k) is None}
    for name, value in flag_values(given).items():
        before = _item(recorded, name)
        changes[name] = value
        if value != before:
            flag = next(k for k, (field, _) in RECIPE_FLAGS.items() if field == name)
            said.append(
                f"using {_as_flag(flag, given[flag])} instead of the recorded {_as_recorded(name, before)}"
            )
    if "params" not in changes and recorded.left_out:
        said.append(
            f"the recorded run had -o {', -o '.join(recorded.left_out)}, which a recipe never holds"
            " (a credential, by its name): give it again with -o"
        )
    if recorded.approve == "custom" and "approve" not in changes:
        changes["approve"] = "all"
        said.append(
            "the recorded run's approver was a Python function, which a recipe cannot hold:"
            " every call pauses for a human (give --approve to choose)"
        )
    return recorded.replace(**_fold_limits(changes, recorded.limits)), said


def _as_flag(flag: str, value: Any) -> str:
    label = RECIPE_FLAGS[flag][1]
    if flag == "no_stream":
        return label
    if flag == "params":
        return " ".join(f"-o {k} {v}" for k, v in value) or "no -o"
    if flag in ("tool_specs", "prices"):
        return " ".join(f"{label} {v}" for v in value)
    if isinstance(value, float):
        return f"{label} {value:g}"
    return f"{label} {value}"


def _as_recorded(name: str, value: Any) -> str:
    if value is None:
        return "none"
    if name == "stream":
        return "streaming" if value else "--no-stream"
    if name == "params":
        return " ".join(f"-o {k} {json.dumps(v)}" for k, v in value.items()) or "no -o"
    if name == "tools":
        return " ".join(value) or "no tools"
    if name == "limits.prices":
        return " ".join(f"--price {m}={p.get('input', 0):g},{p.get('output', 0):g}" for m, p in value.items())
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def options_of(recipe: Recipe) -> RunOptions:
    """The ``RunOptions`` of a run following ``recipe``: how ``run``, ``resume``, ``worker``
    and ``rerun`` turn their flags (folded into a recipe, over a recorded one) into the one
    options object the run is given. A recording that cannot be used is refused in one line."""
    try:
        return RunOptions(
            approve=approver(recipe.approve),
            max_steps=recipe.max_steps,
            context_budget=recipe.context_budget,
            keep_last=recipe.keep_last,
            pause_expires=recipe.pause_expires,
            limits=limits_of(recipe),
            parallel_tools=recipe.parallel_tools,
        )
    except ValueError as e:
        raise click.ClickException(f"the recorded options cannot be used: {e}") from None


def run_arguments(recipe: Recipe, *, recorded: bool, held: list[Any] | None = None) -> dict[str, Any]:
    """``arun`` keyword arguments for a run following ``recipe``: its call, tools and
    ``options`` (``options_of``), and the recipe itself, so the run records it again;
    ``recorded`` says the tools come from a recording, which a failure to load them names."""
    from ..experiments import Variant

    stream = True if recipe.stream is None else recipe.stream
    pairs = tuple((k, json.dumps(v)) for k, v in recipe.params.items())
    # A recorded variable is the one to read; none recorded: the provider's usual one.
    call = make_call(
        recipe.base_url,
        recipe.model,
        recipe.api_key_env or "OPENAI_API_KEY",
        stream,
        pairs,
        key_env_given=recipe.api_key_env is not None,
    )
    if recipe.system is not None:  # a rerun variant's system prompt, put back
        call = Variant("recorded", call, {}, recipe.system).model_call()
    tools = recorded_tools(recipe, recorded=recorded, held=held)
    recipe = given_servers(recipe)  # what this run records: the servers it was given
    return {"call": call, "tools": tools, "options": options_of(recipe), "recipe": recipe}


def run_options(recipe: Recipe, *, recorded: bool) -> dict[str, Any]:
    """``run_arguments`` with the options spelled out as ``arun``'s keywords of their names."""
    arguments = run_arguments(recipe, recorded=recorded)
    options = arguments.pop("options")
    return {**arguments, **{f.name: getattr(options, f.name) for f in fields(options)}}


def recorded_tools(recipe: Recipe, *, recorded: bool, held: list[Any] | None = None) -> list[Tool]:
    """The tools ``recipe`` names, loaded; when they come from a recording, a failure says so.

    An ``mcp:SPEC`` entry relaunches that MCP server (``--mcp`` given on this command line
    replaces the recorded servers, as ``given_servers`` records); every other entry is a
    ``--tools`` spec."""
    given = mcp_given()
    hidden = [t[len(recipes.MCP_WITHHELD) :] for t in recipe.tools if t.startswith(recipes.MCP_WITHHELD)]
    if hidden and not given:
        raise click.ClickException(
            f"the recorded MCP server {hidden[0]} was recorded without its credentials,"
            " which a recipe never holds: give --mcp again (all of the run's servers)"
        )
    servers = given or tuple(t[len(MCP_SOURCE) :] for t in recipe.tools if t.startswith(MCP_SOURCE))
    specs = tuple(t for t in recipe.tools if not t.startswith((MCP_SOURCE, recipes.MCP_WITHHELD)))
    try:
        return load_tools(specs) + mcp_tools_for(servers, held)
    except click.BadParameter as e:
        if not recorded:
            raise
        # A library error, not a click one: a worker reports it by its class for that pause.
        raise ToolsUnavailable(
            f"the recorded tools cannot be loaded: {e.message} (restore them, or give --tools)"
        ) from None


def given_flags(ctx: click.Context) -> dict[str, Any]:
    """The recipe flags typed on this command line (not defaults, not environment values)."""
    return {
        name: value
        for name, value in ctx.params.items()
        if name in RECIPE_FLAGS and ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE
    }


def request_params(params: tuple[tuple[str, str], ...], adapter: Callable[..., Any]) -> dict[str, Any]:
    """``-o KEY VALUE`` pairs as request parameters; values are JSON when they parse."""
    # The adapter's own keywords (timeout, headers, api_key, ...) are not request parameters.
    # max_tokens is one for anthropic(), which sends it: a request parameter all the same.
    settings = set(inspect.signature(adapter).parameters) - {"base_url", "model", "params", "max_tokens"}
    extra = {}
    for key, value in params:
        if key in OWN_OPTIONS or key in settings:
            why = OWN_OPTIONS.get(key, f"it is a setting of the adapter ({adapter.__name__} in Python)")
            raise click.BadParameter(f"{key!r} is not a request parameter: {why}", param_hint="-o")
        try:
            extra[key] = json.loads(value)
        except ValueError:
            extra[key] = value
    return extra


@click.command()
@click.argument("prompt", required=False)
@click.option(
    "-s",
    "--session",
    help="Continue this session (default: the latest; a new one in an empty store).",
    shell_complete=complete.sessions,
)
@click.option("--new", is_flag=True, help="Start a new session; PROMPT is its first message.")
@click.option(
    "-b",
    "--branch",
    default="main",
    show_default=True,
    help="Branch to advance (in a continued session it must exist: fork it first).",
    shell_complete=complete.refs,
)
@click.option("--system", help="System prompt (only for a new session).")
@click.option(
    "--context-budget",
    type=click.IntRange(min=1),
    help="Compact the branch (a summary written by the model stands for its older turns)"
    " before a model call whose messages would pass this many tokens.",
)
@click.option(
    "--keep-last",
    type=click.IntRange(min=0),
    default=4,
    show_default=True,
    help="Messages a compaction leaves as they are.",
)
@model_options
@pause_options
@json_steps_option
@click.pass_context
def run(
    ctx: click.Context,
    /,
    prompt: str | None,
    session: str | None,
    new: bool,
    branch: str,
    system: str | None,
    context_budget: int | None,
    keep_last: int,
    base_url: str | None,
    model: str | None,
    api_key_env: str,
    no_stream: bool,
    tool_specs: tuple[str, ...],
    policy: str,
    max_steps: int,
    params: tuple[tuple[str, str], ...],
    pause_expires: float | None,
    webhook_url: str | None,
    webhook_secret_env: str,
    as_json: bool,
    **_limits: Any,  # the budgets and --parallel-tools, read into the recipe from ctx.params
) -> None:
    """Add PROMPT (if given) to a branch and run the agent loop on an OpenAI-compatible model
    (or, with --model script:PATH, on a file of replies: no server needed).

    Continues -s SESSION, else the most recently active session; --new (or an
    empty store) starts a new session. Exits 0 when the run completed, 3 when it paused
    for a human, 4 when it stopped at --max-steps or another budget (--max-tokens-total,
    --max-seconds, --max-cost, --max-repeats), 1 on an error.
    """
    if new and session:
        raise click.ClickException("give -s SESSION or --new, not both")
    call = make_call(base_url, model, api_key_env, not no_stream, params)
    tools = offered_tools(ctx, tool_specs)
    # Recorded on the run's pauses (its --mcp servers too): resume needs no flags.
    recipe = given_servers(recipe_from_flags(ctx.params, call))
    options = options_of(recipe)  # the flags' run options, the one object the run is given
    hook = make_webhook(webhook_url, webhook_secret_env)
    store = open_store(ctx, write=True)
    new = new or (not session and not store.sessions())
    if new:
        if not prompt:
            raise click.ClickException("give a PROMPT to start a new session")
        s = store.create_session(one_line(prompt, 60))
        if system:
            s.append({"role": "system", "content": system}, branch=branch)
    else:
        if system:
            raise click.ClickException("--system only applies to a new session (add --new)")
        s = pick_session(store, session, announce=False)  # named below with its branch
        require_branch(s, branch)
        if prompt:
            require_settled(s, branch)
    if prompt:
        s.append({"role": "user", "content": prompt}, branch=branch)
    click.echo(f"session {s.id} branch {branch}", err=True)
    final = print_steps(
        arun(
            store,
            s,
            branch,
            call=call,
            tools=tools,
            on_pause=hook,
            recipe=recipe,
            options=options,
        ),
        as_json,
        lambda final: {"session": s.id, "branch": branch},
    )
    finish_deliveries(hook)
    ctx.exit(exit_code(final))


budget_options = options(
    click.option(
        "--context-budget",
        type=click.IntRange(min=1),
        help="Compact the branch (a summary written by the model stands for its older turns)"
        " before a model call whose messages would pass this many tokens.",
    ),
    click.option(
        "--keep-last",
        type=click.IntRange(min=0),
        default=4,
        show_default=True,
        help="Messages a compaction leaves as they are.",
    ),
)
accept_changed_option = click.option(
    "--accept-changed-tools",
    "accept_changed",
    is_flag=True,
    help="Run a decided call even if its tool's JSON schema changed since the pause (by default "
    "that is refused, and the decision stays usable).",
)
CONTINUING = (
    "With no flags it continues as the run was recorded (model, base URL, parameters, tools, "
    "--approve, --max-steps, context budget, the budgets and --parallel-tools; the key is read "
    "from the variable the run named); "
    "a flag given replaces its item, and says so on stderr."
)


@click.command(
    help="Continue the branch of a decided PAUSE.\n\n" + CONTINUING + "\n\n"
    "Exits as `run` does: 0 completed, 3 paused again, 4 stopped at --max-steps or another "
    "budget, 1 error."
)
@click.argument("pause", shell_complete=complete.resumable)
@model_options
@budget_options
@pause_options
@accept_changed_option
@json_steps_option
@click.pass_context
def resume(
    ctx: click.Context,
    /,
    pause: str,
    webhook_url: str | None,
    webhook_secret_env: str,
    accept_changed: bool,
    as_json: bool,
    **_flags: Any,  # the recipe's flags, read through ctx (given_flags)
) -> None:
    hook = make_webhook(webhook_url, webhook_secret_env)
    store = open_store(ctx, write=True)
    node = store.node(pause)
    if node.kind != "pause":
        raise click.ClickException(f"node {node.id} is a {node.kind} node, not a pause")
    given = given_flags(ctx)
    recorded = recipes.of(node)
    chosen, said = continue_from(recorded, dict(ctx.params), given)
    for line in said:
        click.echo(line, err=True)
    run_with = run_arguments(chosen, recorded=recorded is not None and "tool_specs" not in given)

    def about(final: Final) -> dict[str, Any]:
        heads = [
            b.name
            for b in store.session(node.session_id).branches()
            if final.node and b.head_id == final.node.id
        ]
        return {"session": node.session_id, "branch": heads[0] if heads else None}

    final = print_steps(
        aresume(store, node.id, on_pause=hook, accept_changed_tools=accept_changed, **run_with),
        as_json,
        about,
    )
    finish_deliveries(hook)
    ctx.exit(exit_code(final))


def recipe_preparer(
    defaults: dict[str, Any], given: dict[str, Any], say: Callable[[str], None], held: list[Any]
) -> Callable[[Recipe | None], dict[str, Any]]:
    """``awork``'s ``prepare``: each pause's run options from its own recipe, with the flags
    ``given`` in place of their items; each thing to say is said once. The MCP servers a
    pause's run needs are launched for it and kept in ``held``: the next pause's prepare
    closes them (``awork`` runs one pause at a time), the caller closes the last."""
    said: set[str] = set()

    def prepare(recorded: Recipe | None) -> dict[str, Any]:
        close_held(held)  # the previous pause's run has ended: so have its servers
        chosen, lines = continue_from(recorded, defaults, given)
        for line in lines:
            if line not in said:
                said.add(line)
                say(line)
        return run_arguments(chosen, recorded=recorded is not None and "tool_specs" not in given, held=held)

    return prepare


def worker_defaults() -> dict[str, Any]:
    """What a worker with no flags (``serve --work``) falls back to where a pause records no
    recipe: the flags' defaults, and the environment's model and base URL."""
    return {
        **WORKER_DEFAULTS,
        "base_url": os.environ.get("SESSIONTREE_BASE_URL"),
        "model": os.environ.get("SESSIONTREE_MODEL"),
    }


WORKER_DEFAULTS: dict[str, Any] = {
    "base_url": None,
    "model": None,
    "api_key_env": "OPENAI_API_KEY",
    "no_stream": False,
    "tool_specs": (),
    "policy": "default",
    "max_steps": 20,
    "params": (),
    "pause_expires": None,
    "context_budget": None,
    "keep_last": 4,
    "parallel_tools": 4,
    "max_tokens_total": None,
    "max_seconds": None,
    "max_cost": None,
    "prices": (),
    "max_repeats": None,
}
"""The defaults of the recipe's flags (``worker_defaults`` adds the environment's)."""


@click.command()
@model_options
@budget_options
@pause_options
@accept_changed_option
@on_expiry_option(
    "What becomes of a pause past its deadline: keep: it stays 'expired' for a human to see; "
    "reject: the worker continues it as a rejection by the system (by: system, reason: expired)."
)
@click.option(
    "--poll",
    type=Seconds(minimum=0.05),
    default=DEFAULT_POLL,
    show_default=True,
    help="Seconds between looks for new decisions, at least 0.05 (PostgreSQL is also woken by NOTIFY).",
)
@click.option("--until-idle", is_flag=True, help="Stop once nothing is left to carry on, instead of waiting.")
@json_steps_option
@click.pass_context
def worker(
    ctx: click.Context,
    /,
    webhook_url: str | None,
    webhook_secret_env: str,
    accept_changed: bool,
    on_expiry: str,
    poll: float,
    until_idle: bool,
    as_json: bool,
    **_flags: Any,  # the recipe's flags, read through ctx (given_flags)
) -> None:
    """Resume every decided pause, then wait for more (Ctrl-C or SIGTERM stops). Several
    workers, on any machines sharing the store, carry on each pause exactly once.

    Each pause continues as its own run was recorded (model, tools, --approve, ...); a
    flag given replaces its item for every pause, and says so on stderr. A pause that
    cannot be continued (its tools gone or changed, say) is reported and left for a human.

    A run whose process died inside a tool is carried on too: a call not safe to run
    twice becomes an 'interrupted' pause for a human (see `pending`), an idempotent one
    runs again.
    """
    given = given_flags(ctx)
    if "tool_specs" in given:  # a mistake in a flag is refused now, not at each pause
        load_tools(given["tool_specs"])
    _fold_limits(flag_values(given))  # --max-cost without --price too (pauses' prices differ)
    held: list[Any] = []
    ctx.call_on_close(lambda: close_held(held))
    prepare = recipe_preparer(dict(ctx.params), given, lambda line: click.echo(line, err=True), held)
    hook = make_webhook(webhook_url, webhook_secret_env)
    store = open_store(ctx, write=True)
    stopped_by = signal.SIGINT

    def on_term() -> None:  # a service manager's stop is a Ctrl-C
        nonlocal stopped_by
        stopped_by = signal.SIGTERM
        # As a SIGINT, so that asyncio.run takes it the way it takes Ctrl-C: the work is
        # cancelled and the loop closed before KeyboardInterrupt comes out.
        signal.raise_signal(signal.SIGINT)

    async def stoppable(steps: AsyncIterator[Any]) -> AsyncIterator[Any]:
        # SIGTERM is taken only once the loop runs, where asyncio.run also takes Ctrl-C:
        # a signal handled before would land in the loop's own set-up and leave it broken.
        # Only the main thread may set a handler (a worker started from another thread
        # keeps the process's own SIGTERM handling).
        loop = asyncio.get_running_loop()
        main = threading.current_thread() is threading.main_thread()
        if main:
            loop.add_signal_handler(signal.SIGTERM, on_term)
        try:
            async for step in steps:
                yield step
        finally:
            if main:
                loop.remove_signal_handler(signal.SIGTERM)

    try:
        print_steps(
            stoppable(
                awork(
                    store,
                    poll=poll,
                    until_idle=until_idle,
                    prepare=prepare,
                    on_pause=hook,
                    on_expiry=on_expiry,
                    accept_changed_tools=accept_changed,
                )
            ),
            as_json,
        )
        finish_deliveries(hook)
    except (KeyboardInterrupt, asyncio.CancelledError):
        # A requested stop, not a failure: one line, and the shell's code for the signal.
        # (asyncio.run turns a Ctrl-C into a cancel; one that lands while the work waits on
        # an inner timeout comes out as CancelledError rather than KeyboardInterrupt.)
        click.echo(f"worker stopped ({stopped_by.name})", err=True)
        ctx.exit(128 + stopped_by)


COMMANDS = [run, resume, worker]
