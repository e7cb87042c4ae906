"""Build hook for the optional compiled core (src/caldera/compiled.py).

Without CALDERA_COMPILE=1 this adds nothing: caldera installs as pure Python (pyproject.toml
holds the metadata). With it, mypyc compiles `caldera.core` and `caldera.model` into C
extension modules (one shared library, `caldera_core__mypyc`), and the digest of the sources
it compiled is written beside them so that a later edit is noticed at import. `make fast`
builds them in place: `CALDERA_COMPILE=1 python setup.py build_ext --inplace`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
PACKAGE = ROOT / "src" / "caldera"


class BuildCore(build_ext):
    """build_ext that stamps what it compiled once it has built it: a failed build leaves no
    stamp, so modules left from an earlier build are not taken for current."""

    built = ""  # the sources' digest, taken before mypyc read them (an edit during the build
    # then leaves a stamp that does not match, and the sources run)

    def run(self) -> None:
        from caldera.compiled import DIGEST_FILE

        built = self.built
        stamp = (PACKAGE if self.inplace else Path(self.build_lib) / "caldera") / DIGEST_FILE
        stamp.unlink(missing_ok=True)
        super().run()
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(built + "\n")


ext_modules = []
cmdclass = {}
if os.environ.get("CALDERA_COMPILE") == "1":
    from mypyc.build import mypycify

    sys.path.insert(0, str(ROOT / "src"))
    from caldera.compiled import compiled_sources, digest

    BuildCore.built = digest(PACKAGE)
    sources = [str(path.relative_to(ROOT)) for path in compiled_sources(PACKAGE)]
    ext_modules = mypycify(sources, opt_level="3", group_name="caldera_core")
    cmdclass = {"build_ext": BuildCore}

setup(ext_modules=ext_modules, cmdclass=cmdclass)
