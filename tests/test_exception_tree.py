"""The exception tree drawn in exosuit/exceptions.py's docstring is the real one: every
class drawn exists with the parent it is drawn under, and every exception class of the
module is drawn (CONTRIBUTING.md: errors are domain exceptions of that tree)."""

from __future__ import annotations

import inspect
import re

import pytest

from exosuit import exceptions

# One line of the drawing: the columns of its ancestors ("│   " or "    " each), its
# branch ("├── " or "└── "; none for the root), its class name, then words about it.
_LINE = re.compile(r"^(?P<columns>(?:│   |    )*)(?P<branch>[├└]── )?(?P<name>[A-Za-z]\w*)\b")


def drawn_tree(docstring: str) -> dict[str, str | None]:
    """Class name → the name it is drawn under (None: the root), from the first indented
    block of ``docstring``; a line of that block that is not a tree line fails."""
    lines = docstring.expandtabs().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("    ") and line.strip())
    block = []
    for line in lines[start:]:
        if not line.strip():
            break
        block.append(line[4:])
    parents: dict[str, str | None] = {}
    path: list[str] = []
    for line in block:
        match = _LINE.match(line)
        assert match, f"not a line of the tree: {line!r}"
        depth = len(match["columns"]) // 4 + (1 if match["branch"] else 0)
        assert depth <= len(path), f"drawn deeper than its parent: {line!r}"
        assert (depth == 0) == (not path), f"a second root, or none: {line!r}"
        name = match["name"]
        assert name not in parents, f"{name} is drawn twice"
        del path[depth:]
        parents[name] = path[-1] if path else None
        path.append(name)
    return parents


def real_tree() -> dict[str, str | None]:
    """Class name → its parent's name, for every exception class exosuit.exceptions
    defines (None: a parent from outside the module, the root's)."""
    defined = {
        name: cls
        for name, cls in vars(exceptions).items()
        if inspect.isclass(cls)
        and issubclass(cls, BaseException)
        and cls.__module__ == exceptions.__name__
    }
    tree: dict[str, str | None] = {}
    for name, cls in defined.items():
        ours = [base.__name__ for base in cls.__bases__ if base.__name__ in defined]
        assert len(ours) <= 1, f"{name} has several parents of the module: {ours}"
        tree[name] = ours[0] if ours else None
    return tree


SAMPLE = """Heading.

    Root
    ├── Left                 words
    │   ├── LeftOne
    │   └── LeftTwo          more words
    └── Right
        └── RightOne

After.
"""


def test_the_drawing_is_read_as_a_tree():
    assert drawn_tree(SAMPLE) == {
        "Root": None,
        "Left": "Root",
        "LeftOne": "Left",
        "LeftTwo": "Left",
        "Right": "Root",
        "RightOne": "Right",
    }


@pytest.mark.parametrize(
    ("drawing", "refusal"),
    [
        ("x\n\n    Root\n    ├── A\n    ├── ?\n", "not a line of the tree"),
        ("x\n\n    Root\n    │   ├── A\n", "drawn deeper than its parent"),
        ("x\n\n    Root\n    Other\n", "a second root"),
        ("x\n\n    Root\n    ├── A\n    └── A\n", "A is drawn twice"),
    ],
)
def test_a_drawing_that_is_no_tree_fails(drawing, refusal):
    with pytest.raises(AssertionError, match=refusal):
        drawn_tree(drawing)


def test_every_drawn_class_exists_under_the_parent_it_is_drawn_under():
    drawn, real = drawn_tree(exceptions.__doc__ or ""), real_tree()
    missing = sorted(set(drawn) - set(real))
    assert missing == [], f"drawn in exosuit/exceptions.py's docstring, not defined: {missing}"
    moved = {name: (parent, real[name]) for name, parent in drawn.items() if real[name] != parent}
    assert moved == {}, f"drawn under one parent (first), defined under another: {moved}"


def test_every_class_of_the_module_is_drawn():
    undrawn = sorted(set(real_tree()) - set(drawn_tree(exceptions.__doc__ or "")))
    assert undrawn == [], f"add them to exosuit/exceptions.py's drawing: {undrawn}"
