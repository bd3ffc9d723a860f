"""The diagnostics bundle: the archive and its manifest, secret redaction,
and pseudonyms for addresses and names."""
