"""A small command-line argument parser: flags, options with values, positionals, defaults and --help."""
from .parser import ArgumentParser, HelpRequested, Namespace, ParseError

__all__ = ["ArgumentParser", "HelpRequested", "Namespace", "ParseError"]
