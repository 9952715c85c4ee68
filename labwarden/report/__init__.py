"""The report: one self-contained HTML file of a session's story, built from its transcript."""
