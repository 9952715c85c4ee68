"""The bottom layer, importing nothing else of labwarden: errors (LabError and its closed ErrorKind),
the tool spec, the call record, the transcript event schema, device text, records and measurements."""
