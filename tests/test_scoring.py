"""Judge and promote: score nodes, compare's scores, promote, preference pairs (both backends)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from sessiontree import Store
from sessiontree.cli import cli
from sessiontree.errors import BranchMoved, Conflict, InvalidPayload
from sessiontree.experiments import Variant, compare, rerun
from sessiontree.model import Completion
from sessiontree.scoring import Judgement, preference_pairs, promote, score, scores
from sessiontree.testing import ScriptedModel

from conftest import assistant, user


def three_variants(store: Store):
    """A session whose checkpoint ``asked`` is a user turn, rerun with three variants."""
    s = store.create_session("judge me")
    s.append({"role": "system", "content": "be brief"})
    asked = s.append(user("What is 2+2?"))
    s.checkpoint("asked", at=asked)
    s.append(assistant("main says 4"))
    variants = [
        Variant(name, ScriptedModel([assistant(text)]))
        for name, text in [("a", "four"), ("b", "4, obviously"), ("c", "5")]
    ]
    results = rerun(store, "asked", variants, session=s)
    return s, [r.branch for r in results]


def test_a_score_is_a_node_on_the_branch_that_compare_shows_and_no_model_is_sent(any_store):
    s, (a, b, c) = three_variants(any_store)
    node = score(any_store, a, 0.9, session=s, name="judge", note="right and short")
    assert node.kind == "score" and node.payload == {
        "value": 0.9,
        "scorer": "judge",
        "note": "right and short",
    }
    assert s.branch(a).head_id == node.id
    score(any_store, a, 0.7, session=s, name="judge")  # a later judgement replaces the earlier one
    score(any_store, b, 0.5, session=s)  # by a human, by default
    assert {k: v.value for k, v in scores(any_store, a, session=s).items()} == {"judge": 0.7}
    summary = {x.branch: x for x in compare(any_store, [a, b, c], session=s).branches}
    assert (
        summary[a].scores == {"judge": 0.7}
        and summary[b].scores == {"human": 0.5}
        and summary[c].scores == {}
    )
    assert summary[a].status == "completed"  # the score judges the run; it is not what the run did
    assert all(m.get("role") for m in s.messages(a))  # the score is not among what a model is sent
    assert [m["content"] for m in s.messages(a)][-1] == "four"


def test_a_scorer_function_gets_the_messages_and_its_model_call_is_the_nodes_run(any_store):
    s, (a, _, _) = three_variants(any_store)
    seen = []

    def exact(messages):
        seen.append(messages)
        answer = messages[-1]["content"]
        return Judgement(
            1.0 if answer == "four" else 0.0,
            note=f"answer {answer!r}",
            run=Completion(message={}, model="judge-model", usage={"input_tokens": 7}),
        )

    node = score(any_store, a, exact, session=s)
    assert seen[0][-1]["content"] == "four"
    assert node.payload == {"value": 1.0, "scorer": "exact", "note": "answer 'four'"}
    run = any_store.run(node.run_id)
    assert run.model == "judge-model"

    async def later(messages):
        return 0.25

    assert score(any_store, a, later, session=s).payload["value"] == 0.25


def test_bad_scores_and_paused_branches_write_nothing(any_store):
    s, (a, _, _) = three_variants(any_store)
    before = s.branch(a).head_id
    for bad in (float("nan"), float("inf"), True, "high"):
        with pytest.raises(InvalidPayload, match="finite number"):
            score(any_store, a, bad, session=s)
    with pytest.raises(InvalidPayload, match="scorer name"):
        score(any_store, a, 1.0, session=s, name=" ")
    pause = s.append(
        {"reason": "approval needed", "calls": [{"id": "c1", "name": "x", "arguments": "{}"}]},
        kind="pause",
        branch=a,
    )
    with pytest.raises(Conflict, match=f"stands at pause {pause.id}; decide it before scoring"):
        score(any_store, a, 1.0, session=s)
    assert s.branch(a).head_id == pause.id and s.node(pause.id).parent_id == before
    assert [p.id for p in s.pending()] == [pause.id]  # the pause is still in every inbox


def test_a_scorer_that_read_a_branch_another_writer_moved_writes_nothing(any_store):
    s, (a, _, _) = three_variants(any_store)

    def slow_judge(messages):
        s.append(user("one more thing"), branch=a)  # another writer, while the judge thinks
        return 1.0

    with pytest.raises(BranchMoved):
        score(any_store, a, slow_judge, session=s)
    assert s.node(s.branch(a).head_id).payload["content"] == "one more thing"


def test_promote_moves_main_and_keeps_its_old_head_in_one_step(any_store):
    s, (a, b, _) = three_variants(any_store)
    old = s.branch("main").head_id
    done = promote(any_store, b, session=s)
    assert (done.branch, done.to, done.previous, done.checkpoint) == (
        "main",
        s.branch(b).head_id,
        old,
        f"main-before-{b}",
    )
    assert s.branch("main").head_id == s.branch(b).head_id
    assert {c.name: c.node_id for c in s.checkpoints()}[f"main-before-{b}"] == old
    again = promote(any_store, a, session=s)
    assert again.checkpoint == f"main-before-{a}" and again.previous == s.branch(b).head_id
    with pytest.raises(Conflict, match="already stands at"):
        promote(any_store, a, session=s)
    with pytest.raises(Conflict, match="name another branch"):
        promote(any_store, "main", session=s)
    checkpoints = len(s.checkpoints())
    with pytest.raises(Conflict):  # a taken checkpoint name: nothing moves
        promote(any_store, b, session=s, checkpoint="asked")
    assert s.branch("main").head_id == s.branch(a).head_id and len(s.checkpoints()) == checkpoints


def test_preference_pairs_from_scored_siblings_that_share_a_prompt(any_store):
    s, (a, b, c) = three_variants(any_store)
    score(any_store, a, 1.0, session=s, name="judge")
    score(any_store, b, 0.5, session=s, name="judge")
    score(any_store, c, 0.0, session=s, name="judge")
    score(any_store, b, 0.5, session=s, name="other")  # one branch by this scorer: no pair
    pairs = list(preference_pairs(s))
    assert [(p.chosen_branch, p.rejected_branch) for p in pairs] == [(a, b), (a, c), (b, c)]
    first = pairs[0]
    assert first.prompt == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "What is 2+2?"},
    ]
    assert first.chosen == [{"role": "assistant", "content": "four"}]
    assert first.rejected == [{"role": "assistant", "content": "4, obviously"}]
    assert (first.scorer, first.chosen_score, first.rejected_score) == ("judge", 1.0, 0.5)


def test_cli_score_compare_promote(tmp_path):
    db = str(tmp_path / "cli.db")
    with Store(db) as store:
        s, (a, b, c) = three_variants(store)
        sid = s.id
    runner = CliRunner()

    def run(*args):
        result = runner.invoke(cli, ["--db", db, *args], catch_exceptions=False)
        return result

    out = run("score", a, "0.9", "--scorer", "judge", "--note", "best", "-s", sid)
    assert out.exit_code == 0, out.output
    assert out.output.startswith(f"scored {a} judge=0.9 -> ")
    out = run("score", b, "0.2", "-s", sid, "--json")
    assert json.loads(out.output)["payload"] == {"value": 0.2, "scorer": "human", "note": None}
    out = run("compare", a, b, "-s", sid)
    header = out.output.splitlines()[0].split()
    assert header == ["BRANCH", "STATUS", "STEPS", "TOOLS", "IN", "OUT", "MS", "COST", "SCORE", "FINAL"]
    assert "judge=0.9" in out.output.splitlines()[1] and "human=0.2" in out.output.splitlines()[2]
    out = run("compare", a, b, "-s", sid, "--json")
    assert [x["scores"] for x in json.loads(out.output)["branches"]] == [{"judge": 0.9}, {"human": 0.2}]
    out = run("score", a, "nan", "-s", sid)
    assert out.exit_code != 0 and "finite number" in out.output
    out = run("promote", a, "-s", sid)
    assert out.exit_code == 0, out.output
    with Store(db) as store:
        s = store.session(sid)
        head, kept = s.branch("main").head_id, {c.name: c.node_id for c in s.checkpoints()}
    assert (
        out.output
        == f"branch main -> {head} (its old head {kept[f'main-before-{a}']} is checkpoint main-before-{a})\n"
    )


def test_log_and_show_say_what_a_score_is(tmp_path):
    db = str(tmp_path / "log.db")
    with Store(db) as store:
        s, (a, _, _) = three_variants(store)
        score(store, a, 0.75, session=s, name="judge", note="fine")
    out = CliRunner().invoke(cli, ["--db", db, "log", a, "-s", s.id], catch_exceptions=False)
    assert "score: judge=0.75 (fine)" in out.output.splitlines()[-1]


def test_the_preference_export_writes_a_line_per_pair(db_target, tmp_path):
    from sessiontree.formats import export_file

    with Store(db_target) as store:
        s, (a, b, c) = three_variants(store)
        for branch, value in [(a, 1.0), (b, 0.5), (c, 0.0)]:
            score(store, branch, value, session=s, name="judge")
        out = export_file(store, tmp_path / "pairs.jsonl", "preference")
        cli_out = CliRunner().invoke(cli, ["--db", db_target, "export", "--format", "preference"])
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert cli_out.exit_code == 0 and cli_out.output == out.read_text()
    assert [(x["chosen_branch"], x["rejected_branch"]) for x in lines] == [(a, b), (a, c), (b, c)]
    assert lines[0] == {
        "prompt": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "What is 2+2?"}],
        "chosen": [{"role": "assistant", "content": "four"}],
        "rejected": [{"role": "assistant", "content": "4, obviously"}],
        "scorer": "judge",
        "chosen_score": 1.0,
        "rejected_score": 0.5,
        "chosen_branch": a,
        "rejected_branch": b,
        "session": s.id,
    }
