"""What a model call cost: usage x the versioned price table in `pricing.toml` (cache-aware)."""

from __future__ import annotations

import tomllib
from decimal import Decimal
from functools import cache
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict

from labwarden.core.errors import LabError
from labwarden.core.events import ModelCall
from labwarden.core.usage import Usage

MILLION = Decimal(1_000_000)
KINDS = ("input", "output", "cache_write_5m", "cache_write_1h", "cache_read")


class UnknownModel(LabError):
    """No price entry matches the model id."""

    kind = "invalid_input"


class Prices(BaseModel):
    """USD per million tokens of each usage kind, for one model-id prefix."""

    model_config = ConfigDict(frozen=True)

    input: Decimal
    """Uncached input."""
    output: Decimal
    """Output."""
    cache_write_5m: Decimal
    """Cache write, 5-minute lifetime."""
    cache_write_1h: Decimal
    """Cache write, 1-hour lifetime."""
    cache_read: Decimal
    """Cache read."""


class PriceTable(BaseModel):
    model_config = ConfigDict(frozen=True)

    version: str
    """Date of the price list the numbers were copied from."""
    models: dict[str, Prices]
    """Model-id prefix -> prices."""

    def lookup(self, model: str) -> tuple[str, Prices]:
        """The entry with the longest key that is `model` or a `-`-bounded prefix of it."""
        hits = [k for k in self.models if model == k or model.startswith(k + "-")]
        if not hits:
            raise UnknownModel(f"no price for model {model!r}; priced: {', '.join(sorted(self.models))}",
                               "pick a priced model (--model), or add it to "
                               "labwarden/transcripts/pricing.toml")
        key = max(hits, key=len)
        return key, self.models[key]


class Cost(BaseModel):
    """Dollars of one model call, by usage kind."""


    model: str
    """The model id as called."""
    priced_as: str
    """The price-table key that matched."""
    pricing_version: str
    """Version of the price table used."""
    tokens: dict[str, int]
    """Tokens of each kind (input, output, cache_write_5m, cache_write_1h, cache_read)."""
    usd: dict[str, float]
    """Dollars of each kind."""
    total_usd: float
    """Sum of `usd`."""


def _parse(text: str) -> PriceTable:
    data = tomllib.loads(text)
    return PriceTable(version=str(data["version"]),
                      models={k: Prices(**{f: Decimal(str(v[f])) for f in KINDS})
                              for k, v in data["models"].items()})


@cache
def table() -> PriceTable:
    """The price table shipped with labwarden."""
    return _parse(resources.files("labwarden.transcripts").joinpath("pricing.toml").read_text())


def tokens_by_kind(usage: Usage) -> dict[str, int]:
    w5m, w1h = usage.cache_writes()
    return {"input": usage.input_tokens, "output": usage.output_tokens,
            "cache_write_5m": w5m, "cache_write_1h": w1h, "cache_read": usage.cache_reads()}


def cost(model: str, usage: Usage, prices: PriceTable | None = None) -> Cost:
    """Cost of one call; raises UnknownModel naming the priced models."""
    tbl = prices or table()
    key, p = tbl.lookup(model)
    tokens = tokens_by_kind(usage)
    exact = {k: Decimal(n) * getattr(p, k) / MILLION for k, n in tokens.items()}
    return Cost(model=model, priced_as=key, pricing_version=tbl.version, tokens=tokens,
                usd={k: float(v) for k, v in exact.items()}, total_usd=float(sum(exact.values())))


def model_call(model: str, usage: Usage | dict[str, Any], **kw: Any) -> ModelCall:
    """A model_call event with its cost computed from the shipped price table."""
    u = Usage.model_validate(usage) if isinstance(usage, dict) else usage
    c = cost(model, u)
    return ModelCall(model=model, usage=u, cost_usd=c.total_usd, pricing_version=c.pricing_version, **kw)
