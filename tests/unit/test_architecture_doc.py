"""docs/architecture.md is generated from the package docstrings (clusterctl/documents/architecture.py)."""
from clusterctl.documents.architecture import DOC, ORDER, architecture_text


def test_docs_architecture_is_exactly_what_the_package_docstrings_generate():
    assert DOC.read_text(encoding="utf-8") == architecture_text(), (
        "docs/architecture.md is stale: run `python -m clusterctl.documents.architecture` (or `make docs`)")


def test_the_architecture_has_one_section_per_unit_in_story_order():
    text = architecture_text()
    headings = [line[4:] for line in text.splitlines() if line.startswith("### ")]
    names = [h.rstrip("/").removesuffix(".py").replace("clusterctl/__init__", "__init__") for h in headings]
    assert names == list(ORDER)
