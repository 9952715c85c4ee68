"""Candidates for the qlab's own hot path, written as an agent writes them: unified diffs against
the firmware sources (tests/patching.py), none of them a shipped patch id. The qlab builds the
vlab's sources with the nl80211 HAL (hal_nl80211.c), whose per-station pull is three real
NL80211_CMD_GET_STATION round trips (`hal_nl_roundtrip`, ~half of stad's CPU at 114 stations).

Each diff is made against the packaged sources; their hunks touch different places, so they stack
in any order (git apply takes a hunk at an offset)."""

from __future__ import annotations

import difflib

from .patching import NO_OP, change, source


def edits(path: str, pairs: list[tuple[str, str]]) -> str:
    """One file's unified diff of several replacements (each `old` must occur once)."""
    text = source(path)
    after = text
    for old, new in pairs:
        assert after.count(old) == 1, f"{path}: {old!r} does not occur exactly once"
        after = after.replace(old, new)
    return "".join(difflib.unified_diff(text.splitlines(True), after.splitlines(True),
                                        f"a/{path}", f"b/{path}"))

HAL = "hal_nl80211.c"

BULK_DUMP = change(HAL, "\t(void)vap;\n\treturn bulk_capable;",
                   "\t(void)vap;\n\treturn 1; /* one NL80211_CMD_GET_STATION dump per interface */")
"""The HAL reports the bulk capability it has: the pull takes hal_get_all_stations_bulk (one
station dump per VAP) instead of three GET_STATION round trips per station."""

GATE = change("wld.c",
              "\t/* Freshness gate: every poll pulls a new driver sample, so this is always true and the\n"
              "\t * whole static block is rebuilt and applied once per station per poll. */\n"
              "\tif (ad->lastSampleSyncTime != ad->lastSampleTime) {\n"
              "\t\twld_ad_buildStaticParams(ad, &t);\n"
              "\t\tdm_finalize_transaction(&t);\n",
              "\t/* The static block changes only on association or an assoc-state change. */\n"
              "\tif (!ad->first_sync_done || ad->assoc_state != ad->synced_assoc_state) {\n"
              "\t\twld_ad_buildStaticParams(ad, &t);\n"
              "\t\tdm_finalize_transaction(&t);\n"
              "\t\tad->first_sync_done = 1;\n"
              "\t\tad->synced_assoc_state = ad->assoc_state;\n")
"""wld.c, 0901-like in its own words: write the ~40 static params back only when they can have
changed, not once per station per poll."""

LEAN = "".join([
    change("rpc.c", "\t\treturn getStationStats(a1, out);",
           "\t\treturn getStationStats(a1, n >= 3 && !strcmp(a2, \"brief\"), out);"),
    change("sta.h", "int getStationStats(const char *vap, struct sbuf *reply);",
           "int getStationStats(const char *vap, int brief, struct sbuf *reply);"),
    change("stamon.c", "snprintf(req, sizeof req, \"%s %s\", method, v);",
           "snprintf(req, sizeof req, \"%s %s brief\", method, v);"),
    edits("wld.c", [(
           "NOINLINE int getStationStats(const char *vap, struct sbuf *reply)\n{",
           "/* The keys the monitor reads, straight from the live sample (the datamodel write's own\n"
           " * formatter), instead of ~70 params read back out of the datamodel and re-marshalled. */\n"
           "static const char *const lean_keys[14] = {\n"
           "\t\"MACAddress\", \"Tx_Retransmissions\", \"TxErrors\", \"RxErrors\", \"DownlinkBandwidth\",\n"
           "\t\"TxPacketCount\", \"RxPacketCount\", \"SignalNoiseRatio\", \"TxBytes\", \"RxBytes\",\n"
           "\t\"LastDataDownlinkRate\", \"LastDataUplinkRate\", \"SignalStrength\",\n"
           "\t\"TxUnicastPacketCount\",\n"
           "};\n\n"
           "static void s_addStaStatsLean(struct sbuf *reply, struct wld_ad *ad)\n{\n"
           "\tstatic int idx[14];\n\tchar val[DM_VALUE_LEN];\n\tif (!idx[1])\n"
           "\t\tfor (int i = 0; i < 14; i++)\n\t\t\tidx[i] = dm_param_index(lean_keys[i]);\n"
           "\twork_us(COST_BRIEF_US);\n\tsbuf_printf(reply, \"MACAddress=%s\", ad->macstr);\n"
           "\tfor (int i = 1; i < 14; i++) {\n"
           "\t\tad_volatile_value(&ad->live, idx[i] - DM_NSTATIC, val);\n"
           "\t\tsbuf_printf(reply, \" %s=%s\", lean_keys[i], val);\n\t}\n"
           "\tsbuf_add(reply, \"\\n\", 1);\n}\n\n"
           "NOINLINE int getStationStats(const char *vap, int brief, struct sbuf *reply)\n{"),
        ("\t\ts_addStaStatsValues(reply, ad);\n\treturn 0;",
         "\t\tif (brief)\n\t\t\ts_addStaStatsLean(reply, ad);\n\t\telse\n"
         "\t\t\ts_addStaStatsValues(reply, ad);\n\treturn 0;")]),
])
"""0902-like: `getStationStats VAP brief` answers the 14 keys the monitor reads, and the monitor
asks for it; the RPC, its rate (the offered-load counter) and the full reply stay."""

SLOW_PULL = change(HAL, "\tfor (int i = 0; i < HAL_ROUNDTRIPS; i++)\n",
                   "\tfor (int i = 0; i < 2 * HAL_ROUNDTRIPS; i++) /* each asked twice */\n")
"""hal_nl80211.c: every station's round trips made twice -- the same answers, more CPU."""

COMMENT = change("wld.c", *NO_OP)
"""wld.c: a comment reworded -- the same code (a no-op)."""
