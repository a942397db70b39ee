"""An INI reader/writer: sections, comments, a DEFAULT section, multi-line values and %(name)s interpolation."""
from .config import (DEFAULT_SECTION, DuplicateError, IniError, IniFile, InterpolationError, NoOptionError,
                     NoSectionError, ParsingError)

__all__ = ["DEFAULT_SECTION", "DuplicateError", "IniError", "IniFile", "InterpolationError", "NoOptionError",
           "NoSectionError", "ParsingError"]
