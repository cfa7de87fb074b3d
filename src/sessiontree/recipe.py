"""A run's recipe: what continuing it in another process needs, and never a secret.

Contract:
- ``Recipe`` is one frozen record: the provider kind, base URL and model (the model as
  the user spelled it: ``script:PATH``, ``PROVIDER/MODEL`` or a plain name), the request
  parameters, whether it streams, the *name* of the environment variable holding the API
  key (never the key), the approve rule (``"default"``, ``"all"``, ``"none"``, or
  ``"custom"`` for a Python function, which cannot be recorded), ``max_steps``, the
  context budget and ``keep_last``, the pauses' default deadline, the run's ``Limits``
  (as a dict) and ``parallel_tools``, a system prompt that
  replaced the branch's own (a rerun variant's), the tool set as importable references
  (a file path made absolute, ``module`` or ``module:attr``) and the sha256 of each
  tool's JSON schema (``schema_hash``: canonical JSON of ``Tool.spec()``).
- ``to_dict``/``from_dict`` are its JSON form, as stored under the key ``"recipe"`` of
  every pause and ``tool_start`` payload a run writes (never on messages: a model is
  sent those as they are). ``from_dict`` ignores keys it does not know, so a newer
  sessiontree's recipe still reads.
- ``for_run`` is the recipe a run records: the one its caller gave (the CLI gives a full
  one), else what the call object tells (``.base_url``, ``.model``, ``.params``,
  ``.stream``, ``.provider``), completed with the run's own limits and the hash of every
  tool it was actually given.
- Request parameters whose name looks like a credential (key, token, secret, password,
  authorization, headers), and a call object's parameters JSON cannot hold, are left out
  and named in ``left_out``, so a resume can say they must be given again.
- An MCP server among the tools is its launch spec (``mcp:COMMAND ARGS`` or ``mcp:URL``),
  never its environment. A spec whose words carry a credential (``--api-key VALUE``,
  ``--token=VALUE``, ``GITHUB_TOKEN=VALUE``, a URL's password or ``?token=``) is kept
  with the values as ``***`` under ``mcp-withheld:``, so that a resume asks for ``--mcp``
  again rather than launching something else (``withheld``).
- ``missing()`` names what a recipe cannot rebuild (a model call no known adapter made,
  tools no reference names), which a continuation must then be given.
- ``recorded(path)`` is the latest recipe on a path; ``near(session, node)`` also looks
  after the node, on the branches that pass through it (a rerun from a point before any
  tool ran).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from .kinds import PausePayload, ToolStartPayload

if TYPE_CHECKING:
    from .model import Node
    from .options import RunOptions
    from .session import Session
    from .tools import Tool

_SPELLED = {"script": "script:", "anthropic": "anthropic/", "openai-responses": "responses/"}
"""How ``--model`` names the model of an adapter's ``provider`` (``providers.naming``)."""
KEY = "recipe"
"""The payload key a recipe is stored under (pause and tool_start nodes)."""
APPROVE_RULES = ("default", "all", "none", "custom")
# Names of parameters that carry credentials ("max_tokens" is not one; "access_token" is).
_SECRET = re.compile(
    r"(?i)(^|_|-)(api_?key|key|token|secret|password|passwd|authorization|auth|headers?|cookies?|credentials?)$"
)


MCP = "mcp:"
"""How a recipe names an MCP server among its tools: ``mcp:`` and its launch spec."""
MCP_WITHHELD = "mcp-withheld:"
"""An MCP server whose launch spec carried a credential: the spec with its values hidden."""


def withheld(spec: str) -> tuple[str, str | None]:
    """``spec`` (an MCP server's launch spec) with every credential's value as ``***``, and
    the name of the first one found (None: nothing to hide). A credential is a word
    ``NAME=VALUE``, or an option ``--NAME`` and the word after it, whose name says so (the
    rule of request parameters: key, token, secret, password, auth, ...); a URL's password;
    a URL's query parameter of such a name."""
    try:
        words = shlex.split(spec)
    except ValueError:
        words = spec.split()
    found: str | None = None
    hidden = list(words)
    for i, word in enumerate(words):
        if word.startswith(("http://", "https://")):
            url = urlsplit(word)
            names = [k for k, _ in parse_qsl(url.query) if _SECRET.search(k)]
            if url.password or names:
                found = found or ("the URL's password" if url.password else names[0])
                netloc = f"{url.username}:***@{url.hostname}" if url.password else url.netloc
                netloc += f":{url.port}" if url.password and url.port else ""
                query = "&".join(f"{k}={'***' if _SECRET.search(k) else v}" for k, v in parse_qsl(url.query))
                hidden[i] = url._replace(netloc=netloc, query=query).geturl()
            continue
        name, eq, value = word.partition("=")
        if not _SECRET.search(name.lstrip("-")):
            continue
        if eq and value:
            found, hidden[i] = found or name, f"{name}=***"
        elif name.startswith("-") and not eq and i + 1 < len(words) and not words[i + 1].startswith("-"):
            found, hidden[i + 1] = found or name, "***"
    if found is None:
        return spec, None
    shown = (shlex.quote(w) if w == h else h for w, h in zip(words, hidden, strict=True))
    return " ".join(shown), found  # (a hidden value unquoted: it is never run, only read)


def _without_credentials(tool: str) -> str:
    if not tool.startswith(MCP):
        return tool
    spec, found = withheld(tool[len(MCP) :])
    return tool if found is None else MCP_WITHHELD + spec


def schema_hash(tool: Tool) -> str:
    """``sha256:HEX`` of the canonical JSON of ``tool.spec()`` (sorted keys, no spaces), with
    the tool's MCP annotations beside it when it has them: a server whose hints changed
    (a tool no longer read-only, say) is asked about again, as a changed schema is."""
    described: dict[str, Any] = tool.spec()
    annotations = getattr(tool, "annotations", None)
    if annotations:
        described = {**described, "annotations": annotations}
    text = json.dumps(described, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Recipe:
    """What continuing a run needs (see the module docstring)."""

    provider: str | None = None
    base_url: str | None = None
    model: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    stream: bool | None = None
    api_key_env: str | None = None
    approve: str = "default"
    max_steps: int = 20
    context_budget: int | None = None
    keep_last: int = 4
    pause_expires: float | None = None
    limits: Mapping[str, Any] | None = None
    parallel_tools: int = 4
    system: str | None = None
    tools: tuple[str, ...] = ()
    schema_hashes: Mapping[str, str] = field(default_factory=dict)
    left_out: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.approve not in APPROVE_RULES:
            raise ValueError(f"approve must be one of {', '.join(APPROVE_RULES)}, not {self.approve!r}")
        # Credential-like parameters never get into a recipe, however it was made.
        kept = {k: v for k, v in dict(self.params).items() if not _SECRET.search(k)}
        dropped = tuple(sorted(set(self.left_out) | (set(self.params) - set(kept))))
        object.__setattr__(self, "params", kept)
        object.__setattr__(self, "left_out", dropped)
        object.__setattr__(self, "tools", tuple(_without_credentials(t) for t in self.tools))
        object.__setattr__(self, "schema_hashes", dict(self.schema_hashes))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["tools"] = list(self.tools)
        data["left_out"] = list(self.left_out)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Recipe:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        if isinstance(values.get("tools"), list):
            values["tools"] = tuple(values["tools"])
        if isinstance(values.get("left_out"), list):
            values["left_out"] = tuple(values["left_out"])
        if values.get("approve") not in APPROVE_RULES:
            values["approve"] = "custom"  # unknown: the safe reading is "not a rule we can replay"
        return cls(**values)

    def replace(self, **changes: Any) -> Recipe:
        return replace(self, **changes)

    def missing(self) -> tuple[str, ...]:
        """What another process must be given besides this recipe: ``"model"`` when no
        known adapter made the call (a Python function, ``testing.ScriptedModel``),
        ``"tools"`` when the run had tools and none of them is importable by reference."""
        lacking = []
        if self.provider is None or self.model is None:
            lacking.append("model")
        if self.schema_hashes and not self.tools:
            lacking.append("tools")
        return tuple(lacking)


def for_run(given: Recipe | None, *, call: Any, tools: Mapping[str, Tool], options: RunOptions) -> Recipe:
    """The recipe a run records (see the module docstring)."""
    recipe = given
    if recipe is None:  # the library: what the call and the tools' functions tell
        references = (_reference(t) for t in tools.values())  # a server's tools share one spec
        recipe = from_call(call, options.approve).replace(
            tools=tuple(dict.fromkeys(r for r in references if r))
        )
    return recipe.replace(
        max_steps=options.max_steps,
        context_budget=options.context_budget,
        keep_last=options.keep_last,
        pause_expires=options.pause_expires,
        limits=asdict(options.limits) if options.limits is not None else None,
        parallel_tools=options.parallel_tools,
        schema_hashes={name: schema_hash(t) for name, t in sorted(tools.items())},
    )


def from_call(call: Any, approve: Any = None) -> Recipe:
    """What a model call object tells about itself (a plain function tells nothing)."""
    provider = getattr(call, "provider", None)
    model = getattr(call, "model", None)
    if isinstance(model, str) and provider in _SPELLED:
        model = _SPELLED[provider] + model  # the spelling that builds the same adapter again
    params = getattr(call, "params", None)
    params = dict(params) if isinstance(params, Mapping) else {}
    # A call object may hold what JSON cannot (a client, a timeout object): named, not kept.
    unstorable = tuple(k for k, v in params.items() if not isinstance(k, str) or not _storable(v))
    stream = getattr(call, "stream", None)
    return Recipe(
        provider=provider if isinstance(provider, str) else None,
        base_url=_text(getattr(call, "base_url", None)),
        model=model if isinstance(model, str) else None,
        params={k: v for k, v in params.items() if k not in unstorable},
        stream=stream if isinstance(stream, bool) else None,
        approve="default" if approve is None else "custom",
        left_out=tuple(str(k) for k in unstorable),
    )


def _storable(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def _reference(tool: Tool) -> str | None:
    """``module:attr`` for a tool importable as that, ``mcp:SPEC`` for an MCP server's tool
    (its launch spec), else None (``__main__``, a closure)."""
    source = getattr(tool, "source", None)
    if isinstance(source, str) and source.startswith("mcp:"):
        return source
    fn = getattr(tool, "fn", None)
    module, name = getattr(fn, "__module__", None), getattr(fn, "__name__", None)
    if not module or not name or module == "__main__":
        return None
    found = getattr(sys.modules.get(module), name, None)
    return f"{module}:{name}" if found is tool or found is fn else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def of(node: Node) -> Recipe | None:
    """The recipe recorded on ``node`` (a pause or tool_start), or None."""
    stored = PausePayload if node.kind == "pause" else ToolStartPayload if node.kind == "tool_start" else None
    data = stored.from_node(node).recipe if stored is not None else None
    return Recipe.from_dict(data) if isinstance(data, Mapping) else None


def recorded(path: Iterable[Node]) -> Recipe | None:
    """The latest recipe on ``path`` (root first), or None."""
    found = None
    for node in path:
        found = of(node) or found
    return found


def near(session: Session, node_id: str) -> Recipe | None:
    """The recipe in force at ``node_id``: the latest on its path, else the first recorded
    after it on the oldest branch through it (a run from there recorded it later)."""
    path = session.path(node_id)
    found = recorded(path)
    if found is not None:
        return found
    for branch in sorted(session.branches(), key=lambda b: b.created_at):
        later = session.path(branch.name)
        ids = [n.id for n in later]
        if node_id in ids:
            for node in later[ids.index(node_id) + 1 :]:
                if (found := of(node)) is not None:
                    return found
    return None
