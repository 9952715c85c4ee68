"""The MCP server: a thin door that registers every tool (through the guard), resources and
prompts, on stdio or streamable HTTP."""
