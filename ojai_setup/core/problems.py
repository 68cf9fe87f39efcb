"""A validation error in ojai's words: ``FILE: where: what is wrong``, never a library's text.

pydantic says ``1 validation error for State ... Input should be a valid integer [type=
int_parsing, ...] For further information visit https://errors.pydantic.dev/...``; a person
needs the field, what it must be, and how to go on (cargo and git name the file, the place and
the way out). :func:`problems` turns the error list of a ``ValidationError`` (its
``errors()``) into such phrases; the caller adds the file and the way out.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

#: what a value of each kind pydantic checks must be, in words
_MUST = {
    "int_type": "a whole number", "int_parsing": "a whole number", "int_from_float": "a whole number",
    "float_type": "a number", "float_parsing": "a number",
    "string_type": "text (in quotes)", "bool_type": "true or false", "bool_parsing": "true or false",
    "list_type": "a list", "tuple_type": "a list", "set_type": "a list",
    "dict_type": "a table of fields", "model_type": "a table of fields",
    "model_attributes_type": "a table of fields",
    "datetime_type": "a date and time (ISO 8601)", "datetime_parsing": "a date and time (ISO 8601)",
    "datetime_from_date_parsing": "a date and time (ISO 8601)",
}


def where(loc: Iterable[Any]) -> str:
    """A field's place as a dotted path (``routes.tiny.kv``, ``steps.3.actions.0``)."""
    return ".".join(str(part) for part in loc)


def problem(err: Mapping[str, Any]) -> str:
    """What is wrong with one value, in words (``must be a whole number``, ``is missing``)."""
    kind, ctx = err.get("type", ""), err.get("ctx") or {}
    if kind == "missing":
        return "is missing (it is required)"
    if kind == "extra_forbidden":
        return "is not a field ojai knows here (misspelt, or from another version)"
    if kind in _MUST:
        return f"must be {_MUST[kind]}"
    if kind in ("literal_error", "enum"):
        return f"must be one of {str(ctx.get('expected', 'the known values')).replace(chr(39), '')}"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        bound = next(iter(ctx.values()), "?")
        words = {"greater_than_equal": "at least", "greater_than": "more than",
                 "less_than_equal": "at most", "less_than": "less than"}[kind]
        return f"must be {words} {bound}"
    if kind in ("string_too_short", "too_short"):
        return "is empty" if ctx.get("min_length") == 1 else \
            f"must have at least {ctx.get('min_length')} items"
    if kind in ("string_too_long", "too_long"):
        return f"must have at most {ctx.get('max_length')} items"
    if kind == "union_tag_invalid":
        return (f"has {ctx.get('discriminator', 'a kind')} {ctx.get('tag')!r}, which is not "
                f"one of {ctx.get('expected_tags')}")
    if kind == "union_tag_not_found":
        return f"has no {ctx.get('discriminator', 'kind')} field"
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        return str(ctx["error"])  # ojai's own validators say it in its words already
    if kind == "json_invalid":
        return "is not valid JSON"
    return "has a value ojai cannot use here"


def problems(errors: Iterable[Mapping[str, Any]], *, prefix: str = "",
             limit: int = 3) -> str:
    """Every error as ``where: what`` (at most ``limit``, then how many more), ``; ``-joined;
    ``prefix`` goes before each place (``routes.tiny.``)."""
    errors = list(errors)
    said = []
    for err in errors[:limit]:
        place = (prefix + where(err.get("loc", ()))).rstrip(".")
        # ojai's own validators speak in sentences: after a colon; a field's kind after its name
        own = err.get("type") in ("value_error", "assertion_error")
        said.append(f"{place}{':' if own else ''} {problem(err)}" if place else problem(err))
    if len(errors) > limit:
        said.append(f"and {len(errors) - limit} more")
    return "; ".join(said)


def json_problem(exc: Any) -> str:
    """A ``json.JSONDecodeError`` in words: where the text stops being JSON."""
    return (f"is not valid JSON at line {exc.lineno}, column {exc.colno} (cut short, or "
            "edited by hand)")
