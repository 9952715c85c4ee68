"""Playbooks: deterministic sequences of tool calls (no model) through the same guard and
transcript as any agent."""
