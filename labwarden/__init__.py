"""labwarden: an MCP tool server through which an LLM agent runs a real performance lab."""

__version__ = "0.1.0"
