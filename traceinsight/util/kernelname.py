"""Short readable kernel names for tables: a simplifier of demangled C++ template names.

``void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16,
c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*,
3ul> >(int, …)`` reads ``vectorized_elementwise<MulFunctor<bf16>>``: no return type, no argument
list, no namespaces, no integer or boolean template arguments, no plumbing arguments
(``std::array``, offset calculators, load/store policies), the wrappers of a functor reduced
to the functor with its data type, a lambda named by the function that defines it, and the
scalar types short (``c10::BFloat16`` → ``bf16``, ``c10::Half`` → ``fp16``, ``float`` →
``fp32``). Names that are not C++ templates (Triton, NCCL, cuBLAS, Tensile) stay as they are.

:func:`short_names` gives a set of names distinct short names: kernels that the simplifier
would merge keep their integer arguments, and when that is not enough either, a ``#2``, ``#3``
suffix in order of first appearance. The full name stays in JSON and CSV (``top --wide`` shows
it in the terminal).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from traceinsight.util.fmt import short_kernel_name

#: the longest short name before its deepest template arguments are collapsed to ``…``
MAX_LEN = 48
#: the characters of a name that are read (a trace's name may be any length)
MAX_INPUT = 2048
#: template levels simplified (deeper ones read ``…``)
MAX_DEPTH = 12

#: scalar types as the table shows them
TYPES = {
    "c10::BFloat16": "bf16",
    "at::BFloat16": "bf16",
    "__hip_bfloat16": "bf16",
    "__nv_bfloat16": "bf16",
    "cutlass::bfloat16_t": "bf16",
    "bfloat16": "bf16",
    "c10::Half": "fp16",
    "at::Half": "fp16",
    "__half": "fp16",
    "cutlass::half_t": "fp16",
    "half": "fp16",
    "float": "fp32",
    "double": "fp64",
    "c10::Float8_e4m3fn": "fp8e4m3",
    "c10::Float8_e5m2": "fp8e5m2",
    "long": "i64",
    "long long": "i64",
    "unsigned long": "u64",
    "int": "i32",
    "unsigned int": "u32",
    "short": "i16",
    "signed char": "i8",
    "unsigned char": "u8",
    "c10::complex<float>": "c64",
    "c10::complex<double>": "c128",
}
_SCALARS = set(TYPES.values()) | {"bool", "char"}

#: wrappers shown as the functor they carry (its last non-scalar argument)
_UNWRAP = {"gpu_kernel_impl", "gpu_kernel_impl_nocast", "func_wrapper_t", "Kernel2", "Kernel"}
#: wrappers of a functor with the data type first: shown as ``Functor<dtype>``
_FUNCTOR_WRAPPERS = {"BinaryFunctor", "AUnaryFunctor", "BUnaryFunctor", "ReduceOp"}
#: template arguments that say how, not what: dropped
_NOISE = re.compile(
    r"^(std::array|(\w+::)*Array|(\w+::)*(Trivial)?OffsetCalculator|(\w+::)*LoadWithCast|(\w+::)*StoreWithCast"
    r"|(\w+::)*LoadWithoutCast|(\w+::)*StoreWithoutCast|(\w+::)*TensorListMetadata"
    r"|(\w+::)*DefaultPtrTraits|(\w+::)*RestrictPtrTraits)\b"
)
_LITERAL = re.compile(r"^(\(.*\))?-?(\d+[uUlL]*|true|false|0x[0-9a-fA-F]+)$")
_OPEN = {"<": ">", "(": ")", "{": "}", "[": "]"}
_CLOSE = {v: k for k, v in _OPEN.items()}


def _split(s: str, sep: str) -> list[str]:
    """``s`` split at ``sep`` outside brackets (``operator()`` and ``{lambda()#1}`` included)."""
    out, depth, start, i = [], 0, 0, 0
    while i < len(s):
        c = s[i]
        if s.startswith("operator()", i):
            i += len("operator()")
            continue
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth = max(0, depth - 1)
        elif depth == 0 and s.startswith(sep, i):
            out.append(s[start:i])
            i += len(sep)
            start = i
            continue
        i += 1
    out.append(s[start:])
    return [x.strip() for x in out]


def _head_args(comp: str) -> tuple[str, list[str] | None, str | None]:
    """A name component as (base name, its template arguments, its parameter list)."""
    params = None
    if comp.endswith(")") and not comp.endswith("operator()"):
        depth = 0
        for i in range(len(comp) - 1, -1, -1):
            if comp[i] == ")":
                depth += 1
            elif comp[i] == "(":
                depth -= 1
                if depth == 0:
                    comp, params = comp[:i], comp[i + 1 : -1]
                    break
    lt = comp.find("<")
    if lt > 0 and comp.endswith(">"):
        return comp[:lt].strip(), _split(comp[lt + 1 : -1], ","), params
    return comp.strip(), None, params


def _scalar(t: str) -> str | None:
    t = re.sub(r"\b(const|volatile)\b", "", t).replace("&", "").replace("*", "")
    t = " ".join(t.split())
    if t in TYPES:
        return TYPES[t]
    return t if t in _SCALARS else None


def _render(base: str, args: list[str]) -> str:
    return f"{base}<{', '.join(args)}>" if args else base


def _uniq(xs: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(xs))


def _expr(e: str, keep_ints: bool, depth: int = 0) -> str | None:
    """One type or value expression simplified; None when it is dropped. Below
    :data:`MAX_DEPTH` template levels an expression reads ``…``."""
    if depth > MAX_DEPTH:
        return "…"
    e = " ".join(e.split())
    e = re.sub(r"\s*\b(const|volatile)\s*$", "", e).rstrip("&* ")
    if not e or _LITERAL.match(e):
        return e if keep_ints and e and "(" not in e else None
    scalar = _scalar(e)
    if scalar is not None:
        return scalar
    if _NOISE.match(e):
        return None
    comps = [c for c in _split(e, "::") if c]
    lam = next((i for i, c in enumerate(comps) if c.startswith("{lambda")), None)
    if lam is not None:  # a lambda: named by the function that defines it
        owner = [c for c in comps[:lam] if not c.startswith("operator()")]
        if not owner:
            return "lambda"
        base, targs, _ = _head_args(owner[-1])
        if base in _UNWRAP and targs:  # gpu_kernel_impl<Functor>(…)::{lambda(int)#1}
            return _expr(_render(base, targs), keep_ints, depth + 1)
        base = re.sub(r"(_kernel)?(_impl)?(_cuda)?$", "", base) or base
        inner = comps[-1] if comps[-1].startswith("{lambda") else comps[lam]
        m = re.match(r"\{lambda\((.*)\)#\d+\}", inner)
        types = [_scalar(p) for p in _split(m.group(1), ",")] if m and m.group(1) else []
        shown = [t for t in types if t] or [
            x for x in (_expr(a, keep_ints, depth + 1) for a in targs or []) if x and x in _SCALARS
        ]
        return _render(base, _uniq(shown))
    comps = [c for c in comps if not c.startswith("operator()")] or comps
    base, targs, _ = _head_args(comps[-1])
    if base.startswith("(") or not base:
        return None if not keep_ints else e
    args = [x for x in (_expr(a, keep_ints, depth + 1) for a in targs or []) if x]
    functors = [a for a in args if a not in _SCALARS]
    if base in _UNWRAP:
        return functors[-1] if functors else _render(base, _uniq(args))
    if base in _FUNCTOR_WRAPPERS and functors:
        dtype = args[0] if args[0] in _SCALARS else None
        f_base, _, _ = _head_args(functors[-1])
        if dtype:
            return _render(f_base, [dtype])
        return functors[-1] if "<" in functors[-1] else f_base
    return _render(base, _uniq(args))


def _collapse(name: str, limit: int) -> str:
    """``name`` with its deepest template argument lists replaced by ``…`` until it fits."""
    while len(name) > limit:
        best: tuple[int, int, int] | None = None  # (depth, start, end)
        stack: list[int] = []
        for i, c in enumerate(name):
            if c == "<":
                stack.append(i)
            elif c == ">" and stack:
                start = stack.pop()
                if name[start + 1 : i] != "…" and (best is None or len(stack) > best[0]):
                    best = (len(stack), start, i)
        if best is None:
            break
        name = name[: best[1] + 1] + "…" + name[best[2] :]
    return name


def _balanced(s: str) -> str:
    """A name cut short inside its brackets (a trace's length limit) with them closed."""
    stack: list[str] = []
    for c in s:
        if c in _OPEN:
            stack.append(_OPEN[c])
        elif c in _CLOSE and stack and stack[-1] == c:
            stack.pop()
    return s + "".join(reversed(stack))


def _mangled(name: str) -> str | None:
    """The last identifier of an Itanium-mangled nested name (``_ZN5aiter3fooI…`` → ``foo<…>``)."""
    pos, last, s = 0, None, name[3:] if name.startswith("_ZN") else name[2:]
    while pos < len(s) and s[pos].isdigit():
        n = re.match(r"\d+", s[pos:])
        assert n is not None
        ln = int(n.group(0))
        pos += len(n.group(0))
        last = s[pos : pos + ln]
        pos += ln
    if not last:
        return None
    return last + ("<…>" if s[pos : pos + 1] == "I" else "")


def simplify(name: str, *, keep_ints: bool = False, limit: int = MAX_LEN) -> str:
    """The short readable form of one kernel name (see the module's description)."""
    raw = " ".join(str(name).split())
    if raw.startswith("_Z"):
        return _mangled(raw) or raw
    if "<" not in raw and "::" not in raw and " " in raw.split("(")[0].strip():
        return raw  # not a C signature: "Memcpy DtoH (Device -> Pinned)"
    s = short_kernel_name(_balanced(raw[:MAX_INPUT])).replace("(anonymous namespace)::", "")
    s = s.strip()
    if "<" not in s and "::" not in s:
        return s
    natives = raw.startswith(("void at::native::", "void (anonymous namespace)::", "at::native::"))
    try:
        out = _expr(s, keep_ints) or s
    except RecursionError:  # a hostile nesting depth: the name as it is
        return _collapse(s, limit)
    if natives:
        out = re.sub(r"^(\w*?)_kernel", r"\1", out, count=1)
    return _collapse(out, limit)


def short_names(names: Iterable[str]) -> dict[str, str]:
    """A distinct short name for each distinct name of ``names`` (in their order)."""
    full = _uniq(str(n) for n in names)
    out = {n: simplify(n) for n in full}
    for keep_ints, limit in ((True, MAX_LEN), (True, 10 * MAX_LEN)):
        groups: dict[str, list[str]] = {}
        for n in full:
            groups.setdefault(out[n], []).append(n)
        clashes = [g for g in groups.values() if len(g) > 1]
        if not clashes:
            return out
        for g in clashes:
            for n in g:
                out[n] = simplify(n, keep_ints=keep_ints, limit=limit)
    seen: dict[str, int] = {}
    counts: dict[str, int] = {}
    for n in full:
        counts[out[n]] = counts.get(out[n], 0) + 1
    for n in full:
        s = out[n]
        if counts[s] > 1:
            seen[s] = seen.get(s, 0) + 1
            out[n] = f"{s} #{seen[s]}"
    return out
