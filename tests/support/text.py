"""Reading what ojai printed for a person: its steps and findings wrap at the terminal's width
(``$COLUMNS`` or 80 in a pipe) with a hanging indent, so a sentence is found in the text with
its line breaks and indents made single spaces."""


def flat(text: str) -> str:
    """``text`` with every run of white space (line breaks and indents included) one space."""
    return " ".join(text.split())


def step_text(output: str, name: str) -> str:
    """The whole of step ``name`` as the dry run shows it (its head line, the lines it wraps
    onto and its details and actions beneath), made one line by :func:`flat`: it starts with
    the step's status (``ok``, ``change``, ``BLOCKED``)."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        words = line.split()
        if line.startswith("  ") and not line.startswith("   ") and words[1:2] == [f"{name}:"]:
            block = [line]
            for more in lines[i + 1:]:
                if not more.startswith(" " * 10):
                    break
                block.append(more)
            return flat("\n".join(block))
    raise AssertionError(f"no step {name!r} in:\n{output}")
