"""The policy every tool call passes: preconditions, healing, input safety, lease, budgets,
board health. A guard never runs a tool's side effect; every decision is a transcript event."""
