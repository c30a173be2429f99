"""Entry script of the frozen app: both executables (``captioner`` and ``captioner-cli``) start here.

It only hands over to :func:`captioner.__main__.main`, so the frozen app behaves like the installed
package's ``captioner`` / ``captioner-cli`` scripts (same arguments, folders and exit codes). That
includes the NPU's child processes (``captioner/engine/npu_probe.py``): the app starts its own
executable (``sys.executable``) with ``--npu-probe-child REQUEST``, which ``main`` hands to the probe
first; no ``multiprocessing``, so no ``freeze_support()`` is needed here.
"""

import sys

from captioner.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
