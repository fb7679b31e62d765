"""The `relayish` command."""
import sys

USAGE = """usage: relayish {run,check,fmt,grad,minimize} FILE ...
  (the command line is not implemented yet)"""


def main(argv=None):
    print(USAGE)
    return 2


if __name__ == "__main__":
    sys.exit(main())
