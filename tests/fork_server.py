"""Runs the installed commands of the end-to-end tests without paying their imports each time.

Every installed command (``fairseq-train``, ``fairseq-syntax-preprocess``, ...) spends about 4 s of
CPU importing torch, fairseq (which imports scikit-learn and every task) and spaCy before it does
anything; the suite starts a few hundred of them. This server imports those libraries once, then
runs each request in a fork of itself: the child gets the caller's working directory, environment
and standard streams (passed as file descriptors over the socket), sets ``sys.path[0]`` to the
script's folder as a console script would, and runs the installed script as ``__main__``. Nothing of
the plugin is imported before the fork, so every command imports the installed ``fairseq_syntax``
(or whatever ``--user-dir`` names) itself, as a fresh process would.

Started by ``tests/conftest.py`` (one per test worker, ``PYTHONPATH`` empty, outside the checkout);
``FORK_SERVER=0`` runs every command as a fresh process instead. Commands whose import-time
environment (``PYTHON*``, locale, thread counts) differs from the server's are not sent here.

    python tests/fork_server.py SOCKET_PATH
"""
import array
import atexit
import ctypes
import importlib.util
import json
import logging
import os
import random
import runpy
import select
import signal
import socket
import sys
import tempfile
import threading
import traceback

#: requests are small JSON lines; the three standard streams travel as file descriptors
MAX_REQUEST = 1 << 20


def _preload() -> None:
    """Imports whose cost every command pays. Nothing that a command's own module runs at import
    (fairseq_cli's logging set-up, the plugin's registrations) is imported here."""
    import numpy  # noqa: F401
    import torch  # noqa: F401
    import fairseq  # noqa: F401  (not fairseq_cli: its modules configure logging when imported)
    import sacrebleu  # noqa: F401
    import spacy  # noqa: F401


def _configures_logging_first(script: str) -> bool:
    """Whether the module a console script runs calls ``logging.basicConfig`` at import before it
    imports fairseq (fairseq-train, -interactive, -preprocess do; fairseq-generate does not)."""
    source = _module_source(_script_module(script))
    configure = source.find("\nlogging.basicConfig(")
    imports = [i for i in (source.find("\nfrom fairseq"), source.find("\nimport fairseq")) if i >= 0]
    return configure >= 0 and (not imports or configure < min(imports))


def _script_module(script: str) -> str:
    try:
        with open(script, encoding="utf-8") as handle:
            return next(l.split()[1] for l in handle if l.startswith("from ") and "cli_main" in l)
    except (OSError, StopIteration, IndexError):
        return ""


def _module_source(module: str) -> str:
    try:
        spec = importlib.util.find_spec(module)
        with open(spec.origin, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, ImportError, AttributeError, ValueError, TypeError):
        return ""


#: script -> whether importing its module imports fairseq (asked once per script, in a fresh process)
_imports_fairseq: dict = {}


def _script_imports_fairseq(script: str) -> bool:
    """In the server, before the fork: a fresh process of a command whose module does not import
    fairseq has no logging set up until the command does it itself."""
    module = _script_module(script)
    if module.startswith(("fairseq_cli.", "fairseq_syntax.")):  # fairseq itself, or the plugin's registrations
        return True
    if module not in _imports_fairseq:
        import subprocess

        probe = subprocess.run([sys.executable, "-c", f"import sys, {module}; print('fairseq' in sys.modules)"],
                               capture_output=True, text=True, cwd=os.path.dirname(script))
        _imports_fairseq[module] = probe.stdout.strip() != "False"
    return _imports_fairseq[module]


def _fresh_logging(script: str, imports_fairseq: bool) -> None:
    """Root logging as a fresh process of ``script`` has it once its imports are done: configured by
    the script's own module, or by the ``logging.basicConfig`` that importing fairseq runs
    (fairseq/tasks/text_to_speech.py), or not at all."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)
    if imports_fairseq and not _configures_logging_first(script):
        logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s",
                            datefmt="%Y-%m-%d %H:%M:%S", level=logging.INFO)


def _receive(conn: socket.socket):
    fds = array.array("i")
    data, ancdata, _, _ = conn.recvmsg(MAX_REQUEST, socket.CMSG_LEN(3 * fds.itemsize))
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    while not data.endswith(b"\n"):
        more = conn.recv(MAX_REQUEST)
        if not more:
            break
        data += more
    return json.loads(data.decode("utf-8")), list(fds)


def _die_with_parent() -> None:
    """SIGKILL when the parent dies (Linux): the server with its test worker, a command with its waiter."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _run_child(request: dict, fds, imports_fairseq: bool) -> None:
    """In the fork: become the command, then exit with its status as the interpreter would (never returns)."""
    code = 1
    try:
        _die_with_parent()
        for number in request.get("ignored_signals", []):  # what the caller ignores, as exec keeps it
            signal.signal(number, signal.SIG_IGN)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # TMPDIR as the caller has it
        random.seed()  # a fresh process's random state, not the server's
        try:
            import numpy

            numpy.random.seed()
        except ImportError:  # pragma: no cover
            pass
        argv = request["argv"]
        sys.argv = list(argv)
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
        threads = request["env"].get("OMP_NUM_THREADS")
        if threads and threads.isdigit():
            import torch

            torch.set_num_threads(int(threads))
        _fresh_logging(argv[0], imports_fairseq)
        code = 0
        try:
            runpy.run_path(argv[0], run_name="__main__")
        except SystemExit as stop:
            if stop.code is None:
                code = 0
            elif isinstance(stop.code, int):
                code = stop.code
            else:
                print(stop.code, file=sys.stderr)
                code = 1
        except BaseException:  # noqa: B902 - uncaught: the interpreter's report (sys.excepthook), status 1
            sys.excepthook(*sys.exc_info())
            code = 1
        threading._shutdown()  # non-daemon threads are joined, as at a normal exit
        atexit._run_exitfuncs()
    except BaseException:  # noqa: B902
        traceback.print_exc()
        code = code or 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - the interpreter exits 120 when it cannot flush
                code = code or 120
        os._exit(code & 0xFF)


def _wait(conn: socket.socket, request: dict, fds, imports_fairseq: bool) -> None:
    """In a fork of the server, one per request: forks the command, tells the client its pid and
    then its exit status; kills it if the client goes away first (never returns)."""
    code = 1
    try:
        _die_with_parent()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        pid = os.fork()
        if pid == 0:
            conn.close()
            _run_child(request, fds, imports_fairseq)
        for fd in fds:
            os.close(fd)
        conn.sendall(f"{pid}\n".encode())
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            readable, _, _ = select.select([conn], [], [], 0.2)
            if readable and not conn.recv(1):  # the client is gone: so is its command
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                os._exit(0)
        conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
        code = 0
    except BaseException:  # noqa: B902
        pass
    os._exit(code)


def serve(path: str) -> None:
    sys.path.pop(0)  # this file's folder (the checkout's tests/) is not a command's
    _die_with_parent()
    _preload()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # waiters are reaped by the kernel
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:  # one waiter per request: commands may run side by side and start each other
        conn, _ = server.accept()
        with conn:
            try:
                request, fds = _receive(conn)
                imports_fairseq = _script_imports_fairseq(request["argv"][0])
            except (OSError, ValueError, KeyError, IndexError):
                continue
            if os.fork() == 0:
                server.close()
                _wait(conn, request, fds, imports_fairseq)
            for fd in fds:
                os.close(fd)


# ------------------------------------------------------------------ the client (test workers)

#: environment variables read at import time: a command whose values differ runs as a fresh process
IMPORT_TIME_PREFIXES = ("PYTHON", "LC_", "LANG", "OMP_", "MKL_", "KMP_", "OPENBLAS", "NUMEXPR", "CUDA", "TORCH",
                        "PYTORCH", "TQDM", "LOGLEVEL", "SPACY")

_server = None  # (process, socket path, environment) of this worker's server; False once it failed


def _import_time_env(env: dict) -> dict:
    """The variables a fork cannot change after the imports (a child applies OMP_NUM_THREADS itself)."""
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME_PREFIXES) and k != "OMP_NUM_THREADS"}


def _start(env: dict):
    global _server
    if _server is None:
        import atexit as _atexit
        import shutil
        import subprocess
        import tempfile

        folder = tempfile.mkdtemp(prefix="fork-server-")
        path = os.path.join(folder, "socket")
        process = subprocess.Popen([sys.executable, os.path.abspath(__file__), path], cwd=folder, env=env,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        ready = process.stdout.readline()
        if ready.strip() != b"ready":
            process.kill()
            _server = False
        else:
            _server = (process, path, _import_time_env(env))

        def stop():
            process.kill()
            process.wait()
            shutil.rmtree(folder, ignore_errors=True)

        _atexit.register(stop)
    return _server or None


def _is_console_script(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            first = handle.readline()
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first and os.path.dirname(first[2:].strip()) == os.path.dirname(
        sys.executable).encode()


def run(args, cwd, env: dict, stdin=None, timeout: float = 600):
    """``subprocess.run(args, cwd=cwd, env=env, input=stdin, capture_output=True, text=True,
    timeout=timeout)``, by fork from this worker's server when ``args[0]`` is an installed console
    script of this Python and ``FORK_SERVER`` is not 0; otherwise (or if the server is gone) as a fresh
    process."""
    import locale
    import subprocess

    args = [str(a) for a in args]
    server = None
    # a relative script or a missing working directory: subprocess.run's own resolution and errors
    if (os.environ.get("FORK_SERVER", "1") != "0" and os.path.isabs(args[0]) and os.path.isdir(str(cwd))
            and _is_console_script(args[0])):
        server = _start(dict(os.environ, PYTHONPATH=""))
    if server is None or _import_time_env(env) != server[2] or server[0].poll() is not None:
        return subprocess.run(args, cwd=cwd, input=stdin, capture_output=True, text=True, env=env,
                              timeout=timeout)
    with tempfile.TemporaryFile() as given, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        given.write((stdin or "").encode("utf-8"))
        given.seek(0)
        request = json.dumps({"argv": args, "cwd": os.path.abspath(str(cwd)), "env": dict(env)}) + "\n"
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(server[1])
            conn.sendmsg([request.encode("utf-8")],
                         [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [given.fileno(), out.fileno(),
                                                                                   err.fileno()]))])
            conn.settimeout(timeout)
            replies = conn.makefile("rb")
            try:
                pid, code = replies.readline(), replies.readline()
                if not pid or not code:
                    raise RuntimeError(f"the fork server ({server[1]}) gave no answer for {args}")
                code = int(code)
            except (socket.timeout, TimeoutError):
                raise subprocess.TimeoutExpired(args, timeout) from None  # closing kills the command
        finally:
            conn.close()
        texts = []
        for handle in (out, err):  # decoded as subprocess.run(text=True) does (strict, universal newlines)
            handle.seek(0)
            texts.append(handle.read().decode(locale.getpreferredencoding(False)).replace("\r\n", "\n")
                         .replace("\r", "\n"))
    return subprocess.CompletedProcess(args, code, texts[0], texts[1])


SHIM = """#!{python} -S
# runs {script} by fork from a test worker's server (tests/fork_server.py); written by the tests
import sys
sys.path.insert(0, {tests!r})
import fork_server
fork_server.forward({script!r}, {socket!r}, {env!r})
"""


def shims(folder) -> str:
    """A folder of stand-ins for this Python's console scripts, to put first on the ``PATH`` of a
    shell recipe: each forwards its arguments, environment, working directory and standard streams to
    this worker's server (signals to the child). Without a server, the folder is empty."""
    os.makedirs(folder, exist_ok=True)
    if os.environ.get("FORK_SERVER", "1") == "0":
        return str(folder)
    server = _start(dict(os.environ, PYTHONPATH=""))
    if server is None:
        return str(folder)
    bin_dir = os.path.dirname(sys.executable)
    for name in sorted(os.listdir(bin_dir)):
        script = os.path.join(bin_dir, name)
        if name.startswith("python") or not _is_console_script(script):
            continue
        shim = os.path.join(folder, name)
        with open(shim, "w", encoding="utf-8") as handle:
            handle.write(SHIM.format(python=sys.executable, script=script, socket=server[1], env=server[2],
                                     tests=os.path.dirname(os.path.abspath(__file__))))
        os.chmod(shim, 0o755)
    return str(folder)


def forward(script: str, path: str, server_env: dict) -> None:
    """The body of a shim: run ``script`` with this process's arguments by the server, exit as it did.
    Falls back to exec'ing the script when the server is gone or the import-time environment differs.
    A shim killed by any signal closes its connection, and the waiter kills the command."""
    argv = [script, *sys.argv[1:]]
    forwarded = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    ignored = [n for n in forwarded if signal.getsignal(n) == signal.SIG_IGN]  # nohup, `cmd &`: kept
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    signal.pthread_sigmask(signal.SIG_BLOCK, forwarded)  # until the command's pid is known
    try:
        if _import_time_env(dict(os.environ)) != server_env:
            raise OSError("another import-time environment")
        conn.connect(path)
        request = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ),
                              "ignored_signals": [int(n) for n in ignored]}) + "\n"
        conn.sendmsg([request.encode("utf-8")], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
        replies = conn.makefile("rb")
        pid = int(replies.readline())
    except (OSError, ValueError):
        conn.close()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, forwarded)
        os.execv(script, argv)
    for number in forwarded:
        if number not in ignored:
            signal.signal(number, lambda received, _frame: os.kill(pid, received))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, forwarded)
    code = int(replies.readline() or -signal.SIGKILL)  # no status: the waiter was killed
    if code < 0:  # killed by a signal: so is this stand-in, as the caller would have seen
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    serve(sys.argv[1])
