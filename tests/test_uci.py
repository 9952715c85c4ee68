"""The UCI reader/writer on the DUT's config format."""

import pytest

from labwarden.lab import uci

SAMPLE = """
config wifi-device 'radio0'
\toption channel '36'
\toption band "5g"

# a comment
config wifi-iface 'vap0'
\toption ssid 'lab 0'
"""


def test_parse_and_roundtrip() -> None:
    secs = uci.parse(SAMPLE)
    assert [(s.type, s.name) for s in secs] == [("wifi-device", "radio0"), ("wifi-iface", "vap0")]
    assert secs[0].options == {"channel": "36", "band": "5g"}
    assert secs[1].options["ssid"] == "lab 0"
    assert uci.parse(uci.dumps(secs)) == secs


def test_error_names_source_and_line() -> None:
    with pytest.raises(uci.UciError, match=r"wireless:3: expected"):
        uci.parse("config a 'b'\n\toption x 'y'\nlist z 'q'\n", "wireless")


def test_get_missing_section() -> None:
    with pytest.raises(KeyError):
        uci.get(uci.parse(SAMPLE), "nope")
