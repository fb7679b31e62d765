"""tests/ad: its helper module `adcheck` is imported by name, however pytest imports the tests."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
