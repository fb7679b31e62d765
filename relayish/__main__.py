"""`python -m relayish ...` runs the `relayish` command (relayish/cli.py)."""
import sys

from relayish.cli import main

if __name__ == "__main__":
    sys.exit(main())
