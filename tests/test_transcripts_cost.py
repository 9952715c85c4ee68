"""Cost from usage and the versioned price table: hand-computed dollars for every usage kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from labwarden.transcripts import TranscriptStore, UnknownModel, Usage, audit, cost, pricing
from labwarden.transcripts.pricing import table

OPUS = "claude-opus-4-5-20251101"
SONNET = "claude-sonnet-4-5-20250929"


def _usage(inp: int = 0, out: int = 0, w5m: int = 0, w1h: int = 0, read: int = 0) -> Usage:
    return Usage.model_validate({
        "input_tokens": inp, "output_tokens": out, "cache_creation_input_tokens": w5m + w1h,
        "cache_read_input_tokens": read,
        "cache_creation": {"ephemeral_5m_input_tokens": w5m, "ephemeral_1h_input_tokens": w1h}})


@pytest.mark.parametrize(("model", "usage", "kind", "dollars"), [
    (OPUS, _usage(inp=1_000_000), "input", 5.00),            # 1M x $5
    (OPUS, _usage(out=200_000), "output", 5.00),             # 0.2M x $25
    (OPUS, _usage(w5m=400_000), "cache_write_5m", 2.50),     # 0.4M x $6.25 (1.25 x 5)
    (OPUS, _usage(w1h=100_000), "cache_write_1h", 1.00),     # 0.1M x $10 (2 x 5)
    (OPUS, _usage(read=2_000_000), "cache_read", 1.00),      # 2M x $0.50 (0.1 x 5)
    (SONNET, _usage(inp=1_000_000), "input", 3.00),          # 1M x $3
    (SONNET, _usage(out=100_000), "output", 1.50),           # 0.1M x $15
    (SONNET, _usage(w5m=200_000), "cache_write_5m", 0.75),   # 0.2M x $3.75
    (SONNET, _usage(w1h=50_000), "cache_write_1h", 0.30),    # 0.05M x $6
    (SONNET, _usage(read=1_000_000), "cache_read", 0.30),    # 1M x $0.30
])
def test_each_usage_kind_costs_the_hand_computed_dollars(model: str, usage: Usage, kind: str,
                                                         dollars: float) -> None:
    c = cost(model, usage)
    assert c.usd[kind] == pytest.approx(dollars, abs=1e-12)
    assert c.total_usd == pytest.approx(dollars, abs=1e-12)
    assert c.pricing_version == "2026-11-01"


def test_a_mixed_call_sums_the_kinds() -> None:
    opus = cost(OPUS, _usage(1_000_000, 200_000, 400_000, 100_000, 2_000_000))
    assert opus.total_usd == pytest.approx(5.00 + 5.00 + 2.50 + 1.00 + 1.00)  # 14.50
    sonnet = cost(SONNET, _usage(1_000_000, 100_000, 200_000, 50_000, 1_000_000))
    assert sonnet.total_usd == pytest.approx(3.00 + 1.50 + 0.75 + 0.30 + 0.30)  # 5.85
    small = cost("claude-haiku-4-5", _usage(inp=1234, out=567))
    assert small.total_usd == pytest.approx(1234 * 1 / 1e6 + 567 * 5 / 1e6)  # 0.004069


def test_cache_writes_without_a_split_count_as_5m() -> None:
    u = Usage(input_tokens=0, output_tokens=0, cache_creation_input_tokens=400_000)
    assert cost(OPUS, u).usd == {"input": 0.0, "output": 0.0, "cache_write_5m": 2.50,
                                 "cache_write_1h": 0.0, "cache_read": 0.0}
    nones = Usage.model_validate({"input_tokens": 1, "output_tokens": 1,
                                  "cache_creation_input_tokens": None, "cache_read_input_tokens": None})
    assert cost(OPUS, nones).total_usd == pytest.approx(5e-6 + 25e-6)


def test_model_ids_match_by_prefix_and_unknown_models_name_the_known_ones() -> None:
    assert cost(OPUS, _usage(inp=1)).priced_as == "claude-opus-4"
    assert cost("claude-opus-4-1-20250805", _usage(inp=1_000_000)).total_usd == pytest.approx(15.00)
    assert cost("claude-sonnet-4", _usage(inp=1)).priced_as == "claude-sonnet-4"
    for bad in ("gpt-4o", "claude-opus-40"):
        with pytest.raises(UnknownModel, match=r"(?s)claude-haiku-4.*claude-sonnet-4.*pricing.toml"):
            cost(bad, _usage(inp=1))
    assert table().version == "2026-11-01"


def test_audit_recomputes_every_stored_cost(tmp_path: Path) -> None:
    with TranscriptStore(tmp_path / "t.db") as store:
        sid = store.start_session("chat")
        good = pricing.model_call(SONNET, _usage(inp=1_000_000, out=100_000))
        assert good.cost_usd == pytest.approx(4.50)
        store.append(sid, good)
        wrong = good.model_copy(update={"id": "wrongcost", "cost_usd": 0.45})
        store.append(sid, wrong)
        report = audit(store, sid)
    assert not report.ok
    assert report.first_bad_seq == 3
    assert report.problems == ["seq 3: [cost] stored cost $0.450000, usage gives $4.500000"]
