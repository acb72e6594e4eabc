"""Redaction: the patterns for what looks like a secret, the one marker that replaces it, and
the functions that apply them. Shared by the ingest's metadata filter, ``diagnose`` (the
command line) and the renderers (report prose, command lines). No heavy imports: rendering a
saved result uses it."""

from __future__ import annotations

import re
from typing import Any

from traceinsight.util.safetext import UNSAFE_RE

#: what replaces a secret, everywhere (metadata, command lines, report prose)
REDACTED = "[redacted]"

SECRET_KEY_RE = re.compile(r"(?i)(token|secret|passw|key|auth|cookie|credential)")
#: credentials of known shapes (Hugging Face, GitHub, OpenAI-style, AWS, Slack, JWT)
_TOKENS = (
    r"hf_[A-Za-z0-9]{8,}|gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{16,}"
    r"|sk-[A-Za-z0-9_\-]{16,}|AKIA[0-9A-Z]{16}|xox[abprs]-[A-Za-z0-9\-]{8,}"
    r"|eyJ[\w\-]{8,}\.[\w\-]{8,}\.[\w\-]{8,}"
)
#: a token of a known shape anywhere in free text (report prose, command lines)
TOKEN_RE = re.compile(f"({_TOKENS})")
#: metadata values: tokens, and long hex or base64 blobs (keys, signatures)
SECRET_VALUE_RE = re.compile(
    f"({_TOKENS}"
    r"|(?<![A-Za-z0-9])[A-Fa-f0-9]{40,}(?![A-Za-z0-9])|(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{48,}={0,2})"
)
_HOME_RE = re.compile(r"(/home/|/Users/|/root/|C:\\Users\\)[^/\\\s\"']+")


def redact_text(text: str) -> str:
    """Replace credential-looking substrings with :data:`REDACTED` and home-directory user
    names with ``~``."""
    text = SECRET_VALUE_RE.sub(REDACTED, text)
    return _HOME_RE.sub(lambda m: m.group(1) + "~", text)


def redact_tokens(text: Any) -> str:
    """Free text that might quote trace content (report prose): tokens of known shapes only."""
    return TOKEN_RE.sub(REDACTED, str(text))


def redact_arg(arg: Any) -> str:
    """One command-line argument: tokens, and the value of a secret-named ``key=value``."""
    a = redact_tokens(arg)
    if "=" in a and SECRET_KEY_RE.search(a.split("=", 1)[0]):
        a = a.split("=", 1)[0] + "=" + REDACTED
    return a


#: credentials inside a URL (``https://user:password@host``)
_URL_CRED_RE = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s:@]+(?::[^/\s@]*)?@")
#: a whole argument (or ``key=`` value) that is a key: long hex, or base64 with mixed case
#: and digits; a path (``/a/b``, ``./x``, ``~/y``, anything with a dot-extension) never is
_BLOB_RE = re.compile(
    r"[A-Fa-f0-9]{40,}|(?=.*[0-9])(?=.*[a-z])(?=.*[A-Z])[A-Za-z0-9+/_\-]{40,}={0,2}"
)
#: an option that takes a secret as its next argument (``--api-key VALUE``, ``-p VALUE``)
_SECRET_OPTION_RE = re.compile(
    r"(?i)^--?[\w.\-]*(token|secret|password|passwd|key|auth|cookie|credentials?)$"
)


def _pathish(value: str) -> bool:
    """A file name or path: starts like one, or ends in a dot-extension."""
    return value.startswith(("/", "./", "../", "~")) or bool(
        re.search(r"\.[A-Za-z][A-Za-z0-9]{0,7}$", value)
    )


def _secretish(value: str) -> bool:
    return not _pathish(value) and bool(_BLOB_RE.fullmatch(value))


def redact_command(args: Any) -> list[str]:
    """A command line with its secrets redacted and its paths kept: tokens of known shapes,
    credentials in URLs, the value of a secret-named ``--key=value`` / ``key=value`` or of a
    secret-named option given as the next argument (``--api-key VALUE``), a whole argument
    that is a key (long hex or base64), home-directory user names (``/home/~``). A trace's
    path, however long, stays readable."""
    out: list[str] = []
    secret_next = False
    for raw in args or []:
        a = _URL_CRED_RE.sub(lambda m: m.group(1) + REDACTED + "@", redact_tokens(raw))
        name, eq, value = a.partition("=")
        if secret_next and not a.startswith("-"):
            a = REDACTED
        elif eq and SECRET_KEY_RE.search(name) and value and not _pathish(value):
            a = f"{name}={REDACTED}"
        elif _secretish(value if eq else a):
            a = f"{name}={REDACTED}" if eq else REDACTED
        secret_next = not eq and bool(_SECRET_OPTION_RE.match(a))
        out.append(_HOME_RE.sub(lambda m: m.group(1) + "~", a))
    return out


def redact_value(obj: Any, key: str = "") -> Any:
    """Recursively redact a JSON-like value: secret-named keys and secret-looking strings."""
    if key and SECRET_KEY_RE.search(key):
        return REDACTED
    if isinstance(obj, dict):
        return {str(k): redact_value(v, str(k)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact_value(v) for v in obj]
    if isinstance(obj, str):
        return redact_text(obj)
    return obj


# --- shape checks: trace strings that reach metadata and reports --------------------------------
# A value of a known kind must look like that kind; anything else (a host name planted in a
# device name, a password in a version field) is replaced, whatever patterns it matches.

_VERSION_RE = re.compile(r"^v?\d{1,6}(?:\.\d{1,6}){0,3}(?:[-+][A-Za-z0-9.]{1,16})?$")
_DEVICE_RE = re.compile(r"^(?=.{2,64}$)[A-Za-z0-9][A-Za-z0-9()]*(?:[ _.\-/+][A-Za-z0-9()]+)*$")
_NOT_A_DEVICE_RE = re.compile(
    r"(?i)[@=:\\]|https?|passw|secret|token|user|login|host|\b[a-z0-9-]+\.[a-z0-9-]+\.[a-z]{2,}\b"
)
_WORD_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]{0,31}$")
#: collective backends (torch.distributed and vendor plug-ins)
KNOWN_BACKENDS = frozenset(
    {
        "nccl",
        "gloo",
        "mpi",
        "ucc",
        "rccl",
        "hccl",
        "xccl",
        "ccl",
        "oneccl",
        "mccl",
        "cncl",
        "eccl",
        "smddp",
        "fake",
        "threaded",
        "undefined",
        "custom",
        "nvshmem",
    }
)
#: device kinds in "device:backend" lists (mtia:hccl,cpu:gloo)
_DEVICE_KINDS = frozenset(
    {"cpu", "cuda", "hip", "xpu", "mtia", "hpu", "npu", "privateuse1", "meta", "mps", "xla", "lazy"}
)
TIME_UNITS = frozenset({"ns", "us", "ms", "s"})
#: what replaces a value of the wrong shape
UNRECOGNISED = "[unrecognised]"


def strip_controls(text: str) -> str:
    """``text`` without control or bidi characters (newlines and tabs become spaces)."""
    return UNSAFE_RE.sub("", text).replace("\n", " ").replace("\t", " ")


#: what names the recording machine or its user in free text: e-mail-like user@host and
#: fully qualified host names
_MACHINE_RE = re.compile(
    r"[\w.+-]+@[\w-]+(?:\.[\w-]+)*"
    r"|\b(?:[A-Za-z0-9-]+\.){2,}(?:com|net|org|io|ai|dev|edu|gov|local|internal|lan|corp"
    r"|cloud|cluster|intra|[a-z]{2})\b"
)


def clean_text(value: Any, limit: int = 200) -> str:
    """Free text from a trace (a process or thread name): controls removed, secrets, user@host
    and host names redacted, cut to ``limit`` characters."""
    text = redact_text(strip_controls(str(value))[: limit * 2])
    return _MACHINE_RE.sub(REDACTED, text)[:limit]


def program_name(value: Any) -> str:
    """The program of a process name that may be a whole command line ("python3 train.py
    --token=..." -> "python3"): the first word's base name, cleaned like :func:`clean_text`.
    A command line's arguments (paths, settings, secrets) never leave the trace."""
    text = strip_controls(str(value)).strip()
    first = text.split(" ", 1)[0] if text else ""
    base = first.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    return clean_text(base, limit=64)


def version_value(value: Any) -> int | float | str | None:
    """A runtime/driver version: a number or dotted digits; anything else is unrecognised."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value if abs(value) < 10**12 else UNRECOGNISED
    if isinstance(value, float):
        return value if value == value and abs(value) < 1e12 else UNRECOGNISED
    text = str(value).strip()
    if _VERSION_RE.match(text):
        try:
            f = float(text)
            return int(f) if f.is_integer() else f
        except ValueError:
            return text
    return UNRECOGNISED


def device_name(value: Any) -> str:
    """A GPU's name ("NVIDIA H100 80GB HBM3"), or :data:`UNRECOGNISED` when it does not look
    like one (a host name, an address, a key=value, a token)."""
    text = str(value).strip()
    if not _DEVICE_RE.match(text) or _NOT_A_DEVICE_RE.search(text) or redact_text(text) != text:
        return UNRECOGNISED
    return text


def backend_name(value: Any) -> str:
    """A collective backend ("nccl", "mtia:hccl,cpu:gloo"): known names only."""
    text = str(value).strip().lower()
    parts = [p.strip() for p in text.split(",")] if text else []
    for p in parts:
        kind, _, name = p.rpartition(":")
        if name not in KNOWN_BACKENDS or (kind and kind not in _DEVICE_KINDS):
            return UNRECOGNISED
    return text if parts and len(text) <= 60 else UNRECOGNISED


def word(value: Any) -> str | None:
    """A one-word label (``Framework``: "pytorch"); None for anything else."""
    text = str(value).strip()
    return text if _WORD_RE.match(text) and redact_text(text) == text else None


def time_unit(value: Any) -> str | None:
    """``displayTimeUnit``: ns, us, ms or s; None for anything else."""
    return value if isinstance(value, str) and value in TIME_UNITS else None
