"""`python -m clusterctl.documents [DIR]`: write the JSON Schemas of every document (default docs/schemas)."""
import sys
from pathlib import Path

from clusterctl.documents import write_schemas

if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "docs" / "schemas"
    for path in write_schemas(target):
        print(path)
