"""Word wrapping, justification and indentation helpers."""
from .wrap import dedent, fill, indent, justify, shorten, wrap

__all__ = ["dedent", "fill", "indent", "justify", "shorten", "wrap"]
