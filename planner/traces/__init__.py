"""Request logs in and out of the store: the DuckDB store, file formats and layouts, timestamps, ingest, and the
queries every other layer reads traces through."""
