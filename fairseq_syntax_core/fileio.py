"""The pipeline's one input-validation layer for files, and its one way to write them.

Reading (:func:`read_lines`): the path must be a readable regular file; the bytes must be
UTF-8 (an error names the file, the line and the offending byte); a UTF-8 byte-order mark
at the start of the file, or at the start of a line of concatenated files, is dropped (it
is not text, and would otherwise become a token of the first sentence). Lines end at
``\\n`` only, with a ``\\r`` before it dropped, so line numbers are those of ``wc -l``,
``sed -n Np`` and fairseq.

Writing (:func:`atomic_write`): to a temporary file beside the target, renamed into place
only when complete, with the permissions of an ordinary file under the user's umask.
Temporary names carry their owner (:func:`~.interrupts.temp_tag`), so a file left by a
killed run is removed by the next one.
"""

import contextlib
import hashlib
import os
import re
import tempfile
import unicodedata
from typing import Callable, Iterable, Iterator, List, Optional, Sequence

from fairseq_syntax_core.errors import InputError
from .interrupts import remove_stale, removed_on_failure, signals_deferred, temp_tag

BOM = "\ufeff"
TMP_MARK = ".tmp-"


#: letters and symbols that draw nothing (Unicode categories Lo/So, so not caught by category)
_BLANK_GLYPHS = frozenset("\u115f\u1160\u3164\uffa0\u2800")


def is_visible(text: str) -> bool:
    """True when ``text`` holds a character that is drawn: not a space, control, format or blank glyph."""
    return any(unicodedata.category(c)[0] not in "CZ" and c not in _BLANK_GLYPHS for c in text)


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """What ``open(path, "w")`` would give: 0666 less the umask."""
    return 0o666 & ~current_umask()


def dir_mode() -> int:
    """What ``mkdir`` would give: 0777 less the umask."""
    return 0o777 & ~current_umask()


def check_input_file(path: str, what: str = "input file") -> None:
    """A readable regular file, or an :class:`InputError` saying what it is instead."""
    if not os.path.exists(path):
        raise InputError(path, None, f"{what} not found")
    if os.path.isdir(path):
        raise InputError(path, None, f"is a directory; expected the {what}")
    if not os.path.isfile(path):
        raise InputError(path, None, f"is not a regular file; expected the {what}")
    if not os.access(path, os.R_OK):
        raise InputError(path, None, f"{what} is not readable (permissions)")


def decode_utf8(data: bytes, path: str) -> str:
    """``data`` as text, or an error naming the line and byte that are not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        raise InputError(
            path, line,
            f"not UTF-8: byte 0x{data[error.start]:02x} at byte {column} of the line; the pipeline "
            "reads UTF-8 text (convert it first, e.g. iconv -f latin1 -t utf-8)",
        ) from None


def read_lines(path: str, what: str = "input file", max_chars: Optional[int] = None) -> List[str]:
    """The lines of a UTF-8 text file, without line ends and byte-order marks (see module doc);
    with ``max_chars``, a longer line is refused (one line naming it), before any further work."""
    check_input_file(path, what)
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise InputError(path, None, f"cannot read the {what}: {error.strerror}") from None
    text = decode_utf8(data, path)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final line end
    lines = [line[:-1] if line.endswith("\r") else line for line in _drop_boms(lines)]
    if max_chars is not None:
        for number, line in enumerate(lines, start=1):
            if len(line) > max_chars:
                raise InputError(path, number, f"a line of {len(line)} characters, longer than the {max_chars} a "
                                 f"{what} line may have (a runaway translation?)")
    return lines


def count_lines(path: str, what: str = "input file") -> int:
    """How many lines :func:`read_lines` would return, counted in bytes (no decoding, constant memory)."""
    check_input_file(path, what)
    count, last = 0, b"\n"
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                count += block.count(b"\n")
                last = block[-1:]
    except OSError as error:
        raise InputError(path, None, f"cannot read the {what}: {error.strerror}") from None
    return count + (last != b"\n")


def content_sha256(paths: Sequence[str]) -> str:
    """SHA-256 of the bytes of ``paths`` in order (each file's length first, so the cut between them counts)."""
    digest = hashlib.sha256()
    for path in paths:
        try:
            digest.update(f"{os.path.getsize(path)}:".encode())
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
        except OSError as error:
            raise InputError(path, None, f"cannot read the input file: {error.strerror}") from None
    return digest.hexdigest()


def lines_sha256(lines: Sequence[str]) -> str:
    """SHA-256 of ``lines`` as text read by :func:`read_lines` (each ended by ``\\n``, UTF-8): the same digest for
    a file saved with CRLF, a byte-order mark or no final line end, as :func:`read_lines` gives the same lines."""
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line.encode("utf-8", "surrogatepass") + b"\n")
    return digest.hexdigest()


def iter_lines(path: str, start: int = 0, stop: Optional[int] = None, what: str = "input file") -> Iterator[str]:
    """Lines ``start`` to ``stop`` (0-based, stop excluded) of a UTF-8 file, one at a time, as :func:`read_lines`.

    The same rules in constant memory: only ``\\n`` ends a line, a ``\\r`` before it and
    byte-order marks at line starts are dropped, bytes that are not UTF-8 are an error naming
    the line (of the whole file) and the byte.
    """
    check_input_file(path, what)
    try:
        with open(path, "rb") as handle:
            for number, raw in enumerate(handle):
                if stop is not None and number >= stop:
                    break
                if number < start:
                    continue
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    raise InputError(
                        path, number + 1,
                        f"not UTF-8: byte 0x{raw[error.start]:02x} at byte {error.start + 1} of the line; the "
                        "pipeline reads UTF-8 text (convert it first, e.g. iconv -f latin1 -t utf-8)",
                    ) from None
                if line.endswith("\n"):
                    line = line[:-1]
                if line.endswith("\r"):
                    line = line[:-1]
                yield line[1:] if line.startswith(BOM) else line
    except OSError as error:
        raise InputError(path, None, f"cannot read the {what}: {error.strerror}") from None


def _drop_boms(lines: List[str]) -> Iterable[str]:
    for line in lines:
        yield line[1:] if line.startswith(BOM) else line


def nonempty_lines(path: str, lines: List[str], first_line: int = 1) -> List[str]:
    """``lines`` (the first is line ``first_line`` of ``path``), or an error naming the first one that holds no sentence."""
    empty = next((i for i, line in enumerate(lines) if not line.strip()), None)
    if empty is not None:
        raise InputError(path, empty + first_line, "empty line: every line must hold a sentence")
    return lines


def check_output_path(path: str, inputs: Iterable[str] = (), flag: str = "--output") -> None:
    """An output file we may (re)place: a plain file or nothing, in a writable folder, never an input.

    The file is replaced by renaming a new one onto it, so a device (``/dev/null``), a FIFO or
    a symbolic link there would itself be replaced: those are refused.
    """
    if not path or not path.strip():
        raise InputError(repr(path), None, f"{flag} is empty: name the file to write")
    if os.path.islink(path):
        raise InputError(path, None, f"is a symbolic link; {flag} names the file to write (give the file it points to)")
    if os.path.isdir(path):
        raise InputError(path, None, f"is a directory; {flag} names the file to write")
    if os.path.exists(path) and not os.path.isfile(path):
        raise InputError(path, None, f"is not a regular file (a device or a pipe); {flag} names a file to (re)place")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        blocking = file_in_the_way(folder)
        if blocking is not None:
            raise InputError(path, None, f"cannot write here: {blocking} is a file, not a folder")
        raise InputError(path, None, f"cannot write here: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(path, None, f"cannot write here: folder {folder} is not writable")
    if len(os.path.basename(path)) > 200:
        raise InputError(path[:60] + "...", None, f"{flag} file name is longer than 200 characters")
    target = os.path.realpath(path)
    for source in inputs:
        if not source:
            continue
        same = os.path.realpath(source) == target or (
            os.path.exists(source) and os.path.exists(path) and os.path.samefile(source, path))
        if same:
            raise InputError(path, None, f"{flag} is the input file {source}: choose another name")


def file_in_the_way(folder: str) -> Optional[str]:
    """The path that keeps ``folder`` from being a folder: ``folder`` itself, or the nearest of its parents that
    exists, when that is a file (or anything but a folder); None when the folder exists or could be made."""
    existing = os.path.abspath(folder)
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    return None if os.path.isdir(existing) else existing


def make_output_folder(path: str) -> List[str]:
    """Make the folder of output ``path`` and its parents, or an :class:`InputError` naming a file in the way;
    returns the folders made, deepest first (for :func:`remove_empty_folders` when the command fails)."""
    folder = os.path.dirname(path)
    if not folder:
        return []
    blocking = file_in_the_way(folder)
    if blocking is not None:
        raise InputError(path, None, f"cannot write here: {blocking} is a file, not a folder")
    made, missing = [], os.path.abspath(folder)
    while not os.path.exists(missing):
        made.append(missing)
        missing = os.path.dirname(missing)
    os.makedirs(folder, exist_ok=True)
    return made


def remove_empty_folders(folders: Iterable[str]) -> None:
    """Remove ``folders`` (deepest first) where still empty: those a failed command made for its outputs."""
    for folder in folders:
        try:
            os.rmdir(folder)
        except OSError:  # not empty (someone wrote there), or gone
            return


def text_writer(chunks: Iterable[str]) -> Callable[[str], None]:
    """A writer of UTF-8 text, chunk by chunk (for :func:`atomic_write_with` and :func:`atomic_write_all`)."""

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as handle:
            for chunk in chunks:
                handle.write(chunk)

    return write


def atomic_write(path: str, chunks: Iterable[str]) -> None:
    """Write text to ``path`` through a temporary file renamed into place when complete."""
    atomic_write_with(path, text_writer(chunks))


def atomic_write_with(path: str, write: Callable[[str], None]) -> None:
    """Call ``write(tmp)`` on a temporary file beside ``path``; rename it into place when complete.

    For writers that take a path (subword-nmt, matplotlib). The temporary file is removed if
    ``write`` fails or the process is interrupted.
    """
    atomic_write_all([(path, write)])


def atomic_write_all(outputs: Sequence["tuple[str, Callable[[str], None]]"]) -> None:
    """Several outputs of one command, written whole or not at all.

    Each ``write(tmp)`` fills a temporary file beside its ``path``; only when every one is
    complete are they renamed into place, with Ctrl-C/SIGTERM/SIGHUP held meanwhile, so an
    interrupt or an error leaves the old files (or none), never a new JSON beside an old plot.
    """
    with contextlib.ExitStack() as owned:
        done = []
        for path, write in outputs:
            folder = os.path.dirname(os.path.abspath(path))
            base = os.path.basename(path)
            remove_stale(folder, [f".{base}{TMP_MARK}"])
            suffix = os.path.splitext(base)[1]
            try:
                fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{base}{TMP_MARK}{temp_tag()}-", suffix=suffix)
            except OSError as error:  # /proc, a read-only mount: the folder takes no new file beside the output
                raise InputError(path, None, f"cannot write here: the folder {folder} takes no new file "
                                             f"({error.strerror or error})") from None
            try:
                os.close(fd)
                owned.enter_context(removed_on_failure(tmp))
                write(tmp)
                os.chmod(tmp, file_mode())
            except OSError as error:  # disk full, read-only...: name the user's file, not the temporary one
                named = error.filename
                ours = named is None or named == folder or (isinstance(named, str) and
                                                             os.path.basename(named).startswith(f".{base}{TMP_MARK}"))
                if error.strerror and ours:
                    raise OSError(error.errno, error.strerror, path) from error
                raise
            done.append((tmp, path))
        with signals_deferred():
            for tmp, path in done:
                os.replace(tmp, path)


def check_distinct_outputs(outputs: Sequence["tuple[str, Optional[str]]"]) -> None:
    """Refuse two output flags that name one file (also through a symbolic link to a folder)."""
    seen = {}
    for flag, path in outputs:
        if not path:
            continue
        real = os.path.realpath(path)
        if real in seen:
            raise InputError(path, None, f"{flag} and {seen[real]} name the same file: choose two names")
        seen[real] = flag


def is_inside(path: str, folder: str) -> bool:
    """``path`` is ``folder`` or lies below it (symbolic links resolved)."""
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def check_outside(path: str, folder: str, flag: str, what: str) -> None:
    """Refuse an output inside ``folder`` (a data-bin, a checkpoint folder): files there are the user's inputs."""
    if is_inside(path, folder):
        raise InputError(path, None, f"{flag} is inside {what} {folder}, whose files this command reads: "
                         "write it elsewhere")


# ------------------------------------------------------------------ files we read back
_DICT_LINE = re.compile(r"^(\S+) (\d{1,18})( #fairseq:overwrite)?$")  # a count Python converts (fairseq parses it)
_DICTIONARY_SPECIALS = frozenset({"<s>", "<pad>", "</s>", "<unk>"})


def _no_bom(path: str, what: str) -> None:
    with open(path, "rb") as handle:
        if handle.read(3) == BOM.encode("utf-8"):
            raise InputError(path, 1, f"starts with a byte-order mark, which fairseq would read as part of the "
                                      f"first symbol of this {what}: remove it")


def check_dictionary_file(path: str, what: str = "dictionary") -> None:
    """A fairseq dictionary file: ``SYMBOL COUNT [#fairseq:overwrite]`` per line, each symbol once."""
    check_input_file(path, what)
    _no_bom(path, what)
    seen = {}
    for number, line in enumerate(read_lines(path, what), start=1):
        match = _DICT_LINE.match(line)
        if not match:
            raise InputError(
                path, number,
                f"not a fairseq {what} line: expected 'SYMBOL COUNT', found {line[:60]!r}",
            )
        symbol, overwrite = match.group(1), match.group(3)
        if symbol in _DICTIONARY_SPECIALS and not overwrite:
            raise InputError(path, number, f"{symbol!r} is one of fairseq's special symbols, which a dictionary file does not list")
        if symbol in seen:
            raise InputError(path, number, f"{symbol!r} is listed twice (first on line {seen[symbol]})")
        seen[symbol] = number


def check_bpe_codes(path: str, remedy: str = "learn them with --bpe-symbols") -> None:
    """subword-nmt codes: an optional ``#version:`` header, then one merge ``A B`` per line (``remedy``:
    where to get codes, said when there are none)."""
    lines = read_lines(path, "BPE codes file")
    _no_bom(path, "BPE codes file")
    if not [line for line in lines if not line.startswith("#version:")]:
        raise InputError(path, None, f"holds no merges: expected subword-nmt codes ({remedy})")
    for number, line in enumerate(lines, start=1):
        if number == 1 and line.startswith("#version:"):
            continue
        if len(line.split(" ")) != 2 or not all(line.split(" ")):
            raise InputError(
                path, number,
                f"not a subword-nmt codes line: expected two symbols separated by one space "
                f"(a merge), found {line[:60]!r}",
            )
