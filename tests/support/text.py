"""Reading what ojai printed for a person: its steps and findings wrap at the terminal's width
(``$COLUMNS`` or 80 in a pipe) with a hanging indent, so a sentence is found in the text with
its line breaks and indents made single spaces."""


def flat(text: str) -> str:
    """``text`` with every run of white space (line breaks and indents included) one space."""
    return " ".join(text.split())
