"""A warm analysis server: one long-lived process that holds a SparkSession,
so that a small ``kdiag replay`` spends its time on the analysis, not on
starting a JVM (4-7 s on 2 cores) and warming it up.

Why kdiag's own server and not pyspark's bundled Spark Connect server: the
Spark Connect client needs grpcio, grpcio-status, googleapis-common-protos
and protobuf, four new dependencies, and a Connect session is not the
classic session the analysis is written against (``sparkContext``, its
status tracker and ``cache``/``unpersist`` semantics differ), so the job
would need a second code path. This server runs the very same
``job.analyze`` in a classic session; its whole protocol is one JSON line
each way over a Unix socket, with the standard library only.

- The client (``Server``) parses the captures itself and sends the tables'
  directory and the run's meta; the server answers with the findings. A
  request it cannot serve (gone, crashed, hung past the timeout, refused)
  makes the client analyse in its own process instead, with a one-line note:
  the server never costs a replay its verdict.
- The socket lives in a private directory (``KDIAG_WARM_DIR``, default
  ``$TMPDIR/kdiag-warm-UID``): 0700 and owned by the user, the socket 0600
  and owned by the user, or neither is used. The server also checks each
  peer's uid (SO_PEERCRED).
- A request that is not what a kdiag client sends (not a JSON object, a
  field of the wrong type, over MAX_REQUEST_BYTES, nested past MAX_DEPTH,
  not UTF-8, not sent within ``KDIAG_WARM_READ_S``) gets an error answer
  and the server serves on. Connections are read concurrently, each in a
  thread of its own, up to MAX_CONNECTIONS at once: a slow or silent one
  holds only itself. The analyses run one at a time (one Spark session,
  and the practice is the one thing that runs beside them).
- One server per directory: it holds an exclusive lock on ``server.lock``
  while it lives, and a client starts one only when that lock is free.
- It stops by itself after ``KDIAG_WARM_IDLE_S`` (600) seconds without a
  request, after a request that ran past ``KDIAG_WARM_TIMEOUT_S`` (120; it
  may be hung), and when the code it runs is not the client's (kdiag was
  upgraded or edited; ``code_key``): the client then starts a fresh one.
- It also verifies bundles (``verify``) for a client that finds it already
  serving: its parsers and pyarrow are imported, which a fresh client
  spends most of a second on to check a bundle's table schemas and footers.
  One that is not serving yet is not waited for: the client verifies.
- After it answers, while nobody waits, it practises on a copy of the
  tables it was given, so that its JVM's JIT has compiled Spark's planner
  before the next replay (``warm_practice``; ``KDIAG_WARM_PRACTICE=0``: never).
- After its first answer, when this Java and these Spark jars have no class
  archive (an installed kdiag: setup.sh writes one in a source tree), a child
  at the lowest CPU priority records one from a copy of that request's tables
  (``record_archive_later``): the next cold start maps it.
- ``kdiag replay --no-warm`` or ``KDIAG_WARM=0``: no server at all.
"""
from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import math
import os
import select
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from kdiag import settings
from kdiag.analysis import class_archive
from kdiag.deadline import Deadline, wait_until
from kdiag.visible import visible

if TYPE_CHECKING:
    from kdiag.bundle.verify import Verification

SOCKET_NAME = "analysis.sock"
LOCK_NAME = "server.lock"
LOG_NAME = "server.log"
IDLE_S = 600.0
# A small input is analysed in seconds, warm; a first request waits for the
# server's JVM to start (4-7 s on 2 cores, more under load).
REQUEST_TIMEOUT_S = 120.0
START_TIMEOUT_S = 60.0
# An answer larger than this is not from a kdiag server.
MAX_LINE_BYTES = 64 << 20
# A kdiag request holds a few paths and the run's meta: kilobytes, or a few
# hundred of them for a directory of many captures. What a connection can
# make the server hold is bounded by this, and so is its parse's depth.
MAX_REQUEST_BYTES = 4 << 20
MAX_DEPTH = 32
# A client sends its request as soon as it has connected.
READ_S = 10.0
# Connections served at once (read, or waiting for their analysis); the
# next ones are answered that the server is busy.
MAX_CONNECTIONS = 32


class WarmUnavailable(Exception):
    """The server cannot serve this request; the message says why, in one line."""


def wanted(no_warm: bool = False) -> bool:
    return not no_warm and settings.get("KDIAG_WARM")


def warm_dir() -> Path:
    if settings.raw("KDIAG_WARM_DIR"):
        return Path(settings.raw("KDIAG_WARM_DIR"))
    import tempfile

    return Path(tempfile.gettempdir()) / f"kdiag-warm-{os.geteuid()}"


def _env_s(name: str, default: float) -> float:
    value = settings.get(name)
    return value if 0 < value < math.inf else default


def private_dir(path: Path) -> Path:
    """``path``, created 0700 if absent; refused unless it is a directory (not
    a link) owned by this user that nobody else can enter."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.lstat()
    except OSError as e:
        raise WarmUnavailable(f"cannot make {path}: {e.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise WarmUnavailable(f"{path} is not a directory; remove it or set KDIAG_WARM_DIR")
    _private(path, st, "directory")
    return path


def _private(path: Path, st: os.stat_result, what: str) -> None:
    if st.st_uid != os.geteuid():
        raise WarmUnavailable(f"the {what} {path} is owned by uid {st.st_uid}, not by this user "
                              f"({os.geteuid()}): not used; remove it or set KDIAG_WARM_DIR")
    if st.st_mode & 0o077:
        raise WarmUnavailable(f"the {what} {path} is open to others (mode {stat.S_IMODE(st.st_mode):o}): "
                              "not used; remove it or set KDIAG_WARM_DIR")


def check_socket(path: Path) -> None:
    """Refuses a socket that is not a socket, not this user's or open to others."""
    try:
        st = path.lstat()
    except OSError as e:
        raise WarmUnavailable(f"no analysis server at {path}: {e.strerror}") from None
    if not stat.S_ISSOCK(st.st_mode):
        raise WarmUnavailable(f"{path} is not a socket; remove it or set KDIAG_WARM_DIR")
    _private(path, st, "socket")


def code_key() -> str:
    """What the server runs: this interpreter and kdiag's modules (names,
    sizes, mtimes). A server whose key is not the client's is stale.
    KDIAG_WARM_KEY sets it instead: a tree whose files change while its
    tests run (they only need the server they started themselves)."""
    if settings.raw("KDIAG_WARM_KEY"):
        return settings.raw("KDIAG_WARM_KEY")
    from importlib.util import find_spec

    h = hashlib.sha256(sys.executable.encode())
    roots = set()
    for name in ("kdiag", "kdiag.collectors", "kdiag.parsers"):
        spec = find_spec(name)
        roots.update(Path(p).resolve() for p in ((spec and spec.submodule_search_locations) or []))
    for root in sorted(roots):
        for p in sorted(root.rglob("*.py")):
            st = p.stat()
            h.update(f"{p}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def _lock_held(lock_path: Path) -> bool:
    """Whether a server holds the directory's lock (is alive)."""
    try:
        fd = os.open(lock_path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


class Server:
    """The client's handle on the server of one directory."""

    def __init__(self, directory: Path | None = None) -> None:
        self.dir = directory or warm_dir()
        self.sock_path = self.dir / SOCKET_NAME
        self.lock_path = self.dir / LOCK_NAME
        self.idle_s = _env_s("KDIAG_WARM_IDLE_S", IDLE_S)
        self.timeout_s = _env_s("KDIAG_WARM_TIMEOUT_S", REQUEST_TIMEOUT_S)
        self.start_timeout_s = _env_s("KDIAG_WARM_START_S", START_TIMEOUT_S)
        self.read_s = _env_s("KDIAG_WARM_READ_S", READ_S)
        self.key = code_key()
        self.started = False
        # The raw/ folders the analysis reads (bundle.ANALYSED_SOURCES), as the
        # server's registry gave them with its last verification.
        self.sources: tuple[str, ...] | None = None

    def start(self) -> None:
        """Starts a server unless one is alive; does not wait for it to be ready."""
        import kdiag

        private_dir(self.dir)
        if _lock_held(self.lock_path):
            return
        if self.sock_path.exists() or self.sock_path.is_symlink():
            # A new server would replace it: only a dead server's own is replaced.
            check_socket(self.sock_path)
        log = os.open(self.dir / LOG_NAME, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            # The launcher takes the lock, forks the server and exits: the
            # server is nobody's child, and holds the lock from the start.
            launcher = subprocess.Popen(
                [*kdiag.python_m(sys.modules[__name__]), "--dir", str(self.dir), "--idle-s", str(self.idle_s),
                 "--timeout-s", str(self.timeout_s), "--read-s", str(self.read_s), "--key", self.key],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, cwd="/", start_new_session=True,
                env=_server_env())
        finally:
            os.close(log)
        try:
            launcher.wait(timeout=self.start_timeout_s)
        except subprocess.TimeoutExpired:
            launcher.kill()
            launcher.wait()
            raise WarmUnavailable("the analysis server's launcher did not return") from None
        self.started = True

    def analyze(self, tables_dir: Path, meta: dict) -> dict:
        """The findings of the tables in ``tables_dir``, from the server;
        WarmUnavailable when it cannot give them."""
        return self._analysis(tables_dir, meta)["findings"]

    def read_and_analyze(self, raw: list[Path], tables_dir: Path, meta: dict, base: Path | None = None):
        """(findings, Parsed): the server parses the captures into
        ``tables_dir`` first, as parse_paths here would."""
        from kdiag.ingest.parsed import Parsed

        answer = self._analysis(tables_dir, meta, raw=[str(Path(p).resolve()) for p in raw],
                                base=None if base is None else str(base))
        p = answer.get("parsed") or {}
        return answer["findings"], Parsed(rows=p.get("rows") or {}, files=p.get("files") or [],
                                          notes=p.get("notes") or [],
                                          paths={k: Path(v) for k, v in (p.get("paths") or {}).items()})

    def verify(self, path: Path, limits) -> Verification:
        """``bundle.verify(path, limits)``, run by the server when it is
        serving now (not waited for); WarmUnavailable when it is not, or
        could not."""
        from kdiag.bundle.verify import Verification

        answer = self.call({"op": "verify", "key": self.key, "path": str(Path(path).resolve()),
                            "limits": dataclasses.asdict(limits)}, self.timeout_s, wait=False)
        if not answer.get("ok") or not isinstance(answer.get("verification"), dict):
            raise WarmUnavailable(visible(str(answer.get("error") or "the analysis server did not verify")))
        sources = answer.get("sources")
        if isinstance(sources, list) and all(isinstance(x, str) for x in sources):
            self.sources = tuple(sources)
        try:
            return Verification.from_dict(answer["verification"], Path(path))
        except (KeyError, TypeError, ValueError) as e:
            raise WarmUnavailable(f"the analysis server's verification is malformed ({type(e).__name__})") from None

    def _analysis(self, tables_dir: Path, meta: dict, **extra) -> dict:
        request = {"op": "analyze", "tables": str(Path(tables_dir).resolve()), "meta": meta, "key": self.key, **extra}
        answer = self.call(request, self.timeout_s)
        if answer.get("stale"):
            # It runs other code and is stopping: start the current one.
            self._wait_gone()
            self.start()
            answer = self.call(request, self.timeout_s)
        if not answer.get("ok"):
            # An analysis's error may quote the captures.
            raise WarmUnavailable(visible(str(answer.get("error") or "the analysis server refused the request")))
        return answer

    def call(self, request: dict, timeout_s: float, wait: bool = True) -> dict:
        """``wait``: for a server that is starting, up to its start timeout."""
        line = json.dumps(request, default=str).encode() + b"\n"
        if len(line) > MAX_REQUEST_BYTES:
            raise WarmUnavailable(f"the request to the analysis server is {len(line)} bytes, over its "
                                  f"{MAX_REQUEST_BYTES}")
        conn = self._connect(wait)
        try:
            conn.settimeout(timeout_s)
            conn.sendall(line)
            line = _read_line(conn, MAX_LINE_BYTES)
        except socket.timeout:
            raise WarmUnavailable(f"the analysis server gave no answer within {timeout_s:g} s") from None
        except _TooLong:
            raise WarmUnavailable(f"the analysis server's answer is over {MAX_LINE_BYTES} bytes") from None
        except OSError as e:
            raise WarmUnavailable(f"the analysis server dropped the connection ({e.strerror or e})") from None
        finally:
            conn.close()
        if not line:
            raise WarmUnavailable("the analysis server closed the connection without an answer (it may have "
                                  f"crashed; see {self.dir / LOG_NAME})")
        try:
            answer = json.loads(line)
        except (ValueError, RecursionError):
            answer = None
        if not isinstance(answer, dict):
            raise WarmUnavailable("the analysis server's answer is not a JSON object")
        return answer

    def _connect(self, wait: bool = True) -> socket.socket:
        """A connection, waiting for a server that is starting (``wait``)."""
        if not wait and not self.dir.is_dir():
            # Not made for a request that only asks a running server.
            raise WarmUnavailable(f"no analysis server is running in {self.dir}")
        private_dir(self.dir)   # whoever owns the directory could swap the socket
        deadline = Deadline(self.start_timeout_s)
        while True:
            error = None
            if self.sock_path.exists() or self.sock_path.is_symlink():
                check_socket(self.sock_path)
                conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    conn.connect(str(self.sock_path))
                    return conn
                except OSError as e:
                    conn.close()
                    error = e.strerror
            if not _lock_held(self.lock_path):
                # No server lives: the socket, if any, is a dead one's.
                raise WarmUnavailable(f"no analysis server is running in {self.dir}"
                                      + (f" ({error})" if error else "")
                                      + (f"; see {self.dir / LOG_NAME}" if self.started else ""))
            if not wait:
                raise WarmUnavailable("the analysis server is not serving yet")
            if deadline.expired():
                raise WarmUnavailable(f"the analysis server did not start within {self.start_timeout_s:g} s")
            time.sleep(0.05)

    def _wait_gone(self) -> None:
        wait_until(lambda: not _lock_held(self.lock_path), 30, 0.05)

    def stop(self) -> None:
        """Asks a running server to stop, and waits until it has."""
        try:
            self.call({"op": "stop"}, 10)
        except WarmUnavailable:
            pass
        self._wait_gone()


def _server_env() -> dict:
    """The client's environment, with the kdiag it runs first on the path:
    the server starts in / (it holds no directory of the user's), where the
    client's working directory no longer puts kdiag on the path."""
    import kdiag

    top = str(Path(kdiag.__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{top}{os.pathsep}{path}" if path else top}


class _TooLong(ValueError):
    pass


def _read_line(conn: socket.socket, max_bytes: int, deadline: Deadline | None = None) -> bytes:
    """One line, without its newline; what came before the peer's end when
    it sent no newline (b"" for nothing). socket.timeout past ``deadline``,
    however the bytes trickle in; _TooLong past ``max_bytes``."""
    line = bytearray()
    while True:
        if deadline is not None:
            left = deadline.remaining_s()
            if left <= 0:
                raise socket.timeout
            conn.settimeout(left)
        chunk = conn.recv(1 << 16)
        if not chunk:
            return bytes(line)
        nl = chunk.find(b"\n")
        line += chunk if nl < 0 else chunk[:nl]
        if len(line) > max_bytes:
            raise _TooLong
        if nl >= 0:
            return bytes(line)


def _peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def serve(directory: Path, idle_s: float, timeout_s: float, key: str, read_s: float = READ_S) -> int:
    """The launcher: takes the lock, forks the server, returns at once."""
    os.umask(0o077)
    private_dir(directory)
    lock_fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0   # another server lives
    if os.fork():
        return 0
    os.ftruncate(lock_fd, 0)
    os.write(lock_fd, f"{os.getpid()}\n".encode())
    try:
        _run(directory, idle_s, timeout_s, read_s, key)
    finally:
        os._exit(0)


def _run(directory: Path, idle_s: float, timeout_s: float, read_s: float, key: str) -> None:
    from kdiag.analysis.spark import session
    from kdiag.analysis.warm_practice import Practice

    # The first request's parsers and analysis are imported while the JVM
    # starts, which leaves a core idle for it; imported after it, they were
    # on the first replay's path (0.4 s of CPU, mostly pyarrow's compute
    # kernels under kdiag.ingest.tables).
    threading.Thread(target=_preload, name="kdiag-preload", daemon=True).start()
    # C1 only, as in-process: measured on 2 cores (bench/RESULTS.md), a
    # server with C2 as well took 20.3 s against 11.4 s on first use, and
    # its next five replays of each small input were slower (excerpt
    # median 4.0 against 2.2 s).
    spark = session("kdiag-warm", small=True)
    path = directory / SOCKET_NAME
    # We hold the lock: whatever socket is there is a dead server's.
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    os.chmod(path, 0o600)
    listener.listen(16)
    practice = Practice(spark, directory)
    practice.clear()   # we hold the lock: these are a dead server's
    try:
        _Serving(spark, idle_s, timeout_s, read_s, key, practice).loop(listener)
    finally:
        practice.close()
        listener.close()
        path.unlink(missing_ok=True)
        spark.stop()


def _preload() -> None:
    try:
        import kdiag.analysis.job  # noqa: F401
        import kdiag.bundle.verify  # noqa: F401
        import kdiag.ingest.tables  # noqa: F401
    except Exception:  # noqa: BLE001 - the request that needs them imports them again, and fails in its own words
        pass


class _BadRequest(Exception):
    """The request is not one a kdiag client sends; the message says how, in one line."""


class _Serving:
    """The server's loop: accepts on the main thread, serves each connection
    on a thread of its own; the analyses (and the practice's bookkeeping)
    under one lock."""

    def __init__(self, spark, idle_s: float, timeout_s: float, read_s: float, key: str, practice) -> None:
        self.spark, self.idle_s, self.timeout_s, self.read_s, self.key = spark, idle_s, timeout_s, read_s, key
        self.practice = practice
        # Once per server: the class archive's recording, when there is none.
        self.archive_tried = False
        self.analysing = threading.Lock()
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.stopping = threading.Event()
        self.state = threading.Lock()
        self.waiting = 0   # analyses asked for and not yet answered
        self.last = time.monotonic()
        self._wake_r, self._wake_w = socket.socketpair()

    def loop(self, listener: socket.socket) -> None:
        try:
            while not self.stopping.is_set():
                with self.state:
                    quiet_s = self.idle_s if self.waiting else self.last + self.idle_s - time.monotonic()
                if quiet_s <= 0:
                    return   # idle
                ready = select.select([listener, self._wake_r], [], [], quiet_s)[0]
                if listener in ready:
                    self._accept(listener)
            # The analysis under way, if any, answers before the session stops.
            self.analysing.acquire(timeout=self.timeout_s)
        finally:
            self._wake_r.close()
            self._wake_w.close()

    def _accept(self, listener: socket.socket) -> None:
        try:
            conn, _ = listener.accept()
        except OSError as e:
            _log(f"cannot accept a connection: {e}")
            time.sleep(0.1)   # out of descriptors: let connections end
            return
        if not self.slots.acquire(blocking=False):
            with conn:
                _answer(conn, {"ok": False, "error": f"the analysis server is busy ({MAX_CONNECTIONS} "
                                                     "connections at once)"}, 1.0)
            return
        try:
            threading.Thread(target=self._connection, args=(conn,), daemon=True, name="kdiag-warm-conn").start()
        except RuntimeError as e:   # no thread to be had
            _log(f"cannot serve a connection: {e}")
            conn.close()
            self.slots.release()

    def _stop(self) -> None:
        self.stopping.set()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def _connection(self, conn: socket.socket) -> None:
        try:
            with conn:
                if _peer_uid(conn) != os.geteuid():
                    return
                try:
                    request = _request(_read_line(conn, MAX_REQUEST_BYTES, Deadline(self.read_s)))
                except socket.timeout:
                    _answer(conn, {"ok": False, "error": f"no request within {self.read_s:g} s"}, self.read_s)
                    return
                except _TooLong:
                    _answer(conn, {"ok": False, "error": f"the request is over {MAX_REQUEST_BYTES} bytes"},
                            self.read_s)
                    return
                except _BadRequest as e:
                    _answer(conn, {"ok": False, "error": f"bad request: {e}"}, self.read_s)
                    return
                self._serve(conn, request)
        except Exception as e:  # noqa: BLE001 - one connection's failure is not the server's
            _log(f"a connection failed: {type(e).__name__}: {e}")
        finally:
            self.slots.release()

    def _serve(self, conn: socket.socket, request: dict) -> None:
        op = request["op"]
        if op == "stop":
            _answer(conn, {"ok": True}, self.read_s)
            self._stop()
            return
        if request["key"] != self.key:
            _answer(conn, {"ok": False, "stale": True, "error": "the analysis server runs other code"}, self.read_s)
            self._stop()
            return
        with self.state:
            self.last = time.monotonic()
        if op == "ping":
            practice = self.practice
            _answer(conn, {"ok": True, "pid": os.getpid(), "practising": practice.practising(),
                           "practice": {"left": max(0, practice.left), "ran": practice.ran,
                                        "interrupted": practice.interrupted}}, self.read_s)
            return
        if op == "verify":
            # No Spark: not one of the analyses, which run one at a time.
            _answer(conn, _verify(request), self.read_s)
            return
        with self.state:
            self.waiting += 1
        try:
            while not self.analysing.acquire(timeout=0.2):
                if self.stopping.is_set():
                    _answer(conn, {"ok": False, "error": "the analysis server is stopping"}, self.read_s)
                    return
            try:
                if self.stopping.is_set():
                    _answer(conn, {"ok": False, "error": "the analysis server is stopping"}, self.read_s)
                    return
                self.practice.give_way()
                answer = _analyze(self.spark, request, self.timeout_s)
                # Kept before the answer: the client removes the tables then.
                copy = self.practice.keep(Path(request["tables"])) if answer.get("ok") else None
                if answer.get("ok") and not self.archive_tried:
                    self.archive_tried = True
                    record_archive_later(Path(request["tables"]), self.practice.dir)
                _answer(conn, answer, self.read_s)
                self.practice.begin(copy, request["meta"])
            finally:
                self.analysing.release()
        finally:
            with self.state:
                self.waiting -= 1
                self.last = time.monotonic()


_JSON_TYPES = {list: "array", str: "string", int: "number", float: "number", bool: "true or false",
               type(None): "null"}
# Each op's fields beyond op and key: (name, types, required).
_FIELDS = {
    "stop": (),
    "ping": (),
    "analyze": (("tables", str, True), ("meta", dict, False), ("raw", (list, type(None)), False),
                ("base", (str, type(None)), False)),
    "verify": (("path", str, True), ("limits", dict, True)),
}


def _request(line: bytes) -> dict:
    """The request on ``line``, checked field by field; _BadRequest if it
    is not one a kdiag client sends."""
    request = _decoded(line)
    if not isinstance(request, dict):
        raise _BadRequest(f"JSON {_JSON_TYPES.get(type(request), 'value')}, not an object")
    op = request.get("op")
    if not isinstance(op, str) or op not in _FIELDS:
        raise _BadRequest(f"op is not one of {', '.join(_FIELDS)}")
    if op != "stop" and not isinstance(request.get("key"), str):
        raise _BadRequest("key is not a string")
    for name, types, required in _FIELDS[op]:
        if name not in request and not required:
            continue
        if not isinstance(request.get(name), types):
            raise _BadRequest(f"{name} is {'missing' if name not in request else 'of the wrong type'}")
    if op == "analyze":
        _check_paths(request)
    if op == "verify":
        _check_verify(request)
    return request


def _decoded(line: bytes):
    try:
        request = json.loads(line)
    except UnicodeDecodeError:
        raise _BadRequest("not UTF-8") from None
    except ValueError as e:
        raise _BadRequest(f"not JSON ({e})") from None
    except RecursionError:
        request, deep = None, True
    else:
        deep = _deeper(request, MAX_DEPTH)
    if deep:
        # Python's json recurses, and so would printing what the analysis keeps of it.
        raise _BadRequest(f"nested deeper than {MAX_DEPTH}")
    return request


def _check_paths(request: dict) -> None:
    request.setdefault("meta", {})
    raw = request.get("raw") or []
    if not all(isinstance(p, str) for p in raw):
        raise _BadRequest("raw holds a path that is not a string")
    for p in [request["tables"], *raw, *([request["base"]] if request.get("base") is not None else [])]:
        _check_path(p)


def _check_path(p: str) -> None:
    if "\0" in p or not os.path.isabs(p):
        raise _BadRequest("a path is not absolute or holds a NUL")


def _check_verify(request: dict) -> None:
    from kdiag.bundle.limits import Limits

    _check_path(request["path"])
    limits, names = request["limits"], {f.name for f in dataclasses.fields(Limits)}
    if set(limits) != names or not all(type(v) is int and v > 0 for v in limits.values()):
        raise _BadRequest(f"limits are not {', '.join(sorted(names))}, each a number above 0")


def _verify(request: dict) -> dict:
    from kdiag.bundle.limits import Limits
    from kdiag.bundle.verify import verify
    from kdiag.parsers.registry import bundle_dirs

    try:
        return {"ok": True, "verification": verify(Path(request["path"]), Limits(**request["limits"])).to_dict(),
                "sources": list(bundle_dirs())}
    except Exception as e:  # noqa: BLE001 - the client verifies in its own process, where the error is its own
        return {"ok": False, "error": f"the verification failed in the server: {type(e).__name__}"}


def _deeper(value, limit: int) -> bool:
    """Whether ``value`` nests more than ``limit`` deep, looked at level by
    level: json's own parser and printer recurse."""
    level = [value]
    for _ in range(limit):
        level = [v for c in level if isinstance(c, (dict, list)) for v in (c.values() if isinstance(c, dict) else c)]
        if not level:
            return False
    return any(isinstance(c, (dict, list)) for c in level)


def _analyze(spark, request: dict, timeout_s: float) -> dict:
    from kdiag.analysis.job import analyze

    # A request that runs past the client's timeout may be hung: the client
    # has gone to analyse in-process, and the server must not hold the next
    # one's requests, so it ends itself (its JVM's watchdog follows).
    hung = threading.Timer(timeout_s, os._exit, args=(3,))
    hung.daemon = True
    hung.start()
    try:
        answer: dict = {"ok": True}
        if request.get("raw") is not None:
            from kdiag.ingest.tables import parse_paths

            base = request.get("base")
            parsed = parse_paths([Path(p) for p in request["raw"]], Path(request["tables"]),
                                 base=None if base is None else Path(base))
            answer["parsed"] = {"rows": parsed.rows, "paths": {k: str(v) for k, v in parsed.paths.items()},
                                "files": parsed.files, "notes": parsed.notes}
        answer["findings"] = analyze(spark, Path(request["tables"]), request.get("meta") or {})
        return answer
    except Exception as e:  # noqa: BLE001 - the client re-runs it in-process, where the error is its own
        return {"ok": False, "error": f"the analysis failed in the server: {type(e).__name__}: {e}".splitlines()[0]}
    finally:
        hung.cancel()


def _answer(conn: socket.socket, answer: dict, timeout_s: float) -> None:
    try:
        conn.settimeout(timeout_s)
        conn.sendall(json.dumps(answer, default=str).encode() + b"\n")
    except OSError:
        pass   # the client gave up or does not read; it analyses in-process


def record_archive_later(tables: Path, work: Path) -> subprocess.Popen | None:
    """The class archive's recording, when this Java and these jars have
    none yet: a copy of ``tables`` (a small input's, just analysed) in
    ``work``, analysed by a child at the lowest CPU priority that records
    and then removes the copy. Not when the cache's filesystem would keep
    less than class_archive.MIN_FREE_BYTES. The child outlives the server
    if it must (it ends by itself within class_archive.RECORD_TIMEOUT_S);
    returns it, or None."""
    import shutil

    archive = class_archive.current()
    if archive is None or archive.path.exists():
        return None
    cache = archive.path.parent
    class_archive.drop_dead_temps(cache)
    try:
        if shutil.disk_usage(cache).free < class_archive.MIN_FREE_BYTES:
            return None
        copy = work / f"archive-tables-{os.getpid()}"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(tables, copy)
    except OSError:
        return None
    import kdiag

    env = {**_server_env(), "KDIAG_SPARK_CDS": "write", "KDIAG_WARM": "0"}
    try:
        return subprocess.Popen([*kdiag.python_m(sys.modules[__name__]), "--record-archive", str(copy)], env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        shutil.rmtree(copy, ignore_errors=True)
        return None


def _record_archive(tables: Path) -> int:
    """The recording child: analyses ``tables`` (its own copy, removed at
    the end) in a small session that records the archive at exit."""
    import shutil
    import signal

    def late(signum, frame):
        raise SystemExit(1)   # the copy is removed, the JVM stopped

    try:
        os.nice(19)
        signal.signal(signal.SIGALRM, late)
        signal.signal(signal.SIGTERM, late)
        signal.alarm(class_archive.RECORD_TIMEOUT_S)
        archive = class_archive.current()
        if archive is None or not archive.writing:
            return 0
        with open(archive.path.parent / class_archive.LOCK_NAME, "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return 0   # another server's child is recording it
            from kdiag.analysis.job import analyze
            from kdiag.analysis.spark import session

            # session() registers the archive's seal for this process's exit.
            analyze(session("kdiag-class-archive", small=True), tables)
        return 0
    finally:
        shutil.rmtree(tables, ignore_errors=True)


def _log(msg: str) -> None:
    print(f"kdiag: warm server: {msg}".splitlines()[0], file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    import argparse

    if argv is None:
        from kdiag.no_pandas import skip_pandas_lookups

        skip_pandas_lookups()
    ap = argparse.ArgumentParser(prog="python -m kdiag.analysis.warm")
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--idle-s", type=float, default=IDLE_S)
    ap.add_argument("--timeout-s", type=float, default=REQUEST_TIMEOUT_S)
    ap.add_argument("--read-s", type=float, default=READ_S)
    ap.add_argument("--key", default=None)
    ap.add_argument("--record-archive", type=Path, help=argparse.SUPPRESS)   # record_archive_later's child
    a = ap.parse_args(argv)
    if a.record_archive is not None:
        return _record_archive(a.record_archive)
    try:
        return serve(a.dir or warm_dir(), a.idle_s, a.timeout_s, a.key or code_key(), a.read_s)
    except WarmUnavailable as e:
        print(f"kdiag: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
