"""Raw captures in their tools' own formats -> Arrow tables.

Each module turns one source into one table; see each module's docstring
for the table's schema. Parsers are pure: no file I/O, no clock.
"""
