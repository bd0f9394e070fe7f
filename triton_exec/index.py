"""Typed index and mask expressions of a generated kernel, and their one renderer.

A kernel's index math (tile indices, slice/pad/cat shifts, offsets, boundaries, masks) is built
from small frozen nodes, never from strings. Constants are folded when a node is built (so
`cols - 4 + 4` is `cols`, `0 >= 1` is False), and each node knows

- `deps`: what it depends on: "pid", "row_arange", "col_arange" (the tile) and the names of the
  runtime integers it reads. No tile dependency = one value per program (a per-tile scalar);
  no dependency at all = a constant; only runtime integers = a value the host knows;
- `bits`: 32 or 64, the integer width Triton computes it in;
- `divisor`: a power of two (up to 2**30) known to divide it;
- `lo`, `hi`: bounds (lo inclusive, hi exclusive; None when not known). A sum or product whose
  bound can reach 2**31 is built in int64 (its tile operands widened first).

`Renderer` turns nodes into Triton source: each offset product, outer index and compound mask is
bound to one name the first time it is needed (equal nodes are one node: common subexpressions
come for free), and every compound value the host knows is handed to `hoist` (the launcher
computes it) instead of being computed in the kernel. Masks are conjunctions of `idx < bound` /
`idx >= bound` atoms; atoms decided by the bounds are dropped (always true) or make the whole
mask False.
"""
from __future__ import annotations

import dataclasses
import math

INT32_LIMIT = 2 ** 31
DIVISOR_LIMIT = 2 ** 30
TILE = frozenset({"pid", "row_arange", "col_arange", "fcol_arange"})   # fcol: pair tiling's full tile


def _pow2_divisor(n: int) -> int:
    n = abs(n)
    return DIVISOR_LIMIT if n == 0 else min(n & -n, DIVISOR_LIMIT)


class Expr:
    """An integer index expression (base class). Subclasses are frozen dataclasses."""

    deps: frozenset
    bits: int
    divisor: int
    lo: int | None
    hi: int | None

    @property
    def tiled(self) -> bool:
        """Whether it varies across the tile (depends on an arange or the program id)."""
        return bool(self.deps & TILE)

    @property
    def host_known(self) -> bool:
        """Whether the host can compute it: it reads runtime integers only."""
        return not self.deps & TILE

    def __add__(self, other):
        return add(self, other)

    def __radd__(self, other):
        return add(other, self)

    def __sub__(self, other):
        return add(self, mul(other, -1))

    def __mul__(self, other):
        return mul(self, other)

    def __rmul__(self, other):
        return mul(other, self)

    def __floordiv__(self, other):
        return floordiv(self, other)

    def __mod__(self, other):
        return mod(self, other)


def _derived(node, deps, bits, divisor, lo, hi):
    for k, v in (("deps", deps), ("bits", bits), ("divisor", divisor), ("lo", lo), ("hi", hi)):
        object.__setattr__(node, k, v)


@dataclasses.dataclass(frozen=True)
class Const(Expr):
    value: int

    def __post_init__(self):
        v = self.value
        _derived(self, frozenset(), 32 if -INT32_LIMIT <= v < INT32_LIMIT else 64,
                 _pow2_divisor(v), v, v + 1)


@dataclasses.dataclass(frozen=True)
class Leaf(Expr):
    """A named value of the kernel: a tile index (`rows`, `cols`) or a runtime integer parameter
    (already multiplied back by its `divisor` when it arrives divided)."""

    name: str
    deps: frozenset = dataclasses.field(compare=False)
    bits: int = dataclasses.field(default=32, compare=False)
    divisor: int = dataclasses.field(default=1, compare=False)
    lo: int | None = dataclasses.field(default=0, compare=False)
    hi: int | None = dataclasses.field(default=None, compare=False)
    source: object = dataclasses.field(default=None, compare=False)    # what the host reads


@dataclasses.dataclass(frozen=True)
class Sum(Expr):
    """const + sum of coef * term; terms are non-constant, distinct, with nonzero coefficients."""

    terms: tuple        # ((Expr, int), ...)
    const: int = 0

    def __post_init__(self):
        deps = frozenset().union(*(t.deps for t, _ in self.terms))
        bits = max([t.bits for t, _ in self.terms] + [Const(self.const).bits])
        divisor = math.gcd(_pow2_divisor(self.const),
                           *(t.divisor * _pow2_divisor(c) for t, c in self.terms))
        lo = hi = self.const
        for t, c in self.terms:
            a, b = _scale_bounds(t, c)
            lo = None if lo is None or a is None else lo + a
            hi = None if hi is None or b is None else hi + b - 1
        _derived(self, deps, bits, min(divisor, DIVISOR_LIMIT), lo,
                 None if hi is None else hi + 1)


@dataclasses.dataclass(frozen=True)
class Prod(Expr):
    """a * b of two non-constant expressions."""

    a: Expr
    b: Expr

    def __post_init__(self):
        lo = hi = None
        if None not in (self.a.lo, self.a.hi, self.b.lo, self.b.hi):
            corners = [x * y for x in (self.a.lo, self.a.hi - 1) for y in (self.b.lo, self.b.hi - 1)]
            lo, hi = min(corners), max(corners) + 1
        _derived(self, self.a.deps | self.b.deps, max(self.a.bits, self.b.bits),
                 min(self.a.divisor * self.b.divisor, DIVISOR_LIMIT), lo, hi)


@dataclasses.dataclass(frozen=True)
class FloorDiv(Expr):
    a: Expr
    b: Expr

    def __post_init__(self):
        hi = None
        if self.a.hi is not None and self.b.lo:
            hi = (self.a.hi - 1) // self.b.lo + 1
        divisor = 1
        if isinstance(self.b, Const) and self.b.value > 0 and self.a.divisor % self.b.value == 0:
            divisor = self.a.divisor // self.b.value
        _derived(self, self.a.deps | self.b.deps, max(self.a.bits, self.b.bits), divisor,
                 0 if _nonneg(self.a) else None, hi)


@dataclasses.dataclass(frozen=True)
class Mod(Expr):
    a: Expr
    b: Expr

    def __post_init__(self):
        _derived(self, self.a.deps | self.b.deps, max(self.a.bits, self.b.bits), 1,
                 0 if _nonneg(self.a) else None, self.b.hi - 1 if self.b.hi is not None else None)


@dataclasses.dataclass(frozen=True)
class Wide(Expr):
    """`a.to(tl.int64)`."""

    a: Expr

    def __post_init__(self):
        _derived(self, self.a.deps, 64, self.a.divisor, self.a.lo, self.a.hi)


def _nonneg(e) -> bool:
    return e.lo is not None and e.lo >= 0


def _scale_bounds(t, c):
    lo = None if t.lo is None else t.lo * c
    hi = None if t.hi is None else (t.hi - 1) * c + 1
    return (lo, hi) if c >= 0 else (None if hi is None else hi - 1,
                                    None if lo is None else lo + 1)


def as_expr(x) -> Expr:
    return x if isinstance(x, Expr) else Const(int(x))


def _overflows32(e) -> bool:
    """Whether e's known bounds pass int32 (unknown bounds are the guards' to keep)."""
    return ((e.hi is not None and e.hi > INT32_LIMIT)
            or (e.lo is not None and e.lo < -INT32_LIMIT))


def widen(e: Expr) -> Expr:
    """e computed in int64 (a constant stays a Python int; a sum widens its terms)."""
    if isinstance(e, Const) or e.bits == 64:
        return e
    if isinstance(e, Sum):
        return Sum(tuple((widen(t), c) for t, c in e.terms), e.const)
    return Wide(e)


def _terms(e):
    if isinstance(e, Const):
        return [], e.value
    if isinstance(e, Sum):
        return list(e.terms), e.const
    return [(e, 1)], 0


def add(*xs) -> Expr:
    """The folded sum of xs (ints or Exprs); in int64 when its bounds can reach 2**31."""
    coefs: dict = {}
    const = 0
    for x in xs:
        terms, c = _terms(as_expr(x))
        const += c
        for t, k in terms:
            coefs[t] = coefs.get(t, 0) + k
    terms = tuple((t, k) for t, k in coefs.items() if k)
    if not terms:
        return Const(const)
    if len(terms) == 1 and terms[0][1] == 1 and const == 0:
        return terms[0][0]
    s = Sum(terms, const)
    if s.bits == 32 and s.tiled and _overflows32(s):
        s = Sum(tuple((widen(t), k) for t, k in terms), const)
    return s


def mul(a, b) -> Expr:
    """The folded product; constants scale a sum's coefficients. In int64 when it can overflow."""
    a, b = as_expr(a), as_expr(b)
    if isinstance(a, Const):
        a, b = b, a
    if isinstance(b, Const):
        if b.value == 0:
            return Const(0)
        terms, const = _terms(a)
        return add(Sum(tuple((t, k * b.value) for t, k in terms), const * b.value)
                   if terms else Const(const * b.value))
    p = Prod(a, b)
    if p.bits == 32 and p.tiled and _overflows32(p):
        p = Prod(widen(a), widen(b))
    return p


def _split_multiple(a: Expr, k: int, live_nonneg: bool):
    """(q, r) with a == k * q + r, q the terms of a whose coefficients k divides (and the
    constant's quotient), r the rest; None unless both are non-negative (so Triton's truncating
    `//` and `%` agree with Python's): known from the bounds, or for q, where `live_nonneg` says
    a >= 0 wherever its value is used (a >= 0 and 0 <= r give q >= 0)."""
    terms, const = _terms(a)
    q = add(*(mul(t, c // k) for t, c in terms if c % k == 0), const // k)
    r = add(*(mul(t, c) for t, c in terms if c % k), const % k)
    return (q, r) if (_nonneg(q) or live_nonneg) and _nonneg(r) else None


def floordiv(a, b, live_nonneg: bool = False) -> Expr:
    """a // b, folded: a sum k * q + r with 0 <= r < k divided by k is q. `live_nonneg`: a is
    non-negative on every lane where the result is used (masks drop the others), which is true
    of the linear index through a reshape, whose bounds alone do not show it."""
    a, b = as_expr(a), as_expr(b)
    if isinstance(b, Const) and b.value in (0, 1):   # by 0: an empty domain, never launched
        return a if b.value else Const(0)
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(a.value // b.value)
    if _nonneg(a) and a.hi is not None and b.lo is not None and a.hi <= b.lo:
        return Const(0)
    if _one_step(a, b):
        return Const(a.lo // b.value)
    split = _split_multiples(a, b)
    if split is not None:
        multiples, rest, q = split
        return add(_divided(multiples, b.value), q)
    if isinstance(a, Sum) and isinstance(b, Const) and b.value > 1:
        split = _split_multiple(a, b.value, live_nonneg)
        if split is not None and split[1] != a:
            q, r = split
            return add(q, floordiv(r, b))
    return FloorDiv(a, b)


def mod(a, b, live_nonneg: bool = False) -> Expr:
    """a % b, folded: the multiples of a constant b in a sum drop out (`live_nonneg`: as for
    `floordiv`)."""
    a, b = as_expr(a), as_expr(b)
    if isinstance(b, Const) and b.value in (0, 1):
        return Const(0)
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(a.value % b.value)
    if _nonneg(a) and a.hi is not None and b.lo is not None and a.hi <= b.lo:
        return a
    if _one_step(a, b):
        return add(a, -(a.lo // b.value) * b.value)
    split = _split_multiples(a, b)
    if split is not None:
        _, rest, q = split
        return add(rest, -q * b.value)
    if isinstance(a, Sum) and isinstance(b, Const) and b.value > 1:
        split = _split_multiple(a, b.value, live_nonneg)
        if split is not None and split[1] != a:
            return mod(split[1], b)
    return Mod(a, b)


def _one_step(a: Expr, b: Expr) -> bool:
    """Whether a >= 0 lies between two multiples of a constant b > 1 (`cols` of the column
    chunk [32, 64) divided by 32: 1, remainder `cols - 32`)."""
    return (isinstance(b, Const) and b.value > 1 and _nonneg(a) and a.hi is not None
            and a.lo // b.value == (a.hi - 1) // b.value)


def _split_multiples(a: Expr, b: Expr):
    """For a >= 0 and a constant b > 0: (multiples, rest, q) when a = multiples + rest with every
    term of `multiples` a nonnegative multiple of b and `rest`'s bounds within [q*b, (q+1)*b):
    then a // b = multiples / b + q and a % b = rest - q*b. A column index bounded to a chunk
    that one multiple of b does not cross divides so (`(cols + o1 * 128) % 32` is `cols - 32`
    over columns [32, 64)). None otherwise."""
    if not isinstance(b, Const) or b.value <= 1 or not isinstance(a, Sum):
        return None
    d = b.value
    multiples = [(t, k) for t, k in a.terms if k % d == 0 and k > 0 and _nonneg(t)]
    if not multiples:
        return None
    rest = add(*(mul(t, k) for t, k in a.terms if (t, k) not in multiples), a.const)
    if rest.lo is None or rest.hi is None or rest.lo < 0:
        return None
    q = rest.lo // d
    if (rest.hi - 1) // d != q:
        return None
    return Sum(tuple(multiples)), rest, q


def _divided(multiples: Expr, d: int) -> Expr:
    return add(*(mul(t, k // d) for t, k in multiples.terms))


def threshold(atom: "Less", leaf: Expr):
    """c when the atom is `leaf + k < K` or `leaf + k >= K` with constants k, K (c = K - k: the
    atom changes value between leaf = c - 1 and c); else None."""
    terms, const = _terms(add(atom.a, mul(atom.b, -1)))
    return -const if terms == [(leaf, 1)] else None


def period(division, leaf: Expr):
    """(d, c) when `division` is `(leaf + m + k) // d` or `% d` with a constant d, a constant k
    and m a sum of multiples of d (its value changes in steps where leaf + k crosses a multiple
    of d: at leaf = j*d - k); else None."""
    if not isinstance(division.b, Const) or division.b.value <= 1:
        return None
    d = division.b.value
    terms, const = _terms(division.a)
    if (leaf, 1) not in terms or any(k % d for t, k in terms if t != leaf):
        return None
    return d, const


def aligned_run(inner: Expr, mask: "Mask", leaf: Expr) -> int:
    """The largest power of two that divides `inner` less `leaf` and every mask threshold along
    `leaf` (an atom `leaf + e < b` or `>= b`: b - e): the lanes of `leaf` (an arange) run in
    aligned groups of it over which `inner` is contiguous and the mask constant, as Triton
    proves it; 1 where an atom along `leaf` has another form."""
    g = add(inner, mul(leaf, -1)).divisor
    walks = leaf.deps - {"pid"}
    for atom in mask.atoms:
        if not (atom.a.deps | atom.b.deps) & walks:
            continue
        if coefficient(atom.a, leaf) != 1 or atom.b.tiled:
            return 1
        g = math.gcd(g, add(atom.b, mul(add(atom.a, mul(leaf, -1)), -1)).divisor)
    return g


def coefficient(e: Expr, leaf: Expr) -> int:
    """The coefficient of `leaf` in e when no other part of e varies with what `leaf` walks (its
    arange; the program id is one value per program, so `rows` does not vary along `cols`)."""
    terms, _ = _terms(e)
    walks = leaf.deps & TILE - {"pid"}
    found = 0
    for t, k in terms:
        if t == leaf:
            found = k
        elif t.deps & walks:
            return 0
    return found


# ---- masks ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Less:
    """The atom `a < b` (or `a >= b` when `negated`)."""

    a: Expr
    b: Expr
    negated: bool = False

    def decided(self):
        """True or False when the bounds decide the atom, else None."""
        d = add(self.a, mul(self.b, -1))
        if d.hi is not None and d.hi <= 0:
            return not self.negated
        if d.lo is not None and d.lo >= 0:
            return self.negated
        return None


@dataclasses.dataclass(frozen=True)
class Mask:
    """A conjunction of atoms; `Mask(())` is always true, `FALSE` never."""

    atoms: tuple = ()
    false: bool = False

    def __and__(self, other: "Mask") -> "Mask":
        if self.false or other.false:
            return FALSE
        atoms = self.atoms + tuple(a for a in other.atoms if a not in self.atoms)
        if _empty(atoms):
            return FALSE
        return Mask(atoms)

    @property
    def deps(self) -> frozenset:
        return frozenset().union(*(a.a.deps | a.b.deps for a in self.atoms))


TRUE = Mask(())
FALSE = Mask((), True)


def _empty(atoms) -> bool:
    """Whether two atoms exclude each other: `a < b` and `a >= c` on one index with b <= c
    (known from the bounds of c - b), as an empty cat piece's mask does."""
    below = [x for x in atoms if not x.negated]
    for x in atoms:
        if x.negated:
            for y in below:
                if y.a == x.a and (d := add(x.b, mul(y.b, -1))).lo is not None and d.lo >= 0:
                    return True
    return False


def less(a, b) -> Mask:
    return _atom(Less(as_expr(a), as_expr(b)))


def at_least(a, b) -> Mask:
    return _atom(Less(as_expr(a), as_expr(b), negated=True))


def _atom(atom: Less) -> Mask:
    decided = atom.decided()
    if decided is None:
        return Mask((atom,))
    return TRUE if decided else FALSE


# ---- rendering -----------------------------------------------------------------------------

class Renderer:
    """Renders nodes to Triton source, emitting named bindings into `lines` as they are needed.

    `fresh(prefix)` gives a new kernel-local name; `hoist(expr)` turns a compound value the host
    knows into the name of a kernel parameter that the launcher computes; `use(leaf)` is told of
    every leaf written.
    """

    def __init__(self, lines: list, fresh, hoist, use=lambda leaf: None):
        self.lines, self.fresh, self.hoist, self.use = lines, fresh, hoist, use
        self.names: dict = {}           # node or Mask -> its kernel name
        self.masks: list = []           # (Mask, name) bound so far, for conjunctions
        self.atoms: list = []           # every atom written, in order (for column boundaries)
        self.divisions: list = []       # every FloorDiv and Mod written (for column periods)

    def bind(self, e, name: str, comment: str = "") -> str:
        """Binds e (an Expr or a Mask) to `name` (if not bound already); returns its name."""
        if e in self.names:
            return self.names[e]
        src = self.mask(e) if isinstance(e, Mask) else self._compound(e)
        self.lines.append(f"{name} = {src}" + (f"  # {comment}" if comment else ""))
        self.names[e] = name
        if isinstance(e, Mask):
            self.masks.append((e, name))
        return name

    def expr(self, e: Expr, top: bool = False) -> str:
        """Source of e (parenthesized unless `top` or atomic)."""
        if e in self.names:
            return self.names[e]
        if isinstance(e, Const):
            return str(e.value) if top or e.value >= 0 else f"({e.value})"
        if isinstance(e, Leaf):
            self.use(e)
            return e.name
        if e.host_known:
            return self.hoist(e)
        if isinstance(e, Wide):
            return f"{self.expr(e.a)}.to(tl.int64)"
        if isinstance(e, Prod) and (any(isinstance(x, Wide) for x in (e.a, e.b)) or e.tiled and any(
                isinstance(x, Leaf) and not x.tiled for x in (e.a, e.b))):
            return self.bind(e, self.fresh("p"))    # an index times a runtime stride: once
        if isinstance(e, (FloorDiv, Mod)):
            self.divisions.append(e)
            return self.bind(e, self.fresh("r"))
        src = self._compound(e)
        return src if top else f"({src})"

    def _compound(self, e) -> str:
        if isinstance(e, Wide):
            return f"{self.expr(e.a)}.to(tl.int64)"
        if isinstance(e, Prod):
            return f"{self.expr(e.a, isinstance(e.a, Prod))} * {self.expr(e.b)}"
        if isinstance(e, FloorDiv):
            return f"{self.expr(e.a)} // {self.expr(e.b)}"
        if isinstance(e, Mod):
            return f"{self.expr(e.a)} % {self.expr(e.b)}"
        return render_sum(e, lambda t: self.expr(t, top=True))

    def mask(self, m: Mask) -> str:
        """Source of a mask: the largest bound mask it extends, `&` the atoms it adds."""
        if m.false:
            return "False"
        if m in self.names:
            return self.names[m]
        parts, rest = [], list(m.atoms)
        for bound, name in sorted(self.masks, key=lambda bn: -len(bn[0].atoms)):
            if bound.atoms and set(bound.atoms) <= set(m.atoms) and set(bound.atoms) & set(rest):
                parts.append(name)
                rest = [a for a in rest if a not in bound.atoms]
        parts += [f"({self.atom(a)})" for a in rest]
        return " & ".join(parts) or "True"

    def atom(self, a: Less) -> str:
        self.atoms.append(a)
        return f"{self.expr(a.a)} {'>=' if a.negated else '<'} {self.expr(a.b)}"


def render_sum(e, operand) -> str:
    """`t0 + t1 * 2 - t2 + 3`: a Sum rendered with `operand(term)` for its terms (a product,
    quotient or remainder needs no parentheses in a sum)."""
    out = ""
    for t, k in e.terms:
        src = operand(t) if abs(k) == 1 else f"{operand(t)} * {abs(k)}"
        out += (src if not out and k > 0 else f"-{src}" if not out
                else f" + {src}" if k > 0 else f" - {src}")
    if e.const:
        out += f" + {e.const}" if e.const > 0 else f" - {-e.const}"
    return out


def leaves(e: Expr) -> list:
    """The leaves of e, each once, in order of appearance."""
    if isinstance(e, Leaf):
        return [e]
    if isinstance(e, Sum):
        children = [t for t, _ in e.terms]
    elif isinstance(e, Wide):
        children = [e.a]
    elif isinstance(e, Prod | FloorDiv | Mod):
        children = [e.a, e.b]
    else:
        children = []
    out = []
    for c in children:
        out += [leaf for leaf in leaves(c) if leaf not in out]
    return out


def render_host(e: Expr, name_of, top: bool = False) -> str:
    """Python source of a host-known expression for the launcher; `name_of(leaf)` names leaves
    (parenthesized unless `top` or atomic)."""
    if isinstance(e, Const):
        return str(e.value) if top or e.value >= 0 else f"({e.value})"
    if isinstance(e, Leaf):
        return name_of(e)
    if isinstance(e, Wide):
        return render_host(e.a, name_of, top)
    if isinstance(e, Sum):
        src = render_sum(e, lambda t: render_host(t, name_of, top=True))
    elif isinstance(e, Prod):
        src = f"{render_host(e.a, name_of, isinstance(e.a, Prod))} * {render_host(e.b, name_of)}"
    else:
        op = {Prod: "*", FloorDiv: "//", Mod: "%"}[type(e)]
        src = f"{render_host(e.a, name_of)} {op} {render_host(e.b, name_of)}"
    return src if top else f"({src})"


def evaluate(e: Expr, value_of) -> int:
    """The value of a host-known expression; `value_of(leaf)` gives each leaf's value."""
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Leaf):
        return value_of(e)
    if isinstance(e, Wide):
        return evaluate(e.a, value_of)
    if isinstance(e, Sum):
        return e.const + sum(k * evaluate(t, value_of) for t, k in e.terms)
    a, b = evaluate(e.a, value_of), evaluate(e.b, value_of)
    return {Prod: a * b, FloorDiv: a // b if b else 0, Mod: a % b if b else 0}[type(e)]
