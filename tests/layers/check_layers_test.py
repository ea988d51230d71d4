#!/usr/bin/env python3
"""scripts/check_layers.py catches what it is there for: each case copies the library's folders
into a scratch tree, breaks one rule and expects exit status 1 naming the file; the untouched copy
passes. Usage: check_layers_test.py <repository root>."""
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = pathlib.Path(sys.argv.pop(1) if len(sys.argv) > 1 else ".").resolve()
SCRIPT = ROOT / "scripts" / "check_layers.py"


class CheckLayersTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = pathlib.Path(self.tmp.name)
        for folder in ("include", "src", "examples"):
            shutil.copytree(ROOT / folder, self.root / folder)
        shutil.copytree(ROOT / "scripts", self.root / "scripts")

    def tearDown(self):
        self.tmp.cleanup()

    def run_check(self):
        r = subprocess.run([sys.executable, str(self.root / "scripts" / "check_layers.py"),
                            str(self.root)], capture_output=True, text=True, timeout=60)
        return r.returncode, r.stdout

    def add_include(self, rel, include, after):
        """Adds `include` after the first line of `rel` that contains `after`."""
        path = self.root / rel
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        at = next(i for i, line in enumerate(lines) if after in line)
        lines.insert(at + 1, include + "\n")
        path.write_text("".join(lines), encoding="utf-8")

    def test_untouched_tree_passes(self):
        code, out = self.run_check()
        self.assertEqual(code, 0, out)
        self.assertIn("0 violation(s)", out)

    def test_charge_including_the_oom_killer_fails(self):
        self.add_include("include/memcg/core/charge/charge.hpp",
                         '#include "memcg/core/oom/oom.hpp"', "#pragma once")
        code, out = self.run_check()
        self.assertEqual(code, 1, out)
        self.assertIn("include/memcg/core/charge/charge.hpp", out)
        self.assertIn("core/charge includes <memcg/core/oom/oom.hpp> of core/oom", out)

    def test_private_header_across_concerns_up_the_order_fails(self):
        self.add_include("src/core/tree/controller_registry.cpp",
                         '#include "core/oom/oom_batch.hpp"', "#include")
        code, out = self.run_check()
        self.assertEqual(code, 1, out)
        self.assertIn("src/core/tree/controller_registry.cpp", out)

    def test_an_allowed_edge_is_allowed_for_its_target_only(self):
        # charge may include reclaim.hpp (allowed) but not vmpressure.hpp of the same concern.
        self.add_include("src/core/charge/limits.cpp",
                         '#include "memcg/core/reclaim/vmpressure.hpp"', "#include")
        code, out = self.run_check()
        self.assertEqual(code, 1, out)
        self.assertIn("src/core/charge/limits.cpp", out)

    def test_an_allowed_edge_nothing_takes_fails(self):
        path = self.root / "src/core/signal/psi.cpp"
        text = path.read_text(encoding="utf-8")
        self.assertIn('#include "memcg/core/charge/attach.hpp"\n', text)
        path.write_text(text.replace('#include "memcg/core/charge/attach.hpp"\n', ""),
                        encoding="utf-8")
        code, out = self.run_check()
        self.assertEqual(code, 1, out)
        self.assertIn("CORE_ALLOWED edge signal -> memcg/core/charge/attach.hpp is not used", out)

    def test_private_core_header_outside_core_fails(self):
        self.add_include("src/files/file.cpp", '#include "core/oom/oom_batch.hpp"', "#include")
        code, out = self.run_check()
        self.assertEqual(code, 1, out)
        self.assertIn("a private header of src/core", out)

    def test_core_file_outside_a_concern_folder_fails(self):
        (self.root / "src/core/stray.cpp").write_text("// nothing\n", encoding="utf-8")
        code, out = self.run_check()
        self.assertEqual(code, 1, out)
        self.assertIn("src/core/stray.cpp: a core file outside a concern folder", out)

    def test_lower_layer_including_core_still_fails(self):
        self.add_include("src/percpu/rstat.cpp", '#include "memcg/core/tree/group.hpp"',
                         "#include")
        code, out = self.run_check()
        self.assertEqual(code, 1, out)
        self.assertIn("layer 'percpu' includes <memcg/core/tree/group.hpp>", out)


if __name__ == "__main__":
    unittest.main()
