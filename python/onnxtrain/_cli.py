"""The `onnxtrain` console script of a pip-installed package: runs the C++ command-line tool that
the wheel carries in onnxtrain/bin (src/cli/), with the same arguments and exit status."""
import os
import sys


def main():
    binary = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "onnxtrain")
    if not os.access(binary, os.X_OK):
        sys.exit(f"onnxtrain: the command-line tool is not at {binary}: this copy of the package was not installed "
                 "by pip (in the source tree the tool is build/onnxtrain)")
    os.execv(binary, [binary, *sys.argv[1:]])
