"""`cmake --install build --component python` (run by scripts/build.sh) installs the package as
real files into the directory Debian's /usr/bin/python3 searches without PYTHONPATH, and the
installed copy imports from anywhere; PYTHONPATH=build/python still comes first."""
import os
import subprocess

import pytest

import kiln

SOURCE_PACKAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python",
                              "kiln")
# kiln was imported from build/python/kiln (the ctest sets PYTHONPATH=build/python).
BUILD = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(kiln.__file__))))
CACHE = os.path.join(BUILD, "CMakeCache.txt")

pytestmark = pytest.mark.skipif(not os.path.isfile(CACHE),
                                reason=f"kiln was not imported from a build tree ({kiln.__file__})")


def cache_value(name):
    with open(CACHE) as cache:
        for line in cache:
            if line.startswith(name + ":"):
                return line.split("=", 1)[1].strip()
    raise AssertionError(f"{name} is not in {CACHE}")


def python_without_pythonpath(code, **env_changes):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(env_changes)
    run = subprocess.run(["/usr/bin/python3", "-c", code], cwd="/", env=env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


def test_the_default_install_dir_is_on_debians_default_python_path():
    install_dir = cache_value("KILN_PYTHON_INSTALL_DIR")
    if not os.path.isabs(install_dir):
        install_dir = os.path.join(cache_value("CMAKE_INSTALL_PREFIX"), install_dir)
    path = python_without_pythonpath("import sys; print('\\n'.join(sys.path))").splitlines()
    assert install_dir in path


def test_the_python_component_installs_real_files_that_import_from_anywhere(tmp_path):
    subprocess.run(["cmake", "--install", BUILD, "--component", "python", "--prefix", str(tmp_path)],
                   check=True, capture_output=True, timeout=120)
    site = tmp_path / cache_value("KILN_PYTHON_INSTALL_DIR")
    package = site / "kiln"
    sources = {os.path.relpath(os.path.join(d, f), SOURCE_PACKAGE)
               for d, _, files in os.walk(SOURCE_PACKAGE) for f in files if f.endswith(".py")}
    installed = {os.path.relpath(os.path.join(d, f), package)
                 for d, _, files in os.walk(package) for f in files}
    assert sources and sources <= installed
    assert [f for f in installed if f.startswith("_kiln.") and f.endswith(".so")]
    assert not [f for f in installed if os.path.islink(package / f)]
    # Only what is installed there: a stale module from an earlier install is removed.
    (package / "stale_module.py").write_text("")
    subprocess.run(["cmake", "--install", BUILD, "--component", "python", "--prefix", str(tmp_path)],
                   check=True, capture_output=True, timeout=120)
    assert not (package / "stale_module.py").exists()
    imported = python_without_pythonpath(
        "import kiln, kiln._kiln as k; print(kiln.__file__); print(k.__file__)",
        PYTHONPATH=str(site)).splitlines()
    assert imported[0] == str(package / "__init__.py")
    assert imported[1].startswith(str(package) + os.sep)


def test_pythonpath_to_the_build_tree_comes_before_an_installed_copy():
    imported = python_without_pythonpath(
        "import kiln; print(kiln.__file__)", PYTHONPATH=os.path.join(BUILD, "python"))
    assert imported == os.path.join(BUILD, "python", "kiln", "__init__.py")
