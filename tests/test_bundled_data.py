"""The bundled set in data/test.jsonl: card composition, and pinned by checksum."""

from pathlib import Path

from base_bench.items import card
from base_bench.items.dataset import BUNDLED_CANARY, BUNDLED_SHA256, load_dataset_file

DATA = Path(__file__).resolve().parents[1] / "data" / "test.jsonl"


def test_bundled_set_matches_card_composition_and_pin():
    ds = load_dataset_file(DATA)
    assert len(ds.items) == card.TOTAL_ITEMS
    assert ds.composition_problems() == []
    assert ds.sha256 == BUNDLED_SHA256
    assert ds.source_kind() == "bundled"
    assert ds.sha256 != card.OFFICIAL_SHA256


def test_bundled_items_follow_authoring_rules():
    ds = load_dataset_file(DATA)
    ids = [i.id for i in ds.items]
    for cat in card.CATEGORIES:
        mine = [i for i in ds.items if i.category == cat]
        assert [i.id for i in mine] == [f"{cat}-{n:03d}" for n in range(1, 51)]
        counts = {d: sum(i.difficulty == d for i in mine) for d in ("easy", "medium", "hard")}
        assert set(counts.values()) <= {16, 17}
        assert max(sum(i.label == k for i in mine) for k in range(4)) <= 15
    for it in ds.items:
        assert it.context == it.context.rstrip()
        assert it.tags[-1] == BUNDLED_CANARY  # the canary closes every record's tags
        assert 1 <= len(it.tags) - 1 <= 3 and BUNDLED_CANARY not in it.tags[:-1]
        if it.category == "context_tracking" and it.difficulty == "hard":
            assert len(it.context.split()) >= 150
    assert len(set(ids)) == 350
