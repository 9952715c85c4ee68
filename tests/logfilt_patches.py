"""Patches to the second firmware (tests/data/logfilt), for tests that play an agent writing them
and for the short history its repo is given (bisect): each is a list of (old, new) replacements
in one file, turned into the unified diff `git diff` would write."""

from __future__ import annotations

import difflib
from pathlib import Path

from tests.stockdut import LOGFILT

Edits = list[tuple[str, str]]

FIX: Edits = [
    ("""/* The hotspot: a case-insensitive substring search, one tolower() per byte compared. */
static __attribute__((noinline)) int match_rule(const struct rule *r, const char *line, size_t len)
{
	size_t n = strlen(r->needle);
	for (size_t i = 0; i + n <= len; i++) {
		size_t j = 0;
		while (j < n && tolower((unsigned char)line[i + j]) == tolower((unsigned char)r->needle[j]))
			j++;
		if (j == n)
			return 1;
	}
	return 0;
}""", """/* A substring search of a lowercased needle in the line, lowercased once (filter_line). */
static __attribute__((noinline)) int match_rule(const struct rule *r, const char *lower)
{
	return strstr(lower, r->needle) != NULL;
}"""),
    ("""	int caught = 0;
	for (int i = 0; i < nrules; i++)
		if (match_rule(&rules[i], line, len)) {""", """	char lower[1024];
	size_t k;
	for (k = 0; k < len && k < sizeof lower - 1; k++)
		lower[k] = (char)tolower((unsigned char)line[k]);
	lower[k] = 0;
	int caught = 0;
	for (int i = 0; i < nrules; i++)
		if (match_rule(&rules[i], lower)) {"""),
    ("""		snprintf(rules[i].needle, sizeof rules[i].needle, "kernel: module%03d refused", i);""",
     """	{
		snprintf(rules[i].needle, sizeof rules[i].needle, "kernel: module%03d refused", i);
		for (char *c = rules[i].needle; *c; c++)
			*c = (char)tolower((unsigned char)*c);
	}"""),
]
"""logfilt.c: lowercase each line once and the needles at start-up, then a plain strstr -- the
hotspot (one tolower() per byte compared, per rule) goes (~40x less CPU on this host)."""

NO_OP: Edits = [("/* One line through every rule: what a uprobe counts (one hit per line). */",
                 "/* One line through every rule (a uprobe here counts one hit per line). */")]
"""logfilt.c: a comment -- the same code."""

SLOWER: Edits = [("""			j++;
		if (j == n)
			return 1;""", """			j++;
		if (j < n && strncasecmp(line + i, r->needle, n) == 0) /* a second opinion */
			j = n;
		if (j == n)
			return 1;""")]
"""logfilt.c: ask strncasecmp too wherever the loop saw a mismatch -- the same answers, about
twice the CPU."""

EFFECT_10: Edits = [("	int nrules = 1000;", "	int nrules = 900; /* the module9xx rules retired */")]
"""logfilt.c: 900 rules instead of 1000, the same code -- a tenth less matching, a ~10% effect of
known size (bench/trust.py's "real effect" on logfilt; match_rule is ~95% of its CPU). Measured
with `bench/trust.py --lab-kind logfilt --noops 0 --effects 2 --background off` (2026-11-29):
-10.3% over all 15+15 windows (62.3 -> 55.9% of a core) at load average ~2, -5.7% in the next
run at ~4.6 (other work on the host). (A real fix of that size, skipping the syslog header, read
-1.5% in the daemon and -27% in a harness: code layout, not work -- not a calibrated effect.)"""

REGRESSION: Edits = [
    ("""	int caught = 0;
	for (int i = 0; i < nrules; i++)
		if (match_rule(&rules[i], line, len)) {
			rules[i].hits++;
			caught++;
		}
	return caught;""", """	int caught = 0;
	char lower[1024];
	for (int i = 0; i < nrules; i++) {
		/* each rule sees its own lowercased copy of the line */
		int k = snprintf(lower, sizeof lower, "%s", line);
		for (int j = 0; j < k; j++)
			lower[j] = (char)tolower((unsigned char)lower[j]);
		if (match_rule(&rules[i], lower, (size_t)k)) {
			rules[i].hits++;
			caught++;
		}
	}
	return caught;"""),
]
"""logfilt.c: copy and lowercase the line again for every rule (an snprintf and a tolower per
byte, per rule): the regressing commit of the repo's short history. Fed 1000 lines/s, logfilt
took 58-63% of a core before it and 80-83% after it here (+35%, well under one core); larger on
purpose than lowercasing alone (~+18%): bisect's band of "same" is half the regression, so its
steps decide at the rule's first looks (the bisection took 137-174 s against 174-261 s)."""

REGRESSION_SUBJECT = "logfilt: hand each rule the line lowercased"

HISTORY: list[tuple[str, str, Edits]] = [
    ("logspam.c", "logspam: name the default rate", [("	long rate = 1000;",
                                                       "	long rate = 1000; /* lines per second */")]),
    ("logfilt.c", REGRESSION_SUBJECT, REGRESSION),
    ("logfilt.c", "logfilt: name the default rule count", [("	int nrules = 1000;",
                                                            "	int nrules = 1000; /* rules */")]),
]
"""The commits of the repo's `next` branch, on top of the packaged tree (HEAD stays there):
one of them makes logfilt slower."""


def apply(text: str, edits: Edits) -> str:
    for old, new in edits:
        assert old in text, f"no longer holds {old[:60]!r}"
        text = text.replace(old, new, 1)
    return text


def diff(path: str, edits: Edits, tree: Path = LOGFILT) -> str:
    """The unified diff (a/ b/ names) of `edits` in `path` of the packaged tree."""
    text = (tree / path).read_text()
    after = apply(text, edits)
    return "".join(difflib.unified_diff(text.splitlines(True), after.splitlines(True),
                                        f"a/{path}", f"b/{path}"))
