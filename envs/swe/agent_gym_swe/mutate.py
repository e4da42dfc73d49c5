"""Bugs by program mutation: AST-level changes of one expression or statement of a source file.

:func:`mutation_sites` lists every place in a module's functions where an operator applies;
:func:`apply_mutation` rewrites only that node's source span (the rest of the file keeps its bytes,
comments and layout), so the bug is a small diff. Operators:

- ``flip_comparison``: ``<`` <-> ``>=``, ``<=`` <-> ``>``, ``==`` <-> ``!=``, ``in`` <-> ``not in``, ``is`` <-> ``is not``;
- ``off_by_one``: an integer constant ``n`` -> ``n + 1`` or ``n - 1``;
- ``change_constant``: ``True`` <-> ``False``, a string constant emptied (docstrings never);
- ``swap_operator``: ``+`` <-> ``-``, ``*`` <-> ``/`` (``//``), ``and`` <-> ``or``;
- ``negate_condition``: the test of an ``if`` / ``while`` / conditional expression negated;
- ``remove_branch``: an ``if`` without ``else`` deleted, or an ``else`` block deleted;
- ``swap_arguments``: the first two positional arguments of a call swapped;
- ``remove_call_statement``: a bare call statement (``x.append(y)``) deleted.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

__all__ = ["OPERATORS", "Mutation", "apply_mutation", "mutation_sites"]

OPERATORS = (
    "flip_comparison", "off_by_one", "change_constant", "swap_operator", "negate_condition",
    "remove_branch", "swap_arguments", "remove_call_statement",
)
_FLIP = {ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.LtE: ast.Gt, ast.Gt: ast.LtE, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
         ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.Div: ast.Mult, ast.FloorDiv: ast.Mult}


@dataclass(frozen=True)
class Mutation:
    """One mutation: the operator, where (the node's span: 1-based lines, byte columns) and a variant."""

    operator: str
    lineno: int
    col: int
    end_lineno: int
    end_col: int
    variant: int = 0
    function: str = ""

    def describe(self) -> str:
        return f"{self.operator} at line {self.lineno} in {self.function or 'module'}"


def _functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                out.add(id(first.value))
    return out


def _span(node: ast.AST) -> tuple[int, int, int, int]:
    return node.lineno, node.col_offset, node.end_lineno or node.lineno, node.end_col_offset or 0  # type: ignore[attr-defined]


def mutation_sites(source: str) -> list[Mutation]:
    """Every mutation that applies inside the functions of ``source`` (a module's text), in order."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    seen: set[tuple] = set()
    out: list[Mutation] = []

    def add(op: str, node: ast.AST, fn: str, variant: int = 0) -> None:
        key = (op, *_span(node), variant)
        if key not in seen:
            seen.add(key)
            out.append(Mutation(op, *_span(node), variant=variant, function=fn))

    for fn in _functions(tree):
        for node in ast.walk(fn):
            if isinstance(node, ast.Compare) and type(node.ops[0]) in _FLIP:
                add("flip_comparison", node, fn.name)
            elif isinstance(node, ast.Constant) and id(node) not in docs:
                if isinstance(node.value, bool):
                    add("change_constant", node, fn.name)
                elif isinstance(node.value, int) and 0 <= node.value < 1000:
                    add("off_by_one", node, fn.name, 0)
                    if node.value > 0:
                        add("off_by_one", node, fn.name, 1)
                elif isinstance(node.value, str) and node.value and "\n" not in node.value and len(node.value) < 40:
                    add("change_constant", node, fn.name)
            elif isinstance(node, ast.BinOp) and type(node.op) in _SWAP:
                add("swap_operator", node, fn.name)
            elif isinstance(node, ast.BoolOp):
                add("swap_operator", node, fn.name)
            elif isinstance(node, (ast.If, ast.While, ast.IfExp)):
                add("negate_condition", node.test, fn.name)
                if isinstance(node, ast.If):
                    if not node.orelse:
                        add("remove_branch", node, fn.name, 0)
                    elif not (len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)):
                        add("remove_branch", node, fn.name, 1)
            elif isinstance(node, ast.Call) and len(node.args) >= 2 and not any(isinstance(a, ast.Starred) for a in node.args[:2]):
                add("swap_arguments", node, fn.name)
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                add("remove_call_statement", node, fn.name)
    return out


def _find(tree: ast.AST, m: Mutation, types: tuple) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, types) and hasattr(node, "lineno") and _span(node) == (m.lineno, m.col, m.end_lineno, m.end_col):
            return node
    raise ValueError(f"no node for {m}")


def _replace_span(source: str, m: Mutation, text: str) -> str:
    lines = source.encode("utf-8").splitlines(keepends=True)
    start = sum(len(x) for x in lines[: m.lineno - 1]) + m.col
    end = sum(len(x) for x in lines[: m.end_lineno - 1]) + m.end_col
    data = source.encode("utf-8")
    return (data[:start] + text.encode("utf-8") + data[end:]).decode("utf-8")


def _delete_lines(source: str, first: int, last: int, block: list[ast.stmt]) -> str:
    lines = source.splitlines(keepends=True)
    keep = lines[: first - 1] + lines[last:]
    if not [s for s in block if not (s.lineno >= first and (s.end_lineno or s.lineno) <= last)]:
        indent = lines[first - 1][: len(lines[first - 1]) - len(lines[first - 1].lstrip())]
        keep = lines[: first - 1] + [indent + "pass\n"] + lines[last:]
    return "".join(keep)


def _parent_block(tree: ast.AST, node: ast.AST) -> list[ast.stmt]:
    for parent in ast.walk(tree):
        for name in ("body", "orelse", "finalbody"):
            block = getattr(parent, name, None)
            if isinstance(block, list) and any(s is node for s in block):
                return block
    return []


def apply_mutation(source: str, m: Mutation) -> str:
    """``source`` with ``m`` applied; raises ``ValueError`` when the result would not parse."""
    tree = ast.parse(source)
    op = m.operator
    if op == "flip_comparison":
        node = _find(tree, m, (ast.Compare,))
        assert isinstance(node, ast.Compare)
        node.ops = [_FLIP[type(node.ops[0])](), *node.ops[1:]]
        new = _replace_span(source, m, ast.unparse(node))
    elif op == "off_by_one":
        node = _find(tree, m, (ast.Constant,))
        assert isinstance(node, ast.Constant) and isinstance(node.value, int)  # the sites are integer constants
        new = _replace_span(source, m, repr(node.value + (1 if m.variant == 0 else -1)))
    elif op == "change_constant":
        node = _find(tree, m, (ast.Constant,))
        assert isinstance(node, ast.Constant)
        new = _replace_span(source, m, repr(not node.value) if isinstance(node.value, bool) else "''")
    elif op == "swap_operator":
        node = _find(tree, m, (ast.BinOp, ast.BoolOp))
        if isinstance(node, ast.BinOp):
            node.op = _SWAP[type(node.op)]()
        else:
            assert isinstance(node, ast.BoolOp)
            node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        new = _replace_span(source, m, "(" + ast.unparse(node) + ")")
    elif op == "negate_condition":
        node = _find(tree, m, (ast.expr,))
        new = _replace_span(source, m, "not (" + ast.unparse(node) + ")")
    elif op == "swap_arguments":
        node = _find(tree, m, (ast.Call,))
        assert isinstance(node, ast.Call)
        node.args[0], node.args[1] = node.args[1], node.args[0]
        new = _replace_span(source, m, ast.unparse(node))
    elif op == "remove_branch":
        node = _find(tree, m, (ast.If,))
        assert isinstance(node, ast.If)
        if m.variant == 0:
            new = _delete_lines(source, m.lineno, m.end_lineno, _parent_block(tree, node))
        else:
            lines = source.splitlines(keepends=True)
            else_line = node.orelse[0].lineno - 1
            if lines[else_line - 1].strip() != "else:":
                raise ValueError("the else keyword is not on its own line")
            new = "".join(lines[: else_line - 1] + lines[m.end_lineno:])
    elif op == "remove_call_statement":
        node = _find(tree, m, (ast.Expr,))
        new = _delete_lines(source, m.lineno, m.end_lineno, _parent_block(tree, node))
    else:
        raise ValueError(f"unknown mutation operator {op!r}; known: {OPERATORS}")
    if new == source:
        raise ValueError("the mutation changes nothing")
    try:
        ast.parse(new)
    except SyntaxError as exc:
        raise ValueError(f"the mutated source does not parse: {exc}") from exc
    if ast.dump(ast.parse(new)) == ast.dump(tree if op in ("remove_branch", "remove_call_statement") else ast.parse(source)):
        raise ValueError("the mutation does not change the program")
    return new
