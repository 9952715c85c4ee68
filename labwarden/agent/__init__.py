"""The agent: a Claude model driving the lab's tools in-process (chat and the unattended loop)."""
