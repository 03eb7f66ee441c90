"""Results pages of the reproductions.

The Jinja2 templates under ``fedstats/experiments/templates`` and the number formats they use.
"""

from __future__ import annotations

import math
from typing import Any

from fedstats.errors import ParameterError

__all__ = ["fmt", "render", "sig"]


def fmt(x: Any, nd: int = 3) -> str:
    """Format a number for a page: ``-`` for missing, ``inf``/``nan`` spelled out."""
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return f"{x:.{nd}f}"
    return str(x)


def sig(x: Any, nd: int = 3) -> str:
    """Format a number with ``nd`` significant digits (``-`` for missing)."""
    if isinstance(x, float) and math.isfinite(x):
        return f"{x:.{nd}g}"
    return fmt(x, nd)


def render(template: str, **context: Any) -> str:
    """Render a page template from ``fedstats/experiments/templates``.

    Templates use Jinja2 with ``StrictUndefined`` (a missing value is an error, not an empty cell) and
    the filters ``fmt(nd)`` (fixed decimals) and ``sig(nd)`` (significant digits), which spell missing and
    non-finite values.

    Parameters
    ----------
    template : str
        File name under ``templates/`` (``"bit_pushing.md.j2"``).
    **context
        Template variables.

    Returns
    -------
    str
        The rendered text, ending with one newline.

    Raises
    ------
    ParameterError
        If the template does not exist.
    """
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("fedstats.experiments", "templates"),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["fmt"] = fmt
    env.filters["sig"] = sig
    try:
        tpl = env.get_template(template)
    except jinja2.TemplateNotFound:
        raise ParameterError(
            "template", template, "a template under fedstats/experiments/templates"
        ) from None
    return tpl.render(**context).rstrip("\n") + "\n"
