# SPDX-License-Identifier: Apache-2.0
"""The package's identity (issue 30 item 1): kiln.__version__, `kiln --version` and the
wheel's metadata give one number, CMakeLists.txt's; an installed package carries its licence."""

import importlib.metadata
import os
import re
import subprocess
import sys

import pytest

import kiln
from conftest import BUILD, REPO


def cmake_version():
    text = (REPO / "CMakeLists.txt").read_text()
    return re.search(r"project\(Kiln VERSION ([0-9.]+)", text).group(1)


def test_version_is_the_projects():
    assert kiln.__version__ == cmake_version()
    assert re.fullmatch(r"[0-9]+\.[0-9]+", kiln._kiln.__abi_version__)


def test_the_tool_says_the_same_version():
    installed = os.environ.get("KILN_TEST_INSTALLED") == "1"
    command = ([sys.executable, "-m", "kiln", "--version"] if installed
               else [str(BUILD / "bin" / "kiln"), "--version"])
    out = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[:2] == ["kiln", kiln.__version__]


@pytest.mark.skipif(os.environ.get("KILN_TEST_INSTALLED") != "1",
                    reason="the package metadata exists only for an installed wheel "
                           "(tools/dev.sh test installs one and sets KILN_TEST_INSTALLED=1)")
def test_installed_metadata_agrees_and_carries_the_licence():
    assert importlib.metadata.version("kiln-runtime") == kiln.__version__
    files = [str(f) for f in importlib.metadata.files("kiln-runtime")]
    assert any(f.endswith("LICENSE") for f in files), files
    assert any(f.endswith("NOTICE") for f in files), files
    meta = importlib.metadata.metadata("kiln-runtime")
    assert "Apache" in (meta.get("License") or "") + " ".join(meta.get_all("Classifier") or [])


def test_backends_lists_a_backend_that_was_not_built(tmp_path):
    """A plugin set naming a device backend the build lacks (no manifest anywhere: a wheel
    built without HIP has no rocm plugin) lists it in kiln.backends() with why."""
    plugin_set = tmp_path / "plugins.yaml"
    plugin_set.write_text(f"search_paths: [{BUILD / 'lib' / 'kiln' / 'plugins'}]\n"
                          "plugins: [cpu, package, vulkan]\n")
    code = ("import json, kiln; print(json.dumps([b for b in kiln.backends() "
            "if b['type_name'] == 'vulkan']))")
    env = dict(os.environ, KILN_PLUGIN_SET=str(plugin_set))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    import json

    (vulkan,) = json.loads(out.stdout.strip().splitlines()[-1])
    assert vulkan["devices"] == [] and vulkan["plugin"] == "vulkan"
    assert vulkan["why_none"].startswith("not built: listed in"), vulkan


@pytest.mark.skipif(os.environ.get("KILN_TEST_INSTALLED") != "1",
                    reason="the documentation is installed with the package, not in a build tree")
def test_the_docs_are_installed_with_the_package():
    docs = os.path.join(os.path.dirname(kiln.__file__), "share", "doc", "kiln")
    for name in ("python.md", "cli.md", "evaluator.md", "LICENSE", "NOTICE", "README.md"):
        assert os.path.isfile(os.path.join(docs, name)), (name, docs)
