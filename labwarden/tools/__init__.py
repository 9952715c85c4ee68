"""One module per tool: a docstring, Input/Output models, one `run`, and a SPEC for the registry."""
