"""CLI subcommands, one module each (``register(subparsers)``); like ``cli`` they may import every layer."""
