"""Roman numerals both ways, with strict validation of the canonical form."""
from .numerals import InvalidRomanNumeral, Roman, from_roman, is_valid, to_roman

__all__ = ["InvalidRomanNumeral", "Roman", "from_roman", "is_valid", "to_roman"]
