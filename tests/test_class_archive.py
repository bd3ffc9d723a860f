"""The class archive's name: the JVM maps an archive only while every jar
it was written from keeps its size and modification time, so a change to
either must name another archive, and writing that one drops the stale."""
from __future__ import annotations

import os

from kdiag.analysis import spark


def _place(tmp_path, name="jars"):
    jars = tmp_path / name
    jars.mkdir()
    for jar in ("spark-core.jar", "scala-library.jar"):
        (jars / jar).write_bytes(b"PK" + jar.encode())
    java = tmp_path / "java"
    java.write_text("")
    return jars, java


def test_the_same_jars_keep_their_archive(tmp_path):
    jars, java = _place(tmp_path)
    assert spark.archive_name("4.0", jars, java) == spark.archive_name("4.0", jars, java)


def test_a_jar_with_a_new_time_and_the_same_size_names_another_archive(tmp_path):
    # What a reinstall of the same pyspark does to its jars.
    jars, java = _place(tmp_path)
    before = spark.archive_name("4.0", jars, java)
    st = (jars / "spark-core.jar").stat()
    os.utime(jars / "spark-core.jar", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    after = spark.archive_name("4.0", jars, java)
    assert after != before
    # Same place: what tells a stale archive of these jars from another
    # environment's.
    assert after.split("-")[2] == before.split("-")[2]


def test_writing_an_archive_drops_the_stale_ones_of_its_jars_only(tmp_path):
    jars, java = _place(tmp_path)
    other, _ = _place(tmp_path, "other-venv-jars")
    cache = tmp_path / "cache"
    cache.mkdir()
    stale = cache / spark.archive_name("4.0", jars, java)
    stale.write_bytes(b"old")
    theirs = cache / spark.archive_name("4.0", other, java)
    theirs.write_bytes(b"theirs")
    os.utime(jars / "spark-core.jar", ns=(0, 10**18))
    kept = cache / spark.archive_name("4.0", jars, java)
    kept.write_bytes(b"new")
    unplaced = cache / "spark-classes-9bf678d05abf1aae.jsa"   # named before names held the place
    unplaced.write_bytes(b"older")
    spark.drop_replaced(kept)
    assert sorted(p.name for p in cache.iterdir()) == sorted([kept.name, theirs.name])
