"""The README's Python snippets run as written (a new user copies them first)."""

import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_blocks_run(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) >= 2
    monkeypatch.chdir(tmp_path)  # the quickstart writes a file
    namespace: dict = {}
    for block in blocks:
        exec(block, namespace)
    assert namespace["sk"].feature_map.num_features == 400
    assert (tmp_path / "release.sketch").exists()
