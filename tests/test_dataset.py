"""Schema, composition and checksum checks on data files (all before any model is loaded)."""

import json

import pytest

from base_bench.items import card
from base_bench.items.dataset import DataError, load_dataset_file, validate_record

from fixtures import record, records, write_dataset


def good():
    return record("commonsense", "medium", 7, 2)


def broken(**changes):
    r = good()
    for k, v in changes.items():
        if v is KeyError:
            del r[k]
        else:
            r[k] = v
    return r


@pytest.mark.parametrize(
    "rec, fragment",
    [
        (broken(label=KeyError), "missing field 'label'"),
        (broken(label=True), "field 'label' has type bool"),
        (broken(label=1.0), "field 'label' has type float"),
        (broken(label=4), "field 'label' is 4"),
        (broken(label=-1), "field 'label' is -1"),
        (broken(version="1.0"), "field 'version' is '1.0'"),
        (broken(version=1.1), "field 'version' has type float"),
        (broken(category="trivia"), "field 'category' is 'trivia'"),
        (broken(difficulty="expert"), "field 'difficulty' is 'expert'"),
        (broken(category_weight=1.2), "field 'category_weight' is 1.2"),
        (broken(difficulty_weight=2.25), "field 'difficulty_weight' is 2.25"),
        (broken(item_elo=1000), "field 'item_elo' is 1000"),
        (broken(item_elo="900"), "field 'item_elo' has type str"),
        (broken(continuations=[" a", " b", " c"]), "has 3 entries"),
        (broken(continuations=[" a", " b", " c", " d", " e"]), "has 5 entries"),
        (broken(continuations=[" a", " a", " c", " d"]), "has duplicates"),
        (broken(continuations=[" a", "b", " c", " d"]), "continuations[1] does not start with whitespace"),
        (broken(continuations=[" a", " b", "  ", " d"]), "continuations[2] is empty"),
        (broken(continuations=[" a", " b", " c", 4]), "continuations[3] is not a string"),
        (broken(continuations=" a b c d"), "field 'continuations' has type str"),
        (broken(score_mode="sum_logprob"), "field 'score_mode' is 'sum_logprob'"),
        (broken(tags="x"), "field 'tags' has type str"),
        (broken(tags=["x", 3]), "field 'tags' must be a list of strings"),
        (broken(context=""), "field 'context' is empty"),
        (broken(id=""), "field 'id' is empty"),
        (broken(id=7), "field 'id' has type int"),
        (broken(extra=1), "unknown field(s) 'extra'"),
        ([1, 2], "not a JSON object"),
    ],
)
def test_each_schema_error_is_named(rec, fragment):
    errs = validate_record(rec)
    assert any(fragment in e for e in errs), errs


def test_good_record_has_no_errors():
    assert validate_record(good()) == []


def test_file_errors_list_every_bad_line_and_field(tmp_path):
    recs = records()
    lines = [json.dumps(r) for r in recs]
    lines[2] = "{not json"
    bad = dict(recs[10], label=True)
    lines[10] = json.dumps(bad)
    lines[20] = json.dumps(dict(recs[20], item_elo=1, score_mode="x"))
    lines[30] = json.dumps(recs[31])  # duplicate id
    path = write_dataset(tmp_path, lines=lines)
    with pytest.raises(DataError) as ei:
        load_dataset_file(path)
    msg = str(ei.value)
    assert "line 3: not valid JSON" in msg
    assert f"line 11 (id {recs[10]['id']}): field 'label' has type bool" in msg
    assert "line 21" in msg and "item_elo" in msg and "score_mode" in msg
    assert f"id {recs[31]['id']!r} repeats line 31" in msg
    assert "5 schema error(s)" in msg


def test_empty_line_and_missing_file(tmp_path):
    path = write_dataset(tmp_path, lines=[json.dumps(good()), "", json.dumps(record("commonsense", "easy", 8, 0))])
    with pytest.raises(DataError, match="line 2: empty line"):
        load_dataset_file(path)
    with pytest.raises(DataError, match="not found"):
        load_dataset_file(tmp_path / "nope.jsonl")


def test_composition_ok_and_deviations(tmp_path):
    ds = load_dataset_file(write_dataset(tmp_path))
    assert len(ds.items) == 350 and ds.composition_problems() == []
    recs = records()
    recs[0]["label"] = (recs[0]["label"] + 1) % 4
    recs = recs[:-1]  # drop one code_completion item
    ds = load_dataset_file(write_dataset(tmp_path, recs))
    probs = ds.composition_problems()
    assert any("code_completion has 49 items" in p for p in probs)
    assert any("label positions are" in p for p in probs)
    assert any(p.startswith("difficulty") for p in probs)


def test_checksum_classification(tmp_path, monkeypatch):
    path = write_dataset(tmp_path)
    ds = load_dataset_file(path)
    assert ds.source_kind() == "modified"
    monkeypatch.setattr(card, "OFFICIAL_SHA256", ds.sha256)
    assert load_dataset_file(path).source_kind() == "official"
