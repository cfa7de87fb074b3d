"""Options objects: ``RunOptions`` for a run and ``RetentionPolicy`` for retention, each
built once and passed down unchanged; the sync twins derived from their async entry
points with the same signature."""

from __future__ import annotations

import asyncio
import inspect
import time

import pytest

from sessiontree import (
    Conflict,
    Final,
    Limits,
    RetentionPolicy,
    RunOptions,
    Store,
    Variant,
    aresume,
    arun,
    experiments,
    loop,
    run,
    tool,
)
from sessiontree.testing import ScriptedModel, reply, tool_call

from conftest import user


@tool
def echo(text: str) -> str:
    """Say it again."""
    return text


def looping(n: int) -> ScriptedModel:
    """A model that asks for the tool ``n`` times, then answers."""
    return ScriptedModel(
        [reply(None, tool_call("echo", {"text": str(i)}, id=f"c{i}")) for i in range(n)] + [reply("done")]
    )


def final(steps) -> Final:
    return [s for s in steps if isinstance(s, Final)][-1]


# -- RunOptions -----------------------------------------------------------------


def test_a_run_given_options_goes_as_with_their_keywords(store):
    options = RunOptions(max_steps=2, parallel_tools=1, limits=Limits(repeats=5))
    by_object = store.create_session("object")
    by_object.append(user("go"))
    by_keywords = store.create_session("keywords")
    by_keywords.append(user("go"))
    one = final(run(store, by_object, call=looping(3), tools=[echo], options=options))
    other = final(
        run(
            store,
            by_keywords,
            call=looping(3),
            tools=[echo],
            max_steps=2,
            parallel_tools=1,
            limits=Limits(repeats=5),
        )
    )
    assert one.reason == other.reason == "max_steps"
    assert [n.kind for n in by_object.path()] == [n.kind for n in by_keywords.path()]
    # What the run records for continuing it is the options it was given
    recipe = [n for n in by_object.path() if n.kind == "tool_start"][-1].payload["recipe"]
    assert (recipe["max_steps"], recipe["parallel_tools"], recipe["limits"]["repeats"]) == (2, 1, 5)


def test_options_and_one_of_their_keywords_at_once_are_refused(store, session):
    session.append(user("go"))
    with pytest.raises(TypeError, match="max_steps in the options object or as keywords"):
        list(run(store, session, call=looping(0), options=RunOptions(), max_steps=3))
    assert [n.kind for n in session.path()] == ["message"]  # nothing was written


def test_run_options_are_checked_when_built():
    with pytest.raises(ValueError, match="parallel_tools must be a whole number of at least 1"):
        RunOptions(parallel_tools=0)
    with pytest.raises(ValueError, match="pause_expires must be a number of seconds"):
        RunOptions(pause_expires=-1)
    assert RunOptions(pause_expires=5).pause_expires == 5.0
    with pytest.raises(AttributeError):
        RunOptions().max_steps = 3  # type: ignore[misc]  # frozen: passed down unchanged


def test_rerun_passes_its_options_to_every_run(store, session):
    session.append(user("go"))
    results = experiments.rerun(
        store,
        session.path()[-1].id,
        [Variant("a", looping(3)), Variant("b", looping(3))],
        session=session,
        tools=[echo],
        options=RunOptions(max_steps=1),
    )
    assert [r.reason for r in results] == ["max_steps", "max_steps"]


def test_sync_twins_have_the_signature_of_their_async_entry_point():
    for twin, source in (
        (loop.run, loop.arun),
        (loop.resume, loop.aresume),
        (experiments.replay, experiments.areplay),
        (experiments.rerun, experiments.arerun),
    ):
        assert twin.__name__ == source.__name__[1:]
        assert inspect.signature(twin).parameters == inspect.signature(source).parameters
        assert not inspect.iscoroutinefunction(twin) and not inspect.isasyncgenfunction(twin)
        assert f"``{source.__name__}``" in (twin.__doc__ or "")
    assert inspect.signature(run).return_annotation == "Iterator[Step]"
    assert inspect.signature(experiments.replay).return_annotation == "ReplayReport"


def test_the_async_entry_points_take_options_too(store, session):
    session.append(user("go"))

    async def main() -> Final:
        steps = [
            s
            async for s in arun(
                store, session, call=looping(5), tools=[echo], options=RunOptions(max_steps=1)
            )
        ]
        return final(steps)

    assert asyncio.run(main()).reason == "max_steps"
    assert (
        "options" in inspect.signature(aresume).parameters
        or "kwargs" in inspect.signature(aresume).parameters
    )


# -- RetentionPolicy ----------------------------------------------------------------


def settle() -> None:
    time.sleep(0.002)  # the store's times are to the millisecond: "older than 0 s" needs one


def test_a_retention_policy_object_runs_as_its_keywords(any_store):
    idle = any_store.create_session("idle")
    idle.append(user("hello"))
    settle()
    policy = RetentionPolicy(drop_older_than=0)
    preview = any_store.retention(policy=policy)
    assert preview.dry_run and preview.trashed == [idle.id]
    assert any_store.retention(drop_older_than=0).trashed == preview.trashed
    report = any_store.retention(policy=policy, dry_run=False)
    assert report.trashed == [idle.id] and [t.session_id for t in any_store.trash()] == [idle.id]


def test_a_saved_policy_object_round_trips(any_store):
    policy = RetentionPolicy(strip_older_than=86400, strip_min_bytes=500)
    saved = any_store.save_retention_policy(policy=policy)
    assert saved == {"strip_older_than": 86400.0, "strip_min_bytes": 500.0} == any_store.retention_policy()
    assert RetentionPolicy.from_dict(saved) == policy
    assert any_store.save_retention_policy(drop_older_than=3600) == {"drop_older_than": 3600.0}


def test_a_retention_policy_is_checked_when_built(store):
    with pytest.raises(Conflict, match="strip_min_bytes must be >= 1, not 0"):
        RetentionPolicy(strip_min_bytes=0)
    with pytest.raises(Conflict, match="drop_older_than must be >= 0 seconds, not -1"):
        RetentionPolicy(drop_older_than=-1)
    with pytest.raises(Conflict, match="needs drop_older_than, strip_older_than or both"):
        store.save_retention_policy(policy=RetentionPolicy())
    with pytest.raises(TypeError, match="drop_older_than in the options object or as keywords"):
        store.retention(policy=RetentionPolicy(strip_older_than=1), drop_older_than=5)
    assert store.retention_policy() == {}


def test_the_library_exports_both(tmp_path):
    import sessiontree

    assert {"RunOptions", "RetentionPolicy"} <= set(sessiontree.__all__)
    with Store(tmp_path / "x.db") as store:
        assert store.retention(policy=RetentionPolicy()).trashed == []


def test_rerun_refuses_a_bad_option_before_forking_anything(store, session):
    start = session.append(user("go"))
    with pytest.raises(ValueError, match="parallel_tools must be a whole number of at least 1, got 0"):
        experiments.rerun(store, start.id, [Variant("a", looping(0))], session=session, parallel_tools=0)
    assert [b.name for b in session.branches()] == ["main"]  # before: branch "a" was forked and left
