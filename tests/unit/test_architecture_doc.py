"""docs/architecture.md is generated from the package docstrings (clusterctl/documents/architecture.py)."""
import pytest

from clusterctl.documents.architecture import DOC, ORDER, architecture_text


@pytest.fixture(scope="module")
def generated() -> str:
    """The text, generated once for both tests (it reads every module of the package)."""
    return architecture_text()


def test_docs_architecture_is_exactly_what_the_package_docstrings_generate(generated):
    assert DOC.read_text(encoding="utf-8") == generated, (
        "docs/architecture.md is stale: run `python -m clusterctl.documents.architecture` (or `make docs`)")


def test_the_architecture_has_one_section_per_unit_in_story_order(generated):
    headings = [line[4:] for line in generated.splitlines() if line.startswith("### ")]
    names = [h.rstrip("/").removesuffix(".py").replace("clusterctl/__init__", "__init__") for h in headings]
    assert names == list(ORDER)
