"""`labwarden ...`: the command line, one module per command group (see app.py)."""
