"""Raw capture files -> Parquet tables: reading lines from bytes, telling
each file's format, and feeding the parsers."""
