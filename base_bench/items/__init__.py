"""The benchmark's items: the card's numbers (`card`), the record type (`records`), loading and
checking a data file (`dataset`), where the data comes from (`datasource`: bundled, a path, or the
gated Hub file via `hub`)."""
